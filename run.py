#!/usr/bin/env python
"""Shepherd's command line: serve a preset, optionally with local clients that prove it learns.

    python run.py -l                              list the presets
    python run.py -p cartpole_ppo                 serve a preset on 127.0.0.1:8000
    python run.py -p cartpole_ppo --clients 4     ... and drive it with 4 local gymnasium clients
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent

EXIT_OK, EXIT_NOT_REACHED, EXIT_USAGE = 0, 1, 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python run.py",
        description="Shepherd: reinforcement learning as a service. Serves a preset's agents over JSON/HTTP; "
                    "with --clients it also drives them with local gymnasium clients and exits 0 once the "
                    "preset's target evaluation return is reached (1 if not, 2 on bad usage).")
    parser.add_argument("-p", "--preset", help="preset to serve: a name from -l, or a path to a .py file")
    parser.add_argument("-l", "--list", action="store_true", help="list the presets and exit")
    parser.add_argument("--clients", type=int, default=0, metavar="N",
                        help="also run N local clients on the preset's validation env (default: none)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default %(default)s; 0.0.0.0 exposes the server)")
    parser.add_argument("--port", type=int, default=8000, help="port (default %(default)s; 0 picks a free one)")
    parser.add_argument("--data", type=Path, default=Path("shepherd-data"),
                        help="data folder: store, models, returns (default ./%(default)s)")
    parser.add_argument("--new-key", action="store_true",
                        help="create and print another API key for the preset's agents")
    parser.add_argument("--session-timeout", type=float, default=600.0, metavar="SECONDS",
                        help="end sessions idle for this long (default %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log learner and server events")
    args = parser.parse_args(argv)
    if not args.list and not args.preset:
        parser.error("give a preset with -p PRESET, or -l to list them")
    if args.clients < 0:
        parser.error("--clients must be 0 or more")
    return args


def list_command() -> int:
    from shepherd.graph import list_presets

    presets = list_presets()
    width = max(map(len, presets), default=0)
    for name, description in presets.items():
        print(f"{name:<{width}}  {description}")
    return EXIT_OK


@dataclass
class Outcome:
    """What the local clients' run ended with."""

    code: int | None = None
    reason: str = ""


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.list:
        return list_command()
    from shepherd.graph import PresetError, load_preset

    try:
        graph = load_preset(args.preset)
        if args.clients and graph.validation is None:
            raise PresetError(f"preset {graph.name} has no validation block, so --clients has no env to run")
    except PresetError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return asyncio.run(serve(graph, args))
    except PresetError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:
        print(f"error: cannot serve on {args.host}:{args.port}: {error}", file=sys.stderr)
        return EXIT_USAGE


async def serve(graph, args: argparse.Namespace) -> int:
    from aiohttp import web

    from shepherd.http import CREATED_KEYS, STORE, ServerConfig, create_app
    from shepherd.storage import StoreError

    app = create_app(ServerConfig(graph, args.data, session_idle_seconds=args.session_timeout))
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    try:
        await runner.setup()
    except StoreError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    outcome = Outcome()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    clients: list[asyncio.subprocess.Process] = []
    local_key_id = None
    monitor: asyncio.Task | None = None
    try:
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # the real one when --port 0
        url = f"http://{args.host}:{port}"
        store = app[STORE]
        keys = dict(app[CREATED_KEYS])
        if args.new_key:
            for runtime in graph.runtimes.values():
                keys[runtime.record.name], _ = store.add_api_key(runtime.record.id, "created by --new-key")
        announce(graph, url, args.data, keys)
        if args.clients:
            runtime = graph.runtime(graph.validation.agent)
            local_key, record = store.add_api_key(runtime.record.id, "local clients of run.py --clients")
            local_key_id = record.id
            clients = await start_clients(url, local_key, graph.validation, args.clients)
            watch(graph, runtime, outcome, stop)
            monitor = asyncio.create_task(progress(graph, runtime, clients, outcome, stop))
        await stop.wait()
    finally:
        await stop_clients(clients)
        if local_key_id is not None:
            app[STORE].revoke_api_key(local_key_id)
        print("\nstopping: checkpointing the agents ...", flush=True)
        await runner.cleanup()
    if monitor is not None:
        monitor.cancel()
    if args.clients:
        code = EXIT_NOT_REACHED if outcome.code is None else outcome.code
        print(outcome.reason or "stopped before the target was reached")
        print(f"data folder: {args.data.resolve()}")
        return code
    return EXIT_OK


def announce(graph, url: str, data: Path, keys: dict[str, str]) -> None:
    print(f"Shepherd serving preset {graph.name} at {url}  (data: {data.resolve()})")
    for runtime in graph.runtimes.values():
        learner = runtime.learner
        print(f"  agent {runtime.record.name}: {runtime.record.algorithm}, {runtime.tracker.steps} steps so far, "
              f"observations {learner.observation_space}, actions {learner.action_space}")
    print(f"Clients POST to {url}/shepherd/login_user/ with {{\"apikey\": ...}}, then to {url}/shepherd/env/")
    for name, key in keys.items():
        print(f"API key for agent {name} (shown once, the store keeps only its hash): {key}")
    if not keys:
        print("API key: shown when it was created; add --new-key to create another.")
    print("Stop with Ctrl-C: the agents are checkpointed and resume at the next start.", flush=True)


async def start_clients(url: str, apikey: str, validation, count: int) -> list[asyncio.subprocess.Process]:
    env = {**os.environ, "SHEPHERD_API_KEY": apikey,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    processes = []
    for index in range(count):
        processes.append(await asyncio.create_subprocess_exec(
            sys.executable, "-m", "shepherd.client", "--url", url, "--env", validation.env_id,
            "--seed", str(index), "--env-kwargs", json.dumps(validation.env_kwargs),
            env=env, stdout=asyncio.subprocess.DEVNULL, stdin=asyncio.subprocess.DEVNULL))
    return processes


async def stop_clients(clients: list[asyncio.subprocess.Process]) -> None:
    for process in clients:
        if process.returncode is None:
            process.terminate()
    for process in clients:
        try:
            await asyncio.wait_for(process.wait(), 10)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()


def watch(graph, runtime, outcome: Outcome, stop: asyncio.Event) -> None:
    """Decide the run's outcome from each evaluation of the validated agent."""
    validation = graph.validation

    def on_evaluation(evaluated, result) -> None:
        if evaluated is not runtime or outcome.code is not None:
            return
        if result.mean_return >= validation.target_return:
            outcome.code = EXIT_OK
            outcome.reason = (f"target reached: evaluation {result.period} at {result.steps} steps returned "
                              f"{result.mean_return:.1f} >= {validation.target_return:g}")
            stop.set()
        elif result.steps >= validation.max_steps or runtime.tracker.finished:
            outcome.code = EXIT_NOT_REACHED
            outcome.reason = (f"target not reached within {validation.max_steps} steps: last evaluation "
                              f"returned {result.mean_return:.1f} < {validation.target_return:g}")
            stop.set()

    graph.evaluation_listeners.append(on_evaluation)


async def progress(graph, runtime, clients, outcome: Outcome, stop: asyncio.Event) -> None:
    """Print a live progress line; stop on timeout or when every client has died."""
    validation = graph.validation
    interactive = sys.stdout.isatty()
    started = last_line = time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(1.0)
        stats = runtime.stats()
        evaluation = stats.last_evaluation
        line = (f"steps {stats.steps:>8,} | {stats.steps_per_second:6.0f} steps/s | phase {stats.phase:<8} | "
                f"sessions {stats.sessions} | train return "
                f"{'-' if stats.mean_train_return is None else f'{stats.mean_train_return:.1f}'} | eval "
                f"{'-' if evaluation is None else f'{evaluation.mean_return:.1f} @ {evaluation.steps:,}'}"
                f" (target {validation.target_return:g})")
        if interactive:
            print("\r" + line, end="", flush=True)
        elif time.monotonic() - last_line >= 10:
            last_line = time.monotonic()
            print(line, flush=True)
        if stats.failure:
            outcome.code, outcome.reason = EXIT_NOT_REACHED, f"the agent failed: {stats.failure}"
            stop.set()
        elif time.monotonic() - started > validation.timeout_seconds:
            outcome.code = EXIT_NOT_REACHED
            outcome.reason = f"gave up after {validation.timeout_seconds:g} s without reaching the target"
            stop.set()
        elif clients and all(process.returncode is not None for process in clients):
            outcome.code, outcome.reason = EXIT_NOT_REACHED, "every local client exited"
            stop.set()


if __name__ == "__main__":
    sys.exit(main())
