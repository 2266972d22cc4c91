"""``python run.py deploy policy.onnx``: serve an exported policy over the client protocol until Ctrl-C or
SIGTERM. ``run.py`` hands ``deploy`` straight to `main`, before the learning server's command line (which
imports torch) is loaded; the learning server's ``run.py -h`` lists it through `add_parser`.

Exit status: 0 after a clean stop, 1 the address cannot be bound, 2 bad usage or a policy file that cannot
be used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

from aiohttp import web

from shepherd.arguments import port, seconds
from shepherd.deploy.app import DeployConfig, create_app, new_key
from shepherd.policies.onnx import Policy, PolicyError
from shepherd.wire.spaces import space_to_json

EXIT_OK, EXIT_NOT_SERVED, EXIT_USAGE = 0, 1, 2
#: the environment variable a chosen API key is read from (a command line is visible to every user, in ps)
KEY_VARIABLE = "SHEPHERD_DEPLOY_KEY"
#: the shortest API key the deploy server takes (a new one has 43 characters: 256 random bits)
MIN_KEY_LENGTH = 32

DESCRIPTION = ("Serve an exported policy (run.py agents export AGENT --format onnx) over the same client "
               "protocol as the learning server, in evaluate mode: every action is the policy's greedy one, "
               "nothing is learned and no file is written. Runs on onnxruntime and numpy only (never torch). "
               "Clients log in with the API key it prints (or the one given in $SHEPHERD_DEPLOY_KEY or with "
               "--key-file); a login that asks to train is served in evaluate mode too, and its reply says "
               "\"mode\": \"evaluate\". Failed logins are throttled per address, as the learning server's.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("policy", help="the exported policy file (.onnx)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=port, default=8000, help="port to listen on (default: 8000; 0: any free one)")
    parser.add_argument("--key-file", metavar="PATH",
                        help=f"a file holding the API key clients log in with (one line, at least {MIN_KEY_LENGTH} "
                             f"characters); or set ${KEY_VARIABLE}. Default: a new random key, printed once")
    parser.add_argument("--key", help=argparse.SUPPRESS)  # refused: a command line is visible to every user
    parser.add_argument("--max-sessions", type=int, default=1024, metavar="N",
                        help="most sessions open at once; past it a login gets 429 (default: 1024)")
    parser.add_argument("--max-envs", type=int, default=1024, metavar="N",
                        help="most envs one vector session may drive (default: 1024)")
    parser.add_argument("--session-timeout", type=seconds, default=600.0, metavar="SECONDS",
                        help="a session idle for this long ends (default: 600)")
    parser.add_argument("--threads", type=int, default=1, metavar="N",
                        help="onnxruntime's threads per forward pass (default: 1)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """``deploy`` as a subcommand of ``python run.py`` (for its -h; run.py runs it through `main`)."""
    parser = subparsers.add_parser("deploy", help="serve an exported policy (.onnx) in evaluate mode, without "
                                                  "torch", description=DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(func=command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python run.py deploy", description=DESCRIPTION)
    add_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="log server events")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return command(args)


def chosen_key(key_file: str | None, environ: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """The API key chosen by the operator: the first line of ``key_file``, else ``$SHEPHERD_DEPLOY_KEY``;
    None if neither is given (a new key is made).

    Raises:
        ValueError: the file cannot be read, or the key is shorter than `MIN_KEY_LENGTH` or holds spaces.
    """
    if key_file is not None:
        try:
            lines = Path(key_file).read_text().splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"--key-file {key_file}: cannot be read: {getattr(error, 'strerror', None) or error}"
                             ) from None
        key, where = (lines[0].strip() if lines else ""), f"the key in {key_file}"
    elif environ.get(KEY_VARIABLE) is not None:
        key, where = environ[KEY_VARIABLE].strip(), f"${KEY_VARIABLE}"
    else:
        return None
    if len(key) < MIN_KEY_LENGTH or any(c.isspace() for c in key):
        raise ValueError(f"{where} must be at least {MIN_KEY_LENGTH} characters without spaces (it has "
                         f"{len(key)}); leave it out and the server makes a random one of 43")
    return key


def command(args: argparse.Namespace) -> int:
    if args.key is not None:
        print(f"error: --key is not taken on the command line (every user of the machine sees it, in ps); put the "
              f"key in ${KEY_VARIABLE} or in a file given with --key-file", file=sys.stderr)
        return EXIT_USAGE
    try:
        key = chosen_key(args.key_file)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    problems = [text for bad, text in (
        (args.max_sessions < 1, "--max-sessions must be at least 1"), (args.max_envs < 1, "--max-envs must be at least 1"),
        (args.session_timeout <= 0, "--session-timeout must be positive"), (args.threads < 1, "--threads must be at least 1"),
        (not 0 <= args.port <= 65535, "--port must be from 0 to 65535")) if bad]
    if problems:
        print(f"error: {problems[0]}", file=sys.stderr)
        return EXIT_USAGE
    try:
        policy = Policy.load(args.policy, threads=args.threads)
    except PolicyError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    config = DeployConfig(policy, key or new_key(), max_sessions=args.max_sessions,
                          max_envs_per_session=args.max_envs, session_idle_seconds=args.session_timeout)
    try:
        asyncio.run(_serve(config, args.host, args.port, created_key=key is None))
    except OSError as error:
        print(f"error: cannot listen on {args.host}:{args.port}: {error.strerror or error}", file=sys.stderr)
        return EXIT_NOT_SERVED
    return EXIT_OK


async def _serve(config: DeployConfig, host: str, port: int, created_key: bool) -> None:
    runner = web.AppRunner(create_app(config), access_log=None, handle_signals=False, keepalive_timeout=75)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0]
        shown = f"[{bound[0]}]" if ":" in str(bound[0]) else bound[0]
        policy = config.policy
        print(f"deploying agent {policy.agent} ({policy.algorithm}, policy version {policy.policy_version}) "
              f"at http://{shown}:{bound[1]}/", flush=True)
        print(f"observations {json.dumps(space_to_json(policy.observation_space))}, "
              f"actions {json.dumps(space_to_json(policy.action_space))}"
              + (f", action masks of {policy.mask_size}" if policy.takes_masks else ""), flush=True)
        if created_key:
            print(f"API key (shown once; clients log in with it): {config.api_key}", flush=True)
        else:
            print(f"API key: the one given (--key-file or ${KEY_VARIABLE})", flush=True)
        print("Stop with Ctrl-C (nothing is learned, nothing is written)", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()
