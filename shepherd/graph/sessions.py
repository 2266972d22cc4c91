"""A client session: one level (its shape: `shepherd.level`), found by an unguessable session key in the table of
open sessions (`shepherd.graph.session_table`).

A session drives one environment, or N at once (a vector session, opened with ``n_envs``: each step carries
every env's part, `VectorStepInput`, and is answered with N actions). A session holds at most one step in
flight. A step may carry a sequence number (``seq``): sending the
same step again with the same number (a retry after a timeout or a lost connection) gets the same action
back and is recorded once; the same number with another step is refused; a higher number is the next step;
a lower one is refused. `Session.step` is the one awaitable call of a step: it owns the retries, the
requests in flight, idleness and the wait for the learner's answer on the caller's event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shepherd.agents import ALGORITHMS, ActionFuture, AgentClosed, lost
from shepherd.graph.runtime import AgentRuntime
from shepherd.level import Level, Reply
from shepherd.wire.spaces import SpaceError, check_action_mask
from shepherd.wire import GreedyStep, GreedyVectorStep, Step, StepInput, VectorStepInput
from shepherd.wire.experience import Experience, ExperienceSpaces
from shepherd.wire import BadRequest
from shepherd.wire.observations import suspect
from shepherd.wire.steps import DEFAULT_MAX_REWARD
from shepherd.wire.sessions import Conflict, Unauthorized, is_retry


#: how many session keys of deleted agents are remembered, to answer them 410 rather than 401
GONE_REMEMBERED = 10_000


class Gone(LookupError):
    """The session's agent was deleted: its sessions and keys are refused for good (HTTP 410)."""


class ActTimeout(RuntimeError):
    """The learner did not answer a step in time; the client may retry after ``retry_after`` seconds."""

    retry_after = 1


def check_mask(value: Any, mask_space: Any, where: str = "action_mask") -> np.ndarray:
    """A client's action mask, checked for a session whose agent takes masks against its action space
    (``mask_space``; None: the agent's algorithm takes none).

    Raises:
        SpaceError: the agent takes no masks (naming the algorithms that do), or `check_action_mask`'s.
    """
    if mask_space is None:
        able = ", ".join(a.name for a in ALGORITHMS.values() if a.masks)
        raise SpaceError(f"this agent's algorithm takes no 'action_mask'; algorithms that do: {able}")
    return check_action_mask(mask_space, value, where)


class TooManyEnvs(ValueError):
    """A vector login asked for more envs than the server allows per session (or fewer than one)."""


@dataclass(frozen=True)
class Acted:
    """A step's answer: the action (None when the episode ended; for a vector step, the list of every
    env's action) and the policy version that chose it (a vector step's oldest)."""

    action: Any
    policy_version: int = 0
    #: what the reply adds about episodes' configs (`Level.reply_fields`; {} for an agent without lessons)
    fields: dict[str, Any] = field(default_factory=dict)


def _answered(action: Any) -> ActionFuture:
    future = ActionFuture()
    future.set_result(action)
    return future


def same_step(a: Step, b: Step) -> bool:
    """Whether two steps carry the same content (a true retry): the same digest (`wire.fingerprint`,
    `wire.vector_fingerprint`), whichever process checked them. A step a front end recorded without a
    ``seq`` has no digest and is never one."""
    digest = a.digest()
    return bool(digest) and digest == b.digest()


@dataclass(eq=False)
class Session:
    """One client's connection to one agent, between login and logout (or expiry)."""

    key: str
    level: Level
    runtime: AgentRuntime
    client_id: str = ""  # the `hash_key` of the API key that opened it: limits count per key, revoking ends it
    last_seq: int | None = None
    last_step: Step | None = field(default=None, repr=False)
    last_reply: Reply[Any] | None = field(default=None, repr=False)
    last_fields: dict[str, Any] = field(default_factory=dict, repr=False)  # the last step's `Level.reply_fields`
    last_active: float = field(default_factory=time.monotonic)
    in_request: int = 0  # requests of this session being answered right now
    gone: str | None = None  # set when its agent was deleted: what its waiting steps are told (`Gone`)
    ended: bool = False  # logged out, expired, its key revoked or its agent stopped (`Sessions.end`)
    max_reward: float = DEFAULT_MAX_REWARD  # the server's bound on a reward's magnitude (``--max-reward``)

    def active(self) -> None:
        """Note a request starting or ending: idleness counts from the last one."""
        self.last_active = time.monotonic()

    @property
    def busy(self) -> bool:
        """A step is waiting for its action."""
        return self.last_reply is not None and not self.last_reply.done()

    @property
    def n_envs(self) -> int | None:
        """How many envs a vector session drives; None for a single-env session."""
        return self.level.n_envs

    @property
    def observation_space(self) -> Any:
        return self.runtime.observation_space

    @property
    def action_space(self) -> Any:
        """The actions its steps are answered with: its runtime's, or its level's (a hierarchy's: the skills')."""
        return self.runtime.action_space if self.level.action_space is None else self.level.action_space

    @property
    def mask_space(self) -> Any:
        """What a step's ``action_mask`` is checked against (`check_mask`): the action space if the agent's
        algorithm and the level take masks, else None."""
        return self.level.mask_space(self.runtime.action_space, self.runtime.takes_masks)

    @property
    def snapshot(self) -> tuple[str, int, int | None] | None:
        """The snapshot a front end may answer this session's steps with (`snapshot_name`), its learner's
        policy version now, and the session's `n_envs`; None unless this is an evaluate-mode session of a
        learner that has not failed and whose greedy policy another process can run (`GreedyPolicy.portable`, or
        an image agent's greedy ONNX file: `AgentRuntime.greedy_file_snapshots`)."""
        learner = self.runtime.learner
        if not self.level.evaluate_only or not self.level.snapshots or learner.failure is not None:
            return None
        if self.runtime.greedy_file_snapshots:
            return snapshot_name(self.runtime), learner.policy_version, self.n_envs
        greedy = learner.greedy
        if greedy is None or not greedy.portable:
            return None
        return snapshot_name(self.runtime), greedy.source.version, self.n_envs

    async def step(self, step: Step, timeout: float) -> Acted:
        """Take one step: the learner's action for it (a vector step: every env's), waited for on this
        event loop; a `GreedyStep` or `GreedyVectorStep` (a front end answered it from its snapshot) is
        recorded with the action it carries, or, if it repeats the last ``seq``, gets that step's answer.

        Raises:
            WrongShape: a vector step on a single-env session, the reverse, or another number of envs.
            Conflict: another step is still waiting for its action, ``seq`` went backwards, or a retry
                carries another step than the one first sent with its ``seq``.
            ActTimeout: no answer within ``timeout`` seconds (the step stays in flight: a retry with the
                same ``seq`` gets its action).
            Unauthorized: the session ended while the step waited.
            Gone: the session's agent was deleted while the step waited.
            AgentFailed, AgentClosed: the agent failed or is shutting down.
            LearnerUnavailable: the learner's process died (a Ray actor, restarted from its checkpoint);
                a retry with the same ``seq`` hands the step to the learner again, counted once.
        """
        self.active()
        self.in_request += 1
        try:
            await self._refuse_unbounded(step, timeout)
            future = self._hand_over(step)
            try:
                action = await self._wait(future, timeout, step.seq)
            except ActTimeout:
                self.runtime.act_timeouts += 1
                raise
            return Acted(action, getattr(future, "policy_version", 0), self.last_fields)
        finally:
            self.in_request -= 1
            self.active()

    async def _refuse_unbounded(self, step: Step, timeout: float) -> None:
        """Refuse a new step whose observations a learner's networks cannot take, before the level changes
        anything: an off-policy agent refuses them when it comes to act (400, "not recorded"), by which time the
        level had counted the step, ended and begun its episodes (a selector's refused choice orphaned one).
        Only a step found to hold a number past `SUSPECT_MAGNITUDE` where it was checked (``step.suspect``) is
        asked about, each learner only when its own observations hold one.

        Raises: BadRequest; ActTimeout when a learner does not answer within ``timeout``."""
        if not getattr(step, "suspect", True) or (step.seq is not None and step.seq == self.last_seq):
            return  # the common case: nothing to ask; or a retry, answered as it was
        for learner, observations in self.level.observed_by(step):
            ask = getattr(learner, "unbounded", None)
            if ask is None or not any(suspect(obs) for obs in observations):
                continue
            try:
                async with asyncio.timeout(timeout):  # (shielded: the learner's control is never cancelled)
                    refused = await asyncio.shield(asyncio.wrap_future(ask(observations)))
            except TimeoutError:
                raise ActTimeout(f"the agent did not check this step's observations within {timeout:g} s; send "
                                 "it again (nothing of it was taken)") from None
            if refused:
                raise BadRequest("'obs' makes the agent's networks give a NaN, infinite or overflowing output (a "
                                 "number far beyond what its observations hold); the step was not recorded")

    @functools.cached_property
    def checks(self) -> ExperienceSpaces:
        """What its steps are checked against: the agent's spaces, the mask rule (`check_mask`) and the bound on
        rewards."""
        return ExperienceSpaces(self.observation_space, self.action_space, self.mask_space, check_mask,
                                self.max_reward)

    @functools.cached_property
    def upload_checks(self) -> ExperienceSpaces:
        """What its uploads are checked against: `checks`, with what its learner's policy draws (`sample_space`)."""
        return dataclasses.replace(self.checks, sample=self.runtime.learner.sample_space)

    def parse_step(self, data: dict[str, Any]) -> StepInput | VectorStepInput | None:
        """A step body checked into the kind of step its level takes (None: ``"obs": null`` ends the session).
        Raises BadRequest, or WrongShape from a level that takes no steps (it acts at the client)."""
        return self.level.parse_step(data, self.checks)

    def parse_upload(self, data: dict[str, Any]) -> Experience:
        """An upload body checked into an `Experience`. Raises BadExperience, or WrongShape from a level that
        takes no uploads (its policy acts at the server)."""
        return self.level.parse_upload(data, self.upload_checks)

    async def opened(self, timeout: float) -> dict[str, Any]:
        """What the login reply adds (`Level.opening`): a client-acting session's first block (its phase,
        policy version and steps) is waited for as a step is (the learner may first finish a rollout that
        other sessions fill).

        Raises: ActTimeout, Unauthorized or Gone (as `step`), and what the learner refuses the session with
        (`NotClientActing`, AgentFailed).
        """
        try:
            return await self._wait(self.level.opening(), timeout, None)
        except ActTimeout:  # (the step's wording speaks of actions and seq)
            raise ActTimeout(f"the agent did not plan this session's first block within {timeout:g} s (its "
                             "learner is finishing a rollout other sessions fill); log in again") from None

    async def _wait(self, future: Reply[Any], timeout: float, seq: int | None) -> Any:
        """`_wait`, but a session ended by its agent's deletion while it waited raises `Gone`: also when its
        action came as the agent was deleted (the delete ended another session first, whose rollout segment
        this step waited for, and the learner answered it before it stopped)."""
        try:
            action = await _wait(future, timeout, seq)
        except (Unauthorized, AgentClosed):  # the learner stopping for the delete refuses it "shut down"
            if self.gone is not None:
                raise Gone(self.gone) from None
            raise
        if self.gone is not None:
            raise Gone(self.gone)
        return action

    async def policy(self, held: int | None, timeout: float, held_phase: Any = None) -> tuple[int, bytes | None]:
        """The behaviour policy file a client-acting session acts with now (its block's phase), and its
        version; None for the file when ``held`` (in ``held_phase``) is still the one to act with
        (`Level.policy_file`).
        Raises WrongShape (a session acting at the server), NotActableAtClient, or ActTimeout when the learner
        does not build it in time."""
        try:
            return await self.level.policy_file(held, timeout, held_phase)
        except TimeoutError:
            raise ActTimeout("the agent did not build its policy file in time; ask again") from None

    def repeats_waiting_step(self, step: Step) -> bool:
        """Whether ``step`` repeats the ``seq`` of a step still waiting for its action, or of one its learner lost
        (`LearnerUnavailable`: `step` hands it to the learner again, and it waits for the answer)."""
        return step.seq is not None and step.seq == self.last_seq and (self.busy or lost(self.last_reply))

    def record(self, step: GreedyStep | GreedyVectorStep) -> Acted | None:
        """`step` for a `GreedyStep` or `GreedyVectorStep`, without waiting: its answer now, or None (and
        nothing done) when it `repeats_waiting_step` (`step` then waits for that one).

        Raises: what `step` raises before it waits.
        """
        if self.repeats_waiting_step(step):
            return None
        self.active()
        future = self._hand_over(step)
        assert future.done(), "a recorded step is answered at once"
        return Acted(future.result(), getattr(future, "policy_version", 0), self.last_fields)

    def _hand_over(self, step: Step) -> Reply[Any]:
        """Hand a step to the session's level by its own type (`Step.hand_to`), under the session's ``seq``
        rules; the reply gives the action, or None when the episode ended. A step that arrives after the session
        ended (its body was parsed off the event loop meanwhile) is refused: its level closed its episodes."""
        if self.ended:
            if self.gone is not None:
                raise Gone(self.gone)
            raise Unauthorized("the session ended (expired, logged out or its key revoked) while this step "
                               "arrived; log in again")
        if step.n_envs != self.level.n_envs:
            raise self.level.wrong_shape(step.n_envs)
        last = self.last_step
        if is_retry(step.seq, self.last_seq, lambda: last is None or same_step(step, last)):
            if lost(self.last_reply):  # its learner's process died with it: the learner hears it again
                self.last_reply = self.level.resend()
            return self.last_reply  # type: ignore[return-value]  # a retry: the same answer, recorded once
        if self.busy:
            retry = f"retry it with seq {self.last_seq}" if self.last_seq is not None else "wait for it"
            raise Conflict(f"the previous step of this session is still waiting for its action; {retry}")
        reply = step.hand_to(self.level)
        self.last_fields = self.level.reply_fields()
        # a step without seq keeps the last seq: an older step sent again with it is a conflict, never new
        self.last_seq, self.last_step = (self.last_seq if step.seq is None else step.seq), step
        self.last_reply = reply if reply is not None else _answered(None)
        return self.last_reply


def snapshot_name(runtime: AgentRuntime) -> str:
    """The name of a runtime's greedy snapshot: its agent, its client (in an advised agent), its runtime's token
    (random: an ``id()`` comes back once its object is freed) and its learner's restarts (a Ray actor restored from
    a checkpoint goes back to an older version), so that a learner built anew is never taken for the one a front
    end holds a snapshot of (it answered with the old policy, whose version was above the new learner's)."""
    client = "" if runtime.client is None else f"/{runtime.client}"
    return f"{runtime.record.id}{client}@{runtime.snapshot_token}.{getattr(runtime.learner, 'restarts', 0)}"


async def _wait(future: Reply[Any], timeout: float, seq: int | None) -> Any:
    """The learner's answer, or ActTimeout after ``timeout``; the step stays in flight either way.

    Learners complete the futures of a batch on this loop's thread (the ``deliver`` they were started
    with), so waiting costs one loop future and no thread hand-off of its own; a future completed
    elsewhere (a refusal, a cancelled request) wakes the loop through ``call_soon_threadsafe``.
    """
    if not future.done():
        loop = asyncio.get_running_loop()
        woken = loop.create_future()
        future.add_done_callback(functools.partial(_wake, loop, threading.get_ident(), woken))
        try:
            async with asyncio.timeout(timeout):
                await woken
        except TimeoutError:
            retry = ("send the same step again with the same seq to get its action" if seq is not None else
                     "its action is lost to this client; send steps with a seq to retry them safely")
            raise ActTimeout(f"the agent did not answer within {timeout:g} s; {retry}") from None
    if future.cancelled():  # the learner dropped it: the session ended while the step waited
        raise Unauthorized("the session ended (expired or logged out) while this step waited; log in again")
    return future.result()


def _wake(loop: asyncio.AbstractEventLoop, loop_thread: int, woken: asyncio.Future, _: Any) -> None:
    if threading.get_ident() == loop_thread:
        _set_woken(woken)
    elif not loop.is_closed():
        loop.call_soon_threadsafe(_set_woken, woken)


def _set_woken(woken: asyncio.Future) -> None:
    if not woken.done():
        woken.set_result(None)
