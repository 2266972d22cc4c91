"""A session of an environment with roles (docs/protocol.md, "Environments with roles"), and loops driving a
PettingZoo environment through it, its API's two forms: AEC (one agent acts per step: ``agent_iter``, ``last``,
``step``) and parallel (every live agent each step). Duck-typed: PettingZoo itself is not imported. An
observation that is a dict with ``"observation"`` and ``"action_mask"`` (PettingZoo's classic games) is sent as
the observation and the role's action mask."""

from __future__ import annotations

from typing import Any

from shepherd.client.connection import _Connection, to_json


class RolesClient(_Connection):
    """One session of an environment with roles (its key logs in to every role). Not thread-safe."""

    def login(self, mode: str = "train") -> dict[str, Any]:
        """Log in with the environment's key; returns the reply (``environment``, ``turns``, ``roles``)."""
        return self._open(self._login_body(mode))

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


def _split(obs: Any) -> tuple[Any, Any]:
    """A PettingZoo observation and its action mask (None: none)."""
    if isinstance(obs, dict) and "observation" in obs and "action_mask" in obs:
        return obs["observation"], obs["action_mask"]
    return obs, None


def run_aec(env: Any, client: RolesClient, episodes: int, seed: int | None = None) -> list[dict[str, float]]:
    """Play ``episodes`` episodes of a PettingZoo AEC env: each agent's turn one step of its role (its reward the
    cumulative reward since its last turn), an agent that ends sending its last observation once. Returns each
    episode's returns by role."""
    returns = []
    for episode in range(episodes):
        env.reset(seed=None if seed is None else seed + episode)
        totals: dict[str, float] = {}
        for agent in env.agent_iter():
            obs, reward, terminated, truncated, _ = env.last()
            observation, mask = _split(obs)
            totals[agent] = totals.get(agent, 0.0) + float(reward)
            ended = bool(terminated or truncated)
            actions = client.step({agent: observation}, {agent: float(reward)},
                                  {agent: bool(terminated)} if ended else None,
                                  {agent: bool(truncated)} if ended else None,
                                  None if mask is None or ended else {agent: mask})
            env.step(None if ended else actions[agent])
        returns.append(totals)
    return returns


def run_parallel(env: Any, client: RolesClient, episodes: int, seed: int | None = None) -> list[dict[str, float]]:
    """Play ``episodes`` episodes of a PettingZoo parallel env: every live agent in each step; the agents that
    ended send their last observations once, in the next step. Returns each episode's returns by role."""
    returns = []
    for episode in range(episodes):
        observations, _ = env.reset(seed=None if seed is None else seed + episode)
        rewards: dict[str, float] = {}
        ends: dict[str, tuple[bool, bool]] = {}
        totals: dict[str, float] = {}
        while observations:
            parts = {agent: _split(obs) for agent, obs in observations.items()}
            masks = {agent: mask for agent, (_, mask) in parts.items() if mask is not None and agent not in ends}
            actions = client.step({agent: observation for agent, (observation, _) in parts.items()}, rewards,
                                  {agent: flags[0] for agent, flags in ends.items()},
                                  {agent: flags[1] for agent, flags in ends.items()}, masks)
            if not actions:  # every agent ended: the episode is over
                break
            observations, step_rewards, terminations, truncations, _ = env.step(actions)
            rewards = {agent: float(value) for agent, value in step_rewards.items()}
            for agent, value in rewards.items():
                totals[agent] = totals.get(agent, 0.0) + value
            ends = {agent: (bool(terminations.get(agent)), bool(truncations.get(agent))) for agent in observations
                    if terminations.get(agent) or truncations.get(agent)}
        returns.append(totals)
    return returns
