"""A client-acting session's upload (``POST /shepherd/experience/``) checked into an `Experience`; torch-free.

A client that acts with the served policy itself collects ``T`` steps of its ``N`` envs and uploads them as
columns (issue 35): ``obs`` has T+1 rows of N observations (row 0 the ones the first samples were drawn
from, row T the ones the next upload starts from), ``sample``, ``reward``, ``terminated``, ``truncated``
and ``final_obs`` T rows each, ``action_mask`` T+1 rows when the agent takes masks. Everything is checked
before anything is recorded, and an error names the field and ``[t][i]``: whole columns with numpy
(`shepherd.wire.columns`), value by value (`checked_experience`) only for an upload that may be wrong. The
learner's side is ``shepherd/agents/sb3/uploads.py``.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import operator
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any, Sequence

import numpy as np
from gymnasium import spaces

from shepherd.wire.columns import columns, mask_column
from shepherd.wire.parse import sequence_number
from shepherd.wire.observations import check_observation, check_observations
from shepherd.wire.spaces import SpaceError
from shepherd.wire.steps import DEFAULT_MAX_REWARD, BadRequest, MaskCheck, StepTaker, check_reward
from shepherd.wire.tensors import plain

#: the fields of an upload's body
EXPERIENCE_FIELDS = {"session_key", "seq", "policy_version", "obs", "sample", "reward", "terminated", "truncated",
                     "final_obs", "action_mask"}


class BadExperience(BadRequest):
    """An upload that does not fit what was asked or the agent's spaces; the message names the field and
    ``[t][i]`` (400; nothing of it is recorded)."""


@dataclass(frozen=True, eq=False)
class Experience:
    """One upload, checked: ``T`` steps of ``N`` envs as columns, drawn with ``policy_version``.

    ``obs`` is an array of shape (T+1, N, *obs shape) (a dict of such arrays for a ``Dict`` space): row t
    holds what sample row t was drawn from; when env i's episode ended at step t (``terminated`` or
    ``truncated`` [t][i]), ``final_obs[t][i]`` is its last observation and ``obs[t+1][i]`` the next
    episode's first. ``sample`` (T, N, *sample shape) is what the policy drew, as SB3 stores it in its
    buffer; ``reward`` (T, N, float64) the reward after sample t. ``action_mask`` (T+1, N, mask size) or
    None. ``seq`` is the client's sequence number, for retries (the session's business, not the learner's).
    """

    obs: Any
    sample: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: tuple[tuple[Any, ...], ...]
    policy_version: int
    action_mask: np.ndarray | None = None
    seq: int | None = None

    @property
    def steps(self) -> int:
        """T: the steps of every env."""
        return int(self.reward.shape[0])

    @property
    def n_envs(self) -> int:
        """N: the envs."""
        return int(self.reward.shape[1])

    @property
    def ended(self) -> np.ndarray:
        """(T, N): whether env i's episode ended at step t (terminated or truncated)."""
        return self.terminated | self.truncated

    @property
    def time_limits(self) -> np.ndarray:
        """(T, N): ends that are time limits (truncated and not terminated): bootstrapped, as SB3's
        ``TimeLimit.truncated``."""
        return self.truncated & ~self.terminated

    def obs_rows(self, start: int, stop: int) -> Any:
        """Observation rows ``start:stop`` (an array, or a dict of arrays)."""
        if isinstance(self.obs, dict):
            return {key: value[start:stop] for key, value in self.obs.items()}
        return self.obs[start:stop]

    def digest(self) -> str:
        """A digest of the upload's content (everything but ``seq``): a retry must repeat it."""
        digest = hashlib.blake2b(digest_size=16)
        digest.update(f"v{self.policy_version}|".encode())
        for key in sorted(self.obs) if isinstance(self.obs, dict) else [None]:
            _digest_array(digest, self.obs if key is None else self.obs[key])
        for array in (self.sample, self.reward, self.terminated, self.truncated, self.action_mask):
            if array is not None:
                _digest_array(digest, array)
        for t, i, last in self.finals():
            digest.update(f"|final {t} {i}|".encode())
            for key in sorted(last) if isinstance(last, dict) else [None]:
                _digest_array(digest, last if key is None else last[key])
        return digest.hexdigest()

    def hand_to(self, taker: StepTaker) -> Any:
        """A session's upload goes to its level's `take_upload` (a client-acting session's)."""
        return taker.take_upload(self)

    def finals(self) -> list[tuple[int, int, Any]]:
        """Every ended episode's last observation, as ``(t, i, obs)`` in row order."""
        return [(t, i, last) for t, row in enumerate(self.final_obs) for i, last in enumerate(row) if last is not None]

    @classmethod
    def of(cls, obs: Any, sample: Any, reward: Any, terminated: Any, truncated: Any,
           final_obs: Sequence[Sequence[Any]] | None, policy_version: int, action_mask: Any = None,
           seq: int | None = None) -> Experience:
        """An upload from arrays (an in-process client, a test): shapes, finite rewards and the
        ``final_obs`` rule are checked; observations and samples are taken as they are.

        Raises:
            BadExperience: naming the field and ``[t][i]``.
        """
        reward = np.asarray(reward, dtype=np.float64)
        if reward.ndim != 2:
            raise BadExperience(f"'reward' must have T rows of N numbers; got shape {list(reward.shape)}")
        steps, n = reward.shape
        flags = [np.asarray(value, dtype=bool) for value in (terminated, truncated)]
        for name, value in (("terminated", flags[0]), ("truncated", flags[1])):
            _shape_is(name, value.shape, (steps, n))
        stacked = {k: np.asarray(v) for k, v in obs.items()} if isinstance(obs, dict) else np.asarray(obs)
        for key, value in (stacked.items() if isinstance(stacked, dict) else [("", stacked)]):
            _shape_is(f"obs{'.' + key if key else ''}", value.shape[:2], (steps + 1, n))
        sample = np.asarray(sample)
        _shape_is("sample", sample.shape[:2], (steps, n))
        finals = tuple(tuple(row) for row in final_obs) if final_obs is not None else tuple((None,) * n
                                                                                           for _ in range(steps))
        for t, row in enumerate(finals):
            if len(row) != n:
                raise BadExperience(f"final_obs[{t}] has {len(row)} items; expected {n}, one per env")
        _shape_is("final_obs", (len(finals), n), (steps, n))
        masks = None if action_mask is None else np.asarray(action_mask, dtype=bool)
        if masks is not None:
            _shape_is("action_mask", masks.shape[:2], (steps + 1, n))
        _check_rewards(reward)
        _check_finals(flags[0] | flags[1], finals)
        return cls(stacked, sample, reward, flags[0], flags[1], finals, int(policy_version), masks, seq)


def _digest_array(digest: Any, value: Any) -> None:
    array = np.ascontiguousarray(value)
    digest.update(f"{array.dtype.str}|{array.shape}|".encode())
    digest.update(array.data)  # the buffer itself: no copy of a block's observations


def _shape_is(name: str, got: tuple[int, ...], expected: tuple[int, ...]) -> None:
    if tuple(got) != tuple(expected):
        raise BadExperience(f"'{name}' has {_rows_text(got)}; expected {_rows_text(expected)}")


def _rows_text(shape: tuple[int, ...]) -> str:
    return f"{shape[0]} rows of {shape[1]}" if len(shape) >= 2 else f"shape {list(shape)}"


def _check_rewards(reward: np.ndarray) -> None:
    bad = np.argwhere(~np.isfinite(reward))
    if len(bad):
        t, i = bad[0]
        raise BadExperience(f"reward[{t}][{i}] must be a finite number")


def _check_finals(ended: np.ndarray, finals: tuple[tuple[Any, ...], ...]) -> None:
    given = np.fromiter(map(operator.is_not, chain.from_iterable(finals), repeat(None)), bool, count=ended.size)
    if (given.reshape(ended.shape) == ended).all():
        return
    for t, row in enumerate(finals):  # name the first one wrong
        for i, last in enumerate(row):
            if ended[t, i] and last is None:
                raise BadExperience(f"final_obs[{t}][{i}] is missing: env {i} ended at step {t} (terminated or "
                                    "truncated); send its last observation there and the next episode's first "
                                    f"in obs[{t + 1}][{i}]")
            if last is not None and not ended[t, i]:
                raise BadExperience(f"final_obs[{t}][{i}] is given but env {i} did not end at step {t}; send null")


@dataclass(frozen=True)
class ExperienceSpaces:
    """What a session's steps and uploads are checked against: the agent's observation space, the space of
    its samples (`sample_space`), its action space for masks (None: the agent takes no masks) with the
    check, and the server's bound on rewards."""

    observation: spaces.Space
    sample: spaces.Space
    mask: spaces.Space | None = None
    check_mask: MaskCheck | None = None
    max_reward: float = DEFAULT_MAX_REWARD  # a reward's largest magnitude (``run.py --max-reward``)


def sample_space(action_space: spaces.Space, bounded: bool) -> spaces.Space:
    """The support of what a policy draws, as SB3's buffers store it: the action space for discrete kinds;
    for ``Box`` actions [-1, 1] when ``bounded`` (off-policy: scaled, squashed or clipped), else every real
    number (an on-policy Gaussian's draw, before SB3 clips it to the box)."""
    if not isinstance(action_space, spaces.Box):
        return action_space
    limit = 1.0 if bounded else np.inf
    return spaces.Box(-limit, limit, action_space.shape, np.float32)


def parse_experience(data: dict[str, Any], checks: ExperienceSpaces, n_envs: int, steps: int) -> Experience:
    """Check an upload's body (already parsed by `shepherd.wire.parse_object` with `EXPERIENCE_FIELDS`) of a
    session of ``n_envs`` envs that was asked for ``steps`` steps: its columns at once with numpy
    (`shepherd.wire.columns`); an upload that may not pass goes to `checked_experience`, which names what is
    wrong (or accepts an unusual but valid one), so both accept and refuse the same uploads, word for word.

    Raises:
        BadExperience: another T than asked, wrong shapes, non-finite numbers, a sample outside the
            support of `sample_space`, a sample a mask forbids, a ``final_obs`` without an ended episode
            or the reverse; the message names the field and ``[t][i]``.
    """
    version = _version(data)
    fast = columns(data, checks.observation, checks.sample, n_envs, steps, checks.max_reward)
    if fast is None:
        return checked_experience(plain(data), checks, n_envs, steps)
    try:
        seq = sequence_number(data)
        finals = _finals(data, checks.observation, n_envs, steps)
        masks = _mask_column(data, checks, n_envs, steps)
        if masks is None:
            masks = _masks(data, checks, n_envs, steps)
    except (SpaceError, BadExperience):  # worded, value by value, as the JSON body's would be
        return checked_experience(plain(data), checks, n_envs, steps)
    if masks is not None and not _all_allowed(checks.sample, masks, fast["sample"]):
        return checked_experience(plain(data), checks, n_envs, steps)
    return Experience.of(fast["obs"], fast["sample"], fast["reward"], fast["terminated"], fast["truncated"], finals,
                         version, masks, seq)


def _version(data: dict[str, Any]) -> int:
    version = data.get("policy_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise BadExperience("'policy_version' (the version the samples were drawn with, a whole number) is required")
    return version


def checked_experience(data: dict[str, Any], checks: ExperienceSpaces, n_envs: int, steps: int) -> Experience:
    """`parse_experience` value by value, in Python: what names the field and ``[t][i]`` of a refused upload
    (of JSON values: a binary body's arrays are made `plain` first).

    Raises:
        BadExperience: as `parse_experience`.
    """
    version = _version(data)
    try:
        seq = sequence_number(data)
        rows = {name: _rows(data, name, steps + extra, n_envs, steps)
                for name, extra in (("obs", 1), ("sample", 0), ("reward", 0), ("terminated", 0), ("truncated", 0))}
        obs = [check_observations(checks.observation, row, f"obs[{t}]") for t, row in enumerate(rows["obs"])]
        samples = [_check_samples(checks.sample, row, t) for t, row in enumerate(rows["sample"])]
        rewards = [[_reward(value, f"reward[{t}][{i}]", checks.max_reward) for i, value in enumerate(row)]
                   for t, row in enumerate(rows["reward"])]
        flags = {name: [[_boolean(value, f"{name}[{t}][{i}]") for i, value in enumerate(row)]
                        for t, row in enumerate(rows[name])] for name in ("terminated", "truncated")}
        finals = _finals(data, checks.observation, n_envs, steps)
        masks = _masks(data, checks, n_envs, steps)
    except SpaceError as error:
        raise BadExperience(str(error)) from None
    if masks is not None:
        _check_allowed(checks.sample, masks, samples)
    return Experience.of(_stack(obs), np.asarray(samples).reshape(steps, n_envs, *(checks.sample.shape or ())),
                         np.asarray(rewards, np.float64).reshape(steps, n_envs),
                         np.asarray(flags["terminated"], bool).reshape(steps, n_envs),
                         np.asarray(flags["truncated"], bool).reshape(steps, n_envs), finals, version, masks, seq)


def _rows(data: dict[str, Any], name: str, count: int, n: int, steps: int) -> list[list[Any]]:
    rows = data.get(name)
    if not isinstance(rows, list):
        raise BadExperience(f"'{name}' (a list of {count} rows of {n}, one item per env) is required")
    if len(rows) != count:
        raise BadExperience(f"'{name}' has {len(rows)} rows; expected {count}: the server asked for {steps} steps "
                            "(T rows, and T+1 of 'obs' and 'action_mask')")
    for t, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != n:
            got = f"{len(row)} items" if isinstance(row, list) else type(row).__name__
            raise BadExperience(f"{name}[{t}] must be a list of {n} items, one per env; got {got}")
    return rows


def _check_samples(space: spaces.Space, row: list[Any], t: int) -> list[Any]:
    checked = check_observations(space, row, f"sample[{t}]")
    if isinstance(space, spaces.Box):
        for i, value in enumerate(checked):
            if np.any(value < space.low) or np.any(value > space.high):
                raise BadExperience(f"sample[{t}][{i}] is outside the support of the policy's samples, "
                                    f"[{float(space.low.min())}, {float(space.high.max())}]")
    return checked


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise BadExperience(f"{where} must be a finite number")
    return float(value)


def _reward(value: Any, where: str, limit: float) -> float:
    try:
        return check_reward(_number(value, where), where, limit)
    except ValueError as error:
        raise BadExperience(str(error)) from None


def _boolean(value: Any, where: str) -> bool:
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise BadExperience(f"{where} must be true or false")


def _finals(data: dict[str, Any], space: spaces.Space, n: int, steps: int) -> list[list[Any]] | None:
    if data.get("final_obs") is None:
        return None
    rows = _rows(data, "final_obs", steps, n, steps)
    return [[None if value is None else check_observation(space, value, f"final_obs[{t}][{i}]")
             for i, value in enumerate(row)] for t, row in enumerate(rows)]


def _masks(data: dict[str, Any], checks: ExperienceSpaces, n: int, steps: int) -> np.ndarray | None:
    if data.get("action_mask") is None:
        return None
    if checks.mask is None or checks.check_mask is None:
        raise BadExperience("'action_mask' is given but this agent's algorithm takes no action masks")
    check = checks.check_mask
    rows = _rows(data, "action_mask", steps + 1, n, steps)
    return np.asarray([[check(value, checks.mask, f"action_mask[{t}][{i}]") for i, value in enumerate(row)]
                       for t, row in enumerate(rows)], dtype=bool)


def _mask_column(data: dict[str, Any], checks: ExperienceSpaces, n: int, steps: int) -> np.ndarray | None:
    """The masks of an agent that takes them checked at once (`shepherd.wire.columns.mask_column`); None when
    there are none or any may not pass (`_masks` then checks them one by one and names a bad one)."""
    rows = data.get("action_mask")
    if rows is None or checks.mask is None or checks.check_mask is None:
        return None
    return mask_column(rows, checks.mask, steps + 1, n)


def _all_allowed(space: spaces.Space, masks: np.ndarray, samples: np.ndarray) -> bool:
    """Whether every sample (T, N, ...) is allowed by its row's flat mask (`mask_allows`, at once)."""
    steps, n = samples.shape[:2]
    rows = masks[:steps]
    if isinstance(space, spaces.Discrete):
        return bool(np.take_along_axis(rows, (samples - int(space.start))[..., None], axis=2).all())
    values = samples.reshape(steps, n, -1).astype(np.int64)
    if isinstance(space, spaces.MultiDiscrete):
        offsets = np.concatenate([[0], np.cumsum(np.asarray(space.nvec).reshape(-1))[:-1]])
    else:  # MultiBinary
        offsets = 2 * np.arange(values.shape[2])
    return bool(np.take_along_axis(rows, offsets + values, axis=2).all())


def _check_allowed(space: spaces.Space, masks: np.ndarray, samples: list[list[Any]]) -> None:
    """Raises BadExperience for the first sample its row's mask forbids."""
    for t, row in enumerate(samples):
        for i, sample in enumerate(row):
            if not mask_allows(space, masks[t, i], sample):
                raise BadExperience(f"sample[{t}][{i}] is an action that action_mask[{t}][{i}] forbids")


def mask_allows(space: spaces.Space, mask: np.ndarray, sample: Any) -> bool:
    """Whether a flat boolean mask (sb3-contrib's layout, `shepherd.wire.spaces.mask_size`) allows a sample."""
    if isinstance(space, spaces.Discrete):
        return bool(mask[int(sample) - int(space.start)])
    values = np.asarray(sample, dtype=np.int64).reshape(-1)
    if isinstance(space, spaces.MultiDiscrete):
        offsets = np.concatenate([[0], np.cumsum(np.asarray(space.nvec).reshape(-1))[:-1]])
    else:  # MultiBinary: two per bit, [bit0=0, bit0=1, bit1=0, ...]
        offsets = 2 * np.arange(values.size)
    return bool(mask[offsets + values].all())


def _stack(rows: list[list[Any]]) -> Any:
    """T+1 rows of N checked observations as one array (a dict of arrays for a ``Dict`` space)."""
    first = rows[0][0] if rows and rows[0] else None
    if isinstance(first, dict):
        return {key: np.asarray([[obs[key] for obs in row] for row in rows]) for key in first}
    return np.asarray(rows)
