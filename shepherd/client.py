"""A Shepherd client needing only the standard library, and loops that drive gymnasium envs with it.

    client = Client("http://127.0.0.1:8000", apikey)
    client.login()
    action = client.step(obs, 0.0, False)              # first step of an episode: its reset observation
    action = client.step(obs, reward, done, truncated=...)   # None once done is true
    client.logout()

A `VectorClient` steps N environments in one request, with SB3 ``VecEnv``'s automatic reset in the same
step (``docs/protocol.md``); `run_vector_env` drives a gymnasium vector env made by `make_vector_env`,
`run_sb3_vec_env` a stable-baselines3 ``VecEnv``::

    client = VectorClient("http://127.0.0.1:8000", apikey, n_envs=8)
    returns = run_vector_env(client, make_vector_env("CartPole-v1", 8), seed=0, episodes=100)

Run ``python -m shepherd.client --help`` to drive a gymnasium environment (or ``--n-envs`` of them)
against a server; the API key comes from the ``SHEPHERD_API_KEY`` environment variable so that it never
shows in a process list.
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
from collections.abc import Callable
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


class _Connection:
    """What both clients share: a keep-alive HTTP connection to the server, the session key, and the retries
    of a step. Not thread-safe."""

    def __init__(self, url: str, apikey: str, timeout: float = 120.0, retry_seconds: float = 30.0,
                 client: str | None = None) -> None:
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
        self.client = client  # the client name a login to an advised agent gives (docs/advice.md)
        self._connection: http.client.HTTPConnection | None = None
        self.retry_seconds = retry_seconds
        self.session_key: str | None = None
        self.seq = 0
        self.info: dict[str, Any] = {}
        self.policy_version: int | None = None  # of the last action received (None: none yet)
        self.reached = False  # whether the server ever answered: a server never reached is not retried

    def _login_body(self, mode: str) -> dict[str, Any]:
        body: dict[str, Any] = {"apikey": self._apikey, "mode": mode}
        if self.client is not None:
            body["client"] = self.client
        return body

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

    def _open(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Log in with ``payload``; keeps the reply and the session key, and starts ``seq`` again."""
        self.info = self.post("/shepherd/login_user/", payload)
        self.session_key = self.info["session_key"]
        self.seq = 0
        return self.info

    def _send_step(self, payload: dict[str, Any]) -> dict[str, Any]:
        """POST a step with the next sequence number, sending it again after 429, 503 or a lost connection
        for up to ``retry_seconds``: the server answers a retried ``seq`` as it did the first time and
        counts the step once."""
        self.seq += 1
        payload["seq"] = self.seq
        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                return self.post("/shepherd/env/", payload)
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


class Client(_Connection):
    """One session with a Shepherd server over a keep-alive HTTP connection, driving one env. Not
    thread-safe."""

    def login(self, mode: str = "train") -> dict[str, Any]:
        """Log in with the API key; returns the server's reply (agent name and spaces)."""
        return self._open(self._login_body(mode))

    def step(self, obs: Any, reward: float, done: bool, info: dict | None = None,
             truncated: bool = False, action_mask: Any = None) -> Any:
        """Send one observation; returns the action, or None when ``done`` ended the episode.
        ``action_mask`` (booleans, true where an action is valid for ``obs``) is sent when given: only
        agents of an algorithm that takes masks (MaskablePPO) accept it.

        Each step carries a sequence number, so a step whose reply was lost (connection dropped, 503
        after a long update, 429) is sent again for up to ``retry_seconds`` and the server answers the
        retry with the same action, counting the step once.

        Raises:
            ShepherdError: the server refused the step (401: the session is gone; log in again).
        """
        payload = {"session_key": self.session_key, "obs": to_json(obs), "reward": float(reward),
                   "done": bool(done), "info": info or {}}
        if truncated:
            payload["truncated"] = True
        if action_mask is not None:
            payload["action_mask"] = to_json(action_mask)
        reply = self._send_step(payload)
        if reply.get("action") is not None:  # an episode's end is answered without one
            self.policy_version = reply.get("policy_version")
        return reply["action"]


class VectorClient(_Connection):
    """One vector session: ``n_envs`` environments stepped in one request, with SB3 ``VecEnv``'s automatic
    reset in the same step. Not thread-safe.

    The first step carries every env's reset observation, rewards 0 and no ends (`first_vector_step`).
    Afterwards ``obs[i]`` is what env i observed after its last action; when its episode ended,
    ``reward[i]`` is that episode's last reward, ``final_obs[i]`` its last observation and ``obs[i]``
    already the next episode's first. The reply's ``actions[i]`` answers ``obs[i]``.
    """

    def __init__(self, url: str, apikey: str, n_envs: int, timeout: float = 120.0,
                 retry_seconds: float = 30.0, client: str | None = None) -> None:
        if n_envs < 1:
            raise ValueError(f"n_envs must be at least 1, not {n_envs}")
        super().__init__(url, apikey, timeout, retry_seconds, client)
        self.n_envs = n_envs

    def login(self, mode: str = "train") -> dict[str, Any]:
        """Log in as a vector session of ``n_envs`` envs; returns the server's reply (agent name, spaces).

        Raises:
            ShepherdError: the server refused (400: more envs than it allows; 401: unknown key).
        """
        return self._open({**self._login_body(mode), "n_envs": self.n_envs})

    def step(self, obs: list, reward: list, terminated: list, truncated: list, final_obs: list | None = None,
             info: list | None = None, action_mask: list | None = None) -> list:
        """Send every env's step, lists of ``n_envs`` JSON values (or numpy values, converted); returns
        the actions, ``actions[i]`` answering ``obs[i]``. ``final_obs`` is left out of the body when None
        (allowed when no env ended); ``info`` and ``action_mask`` (one mask per env) likewise. Retried as
        `Client.step` is.

        Raises:
            ShepherdError: the server refused the step (400 names the field and index; 401: the session
                is gone, log in again).
        """
        payload: dict[str, Any] = {"session_key": self.session_key, "obs": to_json(obs),
                                   "reward": to_json(reward), "terminated": to_json(terminated),
                                   "truncated": to_json(truncated)}
        if final_obs is not None:
            payload["final_obs"] = to_json(final_obs)
        if info is not None:
            payload["info"] = to_json(info)
        if action_mask is not None:
            payload["action_mask"] = to_json(action_mask)
        reply = self._send_step(payload)
        self.policy_version = reply.get("policy_version")
        return reply["actions"]


def run_env(client: Client, env_id: str, seed: int | None = None, episodes: int | None = None,
            mode: str = "train", env_kwargs: dict | None = None, retry_seconds: float = 60.0) -> list[float]:
    """Drive a gymnasium env through a Shepherd agent; returns the episode returns.

    A lost session (server restarted, session expired) is logged in again and the episode started
    over; a server that cannot be reached is retried for ``retry_seconds``, except at the very first
    login, where a refused connection (nothing listens there) or an unknown host is raised at once.
    """
    import gymnasium as gym

    from shepherd.wire.spaces import action_from_json

    env = gym.make(env_id, **(env_kwargs or {}))
    returns: list[float] = []
    first_reset = True
    while episodes is None or len(returns) < episodes:
        if client.session_key is None:
            _login(client, mode, retry_seconds)  # gives up, raising, after retry_seconds
        try:
            obs, _ = env.reset(seed=seed if first_reset else None)
            first_reset = False
            action, total = client.step(obs, 0.0, False, action_mask=env_action_mask(env)), 0.0
            while action is not None:
                obs, reward, terminated, truncated, _ = env.step(action_from_json(env.action_space, action))
                total += float(reward)
                done = terminated or truncated
                action = client.step(obs, float(reward), done, truncated=truncated and not terminated,
                                     action_mask=None if done else env_action_mask(env))
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


def env_action_mask(env: Any) -> list[bool] | None:
    """The env's valid actions now, if it tells them as sb3-contrib's ``ActionMasker`` wrapper (or an env
    with an ``action_masks()`` method) does; None otherwise."""
    try:
        masks = env.get_wrapper_attr("action_masks")
    except AttributeError:
        return None
    return [bool(valid) for valid in masks()]


def make_vector_env(env_id: str, n_envs: int, asynchronous: bool = False, env_kwargs: dict | None = None) -> Any:
    """A gymnasium vector env of ``n_envs`` copies of ``env_id`` that resets an ended env in the same step
    (``AutoresetMode.SAME_STEP``), as the protocol's vector steps and SB3's ``VecEnv`` do; gymnasium's
    default, NEXT_STEP, would report the reset one step later. ``asynchronous`` runs each copy in a
    subprocess."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    return gym.make_vec(env_id, num_envs=n_envs, vectorization_mode="async" if asynchronous else "sync",
                        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}, **(env_kwargs or {}))


def _rows(batch: Any, n: int) -> list:
    """A batch of ``n`` observations (an array with the envs on its first axis, or a dict of such arrays,
    as gymnasium's vector envs and SB3's ``VecEnv``s give them) as a list of ``n`` JSON observations."""
    if isinstance(batch, dict):
        columns = {key: _rows(value, n) for key, value in batch.items()}
        return [{key: column[i] for key, column in columns.items()} for i in range(n)]
    rows = to_json(batch)  # one tolist() for the whole batch: the cheapest way to JSON values
    if not isinstance(rows, list) or len(rows) != n:
        raise ValueError(f"expected a batch of {n} observations, got {type(batch).__name__} "
                         f"{getattr(batch, 'shape', '')}")
    return rows


def first_vector_step(obs: Any, n_envs: int) -> dict[str, list]:
    """The body of a vector session's first step, or its first after every env was reset: each env's
    reset observation, rewards 0, no ends (`VectorClient.step` takes it as keyword arguments)."""
    return {"obs": _rows(obs, n_envs), "reward": [0.0] * n_envs, "terminated": [False] * n_envs,
            "truncated": [False] * n_envs}


def gymnasium_vector_step(obs: Any, reward: Any, terminated: Any, truncated: Any,
                          infos: dict[str, Any]) -> dict[str, list]:
    """The body of a vector step made of what a gymnasium vector env's ``step`` returned, in its SAME_STEP
    autoreset mode (`make_vector_env`): an ended env's last observation is ``infos["final_obs"][i]``
    (where the ``"_final_obs"`` mask is set) and ``obs[i]`` is already its next episode's first.
    ``final_obs`` is in the body only when an env ended.

    Raises:
        ValueError: an env ended but the infos hold no final observation for it: the env resets in the
            next step (gymnasium's default, NEXT_STEP), which the protocol does not describe.
    """
    terminated, truncated = [bool(value) for value in terminated], [bool(value) for value in truncated]
    n = len(terminated)
    body = {"obs": _rows(obs, n), "reward": [float(value) for value in reward], "terminated": terminated,
            "truncated": truncated}
    ended = [a or b for a, b in zip(terminated, truncated)]
    if any(ended):
        finals, mask = infos.get("final_obs"), infos.get("_final_obs")
        for i, end in enumerate(ended):
            if end and (finals is None or mask is None or not mask[i]):
                raise ValueError(f"env {i} ended but infos['final_obs'] has no observation for it: make the "
                                 "vector env with autoreset_mode=AutoresetMode.SAME_STEP (make_vector_env does)")
        assert finals is not None
        body["final_obs"] = [to_json(finals[i]) if end else None for i, end in enumerate(ended)]
    return body


def sb3_vec_env_step(obs: Any, rewards: Any, dones: Any, infos: list[dict[str, Any]]) -> dict[str, list]:
    """The body of a vector step made of what a stable-baselines3 ``VecEnv``'s ``step`` returned: an ended
    env's last observation is ``infos[i]["terminal_observation"]``, and its end a time limit (truncated)
    when ``infos[i]["TimeLimit.truncated"]``, terminated otherwise, as SB3 itself reads them. ``final_obs``
    is in the body only when an env ended.

    Raises:
        ValueError: an env ended without ``terminal_observation`` in its infos.
    """
    ended = [bool(done) for done in dones]
    n = len(ended)
    truncated = [end and bool(info.get("TimeLimit.truncated", False)) for end, info in zip(ended, infos)]
    body = {"obs": _rows(obs, n), "reward": [float(value) for value in rewards],
            "terminated": [end and not limit for end, limit in zip(ended, truncated)], "truncated": truncated}
    if any(ended):
        for i, end in enumerate(ended):
            if end and "terminal_observation" not in infos[i]:
                raise ValueError(f"env {i} is done but infos[{i}] has no 'terminal_observation'")
        body["final_obs"] = [to_json(info["terminal_observation"]) if end else None
                             for end, info in zip(ended, infos)]
    return body


def _actions(space: Any, actions: list) -> Any:
    """The server's actions, one per env, as the batch a vector env's ``step`` takes."""
    import numpy as np

    from shepherd.wire.spaces import action_from_json

    return np.array([action_from_json(space, action) for action in actions])


def run_vector_env(client: VectorClient, env: Any, seed: int | None = None, episodes: int | None = None,
                   mode: str = "train", retry_seconds: float = 60.0) -> list[list[float]]:
    """Drive a gymnasium vector env through a Shepherd agent as one vector session; returns each env's
    episode returns (``returns[i]``: env i's, in order).

    The env must reset ended envs in the same step: make it with `make_vector_env`. ``seed`` seeds the first
    reset, env i with ``seed + i`` (gymnasium's rule); ``episodes`` counts over every env, and the drive
    stops after the step in which they are reached (several envs may end in it). Sessions are kept as
    `run_env` keeps them: a lost one is logged in again and every env started over with a reset.

    Raises:
        ValueError: the env's ``num_envs`` is not the client's ``n_envs``, or it resets in the next step.
    """
    from gymnasium.vector import AutoresetMode

    if env.num_envs != client.n_envs:
        raise ValueError(f"the env has {env.num_envs} copies and the client logs in with {client.n_envs}")
    autoreset = env.metadata.get("autoreset_mode")
    if autoreset is not None and autoreset != AutoresetMode.SAME_STEP:
        raise ValueError(f"the vector env resets in mode {autoreset}; the protocol's vector steps reset in the "
                         "same step: make it with autoreset_mode=AutoresetMode.SAME_STEP (make_vector_env does)")
    space = env.single_action_space

    # whether the envs tell their valid actions (an action_masks() method, as sb3-contrib's ActionMasker
    # gives): asked once, without calling what may be missing (that kills an async env's workers)
    masked = all(env.call("has_wrapper_attr", "action_masks"))

    def masks() -> dict[str, list]:
        if not masked:
            return {}
        return {"action_mask": [[bool(valid) for valid in mask] for mask in env.call("action_masks")]}

    def reset(reset_seed: int | None) -> dict[str, list]:
        obs, _ = env.reset(seed=reset_seed)
        return {**first_vector_step(obs, env.num_envs), **masks()}

    def step(actions: list) -> dict[str, list]:
        return {**gymnasium_vector_step(*env.step(_actions(space, actions))), **masks()}

    return _drive(client, reset, step, seed, episodes, mode, retry_seconds)


def run_sb3_vec_env(client: VectorClient, venv: Any, seed: int | None = None, episodes: int | None = None,
                    mode: str = "train", retry_seconds: float = 60.0) -> list[list[float]]:
    """Drive a stable-baselines3 ``VecEnv`` (``DummyVecEnv``, ``SubprocVecEnv``, wrapped or not) through a
    Shepherd agent as one vector session; returns each env's episode returns. ``seed`` goes to
    ``venv.seed`` before the first reset (env i gets ``seed + i``); the rest is as `run_vector_env`.

    Raises:
        ValueError: the env's ``num_envs`` is not the client's ``n_envs``.
    """
    if venv.num_envs != client.n_envs:
        raise ValueError(f"the VecEnv has {venv.num_envs} envs and the client logs in with {client.n_envs}")
    space = venv.action_space

    masked = bool(venv.has_attr("action_masks"))  # as sb3-contrib's get_action_masks asks the VecEnv

    def masks() -> dict[str, list]:
        if not masked:
            return {}
        return {"action_mask": [[bool(valid) for valid in mask] for mask in venv.env_method("action_masks")]}

    def reset(reset_seed: int | None) -> dict[str, list]:
        if reset_seed is not None:
            venv.seed(reset_seed)
        return {**first_vector_step(venv.reset(), venv.num_envs), **masks()}

    def step(actions: list) -> dict[str, list]:
        return {**sb3_vec_env_step(*venv.step(_actions(space, actions))), **masks()}

    return _drive(client, reset, step, seed, episodes, mode, retry_seconds)


def _drive(client: VectorClient, reset: Callable[[int | None], dict[str, list]],
           step: Callable[[list], dict[str, list]], seed: int | None, episodes: int | None, mode: str,
           retry_seconds: float) -> list[list[float]]:
    """The loop of both vector drivers: ``reset(seed)`` resets every env and gives the first body,
    ``step(actions)`` steps them and gives the next. An episode's return counts once the server has
    answered the step that ended it, so the returns are the ones the server recorded."""
    n = client.n_envs
    returns: list[list[float]] = [[] for _ in range(n)]
    totals = [0.0] * n
    body: dict[str, list] | None = None
    first_reset = True
    while episodes is None or sum(map(len, returns)) < episodes:
        if client.session_key is None:
            _login(client, mode, retry_seconds)  # gives up, raising, after retry_seconds
            body = None
        if body is None:  # a new session: every env starts over
            body = reset(seed if first_reset else None)
            first_reset, totals = False, [0.0] * n
        try:
            actions = client.step(**body)
        except ShepherdError as error:
            if error.status != 401:
                raise
            logger.info("session lost (%s); logging in again", error.message)
            client.session_key = None
            continue
        except (OSError, http.client.HTTPException) as error:
            logger.info("connection lost (%s); logging in again", error)
            client.session_key = None
            continue
        for i, (reward, terminated, truncated) in enumerate(zip(body["reward"], body["terminated"],
                                                                 body["truncated"])):
            totals[i] += reward
            if terminated or truncated:
                returns[i].append(totals[i])
                totals[i] = 0.0
        body = step(actions)
    return returns


def _login(client: Client | VectorClient, mode: str, retry_seconds: float) -> None:
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
        description="Drive a gymnasium environment through a Shepherd agent, or with --n-envs several copies "
                    "of it, all stepped in one request (a vector session). The API key is read from the "
                    "SHEPHERD_API_KEY environment variable.",
        epilog="A server that cannot be reached at the start (nothing listens at the URL) ends the client at "
               "once; one that goes away later is retried for 60 s. Either way the client then exits 1 with "
               "one line on stderr, as it does when the server refuses it.")
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="server URL (default %(default)s)")
    parser.add_argument("--env", default="CartPole-v1", help="gymnasium env id (default %(default)s)")
    parser.add_argument("--episodes", type=int, default=None, metavar="N",
                        help="stop after N episodes, counted over every env with --n-envs (the step that "
                             "reaches N may end more) (default: never)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the env's first reset; with --n-envs, env i's is SEED + i")
    parser.add_argument("--mode", choices=("train", "evaluate"), default="train",
                        help="train: the agent learns; evaluate: greedy actions, never learned from")
    parser.add_argument("--env-kwargs", default="{}", help="JSON object of gymnasium.make keyword arguments")
    parser.add_argument("--n-envs", type=int, default=None, metavar="N",
                        help="run N copies of the env (a gymnasium vector env that resets an ended copy in "
                             "the same step) and send all N steps in one request (default: one env, one "
                             "step per request)")
    parser.add_argument("--client", metavar="NAME", default=None,
                        help="the client's name, which a login to an advised agent needs (its learner and model "
                             "are that name's; docs/advice.md)")
    parser.add_argument("--async", dest="asynchronous", action="store_true",
                        help="with --n-envs: run each copy in a subprocess (default: all in this process)")
    args = parser.parse_args(argv)
    if args.n_envs is not None and args.n_envs < 1:
        parser.error("--n-envs must be at least 1")
    if args.asynchronous and args.n_envs is None:
        parser.error("--async needs --n-envs")
    apikey = os.environ.get("SHEPHERD_API_KEY")
    if not apikey:
        parser.error("set SHEPHERD_API_KEY to the agent's API key")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s client %(message)s")
    env_kwargs = json.loads(args.env_kwargs)
    client = (Client(args.url, apikey, client=args.client) if args.n_envs is None else
              VectorClient(args.url, apikey, args.n_envs, client=args.client))
    vector_env = None
    try:
        if isinstance(client, Client):
            returns = run_env(client, args.env, args.seed, args.episodes, args.mode, env_kwargs)
        else:
            vector_env = make_vector_env(args.env, args.n_envs, args.asynchronous, env_kwargs)
            returns = [value for env_returns in run_vector_env(client, vector_env, args.seed, args.episodes,
                                                               args.mode) for value in env_returns]
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
        if vector_env is not None:
            vector_env.close()
    if returns:
        envs = f" over {args.n_envs} envs" if args.n_envs is not None else ""
        print(f"{len(returns)} episodes{envs}, mean return {sum(returns) / len(returns):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
