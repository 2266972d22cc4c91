"""A verb that waits for a checkpoint (delete-model, a new advised client's start from the best one) gives up
after a while and goes on; the checkpoint is left to finish. Before, giving up cancelled the learner's future, and
the learner's answer to it, when the write ended, raised on its thread: the agent failed (a checkpoint of a large
replay buffer past 60 s)."""

from __future__ import annotations

import time

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph import agent as agent_module
from shepherd.http import GRAPH, ServerConfig, create_app

TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}


async def test_a_checkpoint_waited_for_too_long_finishes_and_the_learner_lives_on(aiohttp_client, tmp_path, monkeypatch):
    monkeypatch.setattr(agent_module, "CHECKPOINT_WAIT_SECONDS", 0.1)
    graph = GraphManager(owner="tests", agents=[AgentSpec("slow", "PPO", [[4], -1, 1], 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    await aiohttp_client(app)
    runtime = app[GRAPH].runtime()
    write = runtime.learner.algorithm.write_checkpoint

    def slow_write(path, state):
        time.sleep(0.5)
        write(path, state)

    runtime.learner.algorithm.write_checkpoint = slow_write
    writing = runtime.checkpoint()
    await agent_module.settle(writing, "slow")  # gives up after 0.1 s
    assert writing.result(10) == runtime.model_path and runtime.model_path.exists()
    time.sleep(0.2)
    assert runtime.learner.failure is None and runtime.learner.alive


def test_a_control_its_caller_gave_up_on_is_not_answered_and_the_learner_lives_on(tmp_path):
    """Any control (a checkpoint, the check of observations, a behaviour file) whose future its caller cancelled
    (a wait's timeout without a shield, as a step's check of its observations had) is dropped by the learner;
    setting it raised on the learner's thread and failed the agent."""
    import numpy as np

    from shepherd.agents.factories import learner_for
    from shepherd.definition import AgentDefinition

    learner = learner_for(AgentDefinition("pole", "DQN", [[4], "-inf", "inf"], 2, {"seed": 0}), {}, None)
    learner.start(lambda deliver: deliver())
    try:
        given_up = [learner.unbounded([np.full(4, 1e30, np.float32)]), learner.checkpoint(tmp_path / "m.zip", {})]
        for future in given_up:
            future.cancel()
        assert learner.unbounded([np.zeros(4, np.float32)]).result(10) == []  # answered after them
        assert learner.failure is None and learner.alive
    finally:
        learner.close(10)
