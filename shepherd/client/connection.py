"""The client's HTTP side, standard library only: `Client` (one env) and `VectorClient` (N envs in one request),
with logins, ``seq`` retries of steps after a lost connection, 429 or 503, and `ShepherdError` for refusals."""


from __future__ import annotations

import http.client
import json
import logging
import time
from typing import Any, Callable, TypeVar
from urllib.parse import urlsplit

from shepherd.client.tensors import BINARY_NUMBERS, HEADER, encode, is_array, observation_numbers

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ShepherdError(Exception):
    """The server answered with an error status; ``status``, the server's message and its whole reply
    (``body``: a 409 to an upload names the current ``policy_version`` there) are kept."""

    def __init__(self, status: int, message: str, retry_after: float | None = None,
                 body: dict[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after
        self.body = body or {}


def to_json(value: Any) -> Any:
    """numpy arrays and scalars (anything with ``tolist``), nested in dicts or lists, to plain JSON."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    return value


def binary_for(observation_space: Any, asked: bool | None = None) -> bool:
    """Whether a session sends binary tensors: as ``asked``, or (None) when one observation of its space (the login
    reply's spec) holds more than `BINARY_NUMBERS` numbers."""
    if asked is not None:
        return asked
    return observation_space is not None and observation_numbers(observation_space) > BINARY_NUMBERS


def _float32(value: Any) -> Any:
    """numpy arrays of float64 as float32 (nested in dicts and lists); anything else as it is."""
    if is_array(value):
        return value.astype("<f4") if value.dtype.kind == "f" and value.dtype.itemsize == 8 else value
    if isinstance(value, dict):
        return {key: _float32(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(is_array(item) for item in value) and len({item.shape for item in value}) == 1:
            import numpy as np  # arrays came: numpy is there

            return _float32(np.stack(value))  # one tensor for the rows (a vector step's envs)
        return [_float32(item) for item in value]
    return value


class _Connection:
    """What both clients share: a keep-alive HTTP connection to the server, the session key, and the retries
    of a step. Not thread-safe."""

    def __init__(self, url: str, apikey: str, timeout: float = 120.0, retry_seconds: float = 30.0,
                 client: str | None = None, binary: bool | None = None) -> None:
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
        #: whether steps and uploads go as binary tensors (docs/protocol.md, "Binary tensors"); None: decided at
        #: login, true when one observation holds more than BINARY_NUMBERS numbers (`binary_for`)
        self.binary_asked = binary
        self.binary = bool(binary)
        self._connection: http.client.HTTPConnection | None = None
        self.retry_seconds = retry_seconds
        self.session_key: str | None = None
        self.seq = 0
        self.info: dict[str, Any] = {}
        self.policy_version: int | None = None  # of the last action received (None: none yet)
        self.reached = False  # whether the server ever answered: a server never reached is not retried
        # lessons (docs/lessons.md): what the server said about episodes' configs (None: nothing, no lessons)
        self.next_episode_config: dict[str, Any] | None = None  # a single-env session's next episode's
        self.episode_config: dict[str, Any] | None = None  # the config of the episode that started last
        self.lesson: str | None = None  # its lesson
        self.next_episode_configs: list[dict[str, Any] | None] | None = None  # a vector session's, per env
        self.episode_configs: list[dict[str, Any] | None] | None = None  # the episodes that started last step

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

    def post(self, path: str, payload: dict[str, Any], binary: bool = False) -> dict[str, Any]:
        """POST a JSON object (``binary``: its arrays as binary tensors); returns the reply object or raises
        ShepherdError / OSError."""
        _, raw = self.post_raw(path, payload, True) if binary else self.post_raw(path, payload)
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {"error": raw[:200].decode(errors="replace")}

    def post_raw(self, path: str, payload: dict[str, Any], binary: bool = False
                 ) -> tuple[http.client.HTTPResponse, bytes]:
        """POST a JSON object (``binary``: every numpy array in it as a binary tensor after the JSON); returns the
        response (status and headers, read) and its body's bytes, or raises ShepherdError (a status of 400 or
        more) / OSError."""
        if binary:
            body, length = encode(payload)
            headers = {"Content-Type": "application/octet-stream", HEADER: str(length)}
        else:
            body = json.dumps(payload, allow_nan=False).encode()
            headers = {"Content-Type": "application/json"}
        connection = self._connect()
        try:
            connection.request("POST", f"{self._prefix}{path}", body, headers)
            response = connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        self.reached = True
        if response.status >= 400:
            try:
                data = json.loads(raw) if raw else {}
            except ValueError:
                data = {"error": raw[:200].decode(errors="replace")}
            retry = response.getheader("Retry-After")
            raise ShepherdError(response.status, data.get("error", response.reason),
                                float(retry) if retry else None, data if isinstance(data, dict) else None)
        return response, raw

    def _open(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Log in with ``payload``; keeps the reply and the session key, and starts ``seq`` again."""
        self.info = self.post("/shepherd/login_user/", payload)
        self.session_key = self.info["session_key"]
        self.binary = binary_for(self.info.get("observation_space"), self.binary_asked)
        self.seq = 0
        self.next_episode_config = self.info.get("next_episode_config")
        self.next_episode_configs = configs_of(self.info, "next_episode_configs")
        return self.info

    def _note_configs(self, reply: dict[str, Any]) -> None:
        """Keep the configs a vector or client-acting reply told for each env's next episodes (null where
        unchanged: each env keeps the config it was told last)."""
        announced = configs_of(reply, "next_episode_configs")
        if announced is not None:
            known = self.next_episode_configs or [None] * len(announced)
            self.next_episode_configs = [new if new is not None else old for new, old in zip(announced, known)]

    def _send_step(self, payload: dict[str, Any], path: str = "/shepherd/env/") -> dict[str, Any]:
        """POST a step (or another request with a ``seq``: an upload to ``path``) with the next sequence
        number, sending it again after 429, 503 or a lost connection for up to ``retry_seconds``: the
        server answers a retried ``seq`` as it did the first time and counts the step once."""
        self.seq += 1
        payload["seq"] = self.seq
        if self.binary:
            return self._retried(lambda: self.post(path, payload, True))
        return self._retried(lambda: self.post(path, payload))

    def _observations(self, value: Any) -> Any:
        """Observations as the body carries them: JSON values, or, in binary mode, numpy arrays as they are (float64
        as float32, which the server converts them to anyway: the same numbers, half the bytes)."""
        if not self.binary:
            return to_json(value)
        return _float32(value)

    def _retried(self, send: Callable[[], T]) -> T:
        """``send()``, called again after 429, 503 (waiting as Retry-After says, at most 5 s) or a lost
        connection (0.2 s) until it succeeds or ``retry_seconds`` have passed. The time the server held a request
        before it answered 503 does not count: that is its act timeout (``--act-timeout``, 30 s by default), the
        step still in flight there (a long update), and its retry gets the action; a server that refuses at once
        (an agent not available) uses up the budget."""
        deadline = time.monotonic() + self.retry_seconds
        while True:
            sent = time.monotonic()
            try:
                return send()
            except ShepherdError as error:
                now = time.monotonic()
                if error.status == 503:
                    deadline += now - sent
                if error.status not in (429, 503) or now > deadline:
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
        payload = {"session_key": self.session_key, "obs": self._observations(obs), "reward": float(reward),
                   "done": bool(done), "info": to_json(info or {})}
        if truncated:
            payload["truncated"] = True
        if action_mask is not None:
            payload["action_mask"] = to_json(action_mask)
        reply = self._send_step(payload)
        if reply.get("action") is not None:  # an episode's end is answered without one
            self.policy_version = reply.get("policy_version")
        if "next_episode_config" in reply:  # the reply that ended an episode: reset the env with it
            self.next_episode_config = reply["next_episode_config"]
        if "episode_config" in reply:  # the reply to an episode's first step
            self.episode_config, self.lesson = reply["episode_config"], reply.get("lesson")
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
                 retry_seconds: float = 30.0, client: str | None = None, binary: bool | None = None) -> None:
        if n_envs < 1:
            raise ValueError(f"n_envs must be at least 1, not {n_envs}")
        super().__init__(url, apikey, timeout, retry_seconds, client, binary)
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
        payload: dict[str, Any] = {"session_key": self.session_key, "obs": self._observations(obs),
                                   "reward": to_json(reward), "terminated": to_json(terminated),
                                   "truncated": to_json(truncated)}
        if final_obs is not None:
            payload["final_obs"] = [None if last is None else self._observations(last) for last in final_obs]
        if info is not None:
            payload["info"] = to_json(info)
        if action_mask is not None:
            payload["action_mask"] = to_json(action_mask)
        reply = self._send_step(payload)
        self.policy_version = reply.get("policy_version")
        self._note_configs(reply)
        self.episode_configs = configs_of(reply, "episode_configs")
        return reply["actions"]


def configs_of(reply: dict[str, Any], name: str) -> list[dict[str, Any] | None] | None:
    """Each env's config of a reply's ``name`` list (docs/lessons.md): its entries index the reply's
    ``"configs"``, which holds each distinct config once (null: nothing for that env); None: no such list."""
    refs = reply.get(name)
    if not isinstance(refs, list):
        return None
    table = reply.get("configs") or []
    return [None if ref is None else table[ref] for ref in refs]
