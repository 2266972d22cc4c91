"""A deleted agent whose learner does not stop within the delete's wait (inside one long update, or writing a
checkpoint of a large replay buffer) may still write where the agent's folder was: a checkpoint's `atomic_write`
makes the folder again. Before, that folder stayed, owned by no agent; it is moved to the trash once the learner
has stopped (`ServedAgents._trash_when_stopped`). A restart's such learner wrote the old model back after the
restart had deleted it: a discarded learner now gives such a write up."""

from __future__ import annotations

import threading
import time

import pytest

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import GRAPH, ServerConfig, create_app
from shepherd.storage.files import atomic_write_bytes

TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}


async def serve_one(aiohttp_client, tmp_path):
    """A served PPO agent "slow" on a real app: its `ServedAgents` and its id."""
    graph = GraphManager(owner="tests", agents=[AgentSpec("slow", "PPO", [[4], -1, 1], 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    await aiohttp_client(app)
    served = app[GRAPH].served
    return served, next(iter(served.served_ids()))


async def test_what_a_deleted_agents_late_learner_writes_goes_to_the_trash_once_it_stops(aiohttp_client, tmp_path):
    served, agent_id = await serve_one(aiohttp_client, tmp_path)
    folder = served.store.agent_folder(agent_id)
    agent = served.agents[agent_id]
    for runtime in agent.runtimes:
        runtime.checkpoint().result(30)  # the agent's folder, with a model in it
    stop_for_real, late_writes = agent.discard, []

    def discard(timeout=60.0):  # the learner ends 0.3 s after the delete's wait, writing its checkpoint then
        if not late_writes:
            stop_for_real(timeout)

            def finish():
                time.sleep(0.3)
                atomic_write_bytes(folder / "model.zip", b"the checkpoint it was writing")

            late_writes.append(threading.Thread(target=finish))
            late_writes[0].start()
            return False
        late_writes[0].join(timeout)
        return not late_writes[0].is_alive()

    agent.discard = discard
    ended, trash, stopped = await served.delete(agent_id)
    assert not stopped and trash is not None and not folder.exists()
    deadline = time.monotonic() + 10
    late = []
    while not late and time.monotonic() < deadline:
        time.sleep(0.1)
        late = sorted(trash.parent.glob(f"{agent_id}-slow-*-late"))
    assert not folder.exists()
    assert [(path / "model.zip").read_bytes() for path in late] == [b"the checkpoint it was writing"]
    assert (trash / "model.zip").read_bytes() != b"the checkpoint it was writing"  # the delete's own, untouched


async def test_a_restart_is_not_undone_by_the_checkpoint_its_old_learner_was_writing(aiohttp_client, tmp_path,
                                                                                   monkeypatch):
    """A restart deletes the agent's model for a fresh learner. An old learner that did not stop within the wait,
    inside a checkpoint's write, landed the old model afterwards (the next start resumed it, not a fresh learner;
    an advised agent's clients alike). A discarded learner now gives its write up before the rename
    (`abandoned_when`)."""
    from shepherd.graph import served as served_module

    monkeypatch.setattr(served_module, "STOP_WAIT_SECONDS", 0.2)
    served, agent_id = await serve_one(aiohttp_client, tmp_path)
    runtime = served.agents[agent_id].runtimes[0]
    algorithm = runtime.learner.algorithm

    def slow_write(path, state):  # on the learner's thread, as every checkpoint: a large replay buffer, say
        time.sleep(1.0)
        atomic_write_bytes(path, b"the old learner's checkpoint")

    algorithm.write_checkpoint = slow_write
    writing = runtime.checkpoint()
    time.sleep(0.1)  # the learner is inside the write
    ended, stopped = await served.restart(agent_id)
    assert not stopped
    with pytest.raises(OSError, match="its writer is being stopped"):
        writing.result(10)
    path = runtime.model_path
    assert not path.exists() or path.read_bytes() != b"the old learner's checkpoint"


def test_an_abandoned_write_leaves_nothing_behind(tmp_path):
    """Given up before the rename (no temporary left), or before anything (no folder made for it)."""
    from shepherd.storage.files import WriteAbandoned, abandoned_when, atomic_write

    stop = threading.Event()
    target = tmp_path / "agent" / "model.zip"

    def write(handle):
        handle.write(b"half")
        stop.set()  # the learner is discarded while it writes

    with abandoned_when(stop):
        with pytest.raises(WriteAbandoned):
            atomic_write(target, write)
        assert list(target.parent.iterdir()) == []
        target.parent.rmdir()
        with pytest.raises(WriteAbandoned):
            atomic_write_bytes(target, b"later")
    assert not target.parent.exists()
    atomic_write_bytes(target, b"another thread's, or after")  # outside it: written
    assert target.read_bytes() == b"another thread's, or after"
