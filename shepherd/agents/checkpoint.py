"""The checkpoint: where an agent's model file lives and what it holds, known in this one place.

A checkpoint is stable-baselines3's own zip (loadable with ``PPO.load``) with one more member,
``shepherd.json``: the learner's counters (``learner``) and the graph's schedule progress (``schedule``).
It is written to a temporary file and renamed, so a reader never sees half of one.
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


def model_path(agent_folder: Path) -> Path:
    """Where an agent's checkpoint lives in its folder."""
    return agent_folder / MODEL_FILE


def write(path: Path, model_zip: bytes, learner: dict[str, Any], state: dict[str, Any]) -> None:
    """Add the counters and ``state`` to SB3's zip and write it atomically to ``path``."""
    buffer = io.BytesIO(model_zip)
    with zipfile.ZipFile(buffer, "a") as archive:
        archive.writestr(STATE_MEMBER, json.dumps({"learner": learner, **state}))
    atomic_write_bytes(path, buffer.getvalue())


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
