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


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """CPU time (user + system) a process (or one of its threads) has used so far; 0 once it is gone."""
    path = Path(f"/proc/{pid}/stat") if thread is None else Path(f"/proc/{pid}/task/{thread}/stat")
    try:
        fields = path.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_process(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM, up to ``timeout`` seconds to exit, then SIGKILL; closes its piped standard output."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()


def terminate_all(processes: list[subprocess.Popen], timeout: float = 30) -> None:
    """SIGTERM every process, then wait for each (the clients of a benchmark run)."""
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout)


class Server:
    """A process serving HTTP on loopback; stopped with SIGTERM (SIGKILL if it hangs)."""

    def __init__(self, args: list[str], ready: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> None:
        self.process = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, text=True, env=env)
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
        return cpu_seconds(self.pid)

    def thread_cpu_seconds(self) -> dict[int, float]:
        """CPU time of each of the process's threads by thread id (the main thread's id is the pid)."""
        times = {}
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                times[int(task.name)] = cpu_seconds(self.pid, int(task.name))
            except (OSError, IndexError, ValueError):
                pass  # the thread ended meanwhile
        return times

    def stop(self) -> None:
        stop_process(self.process, 120)


class Shepherd(Server):
    """``run.py -p PRESET`` with the URL and the API keys it printed; ``root``: the checkout whose run.py serves
    (another one is run without writing its bytecode, to compare commits)."""

    def __init__(self, preset: Path, data: Path, *extra: str, env: dict[str, str] | None = None,
                 root: Path = ROOT) -> None:
        if root != ROOT:
            env = {**(env or os.environ), "PYTHONDONTWRITEBYTECODE": "1"}
        super().__init__([sys.executable, str(root / "run.py"), "-p", str(preset), "--port", "0",
                          "--data", str(data), *extra], ready="Stop with Ctrl-C", env=env, cwd=root)
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


def metrics(url: str) -> dict[str, float]:
    """The server's ``GET /metrics`` (served to loopback clients by default), summed over agents: a
    histogram's series by name, a ``part`` label appended (``shepherd_act_latency_seconds_sum:forward``)."""
    connection = connect(url)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        text = response.read().decode()
    finally:
        connection.close()
    if response.status != 200:
        raise RuntimeError(f"/metrics: HTTP {response.status}")
    figures: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r'^(\w+)(?:\{([^}]*)\})? (\S+)$', line)
        if not match:
            continue
        name, labels, value = match.groups()
        part = re.search(r'part="([^"]*)"', labels or "")
        key = f"{name}:{part.group(1)}" if part else name
        figures[key] = figures.get(key, 0.0) + float(value)
    return figures


def connect(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
