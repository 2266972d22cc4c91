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


class ServerProcess:
    """``python run.py`` in a subprocess, with the URL and API key it printed."""

    def __init__(self, args: list[str], data: Path, timeout: float = 60.0) -> None:
        self.data = data
        self.log = data.parent / f"{data.name}-server-{time.monotonic_ns()}.log"
        self._log_handle = open(self.log, "w")
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "run.py"), *args, "--data", str(data), "--port", "0"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=self._log_handle, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.url = self.api_key = self.admin_token = None
        self.lines: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"server exited early:\n{self.log.read_text()}")
            self.lines.append(line)
            if match := re.search(r"serving preset \S+ at (http://\S+)", line):
                self.url = match.group(1)
            if match := re.search(r"API key for agent \S+ \(.*\): (\S+)", line):
                self.api_key = match.group(1)
            if match := re.search(r"Admin token \(.*\): (\S+)", line):
                self.admin_token = match.group(1)
            if line.startswith("Stop with Ctrl-C"):
                return
        raise RuntimeError("server did not start in time")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Send ``sig`` and wait for the exit status (SIGKILL after ``timeout``)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        finally:
            self.close()

    def close(self) -> None:
        """Kill the server if it still runs and release its pipes."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self._log_handle.close()


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
