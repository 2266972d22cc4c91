"""The kinds of served agent, as one table: the `AgentKind` that builds a stored agent and reads one no server
serves, by its sharing mode, or `LEVELED` for an agent with a level (a selector), whatever its sharing mode. A new
kind is a package implementing `ServedAgent` and `AgentKind` (`shepherd.graph.agent`) and one row here."""

from __future__ import annotations

from shepherd.definition import Sharing
from shepherd.graph.advised.kind import Advised
from shepherd.graph.agent import AgentKind
from shepherd.graph.hierarchy.agent import Hierarchy
from shepherd.graph.pooled import Pooled
from shepherd.storage import AgentRecord

#: the kind of agents with a level (selectors), whatever their sharing mode
LEVELED = "level"

KINDS: dict[Sharing | str, AgentKind] = {
    Sharing.POOLED: Pooled(),
    Sharing.ADVISED: Advised(),
    LEVELED: Hierarchy(),
}


def kind_of(record: AgentRecord) -> AgentKind:
    """The kind of a stored agent: a selector's (`LEVELED`), or its sharing mode's.

    Raises:
        ValueError: no kind serves its sharing mode.
    """
    sharing = LEVELED if record.level is not None else record.definition.sharing
    if sharing not in KINDS:
        shown = sharing if isinstance(sharing, str) else sharing.value
        raise ValueError(f"agent {record.name}: no kind of served agent serves sharing {shown!r}")
    return KINDS[sharing]
