"""Acting at the client (issue 35; the policy file: docs/export.md): `ActingClient` fetches the agent's behaviour policy as an
ONNX file, acts with it here with onnxruntime and numpy, and uploads what its envs did in blocks of ``steps``
steps; `run_acting_env` drives a gymnasium vector env (or an env id, or a stable-baselines3 ``VecEnv``) with it.

    client = ActingClient("http://127.0.0.1:8000", apikey, n_envs=8)
    returns = run_acting_env(client, "CartPole-v1", seed=0, steps=50_000)

This module imports numpy and onnxruntime; the rest of `shepherd.client` (the server-acting clients) needs
only the standard library, and ``shepherd.client`` imports this module only when its names are asked for.
"""

from __future__ import annotations

import http.client
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnxruntime as ort

from shepherd.client.connection import ShepherdError, _Connection, to_json
from shepherd.client.tensors import HEADER, decode_reply
from shepherd.client.loops import _rows, gymnasium_vector_step, make_vector_env, sb3_vec_env_step
from shepherd.client.relogin import login_retrying

logger = logging.getLogger(__name__)

POLICY_VERSION_HEADER = "Shepherd-Policy-Version"
#: onnxruntime's input types, as numpy's
_DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
           "tensor(int32)": np.int32, "tensor(bool)": np.bool_, "tensor(uint8)": np.uint8}


class StaleUpload(Exception):
    """The server refused an upload drawn with a version it cannot learn from (409); nothing of it was
    recorded. The client has fetched ``policy_version``, the current one, and acts with it from now on."""

    def __init__(self, policy_version: int, message: str) -> None:
        super().__init__(message)
        self.policy_version = policy_version


@dataclass
class Block:
    """The columns of one upload, row by row: ``obs`` (and ``action_mask``) has one row more than the rest,
    row 0 holding what the first samples were drawn from. Rows are JSON values already."""

    obs: list[list[Any]]
    action_mask: list[list[Any]] | None = None
    sample: list[list[Any]] = field(default_factory=list)
    reward: list[list[float]] = field(default_factory=list)
    terminated: list[list[bool]] = field(default_factory=list)
    truncated: list[list[bool]] = field(default_factory=list)
    final_obs: list[list[Any]] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.reward)

    def add(self, sample: Any, step: dict[str, list], mask: list | None) -> None:
        """One step of every env: the samples drawn for the last obs row, and what the envs answered (a body
        of `gymnasium_vector_step` or `sb3_vec_env_step`: the next obs row, rewards, ends, final obs)."""
        n = len(step["reward"])
        self.sample.append(to_json(sample))
        self.reward.append(step["reward"])
        self.terminated.append(step["terminated"])
        self.truncated.append(step["truncated"])
        self.final_obs.append(step.get("final_obs") or [None] * n)
        self.obs.append(step["obs"])
        if self.action_mask is not None and mask is not None:
            self.action_mask.append(mask)

    def columns(self) -> dict[str, Any]:
        """`body` as numpy columns, sent as binary tensors: ``obs`` (T+1, N, ...) float32 (a ``Dict`` space's rows as
        they are), ``sample``, ``reward`` float64, the flags and masks as booleans; ``final_obs`` item by item (float32,
        an image's integers as they are, as ``obs``'s)."""
        columns: dict[str, Any] = {
            "obs": self.obs if self.obs and isinstance(self.obs[0][0], dict) else _stacked(self.obs, np.float32),
            "sample": np.asarray(self.sample), "reward": np.asarray(self.reward, np.float64),
            "terminated": np.asarray(self.terminated, bool), "truncated": np.asarray(self.truncated, bool),
            "final_obs": [[None if last is None else last if isinstance(last, dict) else _stacked(last, np.float32)
                           for last in row] for row in self.final_obs]}  # an image's integers kept, as obs's
        if self.action_mask is not None:
            columns["action_mask"] = np.asarray(self.action_mask, bool)
        return columns

    def body(self) -> dict[str, Any]:
        columns = {"obs": self.obs, "sample": self.sample, "reward": self.reward, "terminated": self.terminated,
                   "truncated": self.truncated, "final_obs": self.final_obs}
        if self.action_mask is not None:
            columns["action_mask"] = self.action_mask
        return columns


class ActingClient(_Connection):
    """A client-acting session of ``n_envs`` envs (1: a single env): logs in with ``"acting": "client"``, holds
    the behaviour policy the server says to act with (``policy_version`` in ``phase``) and the steps of every
    env to collect before the next upload (``steps``). Not thread-safe.

    `act` draws the actions of a batch of observations with uniform noise from ``seed``; `upload` sends a
    block of ``steps`` rows with the next ``seq`` (sent again after 429, 503 or a lost connection, answered
    once). With ``policy_in_reply`` (the default) the login asks for the next policy file in the upload's reply
    when it changes (docs/acting.md): one round trip a block; without it, or when a reply has none, the policy
    is fetched again when the reply names another version or phase. ``binary`` as `Client`'s: None sends
    uploads as binary tensors when one observation holds more than 1,024 numbers.
    """

    def __init__(self, url: str, apikey: str, n_envs: int = 1, timeout: float = 120.0,
                 retry_seconds: float = 30.0, client: str | None = None, seed: int | None = None,
                 policy_in_reply: bool = True, binary: bool | None = None) -> None:
        if n_envs < 1:
            raise ValueError(f"n_envs must be at least 1, not {n_envs}")
        super().__init__(url, apikey, timeout, retry_seconds, client, binary)
        self.policy_in_reply = policy_in_reply
        self.n_envs = n_envs
        self.rng = np.random.default_rng(seed)
        self.phase: str | None = None  # of the block being collected
        self.steps = 0  # of every env, before the next upload
        self.session: ort.InferenceSession | None = None
        self.metadata: dict[str, Any] = {}  # the policy file's ``shepherd`` metadata
        self.held: tuple[int, str] | None = None  # the version and phase of the policy file held
        self.fetches = 0  # policy files received (304s not counted), fetched or in upload replies
        self.in_reply = 0  # of them, those that came in upload replies (no fetch)
        self._inputs: list[tuple[str, Any]] = []  # the file's inputs and their numpy types
        self._options = ort.SessionOptions()
        self._options.intra_op_num_threads = 1  # a small network: threads cost more than they give
        self._options.inter_op_num_threads = 1

    def login(self, mode: str = "train") -> dict[str, Any]:
        """Log in as a client-acting session and fetch the policy to act with; returns the server's reply
        (agent, spaces, ``policy_version``, ``phase``, ``steps``).

        Raises:
            ShepherdError: the server refused (400: the agent cannot act at the client, saying why).
        """
        body = {**self._login_body(mode), "acting": "client"}
        if self.policy_in_reply:
            body["policy_in_reply"] = True
        if self.n_envs > 1:
            body["n_envs"] = self.n_envs
        info = self._open(body)
        self._plan(info)
        self.held = None
        self.fetch_policy()
        return info

    @property
    def takes_masks(self) -> bool:
        return bool(self.info.get("action_masks"))

    def _plan(self, reply: dict[str, Any]) -> None:
        self.policy_version, self.phase, self.steps = reply["policy_version"], reply["phase"], reply["steps"]

    def fetch_policy(self) -> bool:
        """Fetch the policy file the session acts with now, naming the version held (a 304 keeps it);
        whether a new file came. Retried as steps are."""
        payload: dict[str, Any] = {"session_key": self.session_key}
        if self.held is not None:  # the version and phase of the file held: 304 when it is still the one
            payload["policy_version"] = self.held[0]  # (the phase: a reply lost on the way never brought its file)
            if self.held[1]:
                payload["phase"] = self.held[1]
        response, raw = self._retried(lambda: self.post_raw("/shepherd/policy/", payload))
        if response.status == 304:
            return False
        self._hold(raw, response.getheader(POLICY_VERSION_HEADER))
        return True

    def _hold(self, raw: bytes, version_text: Any) -> None:
        """Act with the policy file ``raw`` from now on (``version_text``: the version the server named)."""
        session = ort.InferenceSession(raw, self._options, providers=["CPUExecutionProvider"])
        self.metadata = json.loads(session.get_modelmeta().custom_metadata_map.get("shepherd", "{}"))
        self.session = session
        version = int(version_text or self.metadata.get("policy_version", 0))
        self.policy_version = version
        self.held = (version, self.metadata.get("phase", self.phase or ""))
        self.phase = self.held[1]
        self.fetches += 1
        self._inputs = [(item.name, _DTYPES.get(item.type, np.float32)) for item in session.get_inputs()]

    def act(self, obs: Any, action_mask: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """The actions for a batch of observations (an array with the envs first, or a dict of such arrays
        for a Dict space) and the samples to upload: the policy file's ``action`` and ``sample``."""
        assert self.session is not None, "log in first"
        n = self.n_envs
        feeds: dict[str, np.ndarray] = {}
        for name, dtype in self._inputs:
            if name == "noise":
                feeds[name] = self.rng.random((n, int(self.metadata.get("noise_size", 0))), dtype=np.float32)
            elif name == "action_mask":
                feeds[name] = (np.ones((n, int(self.metadata["mask_size"])), bool) if action_mask is None
                               else np.asarray(action_mask, dtype=bool))
            elif name == "obs":
                feeds[name] = np.asarray(obs, dtype=dtype)
            else:  # obs.<key> of a Dict space
                feeds[name] = np.asarray(obs[name[4:]], dtype=dtype)
        action, sample = self.session.run(["action", "sample"], feeds)
        return action, sample

    def upload(self, block: Block) -> dict[str, Any]:
        """Upload a block drawn with the version held; returns the reply (``policy_version``, ``phase``,
        ``steps``, ``accepted``) after fetching the policy again if its version or phase changed.

        Raises:
            StaleUpload: 409, the server cannot learn from the version held; the current one is fetched.
            ShepherdError: any other refusal (400 names the field and row; 401: the session is gone).
        """
        assert self.held is not None, "log in first"
        columns = block.columns() if self.binary else to_json(block.body())
        if self.binary and isinstance(columns["obs"], list):  # a Dict space's objects stay JSON: after the
            columns["obs"] = columns.pop("obs")  # tensors (last in the JSON), so the server's decoder stops before
        payload = {"session_key": self.session_key, "policy_version": self.held[0], **columns}
        self.seq += 1
        payload["seq"] = self.seq
        try:  # sent again as it was after 429, 503 or a lost connection (`_send_step`'s rule)
            response, raw = self._retried(lambda: self.post_raw("/shepherd/experience/", payload, True) if self.binary
                                          else self.post_raw("/shepherd/experience/", payload))
        except ShepherdError as error:
            if error.status != 409 or "policy_version" not in error.body:
                raise
            self.held = None  # fetch whatever is current (the version named, or newer)
            self.fetch_policy()
            raise StaleUpload(int(error.body["policy_version"]), error.message) from None
        length = response.getheader(HEADER)
        if length is None:
            reply, policy = json.loads(raw), None
        else:  # the next policy file came with the reply (policy_in_reply)
            reply, tensors = decode_reply(raw, int(length))
            policy = tensors.get("policy")
        self._plan(reply)
        self._note_configs(reply)  # the next block's episodes' configs, by env
        if policy is not None:
            self._hold(policy, reply["policy_version"])
            self.in_reply += 1
        if (reply["policy_version"], reply["phase"]) != self.held:
            self.fetch_policy()
        return reply


def _configure(env: Any, client: ActingClient) -> None:
    """Hand each env the config the server told for the episodes it starts in the next block (docs/lessons.md),
    applied at each of its resets by its `lesson_config` wrapper (`make_vector_env` wraps each copy)."""
    configs = client.next_episode_configs
    if not configs or all(config is None for config in configs):
        return
    sb3 = hasattr(env, "env_method")  # a stable-baselines3 VecEnv: its envs' wrappers reached as run_sb3_vec_env does
    wrapped = (all(env.env_method("has_wrapper_attr", "shepherd_next_config")) if sb3
               else all(env.call("has_wrapper_attr", "shepherd_next_config")))
    if not wrapped:
        raise ValueError("the agent has lessons: wrap each env with shepherd.client.lesson_config "
                         "(make_vector_env does) so that each reset applies its config")
    if sb3:
        for index, config in enumerate(configs):
            env.env_method("set_wrapper_attr", "shepherd_next_config", config, indices=[index])
    else:
        env.set_attr("shepherd_next_config", list(configs))


def _envs(env: Any, client: ActingClient, env_kwargs: dict | None, asynchronous: bool
          ) -> tuple[Any, bool, Callable[[int | None], Any], Callable[[Any], tuple[Any, dict[str, list]]],
                     Callable[[], list | None]]:
    """The env to drive (made from an id), whether it was made here, and its reset, step and masks: ``reset``
    gives the first observations (an array or dict), ``step(actions)`` the next ones and the body fields of
    the step (`gymnasium_vector_step` or `sb3_vec_env_step`), ``masks()`` every env's mask or None."""
    made = isinstance(env, str)
    if made:
        env = make_vector_env(env, client.n_envs, asynchronous, env_kwargs)
    if env.num_envs != client.n_envs:
        raise ValueError(f"the env has {env.num_envs} copies and the client logs in with {client.n_envs}")
    if hasattr(env, "env_method"):  # a stable-baselines3 VecEnv
        masked = bool(env.has_attr("action_masks"))

        def reset(seed: int | None) -> Any:
            if seed is not None:
                env.seed(seed)
            return env.reset()

        def step(actions: Any) -> tuple[Any, dict[str, list]]:
            obs, rewards, dones, infos = env.step(actions)
            return obs, sb3_vec_env_step(obs, rewards, dones, infos)

        def masks() -> list | None:
            return [[bool(v) for v in mask] for mask in env.env_method("action_masks")] if masked else None

        return env, made, reset, step, masks
    from gymnasium.vector import AutoresetMode

    autoreset = env.metadata.get("autoreset_mode")
    if autoreset is not None and autoreset != AutoresetMode.SAME_STEP:
        raise ValueError(f"the vector env resets in mode {autoreset}; uploads need the reset in the same step: "
                         "make it with autoreset_mode=AutoresetMode.SAME_STEP (make_vector_env does)")
    gym_masked = all(env.call("has_wrapper_attr", "action_masks"))

    def gym_reset(seed: int | None) -> Any:
        return env.reset(seed=seed)[0]

    def gym_step(actions: Any) -> tuple[Any, dict[str, list]]:
        result = env.step(actions)
        return result[0], gymnasium_vector_step(*result)

    def gym_masks() -> list | None:
        return [[bool(v) for v in mask] for mask in env.call("action_masks")] if gym_masked else None

    return env, made, gym_reset, gym_step, gym_masks


def run_acting_env(client: ActingClient, env: Any, seed: int | None = None, episodes: int | None = None,
                   steps: int | None = None, mode: str = "train", env_kwargs: dict | None = None,
                   asynchronous: bool = False, retry_seconds: float = 60.0) -> list[list[float]]:
    """Drive ``client.n_envs`` envs acting at the client: ``env`` is a gymnasium env id (a vector env of that
    many copies is made, with ``env_kwargs``, in subprocesses if ``asynchronous``), a gymnasium vector env
    that resets in the same step (`make_vector_env`), or a stable-baselines3 ``VecEnv``. Returns each env's
    episode returns, those the server recorded: an episode counts once the upload it ended in was accepted.

    Stops after the upload that reaches ``episodes`` (counted over every env) or ``steps`` (env steps
    uploaded and accepted, over every env); never without either. ``seed`` seeds the first reset (env i
    with ``seed + i``). A refused stale upload (409) is dropped: the client fetches the current policy and
    goes on from where its envs are, and the episodes that ran through the refused rows are not counted (the
    server does not record them). A lost session is logged in again and every env reset; a server that
    cannot be reached is retried for ``retry_seconds``, except at the first login. An agent with lessons tells
    the config of every episode each env starts in the next block: each env applies it at its resets (made
    from an id, the envs are wrapped for it; wrap a vector env's copies with `lesson_config`).

    Raises:
        ValueError: the env's ``num_envs`` is not the client's ``n_envs``, or it resets in the next step.
        ShepherdError: the server refused otherwise (an upload it finds wrong: 400).
    """
    venv, made, reset, step, masks = _envs(env, client, env_kwargs, asynchronous)
    n = client.n_envs
    returns: list[list[float]] = [[] for _ in range(n)]
    totals, lost = [0.0] * n, [False] * n  # lost: the env's episode ran through refused rows
    uploaded = 0
    first = True
    obs: Any = None
    try:
        while (episodes is None or sum(map(len, returns)) < episodes) and (steps is None or uploaded < steps):
            if client.session_key is None or obs is None:
                if client.session_key is None:
                    login_retrying(client, mode, retry_seconds)  # gives up, raising, after retry_seconds
                _configure(venv, client)  # the first block's episodes' configs, its first resets' included
                obs = reset(seed if first else None)  # a new session: every env starts over
                first, totals, lost = False, [0.0] * n, [False] * n
            mask = masks()
            block = Block([_rows(obs, n)], None if not client.takes_masks else [mask or _all_allowed(client)])
            for _ in range(client.steps):
                actions, sample = client.act(obs, mask)
                obs, fields = step(actions)
                mask = masks()
                block.add(sample, fields, mask or (_all_allowed(client) if client.takes_masks else None))
            try:
                client.upload(block)
            except StaleUpload as error:
                logger.info("upload refused as stale (%s); acting with version %d", error, client.policy_version)
                lost = [True] * n
                continue
            except ShepherdError as error:
                if error.status != 401:
                    raise
                logger.info("session lost (%s); logging in again", error.message)
                client.session_key, obs = None, None
                continue
            except (OSError, http.client.HTTPException) as error:
                logger.info("connection lost (%s); logging in again", error)
                client.session_key, obs = None, None
                continue
            _configure(venv, client)
            uploaded += block.steps * n
            for rewards, terminated, truncated in zip(block.reward, block.terminated, block.truncated):
                for i in range(n):
                    totals[i] += rewards[i]
                    if terminated[i] or truncated[i]:
                        if not lost[i]:
                            returns[i].append(totals[i])
                        totals[i], lost[i] = 0.0, False
    finally:
        if made:
            venv.close()
    return returns


def _stacked(rows: list[Any], dtype: Any) -> np.ndarray:
    """Rows of observations (JSON lists or arrays) as one array, float observations as ``dtype`` (images' integers
    kept as they are)."""
    array = np.asarray(rows)
    return array.astype(dtype) if array.dtype.kind == "f" or array.dtype == object else array


def _all_allowed(client: ActingClient) -> list[list[bool]]:
    """Masks allowing everything, for envs that tell no valid actions to an agent that takes masks."""
    return [[True] * int(client.metadata["mask_size"])] * client.n_envs
