"""A deleted agent whose learner does not stop within the delete's wait (inside one long update, or writing a
checkpoint of a large replay buffer) may still write where the agent's folder was: a checkpoint's `atomic_write`
makes the folder again. Before, that folder stayed, owned by no agent; it is moved to the trash once the learner
has stopped (`ServedAgents._trash_when_stopped`)."""

from __future__ import annotations

import threading
import time

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import GRAPH, ServerConfig, create_app
from shepherd.storage.files import atomic_write_bytes

TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}


async def test_what_a_deleted_agents_late_learner_writes_goes_to_the_trash_once_it_stops(aiohttp_client, tmp_path):
    graph = GraphManager(owner="tests", agents=[AgentSpec("slow", "PPO", [[4], -1, 1], 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    await aiohttp_client(app)
    served = app[GRAPH].served
    agent_id = next(iter(served.served_ids()))
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
