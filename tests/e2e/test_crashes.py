"""Crash safety over real processes: ``kill -9`` at random moments while clients train, and damaged files.

The promises: the store always opens, a checkpoint is never half-written, the agent resumes from its
last checkpoint and loses at most the steps since then, and a damaged file stops the server with a
clear error instead of a silent reset.
"""

import json
import random
import re
import subprocess
import sys
import threading
import time
import zipfile

from shepherd.client import Client, ShepherdError
from shepherd.graph import load_preset
from shepherd.storage import Store
from tests.conftest import ROOT, TEST_PRESETS

TINY = str(TEST_PRESETS / "tiny_ppo.py")  # checkpoints every 200 steps and every second
CHECKPOINT_EVERY_STEPS = 200


class Driver(threading.Thread):
    """Steps a tiny CartPole-like loop through a server until told to stop; counts acknowledged steps."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__(daemon=True)
        self.client = Client(url, key, timeout=5, retry_seconds=0)
        self.acked = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            self.client.login()
            while not self.stopping.is_set():
                self.client.step([0.0, 0.0, 0.0, 0.0], 0.0, False)  # an episode's first step: not counted
                for t in range(20):
                    self.client.step([0.01 * t, 0.0, 0.0, 0.0], 1.0, t == 19)
                    self.acked += 1
        except (OSError, ShepherdError):
            pass  # the server was killed under it
        finally:
            self.client.close()


def steps_so_far(server) -> int:
    for line in server.lines:
        if match := re.search(r"PPO, (\d+) steps so far", line):
            return int(match.group(1))
    raise AssertionError("the server did not say how many steps its agent has")


def test_kill_9_at_random_moments_never_damages_the_store_and_loses_at_most_a_checkpoint(server_factory, tmp_path):
    data = tmp_path / "data"
    rng = random.Random(20261122)
    server = server_factory(TINY, data=data)
    key, before = server.api_key, 0
    for _ in range(6):
        driver = Driver(server.url, key)
        driver.start()
        time.sleep(rng.uniform(1.0, 3.5))
        server.close()  # SIGKILL, at a moment nobody chose
        driver.stopping.set()
        driver.join(10)
        counted = before + driver.acked  # steps the server had acknowledged when it died
        json.loads((data / "store.json").read_text())  # the store always opens
        with zipfile.ZipFile(data / "agents" / "1" / "model.zip") as archive:
            assert archive.testzip() is None  # the checkpoint is whole
            saved = json.loads(archive.read("shepherd.json"))["schedule"]["steps"]
        server = server_factory(TINY, data=data)
        resumed = steps_so_far(server)
        assert resumed == saved
        assert 0 <= counted - resumed <= CHECKPOINT_EVERY_STEPS + 50, (counted, resumed)
        assert not list((data / "agents" / "1").glob(".*.tmp")), "a crashed write's temporary file is left"
        before = resumed
    assert server.stop() == 0
    assert before > 6 * 100  # the agent kept learning across all those crashes


def run_server(data, timeout=60):
    return subprocess.run([sys.executable, str(ROOT / "run.py"), "-p", TINY, "--port", "0", "--data", str(data)],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def start_and_stop_in_process(data) -> int:
    """Create the tiny preset's agent (or resume it), checkpoint it, stop; returns its steps."""
    graph = load_preset(TINY)
    store = Store(data)
    try:
        graph.create_graph(store)
        steps = graph.runtime().tracker.steps
        graph.runtime().tracker.steps += 10  # as if it had learned: the next start must see it
        graph.close()
        return steps
    finally:
        store.close()


def test_a_damaged_store_or_checkpoint_stops_the_start_with_a_clear_error_and_is_left_alone(tmp_path):
    data = tmp_path / "data"
    start_and_stop_in_process(data)
    store, model = data / "store.json", data / "agents" / "1" / "model.zip"
    good_store, good_model = store.read_bytes(), model.read_bytes()

    store.write_bytes(good_store[: len(good_store) // 2])  # cut in the middle, by hand
    result = run_server(data)
    assert result.returncode == 2 and "store.json is damaged" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and store.read_bytes() == good_store[: len(good_store) // 2]
    store.write_bytes(good_store)

    model.write_bytes(good_model[:1000])
    result = run_server(data)
    assert result.returncode == 2 and "model.zip cannot be loaded" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and model.read_bytes() == good_model[:1000]
    model.write_bytes(good_model)

    assert start_and_stop_in_process(data) == 10  # repaired by hand: it resumes where it was
