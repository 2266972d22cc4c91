"""Persistence of a data folder: the tinydb store, return logs and atomic files."""

from shepherd.storage.files import atomic_write_bytes
from shepherd.storage.lock import (DataFolderLock, FolderBusy, ServerFile, read_server_file, remove_server_file,
                                   write_server_file)
from shepherd.storage.returns import EpisodeReturn, ReturnLog, ReturnsJson, ReturnsPage
from shepherd.storage.records import AgentRecord, ApiKey, EnvironmentKey, EnvironmentRecord, User, hash_key, new_secret
from shepherd.storage.store import AlreadyExists, NotFound, Store, StoreError

__all__ = ["AgentRecord", "AlreadyExists", "ApiKey", "DataFolderLock", "EnvironmentKey", "EnvironmentRecord", "EpisodeReturn", "FolderBusy", "NotFound",
           "ReturnLog", "ReturnsJson", "ReturnsPage", "ServerFile", "Store", "StoreError", "User",
           "atomic_write_bytes", "hash_key", "new_secret", "read_server_file", "remove_server_file",
           "write_server_file"]
