"""A YAML preset as a user runs it: ``run.py -p FILE.yaml --clients 4`` with -cp and --seed reaches its
target over HTTP. The tiny YAML test preset keeps CI short (10-15 s on 2 idle cores); the bundled
cartpole_ppo_yaml, the same preset as cartpole_ppo (tests/unit/test_preset_yaml.py), takes about a minute
with 4 clients: `python -m pytest -m slow` runs it (tests/e2e/test_presets.py), docs/reports/presets.md has its
times."""

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
def test_a_yaml_preset_reaches_its_target_with_four_clients(tmp_path):
    data = tmp_path / "data"
    result = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-p", str(TEST_PRESETS / "tiny_ppo_yaml.yaml"), "--clients", "4",
         "--seed", "3", "-cp", "validation.timeout_seconds=500", "--port", "0", "--data", str(data)],
        cwd=ROOT, capture_output=True, text=True, timeout=560)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "target reached" in result.stdout
    assert stored_parameters(data)["seed"] == 3  # --seed reached the stored agent
