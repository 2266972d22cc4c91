"""The lesson configs of a return log, each written once beside it: a record refers to a large config by the
byte offset of its line in the table (``config_at``), so that a log of many episodes of one config holds it once."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from shepherd.storage.files import PRIVATE_FILE, make_private, private_folder

logger = logging.getLogger(__name__)

#: a config whose JSON is at most this long is kept in its record: a reference would save next to nothing
INLINE_BYTES = 256
#: the configs a table remembers having written (to refer to them again) and having read (to resolve them
#: without a read): bounded, so that configs drawn anew each episode cost no memory beyond these
REMEMBERED = 256


def table_path(log: Path) -> Path:
    """The table beside a log: ``returns.jsonl.configs`` (never ``*.jsonl``, which names a client's log)."""
    return log.with_name(log.name + ".configs")


class ConfigTable:
    """An append-only file of configs, one JSON line each, referred to by the offset where the line starts.

    A config's line is written and flushed before the record that refers to it, so a record on disk always
    finds its config; a crash can tear only the table's last line, which no record refers to, and the next
    write starts on a fresh line. Reads are thread-safe and never take the writer's lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()  # the append handle and what it wrote
        self._handle: BinaryIO | None = None
        self._written: OrderedDict[bytes, int] = OrderedDict()  # a config's digest -> the offset of its line
        self._read_lock = threading.Lock()
        self._read: OrderedDict[int, tuple[dict[str, Any], int]] = OrderedDict()  # offset -> config, its size
        self._generation = 0  # one more at each `clear`: what was read of an older table is not this one's

    def refer(self, config: dict[str, Any]) -> dict[str, Any]:
        """The fields a record holds for ``config``: ``{"config": config}`` when small, else ``{"config_at":
        offset}`` after writing it to the table (once, if it was written recently)."""
        try:
            data = orjson.dumps(config)
        except orjson.JSONEncodeError:  # what orjson cannot write (an integer beyond 64 bits) stays inline
            return {"config": config}
        if len(data) <= INLINE_BYTES:
            return {"config": config}
        digest = hashlib.blake2b(data, digest_size=16).digest()
        with self._lock:
            offset = self._written.get(digest)
            if offset is None:
                offset = self._append(data + b"\n")
            self._remember(self._written, digest, offset)
        return {"config_at": offset}

    def _append(self, line: bytes) -> int:
        if self._handle is None:
            private_folder(self.path.parent)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
            make_private(self.path, PRIVATE_FILE)
            self._handle = os.fdopen(fd, "ab")
            size = self._handle.tell()
            if size:  # a line torn by a crash is left behind: no record refers to it
                with open(self.path, "rb") as reader:
                    reader.seek(size - 1)
                    if reader.read(1) != b"\n":
                        self._handle.write(b"\n")
        self._handle.flush()
        offset = self._handle.tell()
        self._handle.write(line)
        self._handle.flush()
        return offset

    def resolve(self, offset: object) -> dict[str, Any] | None:
        """The config whose line starts at ``offset``; None (logged) if there is none there."""
        return self.resolve_sized(offset)[0]

    def resolve_sized(self, offset: object) -> tuple[dict[str, Any] | None, int]:
        """`resolve`, and the config's size as JSON text (0 for none)."""
        with self.view() as view:
            return view.resolve_sized(offset)

    def view(self) -> TableView:
        """The table as it is now, for a reader of its log: it resolves through the file open now, so that a
        table cleared meanwhile (its log deleted) and begun anew under its name is never read in its place (the
        log's reader keeps the old log: its records then got the new table's configs). Open it where the log's
        reader is opened, under the lock its `clear` takes; close it with that reader."""
        with self._read_lock:  # (`clear` takes it: the file and its generation go together)
            try:
                handle: BinaryIO | None = open(self.path, "rb")
            except FileNotFoundError:
                handle = None
            return TableView(self, handle, self._generation)

    def _known(self, generation: int, offset: int) -> tuple[dict[str, Any], int] | None:
        with self._read_lock:
            known = self._read.get(offset) if generation == self._generation else None
            if known is not None:
                self._read.move_to_end(offset)
            return known

    def _keep(self, generation: int, offset: int, config: tuple[dict[str, Any], int]) -> None:
        with self._read_lock:
            if generation == self._generation:
                self._remember(self._read, offset, config)

    @staticmethod
    def _remember(table: OrderedDict, key: Any, value: Any) -> None:
        table[key] = value
        table.move_to_end(key)
        if len(table) > REMEMBERED:
            table.popitem(last=False)

    def clear(self) -> None:
        """Delete the table (its log is being deleted)."""
        with self._lock, self._read_lock:
            self._close_locked()
            self.path.unlink(missing_ok=True)
            self._written.clear()
            self._read.clear()
            self._generation += 1

    def sync(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.flush()
                os.fsync(self._handle.fileno())

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class TableView:
    """A `ConfigTable` as it was when a reader of its log opened (`ConfigTable.view`): configs are read through
    its open file, remembered in the table's memory only while the table is still that one."""

    def __init__(self, table: ConfigTable, handle: BinaryIO | None, generation: int) -> None:
        self._table, self._handle, self._generation = table, handle, generation

    def resolve(self, offset: object) -> dict[str, Any] | None:
        """The config whose line starts at ``offset``; None (logged) if there is none there."""
        return self.resolve_sized(offset)[0]

    def resolve_sized(self, offset: object) -> tuple[dict[str, Any] | None, int]:
        """`resolve`, and the config's size as JSON text (0 for none)."""
        name = self._table.path.name
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            logger.warning("%s: a record refers to no config (%r)", name, offset)
            return None, 0
        known = self._table._known(self._generation, offset)
        if known is not None:
            return known
        line = b""
        try:
            if self._handle is not None:
                self._handle.seek(offset)
                line = self._handle.readline()
            config = orjson.loads(line) if line.endswith(b"\n") else None
        except (OSError, orjson.JSONDecodeError):
            config = None
        if not isinstance(config, dict):
            logger.warning("%s: no config at %d", name, offset)
            return None, 0
        self._table._keep(self._generation, offset, (config, len(line)))
        return config, len(line)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()

    def __enter__(self) -> TableView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
