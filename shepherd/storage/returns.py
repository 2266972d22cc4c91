"""Append-only episode-return logs: one JSON line per episode, so recording a return costs O(1)."""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodeReturn:
    """One finished episode: wall time (UNIX seconds), return, length in steps, phase name."""

    time: float
    value: float
    length: int
    phase: str


class ReturnLog:
    """The episode returns of one agent, in a JSON-lines file that is only ever appended to.

    A crash can leave at most a partial last line; reading skips it, and the next append starts on a
    fresh line, so no complete record is ever lost or damaged.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._handle = None
        self._needs_newline = False

    def _open(self):
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.path, "ab")
            size = self._handle.tell()
            if size:
                with open(self.path, "rb") as reader:
                    reader.seek(size - 1)
                    self._needs_newline = reader.read(1) != b"\n"
        return self._handle

    def append(self, record: EpisodeReturn) -> None:
        line = json.dumps(asdict(record), separators=(",", ":")).encode() + b"\n"
        with self._lock:
            handle = self._open()
            if self._needs_newline:
                line = b"\n" + line
                self._needs_newline = False
            handle.write(line)
            handle.flush()

    def read(self) -> list[EpisodeReturn]:
        with self._lock:
            if self._handle is not None:
                self._handle.flush()
            if not self.path.exists():
                return []
            records = []
            with open(self.path, "rb") as reader:
                for number, line in enumerate(reader, 1):
                    try:
                        records.append(EpisodeReturn(**json.loads(line)))
                    except (ValueError, TypeError):
                        if line.strip():
                            logger.warning("%s line %d is incomplete; skipped", self.path.name, number)
            return records

    def clear(self) -> None:
        with self._lock:
            self.close_locked()
            self.path.unlink(missing_ok=True)

    def sync(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.flush()
                os.fsync(self._handle.fileno())

    def close(self) -> None:
        with self._lock:
            self.close_locked()

    def close_locked(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
