"""DQN and QR-DQN with action masks (`shepherd.agents.sb3.value_masks`): a real learner keeps to each step's
allowed actions when it acts at random, explores and acts greedily (its numpy snapshot too), and its target's max
runs over the actions the next observation allows: each sampled transition brings its own next mask, also with
several envs."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer

from shepherd.agents import ActMode, build_learner
from shepherd.agents.sb3.value_masks import DISALLOWED, MaskableDQNAdapter, MaskedReplayBuffer, MaskedTarget
from shepherd.wire.spaces import parse_space

OBS = parse_space([[3], -1, 1])
PARAMS = {"seed": 0, "learning_starts": 30, "batch_size": 16, "train_freq": 2, "buffer_size": 500,
          "exploration_fraction": 0.5, "target_update_interval": 20}


def random_mask(rng: np.random.Generator) -> np.ndarray:
    mask = rng.random(4) < 0.4
    mask[rng.integers(4)] = True
    return mask


@pytest.mark.parametrize("algorithm", ["DQN", "QRDQN"])
def test_a_masked_dqn_acts_only_allowed_actions_at_random_exploring_and_greedy(algorithm):
    params = {**PARAMS, "policy_kwargs": {"n_quantiles": 7}} if algorithm == "QRDQN" else PARAMS
    learner = build_learner(algorithm, "grid", OBS, parse_space(4), params, 300)  # epsilon falls over 150 steps
    learner.start()
    try:
        adapter = learner.algorithm
        assert isinstance(adapter, MaskableDQNAdapter)
        rng = np.random.default_rng(1)
        chosen = []
        mask = random_mask(rng)
        action = int(learner.begin_episode(1, rng.uniform(-1, 1, 3), ActMode.EXPLORE, mask).result(30))
        for step in range(200):  # heatup (30 steps), then epsilon-greedy, trained every 2 steps
            chosen.append((mask, action))
            obs = rng.uniform(-1, 1, 3)
            mask = random_mask(rng)
            action = int(learner.step(1, float(action == 0), obs, ActMode.EXPLORE, mask).result(30))
        assert all(m[a] for m, a in chosen), [(m.tolist(), a) for m, a in chosen if not m[a]]
        assert len({a for _, a in chosen}) > 1
        assert learner.steps > PARAMS["learning_starts"] and adapter.model.exploration_rate < 1.0
        snapshots = 0
        for i in range(40):  # greedy: the learner's forward pass, and its numpy snapshot
            obs, mask = rng.uniform(-1, 1, 3), random_mask(rng)
            served = int(learner.begin_episode(100 + i, obs, ActMode.GREEDY, mask).result(30))
            with th.no_grad():
                seen = th.as_tensor(obs, dtype=th.float32)[None]
                q = (adapter.model.q_net(seen)[0] if algorithm == "DQN" else
                     adapter.model.quantile_net(seen)[0].mean(dim=0)).numpy()  # QR-DQN: the quantiles' mean
            assert mask[served] and served == int(np.argmax(np.where(mask, q, -np.inf)))
            answered = learner.greedy.act(obs, mask)  # None until the snapshot of the latest weights is built
            assert answered is None or int(answered[0]) == served
            snapshots += answered is not None
        assert snapshots > 0  # the numpy snapshot answered under masks (each answer the learner's)
        # the replay buffer holds each transition's next mask (those stored so far, column 0)
        buffer = adapter.model.replay_buffer
        assert isinstance(buffer, MaskedReplayBuffer)
        stored = buffer.next_masks[:buffer.pos, 0]
        assert stored.shape == (buffer.pos, 4) and not stored.all() and stored.any(axis=1).all()
    finally:
        learner.close()


def test_each_sampled_transition_brings_its_next_mask_to_the_target():
    """Transition i of env e has next observation (i, e) and a next mask allowing action (i + e) % 4 only; a
    sample's masks follow its rows, with several envs (SB3 draws each sample's env inside its sampling)."""
    space = spaces.Box(-1000, 1000, (2,), np.float32)
    buffer = MaskedReplayBuffer(64, space, spaces.Discrete(4), device="cpu", n_envs=3)
    for i in range(50):
        buffer.next_masks[buffer.pos] = [np.eye(4, dtype=bool)[(i + e) % 4] for e in range(3)]
        buffer.add(np.zeros((3, 2)), np.array([[i, e] for e in range(3)], dtype=np.float32), np.zeros((3, 1)),
                   np.zeros(3), np.zeros(3), [{}] * 3)
    np.random.seed(7)
    samples = buffer.sample(32)
    rows = samples.next_observations.numpy().astype(int)
    expected = np.stack([np.eye(4, dtype=bool)[(i + e) % 4] for i, e in rows])
    assert buffer.sampled is not None and np.array_equal(buffer.sampled.numpy(), expected)
    assert len({tuple(r) for r in rows}) > 10  # many rows and envs drawn
    # the target network as DQN's train() calls it: the disallowed actions' values never the max
    network = th.nn.Linear(2, 4)
    target = MaskedTarget(network, buffer)
    values = target(samples.next_observations)
    assert np.array_equal(values.argmax(dim=1).numpy(), expected.argmax(axis=1))
    assert (values[~buffer.sampled] == DISALLOWED).all()
    assert list(target.parameters()) == list(network.parameters())  # the target update copies the same tensors
    # QR-DQN's target: (batch, quantiles, actions), every quantile of a disallowed action set
    quantiles = MaskedTarget(th.nn.Sequential(th.nn.Linear(2, 12), th.nn.Unflatten(1, (3, 4))), buffer)
    values = quantiles(samples.next_observations)
    assert values.shape == (32, 3, 4) and (values.permute(0, 2, 1)[~buffer.sampled] == DISALLOWED).all()
    assert np.array_equal(values.mean(dim=1).argmax(dim=1).numpy(), expected.argmax(axis=1))
    # without SB3's own draw changed: the same seed samples the same rows from a plain buffer
    plain = ReplayBuffer(64, space, spaces.Discrete(4), device="cpu", n_envs=3)
    plain.__dict__.update({k: v for k, v in buffer.__dict__.items() if k not in ("next_masks", "sampled")})
    np.random.seed(7)
    assert np.array_equal(plain.sample(32).next_observations.numpy(), samples.next_observations.numpy())


def test_a_checkpoints_replay_buffer_keeps_its_masks_and_one_of_before_masks_is_taken_over():
    learner = build_learner("DQN", "grid", OBS, parse_space(4), PARAMS, None)
    learner.start()
    try:
        adapter = learner.algorithm
        rng = np.random.default_rng(2)
        learner.begin_episode(1, rng.uniform(-1, 1, 3), ActMode.EXPLORE, random_mask(rng)).result(30)
        for _ in range(40):
            learner.step(1, 0.0, rng.uniform(-1, 1, 3), ActMode.EXPLORE, random_mask(rng)).result(30)
        buffer = adapter.model.replay_buffer
        again = pickle.loads(pickle.dumps(buffer))  # as the checkpoint writes it beside the zip
        assert type(again) is MaskedReplayBuffer and np.array_equal(again.next_masks, buffer.next_masks)
        # a replay buffer of before masks (SB3's own) is taken over, every stored transition allowing all
        plain = ReplayBuffer.__new__(ReplayBuffer)
        plain.__dict__.update({k: v for k, v in buffer.__dict__.items() if k not in ("next_masks", "sampled")})
        adapter.model.replay_buffer = plain
        adapter._use_masked_buffer()
        taken = adapter.model.replay_buffer
        assert isinstance(taken, MaskedReplayBuffer) and taken.next_masks.all() and taken.pos == buffer.pos
        assert taken.observations is buffer.observations and adapter._replay is taken
        assert adapter.model.q_net_target.buffer is taken
    finally:
        learner.close()


async def test_a_roles_time_limit_brings_its_mask_to_the_dqn_target(tmp_path):
    """In an environment with roles, a role's end at a time limit may carry its observation's mask (sent with it,
    as with any observation): it is the last transition's next mask."""
    from shepherd.environments import EnvironmentSpec
    from shepherd.graph import AgentSpec, GraphManager, Schedule
    from shepherd.graph.local import serving_here
    from shepherd.storage import Store

    graph = GraphManager(owner="tests", agents=[AgentSpec("q", "DQN", [[3], -1, 1], 4, {"seed": 0})],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("duel", {"p0": "q", "p1": f"{__name__}:first_allowed"},
                                                       "alternate"),))
    store = Store(tmp_path / "data")
    keys = graph.create_graph(store, serving_here())
    final = [False, True, False, True]
    try:
        session = graph.login(keys["environment duel"])
        obs, allowed = [0.0, 0.0, 0.0], [True] * 4
        for body in ({"obs": {"p0": obs}, "action_mask": {"p0": allowed}}, {"obs": {"p1": obs}},
                     {"obs": {"p0": obs}, "reward": {"p0": 1.0}, "action_mask": {"p0": allowed}},
                     {"obs": {"p0": obs, "p1": obs}, "truncated": {"p0": True, "p1": True},
                      "action_mask": {"p0": final}},
                     {"obs": {"p0": obs}, "action_mask": {"p0": allowed}}):  # the next episode: after the end
            await graph.step(session, session.parse_step(body))
        buffer = graph.runtime("q").learner.model.replay_buffer
        assert buffer.pos == 2 and bool(buffer.timeouts[1, 0])
        assert buffer.next_masks[1, 0].tolist() == final and buffer.next_masks[0, 0].all()
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


def first_allowed(obs, mask):
    return 0
