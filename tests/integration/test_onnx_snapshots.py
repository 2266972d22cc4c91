"""An image agent's greedy snapshot for front ends (`shepherd.policies.onnx_snapshot`): its greedy ONNX file, built by
the learner per version (`GREEDY_FILE`), acts as the server's deterministic predict does (the learner's greedy
answer to the same frame), one frame or a vector step's batch at a time."""

from __future__ import annotations

import numpy as np
import pytest

from shepherd.agents import ActMode, build_learner
from shepherd.agents.export.behaviour import GREEDY_FILE
from shepherd.definition import Filters
from shepherd.agents.export.export import NotExportable
from shepherd.policies.greedy_snapshot import GreedySnapshot, SnapshotError
from shepherd.policies.onnx_snapshot import OnnxSnapshot, encode, snapshot_from_bytes
from shepherd.wire.spaces import parse_space
from tests.frames import frames

EYES = parse_space(["Image", [36, 36, 3]])
PARAMS = {"seed": 1, "n_steps": 16, "batch_size": 16, "n_epochs": 1}


@pytest.mark.parametrize("algorithm, params", [("PPO", PARAMS), ("DQN", {"seed": 3, "learning_starts": 8,
                                                                           "batch_size": 8, "train_freq": 4,
                                                                           "buffer_size": 200})])
def test_an_image_agents_greedy_file_acts_as_the_learners_greedy_step(algorithm, params):
    learner = build_learner(algorithm, "eyes", EYES, parse_space(4), params, None)
    assert learner.greedy is None  # convolutions: no numpy snapshot; the learner answers greedy steps with torch
    learner.start()
    try:
        rng = np.random.default_rng(0)
        learner.begin_episode(1, frames(rng, 1)[0], ActMode.EXPLORE).result(30)
        for frame in frames(rng, 20):  # past an update: the weights moved from their initial values
            reward = float(frame[..., 0].mean() > frame[..., 1].mean())
            learner.step(1, reward, frame, ActMode.EXPLORE).result(30)
        version, data = learner.behaviour(GREEDY_FILE, "eyes", algorithm).result(60)
        assert version == learner.policy_version and version > 0
        snapshot = snapshot_from_bytes(encode("1@1", version, data))
        assert isinstance(snapshot, OnnxSnapshot) and (snapshot.name, snapshot.version) == ("1@1", version)
        assert snapshot.observation_space == EYES
        assert (snapshot.mask_space is None) == (algorithm == "PPO")  # DQN's files take masks (Shepherd's)
        observed = frames(rng, 40)
        server = [int(learner.begin_episode(100 + i, frame, ActMode.GREEDY).result(30)) for i, frame in
                  enumerate(observed)]
        assert len(set(server)) > 1, server  # a comparison that could fail
        assert [int(snapshot.act(frame)) for frame in observed] == server
        assert np.asarray(snapshot.act_batch(list(observed[:8]))).reshape(-1).tolist() == server[:8]
        assert learner.policy_version == version  # greedy steps changed nothing
    finally:
        learner.close()


DQN_PARAMS = {"seed": 3, "learning_starts": 8, "batch_size": 8, "train_freq": 4, "buffer_size": 200}


@pytest.mark.parametrize("algorithm, params", [("MaskablePPO", PARAMS), ("DQN", DQN_PARAMS),
                                               ("QRDQN", {**DQN_PARAMS, "policy_kwargs": {"n_quantiles": 5}})])
def test_a_masked_image_agents_greedy_file_never_picks_a_masked_action(algorithm, params):
    learner = build_learner(algorithm, "eyes", EYES, parse_space(4), params, None)
    learner.start()
    try:
        version, data = learner.behaviour(GREEDY_FILE, "eyes", algorithm).result(60)
        snapshot = snapshot_from_bytes(encode("1@1", version, data))
        assert snapshot.mask_space is not None
        rng = np.random.default_rng(3)
        for i, frame in enumerate(frames(rng, 16)):
            mask = rng.random(4) < 0.5
            mask[rng.integers(4)] = True
            chosen = int(snapshot.act(frame, mask))
            assert mask[chosen] and chosen == int(learner.begin_episode(i, frame, ActMode.GREEDY, mask).result(30))
    finally:
        learner.close()


def test_a_frame_stacking_agent_has_no_greedy_file():
    """Its stacks are each actor's past frames, kept by the learner: the file has no input for them."""
    learner = build_learner("PPO", "eyes", EYES, parse_space(4), PARAMS, None, Filters(frame_stack=4))
    learner.start()
    try:
        with pytest.raises(NotExportable, match="frame"):
            learner.behaviour(GREEDY_FILE, "eyes", "PPO").result(60)
    finally:
        learner.close()


def test_a_numpy_snapshots_bytes_still_read_as_one_and_damaged_ones_are_refused():
    learner = build_learner("PPO", "t", parse_space([[5], "-inf", "inf"]), parse_space(2), {"seed": 0}, None)
    learner.start()
    try:
        learner.begin_episode(1, np.zeros(5, np.float32), ActMode.GREEDY).result(10)
        data = learner.greedy.snapshot_bytes("1@1", parse_space([[5], "-inf", "inf"]), parse_space(2))
    finally:
        learner.close()
    assert isinstance(snapshot_from_bytes(data), GreedySnapshot)
    for damaged in (b"", b"not json\n", encode("1@1", 3, b"not an onnx file")):
        with pytest.raises(SnapshotError):
            snapshot_from_bytes(damaged)
