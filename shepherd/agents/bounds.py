"""Bounds on the parameter values of agents, which the operator changes (``run.py --parameter-bound``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from shepherd.agents.parameters import ParameterError, ParamType
from shepherd.agents.registry import ALGORITHMS, parameters

#: the server option that changes a bound (each message of a refused value names it)
OPTION = "--parameter-bound"


@dataclass(frozen=True)
class Bound:
    """The lowest and the highest value a parameter may take, both allowed."""

    low: float
    high: float

    def __str__(self) -> str:
        return f"{shown(self.low)}:{shown(self.high)}"


def shown(number: float) -> str:
    """A bound's number as the option writes it: ``100``, not ``100.0``; ``0.001``; ``1e+30``."""
    return str(int(number)) if float(number).is_integer() and abs(number) < 1e15 else f"{number:g}"


#: the default bounds, by parameter name (of whichever algorithm has it). Outside them a learner pins a core
#: for hours (``n_epochs``, ``gradient_steps``: passes per update), diverges at its first update (a huge
#: ``learning_rate``, ``ent_coef``, ``vf_coef``), or the value means nothing (a negative ``clip_range``, a
#: ``gamma`` above 1). Where a sane bound depends on the problem, the operator changes it (`ParameterBounds.changed`).
_DEFAULTS: dict[str, Bound] = {
    "learning_rate": Bound(0.0, 1.0),
    "n_epochs": Bound(1, 100),
    "gradient_steps": Bound(-1, 1000),  # -1: as many as the steps collected (SB3)
    "clip_range": Bound(0.0, 1.0),
    "clip_range_vf": Bound(0.0, 100.0),
    "ent_coef": Bound(0.0, 1.0),
    "vf_coef": Bound(0.0, 100.0),
    "max_grad_norm": Bound(0.0, 1000.0),
    "gamma": Bound(0.0, 1.0),
    "gae_lambda": Bound(0.0, 1.0),
    "tau": Bound(0.0, 1.0),
    "exploration_fraction": Bound(0.0, 1.0),
    "exploration_initial_eps": Bound(0.0, 1.0),
    "exploration_final_eps": Bound(0.0, 1.0),
}



@dataclass(frozen=True)
class ParameterBounds:
    """The bounds a server holds parameter values to, by parameter name (of whichever algorithm has it):
    the defaults, changed by the operator (``run.py --parameter-bound``). Carried on the serving settings
    (`shepherd.graph.Serving.bounds`) and handed to preset loading and the admin operations, never a process
    setting: two servers in one process hold their own."""

    bounds: Mapping[str, Bound] = field(default_factory=lambda: MappingProxyType(dict(_DEFAULTS)))

    def changed(self, bounds: Mapping[str, Bound]) -> ParameterBounds:
        """These bounds with ``bounds`` put in place of (or beside) those of the same names."""
        return ParameterBounds(MappingProxyType({**self.bounds, **bounds}))

    def get(self, name: str) -> Bound | None:
        return self.bounds.get(name)

    def check(self, algorithm: str, values: dict[str, Any]) -> None:
        """Check typed values (`shepherd.agents.registry.check_parameters`'s) against these bounds.

        Raises:
            ParameterError: a value outside its bound; the message names the bound and how the operator
                changes it.
        """
        for name, value in values.items():
            bound, number = self.bounds.get(name), _number(value)
            if bound is None or number is None or bound.low <= number <= bound.high:
                continue
            what = "a linear schedule's start" if isinstance(value, str) else "a value"
            raise ParameterError(
                f"{algorithm} parameter {name!r} takes {what} between {shown(bound.low)} and {shown(bound.high)}, "
                f"not {value!r}: this server's bound, which its operator can change with "
                f"run.py {OPTION} {name}=LOW:HIGH")


#: the default bounds
DEFAULT_BOUNDS = ParameterBounds()


def parse_bounds(texts: Iterable[str]) -> ParameterBounds:
    """The default bounds changed by ``NAME=LOW:HIGH`` texts (``run.py --parameter-bound``, repeated).

    Raises:
        ValueError: a text `parse_bound` refuses.
    """
    return DEFAULT_BOUNDS.changed(dict(parse_bound(text) for text in texts))


def parse_bound(text: str) -> tuple[str, Bound]:
    """``NAME=LOW:HIGH`` (``n_epochs=1:500``) as a name and its bound.

    Raises:
        ValueError: not of that form, numbers that are not finite, LOW above HIGH, or a name that no
            served algorithm has as a number parameter (the message says which).
    """
    name, equals, numbers = text.partition("=")
    low_text, colon, high_text = numbers.partition(":")
    name = name.strip()
    try:
        low, high = float(low_text), float(high_text)
    except ValueError:
        low = high = float("nan")
    if not equals or not colon or not (abs(low) < float("inf") and abs(high) < float("inf")):
        raise ValueError(f"{OPTION} takes NAME=LOW:HIGH with finite numbers (n_epochs=1:500), not {text!r}")
    if low > high:
        raise ValueError(f"{OPTION} {text}: LOW is above HIGH")
    numeric = {p.name for a in ALGORITHMS.values() for p in parameters(a.name).values()
               if p.type in (ParamType.INT, ParamType.FLOAT)}
    if name not in numeric:
        raise ValueError(f"{OPTION} {text}: no served algorithm has a number parameter {name!r}")
    return name, Bound(low, high)


def _number(value: Any) -> float | None:
    """The number a checked value stands for: itself, a linear schedule's start (``lin_0.001``); None for
    anything else (``auto``, a boolean, null)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.startswith("lin_"):
        try:
            return float(value[4:])
        except ValueError:
            return None
    return None
