"""One vector client over real HTTP learns exactly as SB3's ``learn()`` with as many envs: the same weights.

A real server on a real socket (in a thread of the test process, so that the test can read the learner's
weights), `shepherd.client.VectorClient` driving an SB3 ``DummyVecEnv`` of N envs seeded as SB3 seeds its
own; SB3's ``learn()`` with the same seed, parameters and N envs. JSON carries float32 observations and
rewards exactly, so any difference in what the server stores, when it trains or which random numbers it
draws shows in the weights. (tests/integration/test_sb3_equivalence.py does the same one level down, on
the learner's own calls, and for DQN with ``learning_starts``, which a served agent takes as its heatup.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

from shepherd.client import VectorClient, first_vector_step, sb3_vec_env_step
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import ServerConfig
from tests.conftest import ServerThread
from tests.integration.test_sb3_equivalence import sb3_weights

N = 4
CASES = {  # steps: whole rollouts (PPO, A2C) and whole train_freq rounds (DQN) of SB3's learn()
    "PPO": (512, {"n_steps": 32, "batch_size": 64, "n_epochs": 2, "learning_rate": "lin_0.001"}),
    "A2C": (224, {"n_steps": 8, "learning_rate": "lin_0.001"}),
    "DQN": (320, {"learning_starts": 0, "batch_size": 16, "train_freq": 4, "gradient_steps": 2,
                  "target_update_interval": 50, "exploration_fraction": 0.5}),
    "RecurrentPPO": (512, {"n_steps": 32, "batch_size": 64, "n_epochs": 2, "learning_rate": "lin_0.001",
                           "policy_kwargs": {"lstm_hidden_size": 8}}),
}


def served_weights(algorithm: str, steps: int, params: dict, data) -> dict[str, th.Tensor]:
    from stable_baselines3.common.env_util import make_vec_env

    schedule = Schedule(heatup_steps=0, improve_steps=steps,  # the budget drives the schedules, as learn()'s
                        steps_between_evaluation_periods=None, evaluation_episodes=0,
                        checkpoint_every_steps=10 ** 9, checkpoint_every_seconds=10 ** 9)
    graph = GraphManager(owner="tests", agents=[AgentSpec("pole", algorithm, [[4], "-inf", "inf"], 2, params)],
                         schedule=schedule)
    # made before the model, as SB3 makes it: gymnasium draws once from numpy's global generator when it
    # makes an env, which the model's seed must come after (a client in its own process never matters)
    venv = make_vec_env("CartPole-v1", n_envs=N)
    venv.seed(params["seed"])  # as SB3 seeds its env with the model's seed: env i with seed + i
    thread = ServerThread(ServerConfig(graph, data, requests_per_second_per_key=None)).start_and_wait()
    client = VectorClient(thread.server.url, thread.server.created_keys["pole"], N)
    try:
        client.login()
        body = first_vector_step(venv.reset(), N)
        for _ in range(steps // N):
            actions = client.step(**body)
            body = sb3_vec_env_step(*venv.step(np.asarray(actions)))
        client.step(**body)  # the last transitions are stored (and trained on) before this is answered
        runtime = graph.runtime()
        runtime.checkpoint().result(30)  # a barrier: the learner handled everything before it
        assert runtime.learner.failure is None and runtime.learner.steps == steps
        return {name: tensor.clone() for name, tensor in runtime.learner.model.policy.state_dict().items()}
    finally:
        client.close()
        thread.stop()


@pytest.mark.parametrize("algorithm", list(CASES))
def test_one_vector_client_learns_exactly_as_sb3_learn_with_as_many_envs(algorithm, tmp_path):
    steps, params = CASES[algorithm]
    params = {**params, "seed": 7, "n_envs": N, "policy_kwargs": {"net_arch": [16], **params.get("policy_kwargs", {})}}
    expected = sb3_weights(algorithm, "CartPole-v1", steps, params, N)
    got = served_weights(algorithm, steps, params, tmp_path / "data")
    assert expected.keys() == got.keys()
    for name in expected:
        assert th.allclose(expected[name], got[name], rtol=1e-4, atol=1e-5), f"{algorithm}: {name} differs"
