"""Names: what a user or agent may be called, and how the command line finds an agent by name."""

from __future__ import annotations

from typing import Any

from shepherd.admin.errors import Invalid
from shepherd.admin.records import AgentView
from shepherd.definition import NAME, name_problem
from shepherd.storage import NotFound

__all__ = ["NAME", "check_name", "match_agent"]


def check_name(name: Any, what: str) -> str:
    """Raises Invalid unless ``name`` is 1-64 letters, digits, ``_``, ``.`` or ``-``, starting with a letter
    or digit (`shepherd.definition.name_problem`: presets are held to the same rule)."""
    problem = name_problem(name, what)
    if problem is not None:
        raise Invalid(problem)
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
