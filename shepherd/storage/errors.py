"""The store's domain errors."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The data folder cannot be used as it is (for example, a damaged store file)."""


class NotFound(LookupError):
    """A user, agent or key named in a store operation does not exist."""


class AlreadyExists(ValueError):
    """A user or agent with that name exists already."""
