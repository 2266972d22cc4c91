"""Loops that drive gymnasium envs (one, or a vector env) and stable-baselines3 ``VecEnv``s with a `Client` or
`VectorClient`, episode after episode, logging in again when a session is lost."""


from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from shepherd.client.connection import Client, VectorClient, to_json
from shepherd.client.relogin import Losses, SessionLost, login_retrying, requested
from shepherd.client.tensors import BINARY_NUMBERS, is_array

logger = logging.getLogger(__name__)

#: a function that sets an env up with an episode's config (docs/lessons.md), called before the env's reset
ApplyConfig = Callable[[Any, dict], None]


def apply_config(env: Any, config: dict, apply: ApplyConfig | None = None) -> None:
    """Set ``env`` up with an episode's config (docs/lessons.md): ``apply(env, config)`` if given, else every
    name set as an attribute of ``env.unwrapped`` (CartPole's ``length``, ``force_mag``, ...).

    Raises:
        ValueError: one line, for a name the env has no attribute of (without ``apply``).
    """
    if apply is not None:
        apply(env, config)
        return
    target = getattr(env, "unwrapped", env)
    for name, value in config.items():
        if not hasattr(target, name):
            raise ValueError(f"the lesson's config sets {name!r}, but {type(target).__name__} has no attribute "
                             f"{name!r}; pass apply_config=FUNCTION(env, config) to set it up yourself")
    for name, value in config.items():
        setattr(target, name, value)


def _config_wrapper() -> type:
    import gymnasium as gym

    class LessonConfig(gym.Wrapper):
        """Applies the config the server announced for this env's next episode at every reset, before the
        env's own reset (a vector env resets an ended env inside its step; `make_vector_env` wraps each copy)."""

        def __init__(self, env: Any, apply: ApplyConfig | None = None) -> None:
            super().__init__(env)
            self.shepherd_next_config: dict | None = None
            self.shepherd_apply = apply

        def reset(self, **kwargs: Any) -> Any:
            if self.shepherd_next_config is not None:
                apply_config(self.env, self.shepherd_next_config, self.shepherd_apply)
            return self.env.reset(**kwargs)

    return LessonConfig


def lesson_config(env: Any, apply: ApplyConfig | None = None) -> Any:
    """``env`` wrapped so that the config a vector session's reply announces for it is applied at its next reset
    (`make_vector_env` does this; wrap the envs of an SB3 ``VecEnv`` yourself, outermost or not)."""
    return _config_wrapper()(env, apply)


def run_env(client: Client, env_id: str, seed: int | None = None, episodes: int | None = None,
            mode: str = "train", env_kwargs: dict | None = None, retry_seconds: float = 60.0,
            apply: ApplyConfig | None = None) -> list[float]:
    """Drive a gymnasium env through a Shepherd agent; returns the episode returns. An agent with lessons
    announces each episode's config before it starts: it is applied before the env's reset (`apply_config`,
    with ``apply`` if given).

    A lost session (server restarted, session expired) is logged in again and the episode started
    over; a server that cannot be reached is retried for ``retry_seconds``, except at the very first
    login, where a refused connection (nothing listens there) or an unknown host is raised at once.
    """
    import gymnasium as gym

    from shepherd.wire.spaces import action_from_json

    env = gym.make(env_id, **(env_kwargs or {}))
    returns: list[float] = []
    first_reset, losses = True, Losses()
    while episodes is None or len(returns) < episodes:
        if client.session_key is None:
            login_retrying(client, mode, retry_seconds)  # gives up, raising, after retry_seconds
        try:
            if client.next_episode_config is not None:
                apply_config(env, client.next_episode_config, apply)
            obs, _ = env.reset(seed=seed if first_reset else None)
            first_reset = False
            mask = env_action_mask(env)
            action, total = requested(lambda: client.step(obs, 0.0, False, action_mask=mask)), 0.0
            while action is not None:
                obs, reward, terminated, truncated, _ = env.step(action_from_json(env.action_space, action))
                total += float(reward)
                done, mask = terminated or truncated, None if terminated else env_action_mask(env)  # a time limit's too
                action = requested(lambda: client.step(obs, float(reward), done, truncated=truncated and not terminated,
                                                       action_mask=mask))
            returns.append(total)
            losses.ended()
        except SessionLost as error:
            client.session_key = None
            losses.lost(error)
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


def make_vector_env(env_id: str, n_envs: int, asynchronous: bool = False, env_kwargs: dict | None = None,
                    apply: ApplyConfig | None = None) -> Any:
    """A gymnasium vector env of ``n_envs`` copies of ``env_id`` that resets an ended env in the same step
    (``AutoresetMode.SAME_STEP``), as the protocol's vector steps and SB3's ``VecEnv`` do; gymnasium's
    default, NEXT_STEP, would report the reset one step later. ``asynchronous`` runs each copy in a
    subprocess. Each copy applies the config announced for its next episode at its reset (`lesson_config`,
    with ``apply`` if given)."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    wrapper = _config_wrapper()
    return gym.make_vec(env_id, num_envs=n_envs, vectorization_mode="async" if asynchronous else "sync",
                        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
                        wrappers=[functools.partial(wrapper, apply=apply)], **(env_kwargs or {}))


def _announce(client: VectorClient, set_config: Callable[[int, dict], None], told: list[Any]) -> None:
    """Hand each env the config announced for its next reset, if it changed since the last hand-over."""
    for index, config in enumerate(client.next_episode_configs or []):
        if config is not None and config is not told[index]:
            set_config(index, config)
            told[index] = config


def _rows(batch: Any, n: int) -> list:
    """A batch of ``n`` observations (an array with the envs on its first axis, or a dict of such arrays,
    as gymnasium's vector envs and SB3's ``VecEnv``s give them) as a list of ``n`` JSON observations."""
    if isinstance(batch, dict):
        columns = {key: _rows(value, n) for key, value in batch.items()}
        return [{key: column[i] for key, column in columns.items()} for i in range(n)]
    rows = _observation(batch, n)  # one tolist() for the whole batch: the cheapest way to JSON values
    if not (isinstance(rows, list) or is_array(rows)) or len(rows) != n:
        raise ValueError(f"expected a batch of {n} observations, got {type(batch).__name__} "
                         f"{getattr(batch, 'shape', '')}")
    return rows


def _observation(value: Any, n: int = 1) -> Any:
    """An observation (or a batch of ``n``) as JSON values, or kept as the numpy array it is when one observation
    holds more than `BINARY_NUMBERS` numbers: a client sends those as binary tensors (and converts them to JSON
    itself when it does not)."""
    if is_array(value) and value.size > BINARY_NUMBERS * n:
        return value
    return to_json(value)


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
        body["final_obs"] = [_observation(finals[i]) if end else None for i, end in enumerate(ended)]
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
        body["final_obs"] = [_observation(info["terminal_observation"]) if end else None
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

    told: list[Any] = [None] * env.num_envs

    def set_config(index: int, config: dict) -> None:
        if not all(env.call("has_wrapper_attr", "shepherd_next_config")):
            raise ValueError("the agent has lessons: wrap each env with shepherd.client.lesson_config "
                             "(make_vector_env does) so that each reset applies its config")
        env.set_attr("shepherd_next_config", [config if i == index else told[i] for i in range(env.num_envs)])

    def reset(reset_seed: int | None) -> dict[str, list]:
        told[:] = [None] * env.num_envs
        _announce(client, set_config, told)
        obs, _ = env.reset(seed=reset_seed)
        return {**first_vector_step(obs, env.num_envs), **masks()}

    def step(actions: list) -> dict[str, list]:
        _announce(client, set_config, told)
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

    told: list[Any] = [None] * venv.num_envs

    def set_config(index: int, config: dict) -> None:
        if not venv.env_method("has_wrapper_attr", "shepherd_next_config", indices=[index])[0]:
            raise ValueError("the agent has lessons: wrap each env of the VecEnv with shepherd.client.lesson_config "
                             "so that each reset applies its config")
        venv.env_method("set_wrapper_attr", "shepherd_next_config", config, indices=[index])

    def reset(reset_seed: int | None) -> dict[str, list]:
        if reset_seed is not None:
            venv.seed(reset_seed)
        told[:] = [None] * venv.num_envs
        _announce(client, set_config, told)
        return {**first_vector_step(venv.reset(), venv.num_envs), **masks()}

    def step(actions: list) -> dict[str, list]:
        _announce(client, set_config, told)
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
    first_reset, losses = True, Losses()
    while episodes is None or sum(map(len, returns)) < episodes:
        if client.session_key is None:
            login_retrying(client, mode, retry_seconds)  # gives up, raising, after retry_seconds
            body = None
        if body is None:  # a new session: every env starts over
            body = reset(seed if first_reset else None)
            first_reset, totals = False, [0.0] * n
        sent = body
        try:
            actions = requested(lambda: client.step(**sent))
        except SessionLost as error:
            client.session_key = None
            losses.lost(error, "every env's episode starts over")
            continue
        for i, (reward, terminated, truncated) in enumerate(zip(body["reward"], body["terminated"],
                                                                 body["truncated"])):
            totals[i] += reward
            if terminated or truncated:
                returns[i].append(totals[i])
                totals[i] = 0.0
                losses.ended()
        body = step(actions)
    return returns
