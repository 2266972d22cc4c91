"""``python run.py users``: add, list and delete users (the people who own agents)."""

from __future__ import annotations

import argparse

from shepherd.cli.admin import add_data_option, command, table, when
from shepherd.cli.common import EXIT_OK


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("users", help="add, list and delete users",
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
    delete = actions.add_parser("delete", help="delete a user (one who owns agents only with --with-agents)",
                                description="Delete a user. A user who owns agents is refused, naming them, "
                                            "unless --with-agents deletes them too (as `agents delete` does).")
    delete.add_argument("user", help="the user's name or id")
    delete.add_argument("--with-agents", action="store_true",
                        help="also delete the user's agents (sessions end, keys removed, folders to trash/)")
    add_data_option(delete)
    delete.set_defaults(func=command(delete_user))


async def add_user(operations, args: argparse.Namespace) -> int:
    user = await operations.add_user(args.name)
    print(f"user {user.name} added (id {user.id})")
    return EXIT_OK


async def list_users(operations, args: argparse.Namespace) -> int:
    users = await operations.users()
    print(table(["ID", "USER", "AGENTS", "CREATED"],
                [[u.id, u.name, u.agents, when(u.created)] for u in users]) if users else "no users")
    return EXIT_OK


async def delete_user(operations, args: argparse.Namespace) -> int:
    user_id = await operations.find_user(args.user)
    print((await operations.delete_user(user_id, args.with_agents)).message)
    return EXIT_OK
