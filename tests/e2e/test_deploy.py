"""``run.py deploy policy.onnx`` over real loopback HTTP: shepherd.client's clients (single and vector) and the
original seed client connect unchanged and get the policy's actions; the process never imports torch or the
learning code, and writes nothing. The policy files are built to the export contract (tests/onnx_policies.py);
an end-to-end test with a policy the exporter wrote starts `DeployProcess` on that file the same way."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

from shepherd.client import Client, VectorClient, make_vector_env, run_env, run_vector_env
from shepherd.policies.onnx import Policy
from tests.conftest import ROOT
from tests.e2e.deploy_process import DeployProcess
from tests.onnx_policies import cartpole_by_angle, cartpole_controller

#: what the deploy process must never import (modules, and packages with everything under them)
FORBIDDEN = ("torch", "stable_baselines3", "sb3_contrib", "shepherd.agents", "shepherd.level", "shepherd.graph",
             "shepherd.http", "shepherd.admin", "shepherd.storage", "shepherd.cli", "tinydb")


def in_process_returns(policy: Policy, seed: int, episodes: int) -> list[float]:
    """What run_env's episodes return with the policy acting in this process (the same resets)."""
    env = gym.make("CartPole-v1")
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed if episode == 0 else None)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return returns


def imported_modules(log: Path) -> set[str]:
    """The modules ``-X importtime`` reported, every one the process imported."""
    return {line.rsplit("|", 1)[1].strip() for line in log.read_text().splitlines()
            if line.startswith("import time:") and "|" in line}


@pytest.fixture
def workdir(tmp_path):
    """An empty folder to run the deploy server in, and one holding only the policy file."""
    (tmp_path / "cwd").mkdir()
    (tmp_path / "policy").mkdir()
    return tmp_path


def test_clients_get_the_policys_actions_and_the_process_stays_torch_free(workdir):
    policy_path, _ = cartpole_by_angle(workdir / "policy" / "cartpole.onnx", policy_version=4)
    before = sorted(os.listdir(workdir / "policy"))
    server = DeployProcess(policy_path, workdir / "cwd", workdir / "deploy.log", import_log=True)
    try:
        maps = Path(f"/proc/{server.process.pid}/maps").read_text()
        client = Client(server.url, server.api_key)
        returns = run_env(client, "CartPole-v1", seed=11, episodes=4)  # logs in with mode "train"
        assert returns == in_process_returns(Policy.load(policy_path), 11, 4)
        assert len(set(returns)) > 1
        client.logout()
        client.close()
        vector = VectorClient(server.url, server.api_key, n_envs=3)
        env_returns = run_vector_env(vector, make_vector_env("CartPole-v1", 3), seed=5, episodes=6, mode="evaluate")
        assert sum(len(r) for r in env_returns) >= 6 and all(20 <= x <= 100 for r in env_returns for x in r)
        assert vector.policy_version == 4
        vector.logout()
        vector.close()
        maps_after = Path(f"/proc/{server.process.pid}/maps").read_text()
    finally:
        status = server.stop()
    assert status == 0
    assert "libtorch" not in maps + maps_after
    modules = imported_modules(workdir / "deploy.log")
    assert "shepherd.deploy.app" in modules and "onnxruntime" in modules  # the log does list the imports
    assert not {m for m in modules if any(m == name or m.startswith(name + ".") for name in FORBIDDEN)}
    assert os.listdir(workdir / "cwd") == [] and sorted(os.listdir(workdir / "policy")) == before


def test_the_seed_client_plays_against_it_unchanged(workdir):
    policy_path, _ = cartpole_by_angle(workdir / "policy" / "cartpole.onnx")
    server = DeployProcess(policy_path, workdir / "cwd", workdir / "deploy.log")
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key}
    client = subprocess.Popen([sys.executable, str(ROOT / "examples" / "seed_client.py")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:  # the seed's client loops forever, printing each action: let it play 400 steps (about 8 episodes,
        # each ended with "done" and started again: a wrong reply would end it with a traceback)
        deadline = time.monotonic() + 60
        while len(lines) < 401 and time.monotonic() < deadline:
            line = client.stdout.readline()
            assert line, client.stderr.read()
            lines.append(line)
    finally:
        client.kill()
        client.communicate()
        status = server.stop()
    assert lines[0].strip() == "Login successful"
    actions = [re.fullmatch(r"action  \{'action': (\d), 'policy_version': 7\}", line.strip()) for line in lines[1:]]
    assert len(actions) == 400 and all(actions)
    assert {match.group(1) for match in actions} == {"0", "1"}
    assert status == 0


def test_unusable_files_and_bad_usage_exit_with_one_line(workdir):
    damaged = workdir / "policy" / "damaged.onnx"
    damaged.write_bytes(b"not an onnx model" * 10)
    run = [sys.executable, str(ROOT / "run.py"), "deploy"]
    result = subprocess.run([*run, str(damaged), "--port", "0"], cwd=workdir / "cwd", capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "is damaged" in result.stderr
    missing = subprocess.run([*run, str(workdir / "none.onnx")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "cannot read the policy file" in missing.stderr
    good, _ = cartpole_controller(workdir / "policy" / "good.onnx")
    own = "a-key-of-my-own-of-at-least-32-characters"
    (workdir / "key").write_text(own + "\n")
    weak = subprocess.run([*run, str(good), "--key", "short"], capture_output=True, text=True, timeout=60)
    assert weak.returncode == 2 and "not taken on the command line" in weak.stderr
    server = DeployProcess(good, workdir / "cwd", workdir / "deploy.log", "--key-file", str(workdir / "key"))
    try:
        assert server.api_key is None and any("API key: the one given" in line for line in server.lines)
        client = Client(server.url, own)
        assert client.login()["agent"] == "cartpole"
        client.close()
        port = server.url.rsplit(":", 1)[1].strip("/")
        taken = subprocess.run([*run, str(good), "--port", port], capture_output=True, text=True, timeout=60)
        assert taken.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr
    finally:
        assert server.stop() == 0
    helped = subprocess.run([*run, "-h"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "--key" in helped.stdout and "evaluate mode" in helped.stdout
    listed = subprocess.run([sys.executable, str(ROOT / "run.py"), "-h"], capture_output=True, text=True, timeout=120)
    assert "deploy" in listed.stdout


@pytest.mark.parametrize("argv", [["deploy", "--help"], ["-v", "deploy", "--help"], ["--verbose", "deploy", "-h"]])
def test_the_deploy_command_line_never_imports_torch(tmp_path, argv):
    """`run.py deploy` starts before the learning server's command line, with -v/--verbose given first too."""
    result = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "run.py"), *argv], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "policy" in result.stdout
    modules = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
               if line.startswith("import time:") and "|" in line}
    assert "shepherd.deploy.cli" in modules
    assert not {m for m in modules if any(m == name or m.startswith(name + ".") for name in FORBIDDEN)}
