"""A front end answers a session's greedy steps from the snapshot its note names, fetched once it holds an older
version than noted. A restarted agent's snapshot name was its new learner's ``id()``, which CPython reuses once
the old learner is freed: the name came back with the version back at 0, the front end held the old learner's
(version 7) as newer and answered with the policy the restart threw away. Names are never reused now, and a
front end drops a snapshot no session is noted with (each restart left one, up to megabytes, for good)."""

from __future__ import annotations

import gc

from shepherd.front.frames import SnapshotNote
from shepherd.front.snapshot_cache import SnapshotCache
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import serving_here
from shepherd.graph.sessions import snapshot_name
from shepherd.storage import Store

OBS = [[2], -1.0, 1.0]
TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}


async def test_a_restarted_agents_snapshot_name_is_never_an_old_learners(tmp_path):
    graph = GraphManager(owner="tests", agents=[AgentSpec("arm", "PPO", OBS, 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1))
    store = Store(tmp_path / "data")
    graph.create_graph(store, serving_here())
    try:
        agent_id = graph.runtime("arm").record.id
        seen = [snapshot_name(graph.runtime("arm"))]
        for _ in range(30):  # ids came back within 30 restarts in every run before
            await graph.served.restart(agent_id)
            gc.collect()  # the old learner freed: its id() free for the next one
            seen.append(snapshot_name(graph.runtime("arm")))
        assert len(set(seen)) == len(seen), seen
    finally:
        graph.close()
        store.close()


class Held:
    def __init__(self, name: str, version: int) -> None:
        self.name, self.version = name, version


def test_a_snapshot_no_session_is_noted_with_is_dropped():
    cache = SnapshotCache(None, "http://127.0.0.1:1", "token", None)  # type: ignore[arg-type]
    cache._refresh = lambda name: None  # no fetches here: the snapshots are put in by hand
    cache.note("a", SnapshotNote("1@old.0", 7))
    cache.snapshots["1@old.0"] = Held("1@old.0", 7)  # type: ignore[assignment]
    cache.note("a", SnapshotNote("1@old.0", 7))  # every answer notes its session again: the snapshot stays
    assert "1@old.0" in cache.snapshots
    cache.note("b", SnapshotNote("1@old.0", 7))
    cache.note("a", SnapshotNote("1@new.0", 0))  # the agent restarted: a new snapshot, session b still on the old
    assert "1@old.0" in cache.snapshots
    cache.note("b", None)  # b's session ended (or its step went to the head with no note)
    assert "1@old.0" not in cache.snapshots and "1@old.0" not in cache._wanted
    assert dict(cache._users) == {"1@new.0": 1} and list(cache.sessions) == ["a"]
