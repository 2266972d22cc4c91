"""The Python clients' binary tensors (docs/protocol.md, "Binary tensors"; issue 47) against a real server: a
session whose observations hold more than 1,024 numbers sends them as bytes (`Client`, `VectorClient`,
`ActingClient`), one of CartPole's 4 as JSON unless asked; episodes and learning are the JSON path's."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from shepherd.client import ActingClient, Client, VectorClient, run_acting_env, run_env, run_vector_env
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, ServerConfig
from shepherd.wire import parse as wire_parse
from tests.conftest import ServerThread

SHAPE = (24, 24, 3)  # 1,728 numbers: over the client's 1,024
PPO = {"n_envs": 2, "n_steps": 8, "batch_size": 16, "n_epochs": 1, "seed": 0}


class Frames(gym.Env):
    """Random uint8 frames, two actions, episodes of 6 steps with reward 1 each."""

    observation_space = gym.spaces.Box(0, 255, SHAPE, np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.integers(0, 256, SHAPE, dtype=np.uint8), {}

    def step(self, action):
        self.t += 1
        return self.np_random.integers(0, 256, SHAPE, dtype=np.uint8), 1.0, self.t >= 6, False, {}


gym.register("tests/Frames-v0", entry_point=Frames)


@pytest.fixture
def decoded(monkeypatch):
    """How many bodies the server decoded as binary (its thread runs in this process)."""
    calls = []
    real = wire_parse.decode

    def counting(body, length):
        calls.append(length)
        return real(body, length)

    monkeypatch.setattr(wire_parse, "decode", counting)
    return calls


@pytest.fixture
def serve(tmp_path):
    started: list[ServerThread] = []

    def start(observation) -> tuple[str, str]:
        graph = GraphManager(owner="tests", agents=[AgentSpec("eye", "PPO", observation, 2, dict(PPO))],
                             schedule=Schedule(steps_between_evaluation_periods=10 ** 6))
        server = ServerThread(ServerConfig(graph, tmp_path / "data")).start_and_wait()
        started.append(server)
        return server.server.url, server.server.app[CREATED_KEYS]["eye"]

    yield start
    for server in started:
        server.stop()


def test_a_client_of_large_observations_sends_them_as_tensors(serve, decoded):
    url, key = serve([list(SHAPE), 0, 255])
    client = Client(url, key, timeout=30)
    returns = run_env(client, "tests/Frames-v0", seed=0, episodes=3)
    assert client.binary and returns == [6.0] * 3
    assert len(decoded) == 3 * 7  # every step of every episode (6 actions and the last observation)
    client.logout()
    client.close()


def test_a_vector_client_of_large_observations_sends_one_tensor_a_step(serve, decoded):
    url, key = serve([list(SHAPE), 0, 255])
    client = VectorClient(url, key, 3, timeout=30)
    venv = SyncVectorEnv([Frames] * 3, autoreset_mode=AutoresetMode.SAME_STEP)
    returns = run_vector_env(client, venv, seed=0, episodes=6)
    assert client.binary and sum(returns, []) == [6.0] * 6 and len(decoded) == 1 + 2 * 6  # two episodes of 6 each
    client.logout()
    client.close()
    venv.close()


def test_small_observations_go_as_json_unless_asked(serve, decoded):
    url, key = serve([[4], "-inf", "inf"])
    json_client = Client(url, key, timeout=30)
    run_env(json_client, "CartPole-v1", seed=0, episodes=1)
    assert not json_client.binary and decoded == []
    asked = Client(url, key, timeout=30, binary=True)
    returns = run_env(asked, "CartPole-v1", seed=0, episodes=1)
    assert asked.binary and len(decoded) == returns[0] + 1
    for client in (json_client, asked):
        client.logout()
        client.close()


def test_a_clients_info_may_hold_numpy_values_as_a_vector_clients_may(serve):
    """`Client.step` sent ``info`` as it was: numpy values in it (a gymnasium env's info often holds them) were a
    TypeError traceback from the JSON encoder; `VectorClient` converted them."""
    url, key = serve([[4], "-inf", "inf"])
    client = Client(url, key, timeout=30)
    client.login()
    obs = np.zeros(4, dtype=np.float32)
    assert client.step(obs, 0.0, False, info={"x": np.float32(0.5), "pos": np.arange(2)}) in (0, 1)
    client.logout()
    client.close()


@pytest.mark.parametrize("binary", [None, True])
def test_an_acting_client_uploads_its_columns_as_tensors_and_gets_its_policy_in_the_reply(serve, decoded, binary):
    url, key = serve([[4], "-inf", "inf"])
    client = ActingClient(url, key, n_envs=2, seed=0, timeout=30, binary=binary)
    run_acting_env(client, "CartPole-v1", seed=0, steps=10 * 2 * 8)
    assert client.binary is bool(binary) and len(decoded) == (10 if binary else 0)
    assert client.policy_version == 10 and client.in_reply == 10 and client.fetches == 11
    client.logout()
    client.close()
