"""How advised agents are built (`Advised`, registered for ``advised`` by the package), and what the clients'
checkpoints say of an advised agent no server serves."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from shepherd.agents import checkpoint
from shepherd.graph.advised.agent import AdvisedAgent
from shepherd.graph.agent import AgentKind, AgentStatus, Building, model_file
from shepherd.graph.runtime import client_folder, saved_client_names
from shepherd.storage import AgentRecord, NotFound, Store


class Advised(AgentKind):
    """Builds an advised agent with every client it had, each resumed from its checkpoint."""

    takes_client_names = True

    def build(self, building: Building) -> AdvisedAgent:
        building.proven.close()  # it proved the parameters; each client has a learner of its own
        advised = AdvisedAgent(building.record, building.schedule, building.store, building.learner,
                               building.on_evaluation, building.max_clients)
        advised.restore()
        return advised

    def stored_status(self, store: Store, record: AgentRecord, phase: str, failure: str | None,
                      model: dict[str, float] | None) -> AgentStatus:
        """Each client's counters, as its checkpoint has them; the model is the best client's."""
        clients = saved_clients(store, record.id)
        best = best_saved(clients)
        model = None if best is None else model_file(client_path(store, record.id, best))
        return AgentStatus(False, phase, sum(row["steps"] for row in clients), 0.0, 0, 0, None, None, failure,
                           record.last_active, model, clients)

    def stored_checkpoints(self, store: Store, record: AgentRecord) -> list[Path]:
        """Every client's (a client named later starts in the first lesson)."""
        paths = [client_path(store, record.id, name) for name in saved_client_names(store.agent_folder(record.id))]
        return [path for path in paths if path.exists()]

    def stored_model(self, store: Store, record: AgentRecord, client: str | None) -> Path:
        """The named client's model, or the best saved client's (by recent evaluation return)."""
        name = client or best_saved(saved_clients(store, record.id))
        if name is None:
            raise NotFound("no client yet")
        return client_path(store, record.id, name)


def client_path(store: Store, agent_id: int, client: str) -> Path:
    return checkpoint.model_path(client_folder(store.agent_folder(agent_id), client))


def saved_clients(store: Store, agent_id: int) -> list[dict[str, Any]]:
    """The client rows of an advised agent that is not served, from its clients' checkpoints."""
    rows = []
    for name in saved_client_names(store.agent_folder(agent_id)):
        try:
            state = checkpoint.read_state(client_path(store, agent_id, name))
        except (OSError, KeyError, ValueError, zipfile.BadZipFile):
            state = {}
        schedule = state.get("schedule")
        steps = schedule.get("steps", 0) if isinstance(schedule, dict) else 0
        recent = state.get("recent_return")
        rows.append({"client": name, "steps": int(steps) if isinstance(steps, int) else 0, "phase": "stopped",
                     "sessions": 0, "episodes": 0,
                     "recent_return": float(recent) if isinstance(recent, (int, float)) else None,
                     "advisor": None, "mean_train_return": None, "failure": None})
    return rows


def best_saved(rows: list[dict[str, Any]]) -> str | None:
    """The client row with the best recent evaluation return, else the most trained (None: no row)."""
    rated = [row for row in rows if row["recent_return"] is not None]
    best = max(rated, key=lambda r: r["recent_return"], default=None) or max(rows, key=lambda r: r["steps"], default=None)
    return None if best is None else best["client"]
