"""The LevelManager of a single-env session: turns its protocol messages into episodes, transitions and replies.

As in Coach, the agent never talks to the environment: the LevelManager stands between them. Here the
environment is a remote client, so the LevelManager keeps that session's episode state (phase, running
return, length) and forwards each message to the learner as ``begin_episode`` / ``step`` /
``end_episode``. The learner answers with a future action.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from shepherd.agents import ActionFuture
from shepherd.level.base import Level
from shepherd.level.episodes import MODES, Episode, EpisodeHost, Phase, Trial, answered
from shepherd.lessons import EpisodeConfig
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
        self.episode: Episode | None = None
        self.steps = 0
        self.closed = False
        self._asked: Callable[[], ActionFuture] | None = None  # the last learner call awaiting an action (`resend`)
        #: the config announced for the next episode (the login reply's, or the one that ended the last)
        self.pending: EpisodeConfig | None = host.next_config()
        self._fields: dict[str, Any] = {}

    def login_fields(self) -> dict[str, Any]:
        return {} if self.pending is None else {"next_episode_config": self.pending.config}

    def reply_fields(self) -> dict[str, Any]:
        return self._fields

    def _begin(self, phase: Phase, trial: Trial | None = None) -> Episode:
        """A new episode, set up with the config announced for it (its first reply repeats it)."""
        setup = self.pending
        self._fields = {} if setup is None else {"episode_config": setup.config, "lesson": setup.lesson}
        return Episode(phase, trial=trial, setup=setup)

    def _ended(self, episode: Episode | None) -> None:
        """An episode ended (None: on its reset observation): the next one's config is drawn and announced."""
        if episode is not None:
            self.pending = self.host.next_config()
        self._fields = self.login_fields()

    def take_step(self, step: StepInput) -> ActionFuture | None:
        return self.step(step.obs, step.reward, step.done, step.truncated, step.mask)

    def record_greedy(self, step: GreedyStep) -> ActionFuture | None:
        assert self.evaluate_only, "a greedy step of a training session"
        return self.record(step.reward, step.done, step.action, step.version)

    def resend(self) -> ActionFuture:
        """Hand the last step's learner call over again, without counting the step anew: its learner lost
        it (`LearnerUnavailable`: the learner's process died and was restarted from its checkpoint)."""
        assert self._asked is not None, "resend before any step"
        return self._asked()

    def step(self, obs: Any, reward: float, done: bool, truncated: bool = False, mask: Any = None) -> ActionFuture | None:
        learner = self.host.learner
        episode = self.episode
        if episode is None:
            if done:  # an episode that ended on its reset observation: nothing to learn or answer
                self._ended(None)
                return None
            trial = None if self.evaluate_only else self.host.begin_trial()
            if trial is not None:
                self.episode = self._begin(Phase.TRIAL, trial)
                self._asked = trial.ask(self.actor_id, 0.0, obs, mask)
                return self._asked()
            phase = Phase.DEPLOY if self.evaluate_only else self.host.begin_episode()
            self.episode = self._begin(phase)
            self._asked = functools.partial(learner.begin_episode, self.actor_id, obs, MODES[phase], mask)
            return self._asked()
        episode.count(reward, self.host)
        self.steps += 1
        self._fields = {}
        mode = MODES[episode.phase]
        trial = episode.trial
        if done:
            if trial is not None:
                trial.end(self.actor_id, reward, obs, truncated)
            else:
                learner.end_episode(self.actor_id, reward, obs, truncated, mode)
            self.episode = None
            self.host.end_episode(episode, completed=True)
            self._ended(episode)
            return None
        if trial is not None:
            self._asked = trial.ask(self.actor_id, reward, obs, mask)
        else:
            self._asked = functools.partial(learner.step, self.actor_id, reward, obs, mode, mask)
        return self._asked()

    def record(self, reward: float, done: bool, action: Any, version: int) -> ActionFuture | None:
        """A greedy step of an evaluate-mode session that another process answered with ``action`` (a front
        end, from its snapshot of the policy that ``version`` names): counted and recorded as `step` would,
        without asking the learner; the future gives that action, or None when the episode ended."""
        assert self.evaluate_only, "only evaluate-mode sessions are answered elsewhere"
        episode = self.episode
        if episode is None:
            if done:
                self._ended(None)
                return None
            self.episode = self._begin(Phase.DEPLOY)
        else:
            episode.count(reward, self.host)
            self.steps += 1
            self._fields = {}
            if done:
                self.episode = None
                self.host.end_episode(episode, completed=True)
                self._ended(episode)
                return None
        self._asked = functools.partial(answered, action, version)
        return self._asked()

    def close(self) -> None:
        """End the session: an unfinished episode is abandoned, the learner closes its partial data."""
        if self.closed:
            return
        self.closed = True
        episode = self.episode
        if episode is not None:
            if episode.trial is not None:
                episode.trial.abandon(self.actor_id)
            self.host.end_episode(episode, completed=False)
            self.episode = None
        self.host.learner.end_actor(self.actor_id)
