"""Clients acting at the client over real HTTP: ``python -m shepherd.client --acting client`` and
``run.py -p cartpole_ppo --clients 1 --envs-per-client 8 --acting client`` to its target."""

import json
import os
import re
import subprocess
import sys

from tests.conftest import ROOT, TEST_PRESETS
from tests.e2e.test_cartpole import checkpoint_state

TINY_VECTOR = str(TEST_PRESETS / "tiny_ppo_vector.py")


def recorded(data) -> list[dict]:
    path = data / "agents" / "1" / "returns.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_python_client_acting_at_the_client_uploads_blocks_and_the_agent_learns(server_factory):
    server = server_factory(TINY_VECTOR)
    result = subprocess.run(
        [sys.executable, "-m", "shepherd.client", "--url", server.url, "--n-envs", "4", "--acting", "client",
         "--steps", "2048", "--seed", "0"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "SHEPHERD_API_KEY": server.api_key})
    assert result.returncode == 0, result.stderr
    match = re.fullmatch(r"(\d+) episodes over 4 envs, mean return ([\d.]+)\n", result.stdout)
    assert match, result.stdout
    episodes = recorded(server.data)
    assert len(episodes) == int(match.group(1)) > 0  # the client counts exactly the episodes the server recorded
    assert f"{sum(e['value'] for e in episodes) / len(episodes):.1f}" == match.group(2)
    assert server.stop() == 0
    learner = checkpoint_state(server.data)["learner"]
    assert learner["num_timesteps"] > 0 and learner["n_updates"] > 0  # the rest were evaluation blocks (every 256)
    assert {episode["phase"] for episode in episodes} == {"train", "evaluate"}


def test_cartpole_ppo_reaches_its_target_with_one_client_acting_at_the_client_with_eight_envs(tmp_path):
    """The preset itself (RL Zoo's hyperparameters, target 475): about 30,000 steps, a minute or two."""
    data = tmp_path / "data"
    result = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-p", "cartpole_ppo", "--clients", "1", "--envs-per-client", "8",
         "--acting", "client", "--port", "0", "--data", str(data)], cwd=ROOT, capture_output=True, text=True,
        timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "target reached" in result.stdout
    phases = {episode["phase"] for episode in recorded(data)}
    assert {"train", "evaluate"} <= phases
    assert checkpoint_state(data)["learner"]["n_updates"] > 0


def test_acting_needs_clients(tmp_path):
    for extra, words in ((["--acting", "client"], "--acting needs --clients"),):
        result = subprocess.run([sys.executable, str(ROOT / "run.py"), "-p", TINY_VECTOR, "--port", "0", "--data",
                                 str(tmp_path / "data"), *extra], cwd=ROOT, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode != 0 and words in result.stderr, result.stderr
