"""``run.py -p PRESET`` without --clients: progress lines while agents train, and stored agents the preset
does not declare (listed with their schedule at the start; left out with --only-preset)."""

import queue
import subprocess
import sys
import threading
import time

import pytest

from shepherd.client import Client, ShepherdError
from tests.conftest import ROOT, TEST_PRESETS

TINY = str(TEST_PRESETS / "tiny_ppo.py")
OBS4 = [0.0, 0.01, 0.0, -0.01]


def play(url: str, key: str, episodes: int, steps: int = 20) -> None:
    client = Client(url, key, timeout=30)
    try:
        client.login()
        for _ in range(episodes):
            action = client.step(OBS4, 0.0, False)
            for step in range(steps):
                action = client.step(OBS4, 1.0, step == steps - 1)
            assert action is None
        client.logout()
    finally:
        client.close()


def next_line(lines: queue.Queue, wanted: str, timeout: float = 30.0) -> str:
    """The server's next output line containing ``wanted`` (a bound on a hang, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        if line is None:
            raise AssertionError(f"the server's output ended without a line containing {wanted!r}")
        if wanted in line:
            return line


def read_lines(server) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in server.process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def test_a_server_without_clients_prints_a_progress_line_for_the_agent_that_trains(server_factory):
    server = server_factory(TINY)
    lines = read_lines(server)
    play(server.url, server.api_key, episodes=15)  # 300 steps
    line = next_line(lines, "agent tiny (id 1): steps")
    assert "steps/s | phase train" in line and "sessions" in line and "train return" in line, line
    assert server.stop() == 0


def run_py(*argv: str) -> str:
    result = subprocess.run([sys.executable, str(ROOT / "run.py"), *argv], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_agents_the_preset_does_not_declare_are_listed_with_their_schedule_and_left_out_with_only_preset(
        server_factory, tmp_path):
    data = tmp_path / "data"
    run_py("users", "add", "alice", "--data", str(data))
    out = run_py("agents", "add", "alice", "pole", "--algorithm", "DQN", "--observation-space", '[[4], "-inf", "inf"]',
                 "--action-space", "2", "--param", "learning_starts=64", "--param", "buffer_size=1000", "--key",
                 "--data", str(data))
    key = out.strip().splitlines()[-1]

    server = server_factory(TINY, data=data)
    out = "".join(server.lines)
    assert "The data folder holds 1 served agent(s) that the preset does not declare" in out, out
    assert ("agent alice/pole (id 1): DQN, 0 steps so far; schedule: heatup 64 steps (random actions), "
            "train forever, evaluate 5 episodes every 10,000 steps") in out, out
    assert "agent tiny: PPO" in out and "Not served" not in out
    client = Client(server.url, key, timeout=30)
    try:
        assert client.login()["agent"] == "pole"  # served
    finally:
        client.close()
    assert server.stop() == 0

    server = server_factory(TINY, "--only-preset", data=data)
    out = "".join(server.lines)
    assert "Not served (--only-preset): 1 agent(s) of the data folder that the preset does not declare" in out, out
    assert ("agent alice/pole (id 1): DQN, not started; served without --only-preset, its schedule would be: "
            "heatup 64 steps (random actions), train forever, evaluate 5 episodes every 10,000 steps") in out, out
    assert "served agent(s)" not in out and "agent tiny: PPO" in out
    client = Client(server.url, key, timeout=30)
    try:
        with pytest.raises(ShepherdError) as refused:
            client.login()
        assert refused.value.status == 401 and "not served" in refused.value.message
    finally:
        client.close()
    assert server.stop() == 0
