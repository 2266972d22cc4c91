"""RecurrentPPO's LSTM state, kept per actor on the learner (`shepherd.agents.sb3.recurrent`): greedy acts as
sb3-contrib's ``predict`` with its state, actors that never mix, states that end with their episodes and
sessions, and rollouts trained from exactly the states and resets that were acted with."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch as th

from shepherd.agents import ActMode, Kind, Request, build_learner, greedy_policy
from shepherd.wire.spaces import parse_space

OBS = parse_space([[3], "-inf", "inf"])
PARAMS = {"n_envs": 2, "n_steps": 4, "batch_size": 8, "n_epochs": 1, "seed": 0,
          "policy_kwargs": {"net_arch": [8], "lstm_hidden_size": 8}}


def learner(params=None, observations=OBS, actions=parse_space(2)):
    return build_learner("RecurrentPPO", "memory", observations, actions, {**PARAMS, **(params or {})}, None)


def observations(seed: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=3).astype(np.float32) for _ in range(count)]


def test_the_numpy_snapshot_never_serves_a_recurrent_policy():
    from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy

    built = learner()
    policy = built.model.policy
    assert isinstance(policy, RecurrentActorCriticPolicy)  # an ActorCriticPolicy too: a plan would ignore the LSTM
    assert greedy_policy.network_of(policy, OBS) is None and greedy_policy.greedy_policy_of(policy, OBS, built.algorithm, lambda a: a,
                                                                    "memory") is None
    assert built.greedy is None  # greedy steps go to the learner, which keeps the state


def test_greedy_episodes_act_as_predict_with_its_state_and_episode_starts():
    """Pendulum played greedily through the learner: every action is sb3-contrib's ``predict`` with the
    state carried from the previous step and reset at each episode's start (the second episode is left
    unfinished: the third's first step resets the state without an end in between)."""
    env = gym.make("Pendulum-v1", max_episode_steps=60)
    built = learner(observations=parse_space([[3], [-1, -1, -8], [1, 1, 8]]), actions=parse_space([[1], -2, 2]))
    policy = copy.deepcopy(built.model.policy)
    built.start()
    try:
        state, obs = None, env.reset(seed=1)[0]
        for episode in range(3):
            start = np.array([True])
            action = built.begin_episode(1, obs, ActMode.GREEDY).result(30)
            for t in range(100):
                expected, state = policy.predict(obs[None], state, start, deterministic=True)
                np.testing.assert_allclose(action, expected[0], rtol=0, atol=1e-6)
                start = np.array([False])
                obs, reward, terminated, truncated, _ = env.step(action)
                if episode == 1 and t == 20:
                    obs = env.reset()[0]
                    break
                if terminated or truncated:
                    built.end_episode(1, float(reward), obs, truncated, ActMode.GREEDY)
                    obs = env.reset()[0]
                    break
                action = built.step(1, float(reward), obs, ActMode.GREEDY).result(30)
        built.begin_episode(2, obs, ActMode.GREEDY).result(30)  # a barrier
        assert built.algorithm.actor_states == 1  # actor 2's; actor 1's ended with its episode
    finally:
        built.close()


BOX = parse_space([[2], -1, 1])  # greedy actions are the Gaussian's means: any state shows in them


def greedy_actions(built, plays: dict[int, list[np.ndarray]], together: bool) -> dict[int, np.ndarray]:
    """Greedy actions of actors playing the observations; ``together``: every actor's step in one batch."""
    got: dict[int, list] = {actor: [] for actor in plays}
    length = len(next(iter(plays.values())))
    for t in range(length):
        kind = Kind.BEGIN if t == 0 else Kind.STEP
        if together:
            answers = built.submit([Request(kind, actor, obs[t], 0.0, mode=ActMode.GREEDY)
                                    for actor, obs in plays.items()]).result(30)
            for actor, action in zip(plays, answers):
                got[actor].append(action)
        else:
            for actor, obs in plays.items():
                call = built.begin_episode(actor, obs[t], ActMode.GREEDY) if t == 0 else built.step(
                    actor, 0.0, obs[t], ActMode.GREEDY)
                got[actor].append(call.result(30))
    return {actor: np.array(actions) for actor, actions in got.items()}


def test_two_sessions_states_never_mix():
    plays = {1: observations(1, 30), 2: observations(2, 30)}
    alone = {}
    for actor, obs in plays.items():
        built = learner(actions=BOX)
        built.start()
        try:
            alone[actor] = greedy_actions(built, {actor: obs}, together=False)[actor]
            forgetful = np.array([built.begin_episode(100 + t, o, ActMode.GREEDY).result(30) for t, o in enumerate(obs)])
        finally:
            built.close()
        assert np.abs(forgetful - alone[actor]).max() > 1e-3  # each step's action depends on the state
    for together in (False, True):  # alternating sessions, then both in every batch (one forward pass)
        built = learner(actions=BOX)
        built.start()
        try:
            got = greedy_actions(built, plays, together)
        finally:
            built.close()
        for actor in plays:  # a batch of two may round the last bit of a float apart from a batch of one
            np.testing.assert_allclose(got[actor], alone[actor], rtol=0, atol=1e-6)


def test_states_end_with_their_episodes_and_actors():
    built = learner()
    built.start()
    algorithm = built.algorithm
    try:
        obs = observations(0, 3)
        for actor, mode in ((1, ActMode.EXPLORE), (2, ActMode.GREEDY), (3, ActMode.EXPLORE)):
            built.begin_episode(actor, obs[0], mode).result(30)
            built.step(actor, 1.0, obs[1], mode).result(30)
        assert algorithm.actor_states == 3
        built.end_episode(1, 1.0, obs[2], False, ActMode.EXPLORE)  # an episode ends: its state goes
        built.end_actor(2)  # a session ends mid-episode: its state goes
        built.step(3, 1.0, obs[2], ActMode.EXPLORE).result(30)  # a barrier
        assert algorithm.actor_states == 1 and set(algorithm._memory) == {3}
        # an act answered in the batch that drops its actor keeps nothing, learning or greedy
        built.submit([Request(Kind.STEP, 3, obs[0], 1.0, mode=ActMode.EXPLORE), Request(Kind.DROP, 3)]).result(30)
        built.begin_episode(4, obs[0], ActMode.GREEDY).result(30)
        built.submit([Request(Kind.STEP, 4, obs[1], 1.0, mode=ActMode.GREEDY), Request(Kind.DROP, 4)]).result(30)
        built.begin_episode(5, obs[0], ActMode.GREEDY).result(30)
        assert set(algorithm._memory) == {5}
    finally:
        built.close()


def trained_as_acted(built) -> list[float]:
    """Have every update first check the rollout: the log-probabilities and values training computes (each
    sequence from its stored states, reset at its episode starts) are those the actors acted with."""
    model = built.model
    train, gaps = model.train, []

    def checked() -> None:
        buffer = copy.deepcopy(model.rollout_buffer)
        for data in buffer.get(batch_size=None):
            built.trained_starts = list(buffer.episode_starts)  # flattened: segment after segment
            actions = data.actions.long().flatten()
            with th.no_grad():
                values, log_prob, _ = model.policy.evaluate_actions(data.observations, actions, data.lstm_states,
                                                                    data.episode_starts)
            mask = data.mask > 1e-8
            gaps.append(float((log_prob - data.old_log_prob)[mask].abs().max()))
            gaps.append(float((values.flatten() - data.old_values)[mask].abs().max()))
        train()

    model.train = checked
    return gaps


@pytest.mark.parametrize("split", [0, 3, 5])
def test_a_segment_taken_over_mid_episode_is_acted_as_it_is_trained(split, monkeypatch):
    """Two segments of 4 rows. Actor 2 leaves segment 1 after two rows; actor 1, mid-episode, fills segment
    0 and goes on in segment 1 from its third row, which starts an episode there (GAE must not cross from
    actor 2): training resets the LSTM at that row, so actor 1 acted there from zeros."""
    monkeypatch.setattr(np.random, "randint", lambda high, *args, **kwargs: split % high)  # where the buffer splits sequences
    built = learner()
    gaps = trained_as_acted(built)
    built.start()
    try:
        one, two = observations(1, 8), observations(2, 3)
        built.begin_episode(1, one[0], ActMode.EXPLORE).result(30)
        built.begin_episode(2, two[0], ActMode.EXPLORE).result(30)
        built.step(2, 1.0, two[1], ActMode.EXPLORE).result(30)
        built.step(2, 1.0, two[2], ActMode.EXPLORE).result(30)  # actor 2's two rows ...
        built.end_actor(2)  # ... and it leaves: segment 1 is free at its third row
        for t in range(1, 6):  # rows 1-3 of segment 0, then row 2 of segment 1 and row 3
            built.step(1, 1.0, one[t], ActMode.EXPLORE).result(30)
        assert built.model._n_updates == 0
        built.step(1, 1.0, one[6], ActMode.EXPLORE).result(30)  # completes the rollout: it trains, then acts
        assert built.failure is None and built.model._n_updates == 1 and built.algorithm.memory_resets == 1
        assert built.trained_starts == [1, 0, 0, 0, 1, 0, 1, 0]  # actor 2's episode, and actor 1's takeover
    finally:
        built.close()
    assert gaps and max(gaps) < 1e-5, gaps


def test_an_actor_in_mid_episode_goes_on_in_an_untouched_segment_when_one_is_free():
    built = learner({"n_envs": 3})
    built.start()
    algorithm = built.algorithm
    try:
        one, two = observations(1, 6), observations(2, 3)
        built.begin_episode(1, one[0], ActMode.EXPLORE).result(30)  # segment 0
        built.begin_episode(2, two[0], ActMode.EXPLORE).result(30)  # segment 1
        built.step(2, 1.0, two[1], ActMode.EXPLORE).result(30)
        built.end_episode(2, 1.0, two[2], False, ActMode.EXPLORE)  # segment 1 is left after two rows
        for t in range(1, 5):  # actor 1 fills segment 0 and goes on, mid-episode
            built.step(1, 1.0, one[t], ActMode.EXPLORE).result(30)
        assert algorithm._actors[1].segment == 2 and algorithm.memory_resets == 0  # untouched: its memory kept
        built.begin_episode(3, two[0], ActMode.EXPLORE).result(30)
        assert algorithm._actors[3].segment == 1  # an episode's start takes the started segment
    finally:
        built.close()
