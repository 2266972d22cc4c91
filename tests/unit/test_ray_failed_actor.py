"""A Ray learner whose actor's learner fails answers every call it had sent (`AgentFailed`, a 503 naming the
failure): before, the failed actor answered none of them, and the head failed only the calls of that one
round, so steps sent earlier timed out (503) and their retries, which wait on the same call, for good. The head
drives a fake actor handle here (no Ray is started)."""

from __future__ import annotations

import time
import types

import pytest

pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")

from shepherd.agents.core import AgentFailed, Kind, Request  # noqa: E402
from shepherd.agents.ray import learner as learner_module  # noqa: E402
from shepherd.agents.ray import revival  # noqa: E402
from shepherd.agents.ray.actor import Reply  # noqa: E402
from shepherd.agents.ray.link import RayLink  # noqa: E402
from shepherd.agents.timing import LearnerStats  # noqa: E402
from shepherd.definition import Sharing  # noqa: E402


class Method:
    def __init__(self, function):
        self.function = function

    def remote(self, *args, **kwargs):
        return lambda: self.function(*args, **kwargs)  # called by the fake ray.get


class Local:
    algorithm = types.SimpleNamespace(model=None)
    greedy = None

    def close(self):
        pass


def fake_ray(monkeypatch) -> None:
    """Every Ray call of the head's learner faked (a real one would start a local Ray, or join a running one)."""
    fake = types.SimpleNamespace(get=lambda value, timeout=None: value() if callable(value) else value,
                                 wait=lambda refs, timeout=None: (refs, []), kill=lambda actor, no_restart=True: None)
    monkeypatch.setattr(learner_module, "ray", fake)
    monkeypatch.setattr(revival, "ray", fake)


def test_calls_sent_before_the_actors_learner_failed_are_answered_failed(monkeypatch):
    fake_ray(monkeypatch)

    def process(units, wait, weights_after):  # the learner failed: the requests dropped, none answered
        return Reply([], 0, 0, "ValueError: nan in the loss", LearnerStats(), [])

    learner = learner_module.RayLearner(types.SimpleNamespace(name="pole", sharing=Sharing.POOLED), {}, None,
                                        "shepherd-learner/1", Local(), link=RayLink("joined"))
    learner._handle = types.SimpleNamespace(process=Method(process), start=Method(lambda: None),
                                            close=Method(lambda timeout, interrupt=False: None))
    learner._available = True
    learner.start(None)
    try:
        future = learner.ask(Request(Kind.BEGIN, actor=1, obs=[0.0] * 4))
        deadline = time.monotonic() + 10
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert learner.failure == "ValueError: nan in the loss"
        assert future.done() and isinstance(future.exception(), AgentFailed)
    finally:
        learner.close(1.0)


def test_a_failed_learners_greedy_vector_steps_are_refused_as_in_process(monkeypatch):
    """The head's greedy snapshot answered a failed agent's greedy vector steps under --ray (`ask` and the
    in-process learner refuse them: `AgentFailed`)."""
    learner = learner_module.RayLearner(types.SimpleNamespace(name="pole", sharing=Sharing.POOLED), {}, None,
                                        "shepherd-learner/1", Local(), link=RayLink("joined"))
    learner.greedy = types.SimpleNamespace()  # any snapshot: it must not be asked
    learner._available = True
    learner.failure = "ValueError: nan in the loss"
    future = learner.submit([Request(Kind.BEGIN, actor=1, obs=[0.0] * 4), Request(Kind.BEGIN, actor=2, obs=[0.0] * 4)])
    assert future.done() and isinstance(future.exception(), AgentFailed)
