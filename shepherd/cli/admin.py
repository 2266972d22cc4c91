"""What the admin commands share: the ``--data`` option, running one operation on a data folder (on its
store, or through the server that holds it), plain-text tables, and one-line errors.

Exit status: 0 done, 2 wrong input (an unknown agent, a bad space or parameter, a name taken, ...),
1 a server holds the data folder but cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
from typing import Any, Callable, Coroutine, Sequence

from shepherd.arguments import data_folder
from shepherd.cli.common import EXIT_USAGE, UsageError

EXIT_UNAVAILABLE = 1

Work = Callable[[Any, argparse.Namespace], Coroutine[Any, Any, int]]


def add_data_option(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: given after the command it wins, otherwise the top-level --data (default ./shepherd-data) holds
    parser.add_argument("--data", type=data_folder, default=argparse.SUPPRESS,
                        help="data folder (default ./shepherd-data); when a server holds it, the command is "
                             "sent to that server")


def command(work: Work, create: bool = False) -> Callable[[argparse.Namespace], int]:
    """An argparse ``func`` that runs ``work(operations, args)`` on the data folder, mapping every domain
    error to a one-line message (exit status 2, or 1 when the server cannot be reached)."""

    def run(args: argparse.Namespace) -> int:
        from shepherd.admin import Forbidden, Invalid, Unavailable
        from shepherd.admin.connect import connect
        from shepherd.graph import Conflict, Unauthorized
        from shepherd.storage import AlreadyExists, NotFound, StoreError

        try:
            with connect(args.data, create=create, bounds=args.bounds) as operations:
                return asyncio.run(work(operations, args))
        except Unavailable as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        except (Invalid, NotFound, AlreadyExists, Forbidden, Unauthorized, Conflict, StoreError) as error:
            raise UsageError(str(error)) from None

    return run


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns, two spaces apart."""
    cells = [[str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in [list(headers), *cells]) for i in range(len(headers))]
    lines = ["  ".join(value.ljust(width) for value, width in zip(row, widths)).rstrip()
             for row in [list(headers), *cells]]
    return "\n".join(lines)


def when(seconds: float | None) -> str:
    if not seconds:
        return "-"
    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


__all__ = ["EXIT_UNAVAILABLE", "EXIT_USAGE", "add_data_option", "command", "table", "when"]
