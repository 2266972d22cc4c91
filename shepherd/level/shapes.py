"""The session shapes of a one-learner agent, as a table: how a login's ``acting`` and ``n_envs`` choose the level
its session is driven by (a selector's levels are its own: `shepherd.graph.hierarchy`)."""

from __future__ import annotations

from typing import Callable

from shepherd.level.base import Level
from shepherd.level.client import ActingHost, ClientActingLevel
from shepherd.level.single import LevelManager
from shepherd.level.vector import VectorLevel

#: (acting, vector?) -> the level from its first actor id, its envs, its agent and whether it only evaluates
SHAPES: dict[tuple[str, bool], Callable[[int, int, ActingHost, bool], Level]] = {
    ("server", False): lambda first, n_envs, host, evaluate_only: LevelManager(first, host, evaluate_only),
    ("server", True): VectorLevel,
    ("client", False): ClientActingLevel,  # one env: an upload's columns hold one env
    ("client", True): ClientActingLevel,
}


def flat_level(host: ActingHost, evaluate_only: bool, n_envs: int | None, acting: str) -> Callable[[int], Level]:
    """The level of a session of a one-learner agent (``n_envs`` None: one env), from its first actor id."""
    shape = SHAPES[acting, n_envs is not None]
    return lambda first: shape(first, n_envs or 1, host, evaluate_only)
