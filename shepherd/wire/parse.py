"""The client protocol's bodies (docs/protocol.md) parsed and checked once, at the edge, into the typed values of
`shepherd.wire.steps`: login, single-env and vector steps, a front end's greedy items."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from gymnasium import spaces

from shepherd.definition import check_client_name
from shepherd.wire.observations import check_observation, check_observation_rows
from shepherd.wire.spaces import SpaceError
from shepherd.wire.tensors import decode, plain
from shepherd.wire.steps import (DEFAULT_MAX_REWARD, BadRequest, GreedyStep, GreedyVectorStep, MaskCheck,
                                 StepInput, VectorStepInput)

#: the fields of a step of either kind; `parse_step` and `parse_vector_step` refuse the other kind's
STEP_FIELDS = {"session_key", "obs", "reward", "done", "info", "truncated", "terminated", "seq", "final_obs",
               "action_mask", "outcome", "envs"}  # outcome, envs: an environment's with roles (docs/protocol.md)
LOGIN_FIELDS = {"apikey", "mode", "n_envs", "client", "acting", "policy_in_reply"}
#: where a session's policy acts: at the server (steps, the default) or at the client (policy file, uploads)
ACTING = ("server", "client")


def parse_object(body: bytes, fields: set[str], json_length: int | None = None) -> dict[str, Any]:
    """Raises BadRequest unless ``body`` is a JSON object whose keys are all in ``fields``. With ``json_length``
    (the ``Inference-Header-Content-Length`` header) the JSON is the body's first bytes and binary tensors
    follow it (`shepherd.wire.tensors.decode`): the object then holds numpy arrays where they were."""
    if json_length is not None:
        data = decode(body, json_length)
    else:
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
    n_envs: int | None = None  # a vector session's envs; None: one env
    client: str | None = None  # an advised agent's client name (checked: letters, digits, . _ -)
    acting: str = "server"  # "client": the session fetches its policy and uploads experience (`ACTING`)
    policy_in_reply: bool = False  # a client-acting session's upload replies carry a new policy file (docs/acting.md)

    @property
    def acts_at_client(self) -> bool:
        return self.acting == "client"


def parse_login(body: bytes, json_length: int | None = None) -> Login:
    data = plain(parse_object(body, LOGIN_FIELDS, json_length))
    apikey = data.get("apikey")
    if not isinstance(apikey, str) or not apikey:
        raise BadRequest("'apikey' (a string) is required")
    mode = data.get("mode", "train")
    if mode not in ("train", "evaluate"):
        raise BadRequest("'mode' must be 'train' or 'evaluate'")
    n_envs = data.get("n_envs")
    if n_envs is not None and (isinstance(n_envs, bool) or not isinstance(n_envs, int) or n_envs < 1):
        raise BadRequest("'n_envs' must be a whole number of environments, at least 1")
    client = data.get("client")
    if client is not None:
        try:
            client = check_client_name(client)
        except ValueError as error:
            raise BadRequest(str(error)) from None
    acting = data.get("acting", "server")
    if acting not in ACTING:
        raise BadRequest("'acting' must be 'server' (send steps, the default) or 'client' (act with the policy "
                         "file of POST /shepherd/policy/ and upload experience to POST /shepherd/experience/)")
    in_reply = data.get("policy_in_reply", False)
    if not isinstance(in_reply, bool):
        raise BadRequest("'policy_in_reply' must be true or false")
    if in_reply and acting != "client":
        raise BadRequest("'policy_in_reply' is for sessions acting at the client (\"acting\": \"client\"), whose "
                         "upload replies can carry their next policy file")
    return Login(apikey, mode == "evaluate", n_envs, client, acting, in_reply)


def _json(value: Any) -> Any:
    """A binary body's array (`shepherd.wire.tensors`) in a field the checks take as JSON (rewards, flags) as
    the JSON value it stands for; anything else as it is."""
    return value.tolist() if isinstance(value, np.ndarray) else value


def _flag(data: dict[str, Any], name: str) -> bool | None:
    value = _json(data.get(name))
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


def sequence_number(data: dict[str, Any]) -> int | None:
    """A body's optional ``seq``. Raises BadRequest unless it is absent, null or a non-negative integer."""
    seq = _json(data.get("seq"))
    if seq is None:
        return None
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2 ** 63:
        raise BadRequest("'seq' must be a non-negative integer")
    return seq


def parse_step(data: dict[str, Any], observation_space: spaces.Space, mask_space: spaces.Space | None,
               check_mask: MaskCheck, max_reward: float = DEFAULT_MAX_REWARD) -> StepInput | None:
    """Check a step body (already parsed by `parse_object`) against the agent's observation space, its
    ``action_mask`` with ``check_mask`` against ``mask_space`` (the agent's action space; None: the agent
    takes no masks, and ``check_mask`` says so), and its reward against ``max_reward`` in magnitude.

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
    reward = _json(data.get("reward"))
    if isinstance(reward, list) or "final_obs" in data:
        raise BadRequest("this session drives one env: send one 'obs' and one 'reward' (log in with 'n_envs' "
                         "for vector steps)")
    try:
        obs = check_observation(observation_space, data["obs"])
    except SpaceError as error:
        raise BadRequest(str(error)) from None
    if reward is None:
        raise BadRequest("'reward' (a finite number) is required with every observation; send 0 with an "
                         "episode's first observation, whose reward is ignored")
    info = _json(data.get("info", {}))
    if info is None:
        info = {}
    if not isinstance(info, dict):
        raise BadRequest("'info' must be an object")
    done, terminated, truncated = _flag(data, "done"), _flag(data, "terminated"), _flag(data, "truncated")
    if done is False and (terminated or truncated):  # the episode went on silently: `done` won
        flag = "terminated" if terminated else "truncated"
        raise BadRequest(f"'done' is false but '{flag}' is true: send 'done' true for an episode that ended, or "
                         "leave 'done' out ('terminated' and 'truncated' say it)")
    if info.get("TimeLimit.truncated") is True:
        truncated = True
    seq = sequence_number(data)
    mask = None
    if data.get("action_mask") is not None:
        try:
            mask = check_mask(data["action_mask"], mask_space, "action_mask")
        except SpaceError as error:
            raise BadRequest(str(error)) from None
    try:
        return StepInput.of(obs, reward, done, terminated, truncated, seq, mask, max_reward)
    except ValueError as error:
        raise BadRequest(str(error)) from None


def _flags(data: dict[str, Any], name: str, n: int) -> list[bool]:
    values = _json(data.get(name))
    if not isinstance(values, list):
        raise BadRequest(f"'{name}' (a list of {n} booleans, one per env) is required in a vector step")
    if len(values) != n:
        raise BadRequest(f"'{name}' has {len(values)} items; this session drives {n} envs")
    for i, value in enumerate(values):
        if not (isinstance(value, bool) or (isinstance(value, int) and value in (0, 1))):
            raise BadRequest(f"{name}[{i}] must be true or false")
    return [bool(value) for value in values]


def _list_of(data: dict[str, Any], name: str, n: int, what: str) -> list[Any] | None:
    values = data.get(name)
    if values is None:
        return None
    if isinstance(values, np.ndarray):  # a binary body's: rewards as JSON, observations and masks row by row
        values = values.tolist() if name in ("reward", "info") or values.ndim == 0 else list(values)
    if not isinstance(values, list):
        raise BadRequest(f"'{name}' must be a list of {n} {what}, one per env")
    if len(values) != n:
        raise BadRequest(f"'{name}' has {len(values)} items; this session drives {n} envs")
    return values


def parse_vector_step(data: dict[str, Any], observation_space: spaces.Space, n_envs: int,
                      mask_space: spaces.Space | None, check_mask: MaskCheck,
                      max_reward: float = DEFAULT_MAX_REWARD) -> VectorStepInput | None:
    """Check a vector step body (already parsed by `parse_object`) of a session of ``n_envs`` envs; its
    ``action_mask`` (one mask per env) with ``check_mask`` against ``mask_space`` (None: the agent takes
    no masks).

    Returns None for ``"obs": null``, which ends the session. Everything is checked before anything is
    recorded: a body with one bad item is refused whole, and the error names the field and the index.
    """
    if "obs" not in data:
        raise BadRequest("'obs' is required: a list of every env's observation, or null to end the session")
    if data["obs"] is None:
        return None
    if "done" in data:
        raise BadRequest("a vector step has no 'done': send 'terminated' and 'truncated', one boolean per env")
    observations = data["obs"]
    if isinstance(observations, np.ndarray) and observations.ndim == 0:
        observations = observations.tolist()
    if not isinstance(observations, (list, np.ndarray)) or not isinstance(_json(data.get("reward")), list):
        raise BadRequest(f"this session drives {n_envs} envs: 'obs' and 'reward' must be lists with one item "
                         "per env")
    if len(observations) != n_envs:
        raise BadRequest(f"'obs' has {len(observations)} items; this session drives {n_envs} envs")
    rewards = _list_of(data, "reward", n_envs, "numbers")
    terminated, truncated = _flags(data, "terminated", n_envs), _flags(data, "truncated", n_envs)
    infos = _list_of(data, "info", n_envs, "objects")
    for i, info in enumerate(infos or ()):
        if info is None:
            continue
        if not isinstance(info, dict):
            raise BadRequest(f"info[{i}] must be an object")
        if info.get("TimeLimit.truncated") is True:
            truncated[i] = True
    finals = _list_of(data, "final_obs", n_envs, "observations (null where the env did not end)")
    masks = _list_of(data, "action_mask", n_envs, "action masks")
    try:
        checked_masks = None if masks is None else [check_mask(mask, mask_space, f"action_mask[{i}]")
                                                    for i, mask in enumerate(masks)]
        obs = check_observation_rows(observation_space, observations, "obs")
        final_obs = None if finals is None else [
            None if value is None else check_observation(observation_space, value, f"final_obs[{i}]")
            for i, value in enumerate(finals)]
        return VectorStepInput.of(obs.rows, rewards or [], terminated, truncated, final_obs, sequence_number(data),
                                  checked_masks, max_reward, obs.suspect)
    except (SpaceError, ValueError) as error:
        raise BadRequest(str(error)) from None



def parse_greedy_step(body: bytes) -> GreedyStep | GreedyVectorStep:
    """A front end's ``greedy`` item, of a single-env session or (with ``actions``) a vector session.
    Raises BadRequest (the front ends send only well-formed ones)."""
    data = parse_object(body, {"session_key", "fingerprint", "reward", "done", "truncated", "seq", "action",
                               "ended", "actions", "version"})
    try:
        version = data["version"]
        if isinstance(version, bool) or not isinstance(version, int):
            raise ValueError("version")
        if "actions" in data:
            rewards, ended, actions = data["reward"], data["ended"], data["actions"]
            if not (isinstance(rewards, list) and isinstance(ended, list) and isinstance(actions, list)
                    and len(rewards) == len(ended) == len(actions)):
                raise ValueError("reward, ended and actions (lists, one item per env)")
            return GreedyVectorStep(session_key(data), str(data["fingerprint"]), [_reward(r) for r in rewards],
                                    [bool(e) for e in ended], sequence_number(data), actions, version)
        return GreedyStep(session_key(data), str(data["fingerprint"]), _reward(data["reward"]), bool(data["done"]),
                          bool(data["truncated"]), sequence_number(data), data["action"], version)
    except (KeyError, ValueError) as error:
        raise BadRequest(f"a greedy item needs a valid {error}") from None


def _reward(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("reward")
    return float(value)
