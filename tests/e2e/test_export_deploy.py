"""Issue 17's chain as a user runs it: a CartPole agent learns on the learning server (``run.py -p``), is
exported with ``run.py agents export --format onnx`` while it serves, and ``run.py deploy`` answers the same
clients with the same actions: shepherd.client gets the same returns from both with the same env seeds, and
the file's version is the one the learning server's evaluation replies carry."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shepherd.client import Client, run_env
from shepherd.policies.onnx import Policy
from tests.conftest import ROOT
from tests.e2e.deploy_process import DeployProcess


@pytest.mark.timeout(600)
def test_an_exported_policy_deployed_answers_as_the_learning_server(server_factory, tmp_path):
    data = tmp_path / "data"
    server = server_factory("cartpole_ppo", data=data)
    try:
        trainer = Client(server.url, server.api_key)
        run_env(trainer, "CartPole-v1", seed=1, episodes=80)  # a few thousand steps: some updates
        trainer.logout()
        trainer.close()
        policy_file = tmp_path / "policy.onnx"
        exported = subprocess.run([sys.executable, str(ROOT / "run.py"), "agents", "export", "cartpole", "--format",
                                   "onnx", "-o", str(policy_file), "--data", str(data)],
                                  cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert exported.returncode == 0, exported.stdout + exported.stderr
        policy = Policy.load(policy_file)
        evaluator = Client(server.url, server.api_key)
        learning_returns = run_env(evaluator, "CartPole-v1", seed=11, episodes=4, mode="evaluate")
        version = evaluator.policy_version
        evaluator.logout()
        evaluator.close()
    finally:
        server.stop()
    assert version == policy.policy_version > 0
    deployed = DeployProcess(policy_file, tmp_path, tmp_path / "deploy.log")
    try:
        client = Client(deployed.url, deployed.api_key)
        deploy_returns = run_env(client, "CartPole-v1", seed=11, episodes=4, mode="evaluate")
        client.logout()
        client.close()
    finally:
        assert deployed.stop() == 0
    assert deploy_returns == learning_returns
    assert len(set(learning_returns)) > 1 or learning_returns[0] == 500.0  # the episodes differ (or all succeed)
