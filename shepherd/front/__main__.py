"""``python -m shepherd.front``: one front end, as the head starts it (``shepherd/front/supervisor.py``).

The first line of standard input is this run's token (never on the command line, where ``ps`` shows it);
the rest of standard input stays open while the head lives: its end (the head stopped, or was killed) stops
the front end. The line ``listening <pid>`` on standard output says the port is bound.
"""

from __future__ import annotations

import argparse
import functools
import asyncio
import logging
import os
import signal
import sys

from aiohttp import web

from shepherd.arguments import port, seconds
from shepherd.wire.addresses import parse_networks, trusted
from shepherd.wire.connections import GuardedRunner, connection_limit, per_address_limit
from shepherd.front.app import FrontConfig, create_app
from shepherd.wire.steps import DEFAULT_MAX_REWARD

logger = logging.getLogger("shepherd.front")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m shepherd.front", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head", required=True, help="the head's private URL (http://127.0.0.1:PORT)")
    parser.add_argument("--host", required=True, help="the public address, bound with SO_REUSEPORT")
    parser.add_argument("--port", type=port, required=True, help="the public port")
    parser.add_argument("--max-body", type=int, default=1 << 20, metavar="BYTES")
    parser.add_argument("--body-timeout", type=seconds, default=30.0, metavar="SECONDS")
    parser.add_argument("--idle-timeout", type=seconds, default=75.0, metavar="SECONDS")
    parser.add_argument("--max-connections", type=int, default=None, metavar="N",
                        help="open public connections at most (more are answered 503 and closed; default: from "
                             "the open-file limit)")
    parser.add_argument("--max-connections-per-address", type=int, default=None, metavar="N",
                        help="open public connections one client address (an IPv6 address's whole /64) may hold "
                             "(more are answered 429 and closed; the last tenth of --max-connections are kept for "
                             "addresses that hold none; default: half of --max-connections; 0: no cap)")
    parser.add_argument("--trusted-proxy", action="append", default=[], metavar="ADDR",
                        help="a reverse proxy (address or network): exempt from --max-connections-per-address, "
                             "and the client of a login, step or logout from it is the one its X-Forwarded-For "
                             "names")
    parser.add_argument("--header-timeout", type=seconds, default=10.0, metavar="SECONDS",
                        help="close a new connection that sends no request headers within this long")
    parser.add_argument("--max-reward", type=float, default=DEFAULT_MAX_REWARD, metavar="R",
                        help="the bound on reward magnitudes, the head's (run.py --max-reward)")
    parser.add_argument("--shutdown-timeout", type=seconds, default=35.0, metavar="SECONDS",
                        help="how long open requests get to be answered when the front end stops")
    return parser.parse_args(argv)


def front_config(args: argparse.Namespace, token: str) -> FrontConfig:
    """The front end's config from its command line: the head's limits, which it applies as the head would."""
    return FrontConfig(args.head, token, args.max_body, args.body_timeout, args.idle_timeout,
                       parse_networks(args.trusted_proxy), args.max_reward)


async def serve(args: argparse.Namespace, token: str) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the head's to handle: it stops us in order

    def head_gone() -> None:  # standard input readable: the head wrote nothing more, so this is its end
        if not os.read(sys.stdin.fileno(), 4096):
            loop.remove_reader(sys.stdin.fileno())
            logger.warning("the head is gone; stopping")
            stop.set()

    loop.add_reader(sys.stdin.fileno(), head_gone)
    config = front_config(args, token)
    limit, proxies = connection_limit(args.max_connections), config.trusted_proxies
    runner = GuardedRunner(create_app(config), limit, args.header_timeout,
                           per_address_limit(args.max_connections_per_address, limit),
                           functools.partial(trusted, networks=proxies) if proxies else None,
                           handle_signals=False, access_log=None, keepalive_timeout=args.idle_timeout,
                           shutdown_timeout=args.shutdown_timeout)
    await runner.setup()
    try:
        await web.TCPSite(runner, args.host, args.port, reuse_port=True).start()
        print(f"listening {os.getpid()}", flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"front end {os.getpid()}: %(levelname)s %(name)s: %(message)s")
    token = sys.stdin.readline().strip()
    if not token:
        print("error: the token must be the first line of standard input", file=sys.stderr)
        return 2
    asyncio.run(serve(args, token))
    return 0


if __name__ == "__main__":
    sys.exit(main())
