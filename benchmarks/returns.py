#!/usr/bin/env python
"""Reading a long learning curve: a full read against an incremental one, and the event loop meanwhile.

    .venv/bin/python benchmarks/returns.py                 # 1,000,000 returns, about a minute on 2 cores
    .venv/bin/python benchmarks/returns.py --returns 200000

Writes an agent's ``returns.jsonl`` with that many returns, serves the data folder in this process on
127.0.0.1 (a free port), and asks for the curve from a separate client process, so that only the server's
work is on this process's event loop. It prints, from the same run:

- the time of ``GET .../returns`` (everything), of the first ``?offset=N`` poll of a server just started
  (it indexes the file once), and of a steady poll that finds one new return, with their ratios;
- the worst lateness of a 10 ms tick of the server's event loop while idle, while the full read is
  answered, and while ``returns.csv`` streams, with the ratios to idle.

Everything stops by itself; the data folder is a temporary one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiohttp import web  # noqa: E402

from shepherd.graph import AgentSpec, GraphManager, Schedule  # noqa: E402
from shepherd.http import STORE, ServerConfig, create_app  # noqa: E402
from shepherd.http.state import CREATED_ADMIN_TOKEN  # noqa: E402
from shepherd.storage import EpisodeReturn  # noqa: E402

TICK = 0.010
CLIENT = r"""
import http.client, json, sys, time
host, port, token, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
connection = http.client.HTTPConnection(host, port, timeout=600)
started = time.perf_counter()
connection.request("GET", path, headers={"Authorization": "Bearer " + token})
response = connection.getresponse()
size = 0
while chunk := response.read(1 << 20):
    size += len(chunk)
print(json.dumps({"status": response.status, "seconds": time.perf_counter() - started, "bytes": size}))
"""


class Ticker:
    """A task that sleeps ``TICK`` again and again and notes how late it wakes: the event loop's delays."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(TICK)
            self.worst = max(self.worst, time.perf_counter() - started - TICK)

    def start(self) -> None:
        self.worst = 0.0
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> float:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        return self.worst


async def fetch(port: int, token: str, path: str) -> dict:
    """GET ``path`` from a client process; its own timing of the request."""
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", CLIENT, "127.0.0.1", str(port), token,
                                                   "/shepherd/admin/api" + path, stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    result = json.loads(out)
    if result["status"] != 200:
        raise RuntimeError(f"GET {path}: status {result['status']}")
    return result


def write_returns(path: Path, count: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        for start in range(0, count, 100_000):
            handle.write("".join(f'{{"time":{1e9 + i:.1f},"value":{i % 500}.0,"length":{i % 500 + 1},'
                                 f'"phase":"train"}}\n' for i in range(start, min(count, start + 100_000))))


def graph_manager() -> GraphManager:
    return GraphManager(owner="bench", agents=[AgentSpec("curve", "PPO", [[4], "-inf", "inf"], 2,
                                                         {"n_envs": 1, "n_steps": 8, "batch_size": 8})],
                        schedule=Schedule())


async def serve(data: Path) -> tuple[web.AppRunner, int, str, web.Application]:
    app = create_app(ServerConfig(graph_manager(), data))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port, app[CREATED_ADMIN_TOKEN], app


async def measure(count: int, data: Path) -> dict:
    runner, port, token, app = await serve(data)  # creates the store, the agent and the admin token
    await runner.cleanup()
    write_returns(data / "agents" / "1" / "returns.jsonl", count)
    runner, port, _, app = await serve(data)
    figures: dict = {"returns": count}
    ticker = Ticker()
    try:
        ticker.start()
        await asyncio.sleep(2.0)
        figures["tick_idle"] = await ticker.stop()

        first = await fetch(port, token, f"/agents/1/returns?offset={count}&first={1e9:.1f}")
        figures["first_poll"] = first["seconds"]

        app[STORE].append_return(1, EpisodeReturn(2e9, 1.0, 1, "train"))
        polls = [await fetch(port, token, f"/agents/1/returns?offset={count}&first={1e9:.1f}") for _ in range(5)]
        figures["poll"] = sorted(p["seconds"] for p in polls)[2]
        figures["poll_bytes"] = polls[0]["bytes"]

        ticker.start()
        full = await fetch(port, token, "/agents/1/returns")
        figures["tick_full"] = await ticker.stop()
        figures["full"], figures["full_bytes"] = full["seconds"], full["bytes"]

        ticker.start()
        csv = await fetch(port, token, "/agents/1/returns.csv")
        figures["tick_csv"] = await ticker.stop()
        figures["csv"], figures["csv_bytes"] = csv["seconds"], csv["bytes"]
    finally:
        await runner.cleanup()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--returns", type=int, default=1_000_000, help="returns in the log (default 1,000,000)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shepherd-returns-") as folder:
        f = asyncio.run(measure(args.returns, Path(folder) / "data"))
    ms = 1000.0
    print(f"returns stored                               {f['returns']:>12,}")
    print(f"GET /returns, everything                     {f['full'] * ms:>10.1f} ms  ({f['full_bytes']:,} bytes)")
    print(f"GET /returns?offset=N, first after start     {f['first_poll'] * ms:>10.1f} ms  (indexes the file)")
    print(f"GET /returns?offset=N, one new return        {f['poll'] * ms:>10.1f} ms  ({f['poll_bytes']:,} bytes)")
    print(f"  full read / steady poll                    {f['full'] / f['poll']:>10.0f} x")
    print(f"  full read / first poll                     {f['full'] / f['first_poll']:>10.1f} x")
    print(f"GET /returns.csv, streamed                   {f['csv'] * ms:>10.1f} ms  ({f['csv_bytes']:,} bytes)")
    print(f"worst event-loop tick delay, idle            {f['tick_idle'] * ms:>10.1f} ms")
    print(f"  while the full read is answered            {f['tick_full'] * ms:>10.1f} ms"
          f"  ({f['tick_full'] / max(f['tick_idle'], 1e-4):.1f} x idle)")
    print(f"  while the CSV streams                      {f['tick_csv'] * ms:>10.1f} ms"
          f"  ({f['tick_csv'] / max(f['tick_idle'], 1e-4):.1f} x idle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
