"""``python run.py keys`` and ``admin-token``: API keys (one agent each, or one environment with roles; printed
once, stored hashed) and the admin token that signs in to everything."""

from __future__ import annotations

import argparse

from shepherd.cli.admin import add_data_option, command, table, when
from shepherd.cli.common import EXIT_OK, UsageError


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("keys", help="add, list and revoke API keys",
                                 description="An API key logs a client in to one agent, and signs in to that "
                                             "agent's dashboard page; an environment's logs a client in to all "
                                             "its roles (docs/how-to/multi-agent.md). It is printed once; the "
                                             "store keeps only its hash.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="create a key for an agent or an environment with roles",
                             description="Create an API key: an agent's, or an environment's with roles (its key "
                                         "logs a client in to all its roles: docs/how-to/multi-agent.md).")
    add.add_argument("agent", help="the agent (its id, owner/name, or a name only one agent has), or an environment "
                                   "(OWNER/ENVIRONMENT)")
    add.add_argument("--label", default="", help="a note on what the key is for")
    add_data_option(add)
    add.set_defaults(func=command(add_key))
    listing = actions.add_parser("list", help="list keys (not the keys themselves)",
                                 description="List API keys: agents' (ids 1, 2, ...) and environments' (ids e1, e2, "
                                             "...).")
    listing.add_argument("agent", nargs="?", help="only this agent's keys, or this environment's (OWNER/ENVIRONMENT)")
    add_data_option(listing)
    listing.set_defaults(func=command(list_keys))
    revoke = actions.add_parser("revoke", help="revoke a key by its id",
                                description="Revoke an API key, an agent's or an environment's: new logins with it "
                                            "are refused and the sessions it opened on a running server end.")
    revoke.add_argument("key_id", help="the key's id, from `keys list`: N for an agent's key, eN for an "
                                       "environment's")
    add_data_option(revoke)
    revoke.set_defaults(func=command(revoke_key))

    token = commands.add_parser("admin-token", help="replace the admin token and print the new one",
                                description="Replace the admin token (which signs in to every agent); the old "
                                            "one stops working. The new one is printed once.")
    add_data_option(token)
    token.set_defaults(func=command(reset_admin_token))


async def add_key(operations, args: argparse.Namespace) -> int:
    from shepherd.storage import NotFound

    try:
        agent_id = await operations.resolve(args.agent)
    except NotFound:  # not an agent: an environment with roles
        made = await operations.add_environment_key(args.agent, args.label)
        print(f"API key e{made.id} for environment {made.environment} (shown once, the store keeps only its hash):")
        print(made.key)
        return EXIT_OK
    created = await operations.add_key(agent_id, args.label)
    print(f"API key {created.id} for agent {created.agent} (shown once, the store keeps only its hash):")
    print(created.key)
    return EXIT_OK


async def list_keys(operations, args: argparse.Namespace) -> int:
    from shepherd.storage import NotFound

    if args.agent is None:
        keys, environment_keys = await operations.keys(), await operations.environment_keys()
    else:
        try:
            keys, environment_keys = await operations.keys(await operations.resolve(args.agent)), []
        except NotFound:  # not an agent: an environment with roles
            keys, environment_keys = [], await operations.environment_keys(args.agent)
    rows = [[k.id, f"agent {k.agent}", k.label or "-", when(k.created), "revoked" if k.revoked else "valid"]
            for k in keys]
    rows += [[f"e{k.id}", f"environment {k.environment}", k.label or "-", when(k.created),
              "revoked" if k.revoked else "valid"] for k in environment_keys]
    print(table(["ID", "FOR", "LABEL", "CREATED", "STATE"], rows) if rows else "no API keys")
    return EXIT_OK


async def revoke_key(operations, args: argparse.Namespace) -> int:
    text = args.key_id.strip()
    environment = text[:1] in ("e", "E")
    number = text[1:] if environment else text
    if not (number.isascii() and number.isdigit()) or int(number) <= 0:
        raise UsageError(f"{args.key_id!r} is no key id: N for an agent's key, eN for an environment's "
                         "(see `keys list`)")
    if environment:
        revoked = await operations.revoke_environment_key(int(number))
        print(f"API key e{revoked.id} of environment {revoked.environment} revoked")
        return EXIT_OK
    key = await operations.revoke_key(int(number))
    print(f"API key {key.id} of agent {key.agent} revoked")
    return EXIT_OK


async def reset_admin_token(operations, args: argparse.Namespace) -> int:
    token = await operations.reset_admin_token()
    print("new admin token (shown once, the store keeps only its hash; the old one no longer works):")
    print(token)
    return EXIT_OK
