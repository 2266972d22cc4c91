#!/usr/bin/env python
"""Whether a good client still gets a connection while others hold theirs (issue 48, M7), on loopback, bounded.

    .venv/bin/python benchmarks/connection_fairness.py                        # this checkout
    .venv/bin/python benchmarks/connection_fairness.py --compare /work/main   # and another checkout, same run

A real ``run.py`` serves benchmarks/presets/load3.py with ``--max-connections 200`` (an address holds 100, half,
by default) and ``--header-timeout 120`` (so that held connections stay for the whole run). Two attacks, each
``--seconds`` long, while a good client from 127.0.0.2 opens a fresh connection every 0.1 s and asks
``GET /shepherd/health``:

- ``re-open``: 127.0.0.1 holds its 100 connections and 200 loops re-open refused connections as fast as they
  can (each reads its refusal, closes, opens again);
- ``two holders``: 127.0.0.1 and 127.0.0.3 hold 100 connections each.

Prints, per checkout and attack, how many of the good client's attempts were answered 200.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT, Shepherd  # noqa: E402

PRESET = ROOT / "benchmarks" / "presets" / "load3.py"
LIMIT, PER_ADDRESS = 200, 100
REOPENERS = 200  # loops re-opening refused connections at once: bursts of more than the 100 slots left


async def hold(port: int, source: str, count: int) -> list[asyncio.StreamWriter]:
    held = []
    for _ in range(count):
        _, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        held.append(writer)
    return held


async def reopen(port: int, source: str, until: float) -> None:
    """Open, read the refusal (or nothing), close, again, until ``until``."""
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
            await asyncio.wait_for(reader.read(), 1.0)
            writer.close()
        except (OSError, asyncio.TimeoutError):
            await asyncio.sleep(0.01)


async def good_client(port: int, until: float) -> tuple[int, int]:
    """(answered 200, attempts): a fresh connection from 127.0.0.2 every 0.1 s, ``GET /shepherd/health``."""
    ok = attempts = 0
    while time.monotonic() < until:
        attempts += 1
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
            writer.write(b"GET /shepherd/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            reply = await asyncio.wait_for(reader.read(), 2.0)
            ok += reply.startswith(b"HTTP/1.1 200 ")
            writer.close()
        except (OSError, asyncio.TimeoutError):
            pass
        await asyncio.sleep(0.1)
    return ok, attempts


async def attack(port: int, name: str, seconds: float) -> tuple[int, int]:
    held = await hold(port, "127.0.0.1", PER_ADDRESS)
    if name == "two holders":
        held += await hold(port, "127.0.0.3", PER_ADDRESS)
    until = time.monotonic() + seconds
    loops = [asyncio.ensure_future(reopen(port, "127.0.0.1", until))
             for _ in range(REOPENERS if name == "re-open" else 0)]
    result = await good_client(port, until)
    await asyncio.gather(*loops)
    for writer in held:
        writer.close()
    await asyncio.sleep(1.0)  # the server sees them closed before the next attack
    return result


def run(root: Path, seconds: float) -> dict[str, tuple[int, int]]:
    with tempfile.TemporaryDirectory() as folder:
        server = Shepherd(PRESET, Path(folder) / "data", "--max-connections", str(LIMIT), "--header-timeout", "120",
                          root=root)
        try:
            port = int(server.url.rsplit(":", 1)[1].strip("/"))
            return {name: asyncio.run(attack(port, name, seconds)) for name in ("re-open", "two holders")}
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="each attack's length (default %(default)g)")
    parser.add_argument("--compare", type=Path, default=None, metavar="CHECKOUT",
                        help="another checkout to run the same attacks against first (its run.py)")
    args = parser.parse_args()
    roots = ([args.compare.resolve()] if args.compare else []) + [ROOT]
    for root in roots:
        for name, (ok, attempts) in run(root, args.seconds).items():
            print(f"{root}: {name:<12} the good client answered 200 in {ok} of {attempts} attempts")


if __name__ == "__main__":
    main()
