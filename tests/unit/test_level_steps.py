"""A step is handed to its level by its own type, and a level's reply is awaitable: a level may answer a step by
consulting two learners in turn (a selector, then a skill), and the session waits for it, retries included, as
it waits for one learner's future."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from shepherd.agents import ActionFuture
from shepherd.graph.sessions import Conflict, Session
from shepherd.level import Level, WrongShape
from shepherd.wire import StepInput, VectorStepInput


def later(value: object, seconds: float = 0.01) -> ActionFuture:
    """A learner's future, answered from another thread."""
    future = ActionFuture()
    threading.Timer(seconds, future.set_result, (value,)).start()
    return future


class TwoLearners(Level):
    """Asks a selector which skill answers, then that skill: one step, two learner calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def take_step(self, step: StepInput) -> asyncio.Task:
        async def selector_then_skill() -> object:
            self.calls.append("selector")
            skill = await later("balance")
            self.calls.append(str(skill))
            return await later(f"{skill}:{step.obs}")
        return asyncio.ensure_future(selector_then_skill())


def session_of(level: Level) -> Session:
    return Session("key", level, SimpleNamespace(act_timeouts=0))  # type: ignore[arg-type]


async def test_an_action_future_can_be_awaited():
    assert await later(3) == 3


async def test_a_step_that_consults_two_learners_is_awaited_and_a_retry_gets_its_answer_once():
    level = TwoLearners()
    session = session_of(level)
    acted = await session.step(StepInput(7, 0.0, False, seq=1), timeout=5)
    assert acted.action == "balance:7" and level.calls == ["selector", "balance"]
    again = await session.step(StepInput(7, 0.0, False, seq=1), timeout=5)  # a retry: the same answer
    assert again.action == "balance:7" and level.calls == ["selector", "balance"]
    with pytest.raises(Conflict):
        await session.step(StepInput(8, 0.0, False, seq=1), timeout=5)  # the same seq, another step
    assert (await session.step(StepInput(8, 0.0, False, seq=2), timeout=5)).action == "balance:8"


async def test_a_kind_of_step_the_level_does_not_take_is_refused_by_the_level():
    session = session_of(TwoLearners())
    vector = VectorStepInput.of([1, 2], [0.0, 0.0], [False, False], [False, False])
    with pytest.raises(WrongShape, match="drives one env"):
        await session.step(vector, timeout=5)
    assert session.last_step is None  # nothing handed over
