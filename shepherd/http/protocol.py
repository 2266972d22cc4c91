"""Parsing and checking the client protocol's bodies, once, at the edge, into typed values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from gymnasium import spaces

from shepherd.graph import StepInput
from shepherd.http.errors import BadRequest
from shepherd.spaces import SpaceError, check_observation

STEP_FIELDS = {"session_key", "obs", "reward", "done", "info", "truncated", "terminated", "seq"}
LOGIN_FIELDS = {"apikey", "mode"}


def parse_object(body: bytes, fields: set[str]) -> dict[str, Any]:
    """Raises BadRequest unless ``body`` is a JSON object whose keys are all in ``fields``."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise BadRequest(f"the body is not valid JSON ({error}); NaN and Infinity are not JSON") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = sorted(set(data) - fields)
    if unknown:
        raise BadRequest(f"unknown field(s) {unknown}; expected some of {sorted(fields)}")
    return data


@dataclass(frozen=True)
class Login:
    apikey: str
    evaluate_only: bool


def parse_login(body: bytes) -> Login:
    data = parse_object(body, LOGIN_FIELDS)
    apikey = data.get("apikey")
    if not isinstance(apikey, str) or not apikey:
        raise BadRequest("'apikey' (a string) is required")
    mode = data.get("mode", "train")
    if mode not in ("train", "evaluate"):
        raise BadRequest("'mode' must be 'train' or 'evaluate'")
    return Login(apikey, mode == "evaluate")


def _flag(data: dict[str, Any], name: str) -> bool | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise BadRequest(f"'{name}' must be true or false")


def session_key(data: dict[str, Any]) -> str:
    key = data.get("session_key")
    if not isinstance(key, str) or not key:
        raise BadRequest("'session_key' (a string, from login_user) is required")
    return key


def _seq(data: dict[str, Any]) -> int | None:
    seq = data.get("seq")
    if seq is None:
        return None
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2 ** 63:
        raise BadRequest("'seq' must be a non-negative integer")
    return seq


def parse_step(data: dict[str, Any], observation_space: spaces.Space) -> StepInput | None:
    """Check a step body (already parsed by `parse_object`) against the agent's observation space.

    Returns None for ``"obs": null``, which ends the session. A step without the ``obs`` key is refused:
    only an explicit null ends a session. ``reward`` is required with every observation: whether a step is
    its episode's first (whose reward is ignored) depends on the session's state and, for a retried step,
    on its ``seq``, which only the session knows, so the edge asks for it always (the original client
    sends 0.0 with a first observation).
    """
    if "obs" not in data:
        raise BadRequest("'obs' is required: the observation, or null to end the session")
    if data["obs"] is None:
        return None
    try:
        obs = check_observation(observation_space, data["obs"])
    except SpaceError as error:
        raise BadRequest(str(error)) from None
    if data.get("reward") is None:
        raise BadRequest("'reward' (a finite number) is required with every observation; send 0 with an "
                         "episode's first observation, whose reward is ignored")
    info = data.get("info", {})
    if info is None:
        info = {}
    if not isinstance(info, dict):
        raise BadRequest("'info' must be an object")
    done, terminated, truncated = _flag(data, "done"), _flag(data, "terminated"), _flag(data, "truncated")
    if info.get("TimeLimit.truncated") is True:
        truncated = True
    seq = _seq(data)
    try:
        return StepInput.of(obs, data["reward"], done, terminated, truncated, seq)
    except ValueError as error:
        raise BadRequest(str(error)) from None
