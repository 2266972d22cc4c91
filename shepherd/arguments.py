"""The argparse types of the numbers every command line takes (`run.py`, the deploy server, a front end): each
refuses what compared false with every bound and so passed the checks after parsing (``nan`` seconds: sessions that
never expire, steps that time out at once; a port past 65535, which the address check wrapped). Light: the deploy
server and the front ends import it without torch."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

#: the largest seed: numpy's and SB3's seeds are unsigned 32-bit numbers
MAX_SEED = 2**32 - 1


def seconds(text: str) -> float:
    """A positive, finite number of seconds.

    Raises:
        argparse.ArgumentTypeError: naming the value (argparse prints it in one line, exit status 2).
    """
    value = _number(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def rate(text: str) -> float:
    """A finite number of at least 0 (``--rate-limit``: 0 is no limit)."""
    value = _number(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number of at least 0 (0: no limit), not {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: a free one). A larger one passed the address check, which wraps it (70000 is
    4464), and failed at the bind, after the store, its admin token and keys were made and could not be shown."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to 65535, not {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535 (0: a free one), not {value}")
    return value


def seed(text: str) -> int:
    """A seed, 0 to 2**32 - 1 (numpy's bounds). Another reached the learners and was reported as the preset's
    fault ("agent 'x': PPO rejected its parameters")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to {MAX_SEED}, not {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_SEED} (2**32 - 1), not {value}")
    return value


def data_folder(text: str) -> Path:
    """A data folder: one that exists, or a path where none is yet (the server makes it). A file there was
    reported as the address's fault ("cannot serve on 127.0.0.1:8000: Not a directory")."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder")
    return path


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
