"""A learner's greedy snapshot sent to another process (`GreedyPolicy.snapshot_bytes`, `shepherd.policies.greedy_snapshot`) acts
as the learner's own greedy snapshot does: the same actions for the same observations (and masks), with the
observation statistics and the action transform of the moment it was taken."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from shepherd.agents import ActMode, build_learner
from shepherd.definition import Filters
from shepherd.policies.greedy_snapshot import GreedySnapshot, SnapshotError
from shepherd.wire.spaces import parse_space

OBS = parse_space([[5], "-inf", "inf"])


@pytest.mark.parametrize("algorithm, action_spec, normalize", [
    ("PPO", 3, False), ("PPO", [[2], -1, 1], True), ("PPO", ["MultiDiscrete", [3, 4]], False),
    ("PPO", ["MultiBinary", 3], False), ("DQN", 3, True), ("SAC", [[2], -1, 3], False), ("TD3", [[2], 0, 5], True),
    ("QRDQN", 3, False), ("TQC", [[2], -1, 1], False),
])
def test_a_snapshot_acts_as_the_learners_greedy_actor(algorithm, action_spec, normalize):
    params = {"seed": 3, "policy_kwargs": {"net_arch": [32, 16]}}
    params |= {"learning_starts": 8, "batch_size": 8} if algorithm not in ("PPO",) else {"n_steps": 16, "batch_size": 16}
    action_space = parse_space(action_spec)
    learner = build_learner(algorithm, "t", OBS, action_space, params, None, Filters(normalize_observations=normalize))
    learner.start()
    try:
        rng = np.random.default_rng(1)
        learner.begin_episode(1, rng.normal(2.0, 3.0, size=5).astype(np.float32), ActMode.EXPLORE).result(10)
        for _ in range(40):  # weights and observation statistics move away from their initial values
            learner.step(1, float(rng.normal()), rng.normal(2.0, 3.0, size=5).astype(np.float32),
                         ActMode.EXPLORE).result(10)
        greedy = learner.greedy
        assert greedy is not None and greedy.portable
        learner.begin_episode(2, np.zeros(5, np.float32), ActMode.GREEDY).result(10)  # publish the weights
        data = greedy.snapshot_bytes("3/arm@1", OBS, action_space)
        assert data is not None
        snapshot = GreedySnapshot.from_bytes(data)
        assert snapshot.name == "3/arm@1" and snapshot.version == learner.algorithm.version
        assert greedy.snapshot_bytes("3/arm@1", OBS, action_space, newer_than=snapshot.version) is None
        for row in rng.normal(2.0, 3.0, size=(32, 5)).astype(np.float32):
            own = greedy.act(row)
            assert own is not None and own[1] == snapshot.version
            ours = snapshot.act(row)
            assert np.shape(ours) == np.shape(own[0])
            assert np.allclose(np.asarray(ours, np.float64), np.asarray(own[0], np.float64), atol=1e-5)
    finally:
        learner.close()


def test_a_masked_policys_snapshot_never_picks_a_masked_action():
    action_space = parse_space(4)
    learner = build_learner("MaskablePPO", "t", OBS, action_space, {"seed": 0, "n_steps": 16, "batch_size": 16}, None)
    learner.start()
    try:
        learner.begin_episode(1, np.zeros(5, np.float32), ActMode.GREEDY).result(10)
        snapshot = GreedySnapshot.from_bytes(learner.greedy.snapshot_bytes("1@1", OBS, action_space))
        assert snapshot.mask_space is not None
        rng = np.random.default_rng(0)
        for _ in range(32):
            row, mask = rng.normal(size=5).astype(np.float32), rng.random(4) < 0.5
            mask[rng.integers(4)] = True
            assert mask[snapshot.act(row, mask)]
            assert snapshot.act(row, mask) == learner.greedy.act(row, mask)[0]
    finally:
        learner.close()


@pytest.mark.parametrize("damaged", [b"", b"{}\n", b'{"format": 2}\n', b"not json\n"])
def test_bytes_that_are_not_a_snapshot_are_refused(damaged):
    with pytest.raises(SnapshotError):
        GreedySnapshot.from_bytes(damaged)


def test_cut_off_arrays_are_refused():
    learner = build_learner("PPO", "t", OBS, parse_space(2), {"seed": 0}, None)
    learner.start()
    try:
        learner.begin_episode(1, np.zeros(5, np.float32), ActMode.GREEDY).result(10)
        data = learner.greedy.snapshot_bytes("1@1", OBS, parse_space(2))
    finally:
        learner.close()
    with pytest.raises(SnapshotError, match="cut off"):
        GreedySnapshot.from_bytes(data[:-4])


@pytest.mark.e2e  # starts another process
def test_a_front_end_runs_snapshots_without_torch():
    code = ("import sys, shepherd.front.app, shepherd.front.snapshot_cache, shepherd.policies.greedy_snapshot;"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'stable_baselines3', 'sb3_contrib')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
