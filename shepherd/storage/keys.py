"""One kind of API key in the store: its table, the field naming what it opens (an agent, an environment with
roles), and an index of the unrevoked keys by hash, so that a login costs one dictionary lookup. Agents' keys and
environments' keys are two of these: the same rules, kept apart because their ids are their own."""

from __future__ import annotations

import threading
import time
from typing import Callable, Generic, TypeVar

from tinydb import Query
from tinydb.table import Document, Table

from shepherd.storage.errors import NotFound
from shepherd.storage.records import hash_key, new_secret

K = TypeVar("K")


class KeyTable(Generic[K]):
    """The keys of one kind: ``owner`` is the field of a key's document naming what it opens (``agent_id``),
    ``record`` makes a key's record of its document, ``what`` names a key in errors ("API key"). Every method
    takes the store's ``lock``."""

    def __init__(self, table: Table, owner: str, record: Callable[[Document], K], what: str,
                 lock: threading.RLock) -> None:
        self._table, self._owner, self._record, self._what, self._lock = table, owner, record, what, lock
        self._index: dict[str, int] = {doc["hash"]: doc[owner] for doc in table.all() if not doc.get("revoked")}

    def add(self, owner_id: int, label: str = "") -> tuple[str, K]:
        """A new key for ``owner_id``: the key itself (shown once, never stored) and its record."""
        with self._lock:
            key = new_secret()
            digest = hash_key(key)
            key_id = self._table.insert({self._owner: owner_id, "hash": digest, "label": label,
                                         "created": time.time(), "revoked": False})
            self._index[digest] = owner_id
            return key, self._record(self._table.get(doc_id=key_id))  # type: ignore[arg-type]

    def owner_of(self, digest: str) -> int | None:
        """What the unrevoked key whose `hash_key` is ``digest`` opens, or None."""
        with self._lock:  # a lookup by the SHA-256 of a 256-bit secret: its timing tells nothing of a key
            return self._index.get(digest)

    def revoke(self, key_id: int) -> str:
        """Refuse the key from now on; returns its `hash_key` (the sessions it opened are known by it).
        Raises NotFound."""
        with self._lock:
            doc = self._document(key_id)
            self._table.update({"revoked": True}, doc_ids=[key_id])
            self._index.pop(doc["hash"], None)
            return str(doc["hash"])

    def get(self, key_id: int) -> K:
        """Raises NotFound for an unknown id."""
        with self._lock:
            return self._record(self._document(key_id))

    def of(self, owner_id: int | None = None) -> list[K]:
        """The keys of ``owner_id`` (None: every key), revoked ones too."""
        with self._lock:
            docs = self._table.all() if owner_id is None else self._table.search(Query()[self._owner] == owner_id)
            return [self._record(doc) for doc in docs]

    def remove_owner(self, owner_id: int) -> list[str]:
        """Delete every key of ``owner_id`` (it is being deleted): refused from now on. Returns the `hash_key`s of
        those that were not revoked (the sessions they opened are known by them)."""
        with self._lock:
            live = [doc["hash"] for doc in self._table.search(Query()[self._owner] == owner_id)
                    if self._index.pop(doc["hash"], None) is not None]
            self._table.remove(Query()[self._owner] == owner_id)
            return live

    def _document(self, key_id: int) -> Document:
        doc = self._table.get(doc_id=key_id)
        if doc is None:
            raise NotFound(f"no {self._what} with id {key_id}")
        return doc
