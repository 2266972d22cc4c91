"""``run.py -p PRESET`` without --clients: progress lines while agents train, and stored agents the preset
does not declare (listed with their schedule at the start; left out with --only-preset)."""

import queue
import threading
import time

from shepherd.client import Client
from tests.conftest import TEST_PRESETS

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
