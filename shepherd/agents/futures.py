"""The caller's side of a learner's answers: the futures a step awaits, and how an `Answer` settles them.

`settle` gives a future its action (with the policy version), a refusal, or one part of a vector step's
answer (`_Vector`, `_Part`: N acts gathered into one future); `answer_greedy_step` answers a greedy step, and
`answer_greedy_acts` a vector step's greedy acts, from the greedy snapshot (numpy, or an image agent's ONNX
file). Used by the worker (`shepherd.agents.worker.ThreadedLearner`) and the Ray head
(`shepherd.agents.ray.learner.RayLearner`) alike, on the thread that resolves.
"""

from __future__ import annotations

import functools
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from shepherd.agents.core import (ActionFuture, AgentClosed, AgentFailed, Answer, Kind, LearnerUnavailable,
                                  Outcome, Request)
from shepherd.agents.greedy_policy import GreedyPolicy
from shepherd.agents.onnx_greedy import OnnxGreedy

class _Vector:
    """The answers of one vector step's acts, gathered into one future (set on the thread that resolves)."""

    __slots__ = ("future", "actions", "left", "version")

    def __init__(self, future: ActionFuture, count: int) -> None:
        self.future = future
        self.actions: list[Any] = [None] * count
        self.left = count
        self.version: int | None = None

    def answer(self, index: int, answer: Answer) -> None:
        future = self.future
        if future.done():
            return
        if answer.outcome is Outcome.ACTION:
            self.actions[index] = answer.action
            self.version = answer.version if self.version is None else min(self.version, answer.version)
            self.left -= 1
            if not self.left:
                future.policy_version = self.version or 0
                future.set_result(self.actions)
        else:
            _refuse(future, answer)


def _refuse(future: Future, answer: Answer) -> None:
    """Settle a future with an answer that is not an action: dropped, failed or closed."""
    if answer.outcome is Outcome.DROPPED:
        future.cancel()
    elif answer.outcome is Outcome.FAILED:
        future.set_exception(AgentFailed(answer.detail))
    elif answer.outcome is Outcome.REFUSED and isinstance(answer.action, Exception):
        future.set_exception(answer.action)  # an upload the learner refused: StalePolicy, BadExperience
    else:
        future.set_exception(AgentClosed(answer.detail))


@dataclass(frozen=True)
class _Part:
    """Where one act's answer goes in its vector step."""

    vector: _Vector
    index: int


def settle(future: ActionFuture | _Part | None, answer: Answer) -> None:
    """Settle the future an answer was awaited by (None, or done already: nothing left to do): its action
    with the policy version, a refusal, or one part of a vector step's answer."""
    if isinstance(future, _Part):
        future.vector.answer(future.index, answer)
    elif future is None or future.done():
        return
    elif answer.outcome is Outcome.ACTION:
        future.policy_version = answer.version
        future.set_result(answer.action)
    else:
        _refuse(future, answer)


#: a vector step's greedy acts of more observation numbers than this (summed over its envs) are answered on a
#: worker thread (`greedy_pool`), not on the caller's, which is the server's event loop: one key's large
#: evaluate-mode steps must not hold up every other agent's steps (issue 39, M2)
INLINE_NUMBERS = 16_384
#: the worker threads of those large greedy batches, shared by every agent (numpy frees the GIL in its products)
GREEDY_WORKERS = 2


@functools.cache
def greedy_pool() -> ThreadPoolExecutor:
    """The threads that answer large greedy batches (made at first use)."""
    return ThreadPoolExecutor(GREEDY_WORKERS, thread_name_prefix="shepherd-greedy")


def answer_greedy_acts(greedy: GreedyPolicy | OnnxGreedy, requests: list[Request], acts: list[Request],
                       future: ActionFuture) -> list[Request] | None:
    """A vector step's acts answered from the greedy snapshot, when every one is greedy and the snapshot can
    serve them (one forward): sets ``future`` (at once, or on a worker thread for a batch of more than
    INLINE_NUMBERS observation numbers, and always for an image agent's greedy file: `OnnxGreedy.always_off_loop`)
    and returns the step's other requests (ends, drops), which the learner must still be sent. None: the learner
    answers them (the snapshot is asked to get ready, so the next greedy steps can be answered at once)."""
    if not all(r.wants_mode for r in acts):
        return None
    masks = [r.mask for r in acts] if any(r.mask is not None for r in acts) else None
    observations = [r.obs for r in acts]
    if (greedy.always_off_loop or sum(map(_numbers, observations)) > INLINE_NUMBERS) and greedy.ready(masks):
        greedy_pool().submit(answer_off_loop, greedy, observations, masks, future)
        return [r for r in requests if r.kind not in (Kind.BEGIN, Kind.STEP)]
    if greedy.always_off_loop:  # not ready (asking got it ready for the next steps): never on the event loop
        return None
    answered = greedy.act_batch(observations, masks)
    if answered is None:
        greedy.prepare()
        return None
    future.policy_version = answered[1]
    future.set_result(list(answered[0]))
    return [r for r in requests if r.kind not in (Kind.BEGIN, Kind.STEP)]


def answer_greedy_step(greedy: GreedyPolicy | OnnxGreedy, request: Request) -> ActionFuture | None:
    """A single greedy step (BEGIN or STEP) answered from the greedy snapshot: a future set at once on the caller's
    thread (a numpy snapshot), or on a worker thread (an image agent's greedy file, `always_off_loop`, once the
    current version's file is loaded). None: the learner answers it. A BEGIN is always the learner's: it asks the
    snapshot to get ready, so that the episode's next steps can be answered here."""
    if request.kind is Kind.BEGIN:
        greedy.prepare()
        return None
    future = ActionFuture()
    masks = None if request.mask is None else [request.mask]
    if greedy.always_off_loop:
        if not greedy.ready(masks):  # asking gets it ready for the next steps
            return None
        greedy_pool().submit(answer_off_loop, greedy, [request.obs], masks, future, True)
        return future
    answered = greedy.act(request.obs, request.mask)  # None: the learner answers (also masks a plan cannot apply)
    if answered is None:
        return None
    future.policy_version = answered[1]
    future.set_result(answered[0])
    return future


def answer_off_loop(greedy: GreedyPolicy | OnnxGreedy, observations: list[Any], masks: list[Any] | None,
                    future: ActionFuture, one: bool = False) -> None:
    """Answer ``future`` from a greedy snapshot on a worker thread (a large batch, or an image agent's greedy file):
    the action (``one``) or the list of a vector step's actions. The snapshot may not answer after all (the
    learner's weights moved on since the caller saw them current, or the file failed): the step is then refused
    as a learner's unavailable one, and the client's retry of the same seq is answered (by the learner)."""
    try:
        answered = greedy.act_batch(observations, masks)
    except BaseException as error:  # noqa: BLE001 - the awaiting caller hears it
        future.set_exception(error)
        return
    if answered is None:
        greedy.prepare()
        future.set_exception(LearnerUnavailable(
            f"agent {greedy.name}'s greedy snapshot could not answer this step (its policy changed); retry in "
            f"{LearnerUnavailable.retry_after} s with the same seq"))
        return
    future.policy_version = answered[1]
    future.set_result(answered[0][0] if one else list(answered[0]))


def _numbers(obs: Any) -> int:
    """How many numbers an observation holds (a Dict space's: over its parts)."""
    if isinstance(obs, dict):
        return sum(map(_numbers, obs.values()))
    return int(getattr(obs, "size", 1))
