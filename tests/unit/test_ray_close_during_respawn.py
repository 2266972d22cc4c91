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


def handle(process):
    return types.SimpleNamespace(process=Method(process), start=Method(lambda: None), build=Method(lambda *a: {}),
                                 close=Method(lambda timeout, interrupt=False: None),
                                 __ray_ready__=Method(lambda: None))


class Local:
    algorithm = types.SimpleNamespace(model=None)
    greedy = None

    def close(self):
        pass


def test_a_learner_closed_while_the_dead_actors_name_is_taken_makes_no_actor_after(monkeypatch):
    killed, created, free_at = [], [], [float("inf")]
    fake_ray = types.SimpleNamespace(get=lambda value, timeout=None: value() if callable(value) else value,
                                     wait=lambda refs, timeout=None: (refs, []),
                                     kill=lambda actor, no_restart=True: killed.append(actor))
    monkeypatch.setattr(learner_module, "ray", fake_ray)
    monkeypatch.setattr(revival, "ray", fake_ray)

    class Options:
        def remote(self):
            if time.monotonic() < free_at[0]:
                raise ValueError("the name shepherd-learner/1 is taken")  # the dead actor's, not freed yet
            created.append(handle(lambda units, wait, after: Reply([], 0, 0, None, LearnerStats(), [])))
            return created[-1]

    monkeypatch.setattr(revival, "REMOTE_ACTOR", types.SimpleNamespace(options=lambda **kwargs: Options()))

    def died(units, wait, weights_after):
        raise ray_errors.RayActorError()

    learner = learner_module.RayLearner(types.SimpleNamespace(name="pole", sharing=Sharing.POOLED), {}, None,
                                        "shepherd-learner/1", Local(), link=RayLink("joined"))
    learner._handle, learner._available = handle(died), True
    learner.start(None)
    learner.ask(Request(Kind.BEGIN, actor=1, obs=[0.0] * 4))  # finds the actor dead: the sender replaces it
    time.sleep(0.5)
    learner.close(timeout=1.0)  # as the agent's delete does, while the name is still taken
    free_at[0] = time.monotonic()  # Ray frees the name
    time.sleep(2.0)
    assert all(actor in killed for actor in created)  # none made, or ended at once
    assert not learner._available
