"""The algorithms Shepherd serves, their typed parameters (read from SB3's signatures), and model building.

Parameter types follow the original Shepherd: 1 integer, 2 float, 3 boolean, 4 string; 5 is a JSON
object (``policy_kwargs``). Float parameters that SB3 also accepts as a schedule take ``"lin_<start>"``
(linear from ``start`` to 0 over the training budget), as RL Zoo writes them.
"""

from __future__ import annotations

import collections.abc
import enum
import inspect
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable

import torch as th
from gymnasium import spaces
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import DummyVecEnv

from shepherd.agents.base import PooledLearner, SpacesEnv
from shepherd.agents.off_policy import DQNLearner
from shepherd.agents.on_policy import OnPolicyLearner


class ParameterError(ValueError):
    """A parameter name is unknown for its algorithm, or its value has the wrong type."""


class ParamType(enum.IntEnum):
    INT = 1
    FLOAT = 2
    BOOL = 3
    STR = 4
    JSON = 5


@dataclass(frozen=True)
class Parameter:
    """One hyperparameter of an algorithm: name, type, default and whether it may be None or a schedule."""

    algorithm: str
    name: str
    type: ParamType
    default: Any
    nullable: bool = False
    schedule: bool = False
    doc: str = ""

    def record(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "name": self.name, "type": int(self.type),
                "default": self.default, "nullable": self.nullable, "schedule": self.schedule, "doc": self.doc}


@dataclass(frozen=True)
class Algorithm:
    """An SB3 algorithm, the learner that pools it, and which action spaces it handles."""

    name: str
    sb3_class: type[BaseAlgorithm]
    learner: type[PooledLearner]
    on_policy: bool
    action_spaces: tuple[type[spaces.Space], ...]
    # parameters SB3 has but a pooled learner cannot honour, with the reason
    excluded: tuple[tuple[str, str], ...] = ()

    @property
    def continuous(self) -> bool:
        return spaces.Box in self.action_spaces


ALGORITHMS: dict[str, Algorithm] = {
    "PPO": Algorithm("PPO", PPO, OnPolicyLearner, True,
                     (spaces.Discrete, spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)),
    "DQN": Algorithm("DQN", DQN, DQNLearner, False, (spaces.Discrete,),
                     excluded=(("n_steps", "n-step returns need one client's consecutive steps"),)),
}

# Constructor arguments that are Shepherd's business, not the user's.
_NOT_PARAMETERS = {"self", "policy", "env", "tensorboard_log", "verbose", "device", "_init_setup_model",
                   "rollout_buffer_class", "rollout_buffer_kwargs", "replay_buffer_class",
                   "replay_buffer_kwargs", "stats_window_size", "action_noise"}

_EXTRA = {
    True: [Parameter("", "n_envs", ParamType.INT, 1,
                     doc="rollout segments (SB3's n_envs): a rollout is n_envs segments of n_steps, "
                         "each filled by one client; use about as many as clients")],
    False: [],
}


def _type_of(annotation: Any) -> tuple[ParamType, bool, bool]:
    is_union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    args = typing.get_args(annotation) if is_union else (annotation,)
    nullable = type(None) in args
    schedule = any(typing.get_origin(a) is collections.abc.Callable for a in args)
    plain = [typing.get_origin(a) or a for a in args if a is not type(None)]
    for python_type, param_type in ((bool, ParamType.BOOL), (int, ParamType.INT), (float, ParamType.FLOAT),
                                    (str, ParamType.STR), (dict, ParamType.JSON)):
        if python_type in plain:
            return param_type, nullable, schedule
    return ParamType.JSON, nullable, schedule


def parameters(algorithm: str) -> dict[str, Parameter]:
    """The typed parameters of an algorithm, read from its SB3 constructor.

    Raises:
        ParameterError: the algorithm is unknown.
    """
    info = algorithm_info(algorithm)
    found: dict[str, Parameter] = {}
    excluded = dict(info.excluded)
    for name, arg in inspect.signature(info.sb3_class.__init__).parameters.items():
        if name in _NOT_PARAMETERS or name in excluded:
            continue
        param_type, nullable, schedule = _type_of(arg.annotation)
        default = None if arg.default is inspect.Parameter.empty else arg.default
        if isinstance(default, tuple):
            default = list(default)
        found[name] = Parameter(info.name, name, param_type, default, nullable or default is None, schedule)
    for extra in _EXTRA[info.on_policy]:
        found[extra.name] = Parameter(info.name, extra.name, extra.type, extra.default, doc=extra.doc)
    return found


def algorithm_info(algorithm: str) -> Algorithm:
    try:
        return ALGORITHMS[algorithm.upper()]
    except KeyError:
        raise ParameterError(f"unknown algorithm {algorithm!r}; available: {', '.join(ALGORITHMS)}") from None


def _coerce(param: Parameter, value: Any) -> Any:
    where = f"{param.algorithm} parameter {param.name!r}"
    if value is None:
        if param.nullable:
            return None
        raise ParameterError(f"{where} cannot be null")
    if param.type is ParamType.BOOL:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.strip().lower() in ("true", "1", "yes")
        raise ParameterError(f"{where} must be a boolean, got {value!r}")
    if param.type is ParamType.INT:
        number = value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                raise ParameterError(f"{where} must be an integer, got {value!r}") from None
        if isinstance(number, bool) or not isinstance(number, (int, float)) or float(number) != int(number):
            raise ParameterError(f"{where} must be an integer, got {value!r}")
        return int(number)
    if param.type is ParamType.FLOAT:
        if param.schedule and isinstance(value, str) and value.startswith("lin_"):
            try:
                float(value[4:])
            except ValueError:
                raise ParameterError(f"{where}: a linear schedule is written lin_<start>, got {value!r}") \
                    from None
            return value
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise ParameterError(f"{where} must be a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ParameterError(f"{where} must be a number, got {value!r}")
        return float(value)
    if param.type is ParamType.STR:
        if not isinstance(value, str):
            raise ParameterError(f"{where} must be a string, got {value!r}")
        return value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ParameterError(f"{where} must be a JSON object, got {value!r}") from None
    if not isinstance(value, (dict, list)):
        raise ParameterError(f"{where} must be a JSON object, got {value!r}")
    return value


def check_parameters(algorithm: str, values: dict[str, Any]) -> dict[str, Any]:
    """Check parameter values against their types; returns them converted (``"False"`` is False).

    Raises:
        ParameterError: an unknown name (the message lists the known ones) or a wrong type.
    """
    known = parameters(algorithm)
    excluded = dict(algorithm_info(algorithm).excluded)
    checked = {}
    for name, value in values.items():
        if name in excluded:
            raise ParameterError(f"{algorithm} parameter {name!r} is not available in Shepherd: {excluded[name]}")
        if name not in known:
            raise ParameterError(f"{algorithm} has no parameter {name!r}; known: {', '.join(sorted(known))}")
        checked[name] = _coerce(known[name], value)
    return checked


class LinearSchedule:
    """RL Zoo's ``lin_<start>``: from ``start`` at the beginning to 0 at the end of the budget."""

    def __init__(self, start: float) -> None:
        self.start = start

    def __call__(self, progress_remaining: float) -> float:
        return progress_remaining * self.start


_ACTIVATIONS: dict[str, Callable[..., th.nn.Module]] = {
    "tanh": th.nn.Tanh, "relu": th.nn.ReLU, "elu": th.nn.ELU, "leaky_relu": th.nn.LeakyReLU, "gelu": th.nn.GELU,
}


def _policy_kwargs(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if not value:
        return value
    kwargs = dict(value)
    activation = kwargs.get("activation_fn")
    if isinstance(activation, str):
        if activation.lower() not in _ACTIVATIONS:
            raise ParameterError(f"activation_fn {activation!r} unknown; use one of {', '.join(_ACTIVATIONS)}")
        kwargs["activation_fn"] = _ACTIVATIONS[activation.lower()]
    return kwargs


def check_spaces(algorithm: str, observation_space: spaces.Space, action_space: spaces.Space) -> None:
    """Raises ParameterError if the algorithm cannot act in ``action_space``, naming those that can."""
    info = algorithm_info(algorithm)
    if not isinstance(action_space, info.action_spaces):
        able = [a.name for a in ALGORITHMS.values() if isinstance(action_space, a.action_spaces)]
        raise ParameterError(f"{info.name} cannot handle {type(action_space).__name__} actions; "
                             f"algorithms that can: {', '.join(able) or 'none'}")


def build_learner(algorithm: str, name: str, observation_space: spaces.Space, action_space: spaces.Space,
                  values: dict[str, Any], total_steps: int | None) -> PooledLearner:
    """Build a fresh SB3 model for the spaces and wrap it in its pooled learner (not yet started).

    Raises:
        ParameterError: bad parameters or spaces the algorithm cannot handle.
    """
    info = algorithm_info(algorithm)
    check_spaces(algorithm, observation_space, action_space)
    kwargs = check_parameters(algorithm, values)
    n_envs = kwargs.pop("n_envs", 1)
    for key, value in list(kwargs.items()):
        if isinstance(value, str) and value.startswith("lin_") and parameters(algorithm)[key].schedule:
            kwargs[key] = LinearSchedule(float(value[4:]))
    kwargs["policy_kwargs"] = _policy_kwargs(kwargs.get("policy_kwargs"))
    policy = "MultiInputPolicy" if isinstance(observation_space, spaces.Dict) else "MlpPolicy"
    env = DummyVecEnv([lambda: SpacesEnv(observation_space, action_space)] * n_envs)
    try:
        model = info.sb3_class(policy, env, device="cpu", verbose=0, **kwargs)
    except (ValueError, AssertionError, TypeError) as error:
        raise ParameterError(f"{info.name} rejected its parameters: {error}") from None
    model.set_logger(Logger(folder=None, output_formats=[]))
    return info.learner(model, name, total_steps)


def registry_records() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The algorithms and parameters tables as stored (name, continuous flag; typed parameters)."""
    algorithms = [{"name": a.name, "continuous": a.continuous, "on_policy": a.on_policy,
                   "action_spaces": [s.__name__ for s in a.action_spaces]} for a in ALGORITHMS.values()]
    params = [p.record() for a in ALGORITHMS for p in parameters(a).values()]
    return algorithms, params
