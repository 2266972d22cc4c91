"""The example clients in examples/ against a real server: the seed's Python client and the JS one."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, TEST_PRESETS

TINY = str(TEST_PRESETS / "tiny_ppo.py")


def returns_recorded(data) -> list[str]:
    path = data / "agents" / "1" / "returns.jsonl"
    return path.read_text().splitlines() if path.exists() else []


def test_the_seed_client_updated_for_gymnasium_learns(server_factory, tmp_path):
    server = server_factory(TINY)
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key}
    client = subprocess.Popen([sys.executable, str(ROOT / "examples" / "seed_client.py")], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:  # the seed's client loops forever: let it play until the server has recorded episodes
        deadline = time.monotonic() + 60
        while len(returns_recorded(server.data)) < 5 and time.monotonic() < deadline:
            assert client.poll() is None, client.stderr.read()
            time.sleep(0.2)
    finally:
        client.kill()
        client.communicate()
    assert len(returns_recorded(server.data)) >= 5
    assert server.stop() == 0


def test_the_javascript_client_plays_episodes(server_factory):
    node = shutil.which("node")
    assert node, "Node.js is needed for the JavaScript example (.ci/run installs it)"
    server = server_factory(TINY)
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key}
    result = subprocess.run([node, str(ROOT / "examples" / "cartpole_client.js"), "4"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "logged in to agent tiny" in result.stdout
    assert sum(line.startswith("episode ") for line in result.stdout.splitlines()) == 4
    assert len(returns_recorded(server.data)) == 4
    assert server.stop() == 0


def test_the_javascript_client_names_its_client_for_an_advised_agent(server_factory):
    node = shutil.which("node")
    assert node, "Node.js is needed for the JavaScript example (.ci/run installs it)"
    server = server_factory(str(TEST_PRESETS / "tiny_ppo_advised.py"))
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key}
    unnamed = subprocess.run([node, str(ROOT / "examples" / "cartpole_client.js"), "1"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert unnamed.returncode == 1 and "HTTP 400" in unnamed.stderr and "client" in unnamed.stderr
    named = subprocess.run([node, str(ROOT / "examples" / "cartpole_client.js"), "3"],
                           env={**env, "SHEPHERD_CLIENT": "arm-js"}, capture_output=True, text=True, timeout=120)
    assert named.returncode == 0, named.stderr
    recorded = [json.loads(line) for line in returns_recorded(server.data)]
    assert len(recorded) >= 3 and {row.get("client") for row in recorded} == {"arm-js"}
    assert server.stop() == 0


def test_the_javascript_client_retries_a_step_with_its_seq_and_it_counts_once(server_factory):
    """Steps that wait out a slow PPO update get 503 (act timeout 0.1 s, 300 epochs an update): the client
    sends each again with its seq, gets its action, and every episode's return is recorded as it played it."""
    node = shutil.which("node")
    assert node, "Node.js is needed for the JavaScript example (.ci/run installs it)"
    server = server_factory(TINY, "--act-timeout", "0.1", "-cp", "agents.tiny.parameters.n_epochs=300",
                            "--parameter-bound", "n_epochs=1:300")
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key}
    result = subprocess.run([node, str(ROOT / "examples" / "cartpole_client.js"), "5"], env=env,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert "retrying step seq" in result.stderr and "HTTP 503" in result.stderr  # it did wait out updates
    played = [float(line.rsplit(" ", 1)[1]) for line in result.stdout.splitlines() if line.startswith("episode ")]
    assert len(played) == 5
    assert [json.loads(line)["value"] for line in returns_recorded(server.data)] == played
    assert server.stop() == 0


def lessons_preset(tmp_path, config: dict) -> str:
    """tiny_ppo.py as YAML, with one lesson of ``config`` (docs/lessons.md)."""
    path = tmp_path / "tiny_lessons.yaml"
    path.write_text(json.dumps({  # JSON is YAML
        "owner": "tests",
        "agents": [{"name": "tiny", "algorithm": "PPO", "observation_space": [[4], "-inf", "inf"], "action_space": 2,
                    "parameters": {"n_envs": 2, "n_steps": 16, "batch_size": 32, "n_epochs": 2, "seed": 0},
                    "lessons": [{"name": "tight rail", "config": config}]}],
        "schedule": {"steps_between_evaluation_periods": None, "evaluation_episodes": 0}}))
    return str(path)


def test_the_javascript_client_sets_its_cartpole_up_with_each_episodes_config(server_factory, tmp_path):
    """A negative x_threshold ends every episode at its first step (|x| is above it: return 1), which
    CartPole's own rail of 2.4 m never does: the configs were applied, in the single-env, vector and
    client-acting sessions alike, and recorded with each episode."""
    node = shutil.which("node")
    assert node, "Node.js is needed for the JavaScript example (.ci/run installs it)"
    config = {"x_threshold": {"choice": [-1.0, -2.0]}, "length": 0.25}
    server = server_factory(lessons_preset(tmp_path, config))
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key}
    script = str(ROOT / "examples" / "cartpole_client.js")
    for extra in ([], ["--envs", "3"], ["--acting", "client", "--envs", "2"]):
        if extra[:1] == ["--acting"] and not (ROOT / "examples" / "node_modules" / "onnxruntime-node").exists():
            pytest.fail("--acting client needs onnxruntime-node: run `npm install` in examples/")
        result = subprocess.run([node, script, "4", *extra], env=env, capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stderr
        played = [float(line.rsplit(" ", 1)[1]) for line in result.stdout.splitlines() if line.startswith("episode ")]
        assert len(played) >= 4 and set(played) == {1.0}, (extra, result.stdout)
    assert "lesson tight rail" in result.stdout  # the acting session's replies name the lesson
    recorded = [json.loads(line) for line in returns_recorded(server.data)]
    assert len(recorded) >= 12 and {row["lesson"] for row in recorded} == {"tight rail"}
    assert {row["config"]["x_threshold"] for row in recorded} == {-1.0, -2.0}
    assert server.stop() == 0


def test_the_javascript_client_refuses_a_config_its_cartpole_has_no_property_for_in_one_line(server_factory,
                                                                                             tmp_path):
    node = shutil.which("node")
    assert node, "Node.js is needed for the JavaScript example (.ci/run installs it)"
    server = server_factory(lessons_preset(tmp_path, {"lenght": 0.25}))
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key}
    result = subprocess.run([node, str(ROOT / "examples" / "cartpole_client.js"), "2"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        'error: the lesson\'s config sets "lenght", but the CartPole has no property "lenght"; its properties: '
        "gravity, masscart, masspole, length, force_mag, tau, maxSteps, theta_threshold_radians, x_threshold"]
    assert returns_recorded(server.data) == []
    assert server.stop() == 0


def test_the_javascript_client_sends_pixels_as_binary_tensors(server_factory):
    """--pixels draws each CartPole as a 40 x 60 x 1 frame and sends it as bytes: two frames as JSON (nested
    lists, ~19 kB) are over the server's --max-body of 12,000 bytes, as bytes (4,800) they are not; --pixels fp32
    sends FP32 tensors. Every episode is recorded, in single and vector sessions."""
    node = shutil.which("node")
    assert node, "Node.js is needed for the JavaScript example (.ci/run installs it)"
    server = server_factory(str(TEST_PRESETS / "tiny_pixels.py"), "--max-body", "12000")
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key}
    script = str(ROOT / "examples" / "cartpole_client.js")
    runs = (["3", "--pixels", "--envs", "2"], ["2", "--pixels", "fp32"], ["2", "--pixels", "uint8"])
    for args in runs:
        result = subprocess.run([node, script, *args], env=env, capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, (args, result.stderr)
        assert "observations [[40,60,1],0,255]" in result.stdout
    assert len(returns_recorded(server.data)) >= 3 + 2 + 2
    without = subprocess.run([node, script, "1", "--envs", "2"], env=env, capture_output=True, text=True, timeout=60)
    assert without.returncode == 1 and "expected [40, 60, 1]" in without.stderr  # CartPole's 4 numbers do not fit
    assert server.stop() == 0


def test_the_javascript_client_draws_frames_for_an_image_agent_channels_first(server_factory):
    """An image agent (a CNN's, ``["Image", [40, 60, 3], "channels_first"]``) takes the example's frames laid out
    channels first, as UINT8 tensors (it took only a box's [[H, W, C], 0, 255], which an MLP learns from);
    ``--pixels fp32`` is refused before anything is sent (an image's pixels are integers)."""
    node = shutil.which("node")
    assert node, "Node.js is needed for the JavaScript example (.ci/run installs it)"
    server = server_factory(str(TEST_PRESETS / "tiny_pixels_image.py"))
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key}
    script = str(ROOT / "examples" / "cartpole_client.js")
    for args in (["2", "--pixels"], ["2", "--pixels", "--envs", "2"]):
        result = subprocess.run([node, script, *args], env=env, capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, (args, result.stderr)
    assert len(returns_recorded(server.data)) >= 2 + 2
    fp32 = subprocess.run([node, script, "1", "--pixels", "fp32"], env=env, capture_output=True, text=True, timeout=60)
    assert fp32.returncode == 1 and "an image agent takes integer pixels" in fp32.stderr
    assert server.stop() == 0
