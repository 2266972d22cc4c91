"""The vector clients against a real server: ``python -m shepherd.client --n-envs``, the JS example's
``--envs`` mode, a session lost mid-run, and ``run.py --clients 1 --envs-per-client 4``."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from shepherd.client import VectorClient, make_vector_env, run_vector_env
from tests.conftest import ROOT, TEST_PRESETS
from tests.e2e.test_cartpole import checkpoint_state

TINY = str(TEST_PRESETS / "tiny_ppo.py")
TINY_VECTOR = str(TEST_PRESETS / "tiny_ppo_vector.py")


def recorded(data) -> list[dict]:
    path = data / "agents" / "1" / "returns.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("extra", [[], ["--async"]], ids=["sync", "async"])
def test_the_python_client_with_n_envs_records_every_episode_and_the_agent_learns(server_factory, extra):
    server = server_factory(TINY)
    result = subprocess.run(
        [sys.executable, "-m", "shepherd.client", "--url", server.url, "--n-envs", "4", "--episodes", "8",
         "--seed", "0", *extra], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "SHEPHERD_API_KEY": server.api_key})
    assert result.returncode == 0, result.stderr
    match = re.fullmatch(r"(\d+) episodes over 4 envs, mean return ([\d.]+)\n", result.stdout)
    assert match, result.stdout
    episodes = recorded(server.data)
    assert len(episodes) == int(match.group(1)) >= 8  # the step that reached 8 may have ended more
    assert {episode["phase"] for episode in episodes} == {"train"}
    assert f"{sum(e['value'] for e in episodes) / len(episodes):.1f}" == match.group(2)
    assert server.stop() == 0
    learner = checkpoint_state(server.data)["learner"]
    assert learner["num_timesteps"] > 0 and learner["n_updates"] > 0


def test_the_javascript_client_steps_several_cartpoles_in_one_request(server_factory):
    node = shutil.which("node")
    assert node, "Node.js is needed for the JavaScript example (.ci/run installs it)"
    server = server_factory(TINY)
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key}
    result = subprocess.run([node, str(ROOT / "examples" / "cartpole_client.js"), "6", "--envs", "4"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "logged in to agent tiny with 4 CartPoles" in result.stdout
    printed = [float(line.rsplit(" ", 1)[1]) for line in result.stdout.splitlines() if line.startswith("episode ")]
    assert len(printed) >= 6  # the step that reached 6 may have ended more
    assert sorted(printed) == sorted(episode["value"] for episode in recorded(server.data))
    assert server.stop() == 0


class KickedOut(VectorClient):
    """A vector client whose session is logged out behind its back at its 20th step: the server answers
    that step 401, as it would after a restart or an expiry."""

    logins = 0

    def login(self, mode="train"):
        self.logins += 1
        return super().login(mode)

    def step(self, *args, **kwargs):
        if self.logins == 1 and self.seq == 19:
            self.post("/shepherd/logout/", {"session_key": self.session_key})
        return super().step(*args, **kwargs)


def test_a_lost_vector_session_is_logged_in_again_and_only_answered_episodes_count(server_factory):
    server = server_factory(TINY)
    client = KickedOut(server.url, server.api_key, n_envs=3, timeout=60)
    env = make_vector_env("CartPole-v1", 3)
    try:
        returns = run_vector_env(client, env, seed=1, episodes=10)
        client.logout()
    finally:
        env.close()
        client.close()
    assert client.logins == 2
    assert sorted(value for env_returns in returns for value in env_returns) == sorted(
        episode["value"] for episode in recorded(server.data))
    assert server.stop() == 0


def run_validation(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-p", TINY_VECTOR, "--clients", "1", "--envs-per-client", "4",
         "--port", "0", "--data", str(tmp_path / "data"), *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=240)


def test_run_py_validates_a_preset_with_one_client_of_four_envs(tmp_path):
    result = run_validation(tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "target reached" in result.stdout
    phases = {episode["phase"] for episode in recorded(tmp_path / "data")}
    assert {"train", "evaluate"} <= phases


def test_run_py_clients_ask_for_their_envs_at_login(tmp_path):
    result = run_validation(tmp_path, "--max-envs", "3")  # a session of 4 envs is refused at login
    assert result.returncode == 1
    assert "every local client exited (status 1)" in result.stdout
