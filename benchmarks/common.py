"""What the benchmarks share: starting servers as their own processes and reading what they print."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]


class Server:
    """A process serving HTTP on loopback; stopped with SIGTERM (SIGKILL if it hangs)."""

    def __init__(self, args: list[str], ready: str) -> None:
        self.process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        for line in self.process.stdout:
            self.lines.append(line)
            if ready in line:
                return
        raise RuntimeError("the server exited before it was ready:\n" + "".join(self.lines))

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the process has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()


class Shepherd(Server):
    """``run.py -p PRESET`` with the URL and the API keys it printed."""

    def __init__(self, preset: Path, data: Path, *extra: str) -> None:
        super().__init__([sys.executable, str(ROOT / "run.py"), "-p", str(preset), "--port", "0",
                          "--data", str(data), *extra], ready="Stop with Ctrl-C")
        text = "".join(self.lines)
        self.url = re.search(r"serving preset \S+ at (http://\S+)", text).group(1)
        self.keys = dict(re.findall(r"API key for agent (\S+) \(.*\): (\S+)", text))


class Echo(Server):
    def __init__(self, codec: str = "orjson") -> None:
        super().__init__([sys.executable, str(ROOT / "benchmarks" / "echo_server.py"), "--json", codec],
                         ready="listening on")
        port = re.search(r"listening on (\d+)", "".join(self.lines)).group(1)
        self.url = f"http://127.0.0.1:{port}"


def post(connection: http.client.HTTPConnection, path: str, body: dict) -> dict:
    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    reply = json.loads(response.read())
    if response.status != 200:
        raise RuntimeError(f"{path}: HTTP {response.status} {reply}")
    return reply


def connect(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
