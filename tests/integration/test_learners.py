"""The pooled SB3 learners on tiny budgets: segments, waiting, handover, bootstrapping, checkpoints."""

import time

import numpy as np
import pytest
import torch as th

from shepherd.agents import Kind, Request, ActMode, AgentFailed, build_learner
from shepherd.agents import greedy_policy
from shepherd.agents.greedy_policy import agrees, greedy_function
from shepherd.wire.spaces import parse_space

OBS = parse_space([[4], "-inf", "inf"])
ACT = parse_space(2)
EXPLORE, GREEDY, RANDOM = ActMode.EXPLORE, ActMode.GREEDY, ActMode.RANDOM


def obs(value: float) -> np.ndarray:
    return np.full(4, value, dtype=np.float32)


@pytest.fixture
def learners():
    made = []

    def make(algorithm, total=None, **params):
        learner = build_learner(algorithm, "test", OBS, ACT, {"seed": 0, **params}, total)
        learner.start()
        made.append(learner)
        return learner

    yield make
    for learner in made:
        learner.close()


def ppo(make, **params):
    return make("PPO", n_envs=2, n_steps=4, batch_size=8, n_epochs=1, **params)


def test_ppo_fills_segments_then_trains_and_answers_the_waiting(learners):
    learner = ppo(learners)
    # after the update actors 1 and 2 still hold both segments: the third gets one when a stalled actor hands
    # its own over (2 s, not 5; still far longer than the 0.6 s the waits below take)
    learner.algorithm.handover_timeout = 2.0
    futures = [learner.begin_episode(actor, obs(actor), EXPLORE) for actor in (1, 2)]
    assert all(f.result(10) in (0, 1) for f in futures)
    for step in range(3):  # each actor fills its own segment: rows 0..3
        for actor in (1, 2):
            learner.step(actor, 1.0, obs(step), EXPLORE).result(10)
    third = learner.begin_episode(3, obs(9), EXPLORE)  # no free segment: waits for the update
    with pytest.raises(TimeoutError):
        third.result(0.3)
    assert learner.model._n_updates == 0
    first = learner.step(1, 1.0, obs(5), EXPLORE)  # completes actor 1's segment: it waits too
    with pytest.raises(TimeoutError):
        first.result(0.3)
    assert not third.done()
    learner.step(2, 1.0, obs(5), EXPLORE).result(10)  # completes the rollout: update, then answers
    assert third.result(10) in (0, 1) and first.result(10) in (0, 1)
    assert learner.model._n_updates == 1 and learner.steps == 8


def test_ppo_bootstraps_a_time_limit_and_a_vanished_session(learners):
    learner = ppo(learners, gamma=0.5)
    captured = {}
    real_compute = learner.algorithm.buffer.compute_returns_and_advantage

    def capture(last_values, dones):  # runs just before the update, with the rollout's policy
        captured["rewards"] = learner.algorithm.buffer.rewards.copy()
        captured["starts"] = learner.algorithm.buffer.episode_starts.copy()
        captured["dones"] = dones.copy()
        with th.no_grad():
            values = learner.model.policy.predict_values(th.as_tensor(np.stack([obs(2), obs(4)])))
        captured["v_terminal"], captured["v_pending"] = values.flatten().tolist()
        real_compute(last_values, dones)

    learner.algorithm.buffer.compute_returns_and_advantage = capture
    # actor 1: a 2-step episode cut by a time limit, segment 0 rows 0-1
    learner.begin_episode(1, obs(0), EXPLORE).result(10)
    learner.step(1, 1.0, obs(1), EXPLORE).result(10)
    learner.end_episode(1, 1.0, obs(2), True, EXPLORE)
    # actor 2: takes segment 0 at row 2, steps once, then vanishes with its row 3 pending
    learner.begin_episode(2, obs(3), EXPLORE).result(10)
    learner.step(2, 1.0, obs(4), EXPLORE).result(10)
    learner.end_actor(2)
    # actor 3: row 3 of segment 0, then all of segment 1, which completes the rollout
    learner.begin_episode(3, obs(5), EXPLORE).result(10)
    for i in range(5):
        learner.step(3, 1.0, obs(6 + i), EXPLORE).result(10)
    rewards, starts = captured["rewards"], captured["starts"]
    assert rewards[0, 0] == 1.0
    assert rewards[1, 0] == pytest.approx(1.0 + 0.5 * captured["v_terminal"], rel=1e-5)  # time limit
    assert starts[2, 0] == 1.0  # actor 2 starts an episode: GAE does not cross from actor 1
    assert rewards[2, 0] == pytest.approx(1.0 + 0.5 * captured["v_pending"], rel=1e-5)  # cut where it left
    assert starts[3, 0] == 1.0  # actor 3 continues the segment: no GAE from actor 2 into it
    assert starts[0, 1] == 0.0 and rewards[3, 1] == 1.0  # actor 3 mid-episode across segments
    assert captured["dones"].tolist() == [0.0, 0.0]


def test_ppo_hands_a_stalled_segment_over(learners):
    learner = ppo(learners)
    learner.algorithm.handover_timeout = 0.2
    learner.begin_episode(1, obs(0), EXPLORE).result(10)
    learner.begin_episode(2, obs(0), EXPLORE).result(10)
    for _ in range(3):
        learner.step(1, 1.0, obs(1), EXPLORE).result(10)
    learner.step(1, 1.0, obs(1), EXPLORE).result(10)  # actor 1's segment is full; it takes... none free
    waiting = learner.begin_episode(3, obs(0), EXPLORE)
    # actor 2 holds segment 1 and never comes back: after the timeout actor 3 takes it over
    assert waiting.result(10) in (0, 1)
    for _ in range(4):
        learner.step(3, 1.0, obs(1), EXPLORE).result(10)
    assert learner.model._n_updates >= 1


def test_greedy_episodes_are_never_learned_from(learners):
    learner = ppo(learners)
    learner.begin_episode(1, obs(0), GREEDY).result(10)
    for _ in range(20):
        learner.step(1, 1.0, obs(1), GREEDY).result(10)
    learner.end_episode(1, 1.0, obs(1), False, GREEDY)
    assert learner.begin_episode(2, obs(0), GREEDY).result(10) in (0, 1)
    assert learner.steps == 0 and learner.model._n_updates == 0


def test_dqn_heatup_replay_buffer_time_limits_and_training(learners):
    learner = learners("DQN", total=1000, learning_starts=6, batch_size=4, train_freq=4, gradient_steps=2,
                       buffer_size=100)
    learner.begin_episode(1, obs(0), RANDOM).result(10)
    for i in range(5):
        learner.step(1, 1.0, obs(i + 1), RANDOM).result(10)
    learner.end_episode(1, 1.0, obs(9), True, RANDOM)  # a time limit
    learner.begin_episode(1, obs(0), EXPLORE).result(10)
    for i in range(6):
        learner.step(1, 1.0, obs(i), EXPLORE).result(10)
    assert learner.begin_episode(2, obs(0), GREEDY).result(10) in (0, 1)
    buffer = learner.model.replay_buffer
    assert learner.steps == 12 and buffer.size() == 12
    assert buffer.dones[5, 0] == 1.0 and buffer.timeouts[5, 0] == 1.0
    assert np.allclose(buffer.next_observations[5, 0], obs(9))
    assert learner.model._n_updates == 4  # 12 steps, trained every 4 after learning_starts: at 8 and 12


def test_checkpoint_restores_weights_optimizer_and_counters(learners, tmp_path):
    for algorithm, params in (("PPO", dict(n_envs=1, n_steps=8, batch_size=8, n_epochs=1)),
                              ("DQN", dict(learning_starts=0, batch_size=4, train_freq=2))):
        learner = learners(algorithm, **params)
        learner.begin_episode(1, obs(0), EXPLORE).result(10)
        for i in range(16):
            learner.step(1, 1.0, obs(i % 3), EXPLORE).result(10)
        path = tmp_path / f"{algorithm}.zip"
        assert learner.checkpoint(path, {"schedule": {"steps": 16}}).result(10) == path
        fresh = build_learner(algorithm, "copy", OBS, ACT, {"seed": 1, **params}, None)
        state = fresh.restore(path)
        assert state["schedule"] == {"steps": 16}
        assert fresh.steps == learner.steps == 16
        assert fresh.model._n_updates == learner.model._n_updates > 0
        for a, b in zip(learner.model.policy.state_dict().values(), fresh.model.policy.state_dict().values()):
            assert th.equal(a, b)
        saved = learner.model.policy.optimizer.state_dict()["state"]
        loaded = fresh.model.policy.optimizer.state_dict()["state"]
        assert saved and all(th.equal(saved[k]["exp_avg"], loaded[k]["exp_avg"]) for k in saved)


def test_a_failing_learner_fails_its_requests_and_stays_failed(learners):
    learner = ppo(learners)

    def explode():  # a fault of the learner itself (an on-policy update that only goes NaN is undone instead)
        raise RuntimeError("loss is NaN")

    learner.model.train = explode
    learner.begin_episode(1, obs(0), EXPLORE).result(10)
    learner.begin_episode(2, obs(0), EXPLORE).result(10)
    for _ in range(3):
        learner.step(1, 1.0, obs(1), EXPLORE).result(10)
        learner.step(2, 1.0, obs(1), EXPLORE).result(10)
    waiting = learner.step(1, 1.0, obs(1), EXPLORE)  # segment full: waits for the update
    last = learner.step(2, 1.0, obs(1), EXPLORE)  # completes the rollout: the update explodes
    for future in (waiting, last):
        with pytest.raises(AgentFailed, match="loss is NaN"):
            future.result(10)
    assert "RuntimeError" in learner.failure
    with pytest.raises(AgentFailed):
        learner.begin_episode(3, obs(0), GREEDY).result(1)


BOX_OBS = parse_space([[3], -1, 1])
BOX_ACT = parse_space([[2], [-1.0, 0.0], [1.0, 10.0]])


def continuous(algorithm, **params):
    learner = build_learner(algorithm, "test", BOX_OBS, BOX_ACT,
                            {"seed": 0, "policy_kwargs": {"net_arch": [8]}, **params}, None)
    learner.start()
    return learner


def test_ornstein_uhlenbeck_noise_is_kept_per_client_and_reset_with_its_episode():
    learner = continuous("DDPG", learning_starts=0, train_freq=10**6, action_noise="ornstein-uhlenbeck",
                         action_noise_sigma=0.05, action_noise_theta=0.15)
    try:
        zero = np.zeros(3, dtype=np.float32)
        mean = np.asarray(learner.begin_episode(9, zero, GREEDY).result(10))
        scaled_mean = learner.model.policy.scale_action(mean)
        np.random.seed(123)  # the worker thread draws the noise from numpy's global generator ...
        draws = np.random.RandomState(123)  # ... which these draws mirror, in the same order
        noise = [np.zeros(2), np.zeros(2)]  # each client's own OU process, as it should be
        expected, got = [], []
        sequence = [(0, "begin"), (1, "begin")] + [(i % 2, "step") for i in range(8)] + [(0, "end"), (0, "begin"),
                                                                                      (1, "step"), (0, "step")]
        for client, what in sequence:
            if what == "end":
                learner.end_episode(client + 1, 0.0, zero, False, EXPLORE)
                noise[client] = np.zeros(2)
                continue
            call = learner.begin_episode if what == "begin" else (
                lambda actor, obs, mode: learner.step(actor, 0.0, obs, mode))
            got.append(np.asarray(call(client + 1, zero, EXPLORE).result(10)))
            noise[client] = (noise[client] + 0.15 * (0 - noise[client]) * 1e-2
                             + 0.05 * np.sqrt(1e-2) * draws.normal(size=2))
            expected.append(learner.model.policy.unscale_action(np.clip(scaled_mean + noise[client], -1, 1)))
        assert np.allclose(np.stack(got), np.stack(expected), atol=1e-5)
        assert not np.allclose(got[2], got[3])  # the two clients' noises differ
    finally:
        learner.close()


def test_box_actions_are_scaled_clipped_and_stored_as_sb3_does():
    learner = continuous("TD3", learning_starts=4, train_freq=10**6, action_noise="normal", action_noise_sigma=5.0)
    try:
        obs3 = np.array([0.1, -0.2, 0.3], dtype=np.float32)
        greedy = np.asarray(learner.begin_episode(1, obs3, GREEDY).result(10))
        with th.no_grad():
            actor_out = learner.model.actor(th.as_tensor(obs3[None])).numpy()[0]
        assert np.allclose(greedy, learner.model.policy.unscale_action(actor_out), atol=1e-6)
        replies = [np.asarray(learner.begin_episode(2, obs3, RANDOM).result(10))]
        replies += [np.asarray(learner.step(2, 0.0, obs3, EXPLORE if i > 3 else RANDOM).result(10)) for i in range(12)]
        learner.end_episode(2, 0.0, obs3, False, EXPLORE)
        learner.begin_episode(3, obs3, GREEDY).result(10)  # a round trip: everything before it is stored
        replies = np.stack(replies)
        assert np.all(replies >= BOX_ACT.low) and np.all(replies <= BOX_ACT.high)
        assert np.any(replies == BOX_ACT.high) and np.any(replies == BOX_ACT.low)  # noise of 5 is clipped
        stored = learner.model.replay_buffer.actions[:13, 0]
        assert np.allclose(stored, learner.model.policy.scale_action(replies), atol=1e-5)  # in [-1, 1]
        assert np.all(np.abs(stored) <= 1)
    finally:
        learner.close()


def test_sac_explores_by_sampling_and_acts_greedily_with_its_mean():
    learner = continuous("SAC", learning_starts=0, train_freq=10**6)
    try:
        obs3 = np.zeros(3, dtype=np.float32)
        learner.begin_episode(1, obs3, EXPLORE).result(10)
        explored = {tuple(np.round(learner.step(1, 0.0, obs3, EXPLORE).result(10), 5)) for _ in range(10)}
        greedy = {tuple(np.round(learner.begin_episode(2 + i, obs3, GREEDY).result(10), 5)) for i in range(5)}
        assert len(explored) == 10 and len(greedy) == 1
        with th.no_grad():
            mean = th.tanh(learner.model.actor.get_action_dist_params(th.as_tensor(obs3[None]))[0]).numpy()[0]
        assert np.allclose(next(iter(greedy)), learner.model.policy.unscale_action(mean), atol=1e-4)
    finally:
        learner.close()


@pytest.mark.parametrize("algorithm", ["SAC", "TD3", "DDPG"])
def test_off_policy_training_follows_train_freq_gradient_steps_and_learning_starts(algorithm):
    learner = continuous(algorithm, learning_starts=10, train_freq=5, gradient_steps=3, batch_size=4)
    try:
        obs3 = np.zeros(3, dtype=np.float32)
        learner.begin_episode(1, obs3, RANDOM).result(10)
        for _ in range(10):
            learner.step(1, 1.0, obs3, RANDOM).result(10)
        assert learner.model._n_updates == 0  # 10 steps: not past learning_starts
        for _ in range(10):
            learner.step(1, 1.0, obs3, EXPLORE).result(10)
        assert learner.steps == 20 and learner.model._n_updates == 6  # trained at 15 and 20, 3 steps each
    finally:
        learner.close()


@pytest.mark.parametrize("kept", [True, False])
def test_sac_checkpoint_keeps_its_entropy_coefficient_and_its_replay_buffer_unless_left_out(tmp_path, kept):
    learner = continuous("SAC", learning_starts=0, batch_size=4, buffer_size=500, checkpoint_replay_buffer=kept)
    try:
        learner.begin_episode(1, np.zeros(3, dtype=np.float32), EXPLORE).result(10)
        for i in range(30):
            learner.step(1, float(i), np.full(3, i / 30, dtype=np.float32), EXPLORE).result(10)
        learner.checkpoint(tmp_path / "sac.zip", {}).result(10)
        fresh = build_learner("SAC", "copy", BOX_OBS, BOX_ACT, {"seed": 1, "policy_kwargs": {"net_arch": [8]},
                                                               "buffer_size": 500}, None)
        fresh.restore(tmp_path / "sac.zip")
        assert learner.model.log_ent_coef.item() != 0.0
        assert fresh.model.log_ent_coef.item() == learner.model.log_ent_coef.item()
        assert (tmp_path / "replay_buffer.pkl").exists() == kept
        if kept:  # the transitions learned from are back, and training goes on at once
            assert fresh.steps == 30 and fresh.algorithm._min_buffer == 1 and fresh.model.replay_buffer.size() == 30
            assert np.array_equal(fresh.model.replay_buffer.rewards, learner.model.replay_buffer.rewards)
        else:  # an empty buffer refills before training
            assert fresh.steps == 30 and fresh.algorithm._min_buffer == 256 and fresh.model.replay_buffer.size() == 0
    finally:
        learner.close()


def test_a_replay_buffer_that_is_not_the_checkpoints_own_is_not_used(tmp_path):
    learner = continuous("SAC", learning_starts=0, batch_size=4, buffer_size=500)
    try:
        learner.begin_episode(1, np.zeros(3, dtype=np.float32), EXPLORE).result(10)
        for i in range(10):
            learner.step(1, 1.0, np.full(3, i / 10, dtype=np.float32), EXPLORE).result(10)
        learner.checkpoint(tmp_path / "first" / "sac.zip", {}).result(10)
        learner.step(1, 1.0, np.zeros(3, dtype=np.float32), EXPLORE).result(10)
        learner.checkpoint(tmp_path / "second" / "sac.zip", {}).result(10)
        # the first zip with the second's buffer, as after a crash between the two writes: refilled (learning_starts)
        (tmp_path / "second" / "replay_buffer.pkl").replace(tmp_path / "first" / "replay_buffer.pkl")
        fresh = build_learner("SAC", "copy", BOX_OBS, BOX_ACT, {"seed": 0, "policy_kwargs": {"net_arch": [8]},
                                                               "buffer_size": 500, "batch_size": 4}, None)
        fresh.restore(tmp_path / "first" / "sac.zip")
        assert fresh.steps == 10 and fresh.model.replay_buffer.size() == 0 and fresh.algorithm._min_buffer == 100
    finally:
        learner.close()


@pytest.mark.parametrize("algorithm, params, reward", [
    ("DQN", dict(learning_starts=0, batch_size=4, train_freq=4, gradient_steps=1, learning_rate=1e30), 1.0),
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # as in production: numpy warns and goes on with inf
def test_an_update_that_makes_the_weights_nan_fails_the_agent_with_the_reason(learners, algorithm, params, reward):
    learner = learners(algorithm, **params)
    learner.begin_episode(1, obs(0), EXPLORE).result(10)
    with pytest.raises(AgentFailed, match="NaN or infinite"):
        for i in range(64):
            learner.step(1, reward, obs(i % 3), EXPLORE).result(10)
    assert "FloatingPointError" in learner.failure and "restart the agent" in learner.failure


@pytest.mark.parametrize("warnings_are_errors", [False, True])
def test_an_on_policy_update_that_goes_nan_is_undone_and_the_agent_serves_on(learners, warnings_are_errors):
    """Every on-policy update is guarded (issue 48, H1, on the server-acting path): rewards of 1e38 overflow
    the loss; the update is undone, the rollout discarded, and the agent keeps its parameters and serves on."""
    import warnings
    learner = learners("PPO", n_envs=1, n_steps=8, batch_size=8, n_epochs=1)
    before = {k: v.clone() for k, v in learner.model.policy.state_dict().items()}
    learner.begin_episode(1, obs(0), EXPLORE).result(10)
    with warnings.catch_warnings():
        warnings.simplefilter("error" if warnings_are_errors else "ignore", RuntimeWarning)
        for i in range(20):
            learner.step(1, 1e38, obs(i % 3), EXPLORE).result(10)
    assert learner.failure is None and learner.policy_version == 0 and learner.algorithm.refused_updates >= 2
    assert all(th.equal(before[k], v) for k, v in learner.model.policy.state_dict().items())
    for i in range(16):  # honest rewards: it learns again
        learner.step(1, 1.0, obs(i % 3), EXPLORE).result(10)
    assert learner.policy_version >= 1 and learner.failure is None


@pytest.mark.parametrize("algorithm", ["PPO", "A2C"])
@pytest.mark.parametrize("action_spec", [3, [[2], -1, 1], ["MultiDiscrete", [3, 4]], ["MultiBinary", 3]])
def test_the_greedy_fast_path_gives_sb3s_deterministic_actions(algorithm, action_spec):
    observation_space = parse_space([[5], "-inf", "inf"])
    learner = build_learner(algorithm, "t", observation_space, parse_space(action_spec), {"seed": 3}, None)
    batch = [np.random.default_rng(i).normal(size=5).astype(np.float32) for i in range(64)]
    with th.no_grad():
        expected = learner.model.policy._predict(th.as_tensor(np.stack(batch)), deterministic=True).numpy()
    requests = [Request(Kind.STEP, 1, obs) for obs in batch]
    assert np.array_equal(learner.algorithm._greedy(requests), expected)


SNAPSHOT_CASES = [
    ("PPO", 3), ("PPO", [[2], -1, 1]), ("PPO", ["MultiDiscrete", [3, 4]]), ("PPO", ["MultiBinary", 3]),
    ("A2C", 3), ("A2C", [[2], -1, 1]), ("DQN", 3), ("SAC", [[2], -1, 1]), ("TD3", [[2], 0, 5]),
    ("DDPG", [[2], -1, 1]), ("QRDQN", 3), ("TQC", [[2], -1, 1]), ("TRPO", 3), ("TRPO", [[2], -1, 1]),
]


@pytest.mark.parametrize("algorithm, action_spec", SNAPSHOT_CASES)
def test_the_greedy_snapshot_gives_sb3s_deterministic_actions(algorithm, action_spec):
    observation_space = parse_space([[5], "-inf", "inf"])
    params = {"seed": 3, "policy_kwargs": {"net_arch": [32, 16], "activation_fn": "relu"}}
    learner = build_learner(algorithm, "t", observation_space, parse_space(action_spec), params, None)
    greedy = greedy_function(learner.model.policy, observation_space)
    assert greedy is not None
    rows = np.random.default_rng(0).normal(size=(64, 5)).astype(np.float32)
    with th.no_grad():
        batch_expected = learner.model.policy._predict(th.as_tensor(rows), deterministic=True).numpy()
    batch_ours = greedy(rows)  # a batch at once (a vector session's), and one row at a time
    assert np.shape(batch_ours) == np.shape(batch_expected)
    for i, row in enumerate(rows):
        expected = batch_expected[i]
        ours = greedy(row[None])[0]
        assert np.allclose(np.asarray(batch_ours[i], dtype=np.float64), np.asarray(ours, dtype=np.float64))
        if np.issubdtype(expected.dtype, np.integer) or algorithm in ("PPO", "A2C") and expected.dtype == bool:
            assert np.array_equal(ours, expected)
        else:
            assert np.allclose(ours, expected, atol=1e-5)
        assert np.shape(ours) == np.shape(expected)
    assert agrees(greedy, learner.model.policy, observation_space)


@pytest.mark.parametrize("algorithm, action_spec, served", [
    ("QRDQN", 3, True), ("TQC", [[2], -2, 2], True), ("TRPO", 3, True), ("CrossQ", [[2], -2, 2], False)])
def test_which_sb3_contrib_learners_answer_greedy_steps_from_a_snapshot(algorithm, action_spec, served):
    """QR-DQN, TQC and TRPO get a snapshot that agrees with the learner's own greedy answers, after
    training too; CrossQ's BatchRenorm layers have none (its learner answers greedy steps)."""
    observation_space = parse_space([[5], "-inf", "inf"])
    params = {"seed": 3, "policy_kwargs": {"net_arch": [32, 16]}}
    params |= {"n_steps": 16, "batch_size": 16} if algorithm == "TRPO" else {"learning_starts": 8, "batch_size": 8}
    learner = build_learner(algorithm, "t", observation_space, parse_space(action_spec), params, None)
    assert (learner.greedy is not None) is served
    learner.start()
    try:
        rng = np.random.default_rng(1)
        learner.begin_episode(1, rng.normal(size=5).astype(np.float32), EXPLORE).result(10)
        for _ in range(40):  # training moves the weights away from their initial ones
            learner.step(1, float(rng.normal()), rng.normal(size=5).astype(np.float32), EXPLORE).result(10)
        assert learner.model._n_updates > 0
        rows = rng.normal(size=(16, 5)).astype(np.float32)
        snapshot_actor, learner.greedy = learner.greedy, None
        by_learner = learner.submit(vector_of(rows, GREEDY)).result(10)  # the learner's own greedy answers
        learner.greedy = snapshot_actor
        learner.model.policy.set_training_mode(False)  # as SB3's predict(): BatchRenorm (CrossQ) in eval mode
        with th.no_grad():  # the policy's deterministic actions
            expected = learner.model.policy._predict(th.as_tensor(rows), deterministic=True).numpy()
        assert np.allclose(np.asarray(by_learner, dtype=np.float64),
                           np.asarray(learner.algorithm.actions.to_env(expected), dtype=np.float64), atol=1e-5)
        if not served:
            return
        learner.begin_episode(2, rows[0], GREEDY).result(10)  # the learner publishes its weights
        inline_answer = learner.greedy.act_batch(list(rows))
        assert inline_answer is not None and inline_answer[1] == learner.algorithm.version
        assert np.allclose(np.asarray(inline_answer[0], dtype=np.float64), np.asarray(by_learner, dtype=np.float64),
                           atol=1e-5)
    finally:
        learner.close()


def vector_of(rows, mode):
    from shepherd.agents import Kind, Request

    return [Request(Kind.BEGIN, 10 + i, row, mode=mode, group=7) for i, row in enumerate(rows)]


def test_no_snapshot_where_numpy_would_not_be_sb3():
    dict_space = parse_space({"a": [[2], -1, 1], "b": 3})
    learner = build_learner("PPO", "t", dict_space, ACT, {"seed": 0}, None)
    assert greedy_function(learner.model.policy, dict_space) is None  # MultiInputPolicy: learner, batched
    big = build_learner("PPO", "t", OBS, ACT, {"seed": 0, "policy_kwargs": {"net_arch": [512, 512]}}, None)
    assert greedy_function(big.model.policy, OBS) is None  # too large to run on the event loop
    elu = build_learner("DQN", "t", OBS, ACT, {"seed": 0, "policy_kwargs": {"activation_fn": "elu"}}, None)
    assert greedy_function(elu.model.policy, OBS) is None


def test_greedy_steps_are_answered_inline_with_the_weights_of_the_last_update(learners):
    learner = ppo(learners)
    assert learner.begin_episode(9, obs(0.1), GREEDY).result(10) is not None
    before = learner.algorithm.latest_weights()
    assert before is not None  # published by the worker when a greedy episode began
    answer = learner.step(9, 1.0, obs(0.2), GREEDY)
    assert answer.done() and answer.policy_version == 0  # answered at once, on this thread
    for actor in (1, 2):  # a full rollout from two training sessions: an update
        learner.begin_episode(actor, obs(actor), EXPLORE).result(10)
        for _ in range(3):
            learner.step(actor, 1.0, obs(actor), EXPLORE).result(10)
    learner.step(1, 1.0, obs(1), EXPLORE)
    learner.step(2, 1.0, obs(2), EXPLORE)
    deadline = time.monotonic() + 10
    while learner.model._n_updates == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert learner.model._n_updates > 0
    renewed = learner.algorithm.latest_weights()
    assert renewed is not None and renewed.version == learner.algorithm.version > before.version  # in use
    row = np.linspace(-1, 1, 4).astype(np.float32)
    with th.no_grad():
        expected = learner.model.policy._predict(th.as_tensor(row[None]), deterministic=True).numpy()[0]
    answer = learner.step(9, 0.0, row, GREEDY)
    assert answer.done() and answer.result(0) == expected and answer.policy_version == renewed.version


def test_a_failed_agent_answers_greedy_steps_with_its_failure(learners):
    learner = ppo(learners)
    learner.begin_episode(9, obs(0.1), GREEDY).result(10)
    assert learner.step(9, 1.0, obs(0.2), GREEDY).done()  # the snapshot answers
    learner.failure = "RuntimeError: boom"
    with pytest.raises(AgentFailed, match="boom"):
        learner.step(9, 1.0, obs(0.2), GREEDY).result(10)


def test_a_snapshot_that_disagrees_with_the_policy_is_never_used(learners, monkeypatch):
    monkeypatch.setattr(greedy_policy.GreedyNetwork, "bind", lambda plan, arrays: lambda obs: np.int64(7))
    learner = ppo(learners)
    assert learner.greedy is None
    assert learner.begin_episode(9, obs(0.1), GREEDY).result(10) in (0, 1)
    assert learner.step(9, 1.0, obs(0.2), GREEDY).result(10) in (0, 1)  # answered by the worker


def vector(kind, actors, mode=EXPLORE, group=1):
    from shepherd.agents import Kind, Request

    return [Request(getattr(Kind, kind), actor, obs(0.1 * actor), 1.0, False, mode, group=group) for actor in actors]


def test_a_vector_step_gets_one_future_of_every_action_in_order(learners):
    learner = ppo(learners)
    first = learner.submit(vector("BEGIN", (1, 2)))
    assert [a in (0, 1) for a in first.result(10)] == [True, True]
    from shepherd.agents import Kind, Request

    ended = [Request(Kind.END, 1, obs(0.3), 1.0, True, EXPLORE, group=1)] + vector("BEGIN", (1,)) + vector("STEP", (2,))
    actions = learner.submit(ended).result(10)  # an END answers nothing: two actions, env 1's then env 2's
    assert len(actions) == 2 and learner.steps == 2


def test_a_vector_step_of_a_failed_or_closed_learner_is_refused_whole(learners):
    learner = ppo(learners)
    learner.failure = "RuntimeError: boom"
    with pytest.raises(AgentFailed, match="boom"):
        learner.submit(vector("BEGIN", (1, 2, 3))).result(10)
    other = ppo(learners)
    other.close()
    from shepherd.agents import AgentClosed

    with pytest.raises(AgentClosed):
        other.submit(vector("BEGIN", (1, 2))).result(10)


def test_greedy_vector_steps_are_answered_from_the_snapshot_as_the_learner_would(learners):
    learner = ppo(learners)
    by_learner = learner.submit(vector("BEGIN", (1, 2, 3), GREEDY)).result(10)  # publishes the weights
    inline_future = learner.submit(vector("STEP", (1, 2, 3), GREEDY))
    assert inline_future.done()  # answered on this thread, from one numpy batch
    assert inline_future.result() == by_learner and inline_future.policy_version == learner.algorithm.version


def test_envs_beyond_the_segments_act_unlearned_and_are_counted_with_one_warning(learners, caplog):
    learner = ppo(learners)  # 2 segments
    with caplog.at_level("WARNING", logger="shepherd.agents.sb3.on_policy"):
        assert len(learner.submit(vector("BEGIN", (1, 2, 3))).result(10)) == 3
        assert len(learner.submit(vector("STEP", (1, 2, 3))).result(10)) == 3
    assert learner.algorithm.unlearned_steps == 2  # env 3, twice: no segment was free for it
    warnings = [r for r in caplog.records if "not learned from" in r.getMessage()]
    assert len(warnings) == 1 and "n_envs" in warnings[0].getMessage()


def test_a_checkpoint_holds_the_rollout_as_every_sessions_logout_would_leave_it(learners, tmp_path):
    learner = learners("PPO", n_envs=2, n_steps=16, batch_size=8, n_epochs=1)
    for actor, steps in ((1, 5), (2, 3)):  # both mid-segment, each with a row waiting for its reward
        learner.begin_episode(actor, obs(0), EXPLORE).result(10)
        for i in range(steps):
            learner.step(actor, 1.0, obs(i + 1), EXPLORE).result(10)
    learner.checkpoint(tmp_path / "model.zip", {}).result(10)
    fresh = build_learner("PPO", "copy", OBS, ACT, {"seed": 1, "n_envs": 2, "n_steps": 16, "batch_size": 8,
                                                     "n_epochs": 1}, None)
    fresh.restore(tmp_path / "model.zip")
    learner.end_actor(1)
    learner.end_actor(2)
    learner.checkpoint(tmp_path / "later.zip", {}).result(10)  # queued behind the logouts: they are handled
    old, new = learner.algorithm, fresh.algorithm
    assert new.segments.position == old.segments.position == [5, 3]
    assert new.segments.rows_left == old.segments.rows_left == 32 - 8
    assert new.segments.owner == old.segments.owner == [None, None]
    for name in ("observations", "actions", "rewards", "values", "log_probs", "episode_starts"):
        assert np.array_equal(getattr(new.buffer, name), getattr(old.buffer, name)), name
    assert new.buffer.rewards[4, 0] != 1.0  # the row before the dropped one is bootstrapped with its value


def test_a_checkpoint_keeps_the_transitions_waiting_for_a_row_of_n_envs(learners, tmp_path):
    learner = learners("DQN", n_envs=2, learning_starts=0, buffer_size=100, batch_size=4)
    learner.begin_episode(1, obs(0), EXPLORE).result(10)
    for i in range(5):  # five transitions: two rows, and one waiting for its row-mate
        learner.step(1, 1.0, obs(i + 1), EXPLORE).result(10)
    learner.checkpoint(tmp_path / "model.zip", {}).result(10)
    fresh = build_learner("DQN", "copy", OBS, ACT, {"seed": 1, "n_envs": 2, "buffer_size": 100, "batch_size": 4}, None)
    fresh.restore(tmp_path / "model.zip")
    assert fresh.model.replay_buffer.size() == 2 and len(fresh.algorithm._row) == 1
    assert np.array_equal(fresh.algorithm._row[0][1], learner.algorithm._row[0][1])  # its next observation


def test_a_saved_rollout_that_no_longer_fits_the_buffer_is_dropped_with_a_warning(learners, tmp_path, caplog):
    learner = learners("PPO", n_envs=2, n_steps=16, batch_size=8, n_epochs=1)
    learner.begin_episode(1, obs(0), EXPLORE).result(10)
    for i in range(4):
        learner.step(1, 1.0, obs(i + 1), EXPLORE).result(10)
    learner.end_actor(1)
    learner.checkpoint(tmp_path / "model.zip", {}).result(10)
    other = build_learner("PPO", "copy", OBS, ACT, {"seed": 0, "n_envs": 2, "n_steps": 8, "batch_size": 8}, None)
    other.restore(tmp_path / "model.zip")  # n_steps changed: the same network, another rollout
    assert other.algorithm.segments.position == [0, 0] and other.steps == 4
    assert "does not fit its buffer now" in caplog.text and "its 4 steps are not learned from" in caplog.text
