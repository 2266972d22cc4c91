"""Environments with roles (issue 46) with their agents' learners in Ray actors, as ``run.py --ray`` serves them:
a self-play environment whose two roles one agent plays (its opponents snapshots of it, taken on the head from the
actor's published weights, and a scripted player; only the learning role's steps learned; the snapshots rated), and
a simultaneous one of two different agents, both learning."""

from __future__ import annotations

import asyncio

import pytest

from shepherd.environments import EnvironmentSpec, SelfPlay
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import serving_here
from shepherd.storage import Store
from tests.e2e.test_composition_ray import ray_link  # noqa: F401  (the module's local Ray)

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")

OBS = [[2], -1.0, 1.0]
TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}
A = [0.0, 0.5]
SCRIPT = "tests.integration.test_roles_selfplay:always_one"


def served(tmp_path, link, agents: list[AgentSpec], environment: EnvironmentSpec):
    from shepherd.agents.ray.cluster import RayLearners

    graph = GraphManager(owner="tests", agents=agents, environments=(environment,),
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1))
    graph.remote_learners = RayLearners(link=link)
    store = Store(tmp_path / "data")
    return graph, store, graph.create_graph(store, serving_here())


async def test_self_play_on_ray_learns_one_role_against_snapshots_and_a_script(ray_link, tmp_path):  # noqa: F811
    play = SelfPlay(snapshot_every=8, window=3, against_latest=0.0, swap_every=12, opponents=(SCRIPT,))
    graph, store, keys = served(tmp_path, ray_link, [AgentSpec("c4", "PPO", OBS, 2, TINY)],
                                EnvironmentSpec("duel", {"p0": "c4", "p1": "c4"}, "alternate", self_play=play))
    try:
        session = graph.login(keys["environment duel"])
        runtime = graph.runtime("c4")

        async def send(body):
            acted = await graph.step(session, session.parse_step(body))
            return session.level.reply_body(acted.action)

        seen = set()
        for episode in range(100):
            if seen == {"snapshot", SCRIPT} and episode >= 10:
                break
            await asyncio.sleep(0.05)  # the head fetches the actor's weights for snapshots at most every 0.2 s
            before = runtime.tracker.steps
            first = await send({"obs": {"p0": A}})
            [(role, label)] = first["opponents"].items()
            seen.add(label.split(":")[0] if label.startswith("snapshot:") else label)
            for turn in range(5):
                await send({"obs": {("p1", "p0")[turn % 2]: A}, "reward": {"p0": 1.0, "p1": 1.0}})
            await send({"obs": {"p0": A, "p1": A}, "terminated": {"p0": True, "p1": True},
                        "outcome": {"p0": 1, "p1": 0}})
            assert runtime.tracker.steps - before == 3  # the learning role's 3 steps only
        assert seen == {"snapshot", SCRIPT}, seen
        assert runtime.learner.steps > 0 and runtime.learner.version > 0  # the actor learned and updated
        table = runtime.ratings.table("duel")
        assert SCRIPT in table and any(player.startswith("c4@snapshot:") for player in table)
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


async def test_a_simultaneous_environment_of_two_agents_on_ray_feeds_both(ray_link, tmp_path):  # noqa: F811
    graph, store, keys = served(tmp_path, ray_link, [AgentSpec("raider", "PPO", OBS, 2, TINY),
                                                     AgentSpec("guard", "PPO", OBS, 2, TINY)],
                                EnvironmentSpec("defence", {"attacker": "raider", "defender": "guard"},
                                                "simultaneous"))
    try:
        session = graph.login(keys["environment defence"])
        for episode in range(6):
            for t in range(4):
                acted = await graph.step(session, session.parse_step(
                    {"obs": {"attacker": A, "defender": A}, "reward": {"attacker": 1.0, "defender": -1.0}}))
                assert set(session.level.reply_body(acted.action)["actions"]) == {"attacker", "defender"}
            await graph.step(session, session.parse_step(
                {"obs": {"attacker": A, "defender": A}, "reward": {"attacker": 1.0, "defender": -1.0},
                 "terminated": {"attacker": True, "defender": True}}))
        for name in ("raider", "guard"):
            runtime = graph.runtime(name)
            assert runtime.learner.steps >= 16 and runtime.learner.version > 0, name
            assert len(store.returns(runtime.record.id)) == 6
    finally:
        graph.end_sessions()
        graph.close()
        store.close()
