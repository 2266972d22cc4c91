"""The action-mask preset as a user runs it: ``run.py -p maze_maskableppo`` with local clients that send
the maze's masks over HTTP (single-env clients, and one vector client whose envs each send theirs) reaches
the shortest path's return, which a single move into a wall (-50) would spoil."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.timeout(600)
@pytest.mark.parametrize("clients", [["--clients", "2"], ["--clients", "1", "--envs-per-client", "4"]],
                         ids=["2-clients", "1-vector-client-of-4"])
def test_maskable_ppo_walks_the_maze_s_shortest_path(clients, tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-p", "maze_maskableppo", *clients, "--port", "0",
         "--data", str(tmp_path / "data")], cwd=ROOT, capture_output=True, text=True, timeout=560)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "target reached" in result.stdout and "returned -14.0" in result.stdout
