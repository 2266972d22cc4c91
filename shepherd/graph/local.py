"""Gymnasium envs driven in-process through a GraphManager, step for step as the HTTP edge drives it.

The graph is served exactly as the server serves it: created with a `Serving` whose ``deliver`` is the
running loop's ``call_soon_threadsafe`` (`serving_here`), sessions opened with `GraphManager.login`,
each step awaited with `GraphManager.step`, ended with `GraphManager.logout`. Observations and rewards are
turned into JSON values and checked with the functions the HTTP edge uses (`check_observation`), actions
come back through `action_to_json` and `action_from_json`, and episodes end with gymnasium's terminated
and truncated semantics as `shepherd.client.run_env` sends them::

    graph.create_graph(store, serving_here())
    returns = await drive(graph, apikey, gymnasium.make("CartPole-v1"), episodes=10)
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import gymnasium as gym

from shepherd.agents import AgentClosed
from shepherd.client import env_action_mask, to_json  # the JSON a client sends: the edge checks exactly that
from shepherd.client.loops import ApplyConfig, apply_config
from shepherd.graph.manager import GraphManager, Serving
from shepherd.graph.sessions import Acted, ActTimeout, Session, Unauthorized, check_mask
from shepherd.wire import StepInput
from shepherd.wire.steps import DEFAULT_MAX_REWARD
from shepherd.graph.validation import NOT_REACHED, Outcome, watch
from shepherd.wire.observations import check_observation
from shepherd.wire.spaces import SpaceError, action_from_json, action_to_json

logger = logging.getLogger(__name__)


def serving_here(act_timeout_seconds: float = 30.0, max_sessions_per_agent: int | None = None) -> Serving:
    """A `Serving` that delivers the learners' answers on the running event loop, as the server's does.

    Raises:
        RuntimeError: no event loop is running in this thread.
    """
    return Serving(deliver=asyncio.get_running_loop().call_soon_threadsafe,
                   act_timeout_seconds=act_timeout_seconds, max_sessions_per_agent=max_sessions_per_agent)


def make_step(observation_space: gym.Space, obs: Any, reward: float, terminated: bool, truncated: bool,
              seq: int | None = None, action_mask: Any = None, mask_space: gym.Space | None = None,
              max_reward: float = DEFAULT_MAX_REWARD) -> StepInput:
    """The step the HTTP edge makes of one gymnasium step, sent as `shepherd.client.run_env` sends it:
    ``done`` is terminated or truncated, and a time limit (bootstrapped) only when not also terminated;
    ``action_mask`` is checked as the edge checks it (`check_mask`, against the session's ``mask_space``), the
    reward against the session's ``max_reward``.

    Raises:
        SpaceError: the observation does not fit the space, the reward is not a finite number, or the mask
            is refused.
    """
    checked = check_observation(observation_space, to_json(obs))
    mask = None if action_mask is None else check_mask(to_json(action_mask), mask_space)
    try:
        return StepInput.of(checked, reward, terminated=bool(terminated), truncated=bool(truncated), seq=seq,
                            mask=mask, max_reward=max_reward)
    except ValueError as error:
        raise SpaceError(str(error)) from None


class LocalClient:
    """One in-process session of a graph, as `shepherd.client.Client` is one over HTTP; every step carries
    a sequence number and a step that timed out is sent again with the same one. Runs on the event loop
    the graph was created with."""

    def __init__(self, graph: GraphManager, apikey: str, evaluate: bool = False,
                 retry_seconds: float = 30.0, client: str | None = None) -> None:
        self.graph = graph
        self.apikey = apikey
        self.client = client  # an advised agent's client name
        self.evaluate = evaluate
        self.retry_seconds = retry_seconds
        self.session: Session | None = None
        self.seq = 0
        self.policy_version = 0  # of the last action received
        #: lessons (docs/lessons.md): the config the server announced for the next episode, as a client reads it
        self.next_episode_config: dict[str, Any] | None = None

    def login(self) -> Session:
        """Open a session (sequence numbers start again).

        Raises:
            Unauthorized, TooManySessions, AgentClosed, AgentFailed: as `GraphManager.login`.
        """
        self.session = self.graph.login(self.apikey, self.evaluate, client=self.client)
        self.seq = 0
        self.next_episode_config = self.session.level.login_fields().get("next_episode_config")
        return self.session

    async def login_retrying(self, retry_seconds: float) -> Session:
        """`login`, retried while the agent is restarting (``AgentClosed``) for up to ``retry_seconds``.

        Raises:
            Unauthorized, TooManySessions, AgentFailed: as `GraphManager.login`; AgentClosed after the wait.
        """
        deadline = time.monotonic() + retry_seconds
        while True:
            try:
                return self.login()
            except AgentClosed:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def step(self, obs: Any, reward: float, terminated: bool, truncated: bool = False,
                   action_mask: Any = None) -> Any:
        """Send one gymnasium step (with the env's action mask for ``obs``, if any); returns the action as
        JSON (what the server would answer), or None once the step ended the episode.

        Raises:
            SpaceError: the observation or reward would be refused by the edge (HTTP's 400).
            Unauthorized: no session, or it ended (log in again).
            ActTimeout: the learner did not answer within ``retry_seconds`` of retries.
            Conflict, AgentFailed, AgentClosed: as `Session.step`.
        """
        if self.session is None:
            raise Unauthorized("not logged in")
        self.seq += 1
        session = self.session
        step = make_step(session.observation_space, obs, reward, terminated, truncated, self.seq, action_mask,
                         session.mask_space, session.max_reward)
        acted = await self.send(step)
        self.policy_version = acted.policy_version
        if "next_episode_config" in acted.fields:  # the reply that ended an episode announces the next one's
            self.next_episode_config = acted.fields["next_episode_config"]
        return None if acted.action is None else action_to_json(self.session.action_space, acted.action)

    async def send(self, step: StepInput) -> Acted:
        """Send a checked step as it is (a retry repeats it with its ``seq``); returns the `Acted`.

        Raises:
            what `step` raises, except SpaceError.
        """
        if self.session is None:
            raise Unauthorized("not logged in")
        deadline = time.monotonic() + self.retry_seconds
        while True:
            session = self.graph.session(self.session.key)  # as the edge finds it: ended sessions are refused
            try:
                acted = await self.graph.step(session, step)
                break
            except ActTimeout:
                if time.monotonic() > deadline:
                    raise
                logger.debug("step %s timed out; sending it again", step.seq)
        await asyncio.sleep(0)  # an action answered at once must not let one driver starve the others
        return acted

    def logout(self) -> None:
        """End the session, if any: an unfinished episode is abandoned."""
        session, self.session = self.session, None
        if session is not None:
            try:
                self.graph.logout(session.key)
            except Unauthorized:
                pass  # expired or ended by a restart meanwhile


async def drive(graph: GraphManager, apikey: str, env: gym.Env, episodes: int | None = None,
                steps: int | None = None, evaluate: bool = False, seed: int | None = None,
                stop: asyncio.Event | None = None, retry_seconds: float = 60.0,
                client_name: str | None = None, apply: ApplyConfig | None = None) -> list[float]:
    """Drive a gymnasium env through the agent an API key belongs to, in-process; returns the returns of
    the episodes completed, in order.

    An agent with lessons announces each episode's config: it is applied before the env's reset, as
    `shepherd.client.run_env` applies it (`apply_config`, with ``apply`` if given).

    Stops after ``episodes`` episodes, after ``steps`` env steps (the episode then under way is abandoned),
    once ``stop`` is set, or when cancelled; with none of them it drives until cancelled. As
    `shepherd.client.run_env` does, a lost session (expired, or the agent restarted) is logged in again
    and the episode started over. ``seed`` seeds the env's first reset. ``client_name`` names the client
    of an advised agent. The session is logged out at the end.

    Raises:
        SpaceError: the env's observations or rewards do not fit the agent.
        Unauthorized: the API key is unknown or revoked.
        AgentFailed, AgentClosed, TooManySessions, ActTimeout, Conflict: as `LocalClient` raises them.
    """
    client = LocalClient(graph, apikey, evaluate, retry_seconds=retry_seconds, client=client_name)
    returns: list[float] = []
    taken = 0
    first_reset = True

    def stopped() -> bool:
        return (stop is not None and stop.is_set()) or (steps is not None and taken >= steps)

    try:
        while not stopped() and (episodes is None or len(returns) < episodes):
            if client.session is None:
                await graph.prepare_client(apikey, client_name)  # a new client's learner, built off the loop
                await client.login_retrying(retry_seconds)
            try:
                if client.next_episode_config is not None:
                    apply_config(env, client.next_episode_config, apply)
                obs, _ = env.reset(seed=seed if first_reset else None)
                first_reset = False
                action, total = await client.step(obs, 0.0, False, action_mask=env_action_mask(env)), 0.0
                while action is not None and not stopped():
                    obs, reward, terminated, truncated, _ = env.step(action_from_json(env.action_space, action))
                    taken += 1
                    total += float(reward)
                    ended = bool(terminated) or bool(truncated)
                    action = await client.step(obs, float(reward), bool(terminated), bool(truncated),
                                               None if ended else env_action_mask(env))
                if action is None:
                    returns.append(total)
            except Unauthorized as error:  # a refused key raises at the next login
                logger.info("session lost (%s); logging in again", error)
                client.session = None
    finally:
        client.logout()
    return returns


async def validate(graph: GraphManager, apikey: str | None = None, clients: int | None = None,
                   timeout_seconds: float | None = None) -> Outcome:
    """Run a preset's validation in-process: ``clients`` drivers (the validation's by default) on its env,
    until an evaluation of the validated agent decides the outcome (`watch`), a driver fails, or
    ``timeout_seconds`` (the validation's by default) pass. The graph must be created and served here.

    Without ``apikey`` a key is added for the run and revoked after it.

    Raises:
        ValueError: the graph has no validation block.
        RuntimeError: the graph was not created (`GraphManager.create_graph`).
        KeyError: the validation names an agent the graph does not serve.
    """
    validation = graph.validation
    if validation is None:
        raise ValueError(f"preset {graph.name or '(unnamed)'} has no validation block")
    store = graph.store
    if store is None:
        raise RuntimeError("create_graph must run before a validation")
    agent_id = graph.preset_agent_id(validation.agent or graph.agents[0].name)
    advised = graph.served.agents[agent_id].takes_client_names  # its drivers are named clients, local-0 ...
    key_id = None
    if apikey is None:
        apikey, record = store.add_api_key(agent_id, "local validation")
        key_id = record.id
    outcome, stop = Outcome(), asyncio.Event()
    listener = watch(graph, agent_id, outcome, stop)
    count = clients if clients is not None else validation.clients
    envs = [gym.make(validation.env_id, **validation.env_kwargs) for _ in range(count)]
    tasks = [asyncio.create_task(drive(graph, apikey, env, seed=index, stop=stop,
                                       client_name=f"local-{index}" if advised else None), name=f"validation-{index}")
             for index, env in enumerate(envs)]
    waiter = asyncio.create_task(stop.wait())
    started = time.monotonic()
    limit = validation.timeout_seconds if timeout_seconds is None else timeout_seconds
    try:
        done, _ = await asyncio.wait([waiter, *tasks], timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        if not outcome.decided:
            failed = [task for task in tasks if task in done and task.exception() is not None]
            if failed:
                error = failed[0].exception()
                outcome.code, outcome.reason = NOT_REACHED, f"a local client failed: {type(error).__name__}: {error}"
            elif any(task in done for task in tasks):
                outcome.code, outcome.reason = NOT_REACHED, "a local client stopped before the target was reached"
            else:
                outcome.code = NOT_REACHED
                outcome.reason = f"gave up after {time.monotonic() - started:.0f} s without reaching the target"
    finally:
        stop.set()
        for task in (*tasks, waiter):
            task.cancel()
        await asyncio.gather(*tasks, waiter, return_exceptions=True)
        graph.evaluation_listeners.remove(listener)
        for env in envs:
            env.close()
        if key_id is not None:
            store.revoke_api_key(key_id)
    return outcome
