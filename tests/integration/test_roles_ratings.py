"""Ratings of environments with roles (openskill's Plackett-Luce) from their episodes' outcomes: the winner's
rating rises, an episode without an outcome is decided by each team's returns, a team of several players is rated
as one side, an agent on both sides is not rated, and the ratings are those of the last checkpoint after the
server stops without writing one (what ``kill -9`` leaves), byte for byte, with each agent's rating over its steps
(a bounded history); the admin API shows them, and ``run.py agents show`` prints them from the checkpoint."""

from __future__ import annotations

import asyncio
import json

from shepherd.admin import AdminService
from shepherd.admin.records import ADMIN
from shepherd.environments import EnvironmentSpec
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import serving_here
from shepherd.cli import main
from shepherd.graph.ratings import HISTORY_POINTS, Ratings
from shepherd.storage import Store

OBS = [[2], -1.0, 1.0]
TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}
A = [0.0, 0.5]


def graph_manager() -> GraphManager:
    return GraphManager(owner="tests", agents=[
        AgentSpec("raider", "PPO", OBS, 2, TINY), AgentSpec("guard", "PPO", OBS, 2, TINY)],
        schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1,
                          checkpoint_every_steps=10 ** 9, checkpoint_every_seconds=10 ** 9),
        environments=(EnvironmentSpec("defence", {"attacker": "raider", "defender": "guard",
                                                  "scout": "tests.integration.test_roles_ratings:still"},
                                      "simultaneous", {"red": ("attacker", "scout"), "blue": ("defender",)}),))


def still(obs, mask):
    return 0


async def episode(graph, session, outcome=None, rewards=(0.0, 0.0)):
    for body in ({"obs": {"attacker": A, "defender": A, "scout": A}},
                 {"obs": {"attacker": A, "defender": A, "scout": A},
                  "reward": {"attacker": rewards[0], "defender": rewards[1]},
                  "terminated": {"attacker": True, "defender": True, "scout": True},
                  **({"outcome": outcome} if outcome is not None else {})}):
        await graph.step(session, session.parse_step(body))


async def test_outcomes_rate_the_teams_and_a_restart_resumes_the_last_checkpoints_ratings(tmp_path, capsys):
    data = tmp_path / "data"
    graph, store = graph_manager(), Store(data)
    keys = graph.create_graph(store, serving_here())
    session = graph.login(keys["environment defence"])
    await episode(graph, session, {"attacker": 1, "scout": 1, "defender": 0})
    table = graph.runtime("raider").ratings.table("defence")
    assert table["raider"].mu > 25 > table["guard"].mu  # red won
    assert table["raider"].mu == table["tests.integration.test_roles_ratings:still"].mu  # one side, rated alike
    await episode(graph, session, rewards=(0.0, 5.0))  # no outcome: blue's return (5) beats red's (0)
    table = graph.runtime("raider").ratings.table("defence")
    assert table["guard"].games == 2 and table["raider"].mu < 27
    runtime = graph.runtime("raider")
    await asyncio.to_thread(lambda: runtime.checkpoint().result(30))
    saved = json.dumps(runtime.ratings.state(), sort_keys=True)
    admin = AdminService(store, graph).acting_as(ADMIN)
    [shown] = await admin.environments()
    assert shown["environment"] == "tests/defence" and list(shown["ratings"])[0] == "guard"  # best first
    # each agent's rating over its steps: a point per rated episode (so far), the last its rating now
    assert list(shown["history"]) == ["guard", "raider"]  # agents only: not the scripted scout
    raider = shown["history"]["raider"]
    assert [point["games"] for point in raider] == [1, 2] and raider[-1]["mu"] == table["raider"].mu
    assert raider[0]["steps"] <= raider[1]["steps"] == runtime.tracker.steps
    assert "histories" in json.loads(saved)  # checkpointed with the ratings
    from shepherd.http.metrics import AgentLabels, GraphCollector

    families = {family.name: family for family in GraphCollector(lambda: graph, AgentLabels()).collect()}
    shown_mu = {sample.labels["player"]: sample.value for sample in families["shepherd_rating_mu"].samples}
    assert shown_mu["guard"] == table["guard"].mu and len(shown_mu) == 3  # /metrics: each player
    await episode(graph, session, {"attacker": 0, "scout": 0, "defender": 1})  # after the checkpoint: lost
    assert json.dumps(runtime.ratings.state(), sort_keys=True) != saved
    graph.end_sessions()
    await asyncio.to_thread(graph.abort)  # stops without writing: what kill -9 leaves is the last checkpoint
    store.close()
    graph, store = graph_manager(), Store(data)
    graph.create_graph(store, serving_here())
    try:
        assert json.dumps(graph.runtime("raider").ratings.state(), sort_keys=True) == saved
    finally:
        graph.end_sessions()
        await asyncio.to_thread(graph.close)
        store.close()
    # no server: the admin operations and `agents show` read the ratings from the last checkpoint
    store = Store(data)
    try:
        [stopped] = await AdminService(store).acting_as(ADMIN).environments()
    finally:
        store.close()
    assert stopped["ratings"] == shown["ratings"] and stopped["history"] == shown["history"]
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["agents", "show", "guard", "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert "environment tests/defence (roles attacker: raider, defender: guard, scout: " in out
    lines = out[out.index("PLAYER"):].splitlines()
    assert lines[0].split() == ["PLAYER", "MU", "SIGMA", "ORDINAL", "GAMES"]
    guard = shown["ratings"]["guard"]
    assert lines[1].split() == ["guard", f"{guard['mu']:.2f}", f"{guard['sigma']:.2f}", f"{guard['ordinal']:.2f}", "2"]
    assert len(lines) == 4  # three players


def test_an_agent_on_both_sides_is_not_rated():
    ratings = Ratings()
    assert not ratings.rate("duel", {"a": ["c4"], "b": ["c4"]}, {"a": 1.0, "b": 0.0})
    assert ratings.state() == {}
    assert ratings.rate("duel", {"a": ["c4"], "b": ["minimax"], "c": ["random"]}, {"a": 2, "b": 1, "c": 0})
    table = ratings.table("duel")
    assert table["c4"].mu > table["minimax"].mu > table["random"].mu  # any number of teams


def test_an_agents_rating_history_stays_bounded_and_spans_the_whole_run():
    def play(ratings, episode):
        ratings.rate("duel", {"a": ["c4"], "b": ["minimax"]}, {"a": episode % 2, "b": 1 - episode % 2},
                     {"c4": 10 * episode})

    ratings = Ratings()
    for episode in range(1, 1001):
        play(ratings, episode)
    points = ratings.history("duel")["c4"]
    stride = points[0].rating.games
    assert HISTORY_POINTS // 2 <= len(points) <= HISTORY_POINTS and stride > 1 and stride & (stride - 1) == 0
    assert [point.rating.games for point in points] == list(range(stride, 1001, stride))  # evenly, from the start
    assert [point.steps for point in points] == [10 * point.rating.games for point in points]
    assert points[-1].rating == ratings.table("duel")["c4"]  # 1000 is a multiple of the stride here
    assert list(ratings.history("duel")) == ["c4"]  # the scripted opponent has no steps: no history
    again = Ratings()
    again.load(json.loads(json.dumps(ratings.state())))  # as a checkpoint holds it
    assert again.history("duel") == ratings.history("duel") and again.state() == ratings.state()
    for episode in range(1001, 1001 + stride):
        play(again, episode)  # the stride goes on after a restart: one more point, at the next multiple
    assert [point.rating.games for point in again.history("duel")["c4"]] == list(range(stride, 1001 + stride, stride))


def test_only_the_agents_that_played_an_episode_get_a_point_of_history():
    """red against blue's snapshot: blue's steps are the session's, but blue itself did not play."""
    ratings = Ratings()
    ratings.rate("duel", {"r": ["red"], "b": ["blue"]}, {"r": 1.0, "b": 0.0}, {"red": 5, "blue": 5})
    ratings.rate("duel", {"r": ["red"], "b": ["blue@snapshot:1"]}, {"r": 1.0, "b": 0.0}, {"red": 9, "blue": 9})
    history = ratings.history("duel")
    assert [point.steps for point in history["red"]] == [5, 9] and [point.steps for point in history["blue"]] == [5]


async def test_an_empty_outcome_is_none_the_teams_returns_decide(tmp_path):
    graph, store = graph_manager(), Store(tmp_path / "data")
    keys = graph.create_graph(store, serving_here())
    try:
        await episode(graph, graph.login(keys["environment defence"]), {}, rewards=(0.0, 5.0))
        expected = Ratings()  # blue's return (5) beats red's (0): not a draw
        expected.rate("defence", {"red": ["raider", "tests.integration.test_roles_ratings:still"], "blue": ["guard"]},
                      {"red": 0.0, "blue": 5.0})
        assert graph.runtime("raider").ratings.table("defence") == expected.table("defence")
    finally:
        graph.end_sessions()
        graph.close()
        store.close()
