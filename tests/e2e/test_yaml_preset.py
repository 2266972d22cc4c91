"""A YAML preset as a user runs it: ``run.py -p FILE.yaml --clients 4`` with -cp and --seed reaches its
target over HTTP. The tiny YAML test preset keeps CI short (about 10 s); the bundled cartpole_ppo_yaml runs
with one vector client of 8 envs (about 10 s; with 4 single-env clients it takes a minute, see the README's
table and `python -m pytest -m slow`)."""

import subprocess
import sys

import pytest

from shepherd.storage import Store
from tests.conftest import ROOT, TEST_PRESETS


def stored_parameters(data):
    store = Store(data)
    try:
        (agent,) = store.agents()
        return agent.parameters
    finally:
        store.close()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("preset, clients", [
    (str(TEST_PRESETS / "tiny_ppo_yaml.yaml"), ["--clients", "4"]),
    ("cartpole_ppo_yaml", ["--clients", "1", "--envs-per-client", "8"]),
], ids=["tiny-yaml-4-clients", "cartpole_ppo_yaml-1-vector-client-of-8"])
def test_a_yaml_preset_reaches_its_target(preset, clients, tmp_path):
    data = tmp_path / "data"
    result = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-p", preset, *clients, "--seed", "3",
         "-cp", "validation.timeout_seconds=500", "--port", "0", "--data", str(data)],
        cwd=ROOT, capture_output=True, text=True, timeout=560)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "target reached" in result.stdout
    assert stored_parameters(data)["seed"] == 3  # --seed reached the stored agent
