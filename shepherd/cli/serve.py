"""``python run.py -p PRESET``: serve a preset; with ``--clients N`` also drive it with local clients
and a live progress display, and exit on whether the preset's target evaluation return was reached."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from shepherd.cli.common import EXIT_NOT_REACHED, EXIT_OK, UsageError
from shepherd.graph import GraphManager, PresetError, PresetValidation
from shepherd.graph.validation import Outcome, watch

ROOT = Path(__file__).resolve().parents[2]


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument("--act-timeout", type=float, default=30.0, metavar="SECONDS",
                        help="answer a step whose action is not ready within this time with 503 and "
                             "Retry-After (default %(default)s)")
    parser.add_argument("--max-sessions", type=int, default=1024, metavar="N",
                        help="sessions one agent may have at once; more logins get 429 (default %(default)s; "
                             "0: no limit)")
    parser.add_argument("--rate-limit", type=float, default=2000.0, metavar="PER_SECOND",
                        help="requests per second per API key, summed over its sessions; more get 429 "
                             "(default %(default)s; 0: no limit)")
    parser.add_argument("--max-body", type=int, default=1 << 20, metavar="BYTES",
                        help="largest request body; larger ones get 413 (default %(default)s)")
    parser.add_argument("--secure-cookies", action="store_true",
                        help="mark the dashboard's sign-in cookie Secure (serving behind a TLS proxy)")
    parser.add_argument("--max-connections", type=int, default=None, metavar="N",
                        help="open connections at once; more are answered 503 and closed (default: the "
                             "open-file limit less 128)")
    parser.add_argument("--header-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="close a new connection that sends no request headers within this time "
                             "(default %(default)s)")
    parser.add_argument("--body-timeout", type=float, default=30.0, metavar="SECONDS",
                        help="answer a request whose body does not arrive within this time with 408 "
                             "(default %(default)s)")
    parser.add_argument("--idle-timeout", type=float, default=75.0, metavar="SECONDS",
                        help="close a keep-alive connection idle for this long between requests "
                             "(default %(default)s)")
    parser.add_argument("--metrics", choices=("off", "local", "open"), default="local",
                        help="who may read GET /metrics: off (404), local (loopback clients, or the admin "
                             "token as Bearer), open (anyone) (default %(default)s)")


def list_presets_command() -> int:
    from shepherd.graph import list_presets

    presets = list_presets()
    width = max(map(len, presets), default=0)
    for name, description in presets.items():
        print(f"{name:<{width}}  {description}")
    return EXIT_OK


def serve_command(args: argparse.Namespace) -> int:
    from shepherd.graph import load_preset

    for name in ("clients", "max_sessions", "rate_limit"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be 0 or more")
    for name in ("session_timeout", "act_timeout", "max_body", "header_timeout", "body_timeout", "idle_timeout"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    if args.max_connections is not None and args.max_connections <= 0:
        raise UsageError("--max-connections must be positive")
    try:
        graph = load_preset(args.preset)
        if args.clients and graph.validation is None:
            raise PresetError(f"preset {graph.name} has no validation block, so --clients has no env to run")
        return asyncio.run(serve(graph, args))
    except PresetError as error:
        raise UsageError(str(error)) from None
    except StopFailed as error:
        print(f"error: while stopping: {error}", file=sys.stderr)
        return EXIT_NOT_REACHED


class StopFailed(Exception):
    """The server stopped, but not cleanly (``server.json`` left behind, say): exit status 1."""


async def serve(graph: GraphManager, args: argparse.Namespace) -> int:
    from shepherd.admin import ADMIN
    from shepherd.http import ServerConfig
    from shepherd.http.server import RunningServer
    from shepherd.storage import StoreError

    config = ServerConfig(graph, args.data, session_idle_seconds=args.session_timeout,
                          act_timeout_seconds=args.act_timeout, max_sessions_per_agent=args.max_sessions or None,
                          requests_per_second_per_key=args.rate_limit or None, max_body_bytes=args.max_body,
                          max_connections=args.max_connections, header_timeout_seconds=args.header_timeout,
                          body_timeout_seconds=args.body_timeout, idle_timeout_seconds=args.idle_timeout,
                          secure_cookies=args.secure_cookies, metrics=args.metrics)
    try:
        check_address(args.host, args.port)  # before the store creates keys and the admin token, shown once
        server = await RunningServer.start(config, args.host, args.port)
    except StoreError as error:
        raise UsageError(str(error)) from None
    except OSError as error:
        raise UsageError(f"cannot serve on {args.host}:{args.port}: {error}") from None
    outcome = Outcome()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    operations = server.admin.acting_as(ADMIN)  # keys are created and revoked through the admin service
    clients: list[asyncio.subprocess.Process] = []
    local_key_id = None
    monitor: asyncio.Task | None = None
    try:
        keys = dict(server.created_keys)
        if args.new_key:
            for runtime in graph.preset_runtimes():
                created = await operations.add_key(runtime.record.id, "created by --new-key")
                keys[runtime.record.name] = created.key
        announce(graph, server.url, args.data, keys, server.admin_token)
        if args.clients and graph.validation is not None:
            runtime = graph.runtime(graph.validation.agent)
            local = await operations.add_key(runtime.record.id, "local clients of run.py --clients")
            local_key_id = local.id
            clients = await start_clients(server.url, local.key, graph.validation, args.clients)
            watch(graph, runtime.record.id, outcome, stop)
            monitor = asyncio.create_task(progress(graph, runtime.record.id, clients, outcome, stop))
        await stop.wait()
    finally:
        if monitor is not None:
            monitor.cancel()
        await stop_clients(clients)
        if local_key_id is not None:
            await operations.revoke_key(local_key_id)
        print("\nstopping: checkpointing the agents ...", flush=True)
        try:
            await server.stop()
        except OSError as error:
            raise StopFailed(str(error)) from None
    if args.clients:
        print(outcome.reason or "stopped before the target was reached")
        print(f"data folder: {args.data.resolve()}")
        return EXIT_NOT_REACHED if outcome.code is None else outcome.code
    return EXIT_OK


def check_address(host: str, port: int) -> None:
    """Bind ``host:port`` for a moment, as the server will (port 0 always binds).

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    if port == 0:
        return
    for family, kind, proto, _, address in socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                                flags=socket.AI_PASSIVE):
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's server does
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            probe.bind(address)


def announce(graph: GraphManager, url: str, data: Path, keys: dict[str, str], admin_token: str = "") -> None:
    print(f"Shepherd serving preset {graph.name} at {url}  (data: {data.resolve()})")
    for runtime in graph.runtimes.values():
        print(f"  agent {runtime.record.name}: {runtime.record.algorithm}, {runtime.tracker.steps} steps so far, "
              f"observations {runtime.observation_space}, actions {runtime.action_space}")
    for agent_id, reason in graph.served.failures.items():
        print(f"  agent id {agent_id} is not served: it {reason} (restart it from the admin commands)")
    print(f"Clients POST to {url}/shepherd/login_user/ with {{\"apikey\": ...}}, then to {url}/shepherd/env/")
    for name, key in keys.items():
        print(f"API key for agent {name} (shown once, the store keeps only its hash): {key}")
    for runtime in graph.preset_runtimes():
        if runtime.record.name not in keys:
            print(f"API key for agent {runtime.record.name}: shown when it was created; create another with "
                  f"`python run.py keys add {graph.owner}/{runtime.record.name}` (or start with --new-key)")
    print(f"Dashboard: {url}/shepherd/admin/  (sign in with the admin token or an agent's API key)")
    if admin_token:
        print(f"Admin token (shown once, the store keeps only its hash): {admin_token}")
    else:
        print("Admin token: shown at the first start; `python run.py admin-token` replaces it (and prints "
              "the new one).")
    print("Stop with Ctrl-C: the agents are checkpointed and resume at the next start.", flush=True)


async def start_clients(url: str, apikey: str, validation: PresetValidation,
                        count: int) -> list[asyncio.subprocess.Process]:
    """Start ``count`` client processes; the key goes through the environment, never the command line."""
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


async def progress(graph: GraphManager, agent_id: int, clients: list, outcome: Outcome,
                   stop: asyncio.Event) -> None:
    """Print a live progress line; stop on timeout or when every client has died."""
    validation = graph.validation
    assert validation is not None  # --clients needs it; checked at start
    interactive = sys.stdout.isatty()
    started = last_line = time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(1.0)
        if stop.is_set():  # decided meanwhile (target reached, signal): keep that outcome
            return
        runtime = graph.runtimes.get(agent_id)  # looked up each time: a restart replaces it
        if runtime is None:
            continue
        stats = runtime.stats()
        evaluation = stats.last_evaluation
        train = "-" if stats.mean_train_return is None else f"{stats.mean_train_return:.1f}"
        evaluated = "-" if evaluation is None else f"{evaluation.mean_return:.1f} @ {evaluation.steps:,}"
        line = (f"steps {stats.steps:>8,} | {stats.steps_per_second:6.0f} steps/s | phase {stats.phase:<8} | "
                f"sessions {stats.sessions} | train return {train} | eval {evaluated} "
                f"(target {validation.target_return:g})")
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
            codes = ", ".join(str(process.returncode) for process in clients)
            outcome.code, outcome.reason = EXIT_NOT_REACHED, f"every local client exited (status {codes})"
            stop.set()
