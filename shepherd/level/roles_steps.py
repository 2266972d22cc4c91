"""An environment's step body checked by role (docs/protocol.md, "Environments with roles"): what arrives, by
field and role, refused with the role and field named before the turn rules (`RolesLevel.check`) see it."""

from __future__ import annotations

import hashlib
import math
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from shepherd.wire import BadRequest
from shepherd.wire.experience import ExperienceSpaces
from shepherd.wire.observations import check_observation, suspect
from shepherd.wire.spaces import SpaceError, check_action_mask
from shepherd.wire.steps import check_reward

if TYPE_CHECKING:
    from shepherd.level.roles import Role

#: the fields of a step keyed by role
ROLE_FIELDS = ("obs", "reward", "terminated", "truncated", "action_mask", "outcome")
#: every field a step (or one item of a vector step's ``envs``) may have
STEP_FIELDS = {*ROLE_FIELDS, "info", "seq", "session_key"}


@dataclass(frozen=True)
class RolesStep:
    """One checked step of an environment's session, by role: the observations of the roles in it, every
    reward sent, the end flags, masks and the episode's outcome (None: none sent); ``suspect`` as a
    `shepherd.wire.StepInput`'s, for the observation of any role an agent plays."""

    obs: dict[str, Any]
    reward: dict[str, float]
    terminated: dict[str, bool]
    truncated: dict[str, bool]
    masks: dict[str, Any] = field(default_factory=dict)
    outcome: dict[str, float] | None = None
    seq: int | None = None
    fingerprint: str = ""
    suspect: bool = True

    n_envs = None  # one step of one environment (N copies: `RolesVectorStep`)

    def digest(self) -> str:
        return self.fingerprint

    def hand_to(self, taker: Any) -> Any:
        return taker.take_roles(self)


def parse_roles_step(data: dict[str, Any], environment: str, roles: dict[str, Role], checks: ExperienceSpaces
                     ) -> RolesStep | None:
    """A step body of ``environment``'s session checked by role, against its ``roles`` in their declared order
    (every error names the role and the field); None for ``"obs": null``. Raises BadRequest."""
    order = list(roles)
    if "envs" in data:
        raise BadRequest("envs: this session steps one environment; log in with n_envs for the vector form")
    if "obs" not in data:
        raise BadRequest("'obs' is required: the observations of the roles that act now, or null to end the "
                         "session")
    if data["obs"] is None:
        return None
    unknown = sorted(set(data) - STEP_FIELDS)
    if unknown:
        raise BadRequest(f"{unknown[0]}: not a field of a step of an environment with roles (its fields: "
                         f"{', '.join(ROLE_FIELDS)}, info, seq; a role ends with terminated or truncated)")
    parts: dict[str, dict[str, Any]] = {}
    for name in ROLE_FIELDS:
        value = data.get(name)
        if value is None:
            parts[name] = {}
            continue
        if not isinstance(value, dict):
            raise BadRequest(f"{name}: must be an object of role: value (this session is environment "
                             f"{environment}'s, its roles {', '.join(order)})")
        for role in value:
            if role not in roles:
                raise BadRequest(f"{name}.{role}: no such role in environment {environment} (its roles: "
                                 f"{', '.join(order)})")
        parts[name] = value
    if not isinstance(data.get("info", {}) or {}, dict):
        raise BadRequest("info: must be an object")
    obs = {}
    suspicious = False
    for name, value in parts["obs"].items():
        role = roles[name]
        if role.host is None:
            obs[name] = value
            continue
        try:
            obs[name] = check_observation(role.observation_space, value, f"obs.{name}")
        except SpaceError as error:
            raise BadRequest(str(error)) from None
        suspicious = suspicious or suspect(obs[name])
    rewards = {name: _number(value, f"reward.{name}", checks.max_reward)
               for name, value in parts["reward"].items()}
    flags: dict[str, dict[str, bool]] = {}
    for field_name in ("terminated", "truncated"):
        flags[field_name] = {}
        for name, value in parts[field_name].items():
            if not isinstance(value, bool):
                raise BadRequest(f"{field_name}.{name}: must be true or false, not {value!r}")
            if value and name not in parts["obs"]:
                raise BadRequest(f"{field_name}.{name}: a role that ends sends its last observation in obs")
            flags[field_name][name] = value
    masks = {}
    for name, value in parts["action_mask"].items():
        role = roles[name]
        if role.host is not None and not role.host.takes_masks:
            raise BadRequest(f"action_mask.{name}: the player of role {name} ({role.player}) takes no masks")
        if name not in parts["obs"]:
            raise BadRequest(f"action_mask.{name}: a mask goes with the role's observation")
        if role.host is None:  # a scripted player's spaces are unknown: handed on unchecked, as its obs is
            masks[name] = value
            continue
        try:
            masks[name] = check_action_mask(role.action_space, value, f"action_mask.{name}")
        except SpaceError as error:
            raise BadRequest(str(error)) from None
    outcome = None
    if data.get("outcome") is not None:
        outcome = {name: _number(value, f"outcome.{name}") for name, value in parts["outcome"].items()} or None
    seq = data.get("seq")
    if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 0):
        raise BadRequest("'seq' must be a non-negative whole number")
    content = {key: value for key, value in data.items() if key not in ("session_key", "seq")}
    fingerprint = hashlib.blake2b(orjson.dumps(content, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY),
                                  digest_size=16).hexdigest() if seq is not None else ""
    return RolesStep(obs, rewards, flags["terminated"], flags["truncated"], masks, outcome, seq, fingerprint,
                     suspicious)


def _number(value: Any, where: str, bound: float | None = None) -> float:
    """A finite number (within ``bound`` in magnitude, if given: a reward's). Raises BadRequest."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise BadRequest(f"{where}: must be a finite number, not {value!r}")
    if bound is not None:
        try:
            check_reward(float(value), where, bound)
        except ValueError as error:
            raise BadRequest(str(error)) from None
    return float(value)
