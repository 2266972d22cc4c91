"""What a checkpoint holds beyond SB3's zip so that a restart is invisible to learning (issue 48): the random
generators the learner draws from, an on-policy rollout filled in part, and an off-policy learner's replay
buffer (SB3's own pickle, beside the zip) with the part of a row not stored yet.

The rules, each the one that makes a restart between two steps change nothing:

- **Random generators**: the process's (python's ``random``, numpy's global one, torch's CPU one: SB3 draws
  actions, minibatches, epsilon and replay samples from them) and the action space's (``action_space.sample()``,
  random actions in heatup), saved as they are after the last step the checkpoint holds and set back at
  restore. They are the process's: with several learners in one process their draws interleave (threads), so
  only an agent alone in its process (or in its Ray actor) resumes exactly.
- **Sessions do not survive a restart**: a checkpoint holds the learner as it would be had every session
  logged out at that moment. An on-policy rollout keeps every row with a reward; a row still waiting for its
  reward is dropped and its value bootstraps the row before, as at a logout (`OnPolicyAdapter._leave_segment`),
  and every segment is free (the next writer starts it as a new episode). SB3's action-noise objects are
  per session (copies of the model's, which never draws), so they end with their sessions too.
- **Off-policy**: the replay buffer is SB3's ``save_replay_buffer`` file, written (atomically, streamed) before the
  zip, which names it with its size and CRC-32; at restore a buffer that is missing, of another size or
  checksum (a crash between the two writes, a copied zip) or of another shape (changed parameters) is not
  used: the learner then refills it before training again, as without one. ``checkpoint_replay_buffer:
  false`` leaves it out (a smaller, faster checkpoint; a restart then forgets what the agent learned from).
"""

from __future__ import annotations

import logging
import pickle
import random
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Iterator

import numpy as np
import torch as th
from gymnasium import spaces

from shepherd.agents import checkpoint
from shepherd.agents.sb3.segments import Segments
from shepherd.storage.files import atomic_write

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm

    from shepherd.agents.sb3.off_policy import OffPolicyAdapter
    from shepherd.agents.sb3.on_policy import OnPolicyAdapter

logger = logging.getLogger(__name__)


# -- random generators ---------------------------------------------------------------------------------
def _spaces(space: spaces.Space) -> Iterator[spaces.Space]:
    """A space and the spaces inside it (a Dict's, a Tuple's): each samples with a generator of its own."""
    yield space
    inner: Any = getattr(space, "spaces", None)
    for part in (inner.values() if isinstance(inner, dict) else inner or ()):
        yield from _spaces(part)


def generators(model: BaseAlgorithm) -> dict[str, Any]:
    """The states of the generators a learner draws from (picklable)."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": th.get_rng_state().numpy(),
            "action_space": [space.np_random.bit_generator.state for space in _spaces(model.action_space)]}


def set_generators(model: BaseAlgorithm, state: dict[str, Any]) -> None:
    """Set the generators back to states `generators` gave."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    th.set_rng_state(th.from_numpy(np.asarray(state["torch"], dtype=np.uint8).copy()))
    for space, saved in zip(_spaces(model.action_space), state.get("action_space", [])):
        space.np_random.bit_generator.state = saved


# -- an on-policy rollout filled in part ----------------------------------------------------------------
def rollout_state(adapter: OnPolicyAdapter) -> dict[str, Any] | None:
    """The rollout collected so far as a restart finds it (every session gone); None if it is empty."""
    segments = adapter.segments
    if segments.untouched:
        return None
    buffer = adapter.buffer
    # the rows' arrays, (n_steps, n_envs, ...) or (n_steps, layers, n_envs, hidden): a subclass's too (masks, LSTM
    # states, advice), not what get() derives from them for training (RecurrentPPO's sequence indices)
    arrays: dict[str, Any] = {name: value for name, value in vars(buffer).items()
                              if isinstance(value, np.ndarray) and value.ndim >= 2 and len(value) == buffer.buffer_size}
    if isinstance(buffer.observations, dict):
        arrays["observations"] = dict(buffer.observations)
    rewards = arrays["rewards"] = buffer.rewards.copy()
    for actor in adapter._actors.values():  # each session leaves as at its logout
        segment = actor.segment
        if segment is not None and actor.pending and segments.position[segment] > 0:
            row, column = segments.at(segment)
            if buffer.episode_starts[row, column]:  # the pending row starts a stretch: row - 1 is not its episode's
                continue
            rewards[row - 1, column] += adapter.model.gamma * buffer.values[row, column]
    return {"arrays": arrays, **segments.state()}


def load_rollout(adapter: OnPolicyAdapter, state: dict[str, Any] | None) -> None:
    """Take back a rollout `rollout_state` gave (before the learner starts); one whose arrays do not fit the
    buffer now (changed ``n_steps`` or ``n_envs``) is dropped with a warning, its steps not learned from."""
    if state is None:
        return
    buffer: Any = adapter.buffer
    arrays = state["arrays"]
    fits = all(_shapes(getattr(buffer, name, None)) == _shapes(value) for name, value in arrays.items())
    if not fits:
        logger.warning("agent %s: the rollout saved with its checkpoint does not fit its buffer now (n_steps or "
                       "n_envs changed); its %d steps are not learned from", adapter.name,
                       arrays["rewards"].size - state["rows_left"])
        return
    for name, value in arrays.items():
        if isinstance(value, dict):
            for key, part in value.items():
                buffer.observations[key][...] = part
        else:
            getattr(buffer, name)[...] = value
    adapter.segments = Segments.load(adapter.n_segments, adapter.n_steps, state)


def _shapes(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _shapes(part) for key, part in value.items()}
    return (value.shape, value.dtype) if isinstance(value, np.ndarray) else None


# -- an off-policy replay buffer -------------------------------------------------------------------------
class _Checksummed:
    """A file being written, with the CRC-32 and size of what went into it."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.crc, self.size = handle, 0, 0

    def write(self, data: Any) -> int:
        self.crc = zlib.crc32(data, self.crc)
        self.size += memoryview(data).nbytes
        return self.handle.write(data)


def write_replay_buffer(adapter: OffPolicyAdapter, path: Path) -> dict[str, Any]:
    """Write the adapter's replay buffer beside the checkpoint ``path`` (SB3's ``save_replay_buffer`` format,
    atomically); what the zip's counters say of it."""
    target = checkpoint.replay_buffer_path(path)
    written: list[_Checksummed] = []

    def dump(handle: BinaryIO) -> None:
        out = _Checksummed(handle)
        written.append(out)
        pickle.dump(adapter.model.replay_buffer, out, protocol=pickle.HIGHEST_PROTOCOL)

    atomic_write(target, dump)
    return {"file": target.name, "bytes": written[0].size, "crc32": written[0].crc,
            "transitions": int(adapter.model.replay_buffer.size()) * adapter._n_envs}  # type: ignore[union-attr]


def _kind(buffer: Any) -> type:
    """SB3's class of a replay buffer (a masked one's, `shepherd.agents.sb3.value_masks`, is SB3's with masks
    added: a checkpoint's from before masks is taken over)."""
    return next(cls for cls in type(buffer).__mro__ if cls.__module__.startswith("stable_baselines3"))


def load_replay_buffer(adapter: OffPolicyAdapter, path: Path, saved: Any) -> bool:
    """Load the replay buffer the checkpoint ``path`` names (``saved``: its counters' description) into the
    model; whether it did (False: none was saved, or the file is not that one, or it does not fit the model)."""
    if not isinstance(saved, dict):
        return False
    target = path.with_name(str(saved.get("file", checkpoint.REPLAY_BUFFER_FILE)))
    try:
        crc, size = 0, 0
        with open(target, "rb") as handle:
            while chunk := handle.read(1 << 22):
                crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    except FileNotFoundError:  # deleted, or a checkpoint copied alone (run.py -crd, -crf)
        logger.info("agent %s: no replay buffer beside its checkpoint (%s)", adapter.name, target)
        return False
    except OSError as error:
        logger.warning("agent %s: its replay buffer %s cannot be read (%s)", adapter.name, target, error)
        return False
    if (size, crc) != (saved.get("bytes"), saved.get("crc32")):
        logger.warning("agent %s: %s is not the replay buffer its checkpoint was written with (a crash between "
                       "the two writes?)", adapter.name, target)
        return False
    model, fresh = adapter.model, adapter.model.replay_buffer
    model.load_replay_buffer(target)
    loaded: Any = model.replay_buffer
    if (_kind(loaded), loaded.buffer_size, loaded.n_envs, _shapes(loaded.observations)) != (
            _kind(fresh), fresh.buffer_size, fresh.n_envs, _shapes(fresh.observations)):  # type: ignore[union-attr]
        logger.warning("agent %s: the saved replay buffer does not fit its parameters now (buffer_size or n_envs "
                       "changed)", adapter.name)
        model.replay_buffer = fresh
        return False
    return True
