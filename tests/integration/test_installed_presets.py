"""An installed (non-editable) copy lists and loads the bundled presets: a wheel built from the sources,
installed into a fresh virtual environment outside the repository, run from another folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from shepherd.loading import list_presets
from tests.conftest import ROOT

SCRIPT = """
import json, shepherd
from shepherd.cli import main
from shepherd.loading import list_presets, load_preset
graph = load_preset("cartpole_ppo")
from_yaml = load_preset("cartpole_ppo_yaml")
print(json.dumps({"file": shepherd.__file__, "presets": list_presets(), "loaded": graph.name,
                  "target": graph.validation.target_return, "yaml": from_yaml.name,
                  "yaml_target": from_yaml.validation.target_return}))
main(["-l"])
"""


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run([str(arg) for arg in args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.e2e  # starts another process
def test_a_wheel_installed_outside_the_repository_lists_and_loads_the_presets(tmp_path):
    # build from a copy, so that the build leaves nothing (build/, *.egg-info) in the repository
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("shepherd", "presets"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    shutil.copy(ROOT / "setup.py", source / "setup.py")
    wheels = tmp_path / "wheels"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    # offline: no build isolation (this environment's setuptools builds it), no index
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", wheels, source,
        cwd=tmp_path, env=env)
    (wheel,) = wheels.glob("shepherd_rl-*.whl")

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv, cwd=tmp_path, env=env)
    python = venv / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                    cwd=tmp_path, env=env).strip())
    # torch, SB3 and the rest from this environment (a plain path line: its .pth files, among them an
    # editable install of the repository, are not processed), after the new venv's own site-packages
    (site / "shepherd_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel,
        cwd=tmp_path, env=env)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lines = run(python, "-c", SCRIPT, cwd=elsewhere, env=env).splitlines()
    found = json.loads(lines[0])
    assert Path(found["file"]).is_relative_to(site), found["file"]  # the installed copy, not the repository's
    # the checkout's presets (list_presets() would read an editable install's, which may be another checkout's)
    assert "cartpole_ppo" in found["presets"] and found["presets"] == list_presets(ROOT / "presets")
    assert found["loaded"] == "cartpole_ppo" and found["target"] == 475.0
    assert found["yaml"] == "cartpole_ppo_yaml" and found["yaml_target"] == 475.0  # YAML presets are installed too
    assert any(line.startswith("cartpole_ppo ") for line in lines[1:])  # run.py -l, installed
    assert any(line.split()[:2] == ["cartpole_ppo_yaml", "yaml"] for line in lines[1:])
    assert not (site / "presets").exists()  # no top-level package named "presets" is claimed
    assert (site / "shepherd" / "presets" / "cartpole_ppo.py").is_file()
    assert (site / "shepherd" / "presets" / "cartpole_ppo_yaml.yaml").is_file()
