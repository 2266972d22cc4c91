"""The store's file: tinydb's storage kept in memory and written atomically, and the check of its shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tinydb.storages import Storage

from shepherd.storage.errors import StoreError
from shepherd.storage.files import atomic_write_bytes

AGENTS_FOLDER = "agents"


class AtomicJSONStorage(Storage):
    """A tinydb storage that keeps the database in memory and rewrites its file atomically.

    tinydb's own JSONStorage re-reads the file on every query and truncates it in place on every write,
    so a crash mid-write loses the store. Here reads cost nothing and a write is temp file + rename.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = Path(path)
        self._data: dict[str, Any] | None = None
        self._saved: bytes | None = None  # the file's bytes as last read or written (`write`)
        if self.path.exists():
            try:
                raw = self.path.read_bytes()
            except OSError as error:  # a folder, a file it may not read
                raise StoreError(f"{self.path} cannot be read ({error.strerror or error}): the store must be a file "
                                 "this user can read") from None
            if not raw.strip():  # never written so: every write is a whole store, renamed into place
                raise StoreError(f"{self.path} is empty: the store (users, agents, API keys, the admin token) was "
                                 f"lost. Restore it from a backup; to start a new store instead, move it and "
                                 f"{self.path.parent / AGENTS_FOLDER} away")
            try:
                loaded = json.loads(raw)
            except ValueError as error:
                raise StoreError(
                    f"{self.path} is damaged ({error}); restore it from a backup or move it away "
                    "to start with an empty store"
                ) from None
            if not isinstance(loaded, dict):
                raise StoreError(f"{self.path} is not a Shepherd store (top level is not an object)")
            problem = _shape_problem(loaded)
            if problem:
                raise StoreError(f"{self.path} is not a Shepherd store, or was damaged: {problem}; restore it "
                                 "from a backup")
            self._data, self._saved = loaded, raw

    def read(self) -> dict[str, Any] | None:
        return self._data

    def write(self, data: dict[str, Any]) -> None:
        """Write ``data`` (tinydb changed the dict `read` handed out, in place, before): on a failure (a full
        disk) the store in memory is the file's again, so that what the caller was told failed is not served,
        nor written by the next write."""
        raw = json.dumps(data, separators=(",", ":")).encode()
        try:
            atomic_write_bytes(self.path, raw)
        except BaseException:
            self._data = None if self._saved is None else json.loads(self._saved)
            raise
        self._data, self._saved = data, raw


NUMBER = (int, float)
ANY = object
#: the fields of each table's documents: name -> (types, required)
FIELDS: dict[str, dict[str, tuple[Any, bool]]] = {
    "users": {"name": (str, True), "created": (NUMBER, True)},
    "agents": {"owner_id": (int, True), "name": (str, True), "algorithm": (str, True),
               "observation_space": (ANY, True), "action_space": (ANY, True), "parameters": (dict, False),
               "sharing": (str, False), "filters": (dict, False), "created": (NUMBER, False), "last_active": (NUMBER, False),
               "lessons": (list, False), "level": (dict, False)},
    "api_keys": {"agent_id": (int, True), "hash": (str, True), "label": (str, True), "created": (NUMBER, True),
                 "revoked": (bool, False)},
    "environments": {"owner_id": (int, True), "name": (str, True), "definition": (dict, True),
                     "created": (NUMBER, False)},
    "environment_keys": {"environment_id": (int, True), "hash": (str, True), "label": (str, True),
                         "created": (NUMBER, True), "revoked": (bool, False)},
}
SETTINGS = {"admin_token": ("hash", str), "last_agent_id": ("value", int)}


def _shape_problem(data: dict[str, Any]) -> str | None:
    """What makes ``data`` not a store this version wrote (None if nothing): tables of documents by numeric
    id, each document with its table's fields of the right types."""
    for table, documents in data.items():
        if not isinstance(documents, dict):
            return f"table {table!r} is not an object"
        for doc_id, doc in documents.items():
            where = f"{table!r} document {doc_id!r}"
            if not doc_id.isdigit():
                return f"table {table!r} has the id {doc_id!r}, not a number"
            if not isinstance(doc, dict):
                return f"{where} is not an object"
            fields = FIELDS.get(table)
            if fields is not None:
                for name, (kind, required) in fields.items():
                    if name not in doc:
                        if required:
                            return f"{where} lacks {name!r}"
                    elif kind is not ANY and (not isinstance(doc[name], kind) or
                                              (kind is not bool and isinstance(doc[name], bool))):
                        return f"{where} has a {type(doc[name]).__name__} for {name!r}"
                unknown = set(doc) - set(fields)
                if unknown:
                    return f"{where} has unknown fields {sorted(unknown)}"
            elif table == "settings":
                setting = SETTINGS.get(doc.get("name"))  # type: ignore[arg-type]
                if setting is not None and not isinstance(doc.get(setting[0]), setting[1]):
                    return f"the setting {doc.get('name')!r} lacks its {setting[0]!r}"
    return None
