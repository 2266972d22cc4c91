"""Append-only episode-return logs: one JSON line per episode, so recording a return costs O(1) and reading
what is new costs only what is new."""

from __future__ import annotations

import json
import logging
import os
import threading
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import orjson

from shepherd.storage.configs import ConfigTable, TableView, table_path
from shepherd.storage.files import PRIVATE_FILE, make_private, private_folder

logger = logging.getLogger(__name__)

PHASES = {name: name for name in ("heatup", "train", "evaluate", "deploy", "trial")}
SCAN_BYTES = 1 << 20  # the index is built, and a curve read, in blocks of this size


@dataclass(frozen=True, slots=True)
class EpisodeReturn:
    """One finished episode: wall time (UNIX seconds), return, length in steps, phase name, and the client
    name of an advised agent's client (None for a pooled agent, and in logs written before clients had
    names: such a line has no ``client`` field)."""

    time: float
    value: float
    length: int
    phase: str
    client: str | None = None
    lesson: str | None = None  # the lesson its config was drawn from (docs/lessons.md; None: no lessons)
    config: dict | None = None  # its config, as the client was told

    def to_json(self) -> dict[str, object]:
        """The record as an object (a reply's): without ``client``, ``lesson`` and ``config`` when it has none.
        A log line holds a large config by reference instead (see `ReturnLog.append`)."""
        fields: dict[str, object] = {"time": self.time, "value": self.value, "length": self.length,
                                     "phase": self.phase, "client": self.client, "lesson": self.lesson,
                                     "config": self.config}  # not asdict: it deep-copies, ~20 us an episode
        for name in OPTIONAL_FIELDS:
            if fields[name] is None:
                del fields[name]
        return fields


@dataclass(frozen=True)
class ReturnsPage:
    """The returns from ``offset`` on, of ``total`` recorded; ``reset`` says the curve was deleted since the
    caller's last read (its ``offset`` and ``first`` no longer match), so that everything is sent again."""

    total: int
    offset: int
    reset: bool
    returns: list[EpisodeReturn] = field(default_factory=list)


@dataclass(frozen=True)
class ReturnsJson:
    """A `ReturnsPage` whose records are JSON text: ``pieces`` of objects separated by commas (a list, or, read
    lazily, an iterator whose every ``next`` reads one piece of the file: call it off the event loop), from
    ``size`` bytes of the file."""

    total: int
    offset: int
    reset: bool
    pieces: Iterable[bytes] = field(default_factory=list)
    size: int = 0


FIELDS = frozenset(("time", "value", "length", "phase"))
#: the fields of a client's record (an advised agent's)
CLIENT_FIELDS = FIELDS | {"client"}
#: the fields a record has only when set: its client, its lesson and its config
OPTIONAL_FIELDS = ("client", "lesson", "config")
ALL_FIELDS = FIELDS | set(OPTIONAL_FIELDS)
#: a log line's field that refers to its config in the log's `ConfigTable` (instead of ``config``)
CONFIG_AT = "config_at"
LINE_FIELDS = ALL_FIELDS | {CONFIG_AT}


#: how far back from the end of a log a crash's torn line is looked for (a record's line is far shorter)
TORN_BYTES = 1 << 20


def _complete(line: bytes) -> bool:
    """Whether a line (with its newline) is a whole record as `ReturnLog.append` writes it: a torn write is a
    prefix of one, and the only ``}`` of a record is its last character, so a torn line never passes."""
    return line.startswith(b"{") and line.endswith(b"}\n")


def _whole_lines(data: bytes, name: str) -> Iterator[bytes]:
    """The lines of a log that are whole records (with their newline); a torn one is logged and skipped."""
    for line in data.splitlines(keepends=True):
        if _complete(line):
            yield line
        elif line.strip():
            logger.warning("%s: an incomplete line is skipped", name)


def _weighed(data: bytes, name: str, configs: TableView) -> Iterator[tuple[EpisodeReturn, int]]:
    """The records of whole lines of a log, their configs resolved, each with its size as text (its line's,
    and its config's when it refers to one); lines that are not whole records are skipped."""
    for line in _whole_lines(data, name):
        try:
            fields = json.loads(line)
            fields["phase"] = PHASES.get(fields.get("phase"), fields.get("phase"))  # one string per phase name
            size = len(line)
            if CONFIG_AT in fields:
                fields["config"], config_size = configs.resolve_sized(fields.pop(CONFIG_AT))
                size += config_size
            record = EpisodeReturn(**fields)
        except (ValueError, TypeError):
            logger.warning("%s: a damaged line is skipped", name)
            continue
        yield record, size


def _parse(data: bytes, name: str, configs: TableView) -> list[EpisodeReturn]:
    """The records of whole lines of a log, their configs resolved; lines that are not whole records are
    skipped."""
    return [record for record, _ in _weighed(data, name, configs)]


def _blocks(reader: BinaryIO, start: int, end: int, block_bytes: int = SCAN_BYTES) -> Iterator[bytes]:
    """The bytes from ``start`` to ``end`` in blocks of about ``block_bytes`` that end at the end of a line
    (a line longer than a block is one block): each C-level call on a block (splitting it, say) is short,
    so that a thread reading a long curve leaves the event loop its turns."""
    position = start
    reader.seek(position)
    while position < end:
        block = reader.read(min(block_bytes, end - position))
        if not block:
            return
        cut = block.rfind(b"\n") + 1
        if cut and cut < len(block):
            block = block[:cut]
            reader.seek(position + cut)
        elif not cut and position + len(block) < end:  # a line longer than a block: read on to its end
            block += reader.readline(end - position - len(block))
        position += len(block)
        yield block


class _JsonPieces:
    """The records of a range of a log as JSON text, about `SCAN_BYTES` of it per ``next`` (at least one
    record), read from the file as needed; the file is closed at the end, or by `close` (read or not). A curve
    deleted meanwhile is still read whole: the open file outlives its name. Pieces are bounded as text, not as
    file: a short line may refer to a large config (see `ConfigTable`)."""

    def __init__(self, reader: BinaryIO, start: int, end: int, name: str, configs: TableView) -> None:
        self._reader, self._configs = reader, configs
        self._objects = (piece for block in _blocks(reader, start, end, SCAN_BYTES)
                         for piece in _json_objects(block, name, configs))

    def __iter__(self) -> _JsonPieces:
        return self

    def __next__(self) -> bytes:
        objects: list[bytes] = []
        size = 0
        for item in self._objects:
            objects.append(item)
            size += len(item) + 1
            if size >= SCAN_BYTES:
                break
        if not objects:
            self.close()
            raise StopIteration
        return b",".join(objects)

    def close(self) -> None:
        self._reader.close()
        self._configs.close()

    def __del__(self) -> None:  # a read given up before it began (a cancelled request): the files still close
        self.close()


def _json_objects(data: bytes, name: str, configs: TableView) -> Iterator[bytes]:
    """The records of whole lines of a log as JSON objects, their configs resolved; other lines are skipped."""
    for line in _whole_lines(data, name):
        try:
            fields = orjson.loads(line)
        except orjson.JSONDecodeError:
            try:  # Infinity, say, which json writes and orjson does not read: sent as null, as orjson writes it
                fields = json.loads(line)
                line = orjson.dumps(fields) + b"\n"
            except ValueError:
                fields = None
        if not isinstance(fields, dict) or not FIELDS <= fields.keys() <= LINE_FIELDS:
            logger.warning("%s: a damaged line is skipped", name)
            continue
        if CONFIG_AT in fields:  # the only lines rewritten: as the record was, its config in place
            fields["config"] = configs.resolve(fields.pop(CONFIG_AT))
            line = orjson.dumps(fields) + b"\n"
        yield line[:-1]


@dataclass
class Reading:
    """A log open for a read, with its config table as it was then (`ConfigTable.view`)."""

    log: BinaryIO
    configs: TableView

    def close(self) -> None:
        self.log.close()
        self.configs.close()

    def __enter__(self) -> Reading:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReturnLog:
    """The episode returns of one agent, in a JSON-lines file that is only ever appended to.

    The file is its owner's only (0600), like the store. A crash can leave at most a partial last line; reading skips it, and the next append starts on a
    fresh line, so no complete record is ever lost or damaged.

    Reads keep an index of where each record's line starts, extended by scanning only the bytes appended
    since the last read, so that a poll for the new returns reads and parses only those. An append holds
    the log's lock only to write its line; reads take it just to flush and note the file's size, and scan
    and parse under a lock of their own, so a long read never delays an append (an episode's end).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.configs = ConfigTable(table_path(path))
        self._lock = threading.Lock()  # the append handle
        self._read_lock = threading.Lock()  # the index; taken before ``_lock``, never after
        self._handle: BinaryIO | None = None
        self._needs_newline = False
        self._starts = array("q")  # byte offset of each whole record's line
        self._scanned = 0  # bytes of the file indexed (always at the end of a line)
        self._first_time: float | None = None

    def _open(self) -> BinaryIO:
        if self._handle is None:
            private_folder(self.path.parent)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
            make_private(self.path, PRIVATE_FILE)  # a log created by an earlier version was 0644
            self._handle = os.fdopen(fd, "ab")
            size = self._handle.tell()
            if size:
                with open(self.path, "rb") as reader:
                    reader.seek(max(0, size - TORN_BYTES))
                    tail = reader.read()
                if not tail.endswith(b"\n"):  # a line torn by a crash: cut off, since one torn after a config's
                    kept = tail.rfind(b"\n") + 1  # inner "}" would pass as whole once a newline ended it
                    if kept or size <= TORN_BYTES:
                        os.ftruncate(fd, size - len(tail) + kept)
                        logger.warning("%s: a line torn by a crash (%d bytes) is cut off", self.path.name,
                                       len(tail) - kept)
                    else:
                        self._needs_newline = True  # (no line end that near: ended instead, as before)
        return self._handle

    def append(self, record: EpisodeReturn) -> None:
        """Write one record; a large config goes to the log's table once and the line refers to it (its
        line written first, so that a record on disk always finds it)."""
        fields = record.to_json()
        with self._lock:  # held while the config is written, so that `clear` cannot come between the two
            if record.config is not None:
                del fields["config"]
                fields.update(self.configs.refer(record.config))
            line = json.dumps(fields, separators=(",", ":")).encode() + b"\n"
            handle = self._open()
            if self._needs_newline:
                line = b"\n" + line
                self._needs_newline = False
            handle.write(line)
            handle.flush()

    # -- reads -----------------------------------------------------------------------------------
    def _size(self) -> int:
        """The size of the file as of now, everything appended so far flushed (0 if there is none)."""
        with self._lock:
            if self._handle is not None:
                self._handle.flush()
            try:
                return self.path.stat().st_size
            except FileNotFoundError:
                return 0

    def _update_index(self, reader: BinaryIO, size: int, configs: TableView) -> None:
        """Index the whole lines between what was scanned and ``size``; called with ``_read_lock`` held."""
        if size < self._scanned:  # replaced behind our back (by hand): start again
            self._reset_index()
        position = self._scanned
        reader.seek(position)
        while position < size:
            block = reader.read(min(SCAN_BYTES, size - position))
            end = block.rfind(b"\n") + 1
            if not end:
                if len(block) < SCAN_BYTES:
                    break  # a torn last line: wait for its newline
                end = len(block)  # one huge line with no newline yet: scan on (it can never pass anyway)
            start = 0
            for line in block[:end].splitlines(keepends=True):
                if _complete(line):
                    self._starts.append(position + start)
                start += len(line)
            position += end
            if end < len(block):
                reader.seek(position)
        self._scanned = position
        if self._first_time is None and self._starts:  # the first record that parses (a line damaged otherwise
            reader.seek(self._starts[0])  # than torn is indexed, and skipped by every read)
            for _ in range(min(len(self._starts), 100)):
                first = _parse(reader.readline(), self.path.name, configs)
                if first:
                    self._first_time = first[0].time
                    break

    def _reset_index(self) -> None:
        self._starts = array("q")
        self._scanned = 0
        self._first_time = None

    def _range(self, offset: int, first: float | None) -> tuple[Reading | None, ReturnsPage, int, int]:
        """An open reader of the log and of its configs, the page's counts (without its records), and the byte
        range of the records from ``offset`` on (see `page`); indexes what was appended since the last read."""
        with self._read_lock:
            size = self._size()
            reading = self._reading()
            if reading is None:
                self._reset_index()
                return None, ReturnsPage(0, 0, offset != 0), 0, 0
            try:
                self._update_index(reading.log, size, reading.configs)
                total = len(self._starts)
                reset = offset < 0 or offset > total or (
                    offset > 0 and first is not None and self._first_time != first)
                if reset:
                    offset = 0
                start = self._starts[offset] if offset < total else self._scanned
                return reading, ReturnsPage(total, offset, reset), start, self._scanned
            except BaseException:
                reading.close()
                raise

    def _reading(self) -> Reading | None:
        """The log and its config table, opened together (under the read lock, which `clear` takes): a curve
        deleted while they are read is read whole, each record with its own config (None: no log)."""
        try:
            log = open(self.path, "rb")
        except FileNotFoundError:
            return None
        try:
            return Reading(log, self.configs.view())
        except BaseException:  # (the table cannot be opened: EMFILE, say) the log is not left open
            log.close()
            raise

    def page(self, offset: int = 0, first: float | None = None) -> ReturnsPage:
        """The returns from record ``offset`` on. A caller that polls passes the number of records it has
        and the time of its first one; if the curve was deleted since (``offset`` beyond the end, or another
        first record), it gets everything with ``reset`` set. Reads and parses only the records it returns."""
        reading, page, start, end = self._range(offset, first)
        if reading is None:
            return page
        with reading:  # a curve deleted from here on is still read whole: the open files outlive their names
            page.returns.extend(record for block in _blocks(reading.log, start, end)
                                for record in _parse(block, self.path.name, reading.configs))
        return page

    def page_json(self, offset: int = 0, first: float | None = None, lazy: bool = False) -> ReturnsJson:
        """`page`, with the records as JSON text instead of objects: for a reply, checked line by line but
        without making a million objects (which the garbage collector would then walk, GIL held). ``lazy``:
        the pieces are read one by one as the caller iterates (a whole curve, streamed), the file open till then
        (the iterator closes it when done, or when it is closed)."""
        reading, page, start, end = self._range(offset, first)
        pieces: Iterable[bytes] = [] if reading is None else _JsonPieces(reading.log, start, end, self.path.name,
                                                                         reading.configs)
        if not lazy:
            pieces = list(pieces)
        return ReturnsJson(page.total, page.offset, page.reset, pieces, end - start)

    def read(self) -> list[EpisodeReturn]:
        """Every return recorded."""
        return self.page().returns

    def chunks(self, chunk_bytes: int | None = None) -> Iterator[list[EpisodeReturn]]:
        """Every return recorded so far, in lists of about ``chunk_bytes`` of the file each: for a long curve
        read a piece at a time (each ``next`` reads and parses one piece; None: `SCAN_BYTES`, read at each call). The file is opened at the first
        ``next``; a curve deleted meanwhile is read to its end all the same."""
        with self._read_lock:
            size = self._size()
            reading = self._reading()
        if reading is None:
            return
        limit = chunk_bytes or SCAN_BYTES
        with reading:  # lists of about ``limit`` as text: a short line may refer to a large config
            records: list[EpisodeReturn] = []
            weight = 0
            for block in _blocks(reading.log, 0, size, limit):
                for record, record_size in _weighed(block, self.path.name, reading.configs):
                    records.append(record)
                    weight += record_size
                    if weight >= limit:
                        yield records
                        records, weight = [], 0
                if records:  # as before: a list per block at most, so a poll of a short log is one list
                    yield records
                    records, weight = [], 0

    def clear(self) -> None:
        with self._read_lock, self._lock:
            self.close_locked()
            self.path.unlink(missing_ok=True)
            self._reset_index()
            self.configs.clear()

    def sync(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.flush()
                os.fsync(self._handle.fileno())
        self.configs.sync()

    def close(self) -> None:
        with self._lock:
            self.close_locked()
        self.configs.close()

    def close_locked(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
