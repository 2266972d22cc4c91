"""The one episode lifecycle every session shape holds: N envs' episodes (their phase, lesson config and trial),
begun, counted and ended with the agent, and what a reply says about episodes' configs.

A level of any shape (one env, N envs, acting at the client, a selector's) keeps its envs' episodes here and
adds only what its shape is: which learner calls a step makes, options, uploads. So a feature of episodes
(phases, lessons, trials, records) is written once, here, and every shape has it.

When an env's next config is announced depends on the shape's wire (docs/lessons.md): a single-env session
announces it in the reply that ends an episode (`Announce.AT_END`), a vector session in the reply to the step
its env's episode began in, since the env resets inside a later step (`Announce.AT_BEGIN`), and a
client-acting session once per block for every episode its env starts in that block (`Announce.PER_BLOCK`).

Several envs' configs go in a reply as a table (`ConfigTable`): each distinct config once in ``"configs"``, and
each env's entry an index into it, so that a reply grows with the configs drawn, not with the envs (a lesson of
constants draws one object, sent once however many envs a session has).
"""

from __future__ import annotations

import enum
from typing import Any, Sequence

from shepherd.level.episodes import Episode, EpisodeHost, Phase
from shepherd.lessons import EpisodeConfig


class Announce(enum.Enum):
    """When an env's next config is drawn and told to the client."""

    AT_END = "at end"  # in the reply that ends its episode (a single-env session)
    AT_BEGIN = "at begin"  # in the reply to the step its episode began in (a vector session)
    PER_BLOCK = "per block"  # once per block, for every episode that starts in it (a client-acting session)


class ConfigTable:
    """The configs of one reply: each distinct config (by identity: a lesson of constants draws one object)
    once, and each env's entry its index in ``configs`` (None: nothing to say for that env)."""

    def __init__(self) -> None:
        self.configs: list[Any] = []
        self._index: dict[int, int] = {}

    def ref(self, setup: EpisodeConfig | None) -> int | None:
        if setup is None:
            return None
        index = self._index.get(id(setup.config))
        if index is None:
            index = self._index[id(setup.config)] = len(self.configs)
            self.configs.append(setup.config)
        return index

    def refs(self, setups: Sequence[EpisodeConfig | None]) -> list[int | None]:
        return [self.ref(setup) for setup in setups]


class Lifecycle:
    """The episodes of one session's ``n_envs`` envs, on the agent ``host`` (its schedule, lessons, trials and
    records), and the reply fields that tell the client about their configs.

    ``trials``: whether a training episode may be a trial of another learner's policy (`EpisodeHost.begin_trial`)
    instead; the shape must then answer a TRIAL episode's steps with ``episode.trial``.
    """

    def __init__(self, host: EpisodeHost, n_envs: int, evaluate_only: bool = False,
                 announce: Announce = Announce.AT_BEGIN, trials: bool = False) -> None:
        self.host = host
        self.evaluate_only = evaluate_only
        self.announce = announce
        self.trials = trials and not evaluate_only
        self.episodes: list[Episode | None] = [None] * n_envs
        #: each env's config announced for its next episode (None: the agent has no lessons)
        self.pending: list[EpisodeConfig | None] = [host.next_config() for _ in range(n_envs)]
        self.lessons = any(setup is not None for setup in self.pending)
        self.steps = 0  # env steps counted in this session
        self._started: list[EpisodeConfig | None] = []  # the configs of the episodes begun in this step
        self._announced: list[EpisodeConfig | None] = []  # the configs announced in this step
        self._fields: dict[str, Any] = {}

    @property
    def n_envs(self) -> int:
        return len(self.episodes)

    # -- episodes --------------------------------------------------------------------------------------
    def phase(self) -> Phase:
        """The phase an episode would start in now, without starting one."""
        return Phase.DEPLOY if self.evaluate_only else self.host.current_phase()

    def begin(self, index: int, phase: Phase | None = None) -> Episode:
        """Env ``index``'s new episode, in ``phase`` or else the schedule's next (a trial's, when one is queued and
        this shape plays them), set up with the config announced for it. An episode still there is ended first,
        abandoned (one whose step a learner refused after the level began it: a selector's first choice), so that
        no episode is ever dropped unended (an evaluation episode would hold its period open for good)."""
        if self.episodes[index] is not None:
            self.end(index, completed=False)
        trial = None
        if phase is None:
            if self.evaluate_only:
                phase = Phase.DEPLOY
            else:
                trial = self.host.begin_trial() if self.trials else None
                phase = Phase.TRIAL if trial is not None else self.host.begin_episode()
        setup = self.pending[index]
        if setup is not None and self._started:
            self._started[index] = setup
        if self.announce is Announce.AT_BEGIN:
            self._draw(index)
        episode = self.episodes[index] = Episode(phase, trial=trial, setup=setup)
        return episode

    def count(self, index: int, reward: float) -> Episode:
        """One step of env ``index``'s episode (the reward for its last action), counted with the agent."""
        episode = self.episodes[index]
        assert episode is not None, "a step counted outside an episode"
        episode.count(reward, self.host)
        self.steps += 1
        return episode

    def end(self, index: int, completed: bool = True) -> Episode:
        """Env ``index``'s episode ended (``completed``: reached its end; else abandoned, not recorded)."""
        episode = self.episodes[index]
        assert episode is not None, "an end outside an episode"
        self.episodes[index] = None
        self.host.end_episode(episode, completed)
        if completed and self.announce is Announce.AT_END:
            self._draw(index)
        return episode

    def abandon(self, actors: Sequence[int] = ()) -> None:
        """End every unfinished episode as abandoned (a trial's tried learner forgets ``actors[index]``)."""
        for index, episode in enumerate(self.episodes):
            if episode is not None:
                if episode.trial is not None and actors:
                    episode.trial.abandon(actors[index])
                self.end(index, completed=False)

    def announce_again(self, index: int) -> None:
        """Env ``index``'s pending config is told again (an episode that ended on its reset observation)."""
        if self._announced:
            self._announced[index] = self.pending[index]

    def release_evaluations(self) -> int:
        """Hand every unfinished evaluation episode back to the agent's period (another episode takes its
        place) and let it go on as a deployment episode: greedy as before, not part of the evaluation.
        Returns how many were handed back."""
        released = 0
        for episode in self.episodes:
            if episode is not None and episode.phase is Phase.EVALUATE:
                self.host.end_episode(episode, completed=False)
                episode.phase = Phase.DEPLOY
                released += 1
        return released

    def new_block(self) -> None:
        """A client-acting session's next block: every env's config drawn anew."""
        for index in range(self.n_envs):
            self._draw(index)

    def _draw(self, index: int) -> None:
        self.pending[index] = setup = self.host.next_config()
        if self._announced:
            self._announced[index] = setup

    # -- the reply's fields ------------------------------------------------------------------------------
    def open_step(self) -> None:
        """A step begins: what it begins and announces is noted for its reply."""
        if self.lessons:
            self._started = [None] * self.n_envs
            self._announced = [None] * self.n_envs

    def close_step(self) -> dict[str, Any]:
        """The step's reply fields about configs (docs/lessons.md), kept for `reply_fields`."""
        self._fields = self._step_fields() if self.lessons else {}
        self._started, self._announced = [], []
        return self._fields

    def reply_fields(self) -> dict[str, Any]:
        """What the reply to the last step adds (`Level.reply_fields`)."""
        return self._fields

    def login_fields(self) -> dict[str, Any]:
        """What the login reply adds: each env's first config (`Level.login_fields`)."""
        if not self.lessons:
            return {}
        if self.announce is Announce.AT_END:
            setup = self.pending[0]
            return {} if setup is None else {"next_episode_config": setup.config}
        if self.announce is Announce.PER_BLOCK:
            return self.block_fields()
        table = ConfigTable()
        return {"next_episode_configs": table.refs(self.pending), "configs": table.configs}

    def block_fields(self) -> dict[str, Any]:
        """A client-acting block's configs: every env's, for every episode that starts in it, and their lesson."""
        if not self.lessons:
            return {}
        table = ConfigTable()
        lesson = next((setup.lesson for setup in self.pending if setup is not None), None)
        return {"next_episode_configs": table.refs(self.pending), "configs": table.configs, "lesson": lesson}

    def _step_fields(self) -> dict[str, Any]:
        if self.announce is Announce.AT_END:  # one env: its episode's config when it began, the next when it ended
            started, announced = self._started[0], self._announced[0]
            if started is not None:
                return {"episode_config": started.config, "lesson": started.lesson}
            if announced is not None:
                return {"next_episode_config": announced.config}
            return {}
        table = ConfigTable()
        return {"next_episode_configs": table.refs(self._announced), "episode_configs": table.refs(self._started),
                "configs": table.configs}
