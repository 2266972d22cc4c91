"""The client protocol's bodies (docs/protocol.md) parsed and checked once, at the edge, into typed values.

Free of torch and the learning code, so that both servers use it: the learning server (``http/protocol.py``
adds the agents' mask rule) and the deploy server (``deploy/``), which must never import torch.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import orjson
from gymnasium import spaces

from shepherd.definition import check_client_name
from shepherd.spaces import SpaceError, check_observation, check_observations

#: checks a client's action mask: (value, the agent's action space or None when it takes none, where) ->
#: the flat boolean mask; raises SpaceError
MaskCheck = Callable[[Any, Any, str], np.ndarray]


class BadRequest(ValueError):
    """The body is malformed or does not fit the agent's spaces."""


@dataclass(frozen=True)
class EnvSteps:
    """The N envs' parts of one vector step, as columns (one item per env): ``obs[i]`` after env i's last
    action (the next episode's first when it ended), ``reward[i]`` for that action, and, when its episode
    ended (``ended[i]``), ``final_obs[i]`` and whether the end was a time limit (``truncated[i]``:
    bootstrapped) rather than terminal. ``masks[i]`` is env i's action mask for ``obs[i]`` (``masks`` None:
    no env sent one)."""

    obs: list[Any]
    reward: list[float]
    ended: list[bool]
    truncated: list[bool]
    final_obs: list[Any]
    masks: list[Any] | None = None


@dataclass(frozen=True)
class StepInput:
    """One checked step of the protocol; ``seq`` is the client's optional sequence number, ``mask`` its
    checked action mask for ``obs`` (None: every action allowed)."""

    obs: Any
    reward: float
    done: bool
    truncated: bool = False  # a time limit: the learner bootstraps instead of treating the end as terminal
    seq: int | None = None
    mask: Any = None

    @classmethod
    def of(cls, obs: Any, reward: Any, done: bool | None = None, terminated: bool | None = None,
           truncated: bool | None = None, seq: int | None = None, mask: Any = None) -> StepInput:
        """A step from a checked observation and gymnasium's flags: ``done`` defaults to terminated or
        truncated, and the end is a time limit only when truncated and not also terminated.

        Raises:
            ValueError: the reward is not a finite number.
        """
        if isinstance(reward, bool) or not isinstance(reward, numbers.Real) or not math.isfinite(reward):
            raise ValueError("'reward' must be a finite number")
        if done is None:
            done = bool(terminated) or bool(truncated)
        return cls(obs, float(reward), bool(done), bool(done and truncated and not terminated), seq, mask)


@dataclass(frozen=True)
class VectorStepInput:
    """One checked step of a vector session, as columns with one item per env (`EnvSteps`)."""

    envs: EnvSteps
    seq: int | None = None

    @classmethod
    def of(cls, obs: Sequence[Any], reward: Sequence[Any], terminated: Sequence[bool], truncated: Sequence[bool],
           final_obs: Sequence[Any] | None = None, seq: int | None = None,
           masks: Sequence[Any] | None = None) -> VectorStepInput:
        """A vector step from checked observations and gymnasium's flags, with SB3 ``VecEnv``'s automatic
        reset: env i's end is a time limit only when truncated and not also terminated.

        Raises:
            ValueError: the lists differ in length, a reward is not a finite number, or an env that ended
                has no final observation (the message names the index).
        """
        n = len(obs)
        for name, values in (("reward", reward), ("terminated", terminated), ("truncated", truncated)):
            if len(values) != n:
                raise ValueError(f"'{name}' has {len(values)} items and 'obs' {n}: one per env")
        if masks is not None and len(masks) != n:
            raise ValueError(f"'action_mask' has {len(masks)} items and 'obs' {n}: one mask per env")
        if final_obs is not None and len(final_obs) != n:
            raise ValueError(f"'final_obs' has {len(final_obs)} items and 'obs' {n}: one per env (null where "
                             "the env did not end)")
        for i, value in enumerate(reward):
            if type(value) is not float and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
                raise ValueError(f"reward[{i}] must be a finite number")
        if not all(math.isfinite(value) for value in reward):
            raise ValueError(f"reward[{next(i for i, v in enumerate(reward) if not math.isfinite(v))}] must be "
                             "a finite number")
        ended = [bool(a) or bool(b) for a, b in zip(terminated, truncated)]
        finals = list(final_obs) if final_obs is not None else [None] * n
        for i, (end, last) in enumerate(zip(ended, finals)):
            if end and last is None:
                raise ValueError(f"env {i} ended (terminated or truncated) but final_obs[{i}] is missing: send "
                                 "its last observation there, and the next episode's first in obs")
            if not end and last is not None:
                raise ValueError(f"final_obs[{i}] is given but env {i} did not end; send null there")
        limits = [bool(b) and not a for a, b in zip(terminated, truncated)]
        return cls(EnvSteps(list(obs), [float(value) for value in reward], ended, limits, finals,
                            None if masks is None else list(masks)), seq)


@dataclass(frozen=True)
class GreedyStep:
    """A step of an evaluate-mode session that a front end answered from its snapshot of the session's
    greedy policy (``run.py --front-ends K``, docs/front-ends.md): what the head records of it.

    ``fingerprint`` stands for the step's content (`fingerprint`: a retry must repeat it), ``action`` is the
    JSON action the front end chose (None when the episode ended) and ``version`` the policy version that
    chose it.
    """

    session_key: str
    fingerprint: str
    reward: float
    done: bool
    truncated: bool = False
    seq: int | None = None
    action: Any = None
    version: int = 0

    def to_json(self) -> bytes:
        """The body of a front end's ``greedy`` item (`parse_greedy_step` reads it)."""
        return orjson.dumps({"session_key": self.session_key, "fingerprint": self.fingerprint,
                             "reward": self.reward, "done": self.done, "truncated": self.truncated, "seq": self.seq,
                             "action": self.action, "version": self.version})


@dataclass(frozen=True)
class GreedyVectorStep:
    """`GreedyStep` of a vector session: every env's reward, whether its episode ended, and the JSON
    actions the front end chose (one per env, in env order)."""

    session_key: str
    fingerprint: str
    reward: list[float]
    ended: list[bool]
    seq: int | None = None
    actions: list[Any] = field(default_factory=list)
    version: int = 0

    def to_json(self) -> bytes:
        """The body of a front end's ``greedy`` item of a vector session (`parse_greedy_step` reads it)."""
        return orjson.dumps({"session_key": self.session_key, "fingerprint": self.fingerprint,
                             "reward": self.reward, "ended": self.ended, "seq": self.seq, "actions": self.actions,
                             "version": self.version})


def greedy_vector_step(session_key: str, step: VectorStepInput, actions: list[Any], version: int) -> GreedyVectorStep:
    """What a front end sends the head of a vector step it answered with ``actions`` (JSON, one per env)."""
    envs = step.envs
    return GreedyVectorStep(session_key, "" if step.seq is None else vector_fingerprint(step), envs.reward,
                            envs.ended, step.seq, actions, version)


def greedy_step(session_key: str, step: StepInput, action: Any, version: int) -> GreedyStep:
    """What a front end sends the head of a step it answered with ``action`` (JSON; None: the episode ended).
    A step without ``seq`` is never matched as a retry: it carries no digest."""
    return GreedyStep(session_key, "" if step.seq is None else fingerprint(step), step.reward, step.done,
                      step.truncated, step.seq, action, version)


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
                                    [bool(e) for e in ended], _seq(data), actions, version)
        return GreedyStep(session_key(data), str(data["fingerprint"]), _reward(data["reward"]), bool(data["done"]),
                          bool(data["truncated"]), _seq(data), data["action"], version)
    except (KeyError, ValueError) as error:
        raise BadRequest(f"a greedy item needs a valid {error}") from None


def _reward(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("reward")
    return float(value)


def fingerprint(step: StepInput) -> str:
    """A digest of a checked step's content (observation, reward, flags, mask): two steps with the same
    digest are the same step, whichever process parsed them (a retry is checked against it)."""
    digest = hashlib.blake2b(digest_size=16)
    _digest_observation(digest, step.obs)
    digest.update(f"|{step.reward!r}|{step.done}|{step.truncated}|".encode())
    if step.mask is not None:
        digest.update(np.asarray(step.mask, dtype=bool).tobytes())
    return digest.hexdigest()


def vector_fingerprint(step: VectorStepInput) -> str:
    """`fingerprint` of a checked vector step: every env's observation, final observation, mask, reward
    and flags."""
    digest = hashlib.blake2b(digest_size=16)
    envs = step.envs
    for index, obs in enumerate(envs.obs):
        digest.update(f"env {index}|".encode())
        _digest_observation(digest, obs)
        if envs.final_obs[index] is not None:
            digest.update(b"|final|")
            _digest_observation(digest, envs.final_obs[index])
        if envs.masks is not None and envs.masks[index] is not None:
            digest.update(b"|mask|" + np.asarray(envs.masks[index], dtype=bool).tobytes())
    digest.update(f"|{envs.reward!r}|{envs.ended}|{envs.truncated}|".encode())
    return digest.hexdigest()


def _digest_observation(digest: Any, obs: Any) -> None:
    for key in sorted(obs) if isinstance(obs, dict) else [None]:
        array = np.asarray(obs if key is None else obs[key])
        digest.update(f"{key}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(np.ascontiguousarray(array).tobytes())


#: the fields of a step of either kind; `parse_step` and `parse_vector_step` refuse the other kind's
STEP_FIELDS = {"session_key", "obs", "reward", "done", "info", "truncated", "terminated", "seq", "final_obs",
               "action_mask"}
LOGIN_FIELDS = {"apikey", "mode", "n_envs", "client"}


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
    n_envs: int | None = None  # a vector session's envs; None: one env
    client: str | None = None  # an advised agent's client name (checked: letters, digits, . _ -)


def parse_login(body: bytes) -> Login:
    data = parse_object(body, LOGIN_FIELDS)
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
    return Login(apikey, mode == "evaluate", n_envs, client)


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


def parse_step(data: dict[str, Any], observation_space: spaces.Space, mask_space: spaces.Space | None,
               check_mask: MaskCheck) -> StepInput | None:
    """Check a step body (already parsed by `parse_object`) against the agent's observation space, and its
    ``action_mask`` with ``check_mask`` against ``mask_space`` (the agent's action space; None: the agent
    takes no masks, and ``check_mask`` says so).

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
    if isinstance(data.get("reward"), list) or "final_obs" in data:
        raise BadRequest("this session drives one env: send one 'obs' and one 'reward' (log in with 'n_envs' "
                         "for vector steps)")
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
    mask = None
    if data.get("action_mask") is not None:
        try:
            mask = check_mask(data["action_mask"], mask_space, "action_mask")
        except SpaceError as error:
            raise BadRequest(str(error)) from None
    try:
        return StepInput.of(obs, data["reward"], done, terminated, truncated, seq, mask)
    except ValueError as error:
        raise BadRequest(str(error)) from None


def _flags(data: dict[str, Any], name: str, n: int) -> list[bool]:
    values = data.get(name)
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
    if not isinstance(values, list):
        raise BadRequest(f"'{name}' must be a list of {n} {what}, one per env")
    if len(values) != n:
        raise BadRequest(f"'{name}' has {len(values)} items; this session drives {n} envs")
    return values


def parse_vector_step(data: dict[str, Any], observation_space: spaces.Space, n_envs: int,
                      mask_space: spaces.Space | None, check_mask: MaskCheck) -> VectorStepInput | None:
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
    if not isinstance(observations, list) or not isinstance(data.get("reward"), list):
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
        obs = check_observations(observation_space, observations, "obs")
        final_obs = None if finals is None else [
            None if value is None else check_observation(observation_space, value, f"final_obs[{i}]")
            for i, value in enumerate(finals)]
        return VectorStepInput.of(obs, rewards or [], terminated, truncated, final_obs, _seq(data), checked_masks)
    except (SpaceError, ValueError) as error:
        raise BadRequest(str(error)) from None
