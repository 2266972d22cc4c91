"""End to end over a real socket: run.py serving presets, clients driving gymnasium CartPole over HTTP."""

import json
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path


from shepherd.client import Client, run_env
from tests.conftest import ROOT, TEST_PRESETS

TINY = str(TEST_PRESETS / "tiny_ppo.py")


def checkpoint_state(data: Path) -> dict:
    with zipfile.ZipFile(data / "agents" / "1" / "model.zip") as archive:
        assert archive.testzip() is None
        return json.loads(archive.read("shepherd.json"))


def drive(url: str, key: str, episodes: int, clients: int = 2) -> list[list[float]]:
    results: list[list[float]] = [[] for _ in range(clients)]

    def one(index: int) -> None:
        client = Client(url, key, timeout=60)
        try:
            results[index] = run_env(client, "CartPole-v1", seed=index, episodes=episodes)
            client.logout()
        finally:
            client.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive(), "a client got stuck"
    return results


def test_cartpole_ppo_reaches_its_target_with_four_clients(tmp_path):
    data = tmp_path / "data"
    result = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-p", "cartpole_ppo", "--clients", "4", "--port", "0",
         "--data", str(data)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "target reached" in result.stdout
    assert "API key for agent cartpole" in result.stdout
    lines = (data / "agents" / "1" / "returns.jsonl").read_text().splitlines()
    phases = {json.loads(line)["phase"] for line in lines}
    assert {"train", "evaluate"} <= phases and len(lines) > 20
    state = checkpoint_state(data)
    assert state["learner"]["num_timesteps"] > 1000 and state["learner"]["n_updates"] > 0


def test_cartpole_ppo_reaches_its_target_with_one_vector_client_of_eight_envs(tmp_path):
    """The preset's 8 rollout segments, filled by one client stepping 8 CartPoles per request."""
    data = tmp_path / "data"
    result = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-p", "cartpole_ppo", "--clients", "1", "--envs-per-client", "8",
         "--port", "0", "--data", str(data)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "target reached" in result.stdout
    state = checkpoint_state(data)
    assert state["learner"]["n_updates"] > 0


def test_a_client_that_vanishes_mid_episode_harms_no_one(server_factory):
    server = server_factory(TINY)
    rogue = Client(server.url, server.api_key)
    rogue.login()
    rogue.step([0.0, 0.0, 0.0, 0.0], 0.0, False)  # takes one of the two rollout segments ...
    rogue.step([0.0, 0.1, 0.0, 0.0], 1.0, False)
    rogue.close()  # ... and disappears without logging out
    started = time.monotonic()
    results = drive(server.url, server.api_key, episodes=8)
    assert all(len(returns) == 8 for returns in results)
    assert time.monotonic() - started < 90
    assert server.stop() == 0


def test_the_agent_resumes_after_a_restart(server_factory, tmp_path):
    data = tmp_path / "data"
    server = server_factory(TINY, data=data)
    key = server.api_key
    drive(server.url, key, episodes=10)
    assert server.stop(signal.SIGTERM) == 0
    first = checkpoint_state(data)
    steps = first["schedule"]["steps"]
    assert steps > 100 and first["learner"]["n_updates"] > 0
    assert first["learner"]["num_timesteps"] >= steps - 2 * 16  # at most a partial rollout is dropped

    again = server_factory(TINY, data=data)
    assert again.api_key is None  # the key was shown once; the old one still works
    assert any(f"PPO, {steps} steps so far" in line for line in again.lines)
    drive(again.url, key, episodes=5)
    assert again.stop(signal.SIGINT) == 0
    second = checkpoint_state(data)
    assert second["schedule"]["steps"] > steps
    assert second["learner"]["n_updates"] > first["learner"]["n_updates"]


DQN_YAML = """\
owner: tests
agents:
  - name: dqn
    algorithm: DQN
    observation_space: [[4], -inf, inf]
    action_space: 2
    parameters: {buffer_size: 2000, batch_size: 16, train_freq: 4, target_update_interval: 40,
                 exploration_fraction: 0.5, policy_kwargs: {net_arch: [16]}}
schedule:
  heatup_steps: 40
  steps_between_evaluation_periods: null
  checkpoint_every_steps: 50
  checkpoint_every_seconds: 3600
"""


def test_a_seeded_dqn_agent_learns_the_same_whether_or_not_its_server_was_stopped_and_started(server_factory,
                                                                                             tmp_path):
    """Issue 48's test over real processes: run.py serving a DQN agent with --seed, one client (its env seeded)
    playing 6 episodes then 5; SIGTERM and a new server between the halves, or not: the final checkpoints hold the
    same weights and counters."""
    import torch as th

    preset = tmp_path / "dqn.yaml"
    preset.write_text(DQN_YAML)

    def half(url: str, key: str, episodes: int, seed: int) -> list[float]:
        client = Client(url, key, timeout=60)
        try:
            return run_env(client, "CartPole-v1", seed=seed, episodes=episodes)
        finally:
            client.logout()
            client.close()

    finals = []
    for restart in (False, True):
        data = tmp_path / f"data-{restart}"
        server = server_factory(str(preset), "--seed", "3", data=data)
        key = server.api_key
        returns = half(server.url, key, 6, seed=0)
        if restart:
            assert server.stop(signal.SIGTERM) == 0
            server = server_factory(str(preset), "--seed", "3", data=data)
            assert (data / "agents" / "1" / "replay_buffer.pkl").exists()
        returns += half(server.url, key, 5, seed=1)
        assert server.stop(signal.SIGTERM) == 0
        with zipfile.ZipFile(data / "agents" / "1" / "model.zip") as archive:
            weights = th.load(archive.open("policy.pth"), map_location="cpu")
        finals.append((returns, checkpoint_state(data)["learner"], weights))
    (returns, counters, weights), (again_returns, again_counters, again_weights) = finals
    assert counters["n_updates"] > 0 and returns == again_returns
    assert [counters[name] for name in ("num_timesteps", "n_updates")] == [
        again_counters[name] for name in ("num_timesteps", "n_updates")]
    assert [name for name in weights if not th.equal(weights[name], again_weights[name])] == []
