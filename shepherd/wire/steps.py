"""The client protocol's steps as typed values (checked once, at the edge, by `shepherd.wire.parse`) and their
digests, which tell a true retry from another step."""

from __future__ import annotations

import hashlib
import math
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

import numpy as np
import orjson

from shepherd.wire.observations import suspect as holds_suspect

if TYPE_CHECKING:
    from shepherd.wire.experience import Experience

#: checks a client's action mask: (value, the agent's action space or None when it takes none, where) ->
#: the flat boolean mask; raises SpaceError
MaskCheck = Callable[[Any, Any, str], np.ndarray]


class BadRequest(ValueError):
    """The body is malformed or does not fit the agent's spaces."""


#: the largest reward magnitude a step or upload may carry by default (``run.py --max-reward``, carried on the
#: serving settings and each session's checks): one client's rewards must not overflow a pooled learner's
#: float32 arithmetic (returns, values, losses) for every client
DEFAULT_MAX_REWARD = 1e6


def check_max_reward(limit: float) -> float:
    """A bound on reward magnitudes as ``--max-reward`` gives it (inf: none). Raises ValueError unless it is
    positive."""
    if not limit > 0:
        raise ValueError("--max-reward must be positive (inf: no bound)")
    return float(limit)


def check_reward(value: float, where: str, limit: float) -> float:
    """``value`` when its magnitude is within ``limit``. Raises ValueError naming the bound and the option."""
    if abs(value) > limit:
        raise ValueError(f"{where} is {exact(value)}, beyond this server's bound of {exact(limit)} in magnitude (its "
                         "operator sets it with run.py --max-reward R); scale the rewards down")
    return value


def exact(value: float) -> str:
    """A number as a message shows it without rounding (issue 48: ``:g`` showed 1000001 as 1e+06): a whole
    number as one, any other as Python's shortest repr that reads back as the same float."""
    if math.isfinite(value) and float(value).is_integer() and abs(value) < 2 ** 53:
        return str(int(value))
    return repr(float(value))


class StepTaker(Protocol):
    """What a step is handed to (`Step.hand_to`): a session's level (`shepherd.level.Level`), one method per
    kind of step. Each returns the step's reply: an awaitable with ``done()`` and ``result()`` whose result
    is the action (None: the episode ended), or a vector step's list of actions."""

    def take_step(self, step: StepInput) -> Any: ...

    def take_vector_step(self, step: VectorStepInput) -> Any: ...

    def record_greedy(self, step: GreedyStep) -> Any: ...

    def record_greedy_vector(self, step: GreedyVectorStep) -> Any: ...

    def take_upload(self, step: Experience) -> Any: ...


class Step(Protocol):
    """A checked step of any kind, as a session takes it: its ``seq``, how many envs it carries (None: one
    env, not a vector step), its digest (a true retry repeats it; empty: never one), and ``hand_to``, which
    calls the level's method for its kind."""

    @property
    def seq(self) -> int | None: ...

    @property
    def n_envs(self) -> int | None: ...

    def digest(self) -> str: ...

    def hand_to(self, taker: StepTaker) -> Any: ...


@dataclass(frozen=True)
class EnvSteps:
    """The N envs' parts of one vector step, as columns (one item per env): ``obs[i]`` after env i's last
    action (the next episode's first when it ended), ``reward[i]`` for that action, and, when its episode
    ended (``ended[i]``), ``final_obs[i]`` and whether the end was a time limit (``truncated[i]``:
    bootstrapped) rather than terminal. ``masks[i]`` is env i's action mask for ``obs[i]`` (``masks`` None:
    no env sent one)."""

    obs: list[Any]
    reward: list[float]
    ended: list[bool]
    truncated: list[bool]
    final_obs: list[Any]
    masks: list[Any] | None = None


@dataclass(frozen=True)
class StepInput:
    """One checked step of the protocol; ``seq`` is the client's optional sequence number, ``mask`` its
    checked action mask for ``obs`` (None: every action allowed). ``suspect``: ``obs`` holds a number beyond
    `shepherd.wire.observations.SUSPECT_MAGNITUDE`, which the session asks its learners about before the step counts
    (`shepherd.graph.sessions.Session`); found once, where the step is checked."""

    obs: Any
    reward: float
    done: bool
    truncated: bool = False  # a time limit: the learner bootstraps instead of treating the end as terminal
    seq: int | None = None
    mask: Any = None
    suspect: bool = True

    n_envs = None  # not a vector step

    def digest(self) -> str:
        return fingerprint(self)

    def hand_to(self, taker: StepTaker) -> Any:
        return taker.take_step(self)

    @classmethod
    def of(cls, obs: Any, reward: Any, done: bool | None = None, terminated: bool | None = None,
           truncated: bool | None = None, seq: int | None = None, mask: Any = None,
           max_reward: float = DEFAULT_MAX_REWARD) -> StepInput:
        """A step from a checked observation and gymnasium's flags: ``done`` defaults to terminated or
        truncated, and the end is a time limit only when truncated and not also terminated.

        Raises:
            ValueError: the reward is not a finite number.
        """
        if isinstance(reward, bool) or not isinstance(reward, numbers.Real) or not math.isfinite(reward):
            raise ValueError("'reward' must be a finite number")
        check_reward(float(reward), "'reward'", max_reward)
        if done is None:
            done = bool(terminated) or bool(truncated)
        return cls(obs, float(reward), bool(done), bool(done and truncated and not terminated), seq, mask,
                   holds_suspect(obs))


@dataclass(frozen=True)
class VectorStepInput:
    """One checked step of a vector session, as columns with one item per env (`EnvSteps`); ``suspect`` as a
    `StepInput`'s, for any env's observation or last observation."""

    envs: EnvSteps
    seq: int | None = None
    suspect: bool = True

    @property
    def n_envs(self) -> int:
        return len(self.envs.obs)

    def digest(self) -> str:
        return vector_fingerprint(self)

    def hand_to(self, taker: StepTaker) -> Any:
        return taker.take_vector_step(self)

    @classmethod
    def of(cls, obs: Sequence[Any], reward: Sequence[Any], terminated: Sequence[bool], truncated: Sequence[bool],
           final_obs: Sequence[Any] | None = None, seq: int | None = None,
           masks: Sequence[Any] | None = None, max_reward: float = DEFAULT_MAX_REWARD,
           suspect: bool | None = None) -> VectorStepInput:
        """A vector step from checked observations and gymnasium's flags, with SB3 ``VecEnv``'s automatic
        reset: env i's end is a time limit only when truncated and not also terminated. ``suspect``: whether
        ``obs`` holds a suspect number, when the caller found it already (None: looked for here, row by row).

        Raises:
            ValueError: the lists differ in length, a reward is not a finite number, or an env that ended
                has no final observation (the message names the index).
        """
        n = len(obs)
        for name, values in (("reward", reward), ("terminated", terminated), ("truncated", truncated)):
            if len(values) != n:
                raise ValueError(f"'{name}' has {len(values)} items and 'obs' {n}: one per env")
        if masks is not None and len(masks) != n:
            raise ValueError(f"'action_mask' has {len(masks)} items and 'obs' {n}: one mask per env")
        if final_obs is not None and len(final_obs) != n:
            raise ValueError(f"'final_obs' has {len(final_obs)} items and 'obs' {n}: one per env (null where "
                             "the env did not end)")
        for i, value in enumerate(reward):
            if type(value) is not float and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
                raise ValueError(f"reward[{i}] must be a finite number")
        if not all(math.isfinite(value) for value in reward):
            raise ValueError(f"reward[{next(i for i, v in enumerate(reward) if not math.isfinite(v))}] must be "
                             "a finite number")
        for i, value in enumerate(reward):
            check_reward(value, f"reward[{i}]", max_reward)
        ended = [bool(a) or bool(b) for a, b in zip(terminated, truncated)]
        finals = list(final_obs) if final_obs is not None else [None] * n
        for i, (end, last) in enumerate(zip(ended, finals)):
            if end and last is None:
                raise ValueError(f"env {i} ended (terminated or truncated) but final_obs[{i}] is missing: send "
                                 "its last observation there, and the next episode's first in obs")
            if not end and last is not None:
                raise ValueError(f"final_obs[{i}] is given but env {i} did not end; send null there")
        limits = [bool(b) and not a for a, b in zip(terminated, truncated)]
        if suspect is None:
            suspect = any(holds_suspect(row) for row in obs)
        suspect = suspect or any(holds_suspect(last) for last in finals if last is not None)
        return cls(EnvSteps(list(obs), [float(value) for value in reward], ended, limits, finals,
                            None if masks is None else list(masks)), seq, suspect)


@dataclass(frozen=True)
class GreedyStep:
    """A step of an evaluate-mode session that a front end answered from its snapshot of the session's
    greedy policy (``run.py --front-ends K``, docs/front-ends.md): what the head records of it.

    ``fingerprint`` stands for the step's content (`fingerprint`: a retry must repeat it), ``action`` is the
    JSON action the front end chose (None when the episode ended) and ``version`` the policy version that
    chose it.
    """

    session_key: str
    fingerprint: str
    reward: float
    done: bool
    truncated: bool = False
    seq: int | None = None
    action: Any = None
    version: int = 0

    n_envs = None  # not a vector step

    def digest(self) -> str:
        """The front end's digest of the step (empty without a ``seq``: never a retry)."""
        return self.fingerprint

    def hand_to(self, taker: StepTaker) -> Any:
        return taker.record_greedy(self)

    def to_json(self) -> bytes:
        """The body of a front end's ``greedy`` item (`parse_greedy_step` reads it)."""
        return orjson.dumps({"session_key": self.session_key, "fingerprint": self.fingerprint,
                             "reward": self.reward, "done": self.done, "truncated": self.truncated, "seq": self.seq,
                             "action": self.action, "version": self.version})


@dataclass(frozen=True)
class GreedyVectorStep:
    """`GreedyStep` of a vector session: every env's reward, whether its episode ended, and the JSON
    actions the front end chose (one per env, in env order)."""

    session_key: str
    fingerprint: str
    reward: list[float]
    ended: list[bool]
    seq: int | None = None
    actions: list[Any] = field(default_factory=list)
    version: int = 0

    @property
    def n_envs(self) -> int:
        return len(self.reward)

    def digest(self) -> str:
        """The front end's digest of the step (empty without a ``seq``: never a retry)."""
        return self.fingerprint

    def hand_to(self, taker: StepTaker) -> Any:
        return taker.record_greedy_vector(self)

    def to_json(self) -> bytes:
        """The body of a front end's ``greedy`` item of a vector session (`parse_greedy_step` reads it)."""
        return orjson.dumps({"session_key": self.session_key, "fingerprint": self.fingerprint,
                             "reward": self.reward, "ended": self.ended, "seq": self.seq, "actions": self.actions,
                             "version": self.version})


def greedy_vector_step(session_key: str, step: VectorStepInput, actions: list[Any], version: int) -> GreedyVectorStep:
    """What a front end sends the head of a vector step it answered with ``actions`` (JSON, one per env)."""
    envs = step.envs
    return GreedyVectorStep(session_key, "" if step.seq is None else vector_fingerprint(step), envs.reward,
                            envs.ended, step.seq, actions, version)


def greedy_step(session_key: str, step: StepInput, action: Any, version: int) -> GreedyStep:
    """What a front end sends the head of a step it answered with ``action`` (JSON; None: the episode ended).
    A step without ``seq`` is never matched as a retry: it carries no digest."""
    return GreedyStep(session_key, "" if step.seq is None else fingerprint(step), step.reward, step.done,
                      step.truncated, step.seq, action, version)


def fingerprint(step: StepInput) -> str:
    """A digest of a checked step's content (observation, reward, flags, mask): two steps with the same
    digest are the same step, whichever process parsed them (a retry is checked against it)."""
    digest = hashlib.blake2b(digest_size=16)
    _digest_observation(digest, step.obs)
    digest.update(f"|{step.reward!r}|{step.done}|{step.truncated}|".encode())
    if step.mask is not None:
        digest.update(np.asarray(step.mask, dtype=bool).tobytes())
    return digest.hexdigest()


def vector_fingerprint(step: VectorStepInput) -> str:
    """`fingerprint` of a checked vector step: every env's observation, final observation, mask, reward
    and flags."""
    digest = hashlib.blake2b(digest_size=16)
    envs = step.envs
    for index, obs in enumerate(envs.obs):
        digest.update(f"env {index}|".encode())
        _digest_observation(digest, obs)
        if envs.final_obs[index] is not None:
            digest.update(b"|final|")
            _digest_observation(digest, envs.final_obs[index])
        if envs.masks is not None and envs.masks[index] is not None:
            digest.update(b"|mask|" + np.asarray(envs.masks[index], dtype=bool).tobytes())
    digest.update(f"|{envs.reward!r}|{envs.ended}|{envs.truncated}|".encode())
    return digest.hexdigest()


def _digest_observation(digest: Any, obs: Any) -> None:
    for key in sorted(obs) if isinstance(obs, dict) else [None]:
        array = np.asarray(obs if key is None else obs[key])
        digest.update(f"{key}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(np.ascontiguousarray(array).data)  # the buffer itself: no copy of a large observation
