"""Another data folder's agents, read without opening its store: nothing written, no lock taken (a server may
serve that folder meanwhile; its store file is only ever replaced whole)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tinydb import TinyDB

from shepherd.storage.errors import StoreError
from shepherd.storage.jsonfile import AGENTS_FOLDER, AtomicJSONStorage
from shepherd.storage.records import AgentRecord
from shepherd.storage.store import STORE_FILE


@dataclass(frozen=True)
class StoredAgent:
    """An agent of another data folder: its owner's name, its record, and its folder there (its models)."""

    owner: str
    record: AgentRecord
    folder: Path


def read_agents(folder: Path) -> list[StoredAgent]:
    """The agents of the data folder ``folder``, as its store file holds them now.

    Raises:
        StoreError: the folder has no store file, or a damaged one.
    """
    path = Path(folder) / STORE_FILE
    if not path.is_file():
        raise StoreError(f"{folder} is not a Shepherd data folder (it has no {STORE_FILE})")
    database = TinyDB(str(path), storage=AtomicJSONStorage)
    try:
        owners = {doc.doc_id: doc["name"] for doc in database.table("users").all()}
        return [StoredAgent(owners.get(doc["owner_id"], f"user{doc['owner_id']}"), AgentRecord(id=doc.doc_id, **doc),
                            Path(folder) / AGENTS_FOLDER / str(doc.doc_id))
                for doc in database.table("agents").all()]
    finally:
        database.close()
