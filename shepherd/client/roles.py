"""A session of an environment with roles (docs/protocol.md, "Environments with roles"), and loops driving a
PettingZoo environment through it, its API's two forms: AEC (one agent acts per step: ``agent_iter``, ``last``,
``step``) and parallel (every live agent each step). Duck-typed: PettingZoo itself is not imported. An
observation that is a dict with ``"observation"`` and ``"action_mask"`` (PettingZoo's classic games) is sent as
the observation and the role's action mask. A lost session (the server restarted, the session expired) is logged
in again as it was, and the episodes under way are started over, as the gymnasium drivers do."""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator, TypeVar

from shepherd.client.connection import _Connection, to_json
from shepherd.client.relogin import Losses, SessionLost, login_retrying, requested

logger = logging.getLogger(__name__)
T = TypeVar("T")


class RolesClient(_Connection):
    """One session of an environment with roles (its key logs in to every role). Not thread-safe."""

    def login(self, mode: str = "train", n_envs: int | None = None) -> dict[str, Any]:
        """Log in with the environment's key; returns the reply (``environment``, ``turns``, ``roles``). With
        ``n_envs``, a vector session of that many copies of the environment (`step_envs`)."""
        body = self._login_body(mode)
        if n_envs is not None:
            body["n_envs"] = n_envs
        self._logged = (mode, n_envs)
        return self._open(body)

    def login_again(self) -> None:
        """Log in as the last `login` did (its mode and copies): the session was lost. A server that went away,
        or asks for a wait, is retried for ``retry_seconds``."""
        mode, n_envs = getattr(self, "_logged", ("train", None))
        login_retrying(self, mode, self.retry_seconds, n_envs=n_envs)

    def step(self, obs: dict[str, Any], reward: dict[str, float] | None = None,
             terminated: dict[str, bool] | None = None, truncated: dict[str, bool] | None = None,
             action_mask: dict[str, Any] | None = None, outcome: dict[str, float] | None = None) -> dict[str, Any]:
        """One step by role; returns the actions of the roles in ``obs`` that still live, by role. Retried with
        its ``seq`` as `Client.step` is.

        Raises:
            ShepherdError: the server refused it (400 names the role and field).
        """
        payload: dict[str, Any] = {"session_key": self.session_key, "obs": to_json(obs)}
        for name, value in (("reward", reward), ("terminated", terminated), ("truncated", truncated),
                            ("action_mask", action_mask), ("outcome", outcome)):
            if value:
                payload[name] = to_json(value)
        reply = self._send_step(payload)
        self.opponents = reply.get("opponents", getattr(self, "opponents", None))
        if "next_episode_config" in reply:  # by role: the episode that ended; set the environment up with them
            self.next_episode_config = reply["next_episode_config"]
        if "episode_config" in reply:  # by role: the reply to an episode's first step
            self.episode_config, self.lesson = reply["episode_config"], reply.get("lesson")
        return reply["actions"]

    def step_envs(self, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One step of every copy of a vector session (`login` with ``n_envs``), in one request: each step a dict
        of `step`'s arguments (``obs``, and ``reward``, ``terminated``, ``truncated``, ``action_mask``,
        ``outcome`` where it has them); returns each copy's actions by role. Retried with its ``seq``."""
        envs = [{name: to_json(value) for name, value in step.items() if value or name == "obs"} for step in steps]
        reply = self._send_step({"session_key": self.session_key, "envs": envs})
        self.opponents_envs = [item.get("opponents") for item in reply["envs"]]
        return [item["actions"] for item in reply["envs"]]


def _split(obs: Any) -> tuple[Any, Any]:
    """A PettingZoo observation and its action mask (None: none)."""
    if isinstance(obs, dict) and "observation" in obs and "action_mask" in obs:
        return obs["observation"], obs["action_mask"]
    return obs, None


def run_aec(env: Any, client: RolesClient, episodes: int, seed: int | None = None) -> list[dict[str, float]]:
    """Play ``episodes`` episodes of a PettingZoo AEC env: each agent's turn one step of its role (its reward the
    cumulative reward since its last turn), an agent that ends sending its last observation once. Returns each
    episode's returns by role."""
    def episode(index: int) -> dict[str, float]:
        env.reset(seed=None if seed is None else seed + index)
        totals: dict[str, float] = {}
        for agent in env.agent_iter():
            step, ended = _aec_turn(env, agent, totals)
            actions = requested(lambda: client.step(**step))
            env.step(None if ended else actions[agent])
        return totals
    return _episodes(client, episodes, episode)


def _episodes(client: RolesClient, episodes: int, episode: Callable[[int], T]) -> list[T]:
    """``episode(index)`` played ``episodes`` times; one whose session was lost is logged in again and played
    again from its start."""
    returns: list[T] = []
    losses = Losses()
    while len(returns) < episodes:
        try:
            returns.append(episode(len(returns)))
            losses.ended()
        except SessionLost as error:
            losses.lost(error)
            client.login_again()
    return returns


def _aec_turn(env: Any, agent: str, totals: dict[str, float]) -> tuple[dict[str, Any], bool]:
    """The step of ``agent``'s turn in an AEC env (`RolesClient.step`'s arguments; its reward added to
    ``totals``), and whether the agent has ended (its last observation, answered with no action)."""
    obs, reward, terminated, truncated, _ = env.last()
    observation, mask = _split(obs)
    totals[agent] = totals.get(agent, 0.0) + float(reward)
    ended = bool(terminated or truncated)
    step: dict[str, Any] = {"obs": {agent: observation}, "reward": {agent: float(reward)}}
    if ended:
        step.update(terminated={agent: bool(terminated)}, truncated={agent: bool(truncated)})
    if mask is not None and not terminated:  # a truncated end's too: a value-based learner bootstraps over it
        step["action_mask"] = {agent: mask}
    return step, ended


def run_aec_envs(envs: list[Any], client: RolesClient, episodes: int, seed: int | None = None,
                 stop: Callable[[], bool] | None = None) -> list[dict[str, float]]:
    """Play copies of a PettingZoo AEC env as one vector session (`RolesClient.login` with ``n_envs`` =
    ``len(envs)``): each request one turn of every copy, as `run_aec` plays one; a copy whose episode ended
    begins its next one in the next request. Returns once ``episodes`` episodes ended (or ``stop()`` says so,
    checked before each request), each ended episode's returns by role, in the order they ended; the copies'
    unfinished episodes are left to the session's logout."""
    returns: list[dict[str, float]] = []
    begun, losses = 0, Losses()

    def begin(index: int) -> Iterator[str]:
        nonlocal begun
        envs[index].reset(seed=None if seed is None else seed + begun)
        begun += 1
        totals[index] = {}
        return iter(envs[index].agent_iter())

    totals: list[dict[str, float]] = [{} for _ in envs]
    turns = [begin(index) for index in range(len(envs))]
    while len(returns) < episodes and not (stop is not None and stop()):
        agents, steps, ends = [], [], []
        for index, env in enumerate(envs):
            agent = next(turns[index], None)
            if agent is None:  # every agent of the copy ended: its next episode
                returns.append(totals[index])
                losses.ended()
                turns[index] = begin(index)
                agent = next(turns[index])
            step, ended = _aec_turn(env, agent, totals[index])
            agents.append(agent)
            steps.append(step)
            ends.append(ended)
        if len(returns) >= episodes:
            break
        try:
            replies = requested(lambda: client.step_envs(steps))
        except SessionLost as error:
            losses.lost(error, "every copy's episode starts over")
            client.login_again()
            turns = [begin(index) for index in range(len(envs))]
            continue
        for env, agent, ended, actions in zip(envs, agents, ends, replies):
            env.step(None if ended else actions[agent])
    return returns[:episodes]


def run_parallel(env: Any, client: RolesClient, episodes: int, seed: int | None = None) -> list[dict[str, float]]:
    """Play ``episodes`` episodes of a PettingZoo parallel env: every live agent in each step; the agents that
    ended send their last observations once, in the next step. Returns each episode's returns by role."""
    copy = _ParallelCopy(env)

    def episode(index: int) -> dict[str, float]:
        copy.begin(None if seed is None else seed + index)
        while copy.observations:
            actions = requested(lambda: client.step(**copy.step()))
            if not actions:  # every agent ended: the episode is over
                break
            copy.act(actions)
        return copy.totals
    return _episodes(client, episodes, episode)


class _ParallelCopy:
    """One copy of a parallel env in `run_parallel_envs`: its episode's observations, the rewards and ends to
    send with them, and the returns so far."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.observations: dict[str, Any] = {}
        self.rewards: dict[str, float] = {}
        self.ends: dict[str, tuple[bool, bool]] = {}
        self.totals: dict[str, float] = {}

    def begin(self, seed: int | None) -> None:
        self.observations, _ = self.env.reset(seed=seed)
        self.rewards, self.ends, self.totals = {}, {}, {}

    def step(self) -> dict[str, Any]:
        """The step of every live agent (and of those that just ended: their last observations), as
        `RolesClient.step`'s arguments."""
        parts = {agent: _split(obs) for agent, obs in self.observations.items()}
        return {"obs": {agent: observation for agent, (observation, _) in parts.items()}, "reward": self.rewards,
                "terminated": {agent: flags[0] for agent, flags in self.ends.items()},
                "truncated": {agent: flags[1] for agent, flags in self.ends.items()},
                "action_mask": {agent: mask for agent, (_, mask) in parts.items()
                                if mask is not None and not self.ends.get(agent, (False, False))[0]}}

    def act(self, actions: dict[str, Any]) -> None:
        self.observations, step_rewards, terminations, truncations, _ = self.env.step(actions)
        self.rewards = {agent: float(value) for agent, value in step_rewards.items()}
        for agent, value in self.rewards.items():
            self.totals[agent] = self.totals.get(agent, 0.0) + value
        self.ends = {agent: (bool(terminations.get(agent)), bool(truncations.get(agent)))
                     for agent in self.observations if terminations.get(agent) or truncations.get(agent)}


def run_parallel_envs(envs: list[Any], client: RolesClient, episodes: int, seed: int | None = None,
                      stop: Callable[[], bool] | None = None) -> list[dict[str, float]]:
    """Play copies of a PettingZoo parallel env as one vector session (`RolesClient.login` with ``n_envs`` =
    ``len(envs)``), as `run_aec_envs` plays AEC ones: each request one step of every copy; returns once
    ``episodes`` episodes ended (or ``stop()`` says so), their returns by role in the order they ended."""
    copies = [_ParallelCopy(env) for env in envs]
    begun, returns, losses = 0, [], Losses()  # type: int, list[dict[str, float]], Losses
    for copy in copies:
        copy.begin(None if seed is None else seed + begun)
        begun += 1
    while len(returns) < episodes and not (stop is not None and stop()):
        try:
            replies = requested(lambda: client.step_envs([copy.step() for copy in copies]))
        except SessionLost as error:
            losses.lost(error, "every copy's episode starts over")
            client.login_again()
            for copy in copies:
                copy.begin(None if seed is None else seed + begun)
                begun += 1
            continue
        for copy, actions in zip(copies, replies):
            if actions:
                copy.act(actions)
                if copy.observations:
                    continue
            returns.append(copy.totals)  # every agent of the copy ended (or the env says none is left): its next
            losses.ended()
            copy.begin(None if seed is None else seed + begun)
            begun += 1
    return returns[:episodes]
