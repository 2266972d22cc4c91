"""``agents set-param`` through the admin API of the real app: the live learner takes the values before
its next update (on its own thread), the store keeps them, a restart keeps them; what needs a restart is
refused by name, changing nothing."""

import asyncio
import contextlib
import time

from shepherd.agents.bounds import parse_bounds
from shepherd.graph import served
from shepherd.http import GRAPH, STORE
from tests.http.test_admin_api import play


def model_of(api, agent_id=1):
    return api.app[GRAPH].runtimes[agent_id].learner.algorithm.model


async def test_a_live_learner_takes_new_values_before_its_next_update_and_a_restart_keeps_them(api):
    await play(api.client, api.pole_key, episodes=1, steps=4)
    model = model_of(api)
    assert model.learning_rate == 3e-4 and model.ent_coef == 0.0
    reply = await api.post("/agents/1/parameters", {"parameters": {"learning_rate": "0.0001", "ent_coef": 0.02,
                                                                   "clip_range": "lin_0.1"}})
    assert reply["message"] == ("agent tests/pole: learning_rate=0.0001, ent_coef=0.02, clip_range='lin_0.1' set "
                                "(the learner takes it before its next update; stored, so a restart keeps it)")
    assert model.learning_rate == 1e-4 and model.lr_schedule(1.0) == 1e-4 and model.ent_coef == 0.02
    assert model.clip_range(0.5) == 0.05  # a linear schedule, as SB3's constructor builds it
    updates = model._n_updates
    await play(api.client, api.pole_key, episodes=2, steps=8)  # n_steps 8: at least one update
    assert model._n_updates > updates
    assert model.policy.optimizer.param_groups[0]["lr"] == 1e-4  # SB3's train() set it from the new schedule
    stored = api.app[STORE].agent(1).parameters
    assert stored["learning_rate"] == 1e-4 and stored["ent_coef"] == 0.02 and stored["clip_range"] == "lin_0.1"
    assert (await api.get_json("/agents/1"))["parameters"]["learning_rate"] == 1e-4
    await api.post("/agents/1/restart")
    fresh = model_of(api)
    assert fresh is not model and fresh.learning_rate == 1e-4 and fresh.ent_coef == 0.02


async def test_what_needs_a_restart_or_is_not_a_parameter_is_refused_and_changes_nothing(api):
    model = model_of(api)
    before = api.app[STORE].agent(1).parameters
    reply = await api.post("/agents/1/parameters", {"parameters": {"gamma": 0.9, "learning_rate": 0.01}}, status=400)
    assert reply["error"] == ("agent tests/pole: gamma of PPO needs a restart (run.py agents restart, which discards "
                              "the model); PPO can change without one: learning_rate, ent_coef, vf_coef, "
                              "max_grad_norm, n_epochs, clip_range")
    reply = await api.post("/agents/1/parameters", {"parameters": {"learning_rat": 0.01}}, status=400)
    assert "PPO has no parameter 'learning_rat'" in reply["error"]
    reply = await api.post("/agents/1/parameters", {"parameters": {"learning_rate": "fast"}}, status=400)
    assert "must be a number" in reply["error"]
    await api.post("/agents/1/parameters", {"parameters": {}}, status=400)
    await api.post("/agents/1/parameters", {"values": {}}, status=400)
    assert api.app[STORE].agent(1).parameters == before and model.learning_rate == 3e-4 and model.gamma == 0.99


async def test_dqn_s_exploration_schedule_is_rebuilt(api):
    await api.post("/users", {"name": "alice"}, status=201)
    view = await api.add_agent("alice", "dqn", algorithm="DQN", parameters={"learning_starts": 0})
    model = model_of(api, view["id"])
    assert model.exploration_schedule(0.0) == 0.05  # SB3's default final epsilon
    await api.post(f"/agents/{view['id']}/parameters", {"parameters": {"exploration_final_eps": 0.2, "tau": 0.5}})
    assert model.exploration_schedule(0.0) == 0.2 and model.exploration_schedule(1.0) == 1.0 and model.tau == 0.5
    reply = await api.post(f"/agents/{view['id']}/parameters", {"parameters": {"ent_coef": 0.1}}, status=400)
    assert "DQN has no parameter 'ent_coef'" in reply["error"]


# -- bounds (issue 39, H1) ------------------------------------------------------------------------------
async def test_values_outside_their_bounds_are_refused_naming_the_bound_and_the_option(api):
    model = model_of(api)
    before = api.app[STORE].agent(1).parameters
    for name, value in [("n_epochs", 1_000_000), ("clip_range", -5), ("learning_rate", 1e30), ("ent_coef", 1e300),
                        ("max_grad_norm", 1e308), ("clip_range", "lin_5")]:
        reply = await api.post("/agents/1/parameters", {"parameters": {name: value}}, token=api.pole_key, status=400)
        assert f"PPO parameter {name!r} takes" in reply["error"], reply
        assert f"run.py --parameter-bound {name}=LOW:HIGH" in reply["error"], reply
    reply = await api.post("/agents/1/parameters", {"parameters": {"n_epochs": 1_000_000}}, status=400)
    assert reply["error"] == ("agent tests/pole: PPO parameter 'n_epochs' takes a value between 1 and 100, not "
                              "1000000: this server's bound, which its operator can change with run.py "
                              "--parameter-bound n_epochs=LOW:HIGH")
    assert api.app[STORE].agent(1).parameters == before and model.n_epochs == 1 and model.learning_rate == 3e-4
    await api.post("/users", {"name": "alice"}, status=201)
    reply = await api.add_agent("alice", "greedy", parameters={"n_epochs": 101}, status=400)
    assert "between 1 and 100" in reply["error"]


async def test_the_operator_changes_a_bound_of_its_own_server(make_api):
    """``--parameter-bound`` is a setting of the server it serves with (`ServerConfig.bounds`), not of the
    process: a second server in the same process holds the defaults."""
    wide = await make_api(bounds=parse_bounds(["n_epochs=1:500"]))
    narrow = await make_api()
    await wide.post("/agents/1/parameters", {"parameters": {"n_epochs": 500}})
    assert model_of(wide).n_epochs == 500
    reply = await wide.post("/agents/1/parameters", {"parameters": {"n_epochs": 501}}, status=400)
    assert "between 1 and 500" in reply["error"]
    reply = await narrow.post("/agents/1/parameters", {"parameters": {"n_epochs": 500}}, status=400)
    assert "between 1 and 100" in reply["error"]
    await wide.post("/users", {"name": "alice"}, status=201)  # new agents are held to the same bounds
    await wide.add_agent("alice", "wide", parameters={"n_epochs": 500}, status=201)
    await narrow.post("/users", {"name": "alice"}, status=201)
    reply = await narrow.add_agent("alice", "wide", parameters={"n_epochs": 500}, status=400)
    assert "between 1 and 100" in reply["error"]


async def test_a_stored_value_outside_its_bound_is_not_built_until_it_is_changed(api):
    store = api.app[STORE]  # as set before bounds existed, or under a bound the operator lowered since
    store.update_agent(1, parameters={**store.agent(1).parameters, "n_epochs": 1_000_000})
    reply = await api.post("/agents/1/restart", status=400)
    assert "cannot be rebuilt" in reply["error"] and "between 1 and 100" in reply["error"]
    assert "a live parameter (run.py agents set-param) can be changed while the agent is down" in reply["error"]
    assert (await api.get_json("/agents/1"))["phase"] == "failed"
    reply = await api.post("/agents/1/parameters", {"parameters": {"n_epochs": 2}})
    assert "its learner is not running here" in reply["message"]
    await api.post("/agents/1/restart")
    assert model_of(api).n_epochs == 2


async def test_a_restart_stops_a_learner_inside_a_long_update_at_once(make_api, monkeypatch):
    """An update of a million epochs (under a bound the operator raised) ends at its next optimiser step when
    the agent restarts: the restart answers at once and the old learner's thread is gone."""
    api = await make_api(bounds=parse_bounds(["n_epochs=1:1000000"]))
    await api.post("/agents/1/parameters", {"parameters": {"n_epochs": 1_000_000}}, token=api.pole_key)
    learner = api.app[GRAPH].runtimes[1].learner
    optimizer = learner.algorithm.model.policy.optimizer
    session = asyncio.create_task(play(api.client, api.pole_key, episodes=2, steps=8))  # n_steps 8: an update
    deadline = time.monotonic() + 30
    while not optimizer.state:  # Adam keeps state from its first step on: the update has begun
        assert time.monotonic() < deadline and not session.done(), "no update began"
        await asyncio.sleep(0.05)
    monkeypatch.setattr(served, "SET_WAIT_SECONDS", 0.2)
    reply = await api.post("/agents/1/parameters", {"parameters": {"n_epochs": 2}}, token=api.pole_key)
    assert "the learner is inside an update longer than" in reply["message"]  # not 60 s, nor a 500
    assert api.app[STORE].agent(1).parameters["n_epochs"] == 2
    started = time.monotonic()
    reply = await api.post("/agents/1/restart", token=api.pole_key)
    took = time.monotonic() - started
    with contextlib.suppress(AssertionError):  # its session ended with the restart
        await session
    assert took < 5 and not learner.alive, (took, reply)
    assert "did not stop" not in reply["message"]
    assert model_of(api).n_epochs == 2 and api.app[GRAPH].runtimes[1].learner.failure is None
