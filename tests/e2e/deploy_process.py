"""``python run.py deploy POLICY`` in a subprocess, with the URL and API key it printed: for the deploy
tests here, and for an end-to-end test with a policy the exporter wrote (pass its file as ``policy``)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT


class DeployProcess:
    """The deploy server on a free port of 127.0.0.1, run in ``cwd``; its stderr goes to ``log``. With
    ``import_log`` Python reports every module it imports (``-X importtime``) into the log, so a test can
    tell what the process ever imported."""

    def __init__(self, policy: Path, cwd: Path, log: Path, *extra: str, import_log: bool = False,
                 timeout: float = 60.0) -> None:
        self.log = log
        self._log_handle = open(log, "w")
        python = [sys.executable, *(["-X", "importtime"] if import_log else [])]
        self.process = subprocess.Popen(
            [*python, str(ROOT / "run.py"), "deploy", str(policy), "--port", "0", *extra],
            cwd=cwd, stdout=subprocess.PIPE, stderr=self._log_handle, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.url = self.api_key = None
        self.lines: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"the deploy server exited early:\n{log.read_text()[-3000:]}")
            self.lines.append(line)
            if match := re.search(r"^deploying agent \S+ .* at (http://\S+)", line):
                self.url = match.group(1)
            if match := re.search(r"^API key .*: (\S+)$", line):
                self.api_key = match.group(1)
            if line.startswith("Stop with Ctrl-C"):
                return
        raise RuntimeError("the deploy server did not start in time")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then the exit status (SIGKILL after ``timeout``)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        finally:
            self.close()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        self._log_handle.close()
