"""The level of a client-acting session: its policy runs where its N envs are, and it uploads experience in blocks.

The client fetches its behaviour policy as an ONNX file (`policy`), acts with it for ``steps`` steps of every
env, and uploads them (`take_upload`, one learner call per upload). The level decides the phase of each
block: heatup and training blocks are learned from; evaluation and deployment blocks act greedily and are
only recorded. Episodes are kept per env across blocks and recorded with their returns, as a vector session's
are; a block the learner refuses records nothing, and the episodes that ran through it are not recorded.

An agent with lessons (docs/lessons.md) gives each env one config per block: the login reply's and each upload
reply's ``next_episode_configs`` (one per env) and ``lesson`` are what every episode that starts in that env
during the next block uses (the first block's include the envs' first resets); each episode is recorded with
the config of the block it started in.
"""

from __future__ import annotations

import asyncio
import functools
import operator
from typing import Any, Protocol

import numpy as np

from shepherd.agents import ExperienceLearner, ExperienceReply, NotClientActing, StalePolicy
from shepherd.level.base import Level, Reply, WrongShape
from shepherd.level.episodes import Episode, EpisodeHost, Phase
from shepherd.level.lifecycle import Announce, Lifecycle
from shepherd.wire import StepInput, VectorStepInput
from shepherd.wire.experience import Experience, ExperienceSpaces, parse_experience

#: the steps of every env a block of an evaluate-only session holds (no learner asks for a number)
GREEDY_STEPS = 64
#: the blocks whose experience the learner learns from
LEARNED = (Phase.HEATUP, Phase.TRAIN)


class ActingHost(EpisodeHost, Protocol):
    """What a client-acting session needs of its agent besides episodes: the behaviour policy file."""

    async def behaviour(self, phase: Phase, timeout: float) -> tuple[int, bytes]:
        """The behaviour file of ``phase`` at the learner's current version, and that version.

        Raises: NotActableAtClient; TimeoutError after ``timeout`` seconds."""
        ...


class ClientActingLevel(Level):
    """One client-acting session of one agent, of ``n_envs`` envs, known to the learner as ``uploader``."""

    snapshots = False  # its steps never reach a front end: it uploads

    def __init__(self, uploader: int, n_envs: int, host: ActingHost, evaluate_only: bool = False) -> None:
        self.uploader = uploader
        self._last_upload: Experience | None = None  # (the session keeps it too, as its last step: no copy)
        self._n_envs = n_envs
        self.host = host
        self.evaluate_only = evaluate_only
        #: its envs' episodes (None: begun unseen, after a refused block) and each env's config for the episodes
        #: that start during the next block
        self.lifecycle = Lifecycle(host, n_envs, evaluate_only, Announce.PER_BLOCK)
        self.phase = Phase.DEPLOY
        self.served_phase: Phase | None = None  # the phase of the last policy file sent (a 304 needs the same)
        self.upload_phase: Phase | None = None  # the phase of the block the last upload was drawn in
        self.policy_version = 0
        self.steps = GREEDY_STEPS
        self.closed = False
        self._opening: asyncio.Future[Any] | None = None

    @property
    def n_envs(self) -> int:
        return self._n_envs

    def wrong_shape(self, envs: int | None) -> WrongShape:
        if envs is None or isinstance(envs, int) and envs != self._n_envs:
            return WrongShape(f"this session acts at the client with {self._n_envs} env(s): upload its experience "
                              "to /shepherd/experience/ (log in without \"acting\": \"client\" to send steps)")
        return super().wrong_shape(envs)

    def take_step(self, step: StepInput) -> Reply[Any] | None:
        raise self.wrong_shape(None)

    def take_vector_step(self, step: VectorStepInput) -> Reply[Any]:
        raise self.wrong_shape(None)

    def parse_step(self, data: dict[str, Any], checks: ExperienceSpaces) -> StepInput | VectorStepInput | None:
        raise self.wrong_shape(None)  # before the body is checked: the refusal says where its uploads go

    def upload_steps(self) -> int:
        return self.steps * self._n_envs  # T x N

    def parse_upload(self, data: dict[str, Any], checks: ExperienceSpaces) -> Experience:
        """An upload of the block the last reply planned (T = ``steps``), or a retry of the last upload (its
        reply lost, or a 503: the same ``seq``), of that upload's T (the plan since may ask for another)."""
        last = self._last_upload
        retried = last is not None and last.seq is not None and data.get("seq") == last.seq
        return parse_experience(data, checks, self._n_envs, last.steps if last is not None and retried else self.steps)

    async def policy_file(self, held: int | None, timeout: float, held_phase: Phase | None = None
                          ) -> tuple[int, bytes | None]:
        """The file of the block's phase (built once per version and phase by the agent); None for the file
        when ``held`` is still the version to act with, in ``held_phase``, the phase of the file the client
        holds (not given: of the file last sent, which a reply lost on the way never brought)."""
        phase_held = self.served_phase if held_phase is None else held_phase
        if held is not None and held == self.policy_version and phase_held is self.phase:
            return held, None
        phase = self.phase
        version, onnx = await self.host.behaviour(phase, timeout)
        self.served_phase = phase
        return version, onnx

    @property
    def learner(self) -> ExperienceLearner:
        """The agent's learner, which must take uploads (`ExperienceLearner`).

        Raises: NotClientActing for a learner that takes none (the session then acts at the server)."""
        learner = self.host.learner
        if not isinstance(learner, ExperienceLearner):
            raise NotClientActing(f"this agent's learner ({type(learner).__name__}) takes no uploads; log in with "
                                  "\"acting\": \"server\"")
        return learner

    # -- opening -------------------------------------------------------------------------------------
    def opening(self) -> asyncio.Future[Any]:
        """The session's first block: its phase, the policy version to act with and its steps (a task, once)."""
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
        return self._opening

    async def _open(self) -> dict[str, Any]:
        return {"acting": "client", **await self._plan_first()}

    async def _plan_first(self) -> dict[str, Any]:
        self.phase = Phase.DEPLOY if self.evaluate_only else self.host.current_phase()
        if self.evaluate_only:
            self.policy_version = self.learner.policy_version
        else:
            planned: ExperienceReply = await asyncio.wrap_future(self.learner.begin_uploads(self.uploader,
                                                                                              self._n_envs))
            self.policy_version, self.steps = planned.policy_version, planned.steps
        for index in range(self._n_envs):
            self._new_episode(index)
        return self.plan()

    def plan(self) -> dict[str, Any]:
        """What the client does next: act with ``policy_version`` in ``phase`` for ``steps`` steps (with lessons:
        each env's config for the episodes that start in that block, and their lesson)."""
        return {"policy_version": self.policy_version, "phase": self.phase.value, "steps": self.steps,
                **self.lifecycle.block_fields()}

    # -- uploads -------------------------------------------------------------------------------------
    def take_upload(self, step: Experience) -> Reply[Any]:
        self._last_upload = step
        self.upload_phase = self.phase  # (a retry of this upload is answered as it was: the same phase)
        return asyncio.ensure_future(self._upload(step))

    async def _upload(self, experience: Experience) -> dict[str, Any]:
        """Learn from a block (heatup, training), record its episodes, plan the next block."""
        if self.phase in LEARNED:
            try:
                learned: ExperienceReply = await asyncio.wrap_future(
                    self.learner.learn_experience(self.uploader, experience))
            except Exception as error:
                self._lose_episodes()  # what ran through the refused rows is not recorded
                if isinstance(error, StalePolicy):  # the version to act with now: the file held is no longer it
                    self.policy_version = error.policy_version
                raise
            self.policy_version, self.steps = learned.policy_version, learned.steps
        self._record(experience)
        self.lifecycle.new_block()
        if self.phase not in LEARNED or self.evaluate_only:
            self.policy_version = self.learner.policy_version
        self.phase = Phase.DEPLOY if self.evaluate_only else self.host.current_phase()
        return {**self.plan(), "accepted": experience.steps * experience.n_envs}

    def _record(self, experience: Experience) -> None:
        """Every env step of an accepted block counted with the agent (its schedule counts heatup and training
        steps), every episode that ended recorded with its return: in row order (t, then env), the steps
        between two ends counted at once."""
        host, phase, n, episodes = self.host, self.phase, experience.n_envs, self.lifecycle.episodes
        counted, added = 0, [0] * n  # env steps counted; each env's rows added to its episode
        for t, index in zip(*np.nonzero(experience.ended)):
            t, index = int(t), int(index)
            self._add(index, experience.reward, added[index], t + 1)
            added[index] = t + 1
            host.count_step(phase, t * n + index + 1 - counted)
            counted = t * n + index + 1
            if episodes[index] is not None:
                self.lifecycle.end(index)
            self._new_episode(index)
        for index in range(n):
            self._add(index, experience.reward, added[index], experience.steps)
        if experience.steps * n > counted:
            host.count_step(phase, experience.steps * n - counted)

    def _add(self, index: int, rewards: np.ndarray, start: int, stop: int) -> None:
        """Rows ``start:stop`` of env ``index`` added to its episode (its rewards one by one, as steps add them)."""
        episode = self.lifecycle.episodes[index]
        if episode is not None and stop > start:
            episode.total = functools.reduce(operator.add, rewards[start:stop, index].tolist(), episode.total)
            episode.length += stop - start

    def _new_episode(self, index: int) -> Episode:
        """An env's next episode: in an evaluation block the schedule's next (an evaluation episode while the
        period needs one); in a heatup or training block the block's phase, so that an evaluation period opened
        meanwhile is not taken by an episode that explores."""
        if self.phase in LEARNED or self.evaluate_only:
            return self.lifecycle.begin(index, self.phase)
        episode = self.lifecycle.begin(index)  # the period's next evaluation episode, while it needs one
        if episode.phase is not Phase.EVALUATE:  # in a greedy block beyond what the period needs: not training
            episode.phase = Phase.DEPLOY
        return episode

    def _lose_episodes(self) -> None:
        self.lifecycle.abandon()

    def resend(self) -> Reply[Any]:
        """The last upload handed to the learner again, its learner having lost it (`LearnerUnavailable`: a Ray
        actor died with it; nothing of it was recorded, and its episodes were abandoned): the client's retry with
        the same ``seq``, as after any 503. The new learner learns it, or refuses it as stale (409)."""
        if self._last_upload is None:
            raise WrongShape("an upload is not sent again by the server; send it again with the same seq")
        return self.take_upload(self._last_upload)

    def close(self) -> None:
        """End the session: unfinished episodes are abandoned, the learner releases what it kept for it."""
        if self.closed:
            return
        self.closed = True
        self.lifecycle.abandon()
        self.host.learner.end_actor(self.uploader)
