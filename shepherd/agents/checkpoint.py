"""The checkpoint: where an agent's model file lives and what it holds, known in this one place.

A checkpoint is stable-baselines3's own zip (loadable with ``PPO.load``) with two more members:
``shepherd.json``, the learner's counters (``learner``) and the graph's schedule progress (``schedule``), and
``shepherd-resume.pkl``, what the learner needs besides to go on exactly (its random generators' states, a
rollout filled in part: `shepherd.agents.sb3.resume`). An off-policy learner's replay buffer is a file beside
the zip (``replay_buffer.pkl``, SB3's ``save_replay_buffer`` format), written first and named in
``shepherd.json`` with its size and checksum, so that a zip is never read with another checkpoint's buffer.
Each file is written to a temporary file and renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

from shepherd.storage.files import atomic_write_bytes

MODEL_FILE = "model.zip"
STATE_MEMBER = "shepherd.json"
#: the zip's member with what the learner needs besides SB3's model to go on exactly (a pickle)
RESUME_MEMBER = "shepherd-resume.pkl"
#: an off-policy learner's replay buffer, beside the zip (SB3's ``save_replay_buffer`` format)
REPLAY_BUFFER_FILE = "replay_buffer.pkl"


def model_path(agent_folder: Path) -> Path:
    """Where an agent's checkpoint lives in its folder."""
    return agent_folder / MODEL_FILE


def replay_buffer_path(path: Path) -> Path:
    """Where the replay buffer of the checkpoint ``path`` lives: beside it."""
    return path.with_name(REPLAY_BUFFER_FILE)


def read_files(path: Path) -> dict[str, bytes]:
    """The checkpoint ``path`` and the replay buffer beside it (if there is one) as bytes by file name: what a
    checkpoint is when it crosses to another process (a learner's Ray actor and the head).

    Raises:
        OSError: the checkpoint cannot be read.
    """
    files = {MODEL_FILE: path.read_bytes()}
    try:
        files[REPLAY_BUFFER_FILE] = replay_buffer_path(path).read_bytes()
    except FileNotFoundError:
        pass
    return files


def write_files(path: Path, files: dict[str, bytes]) -> None:
    """Write what `read_files` gave as the checkpoint ``path``: the replay buffer first (or, without one, the
    old one removed), then the zip that names it, each atomically.

    Raises:
        OSError: a file cannot be written.
    """
    buffer = files.get(REPLAY_BUFFER_FILE)
    if buffer is None:
        replay_buffer_path(path).unlink(missing_ok=True)
    else:
        atomic_write_bytes(replay_buffer_path(path), buffer)
    atomic_write_bytes(path, files[MODEL_FILE])


def write(path: Path, model_zip: bytes, learner: dict[str, Any], state: dict[str, Any],
          members: dict[str, bytes] | None = None) -> None:
    """Add the counters, ``state`` and ``members`` (name -> bytes) to SB3's zip and write it atomically to
    ``path``."""
    buffer = io.BytesIO(model_zip)
    with zipfile.ZipFile(buffer, "a") as archive:
        archive.writestr(STATE_MEMBER, json.dumps({"learner": learner, **state}))
        for name, data in (members or {}).items():
            archive.writestr(name, data)
    atomic_write_bytes(path, buffer.getvalue())


def read_member(path: Path, name: str) -> bytes | None:
    """A member `write` added (None: the checkpoint has none, as those written before it existed).

    Raises:
        OSError, zipfile.BadZipFile: the file is missing or not a zip.
    """
    with zipfile.ZipFile(path) as archive:
        return archive.read(name) if name in archive.namelist() else None


def copy(source: Path, target: Path) -> None:
    """Write the model zip ``source`` as the checkpoint ``target``: as it is when it is a checkpoint, else (SB3's
    own zip, ``PPO.save``) with empty counters added.

    Raises:
        OSError, zipfile.BadZipFile: ``source`` cannot be read, or is not a zip; ``target`` cannot be written.
    """
    data = source.read_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        is_checkpoint = STATE_MEMBER in archive.namelist()
    if is_checkpoint:
        atomic_write_bytes(target, data)
    else:
        write(target, data, {}, {})


def read_state(path: Path) -> dict[str, Any]:
    """What `write` added: ``{"learner": ..., "schedule": ...}``.

    Raises:
        OSError, KeyError, ValueError, zipfile.BadZipFile: the file is missing or not a checkpoint.
    """
    with zipfile.ZipFile(path) as archive:
        state = json.loads(archive.read(STATE_MEMBER))
    if not isinstance(state, dict):
        raise ValueError(f"{STATE_MEMBER} in {path} is not an object")
    return state


def update_state(path: Path, changes: dict[str, Any]) -> None:
    """Set keys of a checkpoint's ``shepherd.json`` (the model and the learner's counters untouched), written
    atomically: how an agent no server serves is moved to a lesson (docs/lessons.md).

    Raises:
        OSError, KeyError, ValueError, zipfile.BadZipFile: the file is missing or not a checkpoint.
    """
    state = read_state(path)
    buffer = io.BytesIO()
    with zipfile.ZipFile(path) as old, zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as new:
        for member in old.infolist():
            if member.filename != STATE_MEMBER:
                new.writestr(member, old.read(member.filename))
        new.writestr(STATE_MEMBER, json.dumps({**state, **changes}))
    atomic_write_bytes(path, buffer.getvalue())


def saved_steps(path: Path) -> int:
    """The schedule's step count saved in a checkpoint (0 if there is none or it cannot be read)."""
    try:
        return int(read_state(path).get("schedule", {}).get("steps", 0))
    except (OSError, KeyError, ValueError, TypeError, AttributeError, zipfile.BadZipFile):
        return 0
