"""``python run.py -p PRESET``: serve a preset, printing a progress line per agent while it trains; with
``--clients N`` also drive it with local clients and a live progress display, and exit on whether the
preset's target evaluation return was reached."""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from shepherd.agents.bounds import DEFAULT_BOUNDS, ParameterBounds, parse_bounds
from shepherd.cli import coach
from shepherd.arguments import data_folder, port, rate, seconds
from shepherd.cli.common import EXIT_NOT_REACHED, EXIT_OK, UsageError
from shepherd.wire.steps import DEFAULT_MAX_REWARD, check_max_reward
from shepherd.cli.progress import (PROGRESS_SECONDS, announce, local_client_names, preset_records, progress,
                                   report_progress, start_clients, stop_clients)
from shepherd.graph import GraphManager, PresetError
from shepherd.definition import Sharing
from shepherd.graph.agent import MAX_CLIENTS
from shepherd.graph.validation import Outcome, watch
from shepherd.storage import new_secret

if TYPE_CHECKING:
    from shepherd.front.supervisor import FrontEnds
    from shepherd.graph.start_from import StartingCheckpoints
    from shepherd.http import ServerConfig
    from shepherd.http.server import RunningServer

#: ``--ray`` without an address: start a local Ray
LOCAL_RAY = "local"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", type=int, default=0, metavar="N",
                        help="also run N local clients on the preset's validation env (default: none)")
    parser.add_argument("--envs-per-client", type=int, default=1, metavar="M",
                        help="with --clients: each client runs M copies of the env and steps them in one request "
                             "(a vector session; an on-policy agent learns from every env with n_envs of at least "
                             "N x M); 1 (the default) is a client of one env, one step per request")
    parser.add_argument("--acting", choices=("server", "client"), default="server",
                        help="with --clients: where the local clients' policy acts. server (the default): each "
                             "step goes to the server, which answers the action; client: each client fetches "
                             "the agent's policy as an ONNX file, acts with it itself (onnxruntime) and uploads "
                             "its envs' experience in blocks")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default %(default)s; 0.0.0.0 exposes the server)")
    parser.add_argument("--port", type=port, default=8000, help="port (default %(default)s; 0 picks a free one)")
    parser.add_argument("--data", type=data_folder, default=Path("shepherd-data"),
                        help="data folder: store, models, returns (default ./%(default)s)")
    parser.add_argument("--new-key", action="store_true",
                        help="create and print another API key for the preset's agents")
    parser.add_argument("--only-preset", action="store_true",
                        help="serve the preset's agents alone, not the other agents of the data folder (those "
                             "added by `run.py agents add` or another preset), but for those its selectors name "
                             "as skills")
    parser.add_argument("--quiet", action="store_true",
                        help="print no progress lines while serving (by default, without --clients: a line "
                             "per agent whose steps, episodes or sessions changed, at most every "
                             f"{PROGRESS_SECONDS:g} s)")
    parser.add_argument("--session-timeout", type=seconds, default=600.0, metavar="SECONDS",
                        help="end sessions idle for this long (default %(default)s)")
    parser.add_argument("--act-timeout", type=seconds, default=30.0, metavar="SECONDS",
                        help="answer a step whose action is not ready within this time with 503 and "
                             "Retry-After (default %(default)s)")
    parser.add_argument("--max-sessions", type=int, default=1024, metavar="N",
                        help="sessions one agent may have at once; more logins get 429 (default %(default)s; "
                             "0: no limit)")
    parser.add_argument("--max-envs", type=int, default=1024, metavar="N",
                        help="environments one vector session may drive (login with \"n_envs\"); more get 400 "
                             "(default %(default)s)")
    parser.add_argument("--max-clients", type=int, default=MAX_CLIENTS, metavar="N",
                        help="client names one advised agent may have (each is a learner of its own: a thread, a "
                             "model, a folder); a login with a new name beyond them gets 400 (default "
                             "%(default)s; 0: no limit)")
    parser.add_argument("--rate-limit", type=rate, default=20000.0, metavar="PER_SECOND",
                        help="environment steps per second per API key, summed over its sessions (a request "
                             "counts one, a vector step one per env, a client-acting upload its T x N, a policy "
                             "file sent (not 304) as much); more get 429 (default %(default)g; 0: no limit)")
    parser.add_argument("--max-body", type=int, default=1 << 20, metavar="BYTES",
                        help="largest request body; larger ones get 413 (default %(default)s)")
    parser.add_argument("--secure-cookies", action="store_true",
                        help="mark the dashboard's sign-in cookie Secure (serving behind a TLS proxy)")
    parser.add_argument("--max-connections", type=int, default=None, metavar="N", help="open connections at "
                        "once; more are answered 503 and closed (default: the open-file limit less 128)")
    parser.add_argument("--max-connections-per-address", type=int, default=None, metavar="N",
                        help="open connections one address (an IPv6 /64) may hold at once; more get 429, and the last "
                             "tenth of --max-connections are kept for addresses that hold none (default: half of "
                             "--max-connections; 0: no cap, nor kept slots; a --trusted-proxy has none)")
    parser.add_argument("--header-timeout", type=seconds, default=10.0, metavar="SECONDS",
                        help="close a new connection that sends no request headers within this time "
                             "(default %(default)s)")
    parser.add_argument("--body-timeout", type=seconds, default=30.0, metavar="SECONDS",
                        help="answer a request whose body does not arrive within this time with 408 "
                             "(default %(default)s)")
    parser.add_argument("--idle-timeout", type=seconds, default=75.0, metavar="SECONDS",
                        help="close a keep-alive connection idle for this long between requests "
                             "(default %(default)s)")
    parser.add_argument("--ray", nargs="?", const=LOCAL_RAY, default=None, metavar="ADDRESS",
                        help="run each agent's learner (each client's, for an advised agent) in a Ray actor "
                             "(pip install -e .[ray]): alone, start a "
                             "local Ray bound to 127.0.0.1 with token authentication, and a new one (the learners "
                             "restored there from their checkpoints) if its node dies; 'auto' or HOST:PORT joins a "
                             "running cluster, waiting for it to place a learner whose node died "
                             "(docs/distributed.md)")
    parser.add_argument("--front-ends", type=int, default=0, metavar="K",
                        help="answer the port with K front-end processes (SO_REUSEPORT) that batch the client "
                             "protocol to this process, which keeps the sessions, agents and store and listens "
                             "on a private loopback port (evaluate-mode steps are answered in the front ends "
                             "from snapshots of the greedy policy, and recorded here); a front end that dies is "
                             "restarted (docs/front-ends.md). 0 (the default): this process answers the port "
                             "itself")
    parser.add_argument("--no-front-end-snapshots", dest="front_end_snapshots", action="store_false",
                        help="with --front-ends: send evaluate-mode steps to this process too, instead of answering "
                             "them in the front ends from snapshots (docs/front-ends.md: on few cores, one front "
                             "end answering single-env steps from snapshots can cost more than it saves)")
    parser.add_argument("--parameter-bound", action="append", default=[], metavar="NAME=LOW:HIGH",
                        help="the lowest and highest value that agents' parameter NAME may be created, stored or "
                             "set to (run.py agents set-param, which an agent's own API key may call); outside "
                             "it: 400, and a stored agent is not served. Repeat for more names; give it before a "
                             "command (check, agents ...) for that command on a data folder no server serves "
                             "(a running server applies its own). Defaults: "
                             + ", ".join(f"{name} {bound}" for name, bound in DEFAULT_BOUNDS.bounds.items())
                             + " (n_epochs or gradient_steps: passes per update; a large one pins a core)")
    parser.add_argument("--max-reward", type=float, default=DEFAULT_MAX_REWARD, metavar="R",
                        help="the largest reward magnitude a step or upload may carry; a larger one is refused with "
                             "400, so that one client's rewards cannot overflow a pooled agent's arithmetic for "
                             "every client (default %(default)g; inf: no bound)")
    parser.add_argument("--max-curve-reads", type=int, default=2, metavar="N",
                        help="whole curves read at once per credential (the admin's, each agent's keys': returns.csv, "
                             "or a JSON read of over 1 MB), streamed off disk; more get 429 (default %(default)s)")
    parser.add_argument("--curve-read-stall-seconds", type=seconds, default=10.0, metavar="S", help="a whole-curve "
                        "read whose client takes nothing for S s loses its slot and connection (default %(default)g)")
    parser.add_argument("--trusted-proxy", action="append", default=[], metavar="ADDR",
                        help="a reverse proxy (an address or network: 127.0.0.1, 10.0.0.0/8) in front of the server: "
                             "a request from it is the client's that its X-Forwarded-For names (the rightmost "
                             "address that is no trusted proxy), for the login throttle and the local rule of "
                             "--metrics; one without that header is never local. Repeat for more; from any other "
                             "peer the header is ignored (docs/admin.md)")
    parser.add_argument("--metrics", choices=("off", "local", "open"), default="local",
                        help="who may read GET /metrics: off (404), local (loopback clients, or the admin "
                             "token as Bearer), open (anyone) (default %(default)s)")
    coach.add_arguments(parser)


def parameter_bounds(args: argparse.Namespace) -> ParameterBounds:
    """The bounds ``--parameter-bound`` gives (for every command: serving, ``check``, the admin commands on a
    data folder that no server serves), kept as ``args.bounds``.

    Raises:
        UsageError: a malformed bound, or a name no served algorithm has.
    """
    try:
        return parse_bounds(getattr(args, "parameter_bound", None) or ())
    except ValueError as error:
        raise UsageError(str(error)) from None


def serve_command(args: argparse.Namespace) -> int:
    from shepherd.loading import load_preset

    try:
        check_max_reward(args.max_reward)
    except ValueError as error:
        raise UsageError(str(error)) from None
    for name in ("clients", "max_sessions", "max_clients", "rate_limit", "front_ends"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} must be 0 or more")
    for name in ("session_timeout", "act_timeout", "max_body", "header_timeout", "body_timeout", "idle_timeout",
                 "max_envs", "curve_read_stall_seconds"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    if args.max_connections is not None and args.max_connections <= 0:
        raise UsageError("--max-connections must be positive")
    if args.max_curve_reads < 1:
        raise UsageError("--max-curve-reads must be at least 1")
    if args.max_connections_per_address is not None and args.max_connections_per_address < 0:
        raise UsageError("--max-connections-per-address must be 0 or more")
    if args.envs_per_client < 1:
        raise UsageError("--envs-per-client must be at least 1")
    if args.envs_per_client != 1 and not args.clients:
        raise UsageError("--envs-per-client needs --clients")
    if args.acting != "server" and not args.clients:
        raise UsageError("--acting needs --clients")
    from shepherd.http.proxies import parse_networks

    try:
        parse_networks(args.trusted_proxy)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if not args.front_end_snapshots and not args.front_ends:
        raise UsageError("--no-front-end-snapshots needs --front-ends")
    coach.check_arguments(args)
    try:
        graph = GraphManager.of(load_preset(args.preset, overrides=args.overrides or (), seed=args.seed,
                                            bounds=args.bounds))
        start_from = coach.apply_to_graph(graph, args)
        if args.clients and graph.validation is None:
            raise PresetError(f"preset {graph.name} has no validation block, so --clients has no env to run")
        if args.clients and graph.validation is not None and 0 < args.max_clients < args.clients:
            target = graph.validation.agent or graph.agents[0].name
            if any(spec.name == target and spec.sharing is Sharing.ADVISED for spec in graph.agents):
                raise PresetError(f"--clients {args.clients} would be {args.clients} client names of advised agent "
                                  f"{target}, more than --max-clients {args.max_clients}")
        if args.ray is not None:
            return serve_on_ray(graph, args, start_from)
        return asyncio.run(serve(graph, args, start_from))
    except PresetError as error:
        raise UsageError(str(error)) from None
    except StopFailed as error:
        print(f"error: while stopping: {error}", file=sys.stderr)
        return EXIT_NOT_REACHED


def serve_on_ray(graph: GraphManager, args: argparse.Namespace, start_from: StartingCheckpoints | None = None) -> int:
    """Serve with every learner (a pooled agent's, each client's of an advised one) in a Ray actor (imports
    ray only now)."""
    try:
        from shepherd.agents.ray import cluster as ray_cluster
    except ImportError as error:
        raise UsageError(f"--ray needs Ray: pip install -e .[ray] ({error})") from None
    try:
        link = ray_cluster.link(None if args.ray == LOCAL_RAY else args.ray)
    except Exception as error:  # noqa: BLE001 - Ray's own errors (no cluster at the address, a bad token)
        raise UsageError(f"cannot start or reach Ray ({args.ray}): {type(error).__name__}: {error}") from None
    graph.remote_learners = ray_cluster.RayLearners(link=link)
    try:
        return asyncio.run(serve(graph, args, start_from))
    finally:
        link.close()


class StopFailed(Exception):
    """The server stopped, but not cleanly (``server.json`` left behind, say): exit status 1."""


async def serve(graph: GraphManager, args: argparse.Namespace, start_from: StartingCheckpoints | None = None) -> int:
    from shepherd.admin import ADMIN
    from shepherd.http import ServerConfig
    from shepherd.front.supervisor import reserve_port
    from shepherd.http.server import RunningServer
    from shepherd.storage import StoreError

    config = ServerConfig(graph, args.data, session_idle_seconds=args.session_timeout,
                          act_timeout_seconds=args.act_timeout, max_sessions_per_agent=args.max_sessions or None,
                          requests_per_second_per_key=args.rate_limit or None, max_body_bytes=args.max_body,
                          max_connections=args.max_connections, header_timeout_seconds=args.header_timeout,
                          max_connections_per_address=args.max_connections_per_address,
                          max_curve_reads=args.max_curve_reads, curve_read_stall_seconds=args.curve_read_stall_seconds,
                          body_timeout_seconds=args.body_timeout, idle_timeout_seconds=args.idle_timeout,
                          secure_cookies=args.secure_cookies, only_preset=args.only_preset,
                          metrics=args.metrics, max_envs_per_session=args.max_envs,
                          max_clients_per_agent=args.max_clients or None,
                          front_end_token=new_secret() if args.front_ends else None,
                          front_end_snapshots=args.front_end_snapshots, evaluate_only=args.evaluate is not None,
                          start_from=start_from, trusted_proxies=tuple(args.trusted_proxy),
                          max_reward=args.max_reward, bounds=args.bounds)
    try:
        check_address(args.host, args.port)  # before the store creates keys and the admin token, shown once
        holder = reserve_port(args.host, args.port) if args.front_ends else None
    except OSError as error:
        raise UsageError(f"cannot serve on {args.host}:{args.port}: {error}") from None
    try:
        # with front ends, this process listens on a private loopback port and they answer the public one
        server = await RunningServer.start(config, *(("127.0.0.1", 0) if args.front_ends else (args.host, args.port)))
    except StoreError as error:
        raise UsageError(str(error)) from None
    except OSError as error:
        raise UsageError(f"cannot serve on {args.host}:{args.port}: {error}") from None
    url, front_ends = server.url, None
    if holder is not None:
        front_ends, url = await start_front_ends(server, config, args, holder)
    outcome, evaluating = Outcome(), args.evaluate is not None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    operations = server.admin.acting_as(ADMIN)  # keys are created and revoked through the admin service
    clients: list[asyncio.subprocess.Process] = []
    names: list[str] | None = None
    local_key_id = None
    monitor: asyncio.Task | None = None
    try:
        keys = dict(server.created_keys)
        if args.new_key:
            for record in preset_records(graph):
                created = await operations.add_key(record.id, "created by --new-key")
                keys[record.name] = created.key
        if front_ends is not None:
            print(f"Front ends: {args.front_ends} processes answer {url} (pids "
                  f"{', '.join(map(str, front_ends.pids))}); this process answers them on {server.url}", flush=True)
        announce(graph, url, args.data, keys, server.admin_token, coach.start_lines(args, start_from))
        if args.clients and graph.validation is not None:
            agent_id = graph.preset_agent_id(graph.validation.agent or graph.agents[0].name)
            local = await operations.add_key(agent_id, "local clients of run.py --clients")
            local_key_id = local.id
            names = local_client_names(args.clients) if graph.served.agents[agent_id].takes_client_names else None
            clients = await start_clients(url, local.key, graph.validation, args.clients,
                                          args.envs_per_client, args.seed or 0, names, args.acting)
            if names:
                print(f"local clients of advised agent {graph.validation.agent or graph.agents[0].name}: "
                      f"{', '.join(names)}", flush=True)
        monitor = watch_run(graph, args, outcome, stop, clients, names or ())
        await stop.wait()
    finally:
        if monitor is not None:
            monitor.cancel()
        await stop_clients(clients)
        if local_key_id is not None:
            await operations.revoke_key(local_key_id)
        served = coach.evaluation_lines(graph) if evaluating else []
        print("\nstopping" + (" (--evaluate: no checkpoint) ..." if evaluating else ": checkpointing the agents ..."),
              flush=True)
        if front_ends is not None:
            front_ends.terminate()  # they finish their open requests while this process answers them
        try:
            await server.stop()
        except OSError as error:
            raise StopFailed(str(error)) from None
        finally:
            if front_ends is not None:
                await front_ends.stop()
            if holder is not None:
                holder.close()
    if evaluating:
        print("\n".join([*served, outcome.reason or "stopped"]), flush=True)
        return EXIT_OK if outcome.code is None else outcome.code
    if args.clients:
        print(outcome.reason or "stopped before the target was reached")
        print(f"data folder: {args.data.resolve()}")
        return EXIT_NOT_REACHED if outcome.code is None else outcome.code
    if outcome.reached:  # -asc
        print(outcome.reason, flush=True)
    return EXIT_OK


def watch_run(graph: GraphManager, args: argparse.Namespace, outcome: Outcome, stop: asyncio.Event,
              clients: list[asyncio.subprocess.Process], names: Sequence[str]) -> asyncio.Task | None:
    """What decides when the run stops (setting ``stop``, with ``outcome``), and prints its progress: --evaluate's
    step count; the local clients' validation run (``clients``, of client ``names`` for an advised agent); -asc's
    target; else only the progress lines (none with --quiet). Returns the task to cancel at the stop."""
    if args.evaluate is not None:  # no progress lines: the steps and phases they show are training's
        return asyncio.create_task(coach.stop_after(graph, args.evaluate, outcome, stop, clients))
    validation = graph.validation
    validated = None if validation is None else graph.preset_agent_id(validation.agent or graph.agents[0].name)
    if clients and validated is not None:
        watch(graph, validated, outcome, stop, names)
        return asyncio.create_task(progress(graph, validated, clients, outcome, stop, args.quiet))
    if args.apply_stop_condition and validated is not None:
        watch(graph, validated, outcome, stop, reached_only=True)
    return None if args.quiet else asyncio.create_task(report_progress(graph))


async def start_front_ends(server: RunningServer, config: ServerConfig, args: argparse.Namespace,
                           holder: socket.socket) -> tuple[FrontEnds, str]:
    """Start ``--front-ends`` front ends on the port ``holder`` keeps; returns them and the public URL.

    Raises:
        UsageError: one did not start (the server is stopped again).
    """
    from shepherd.front.supervisor import FrontEndError, FrontEnds, FrontEndSettings

    assert config.front_end_token is not None
    port = holder.getsockname()[1]
    front_ends = FrontEnds(FrontEndSettings(
        args.front_ends, args.host, port, server.url, config.front_end_token, config.max_body_bytes,
        config.body_timeout_seconds, config.idle_timeout_seconds, config.act_timeout_seconds + 5,
        config.max_connections, config.header_timeout_seconds, config.max_connections_per_address,
        config.trusted_proxies, args.max_reward))
    try:
        await front_ends.start()
    except FrontEndError as error:
        holder.close()
        await server.stop()
        raise UsageError(str(error)) from None
    shown_host = f"[{args.host}]" if ":" in args.host else args.host
    return front_ends, f"http://{shown_host}:{port}"


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
