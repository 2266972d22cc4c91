"""Names: what a user or agent may be called, and how the command line finds an agent by name."""

from __future__ import annotations

import re
from typing import Any

from shepherd.admin.errors import Invalid
from shepherd.admin.records import AgentView
from shepherd.storage import NotFound

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_name(name: Any, what: str) -> str:
    """Raises Invalid unless ``name`` is 1-64 letters, digits, ``_``, ``.`` or ``-``, starting with a letter
    or digit."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise Invalid(f"a {what} name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or "
                      f"digit; got {name!r}")
    return name


def match_agent(views: list[AgentView], ref: str) -> AgentView:
    """The agent that ``ref`` names: its id, ``owner/name``, or a name that only one agent has.

    Raises:
        NotFound: no such agent (among ``views``, the ones the caller may see).
        Invalid: the name is ambiguous.
    """
    ref = ref.strip()
    if ref.isdigit():
        found = [view for view in views if view.id == int(ref)]
    elif "/" in ref:
        found = [view for view in views if view.ref == ref]
    else:
        found = [view for view in views if view.name == ref]
        if len(found) > 1:
            raise Invalid(f"several agents are named {ref!r} ({', '.join(v.ref for v in found)}); "
                          "write owner/name")
    if not found:
        raise NotFound(f"no agent {ref!r}")
    return found[0]
