"""examples/cartpole_onnx.js: an exported policy in Node with onnxruntime-node, on the JavaScript CartPole of
the HTTP example; its actions are shepherd.policies.onnx's (so the server's) for the same observations."""

import json
import shutil
import subprocess

import numpy as np
import pytest

from shepherd.policies.onnx import Policy
from tests.conftest import ROOT
from tests.onnx_policies import cartpole_controller, linear_box, masked_discrete

SCRIPT = ROOT / "examples" / "cartpole_onnx.js"


def node(*args: str) -> subprocess.CompletedProcess:
    executable = shutil.which("node")
    if executable is None:
        pytest.skip("Node.js is not installed (scripts/install.sh --test installs it)")
    assert (ROOT / "examples" / "node_modules" / "onnxruntime-node").is_dir(), \
        "onnxruntime-node is missing: run `npm install` in examples/ (scripts/install.sh --test does)"
    return subprocess.run([executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_an_exported_policy_balances_the_javascript_cartpole(tmp_path):
    path, _ = cartpole_controller(tmp_path / "cartpole.onnx", policy_version=9)
    result = node(str(path), "3")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("policy of agent cartpole (PPO, policy version 9)")
    assert lines[1:] == [f"episode {i}: return 500" for i in (1, 2, 3)]


@pytest.mark.parametrize("masked", [False, True])
def test_node_acts_as_shepherd_policy(tmp_path, masked):
    rng = np.random.default_rng(3)
    if masked:
        path, _ = masked_discrete(tmp_path / "p.onnx", rng.normal(size=(4, 2)), rng.normal(size=2))
    else:
        path, _ = cartpole_controller(tmp_path / "p.onnx")
    observations = (rng.normal(size=(300, 4)) * [1, 1, 0.1, 1]).astype(np.float32).tolist()
    result = node(str(path), "--act", json.dumps(observations))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == Policy.load(path).act_batch(observations)


def test_a_policy_for_another_env_or_a_damaged_file_is_refused(tmp_path):
    box, _ = linear_box(tmp_path / "box.onnx", np.ones((3, 2)), np.zeros(2), [-1, -1], [1, 1])
    result = node(str(box))
    assert result.returncode == 2 and "CartPole needs observations [[4], ...] and 2 actions" in result.stderr
    damaged = tmp_path / "damaged.onnx"
    damaged.write_bytes(cartpole_controller(tmp_path / "p.onnx")[0].read_bytes()[:200])
    result = node(str(damaged))
    assert result.returncode == 2 and "is damaged" in result.stderr
