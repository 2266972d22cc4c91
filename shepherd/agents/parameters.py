"""Typed algorithm parameters: read from SB3's constructor signatures and docstrings, and checked values.

Parameter types are numbered as in the original Shepherd's store (user guide 1.1.5, whose value columns are
``value_int``, ``value_float``, ``value_bool``, ``value_str``): 1 integer, 2 float, 3 boolean, 4 string.
Shepherd adds 5, a JSON object or list (``policy_kwargs``). Float parameters that SB3 also accepts as a
schedule take ``"lin_<start>"`` (linear from ``start`` to 0 over the training budget), as RL Zoo writes
them; float parameters that SB3 also accepts as a string (SAC's ``ent_coef="auto_0.1"``) take either.
"""

from __future__ import annotations

import collections.abc
import enum
import inspect
import json
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Any


class ParameterError(ValueError):
    """A parameter name is unknown for its algorithm, or its value has the wrong type."""


class ParamType(enum.IntEnum):
    """The stored type of a parameter, numbered as the original Shepherd numbers them (1 to 4), plus JSON."""

    INT = 1
    FLOAT = 2
    BOOL = 3
    STR = 4
    JSON = 5


@dataclass(frozen=True)
class Parameter:
    """One hyperparameter of an algorithm: its name, type, default, and what else it accepts."""

    algorithm: str
    name: str
    type: ParamType
    default: Any
    nullable: bool = False
    schedule: bool = False  # a float that may also be "lin_<start>"
    text: bool = False  # a float that may also be a string SB3 understands ("auto")
    choices: tuple[str, ...] = ()  # the strings a STR parameter accepts, when they are fixed
    doc: str = ""

    def record(self) -> dict[str, Any]:
        """The parameter as stored in the ``parameters`` table."""
        return {"algorithm": self.algorithm, "name": self.name, "type": int(self.type), "default": self.default,
                "nullable": self.nullable, "schedule": self.schedule, "text": self.text,
                "choices": list(self.choices), "doc": self.doc}


def _type_of(annotation: Any) -> tuple[ParamType, bool, bool, bool]:
    """(type, nullable, schedule, text) of a constructor argument's annotation."""
    is_union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    args = typing.get_args(annotation) if is_union else (annotation,)
    nullable = type(None) in args
    schedule = any(typing.get_origin(a) is collections.abc.Callable for a in args)
    plain = [typing.get_origin(a) or a for a in args if a is not type(None)]
    text = float in plain and str in plain
    for python_type, param_type in ((bool, ParamType.BOOL), (int, ParamType.INT), (float, ParamType.FLOAT),
                                    (str, ParamType.STR), (dict, ParamType.JSON)):
        if python_type in plain:
            return param_type, nullable, schedule, text
    return ParamType.JSON, nullable, schedule, text


def docs_of(cls: type) -> dict[str, str]:
    """The ``:param name: text`` lines of a class docstring, as one line each."""
    found = {}
    for match in re.finditer(r":param (\w+):(.*?)(?=\n\s*:param |\n\s*:return|\Z)", inspect.getdoc(cls) or "",
                             re.S):
        found[match.group(1)] = " ".join(match.group(2).split())
    return found


def from_signature(algorithm: str, cls: type, skip: set[str]) -> dict[str, Parameter]:
    """The typed parameters of an SB3 class's constructor, less the names in ``skip``."""
    docs = docs_of(cls)
    found: dict[str, Parameter] = {}
    for name, arg in inspect.signature(cls).parameters.items():
        if name in skip:
            continue
        param_type, nullable, schedule, text = _type_of(arg.annotation)
        default = None if arg.default is inspect.Parameter.empty else arg.default
        if isinstance(default, tuple):
            default = list(default)
        found[name] = Parameter(algorithm, name, param_type, default, nullable or default is None, schedule,
                                text, doc=docs.get(name, ""))
    return found


def _number(param: Parameter, value: Any, kind: type) -> int | float:
    where = f"{param.algorithm} parameter {param.name!r}"
    noun = "an integer" if kind is int else "a number"
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise ParameterError(f"{where} must be {noun}, got {value!r}") from None
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise ParameterError(f"{where} must be {noun}, got {value!r}")
    if isinstance(number, float) and not math.isfinite(number):  # YAML reads 1e400 as a string: float() is inf
        raise ParameterError(f"{where} must be a finite number, got {value!r}")
    if kind is int:
        if float(number) != int(number):
            raise ParameterError(f"{where} must be an integer, got {value!r}")
        return int(number)
    return float(number)


def coerce(param: Parameter, value: Any) -> Any:
    """A value converted to the parameter's type (``"False"`` is False, ``"32"`` is 32).

    Raises:
        ParameterError: the value does not fit; the message names the parameter.
    """
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
        return _number(param, value, int)
    if param.type is ParamType.FLOAT:
        if param.schedule and isinstance(value, str) and value.startswith("lin_"):
            try:
                float(value[4:])
            except ValueError:
                raise ParameterError(f"{where}: a linear schedule is written lin_<start>, got {value!r}") \
                    from None
            return value
        if param.text and isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                return value  # SB3 checks the words it accepts ("auto", "auto_0.1") when the model is built
        return _number(param, value, float)
    if param.type is ParamType.STR:
        if not isinstance(value, str):
            raise ParameterError(f"{where} must be a string, got {value!r}")
        if param.choices and value not in param.choices:
            raise ParameterError(f"{where} must be one of {', '.join(param.choices)}; got {value!r}")
        return value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ParameterError(f"{where} must be a JSON object, got {value!r}") from None
    if not isinstance(value, (dict, list)):
        raise ParameterError(f"{where} must be a JSON object, got {value!r}")
    return value


class LinearSchedule:
    """RL Zoo's ``lin_<start>``: from ``start`` at the beginning to 0 at the end of the budget."""

    def __init__(self, start: float) -> None:
        self.start = start

    def __call__(self, progress_remaining: float) -> float:
        return progress_remaining * self.start

    def __repr__(self) -> str:
        return f"lin_{self.start}"
