"""``python run.py users``: add and list users (the people who own agents)."""

from __future__ import annotations

import argparse

from shepherd.cli.admin import add_data_option, command, table, when
from shepherd.cli.common import EXIT_OK


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("users", help="add and list users",
                                 description="Users own agents. A user has no password: each of their agents "
                                             "has its own API keys (see `keys`).")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="add a user", description="Add a user.")
    add.add_argument("name", help="1-64 letters, digits, '_', '.' or '-'")
    add_data_option(add)
    add.set_defaults(func=command(add_user, create=True))
    listing = actions.add_parser("list", help="list the users", description="List the users.")
    add_data_option(listing)
    listing.set_defaults(func=command(list_users))


async def add_user(operations, args: argparse.Namespace) -> int:
    user = await operations.add_user(args.name)
    print(f"user {user.name} added (id {user.id})")
    return EXIT_OK


async def list_users(operations, args: argparse.Namespace) -> int:
    users = await operations.users()
    print(table(["ID", "USER", "AGENTS", "CREATED"],
                [[u.id, u.name, u.agents, when(u.created)] for u in users]) if users else "no users")
    return EXIT_OK
