"""RolesVectorLevel: a session of N copies of one environment with roles (a login with ``n_envs``), stepped
together: ``"envs": [step, ...]`` in, ``{"envs": [reply, ...]}`` out, each copy a `RolesLevel` of its own actors
(docs/protocol.md, "Environments with roles"). Every copy's step is checked before any copy changes."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from shepherd.level.base import Level, Reply
from shepherd.level.roles import RolesLevel, RolesStep
from shepherd.wire import BadRequest
from shepherd.wire.experience import ExperienceSpaces


@dataclass(frozen=True)
class RolesVectorStep:
    """One step of N copies of an environment (``"envs": [step, ...]``), each a checked `RolesStep`."""

    envs: tuple[RolesStep, ...]
    seq: int | None = None
    fingerprint: str = ""

    @property
    def suspect(self) -> bool:
        return any(step.suspect for step in self.envs)

    @property
    def n_envs(self) -> int:
        return len(self.envs)

    def digest(self) -> str:
        return self.fingerprint

    def hand_to(self, taker: Any) -> Any:
        return taker.take_roles_vector(self)


class RolesVectorLevel(Level):
    """A session of N copies of one environment (a login with ``n_envs``): each copy a `RolesLevel` of its own
    actors, stepped together (``"envs": [step, ...]``, the reply ``{"envs": [reply, ...]}``)."""

    snapshots = False
    takes_masks = False

    def __init__(self, copies: list[RolesLevel]) -> None:
        self.copies = copies
        self.evaluate_only = copies[0].evaluate_only

    @property
    def n_envs(self) -> int | None:
        return len(self.copies)

    def introduction(self) -> dict[str, Any] | None:
        return self.copies[0].introduction()  # the login reply adds n_envs, as every vector session's

    def login_fields(self) -> dict[str, Any]:
        """Each copy's first episode's configs, by role, as its step replies' items carry them."""
        fields = [copy.login_fields() for copy in self.copies]
        return {"envs": fields} if any(fields) else {}

    def observed_by(self, step: Any) -> list[tuple[Any, list[Any]]]:
        """Each copy's (`RolesLevel.observed_by`), a learner once with the observations of every copy."""
        observed: dict[int, tuple[Any, list[Any]]] = {}
        for copy, each in zip(self.copies, getattr(step, "envs", ())):
            for learner, rows in copy.observed_by(each):
                observed.setdefault(id(learner), (learner, []))[1].extend(rows)
        return list(observed.values())

    def parse_step(self, data: dict[str, Any], checks: ExperienceSpaces) -> Any:
        """Each env's step checked as a `RolesLevel`'s (errors start ``envs[i].``). Raises BadRequest."""
        if data.get("obs", ...) is None:
            return None
        envs = data.get("envs")
        if not isinstance(envs, list) or len(envs) != len(self.copies):
            raise BadRequest(f"envs: this session steps {len(self.copies)} copies of environment "
                             f"{self.copies[0].environment}: send a list of one step per copy")
        unknown = sorted(set(data) - {"session_key", "seq", "envs", "info"})
        if unknown:
            raise BadRequest(f"{unknown[0]}: goes in each item of envs")
        steps = []
        for index, (copy, item) in enumerate(zip(self.copies, envs)):
            if not isinstance(item, dict):
                raise BadRequest(f"envs[{index}]: must be an object (obs, reward, terminated, truncated by role)")
            try:
                step = copy.parse_step({key: value for key, value in item.items() if key != "seq"}, checks)
            except BadRequest as error:
                raise BadRequest(f"envs[{index}].{error}") from None
            if step is None:
                raise BadRequest(f"envs[{index}].obs: must be an object of role: observation")
            steps.append(step)
        seq = data.get("seq")
        if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or seq < 0):
            raise BadRequest("'seq' must be a non-negative whole number")
        fingerprint = hashlib.blake2b(orjson.dumps(envs, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY),
                                      digest_size=16).hexdigest() if seq is not None else ""
        return RolesVectorStep(tuple(steps), seq, fingerprint)

    def take_roles_vector(self, step: RolesVectorStep) -> Reply[Any]:
        for index, (copy, part) in enumerate(zip(self.copies, step.envs)):  # every copy's turns, before any change
            try:
                copy.check(part)
            except BadRequest as error:
                raise BadRequest(f"envs[{index}].{error}") from None
        for copy, part in zip(self.copies, step.envs):
            copy.apply(part)
        return self.resend()

    def resend(self) -> Reply[Any]:
        replies = [copy.resend() for copy in self.copies]
        return asyncio.get_running_loop().create_task(_all(replies))

    def reply_body(self, action: Any) -> dict[str, Any] | None:
        return {"envs": action}

    def release_held(self) -> int:
        return sum(copy.release_held() for copy in self.copies)

    def close(self) -> None:
        for copy in self.copies:
            copy.close()


async def _all(replies: list[Reply[Any]]) -> list[Any]:
    return [await reply for reply in replies]
