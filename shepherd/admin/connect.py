"""Admin operations on a data folder from outside the server: on the store itself when no server holds
the folder, forwarded to the running server's admin API (with the credential it published) when one does.

tinydb is not safe across processes, so a command never opens a store that a server has open: the
server's ``flock`` on ``server.lock`` decides. A command working locally holds that lock meanwhile, so a
server started during it waits for nothing and fails with a clear message instead of sharing the store.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Iterator, Union

from shepherd.admin.errors import Invalid, Unavailable
from shepherd.admin.records import ADMIN
from shepherd.agents.bounds import DEFAULT_BOUNDS, ParameterBounds
from shepherd.admin.remote import RemoteOperations
from shepherd.admin.service import AdminService, Operations
from shepherd.storage import DataFolderLock, Store, read_server_file
from shepherd.storage.store import STORE_FILE

logger = logging.getLogger(__name__)

AnyOperations = Union[Operations, RemoteOperations]

#: how long to wait for a server that holds the folder to publish its address (it does once it listens)
PUBLISH_WAIT_SECONDS = 15.0


@contextlib.contextmanager
def connect(folder: Path, create: bool = False, bounds: ParameterBounds = DEFAULT_BOUNDS) -> Iterator[AnyOperations]:
    """Admin operations (as the admin) on the data folder ``folder``.

    ``create`` allows starting a new data folder (adding the first user); otherwise a missing folder is
    an error, so that a mistyped ``--data`` creates nothing. ``bounds`` hold parameter values on a folder that
    no server serves (a running server holds its own).

    Raises:
        Invalid: there is no data folder at ``folder``.
        Unavailable: a server holds the folder but cannot be reached.
        StoreError: the store file is damaged.
    """
    folder = Path(folder)
    if not create and not (folder / STORE_FILE).exists():
        raise Invalid(f"no Shepherd data folder at {folder} (no {STORE_FILE}); give --data, or start a server "
                      "or add a user there first")
    lock = DataFolderLock(folder)
    deadline = time.monotonic() + PUBLISH_WAIT_SECONDS
    while True:
        if lock.try_acquire():
            try:
                store = Store(folder)
                try:
                    yield AdminService(store, bounds=bounds).acting_as(ADMIN)
                finally:
                    store.close()
            finally:
                lock.release()
            return
        remote = _published(folder)
        if remote is not None:
            yield remote
            return
        if time.monotonic() > deadline:
            raise Unavailable(f"another process holds the data folder {folder} and publishes no server address; "
                              "if it is a server still starting, or another admin command, try again")
        time.sleep(0.2)  # a server still starting, or another command working on the store


def _published(folder: Path) -> RemoteOperations | None:
    """The running server's admin API, if it has published its address yet."""
    try:
        info = read_server_file(folder)
    except PermissionError:
        raise Unavailable(f"a server holds {folder}, but its server.json is not readable by this user; "
                          "run the command as the user who runs the server") from None
    if info is None:
        return None
    logger.info("forwarding to the server at %s (pid %d)", info.url, info.pid)
    return RemoteOperations(info.url, info.credential)
