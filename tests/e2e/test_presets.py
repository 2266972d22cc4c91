"""Every preset's validation block, run as a user runs it: ``run.py -p PRESET --clients N`` must exit 0.

These are long learning runs, marked ``slow`` (``python -m pytest -m slow``); CI runs cartpole_ppo's in
test_cartpole.py.
"""

import subprocess
import sys

import pytest

from shepherd.loading import list_presets, load_preset
from shepherd.loading.zoo import zoo_folder
from tests.conftest import ROOT


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("preset", sorted(list_presets()))
def test_every_preset_reaches_its_target(preset, tmp_path):
    validation = load_preset(preset).validation
    assert validation is not None, f"preset {preset} has no validation block"
    result = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-p", preset, "--clients", str(validation.clients),
         "--port", "0", "--data", str(tmp_path / "data")],
        cwd=ROOT, capture_output=True, text=True, timeout=validation.timeout_seconds + 120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "target reached" in result.stdout


#: RL Zoo entries served as they are (shepherd.loading.zoo), with the -cp each needs
ZOO_PRESETS = [("zoo:ppo/CartPole-v1", 4, ())]


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("preset, clients, overrides", ZOO_PRESETS)
def test_rl_zoo_entries_reach_their_targets(preset, clients, overrides, tmp_path):
    if zoo_folder() is None:
        pytest.skip("rl_zoo3 is not installed")
    cp = [item for override in overrides for item in ("-cp", override)]
    validation = load_preset(preset, overrides=overrides).validation
    result = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-p", preset, *cp, "--clients", str(clients), "--port", "0",
         "--data", str(tmp_path / "data")],
        cwd=ROOT, capture_output=True, text=True, timeout=validation.timeout_seconds + 120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "target reached" in result.stdout
