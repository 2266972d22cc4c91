"""`shepherd.client.ActingClient` and `run_acting_env` against a real server (a `ServerThread` on a real socket):
blocks learned from and recorded, uploads answered 503 (act timeout) or whose reply was lost sent again with
the same ``seq`` and counted once, a stale upload (409) dropped with the current policy fetched and its
episodes not counted, the policy fetched again when the phase changes."""

from __future__ import annotations

import http.client

import gymnasium as gym

import pytest

from shepherd.client import ActingClient, ShepherdError, run_acting_env
from shepherd.client.acting import Block, StaleUpload
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig
from tests.conftest import ServerThread

N, T = 2, 8


def graph_manager(every: int = 10 ** 6, n_epochs: int = 1, batch_size: int = 16) -> GraphManager:
    return GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, {
        "n_envs": N, "n_steps": T, "batch_size": batch_size, "n_epochs": n_epochs, "seed": 0})],
        schedule=Schedule(steps_between_evaluation_periods=every, evaluation_episodes=2))


@pytest.fixture(autouse=True)
def closed(monkeypatch):
    """Every client made here is logged out and its connection closed at the test's end."""
    made: list[ActingClient] = []
    init = ActingClient.__init__

    def keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(ActingClient, "__init__", keep)
    yield
    for client in made:
        try:
            client.logout()
        except (ShepherdError, OSError, http.client.HTTPException):
            pass
        client.close()


@pytest.fixture
def serve(tmp_path):
    started: list[ServerThread] = []

    def start(graph: GraphManager | None = None, **config) -> tuple[ServerThread, str]:
        server = ServerThread(ServerConfig(graph or graph_manager(), tmp_path / "data", **config)).start_and_wait()
        started.append(server)
        return server, server.server.app[CREATED_KEYS]["pole"]

    yield start
    for server in started:
        server.stop()


def graph(server: ServerThread) -> GraphManager:
    return server.server.app[GRAPH]


def recorded(server: ServerThread, phase: str = "train") -> list[float]:
    served = graph(server)
    return [r.value for r in served.store.returns(served.runtime().record.id) if r.phase == phase]


def test_blocks_are_learned_from_and_every_accepted_episode_is_the_servers(serve):
    server, key = serve()
    client = ActingClient(server.server.url, key, n_envs=N, seed=0, timeout=30)
    returns = run_acting_env(client, "CartPole-v1", seed=0, steps=40 * N * T)
    runtime = graph(server).runtime()
    assert runtime.tracker.steps == 40 * N * T == client.seq * N * T  # every block of N x T counted once
    assert client.policy_version == 40 and client.fetches == 41  # one update per block, one file each
    assert client.in_reply == 40  # every new file came in its upload's reply (policy_in_reply): no fetch after login
    assert sorted(sum(returns, [])) == sorted(recorded(server)) and len(recorded(server)) > 10


class LostReplies(ActingClient):
    """A client whose first two uploads' replies are lost after the server has answered them (the connection
    drops as the reply arrives)."""

    lost = 0

    def post_raw(self, path, payload):
        reply = super().post_raw(path, payload)
        if path == "/shepherd/experience/" and self.lost < 2:
            self.lost += 1
            self.close()
            raise http.client.RemoteDisconnected("the reply was lost")
        return reply


def test_an_upload_whose_reply_was_lost_is_sent_again_with_its_seq_and_counted_once(serve):
    server, key = serve()
    client = LostReplies(server.server.url, key, n_envs=N, seed=0, timeout=30)
    returns = run_acting_env(client, "CartPole-v1", seed=0, steps=6 * N * T)
    assert client.lost == 2 and client.seq == 6
    assert graph(server).runtime().tracker.steps == 6 * N * T
    assert sorted(sum(returns, [])) == sorted(recorded(server))


def test_an_upload_answered_503_after_the_act_timeout_gets_its_reply_when_sent_again(serve):
    # an update of 40 gradient steps takes longer than the act timeout of 10 ms: the upload that completes
    # the rollout is answered 503 with Retry-After, and the same seq and body sent again gets the reply
    server, key = serve(graph_manager(n_epochs=10, batch_size=4), act_timeout_seconds=0.01)
    client = ActingClient(server.server.url, key, n_envs=N, seed=0, timeout=30, retry_seconds=60)
    sent: list[int] = []
    post_raw = client.post_raw

    def counting(path, payload):
        if path == "/shepherd/experience/":
            sent.append(payload["seq"])
        return post_raw(path, payload)

    client.post_raw = counting  # type: ignore[method-assign]
    run_acting_env(client, "CartPole-v1", seed=0, steps=3 * N * T)
    assert len(sent) > len(set(sent)) == 3  # retried, with the same seq
    runtime = graph(server).runtime()
    assert runtime.tracker.steps == 3 * N * T and runtime.act_timeouts > 0
    assert client.policy_version == 3


class Stale(ActingClient):
    """A client whose third upload claims a version ahead of the one it acted with: the server refuses it."""

    uploads = 0

    def upload(self, block):
        self.uploads += 1
        if self.uploads == 3:
            assert self.held is not None
            self.held = (self.held[0] + 5, self.held[1])
        return super().upload(block)


def test_a_stale_upload_is_dropped_the_current_policy_fetched_and_its_episodes_not_counted(serve, caplog):
    server, key = serve()
    client = Stale(server.server.url, key, n_envs=N, seed=0, timeout=30)
    caplog.set_level("INFO", logger="shepherd.client.acting")
    returns = run_acting_env(client, "CartPole-v1", seed=0, steps=10 * N * T)
    assert any("stale" in record.message for record in caplog.records)
    assert client.uploads == 11 and client.policy_version == 10  # the refused block learned nothing
    assert graph(server).runtime().tracker.steps == 10 * N * T
    assert sorted(sum(returns, [])) == sorted(recorded(server))


def test_a_stale_upload_raises_stale_upload_after_fetching_the_version_named(serve):
    server, key = serve()
    client = ActingClient(server.server.url, key, n_envs=N, seed=0, timeout=30)
    client.login()
    assert client.held == (0, "train")
    client.held = (7, "train")
    block = Block([[[0.0] * 4] * N])
    for _ in range(client.steps):
        block.add([0] * N, {"obs": [[0.0] * 4] * N, "reward": [1.0] * N, "terminated": [False] * N,
                            "truncated": [False] * N}, None)
    with pytest.raises(StaleUpload) as caught:
        client.upload(block)
    assert caught.value.policy_version == 0 and client.held == (0, "train") and client.fetches == 2
    again = client.upload(block)  # the same block with the version it now holds is learned from
    assert again["accepted"] == N * T
    other = Block(block.obs, None, block.sample, [[0.5] * N] * T, block.terminated, block.truncated, block.final_obs)
    client.seq -= 1  # the same seq with another body: refused, and not as stale
    with pytest.raises(ShepherdError) as conflict:
        client.upload(other)
    assert conflict.value.status == 409 and "policy_version" not in conflict.value.body


@pytest.mark.parametrize("in_reply", [True, False])
def test_the_policy_is_fetched_again_when_an_evaluation_period_begins_and_its_returns_recorded(serve, in_reply):
    """A new file when the phase changes, in the upload's reply (policy_in_reply) or fetched."""
    server, key = serve(graph_manager(every=4 * N * T))
    client = ActingClient(server.server.url, key, n_envs=N, seed=0, timeout=30, policy_in_reply=in_reply)
    phases: list[str] = []
    hold = client._hold

    def holding(raw, version):
        hold(raw, version)
        phases.append(client.held[1] if client.held else "")

    client._hold = holding  # type: ignore[method-assign]
    returns = run_acting_env(client, "CartPole-v1", seed=0, steps=30 * N * T)
    assert "evaluate" in phases and phases.index("evaluate") > 0 and phases[-1] in ("train", "evaluate")
    assert recorded(server, "evaluate")  # evaluation episodes were played greedily and recorded
    every = recorded(server) + recorded(server, "evaluate")
    assert sorted(sum(returns, [])) == sorted(every)
    assert (client.in_reply == client.fetches - 1) if in_reply else client.in_reply == 0


def test_an_image_agent_acts_at_the_client_and_its_ended_episodes_final_frames_stay_images(serve):
    """A uint8 image's final observation (the frame an episode ended on) goes up as the image it is: sent as
    float32 it was refused (400: "must contain only integers 0-255")."""
    import gymnasium as gym
    import numpy as np
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    class Frames(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)
        action_space = gym.spaces.Discrete(3)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self.observation_space.sample(), {}

        def step(self, action):
            self.t += 1
            return self.observation_space.sample(), 1.0, self.t % 5 == 0, False, {}

    spec = AgentSpec("pole", "PPO", ["Image", [36, 36, 3]], 3,
                     {"n_envs": N, "n_steps": T, "batch_size": 16, "n_epochs": 1, "seed": 0})
    server, key = serve(GraphManager(owner="tests", agents=[spec], schedule=Schedule()))
    client = ActingClient(server.server.url, key, n_envs=N, seed=0, timeout=60)
    envs = SyncVectorEnv([Frames] * N, autoreset_mode=AutoresetMode.SAME_STEP)
    returns = run_acting_env(client, envs, seed=0, steps=3 * N * T)
    assert sorted(sum(returns, [])) == sorted(recorded(server)) and len(recorded(server)) >= 8
    assert set(recorded(server)) == {5.0}


def test_an_agent_with_lessons_sets_each_env_up_with_the_config_told_for_the_next_block(serve):
    """docs/lessons.md: a client-acting reply tells, by env, the config of every episode that starts in the next
    block; `run_acting_env` hands it to each env's `lesson_config` wrapper, applied at each of its resets."""
    from shepherd.client import make_vector_env

    graph = GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, {
        "n_envs": N, "n_steps": T, "batch_size": 16, "n_epochs": 1, "seed": 0},
        lessons=[{"name": "long", "config": {"length": 0.75}}])],
        schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=2))
    server, key = serve(graph)
    client = ActingClient(server.server.url, key, n_envs=N, seed=0, timeout=30)
    env = make_vector_env("CartPole-v1", N)
    try:
        returns = run_acting_env(client, env, seed=0, episodes=4)
        assert sum(map(len, returns)) >= 4
        assert [copy.unwrapped.length for copy in env.envs] == [0.75] * N  # CartPole's pole, as the lesson says
        runtime = server.server.app[GRAPH].runtime("pole")
        runtime.checkpoint().result(30)
        configs = [record.config for record in server.server.app[GRAPH].store.returns(runtime.record.id)]
        assert configs and all(config == {"length": 0.75} for config in configs)
    finally:
        env.close()
    from stable_baselines3.common.vec_env import DummyVecEnv  # an SB3 VecEnv of wrapped envs, the same

    from shepherd.client import lesson_config

    venv = DummyVecEnv([lambda: lesson_config(gym.make("CartPole-v1")) for _ in range(N)])
    client = ActingClient(server.server.url, key, n_envs=N, seed=0, timeout=30)
    try:
        assert sum(map(len, run_acting_env(client, venv, seed=0, episodes=2))) >= 2
        assert [copy.unwrapped.length for copy in venv.envs] == [0.75] * N
    finally:
        venv.close()
