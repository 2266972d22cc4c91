"""Crash-safe, private file writes: a file is either the old version or the new one, never half of each,
and only its owner reads it."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable

logger = logging.getLogger(__name__)

PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600
#: files only a Shepherd data folder holds (the store's, the server's lock): a folder with one is a data folder
DATA_FOLDER_MARKS = ("store.json", "server.lock")


def private_folder(folder: Path) -> None:
    """Create ``folder`` and its missing parents readable by their owner only (0700, whatever the umask);
    folders that exist are left as they are. Each new folder's parent is fsynced: a power cut after a file
    written in it was fsynced cannot lose the folder (and the file with it)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for created in reversed(missing):
        created.mkdir(mode=PRIVATE_FOLDER, exist_ok=True)
        os.chmod(created, PRIVATE_FOLDER)
        _fsync_dir(created.parent)


def private_data_folder(folder: Path) -> None:
    """Create a data folder (and its missing parents) readable by its owner only (0700). One that exists
    is made 0700 too when it is already a data folder (it holds one of `DATA_FOLDER_MARKS`: earlier versions
    created it 0755); any other existing folder (one chosen with ``--data``, perhaps shared) is left as it
    is, with a warning if others may read it.

    Raises:
        OSError: the folder cannot be created, or its mode not changed.
    """
    if not folder.exists():
        private_folder(folder)
        return
    if any((folder / mark).exists() for mark in DATA_FOLDER_MARKS):
        make_private(folder, PRIVATE_FOLDER)
    elif folder.is_dir() and folder.stat().st_mode & 0o077:
        logger.warning("the data folder %s may be read by others (mode %o); its files are 0600 all the same. "
                       "chmod 700 it, or give a new --data", folder, folder.stat().st_mode & 0o777)


def make_private(path: Path, mode: int) -> None:
    """Remove the group's and others' permissions from an existing file or folder (``mode``: what to keep)."""
    try:
        if path.stat().st_mode & 0o077:
            os.chmod(path, mode)
    except FileNotFoundError:
        pass


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a fsynced temporary file and an atomic rename. The file is readable
    by its owner only (0600), and so are the folders created for it (0700)."""
    atomic_write(path, lambda handle: handle.write(data))


class WriteAbandoned(OSError):
    """An atomic write given up before its rename: its writer is being stopped (`abandoned_when`)."""


_WRITER = threading.local()


@contextmanager
def abandoned_when(stop: threading.Event | None) -> Iterator[None]:
    """Within it, this thread's atomic writes are given up (`WriteAbandoned`, nothing renamed into place, no
    folder made) once ``stop`` is set: a learner discarded while it writes a checkpoint (an agent restarted or
    deleted, which then deletes or moves its files) must not land it afterwards."""
    previous, _WRITER.stop = getattr(_WRITER, "stop", None), stop
    try:
        yield
    finally:
        _WRITER.stop = previous


def _go_on(path: Path) -> None:
    stop: threading.Event | None = getattr(_WRITER, "stop", None)
    if stop is not None and stop.is_set():
        raise WriteAbandoned(f"{path}: not written, its writer is being stopped")


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """`atomic_write_bytes` for a file written piece by piece: ``write`` writes it into the open handle (a
    large file is never held in memory whole). Raises WriteAbandoned (`abandoned_when`)."""
    _go_on(path)
    private_folder(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        _go_on(path)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_stale_temporaries(folder: Path, nested: bool = False) -> None:
    """Delete temporaries left by a write that a crash interrupted, in ``folder`` (``nested``: and the folders
    in it, as an agent's: an advised client's checkpoint, the self-play's snapshot files)."""
    if folder.is_dir():
        for tmp in (folder.rglob if nested else folder.glob)(".*.tmp"):
            tmp.unlink(missing_ok=True)
