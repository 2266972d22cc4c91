"""Shared fixtures: small agents, a store in a temporary folder, and a real server on a free port."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEST_PRESETS = Path(__file__).resolve().parent / "presets"


class AnnouncedProcess:
    """``python run.py ARGS`` in a subprocess, its stderr to ``log``: the lines it prints are read until
    ``Stop with Ctrl-C``, and each attribute of ``PATTERNS`` is set from its pattern's first group."""

    #: attribute -> regular expression of the announcement line that gives it
    PATTERNS: dict[str, str] = {}

    def __init__(self, args: list[str], cwd: Path, log: Path, timeout: float = 60.0,
                 python: tuple[str, ...] = ()) -> None:
        self.log = log
        self._log_handle = open(log, "w")
        self.process = subprocess.Popen(
            [sys.executable, *python, str(ROOT / "run.py"), *args], cwd=cwd, stdout=subprocess.PIPE,
            stderr=self._log_handle, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        for name in self.PATTERNS:
            setattr(self, name, None)
        self.lines: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"{args[0]}: the process exited early:\n{self.log.read_text()[-3000:]}")
            self.lines.append(line)
            for name, pattern in self.PATTERNS.items():
                if match := re.search(pattern, line):
                    setattr(self, name, match.group(1))
            if line.startswith("Stop with Ctrl-C"):
                return
        raise RuntimeError(f"{args[0]}: the process did not start in time")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Send ``sig`` and wait for the exit status (SIGKILL after ``timeout``)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        finally:
            self.close()

    def close(self) -> None:
        """Kill the process if it still runs and release its pipes."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self._log_handle.close()


class ServerProcess(AnnouncedProcess):
    """``python run.py`` in a subprocess, with the URL, API key and admin token it printed."""

    PATTERNS = {"url": r"serving preset \S+ at (http://\S+)", "api_key": r"API key for agent \S+ \(.*\): (\S+)",
                "admin_token": r"Admin token \(.*\): (\S+)"}
    url: str | None
    api_key: str | None
    admin_token: str | None

    def __init__(self, args: list[str], data: Path, timeout: float = 60.0) -> None:
        self.data = data
        super().__init__([*args, "--data", str(data), "--port", "0"], ROOT,
                         data.parent / f"{data.name}-server-{time.monotonic_ns()}.log", timeout)


@pytest.fixture
def server_factory(tmp_path):
    started: list[ServerProcess] = []

    def start(preset: str, *extra: str, data: Path | None = None) -> ServerProcess:
        server = ServerProcess(["-p", preset, *extra], data or tmp_path / "data")
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


class ServerThread(threading.Thread):
    """A real server on a real socket, run by an event loop in a thread of the test process, so that a test
    can reach into it (its graph, its app). ``start_and_wait`` returns once it listens."""

    def __init__(self, config) -> None:
        super().__init__(daemon=True)
        self.config = config
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.server = None

    def run(self) -> None:
        from shepherd.http.server import RunningServer

        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(RunningServer.start(self.config, "127.0.0.1", 0))
        self.ready.set()
        self.loop.run_forever()

    def start_and_wait(self) -> "ServerThread":
        self.start()
        assert self.ready.wait(60), "the server did not start"
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.join(10)
        self.loop.close()


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """One intra-op thread for torch in the test process, as a learner's thread sets for itself
    (`shepherd.agents.worker`): SB3 run in a test's own thread used two, and under ``-n 2`` the two workers'
    threads then contend for the two cores (a third more CPU time for the same work)."""
    import torch

    torch.set_num_threads(1)


#: folders whose every test is end-to-end (a server process, a browser, Ray, a run to a target)
E2E_FOLDERS = ("e2e", "browser")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under the fast tier's ``-m "not e2e"`` tests/e2e and tests/browser are not collected at all: every test
    in them would be deselected, and importing them (Playwright among them) costs each xdist worker seconds."""
    if (collection_path.parent == Path(__file__).parent and collection_path.name in E2E_FOLDERS
            and " ".join(config.option.markexpr.split()) == "not e2e"):
        return True
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests/e2e and tests/browser, and every slow test, ``e2e``: ``-m "not e2e"`` is the fast tier
    (and, since a command line's ``-m`` replaces pytest.ini's ``not slow``, it must leave slow tests out too)."""
    for item in items:
        folder = Path(item.fspath).parent.name
        if folder in E2E_FOLDERS or item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def data(tmp_path):
    """A data folder's path (not created): what the admin commands' tests pass as ``--data``."""
    return tmp_path / "data"


@pytest.fixture
def frequent_rows(monkeypatch):
    """The learners' metrics rows written at every chance (0.2 s apart), not once a second."""
    from shepherd.agents.metrics import MetricsWriter

    monkeypatch.setattr(MetricsWriter, "update_seconds", 0.0)
    monkeypatch.setattr(MetricsWriter, "every_seconds", 0.2)

