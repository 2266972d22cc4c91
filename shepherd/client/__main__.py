"""``python -m shepherd.client``: drive a gymnasium environment (or ``--n-envs`` of them) against a server."""


from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

from shepherd.arguments import seed
from shepherd.client.connection import Client, ShepherdError, VectorClient
from shepherd.client.loops import make_vector_env, run_env, run_vector_env

if TYPE_CHECKING:
    from shepherd.client.acting import ActingClient

logger = logging.getLogger(__name__)


def server_url(text: str) -> str:
    """An http or https URL with a valid port (a bad one was a traceback from the client's constructor)."""
    try:
        parts = urlsplit(text if "://" in text else f"http://{text}")
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is no URL the client can reach: {error}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} must be an http:// or https:// URL with a host")
    return text


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m shepherd.client`` (also on the documentation's command-line page)."""
    parser = argparse.ArgumentParser(
        prog="python -m shepherd.client",
        description="Drive a gymnasium environment through a Shepherd agent, or with --n-envs several copies "
                    "of it, all stepped in one request (a vector session). The API key is read from the "
                    "SHEPHERD_API_KEY environment variable.",
        epilog="A server that cannot be reached at the start (nothing listens at the URL) ends the client at "
               "once; one that goes away later is retried for 60 s. Either way the client then exits 1 with "
               "one line on stderr, as it does when the server refuses it.")
    parser.add_argument("--url", type=server_url, default="http://127.0.0.1:8000",
                        help="server URL (default %(default)s)")
    parser.add_argument("--env", default="CartPole-v1", help="gymnasium env id (default %(default)s)")
    parser.add_argument("--episodes", type=int, default=None, metavar="N",
                        help="stop after N episodes, counted over every env with --n-envs (the step that "
                             "reaches N may end more) (default: never)")
    parser.add_argument("--seed", type=seed, default=None,
                        help="seed of the env's first reset; with --n-envs, env i's is SEED + i")
    parser.add_argument("--mode", choices=("train", "evaluate"), default="train",
                        help="train: the agent learns; evaluate: greedy actions, never learned from")
    parser.add_argument("--env-kwargs", default="{}",
                        help="JSON object of gymnasium.make keyword arguments (with --pettingzoo: FACTORY's)")
    parser.add_argument("--n-envs", type=int, default=None, metavar="N",
                        help="run N copies of the env (a gymnasium vector env that resets an ended copy in "
                             "the same step) and send all N steps in one request (default: one env, one "
                             "step per request)")
    parser.add_argument("--client", metavar="NAME", default=None,
                        help="the client's name, which a login to an advised agent needs (its learner and model "
                             "are that name's; docs/advice.md)")
    parser.add_argument("--async", dest="asynchronous", action="store_true",
                        help="with --n-envs: run each copy in a subprocess (default: all in this process)")
    parser.add_argument("--acting", choices=("server", "client"), default="server",
                        help="server: send every step and get the action back (standard library only); client: "
                             "fetch the agent's policy as an ONNX file, act with it here (needs numpy and "
                             "onnxruntime) and upload the envs' experience in blocks (default %(default)s)")
    parser.add_argument("--steps", type=int, default=None, metavar="N",
                        help="with --acting client: stop after the upload that reaches N env steps, counted over "
                             "every env (default: never)")
    parser.add_argument("--pettingzoo", metavar="MODULE:FACTORY", default=None,
                        help="drive a PettingZoo env that FACTORY() makes (AEC or parallel API; action masks from its "
                             "observations) through an environment with roles, whose key SHEPHERD_API_KEY is: its "
                             "roles named as the env's agents (docs/how-to/multi-agent.md); with --n-envs N, N "
                             "copies of it in one vector session, a step of every copy per request")
    parser.add_argument("--retry-seconds", type=float, default=30.0, metavar="SECONDS",
                        help="how long a step answered 429 or 503, or whose connection was lost, is sent again (with "
                             "its seq) before the client gives up; the time the server held a step before its 503 (its "
                             "act timeout: a long update) does not count (default %(default)g)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.n_envs is not None and args.n_envs < 1:
        parser.error("--n-envs must be at least 1")
    if args.asynchronous and args.n_envs is None:
        parser.error("--async needs --n-envs")
    if args.pettingzoo is not None and (args.asynchronous or args.acting == "client"):
        parser.error("--pettingzoo plays its copies in this process, with the server acting (no --async, no "
                     "--acting client)")
    if args.pettingzoo is not None and args.client is not None:
        parser.error("--pettingzoo logs in with an environment's key, which names no client (no --client)")
    if args.steps is not None and args.acting != "client":
        parser.error("--steps needs --acting client")
    for name in ("episodes", "steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except ValueError as error:
        parser.error(f"--env-kwargs is not JSON ({error})")
    if not isinstance(env_kwargs, dict):
        parser.error("--env-kwargs must be a JSON object of keyword arguments, as '{\"render_mode\": null}'")
    apikey = os.environ.get("SHEPHERD_API_KEY")
    if not apikey:
        parser.error("set SHEPHERD_API_KEY to the agent's API key")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s client %(message)s")
    if args.pettingzoo is not None:
        return _pettingzoo(args, apikey, env_kwargs, parser)
    try:  # made once here, so that a name or keywords gymnasium refuses are one line, not a traceback
        import gymnasium

        gymnasium.make(args.env, **env_kwargs).close()
    except Exception as error:  # noqa: BLE001 - whatever the env's constructor raises
        parser.error(f"--env {args.env} cannot be made: {type(error).__name__}: {error}")
    client: Client | VectorClient | ActingClient
    if args.acting == "client":
        try:
            from shepherd.client.acting import ActingClient
        except ImportError as error:
            print(f"error: --acting client needs numpy and onnxruntime ({error})", file=sys.stderr)
            return 1
        client = ActingClient(args.url, apikey, args.n_envs or 1, retry_seconds=args.retry_seconds, client=args.client,
                              seed=args.seed)
    else:
        client = (Client(args.url, apikey, retry_seconds=args.retry_seconds, client=args.client)
                  if args.n_envs is None else
                  VectorClient(args.url, apikey, args.n_envs, retry_seconds=args.retry_seconds, client=args.client))
    vector_envs: list[Any] = []  # closed once the run ends, however it ends

    def play() -> list[float]:
        if args.acting == "client":
            from shepherd.client.acting import run_acting_env

            assert isinstance(client, ActingClient)
            return [value for env_returns in run_acting_env(client, args.env, args.seed, args.episodes, args.steps,
                                                            args.mode, env_kwargs, args.asynchronous)
                    for value in env_returns]
        if isinstance(client, Client):
            return run_env(client, args.env, args.seed, args.episodes, args.mode, env_kwargs,
                           max(args.retry_seconds, 60.0))
        assert isinstance(client, VectorClient)
        vector_envs.append(make_vector_env(args.env, args.n_envs, args.asynchronous, env_kwargs))
        return [value for env_returns in run_vector_env(client, vector_envs[0], args.seed, args.episodes,
                                                        args.mode, max(args.retry_seconds, 60.0))
                for value in env_returns]

    status, returns = _guarded(client, play, lambda: [env.close() for env in vector_envs])
    if status is not None:
        return status
    if returns:
        envs = f" over {args.n_envs} envs" if args.n_envs is not None else ""
        print(f"{len(returns)} episodes{envs}, mean return {sum(returns) / len(returns):.1f}")
    return 0


def _pettingzoo(args: argparse.Namespace, apikey: str, env_kwargs: dict[str, Any],
                parser: argparse.ArgumentParser) -> int:
    """``--pettingzoo MODULE:FACTORY``: its env's episodes through an environment with roles."""
    import importlib

    from shepherd.client.roles import RolesClient, run_aec, run_aec_envs, run_parallel, run_parallel_envs

    module, _, name = args.pettingzoo.partition(":")
    try:
        factory = getattr(importlib.import_module(module), name)
        envs = [factory(**env_kwargs) for _ in range(args.n_envs or 1)]
    except Exception as error:  # noqa: BLE001 - an import, a missing name, whatever the factory raises
        parser.error(f"--pettingzoo {args.pettingzoo} cannot be made: {type(error).__name__}: {error}")
    client = RolesClient(args.url, apikey, retry_seconds=args.retry_seconds)
    episodes = args.episodes if args.episodes is not None else 2 ** 62
    aec = hasattr(envs[0], "agent_iter")

    def play() -> list[dict[str, float]]:
        client.login(args.mode, args.n_envs)
        if args.n_envs is None:
            return (run_aec if aec else run_parallel)(envs[0], client, episodes, args.seed)
        return (run_aec_envs if aec else run_parallel_envs)(envs, client, episodes, args.seed)

    def close() -> None:
        client.close()
        for env in envs:
            if hasattr(env, "close"):  # PettingZoo's envs have one; an env of your own may not
                env.close()

    status, returns = _guarded(client, play, close)
    if status is not None:
        return status
    means = {role: sum(r.get(role, 0.0) for r in returns) / max(len(returns), 1) for role in returns[0]} if returns else {}
    copies = f" over {args.n_envs} copies" if args.n_envs is not None else ""
    print(f"{len(returns)} episodes{copies}, mean return by role: "
          + ", ".join(f"{role} {value:.1f}" for role, value in means.items()))
    return 0



def _guarded(client: Any, play: Callable[[], Any], after: Callable[[], object]) -> tuple[int | None, Any]:
    """``play()`` against the server: (None, what it returned), or the exit status and None when it was
    interrupted (0) or the server refused or could not be reached (1, said on stderr). The client logs out and
    ``after`` runs however it ended."""
    try:
        return None, play()
    except KeyboardInterrupt:
        return 0, None
    except ShepherdError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1, None
    except (OSError, http.client.HTTPException) as error:
        print(f"error: cannot reach the Shepherd server at {client.url}: {error or type(error).__name__}",
              file=sys.stderr)
        return 1, None
    finally:
        try:
            client.logout()
        except (ShepherdError, OSError, http.client.HTTPException):
            pass
        after()


if __name__ == "__main__":
    sys.exit(main())

