"""The LevelManager of a single-env session: turns its protocol messages into episodes, transitions and replies.

As in Coach, the agent never talks to the environment: the LevelManager stands between them. Here the
environment is a remote client, so the LevelManager keeps that session's episode (in its `Lifecycle` of one
env) and forwards each message to the learner as ``begin_episode`` / ``step`` / ``end_episode``. The learner
answers with a future action.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from shepherd.agents import ActionFuture
from shepherd.agents.core import Kind, Request
from shepherd.level.base import Calls, Level, observations_of
from shepherd.level.episodes import MODES, EpisodeHost, Phase, answered
from shepherd.level.lifecycle import Announce, Lifecycle
from shepherd.wire import GreedyStep, StepInput


class LevelManager(Level):
    """One client session of one agent, driving one env.

    ``take_step`` (`step`) takes one protocol message (already checked against the spaces) and returns the
    learner's future action, or None when the episode ended (the reply is then ``{"action": null}``).
    """

    def __init__(self, actor_id: int, host: EpisodeHost, evaluate_only: bool = False) -> None:
        self.actor_id = actor_id
        self.host = host
        self.evaluate_only = evaluate_only
        self.lifecycle = Lifecycle(host, 1, evaluate_only, Announce.AT_END, trials=True)
        self.closed = False
        self.calls: Calls[int] = Calls()  # the last step's learner call awaiting an action (`resend`)

    @property
    def steps(self) -> int:
        return self.lifecycle.steps

    def login_fields(self) -> dict[str, Any]:
        return self.lifecycle.login_fields()

    def reply_fields(self) -> dict[str, Any]:
        return self.lifecycle.reply_fields()

    def observed_by(self, step: Any) -> list[tuple[Any, list[Any]]]:
        return [] if self.evaluate_only else [(self.host.learner, observations_of(step))]

    def take_step(self, step: StepInput) -> ActionFuture | None:
        episodes = self.lifecycle
        episodes.open_step()
        try:
            ask = self._ask(step)
        finally:
            episodes.close_step()
        self.calls.forget()  # (a step refused keeps the last one's call: the retry of that one may resend it)
        if ask is None:
            return None
        self.calls.add(0, ask)
        return self.calls.call(0)

    def record_greedy(self, step: GreedyStep) -> ActionFuture | None:
        assert self.evaluate_only, "a greedy step of a training session"
        return self.record(step.reward, step.done, step.action, step.version)

    def resend(self) -> ActionFuture:
        """Hand the last step's learner call over again, without counting the step anew, if its learner lost
        it (`LearnerUnavailable`: the learner's process died and was restarted from its checkpoint)."""
        assert 0 in self.calls, "resend before any step"
        return self.calls.call(0)

    def step(self, obs: Any, reward: float, done: bool, truncated: bool = False, mask: Any = None) -> ActionFuture | None:
        """`take_step` of a step given by its fields (a level driven by hand)."""
        return self.take_step(StepInput(obs, reward, done, truncated, mask=mask))

    def _ask(self, step: StepInput) -> Callable[[], ActionFuture] | None:
        """The learner call that answers this step (None: the episode ended): the step as the `Request` the
        learner takes (its only change of form after parsing)."""
        learner, actor, episodes = self.host.learner, self.actor_id, self.lifecycle
        if episodes.episodes[0] is None:
            if step.done:  # an episode that ended on its reset observation: nothing to learn or answer
                episodes.announce_again(0)
                return None
            episode = episodes.begin(0)
            request = Request(Kind.BEGIN, actor, step.obs, 0.0, False, MODES[episode.phase], mask=step.mask)
            if episode.trial is not None:
                return episode.trial.ask(request)
            return functools.partial(learner.ask, request)
        episode = episodes.count(0, step.reward)
        trial = episode.trial
        if step.done:
            request = Request(Kind.END, actor, step.obs, step.reward, step.truncated, MODES[episode.phase],
                              mask=step.mask)  # a time limit's: DQN's target bootstraps over its allowed actions
            if trial is not None:
                trial.end(request)
            else:
                learner.tell(request)
            episodes.end(0)
            return None
        request = Request(Kind.STEP, actor, step.obs, step.reward, False, MODES[episode.phase], mask=step.mask)
        if trial is not None:
            return trial.ask(request)
        return functools.partial(learner.ask, request)

    def record(self, reward: float, done: bool, action: Any, version: int) -> ActionFuture | None:
        """A greedy step of an evaluate-mode session that another process answered with ``action`` (a front
        end, from its snapshot of the policy that ``version`` names): counted and recorded as `step` would,
        without asking the learner; the future gives that action, or None when the episode ended."""
        assert self.evaluate_only, "only evaluate-mode sessions are answered elsewhere"
        episodes = self.lifecycle
        episodes.open_step()
        try:
            if episodes.episodes[0] is None:
                if done:
                    episodes.announce_again(0)
                    return None
                episodes.begin(0, Phase.DEPLOY)
            else:
                episodes.count(0, reward)
                if done:
                    episodes.end(0)
                    return None
        finally:
            episodes.close_step()
        self.calls.forget()
        self.calls.add(0, functools.partial(answered, action, version))
        return self.calls.call(0)

    def close(self) -> None:
        """End the session: an unfinished episode is abandoned, the learner closes its partial data."""
        if self.closed:
            return
        self.closed = True
        self.lifecycle.abandon([self.actor_id])
        self.host.learner.end_actor(self.actor_id)
