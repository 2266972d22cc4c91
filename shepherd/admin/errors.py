"""The admin layer's domain errors; the HTTP middleware and the command line map each to one status."""

from __future__ import annotations


class Invalid(ValueError):
    """The input of an admin operation is wrong (a bad name, space, algorithm or parameter): 400."""


class Forbidden(PermissionError):
    """The caller is signed in but may not do this (an agent's key asking for an admin operation): 403."""


class Unavailable(RuntimeError):
    """The server that holds the data folder cannot be reached, or did not answer as expected."""
