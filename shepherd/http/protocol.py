"""Parsing and checking the client protocol's bodies for the learning server: `shepherd.wire`'s parsers,
with the agents' rule for action masks (`graph.check_mask`, which names the algorithms that take them)."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

from shepherd import wire
from shepherd.graph import StepInput, VectorStepInput, check_mask
from shepherd.wire import LOGIN_FIELDS, STEP_FIELDS, BadRequest, Login, parse_login, parse_object, session_key

__all__ = ["LOGIN_FIELDS", "STEP_FIELDS", "BadRequest", "Login", "parse_login", "parse_object", "parse_step",
           "parse_vector_step", "session_key"]


def parse_step(data: dict[str, Any], observation_space: spaces.Space,
               mask_space: spaces.Space | None = None) -> StepInput | None:
    """`wire.parse_step` with the agents' mask rule; None for ``"obs": null``. Raises BadRequest."""
    return wire.parse_step(data, observation_space, mask_space, check_mask)


def parse_vector_step(data: dict[str, Any], observation_space: spaces.Space, n_envs: int,
                      mask_space: spaces.Space | None = None) -> VectorStepInput | None:
    """`wire.parse_vector_step` with the agents' mask rule; None for ``"obs": null``. Raises BadRequest."""
    return wire.parse_vector_step(data, observation_space, n_envs, mask_space, check_mask)
