"""The README's and the docs' code blocks, read from the Markdown (tests/docs/blocks.py) and run as a reader
would against a real server: the README's first clients in Python, JavaScript and curl against a CartPole
agent; Getting started's thermostat preset served and its client, and the tutorials' clients, against it.
Each block plays a few episodes (EPISODES), and the server must have recorded them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TEST_PRESETS, ServerProcess
from tests.docs.blocks import ROOT, block

pytestmark = pytest.mark.e2e

@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    """A CartPole agent's server (the tiny PPO of the tests: CartPole's spaces, small rollouts)."""
    server = ServerProcess(["-p", str(TEST_PRESETS / "tiny_ppo.py")], tmp_path_factory.mktemp("cartpole") / "data")
    yield server
    server.close()


@pytest.fixture(scope="module")
def thermostat(tmp_path_factory):
    """Getting started's thermostat preset, as the page has it, served."""
    folder = tmp_path_factory.mktemp("thermostat")
    preset = folder / "thermostat.yaml"
    preset.write_text(block("docs/getting-started.md", "thermostat-preset"))
    server = ServerProcess(["-p", str(preset)], folder / "data")
    yield server
    server.close()


def returns(server) -> list[dict]:
    path = server.data / "agents" / "1" / "returns.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run(command: list[str], server, cwd: Path, episodes: int = 2) -> str:
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key,
           "EPISODES": str(episodes), "PYTHONPATH": str(ROOT)}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "Error" not in result.stderr, result.stderr[-3000:]
    return result.stdout


def played(server, before: int, episodes: int) -> None:
    assert len(returns(server)) == before + episodes  # every episode reached the server and was recorded


def write(folder: Path, name: str, code: str) -> Path:
    path = folder / name
    path.write_text(code)
    return path


def node() -> str:
    found = shutil.which("node")
    assert found, "Node.js is needed for the JavaScript blocks (scripts/install.sh --test installs it)"
    return found


def test_the_readme_s_python_client(cartpole, tmp_path):
    before = len(returns(cartpole))
    out = run([sys.executable, str(write(tmp_path, "first_client.py", block("README.md", "readme-python")))],
              cartpole, tmp_path)
    assert re.findall(r"^episode (\d+): return [\d.]+$", out, re.MULTILINE) == ["0", "1"]
    played(cartpole, before, 2)


def test_the_readme_s_javascript_client(cartpole, tmp_path):
    before = len(returns(cartpole))
    (tmp_path / "examples").mkdir()  # the block, in the repository's root, requires ./examples/cartpole.js
    shutil.copy(ROOT / "examples" / "cartpole.js", tmp_path / "examples" / "cartpole.js")
    out = run([node(), str(write(tmp_path, "first_client.js", block("README.md", "readme-js")))], cartpole, tmp_path)
    assert re.findall(r"^episode (\d+): return \d+$", out, re.MULTILINE) == ["0", "1"]
    played(cartpole, before, 2)


def test_the_readme_s_curl_episode(cartpole, tmp_path):
    before = len(returns(cartpole))
    out = run(["bash", "-eu", str(write(tmp_path, "episode.sh", block("README.md", "readme-curl")))], cartpole,
              tmp_path).splitlines()
    login, step, last, logout = out
    assert json.loads(login)["ok"] is True and json.loads(login)["action_space"] == 2
    assert json.loads(step)["action"] in (0, 1)
    assert json.loads(last) == {"action": None}
    assert json.loads(logout) == {"ok": True}
    assert returns(cartpole)[before:][0]["length"] == 1  # the one step of the episode, its reward recorded
    played(cartpole, before, 1)


def test_getting_started_s_thermostat_client(thermostat, tmp_path):
    before = len(returns(thermostat))
    out = run([sys.executable, str(write(tmp_path, "thermostat.py",
                                         block("docs/getting-started.md", "thermostat-python")))], thermostat, tmp_path)
    assert re.findall(r"^episode (\d+): return -[\d.]+$", out, re.MULTILINE) == ["0", "1"]
    assert [row["length"] for row in returns(thermostat)[before:]] == [50, 50]
    played(thermostat, before, 2)


def test_the_python_tutorial_s_gymnasium_environment(thermostat, tmp_path):
    before = len(returns(thermostat))
    code = block("docs/tutorials/python.md", "python-gymnasium")
    out = run([sys.executable, str(write(tmp_path, "thermostat_gym.py", code))], thermostat, tmp_path)
    lines = out.splitlines()
    assert lines[0] == "[[2], 0.0, 40.0] 3"  # the spaces the page says space_to_json prints, the preset's
    assert lines[1].startswith("2 episodes; the last 10 returned -")
    played(thermostat, before, 2)


def test_the_javascript_tutorial_s_thermostat(thermostat, tmp_path):
    before = len(returns(thermostat))
    code = block("docs/tutorials/javascript.md", "javascript-thermostat")
    out = run([node(), str(write(tmp_path, "thermostat.js", code))], thermostat, tmp_path)
    assert re.findall(r"^episode (\d+): return -[\d.]+$", out, re.MULTILINE) == ["0", "1"]
    played(thermostat, before, 2)


def test_the_http_tutorial_s_episode_and_errors(thermostat, tmp_path):
    before = len(returns(thermostat))
    episode = run(["bash", "-eu", str(write(tmp_path, "episode.sh", block("docs/tutorials/http.md", "http-episode")))],
                  thermostat, tmp_path).splitlines()
    assert json.loads(episode[0])["agent"] == "thermostat"
    assert [json.loads(line).get("action", "-") is None for line in episode[1:4]] == [False, False, True]
    assert json.loads(episode[4]) == {"ok": True}
    played(thermostat, before, 1)
    errors = run(["bash", "-eu", str(write(tmp_path, "errors.sh", block("docs/tutorials/http.md", "http-errors")))],
                 thermostat, tmp_path).splitlines()
    page = (ROOT / "docs" / "tutorials" / "http.md").read_text()
    assert [line.rsplit(" ", 1)[1] for line in errors] == ["401", "401", "400"]
    for line in errors:  # the replies the page shows are the server's own
        assert line in page
