"""A Ray learner's head (`shepherd.agents.ray.learner.RayLearner`) driven against fake actor handles: every Ray call
of the head faked, so that no Ray is started (the real module, called once, starts a local Ray or joins one that
runs). Import it after ``pytest.importorskip("ray")``."""

from __future__ import annotations

import types
from typing import Any, Callable

from shepherd.agents.ray import learner as learner_module
from shepherd.agents.ray import revival
from shepherd.agents.ray.actor import Reply
from shepherd.agents.ray.link import RayLink
from shepherd.agents.timing import LearnerStats
from shepherd.definition import Sharing


class Method:
    """An actor method: ``remote`` gives a thunk, which the fake ``ray.get`` calls."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function

    def remote(self, *args: Any, **kwargs: Any) -> Callable[[], Any]:
        return lambda: self.function(*args, **kwargs)


class Local:
    """The head's local part of a learner, with nothing in it."""

    algorithm = types.SimpleNamespace(model=None)
    greedy = None

    def close(self) -> None:
        pass


def fake_ray(monkeypatch: Any, killed: list[Any] | None = None) -> None:
    """Fake ``ray.get``, ``wait`` and ``kill`` in the head's modules (``killed``: the actors killed, in order)."""
    fake = types.SimpleNamespace(get=lambda value, timeout=None: value() if callable(value) else value,
                                 wait=lambda refs, timeout=None: (refs, []),
                                 kill=lambda actor, no_restart=True: (killed if killed is not None else []).append(actor))
    monkeypatch.setattr(learner_module, "ray", fake)
    monkeypatch.setattr(revival, "ray", fake)


def handle(process: Callable[..., Any]) -> types.SimpleNamespace:
    """An actor whose ``process`` is ``process(units, wait, weights_after) -> Reply``."""
    return types.SimpleNamespace(process=Method(process), start=Method(lambda: None), build=Method(lambda *a: {}),
                                 close=Method(lambda timeout, interrupt=False: None),
                                 __ray_ready__=Method(lambda: None))


def reply(failure: str | None = None) -> Reply:
    """An actor's reply with no answers (``failure``: its learner failed)."""
    return Reply([], 0, 0, failure, LearnerStats(), [])


def learner(process: Callable[..., Any] | None = None) -> learner_module.RayLearner:
    """A pooled agent's head-side learner, its actor ``handle(process)`` (None: no actor yet)."""
    made = learner_module.RayLearner(types.SimpleNamespace(name="pole", sharing=Sharing.POOLED), {}, None,
                                     "shepherd-learner/1", Local(), link=RayLink("joined"))
    if process is not None:
        made._handle, made._available = handle(process), True
    return made
