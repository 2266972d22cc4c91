"""The tinydb store of a data folder: users, agents, environments with roles, hashed API keys, algorithms,
parameters, returns."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tinydb import Query, TinyDB
from tinydb.table import Document

from shepherd.definition import Sharing
from shepherd.storage.records import AgentRecord, ApiKey, EnvironmentKey, EnvironmentRecord, User, hash_key, new_secret
from shepherd.storage.files import (PRIVATE_FILE, PRIVATE_FOLDER, make_private, private_data_folder,
                                    remove_stale_temporaries)
from shepherd.storage.errors import AlreadyExists, NotFound, StoreError
from shepherd.storage.jsonfile import AGENTS_FOLDER, AtomicJSONStorage
from shepherd.storage.keys import KeyTable
from shepherd.storage.returns import EpisodeReturn, ReturnLog, ReturnsJson, ReturnsPage

logger = logging.getLogger(__name__)

STORE_FILE = "store.json"
RETURNS_FILE = "returns.jsonl"
#: the folder of an agent's folder with each client's own returns (an advised agent's), ``<client>.jsonl``
CLIENT_RETURNS_FOLDER = "client-returns"
#: where a deleted agent's folder goes (model, returns), inside the data folder: delete it to free the space
TRASH_FOLDER = "trash"


def _tidy_agent_folders(agents: Path) -> None:
    """Agents' folders 0700 and their returns 0600, as this version creates them (earlier ones did not), and
    no temporary left by a checkpoint write that a crash interrupted."""
    if not agents.is_dir():
        return
    make_private(agents, PRIVATE_FOLDER)
    for folder in agents.iterdir():
        if folder.is_dir() and not folder.is_symlink():
            make_private(folder, PRIVATE_FOLDER)
            make_private(folder / RETURNS_FILE, PRIVATE_FILE)
            for path in (folder / CLIENT_RETURNS_FOLDER).glob("*.jsonl"):
                make_private(path, PRIVATE_FILE)
            remove_stale_temporaries(folder, nested=True)


class Store:
    """All access to a data folder's tinydb file and return logs, serialised by one lock.

    Raises:
        StoreError: the store file is damaged or is not a Shepherd store.
    """

    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder)
        private_data_folder(self.folder)
        remove_stale_temporaries(self.folder)
        agents = self.folder / AGENTS_FOLDER
        _tidy_agent_folders(agents)
        if not (self.folder / STORE_FILE).exists() and agents.is_dir() and any(agents.iterdir()):
            raise StoreError(f"{self.folder / STORE_FILE} is missing but {agents} holds agents' models and "
                             "returns: the store (users, agents, API keys, the admin token) was lost. Restore it "
                             f"from a backup; to start a new store instead, move {agents} away")
        self._lock = threading.RLock()
        self._db = TinyDB(str(self.folder / STORE_FILE), storage=AtomicJSONStorage)
        self._users = self._db.table("users")
        self._agents = self._db.table("agents")
        self._keys = self._db.table("api_keys")
        self._algorithms = self._db.table("algorithms")
        self._parameters = self._db.table("parameters")
        self._settings = self._db.table("settings")
        self._environments = self._db.table("environments")
        self._environment_keys = self._db.table("environment_keys")  # apart: an agent's key names an agent id
        self._returns: dict[tuple[int, str | None], ReturnLog] = {}  # by agent id and client (None: the agent's)
        self._agent_keys = KeyTable(self._keys, "agent_id", _api_key, "API key", self._lock)
        self._env_keys = KeyTable(self._environment_keys, "environment_id", _environment_key, "environment key",
                                  self._lock)

    # -- users ---------------------------------------------------------------------------------
    def add_user(self, name: str) -> User:
        with self._lock:
            if self._users.get(Query().name == name) is not None:
                raise AlreadyExists(f"user {name!r} exists already")
            created = time.time()
            # never the id of an owner missing from the store (a damaged or hand-edited one): the new user
            # would silently own that owner's agents
            orphaned = [doc["owner_id"] for doc in self._agents.all() if self._users.get(doc_id=doc["owner_id"]) is None]
            if orphaned:
                user_id = max([*(doc.doc_id for doc in self._users.all()), *orphaned]) + 1
                self._users.insert(Document({"name": name, "created": created}, doc_id=user_id))
            else:
                user_id = self._users.insert({"name": name, "created": created})
            return User(id=user_id, name=name, created=created)

    def ensure_user(self, name: str) -> User:
        with self._lock:
            doc = self._users.get(Query().name == name)
            if doc is None:
                return self.add_user(name)
            return User(id=doc.doc_id, **doc)

    def users(self) -> list[User]:
        with self._lock:
            return [User(id=doc.doc_id, **doc) for doc in self._users.all()]

    def user(self, user_id: int) -> User:
        """Raises NotFound for an unknown id."""
        with self._lock:
            doc = self._users.get(doc_id=user_id)
            if doc is None:
                raise NotFound(f"no user with id {user_id}")
            return User(id=doc.doc_id, **doc)

    def find_user(self, name: str) -> User | None:
        with self._lock:
            doc = self._users.get(Query().name == name)
            return None if doc is None else User(id=doc.doc_id, **doc)

    # -- agents --------------------------------------------------------------------------------
    def add_agent(self, owner_id: int, name: str, algorithm: str, observation_space: Any,
                  action_space: Any, parameters: dict[str, Any], sharing: str = Sharing.POOLED.value,
                  filters: dict[str, Any] | None = None,
                  lessons: list[dict[str, Any]] | None = None,
                  level: dict[str, Any] | None = None) -> AgentRecord:
        with self._lock:
            if self._users.get(doc_id=owner_id) is None:
                raise NotFound(f"no user with id {owner_id}")
            if self._agents.get((Query().owner_id == owner_id) & (Query().name == name)) is not None:
                raise AlreadyExists(f"this user has an agent named {name!r} already")
            now = time.time()
            doc = {"owner_id": owner_id, "name": name, "algorithm": algorithm,
                   "observation_space": observation_space, "action_space": action_space,
                   "parameters": dict(parameters), "sharing": sharing, "filters": dict(filters or {}),
                   "created": now, "last_active": now}
            if lessons:  # left out when none: a store stays readable by versions before lessons
                doc["lessons"] = list(lessons)
            if level is not None:  # likewise: a flat agent's record is as before levels
                doc["level"] = dict(level)
            agent_id = self._new_agent_id()
            self._agents.insert(Document(doc, doc_id=agent_id))
            return AgentRecord(id=agent_id, **doc)

    def _new_agent_id(self) -> int:
        """An id no agent has had (the last one given is kept) and whose folder does not exist: a new agent
        never inherits another's model or returns."""
        last = self._settings.get(Query().name == "last_agent_id")
        agent_id = max([last["value"] if last else 0, *(doc.doc_id for doc in self._agents.all())]) + 1
        while self.agent_folder(agent_id).exists():
            logger.warning("%s belongs to no stored agent; a new agent gets another id", self.agent_folder(agent_id))
            agent_id += 1
        self._settings.upsert({"name": "last_agent_id", "value": agent_id}, Query().name == "last_agent_id")
        return agent_id

    def find_agent(self, owner_id: int, name: str) -> AgentRecord | None:
        with self._lock:
            doc = self._agents.get((Query().owner_id == owner_id) & (Query().name == name))
            return None if doc is None else AgentRecord(id=doc.doc_id, **doc)

    def agent(self, agent_id: int) -> AgentRecord:
        with self._lock:
            doc = self._agents.get(doc_id=agent_id)
            if doc is None:
                raise NotFound(f"no agent with id {agent_id}")
            return AgentRecord(id=doc.doc_id, **doc)

    def agents(self) -> list[AgentRecord]:
        with self._lock:
            return [AgentRecord(id=doc.doc_id, **doc) for doc in self._agents.all()]

    def update_agent(self, agent_id: int, **changes: Any) -> AgentRecord:
        with self._lock:
            self.agent(agent_id)
            self._agents.update(changes, doc_ids=[agent_id])
            return self.agent(agent_id)

    def remove_agent(self, agent_id: int) -> None:
        """Delete an agent that has no API key yet (undoing an `add_agent` whose learner could not be built).

        Raises:
            NotFound: no such agent.
            ValueError: the agent has API keys.
        """
        with self._lock:
            self.agent(agent_id)
            if self._agent_keys.of(agent_id):
                raise ValueError(f"agent {agent_id} has API keys; it cannot be removed")
            self._agents.remove(doc_ids=[agent_id])

    def agent_folder(self, agent_id: int) -> Path:
        return self.folder / AGENTS_FOLDER / str(agent_id)

    def delete_agent(self, agent_id: int) -> Path | None:
        """Delete an agent: its record and its API keys (refused from now on), and move its folder (model,
        returns) to ``trash/AGENT_ID-NAME-TIME`` in the data folder; returns where it went (None when the
        agent had no folder). Its id is never given again.

        Raises:
            NotFound: no such agent.
        """
        with self._lock:
            record = self.agent(agent_id)
            self._agent_keys.remove_owner(agent_id)
            self._agents.remove(doc_ids=[agent_id])
            for key in [key for key in self._returns if key[0] == agent_id]:
                self._returns.pop(key).close()
            return self._to_trash(agent_id, record.name)

    def trash_late_folder(self, agent_id: int, name: str) -> Path | None:
        """Move a deleted agent's folder to the trash again (``AGENT_ID-NAME-TIME-late``): its learner, which did
        not stop within the delete's wait, made it anew where the agent's had been (a checkpoint it was writing);
        returns where it went (None: no such folder, or the agent is not deleted)."""
        with self._lock:
            if self._agents.contains(doc_id=agent_id):
                return None
            return self._to_trash(agent_id, name, "-late")

    def _to_trash(self, agent_id: int, name: str, suffix: str = "") -> Path | None:
        folder = self.agent_folder(agent_id)
        if not folder.exists():
            return None
        trash = self.folder / TRASH_FOLDER
        trash.mkdir(exist_ok=True)
        make_private(trash, PRIVATE_FOLDER)
        target = trash / f"{agent_id}-{name}-{time.strftime('%Y%m%d-%H%M%S')}{suffix}"
        folder.rename(target)
        return target

    def delete_user(self, user_id: int) -> list[str]:
        """Delete a user who owns no agent, with the user's environments with roles and their keys; returns the
        `hash_key`s of those keys that were not revoked (the sessions they opened are known by them).

        Raises:
            NotFound: no such user.
            ValueError: the user owns agents (the message names them).
        """
        with self._lock:
            user = self.user(user_id)
            owned = self._agents.search(Query().owner_id == user_id)
            if owned:
                raise ValueError(f"user {user.name} owns {len(owned)} agent(s): "
                                 + ", ".join(f"{user.name}/{doc['name']}" for doc in owned))
            keys = [digest for doc in self._environments.search(Query().owner_id == user_id)
                    for digest in self._env_keys.remove_owner(doc.doc_id)]
            self._environments.remove(Query().owner_id == user_id)
            self._users.remove(doc_ids=[user_id])
            return keys

    # -- API keys ------------------------------------------------------------------------------
    def add_api_key(self, agent_id: int, label: str = "") -> tuple[str, ApiKey]:
        """Create a key for an agent; returns the key itself (shown once, never stored) and its record."""
        with self._lock:
            self.agent(agent_id)
            return self._agent_keys.add(agent_id, label)

    def agent_for_key(self, key: str) -> AgentRecord | None:
        """The agent a valid, unrevoked API key belongs to, or None."""
        return self.agent_for_digest(hash_key(key))

    def agent_for_digest(self, digest: str) -> AgentRecord | None:
        """The agent of the valid, unrevoked API key whose `hash_key` is ``digest``, or None."""
        with self._lock:
            agent_id = self._agent_keys.owner_of(digest)
            return None if agent_id is None else self.agent(agent_id)

    def revoke_api_key(self, key_id: int) -> str:
        """Refuse the key from now on; returns its `hash_key` (the sessions it opened are known by it)."""
        return self._agent_keys.revoke(key_id)

    def api_key(self, key_id: int) -> ApiKey:
        """Raises NotFound for an unknown id."""
        return self._agent_keys.get(key_id)

    def api_keys(self, agent_id: int | None = None) -> list[ApiKey]:
        return self._agent_keys.of(agent_id)

    # -- environments with roles (`shepherd.environments`) -------------------------------------------
    def put_environment(self, owner_id: int, name: str, definition: dict[str, Any]) -> tuple[EnvironmentRecord, bool]:
        """Store an owner's environment (its definition replaced if it exists); returns it and whether it is new."""
        with self._lock:
            self.user(owner_id)
            query = (Query().owner_id == owner_id) & (Query().name == name)
            doc = self._environments.get(query)
            if doc is not None:
                if doc["definition"] != definition:
                    self._environments.update({"definition": definition}, doc_ids=[doc.doc_id])
                return EnvironmentRecord(doc.doc_id, owner_id, name, definition, doc["created"]), False
            created = time.time()
            env_id = self._environments.insert({"owner_id": owner_id, "name": name, "definition": definition,
                                                "created": created})
            return EnvironmentRecord(env_id, owner_id, name, definition, created), True

    def environments(self) -> list[EnvironmentRecord]:
        with self._lock:
            return [EnvironmentRecord(doc.doc_id, **doc) for doc in self._environments.all()]

    def find_environment(self, owner_id: int, name: str) -> EnvironmentRecord | None:
        with self._lock:
            doc = self._environments.get((Query().owner_id == owner_id) & (Query().name == name))
            return None if doc is None else EnvironmentRecord(doc.doc_id, **doc)

    def environment(self, environment_id: int) -> EnvironmentRecord:
        """Raises NotFound for an unknown id."""
        with self._lock:
            doc = self._environments.get(doc_id=environment_id)
            if doc is None:
                raise NotFound(f"no environment with id {environment_id}")
            return EnvironmentRecord(doc.doc_id, **doc)

    def add_environment_key(self, environment_id: int, label: str = "") -> tuple[str, EnvironmentKey]:
        """Create a key for an environment; returns the key itself (shown once, never stored) and its record."""
        with self._lock:
            self.environment(environment_id)
            return self._env_keys.add(environment_id, label)

    def environment_for_key(self, key: str) -> EnvironmentRecord | None:
        """The environment a valid, unrevoked environment key belongs to, or None."""
        with self._lock:
            environment_id = self._env_keys.owner_of(hash_key(key))
            return None if environment_id is None else self.environment(environment_id)

    def revoke_environment_key(self, key_id: int) -> str:
        """Refuse the environment's key from now on; returns its `hash_key` (the sessions it opened are known by it)."""
        return self._env_keys.revoke(key_id)

    def environment_key(self, key_id: int) -> EnvironmentKey:
        """Raises NotFound for an unknown id."""
        return self._env_keys.get(key_id)

    def environment_keys(self, environment_id: int | None = None) -> list[EnvironmentKey]:
        return self._env_keys.of(environment_id)

    # -- the admin token -----------------------------------------------------------------------
    def admin_token_hash(self) -> str | None:
        """The `hash_key` of the admin token, or None before the first server start."""
        with self._lock:
            doc = self._settings.get(Query().name == "admin_token")
            return None if doc is None else doc["hash"]

    def set_admin_token_hash(self, digest: str) -> None:
        with self._lock:
            self._settings.upsert({"name": "admin_token", "hash": digest}, Query().name == "admin_token")

    # -- algorithms and parameters -------------------------------------------------------------
    def put_algorithms(self, algorithms: list[dict[str, Any]], parameters: list[dict[str, Any]]) -> None:
        """Replace the algorithm and parameter tables with the registry's current content."""
        with self._lock:
            if self._algorithms.all() == algorithms and self._parameters.all() == parameters:
                return
            self._algorithms.truncate()
            self._parameters.truncate()
            self._algorithms.insert_multiple(algorithms)
            self._parameters.insert_multiple(parameters)

    def algorithms(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(doc) for doc in self._algorithms.all()]

    def parameters(self, algorithm: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(doc) for doc in self._parameters.search(Query().algorithm == algorithm)]

    # -- episode returns -----------------------------------------------------------------------
    # An agent's curve (``returns.jsonl``) holds every episode; an advised agent's records name their client,
    # and each client's are also in a log of its own, so that one client's curve is read, and polled, without
    # scanning the others'.
    def _return_log(self, agent_id: int, client: str | None = None) -> ReturnLog:
        with self._lock:
            log = self._returns.get((agent_id, client))
            if log is None:
                folder = self.agent_folder(agent_id)
                path = folder / RETURNS_FILE if client is None else folder / CLIENT_RETURNS_FOLDER / f"{client}.jsonl"
                log = self._returns[(agent_id, client)] = ReturnLog(path)
            return log

    def append_return(self, agent_id: int, record: EpisodeReturn) -> None:
        """Record an episode in the agent's curve, and in its client's if it names one."""
        self._return_log(agent_id).append(record)
        if record.client is not None:
            self._return_log(agent_id, record.client).append(record)

    def returns(self, agent_id: int, client: str | None = None) -> list[EpisodeReturn]:
        return self._return_log(agent_id, client).read()

    def returns_page(self, agent_id: int, offset: int = 0, first: float | None = None,
                     client: str | None = None) -> ReturnsPage:
        """The returns (of one client, if named) from ``offset`` on, parsing only those (see `ReturnLog.page`)."""
        return self._return_log(agent_id, client).page(offset, first)

    def returns_json(self, agent_id: int, offset: int = 0, first: float | None = None,
                     client: str | None = None, lazy: bool = False) -> ReturnsJson:
        """`returns_page` with the records as JSON text (see `ReturnLog.page_json`; ``lazy``: read as iterated)."""
        return self._return_log(agent_id, client).page_json(offset, first, lazy)

    def returns_chunks(self, agent_id: int, chunk_bytes: int | None = None,
                       client: str | None = None) -> Iterator[list[EpisodeReturn]]:
        """Every return (of one client, if named), a piece at a time (see `ReturnLog.chunks`)."""
        log = self._return_log(agent_id, client)
        return log.chunks() if chunk_bytes is None else log.chunks(chunk_bytes)

    def return_clients(self, agent_id: int) -> list[str]:
        """The client names that have a curve of their own (an advised agent's that finished an episode)."""
        folder = self.agent_folder(agent_id) / CLIENT_RETURNS_FOLDER
        if not folder.is_dir():
            return []
        return sorted(path.stem for path in folder.glob("*.jsonl"))

    def clear_returns(self, agent_id: int) -> None:
        """Delete an agent's learning curve, its clients' with it; the next `append_return` starts a new one."""
        with self._lock:
            names = set(self.return_clients(agent_id)) | {
                client for (owner, client) in self._returns if owner == agent_id and client is not None}
        self._return_log(agent_id).clear()
        for client in sorted(names):
            self._return_log(agent_id, client).clear()

    def close(self) -> None:
        with self._lock:
            for log in self._returns.values():
                log.sync()
                log.close()
            self._db.close()


def _api_key(doc: Document) -> ApiKey:
    return ApiKey(doc.doc_id, doc["agent_id"], doc["label"], doc["created"], doc.get("revoked", False))


def _environment_key(doc: Document) -> EnvironmentKey:
    return EnvironmentKey(doc.doc_id, doc["environment_id"], doc["label"], doc["created"], doc.get("revoked", False))


__all__ = ["AgentRecord", "ApiKey", "AlreadyExists", "EpisodeReturn", "NotFound", "ReturnsJson", "ReturnsPage", "Store",
           "StoreError", "User", "hash_key", "new_secret"]

