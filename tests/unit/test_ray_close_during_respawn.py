"""A Ray learner closed (its agent deleted or restarted) while it replaces a lost actor whose name Ray has not
freed yet makes no actor afterwards: before, its sender went on, made the actor once the name was free and left it
running with the name (a later restart of the agent then waited for the name and failed). The head drives fake
actors here (no Ray is started)."""

from __future__ import annotations

import time
import types

import pytest

pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")

from ray import exceptions as ray_errors  # noqa: E402

from shepherd.agents.core import Kind, Request  # noqa: E402
from shepherd.agents.ray import revival  # noqa: E402
from tests.fake_ray import fake_ray, handle, learner, reply  # noqa: E402


def test_a_learner_closed_while_the_dead_actors_name_is_taken_makes_no_actor_after(monkeypatch):
    killed, created, free_at = [], [], [float("inf")]
    fake_ray(monkeypatch, killed)

    class Options:
        def remote(self):
            if time.monotonic() < free_at[0]:
                raise ValueError("the name shepherd-learner/1 is taken")  # the dead actor's, not freed yet
            created.append(handle(lambda units, wait, after: reply()))
            return created[-1]

    monkeypatch.setattr(revival, "REMOTE_ACTOR", types.SimpleNamespace(options=lambda **kwargs: Options()))

    def died(units, wait, weights_after):
        raise ray_errors.RayActorError()

    head = learner(died)
    head.start(None)
    head.ask(Request(Kind.BEGIN, actor=1, obs=[0.0] * 4))  # finds the actor dead: the sender replaces it
    time.sleep(0.5)
    head.close(timeout=1.0)  # as the agent's delete does, while the name is still taken
    free_at[0] = time.monotonic()  # Ray frees the name
    time.sleep(2.0)
    assert all(actor in killed for actor in created)  # none made, or ended at once
    assert not head._available
