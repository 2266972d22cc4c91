"""The VectorLevel of a vector session: N environments stepped together, with SB3 ``VecEnv``'s automatic reset.

It keeps N episodes (its `Lifecycle`), each env an actor of the learner, and hands every env's messages of one
step to the learner as one unit (``Learner.submit``). An env in a trial episode (an advised agent's client
trying another client's policy) is answered by the tried learner instead, and the step's reply waits for both.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from shepherd.agents import ActionFuture, Kind, Request
from shepherd.level.base import Calls, Level, consulting, observations_of, submitting
from shepherd.level.episodes import MODES, EpisodeHost, Phase, answered
from shepherd.level.lifecycle import Announce, Lifecycle
from shepherd.wire import EnvSteps, GreedyVectorStep, VectorStepInput


#: the key of the session's own learner's call among a step's `Calls` (the others: envs in trial episodes)
OWN = -1


class VectorLevel(Level):
    """One vector session of one agent: N environments stepped together, each an actor of the learner.

    ``take_vector_step`` (`step`) takes the N envs' parts of one step (checked against the spaces) and returns the future of the
    N actions, ``actions[i]`` answering ``obs[i]``. An env's first step, and an end reported before any step of its
    episode (the session's first call), start an episode: its reward and final observation are ignored.
    """

    def __init__(self, first_actor_id: int, n_envs: int, host: EpisodeHost, evaluate_only: bool = False) -> None:
        self.actor_ids = range(first_actor_id, first_actor_id + n_envs)
        self.group = first_actor_id  # names the session to the learner: its envs never wait on each other
        self.host = host
        self.evaluate_only = evaluate_only
        self.lifecycle = Lifecycle(host, n_envs, evaluate_only, Announce.AT_BEGIN, trials=True)
        self.closed = False
        #: the last step's learner calls (`resend`): the session's learner's (`OWN`), and by env those of the
        #: envs in trial episodes to their tried learners
        self.calls: Calls[int] = Calls()
        self._acting: list[int] = []  # the envs the session's learner's call asks actions for, in order
        self._chain: asyncio.Task[None] | None = None

    @property
    def steps(self) -> int:
        return self.lifecycle.steps

    def login_fields(self) -> dict[str, Any]:
        return self.lifecycle.login_fields()

    def reply_fields(self) -> dict[str, Any]:
        return self.lifecycle.reply_fields()

    def resend(self) -> ActionFuture:
        """The last step's actions: asked again, without counting the step anew, of the learner that lost them
        (`LearnerUnavailable`: its process died and was restarted from its checkpoint): the session's own learner
        is handed its requests again, an env in a trial episode its tried learner's call; what was answered is
        not asked twice (a transition stored twice)."""
        tried = self.calls.made()
        own = tried.pop(OWN)
        return own if not tried else self._merge(own, tried, self._acting)

    @property
    def n_envs(self) -> int:
        return len(self.actor_ids)

    def observed_by(self, step: Any) -> list[tuple[Any, list[Any]]]:
        return [] if self.evaluate_only else [(self.host.learner, observations_of(step))]

    def take_vector_step(self, step: VectorStepInput) -> ActionFuture:
        if step.n_envs != self.n_envs:
            raise self.wrong_shape(step.n_envs)
        return self.step(step.envs)

    def record_greedy_vector(self, step: GreedyVectorStep) -> ActionFuture:
        if step.n_envs != self.n_envs:
            raise self.wrong_shape(step.n_envs)
        assert self.evaluate_only, "a greedy step of a training session"
        return self.record(step.reward, step.ended, step.actions, step.version)

    def step(self, envs: EnvSteps) -> ActionFuture:
        """The learner's future of every env's action, a list in env order."""
        if len(envs.obs) != self.n_envs:
            raise ValueError(f"a step of this session has {self.n_envs} envs, not {len(envs.obs)}")
        lifecycle, group = self.lifecycle, self.group
        masks = envs.masks or [None] * self.n_envs
        requests: list[Request] = []
        trials: dict[int, Callable[[], ActionFuture]] = {}  # the envs in trial episodes: their tried learner's calls
        lifecycle.open_step()
        try:
            for index, actor in enumerate(self.actor_ids):
                episode = lifecycle.episodes[index]
                if episode is not None:
                    reward = envs.reward[index]
                    lifecycle.count(index, reward)
                    mode, trial = MODES[episode.phase], episode.trial
                    if not envs.ended[index]:
                        request = Request(Kind.STEP, actor, envs.obs[index], reward, False, mode, group=group,
                                          mask=masks[index])
                        if trial is not None:
                            trials[index] = trial.ask(request)
                        else:
                            requests.append(request)
                        continue
                    request = Request(Kind.END, actor, envs.final_obs[index], reward, envs.truncated[index], mode,
                                      group=group)
                    if trial is not None:
                        trial.end(request)
                    else:
                        requests.append(request)
                    lifecycle.end(index)
                episode = lifecycle.begin(index)
                request = Request(Kind.BEGIN, actor, envs.obs[index], 0.0, False, MODES[episode.phase], group=group,
                                  mask=masks[index])
                if episode.trial is not None:
                    trials[index] = episode.trial.ask(request)
                    continue
                requests.append(request)
        finally:
            lifecycle.close_step()
        # the envs the learner answers, in order, read before it takes the requests (it may rewrite their kinds)
        self._acting = [r.actor - self.group for r in requests if r.kind in (Kind.BEGIN, Kind.STEP)]
        self.calls.forget()
        for index, ask in trials.items():
            self.calls.add(index, ask)
        self.calls.add(OWN, submitting(self.host.learner, requests))
        return self.resend()

    def _merge(self, own: ActionFuture, tried: dict[int, ActionFuture], acting: list[int]) -> ActionFuture:
        """One reply of the learner's actions (for the envs ``acting``, in order) and the trials' (by env)."""
        async def merge() -> tuple[list[Any], int]:
            actions: list[Any] = [None] * self.n_envs
            for index, action in zip(acting, list(await own)):
                actions[index] = action
            for index, future in tried.items():
                actions[index] = await future
            return actions, getattr(own, "policy_version", 0)
        reply, self._chain = consulting(merge())
        return reply

    def record(self, rewards: list[float], ended: list[bool], actions: list[Any], version: int) -> ActionFuture:
        """A greedy step of an evaluate-mode vector session that another process answered with ``actions``
        (a front end, from its snapshot of the policy that ``version`` names): counted and recorded as `step`
        would, without asking the learner; the future gives those actions."""
        assert self.evaluate_only, "only evaluate-mode sessions are answered elsewhere"
        lifecycle = self.lifecycle
        lifecycle.open_step()
        try:
            for index, episode in enumerate(lifecycle.episodes):
                if episode is not None:
                    lifecycle.count(index, rewards[index])
                    if not ended[index]:
                        continue
                    lifecycle.end(index)
                lifecycle.begin(index, Phase.DEPLOY)
        finally:
            lifecycle.close_step()
        return answered(actions, version)

    def close(self) -> None:
        """End the session: unfinished episodes are abandoned, the learner closes their partial data."""
        if self.closed:
            return
        self.closed = True
        self.lifecycle.abandon(self.actor_ids)
        self.host.learner.submit([Request(Kind.DROP, actor) for actor in self.actor_ids])
