"""A Ray learner whose actor's learner fails answers every call it had sent (`AgentFailed`, a 503 naming the
failure): before, the failed actor answered none of them, and the head failed only the calls of that one
round, so steps sent earlier timed out (503) and their retries, which wait on the same call, for good. The head
drives a fake actor handle here (no Ray is started)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")

from shepherd.agents.core import AgentFailed, Kind, Request  # noqa: E402
from tests.fake_ray import fake_ray, learner, reply  # noqa: E402


def test_calls_sent_before_the_actors_learner_failed_are_answered_failed(monkeypatch):
    fake_ray(monkeypatch)

    head = learner(lambda units, wait, weights_after: reply("ValueError: nan in the loss"))  # the learner failed:
    # the requests dropped, none answered
    head.start(None)
    try:
        future = head.ask(Request(Kind.BEGIN, actor=1, obs=[0.0] * 4))
        deadline = time.monotonic() + 10
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert head.failure == "ValueError: nan in the loss"
        assert future.done() and isinstance(future.exception(), AgentFailed)
    finally:
        head.close(1.0)


def test_a_failed_learners_greedy_vector_steps_are_refused_as_in_process(monkeypatch):
    """The head's greedy snapshot answered a failed agent's greedy vector steps under --ray (`ask` and the
    in-process learner refuse them: `AgentFailed`)."""
    fake_ray(monkeypatch)
    head = learner(lambda units, wait, weights_after: reply())
    head.greedy = object()  # any snapshot: it must not be asked
    head.failure = "ValueError: nan in the loss"
    future = head.submit([Request(Kind.BEGIN, actor=1, obs=[0.0] * 4), Request(Kind.BEGIN, actor=2, obs=[0.0] * 4)])
    assert future.done() and isinstance(future.exception(), AgentFailed)
