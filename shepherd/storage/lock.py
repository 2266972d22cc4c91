"""Who owns a data folder: an exclusive lock held by the one server (or admin command) using it, and the
server's address and local admin credential, published for the admin commands in a file only its user reads.

tinydb is not safe across processes, so exactly one process may open a data folder's store at a time. The
server holds ``server.lock`` (``fcntl.flock``) for as long as it runs; the operating system releases it when
the process ends, even on ``kill -9``. An admin command that finds the lock free works on the store itself
(holding the lock meanwhile, so that no server starts under it); one that finds it held reads
``server.json`` and forwards its operation to the running server's admin API.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from shepherd.storage.files import PRIVATE_FILE, atomic_write_bytes, make_private, private_data_folder
from shepherd.storage.store import StoreError

logger = logging.getLogger(__name__)

LOCK_FILE = "server.lock"
SERVER_FILE = "server.json"


class FolderBusy(StoreError):
    """Another process (a server, or an admin command working on the store) holds the data folder's lock."""


class DataFolderLock:
    """An exclusive, non-blocking ``flock`` on ``<data>/server.lock``.

    Raises (from `acquire`):
        FolderBusy: another process holds it.
    """

    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder)
        self._handle: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._handle is not None

    def acquire(self) -> None:
        """Take the lock, creating the data folder (0700, `private_data_folder`) and the lock file (0600)."""
        private_data_folder(self.folder)
        path = self.folder / LOCK_FILE
        handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, PRIVATE_FILE), "a+")
        make_private(path, PRIVATE_FILE)  # an earlier version's (0644), or a umask that kept too much
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise FolderBusy(f"another Shepherd server (or admin command) is using the data folder {self.folder}; "
                             "stop it, or give another --data") from None
        except BaseException:
            handle.close()
            raise
        self._handle = handle

    def try_acquire(self) -> bool:
        """Acquire the lock if it is free; returns whether it is now held."""
        try:
            self.acquire()
        except FolderBusy:
            return False
        return True

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None

    def __enter__(self) -> DataFolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True)
class ServerFile:
    """What a running server publishes for admin commands: where to reach it, and a per-run credential
    that acts as the admin token (the file is readable by its owner only)."""

    url: str
    credential: str
    pid: int


def write_server_file(folder: Path, info: ServerFile) -> None:
    """Publish ``info`` in ``<data>/server.json`` with mode 0600 (the temporary file is created so)."""
    payload = json.dumps({"url": info.url, "credential": info.credential, "pid": info.pid}).encode()
    atomic_write_bytes(Path(folder) / SERVER_FILE, payload)
    os.chmod(Path(folder) / SERVER_FILE, 0o600)


def read_server_file(folder: Path) -> ServerFile | None:
    """The running server's published address and credential, or None if there is none (yet)."""
    path = Path(folder) / SERVER_FILE
    try:
        data = json.loads(path.read_bytes())
        return ServerFile(str(data["url"]), str(data["credential"]), int(data["pid"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        logger.warning("%s is unreadable; ignored", path)
        return None


def remove_server_file(folder: Path, credential: str | None = None) -> None:
    """Withdraw ``<data>/server.json``; given the server's ``credential``, only if the file is still that
    server's (a server started since, once the lock was released, has written its own).

    Raises:
        OSError: the file is there but cannot be read or removed.
    """
    path = Path(folder) / SERVER_FILE
    if credential is not None:
        if path.is_dir():
            raise IsADirectoryError(21, "is a directory, not the server's file", str(path))
        published = read_server_file(folder)
        if published is not None and published.credential != credential:
            return
    path.unlink(missing_ok=True)
