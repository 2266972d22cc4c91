"""Logins with an environment's key while one of its roles' agents is down answer as a login with that agent's own
key does: 503 (`AgentClosed`: restarting, log in again in a moment; `AgentFailed`: failed, an admin can restart
it). Before, the environment's login said 401 ("not served by this server"), and the clients, which log in again
only after a 429 or a 503, gave up: a restart of one role's agent ended the environment's drivers."""

from __future__ import annotations

import asyncio

import pytest

from shepherd.agents import AgentClosed, AgentFailed
from shepherd.environments import EnvironmentSpec
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import serving_here
from shepherd.storage import Store

OBS = [[2], -1.0, 1.0]
TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}


async def test_an_environment_login_while_a_role_agent_restarts_or_failed_is_a_503(tmp_path):
    graph = GraphManager(owner="tests", agents=[AgentSpec("raider", "PPO", OBS, 2, TINY),
                                                AgentSpec("guard", "PPO", OBS, 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("defence", {"attacker": "raider", "defender": "guard"},
                                                       "simultaneous"),))
    store = Store(tmp_path / "data")
    keys = graph.create_graph(store, serving_here())
    try:
        guard = graph.runtime("guard").record.id
        restart = asyncio.ensure_future(graph.served.restart(guard))
        while not graph.served.restarting(guard) or guard in graph.served.agents:
            await asyncio.sleep(0)
        with pytest.raises(AgentClosed, match="agent guard .role defender. is restarting"):
            graph.login(keys["environment defence"])
        await restart
        graph.login(keys["environment defence"])  # served again
        graph.served.agents.pop(guard)
        graph.served.failures[guard] = "RuntimeError: could not be rebuilt"
        with pytest.raises(AgentFailed, match="could not be rebuilt"):
            graph.login(keys["environment defence"])
    finally:
        graph.end_sessions()
        graph.close()
        store.close()
