"""`AgentRuntime`'s behaviour and greedy files (`_file`): a file the learner has built at its current version is
returned at once, without a task, a timer or a wake-up from the learner's thread (each upload's reply that carries
the policy asks for it); one not built yet is waited for, one build at a time."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from shepherd.graph.runtime import AgentRuntime


def runtime_of(behaviour) -> SimpleNamespace:
    """What `_file` reads of a runtime: its builds under way, its learner's `behaviour`, its record's names."""
    fake = SimpleNamespace(_building={}, learner=SimpleNamespace(behaviour=behaviour),
                           record=SimpleNamespace(name="pole", algorithm="PPO"))
    fake._build = lambda kind, asked: AgentRuntime._build(fake, kind, asked)
    return fake


def test_a_built_file_is_returned_without_suspending():
    built: Future = Future()
    built.set_result((3, b"onnx"))
    fake = runtime_of(lambda kind, name, algorithm: built)
    coroutine = AgentRuntime._file(fake, "train", 1.0)
    with pytest.raises(StopIteration) as finished:  # done on its first step: no event loop was even needed
        coroutine.send(None)
    assert finished.value.value == (3, b"onnx") and fake._building == {}


def test_a_file_being_built_is_waited_for_once():
    asked: list[Future] = []

    def behaviour(kind, name, algorithm):
        asked.append(Future())
        return asked[-1]

    fake = runtime_of(behaviour)

    async def main():
        waiting = [asyncio.ensure_future(AgentRuntime._file(fake, "train", 5.0)) for _ in range(2)]
        await asyncio.sleep(0.01)
        assert len(asked) == 1 and set(fake._building) == {"train"}  # one build for both
        threading.Timer(0.01, asked[0].set_result, ((4, b"file"),)).start()  # set on another thread, as a learner
        return await asyncio.gather(*waiting)

    assert asyncio.run(main()) == [(4, b"file"), (4, b"file")]
    assert fake._building == {}

