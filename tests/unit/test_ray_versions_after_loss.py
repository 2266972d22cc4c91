"""An actor that replaces a lost one restores the head's last checkpoint, older than the lost actor's weights: its
versions go on past the last one the lost actor handed out. Before, it went back to the checkpoint's version and
reached the lost versions again with other weights: a client-acting client holding the lost actor's file of such a
version was told 304 and acted a block with lost weights, and a front end asking for weights newer than the lost
version kept the lost ones until the new actor passed it. The actor object alone and a head driven against fake
actors (no Ray is started)."""

from __future__ import annotations

import time
import types

import pytest

pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")

from ray import exceptions as ray_errors  # noqa: E402

from shepherd.agents import checkpoint as checkpoint_format  # noqa: E402
from shepherd.agents.core import Kind, Request  # noqa: E402
from shepherd.agents.ray import revival  # noqa: E402
from shepherd.agents.ray.actor import LearnerActor  # noqa: E402
from shepherd.definition import AgentDefinition  # noqa: E402
from tests.fake_ray import fake_ray, handle, learner, reply  # noqa: E402

PPO = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}


def actor_of(files=None, versions_after=None) -> LearnerActor:
    actor = LearnerActor()
    actor.build(AgentDefinition("pole", "PPO", [[4], -1, 1], 2, dict(PPO)), {}, None, files, False, versions_after)
    return actor


def test_a_restored_actor_numbers_its_versions_past_the_lost_actors(tmp_path):
    lost = actor_of()
    algorithm = lost._built.algorithm
    for _ in range(3):
        algorithm.new_version()
    path = tmp_path / "checkpoint" / checkpoint_format.MODEL_FILE
    path.parent.mkdir()
    algorithm.write_checkpoint(path, {})  # the head's last checkpoint: version 3
    files = checkpoint_format.read_files(path)
    lost.close(5)
    assert actor_of(files)._built.algorithm.version == 3  # a restart of the server: the checkpoint's own
    assert actor_of(files, versions_after=7)._built.algorithm.version == 8  # the lost actor handed out 4..7
    assert actor_of(files, versions_after=2)._built.algorithm.version == 3  # never back


def test_the_head_tells_the_new_actor_the_last_version_it_saw(monkeypatch):
    fake_ray(monkeypatch)
    built = []

    class Options:
        def remote(self):
            made = handle(lambda units, wait, after: reply())
            made.build = types.SimpleNamespace(remote=lambda *args: (lambda: built.append(args[-1]) or {}))
            return made

    monkeypatch.setattr(revival, "REMOTE_ACTOR", types.SimpleNamespace(options=lambda **kwargs: Options()))

    def died(units, wait, weights_after):
        raise ray_errors.RayActorError()

    head = learner(died)
    head.algorithm.version = 7  # as of the lost actor's last reply
    head.start(None)
    try:
        head.ask(Request(Kind.BEGIN, actor=1, obs=[0.0] * 4))  # finds the actor dead: the sender replaces it
        deadline = time.monotonic() + 10
        while not built and time.monotonic() < deadline:
            time.sleep(0.05)
        assert built == [7]
    finally:
        head.close(timeout=1.0)
