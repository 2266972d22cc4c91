"""A greedy plan is plain data: built from an SB3 policy (`greedy_policy.network_of`), sent as JSON, and run on the
policy's published weights by a process that cannot import torch, it gives the policy's own deterministic
actions (`shepherd.policies.greedy_network`)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from sb3_contrib.qrdqn.policies import QRDQNPolicy
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.dqn.policies import DQNPolicy
from stable_baselines3.sac.policies import SACPolicy

from shepherd.agents.greedy_policy import network_of, weights_of
from shepherd.policies.greedy_network import GreedyNetwork, GreedyNetworkError

ROOT = Path(__file__).resolve().parents[2]
OBS = spaces.Box(-2.0, 2.0, (5,), np.float32)


def lr(_):
    return 3e-4


POLICIES = {
    "PPO, Discrete": lambda: ActorCriticPolicy(OBS, spaces.Discrete(3), lr),
    "PPO, MultiDiscrete": lambda: ActorCriticPolicy(OBS, spaces.MultiDiscrete([2, 4, 3]), lr),
    "PPO, MultiBinary": lambda: ActorCriticPolicy(OBS, spaces.MultiBinary(3), lr),
    "PPO, Box": lambda: ActorCriticPolicy(OBS, spaces.Box(-1, 1, (2,), np.float32), lr),
    "SAC": lambda: SACPolicy(OBS, spaces.Box(-1, 1, (2,), np.float32), lr),
    "DQN": lambda: DQNPolicy(OBS, spaces.Discrete(4), lr),
    "QR-DQN": lambda: QRDQNPolicy(OBS, spaces.Discrete(4), lr),
}

RUN_WITHOUT_TORCH = """
import json, sys
import numpy as np
sys.modules["torch"] = None  # importing torch now fails
from shepherd.policies.greedy_network import GreedyNetwork
folder = sys.argv[1]
plan = GreedyNetwork.from_data(json.load(open(folder + "/plan.json")))
arrays = dict(np.load(folder + "/weights.npz", allow_pickle=False))
actions = plan.bind(arrays)(np.load(folder + "/obs.npy", allow_pickle=False))
np.save(folder + "/actions.npy", np.asarray(actions))
print("torch" in sys.modules and sys.modules["torch"] is not None)
"""


@pytest.mark.e2e  # starts another process
@pytest.mark.parametrize("name", list(POLICIES))
def test_a_plan_sent_as_json_gives_the_policys_actions_in_a_process_without_torch(name, tmp_path):
    policy = POLICIES[name]()
    th.manual_seed(0)
    for parameter in policy.parameters():  # weights far from the initial ones, so the actions differ by input
        parameter.data.normal_(0.0, 0.5)
    found = network_of(policy, OBS)
    assert found is not None
    observations = np.random.default_rng(1).uniform(-2, 2, (64, 5)).astype(np.float32)
    with th.no_grad():
        expected = policy._predict(th.as_tensor(observations), deterministic=True).numpy()
    (tmp_path / "plan.json").write_text(json.dumps(found.to_data()))
    arrays = weights_of(policy)
    np.savez(tmp_path / "weights.npz", **{key: arrays[key] for key in found.weight_names()})
    np.save(tmp_path / "obs.npy", observations)
    done = subprocess.run([sys.executable, "-c", RUN_WITHOUT_TORCH, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"  # torch was never imported there
    actions = np.load(tmp_path / "actions.npy")
    assert actions.shape == expected.shape
    assert np.allclose(actions.astype(np.float64), expected, atol=1e-4)
    assert len({tuple(np.atleast_1d(a)) for a in expected}) > 1  # the observations do pick different actions


def test_masked_logits_are_never_picked():
    greedy = GreedyNetwork([("w", None)], {"kind": "argmax"}, takes_masks=True).bind({"w": np.eye(3, dtype=np.float32)})
    masks = np.array([[True, True, False], [False, True, True]])
    assert greedy(np.array([[1, 2, 9], [9, 1, 2]], dtype=np.float32), masks).tolist() == [1, 2]
    assert greedy(np.array([[1, 2, 9], [9, 1, 2]], dtype=np.float32)).tolist() == [2, 0]  # unmasked


@pytest.mark.parametrize("data, says", [
    ({"steps": ["softplus"], "head": {"kind": "argmax"}}, "unknown activation 'softplus'"),
    ({"steps": [], "head": {"kind": "sample"}}, "unknown head 'sample'"),
    ({"steps": [[1, 2]], "head": {"kind": "argmax"}}, "a step is an activation's name or [weight, bias]"),
    ({"head": {"kind": "argmax"}}, "not a greedy plan: KeyError"),
])
def test_plan_data_it_cannot_run_is_refused_with_what_is_wrong(data, says):
    with pytest.raises(GreedyNetworkError, match=re.escape(says)):
        GreedyNetwork.from_data(data)


def test_a_board_shaped_observation_through_the_flatten_extractor_has_a_greedy_copy():
    # PettingZoo's classic games observe boards (Connect Four: 6 x 7 x 2); SB3's MlpPolicy flattens them, and so
    # does the numpy copy, which self-play's snapshots need (shepherd.graph.selfplay): without it none is taken
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    board = spaces.Box(0.0, 1.0, (6, 7, 2), np.float32)
    policy = MaskableActorCriticPolicy(board, spaces.Discrete(7), lr)
    th.manual_seed(0)
    for parameter in policy.parameters():
        parameter.data.normal_(0.0, 0.5)
    found = network_of(policy, board)
    assert found is not None
    obs = np.random.default_rng(1).integers(0, 2, (16, 6, 7, 2)).astype(np.float32)
    masks = np.random.default_rng(2).integers(0, 2, (16, 7)).astype(bool)
    masks[:, 3] = True
    with th.no_grad():
        expected = policy._predict(th.as_tensor(obs), deterministic=True, action_masks=masks).numpy()
    assert (found.bind(weights_of(policy))(obs, masks) == expected).all()
    image = spaces.Box(0, 255, (8, 8, 3), np.uint8)  # SB3 divides an image by 255 first: not served this way
    assert network_of(ActorCriticPolicy(image, spaces.Discrete(2), lr), image) is None


def test_a_plan_of_a_distributions_logits_samples_it_under_the_masks_given_a_generator():
    """Self-play's opponents draw their actions (`GreedyNetwork.samples`): softmax(logits) over the unmasked
    actions, a masked one never; without a generator, or for DQN's Q-values, the argmax as before."""
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float32))
    plan = GreedyNetwork([("w", "b")], {"kind": "argmax"}, takes_masks=True, samples=True)
    greedy = plan.bind({"w": np.zeros((4, 1), dtype=np.float32), "b": logits})
    rows = np.zeros((20_000, 1), dtype=np.float32)
    masks = np.tile([True, True, False, True], (len(rows), 1))
    drawn = greedy(rows, masks, np.random.default_rng(0))
    counts = np.bincount(drawn, minlength=4) / len(rows)
    assert counts[2] == 0  # masked
    assert np.allclose(counts, [0.5 / 0.85, 0.3 / 0.85, 0, 0.05 / 0.85], atol=0.015)
    assert np.array_equal(drawn, greedy(rows, masks, np.random.default_rng(0)))  # the seed decides
    assert set(greedy(rows, masks).tolist()) == {0}  # no generator: greedy
    q_values = GreedyNetwork([("w", "b")], {"kind": "argmax"}).bind({"w": np.zeros((4, 1), np.float32), "b": logits})
    assert set(q_values(rows, None, np.random.default_rng(0)).tolist()) == {0}  # not a distribution: greedy
    assert GreedyNetwork.from_data(plan.to_data()).samples


def test_the_plans_of_sb3s_categorical_policies_sample_and_of_dqns_do_not():
    discrete = spaces.Discrete(3)
    ppo = ActorCriticPolicy(OBS, discrete, lr)
    dqn = DQNPolicy(OBS, discrete, lr)
    assert network_of(ppo, OBS).samples and not network_of(dqn, OBS).samples
    with pytest.raises(GreedyNetworkError, match="no distribution to sample"):
        GreedyNetwork([], {"kind": "tanh"}, samples=True)
