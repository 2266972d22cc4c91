"""A Shepherd client needing only the standard library, and a loop that drives a gymnasium env with it.

    client = Client("http://127.0.0.1:8000", apikey)
    client.login()
    action = client.step(obs, 0.0, False)              # first step of an episode: its reset observation
    action = client.step(obs, reward, done, truncated=...)   # None once done is true
    client.logout()

Run ``python -m shepherd.client --help`` to drive a gymnasium environment against a server; the API key
comes from the ``SHEPHERD_API_KEY`` environment variable so that it never shows in a process list.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import socket
import sys
import time
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)


class ShepherdError(Exception):
    """The server answered with an error status; ``status`` and the server's message are kept."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


def to_json(value: Any) -> Any:
    """numpy arrays and scalars (anything with ``tolist``), nested in dicts or lists, to plain JSON."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    return value


class Client:
    """One session with a Shepherd server over a keep-alive HTTP connection. Not thread-safe."""

    def __init__(self, url: str, apikey: str, timeout: float = 120.0, retry_seconds: float = 30.0) -> None:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {parts.scheme!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self.url = f"{parts.scheme}://{parts.netloc}{self._prefix}"
        self._timeout = timeout
        self._apikey = apikey
        self._connection: http.client.HTTPConnection | None = None
        self.retry_seconds = retry_seconds
        self.session_key: str | None = None
        self.seq = 0
        self.info: dict[str, Any] = {}
        self.reached = False  # whether the server ever answered: a server never reached is not retried

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._connection = kind(self._host, self._port, timeout=self._timeout)
        return self._connection

    def post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST a JSON object; returns the reply object or raises ShepherdError / OSError."""
        body = json.dumps(payload, allow_nan=False).encode()
        connection = self._connect()
        try:
            connection.request("POST", f"{self._prefix}{path}", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        self.reached = True
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {"error": raw[:200].decode(errors="replace")}
        if response.status >= 400:
            retry = response.getheader("Retry-After")
            raise ShepherdError(response.status, data.get("error", response.reason),
                                float(retry) if retry else None)
        return data

    def login(self, mode: str = "train") -> dict[str, Any]:
        """Log in with the API key; returns the server's reply (agent name and spaces)."""
        self.info = self.post("/shepherd/login_user/", {"apikey": self._apikey, "mode": mode})
        self.session_key = self.info["session_key"]
        self.seq = 0
        return self.info

    def step(self, obs: Any, reward: float, done: bool, info: dict | None = None,
             truncated: bool = False) -> Any:
        """Send one observation; returns the action, or None when ``done`` ended the episode.

        Each step carries a sequence number, so a step whose reply was lost (connection dropped, 503
        after a long update, 429) is sent again for up to ``retry_seconds`` and the server answers the
        retry with the same action, counting the step once.

        Raises:
            ShepherdError: the server refused the step (401: the session is gone; log in again).
        """
        self.seq += 1
        payload = {"session_key": self.session_key, "obs": to_json(obs), "reward": float(reward),
                   "done": bool(done), "info": info or {}, "seq": self.seq}
        if truncated:
            payload["truncated"] = True
        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                return self.post("/shepherd/env/", payload)["action"]
            except ShepherdError as error:
                if error.status not in (429, 503) or time.monotonic() > deadline:
                    raise
                time.sleep(min(error.retry_after or 1.0, 5.0))
            except (OSError, http.client.HTTPException):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def logout(self) -> None:
        if self.session_key is not None:
            try:
                self.post("/shepherd/logout/", {"session_key": self.session_key})
            finally:
                self.session_key = None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def run_env(client: Client, env_id: str, seed: int | None = None, episodes: int | None = None,
            mode: str = "train", env_kwargs: dict | None = None, retry_seconds: float = 60.0) -> list[float]:
    """Drive a gymnasium env through a Shepherd agent; returns the episode returns.

    A lost session (server restarted, session expired) is logged in again and the episode started
    over; a server that cannot be reached is retried for ``retry_seconds``, except at the very first
    login, where a refused connection (nothing listens there) or an unknown host is raised at once.
    """
    import gymnasium as gym

    from shepherd.spaces import action_from_json

    env = gym.make(env_id, **(env_kwargs or {}))
    returns: list[float] = []
    first_reset = True
    while episodes is None or len(returns) < episodes:
        if client.session_key is None:
            _login(client, mode, retry_seconds)  # gives up, raising, after retry_seconds
        try:
            obs, _ = env.reset(seed=seed if first_reset else None)
            first_reset = False
            action, total = client.step(obs, 0.0, False), 0.0
            while action is not None:
                obs, reward, terminated, truncated, _ = env.step(action_from_json(env.action_space, action))
                total += float(reward)
                done = terminated or truncated
                action = client.step(obs, float(reward), done, truncated=truncated and not terminated)
            returns.append(total)
        except ShepherdError as error:
            if error.status != 401:
                raise
            logger.info("session lost (%s); logging in again", error.message)
            client.session_key = None
        except (OSError, http.client.HTTPException) as error:
            logger.info("connection lost (%s); logging in again", error)
            client.session_key = None
    env.close()
    return returns


def _login(client: Client, mode: str, retry_seconds: float) -> None:
    deadline = time.monotonic() + retry_seconds
    while True:
        try:
            client.login(mode)
            return
        except (OSError, http.client.HTTPException) as error:
            if time.monotonic() > deadline or (not client.reached and _not_there(error)):
                raise
            time.sleep(0.5)
        except ShepherdError as error:
            if error.status != 503 or time.monotonic() > deadline:
                raise
            time.sleep(error.retry_after or 1.0)


def _not_there(error: BaseException) -> bool:
    """Whether a connection error says that no server is there at all (rather than a passing failure)."""
    return isinstance(error, (ConnectionRefusedError, socket.gaierror))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shepherd.client",
        description="Drive a gymnasium environment through a Shepherd agent. The API key is read from "
                    "the SHEPHERD_API_KEY environment variable.",
        epilog="A server that cannot be reached at the start (nothing listens at the URL) ends the client at "
               "once; one that goes away later is retried for 60 s. Either way the client then exits 1 with "
               "one line on stderr, as it does when the server refuses it.")
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="server URL (default %(default)s)")
    parser.add_argument("--env", default="CartPole-v1", help="gymnasium env id (default %(default)s)")
    parser.add_argument("--episodes", type=int, default=None, help="stop after N episodes (default: never)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the env's first reset")
    parser.add_argument("--mode", choices=("train", "evaluate"), default="train",
                        help="train: the agent learns; evaluate: greedy actions, never learned from")
    parser.add_argument("--env-kwargs", default="{}", help="JSON object of gymnasium.make keyword arguments")
    args = parser.parse_args(argv)
    apikey = os.environ.get("SHEPHERD_API_KEY")
    if not apikey:
        parser.error("set SHEPHERD_API_KEY to the agent's API key")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s client %(message)s")
    client = Client(args.url, apikey)
    try:
        returns = run_env(client, args.env, args.seed, args.episodes, args.mode, json.loads(args.env_kwargs))
    except KeyboardInterrupt:
        return 0
    except ShepherdError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except (OSError, http.client.HTTPException) as error:
        print(f"error: cannot reach the Shepherd server at {client.url}: {error or type(error).__name__}",
              file=sys.stderr)
        return 1
    finally:
        try:
            client.logout()
        except (ShepherdError, OSError, http.client.HTTPException):
            pass
    if returns:
        print(f"{len(returns)} episodes, mean return {sum(returns) / len(returns):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
