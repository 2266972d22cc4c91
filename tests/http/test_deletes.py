"""Deleting agents and users through the admin API of the real app: sessions end with 410, keys and records
go, the folder moves to trash/, a user who owns agents is refused by name; and what a key holder may not do."""

import asyncio

from shepherd.http import GRAPH, STORE
from shepherd.storage import NotFound
from shepherd.agents.sb3.on_policy import OnPolicyAdapter
from tests.http.test_admin_api import OBS4, play, step_status

import pytest


async def test_deleting_an_agent_ends_its_sessions_with_410_and_moves_its_folder_to_trash(api):
    session = await play(api.client, api.pole_key, episodes=2, steps=5)
    runtime = api.app[GRAPH].runtime()
    runtime.checkpoint().result(30)
    store = api.app[STORE]
    folder = store.agent_folder(1)
    assert (folder / "model.zip").exists()
    reply = await api.post("/agents/1/delete")
    assert reply["done"] and "agent tests/pole deleted: 1 session(s) ended, its API keys removed" in reply["message"]
    response = await api.client.post("/shepherd/env/", json={"session_key": session, "obs": OBS4, "reward": 0.0,
                                                             "done": False, "info": {}})
    assert response.status == 410 and "agent pole was deleted" in (await response.json())["error"]
    response = await api.client.post("/shepherd/login_user/", json={"apikey": api.pole_key})
    assert response.status == 401
    assert runtime.learner._closed and 1 not in api.app[GRAPH].runtimes
    await api.get("/agents/1", status=404)
    assert await api.get_json("/agents") == [] and store.api_keys() == []
    trash = list((store.folder / "trash").iterdir())
    assert [path.name.split("-")[:2] for path in trash] == [["1", "pole"]] and not folder.exists()
    assert (trash[0] / "model.zip").exists() and (trash[0] / "returns.jsonl").exists()
    await api.post("/agents/1/delete", status=404)
    new = await api.add_agent("tests", "pole")  # the name is free again; the id is not given again
    assert new["id"] == 2


async def test_a_user_who_owns_agents_is_refused_by_name_unless_with_agents(api):
    await api.post("/users", {"name": "alice"}, status=201)
    await api.add_agent("alice", "a1")
    await api.add_agent("alice", "a2")
    users = {user["name"]: user["id"] for user in await api.get_json("/users")}
    reply = await api.post(f"/users/{users['alice']}/delete", status=400)
    assert reply["error"] == ("user alice owns 2 agent(s): alice/a1, alice/a2; delete them first, or delete the "
                              "user with its agents (--with-agents)")
    assert len(await api.get_json("/agents")) == 3  # nothing changed
    await api.post(f"/users/{users['alice']}/delete", {"with_agents": "yes"}, status=400)
    reply = await api.post(f"/users/{users['alice']}/delete", {"with_agents": True})
    assert reply["message"] == "user alice deleted and its 2 agent(s)"
    assert [agent["name"] for agent in await api.get_json("/agents")] == ["pole"]
    assert "alice" not in {user["name"] for user in await api.get_json("/users")}
    with pytest.raises(NotFound):
        api.app[STORE].user(users["alice"])


async def test_an_agent_s_key_may_delete_nothing(api):
    await api.post("/agents/1/delete", token=api.pole_key, status=403)
    await api.post("/users/1/delete", token=api.pole_key, status=403)
    assert len(await api.get_json("/agents")) == 1


@pytest.mark.parametrize("learner_between", [False, True], ids=["", "learner-runs-between-the-ends"])
async def test_a_step_waiting_when_its_agent_is_deleted_gets_410(api, monkeypatch, learner_between):
    """A step still waiting for its action (here: for the one segment of the rollout, held by another
    session) when the agent is deleted is answered 410 Gone, as later steps of its session are (not 401); also
    when the learner runs between the delete's ending of the holder and of the waiter (``learner_between``, as
    a loaded machine may switch threads there): it gives the waiter the segment the holder left and answers it,
    which got 200 and an action."""
    # the holder must not hand its segment over as stalled (after 5 s) before the delete, on a loaded machine
    monkeypatch.setattr(OnPolicyAdapter, "handover_timeout", 600.0)
    if learner_between:
        import time

        from shepherd.graph.session_table import SessionTable

        end = SessionTable.end

        def end_then_switch(self, session):
            end(self, session)
            time.sleep(0.3)  # the learner's thread runs: the ended holder's segment goes to the waiter

        monkeypatch.setattr(SessionTable, "end", end_then_switch)
    holder = await api.client.post("/shepherd/login_user/", json={"apikey": api.pole_key})
    holder_key = (await holder.json())["session_key"]
    assert await step_status(api.client, holder_key) == 200  # it holds the rollout's only segment
    waiter = await api.client.post("/shepherd/login_user/", json={"apikey": api.pole_key})
    waiter_key = (await waiter.json())["session_key"]
    waiting = asyncio.ensure_future(api.client.post("/shepherd/env/", json={
        "session_key": waiter_key, "obs": OBS4, "reward": 0.0, "done": False, "info": {}, "seq": 1}))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await api.post("/agents/1/delete")
    response = await waiting
    assert response.status == 410, await response.text()
    assert "agent pole was deleted" in (await response.json())["error"]


async def test_a_step_waiting_in_an_update_when_its_agent_is_deleted_gets_410_at_once(api, monkeypatch):
    """Issue 48, L15: a step whose answer waited for the learner (here: the update its rollout started) when the
    agent was deleted got 503 "shut down" (the learner's refusal as it stopped), and only its retry 410; it gets
    410 at once."""
    import threading
    learner = api.app[GRAPH].runtime().learner
    model, inside, release = learner.algorithm.model, asyncio.Event(), threading.Event()
    loop, real_train = asyncio.get_running_loop(), model.train

    def held_train(*args, **kwargs):
        loop.call_soon_threadsafe(inside.set)
        assert release.wait(10)
        return real_train(*args, **kwargs)

    monkeypatch.setattr(model, "train", held_train)
    key = (await (await api.client.post("/shepherd/login_user/", json={"apikey": api.pole_key})).json())["session_key"]
    statuses = []
    for _ in range(8):  # the reset observation and 7 transitions; the 8th fills the rollout of 8 steps
        statuses.append(await step_status(api.client, key))
    assert statuses == [200] * 8
    waiting = asyncio.ensure_future(api.client.post("/shepherd/env/", json={
        "session_key": key, "obs": OBS4, "reward": 0.0, "done": False, "info": {}}))
    await asyncio.wait_for(inside.wait(), 10)
    deleting = asyncio.ensure_future(api.post("/agents/1/delete"))
    await asyncio.wait_for(session_ended(api.app[GRAPH], key), 10)  # the delete waits for the learner to stop
    release.set()
    response = await waiting
    await deleting
    assert response.status == 410, await response.text()
    assert "agent pole was deleted" in (await response.json())["error"]


async def session_ended(graph, key):
    from shepherd.graph import Gone
    while True:
        try:
            graph.session(key)
        except Gone:
            return
        await asyncio.sleep(0.01)


async def test_a_policy_fetch_waiting_when_its_agent_is_deleted_gets_410_at_once(api, monkeypatch):
    """Issue 48, L15, for a client-acting session's policy fetch: one queued behind the learner's work (here a
    checkpoint being written) when the agent is deleted gets 410, not 503 "shut down"."""
    import threading
    learner = api.app[GRAPH].runtime().learner
    inside, release = asyncio.Event(), threading.Event()
    loop, real_write = asyncio.get_running_loop(), learner.algorithm.write_checkpoint

    def held_write(*args, **kwargs):
        loop.call_soon_threadsafe(inside.set)
        assert release.wait(10)
        return real_write(*args, **kwargs)

    response = await api.client.post("/shepherd/login_user/", json={"apikey": api.pole_key, "acting": "client"})
    assert response.status == 200, await response.text()
    key = (await response.json())["session_key"]
    monkeypatch.setattr(learner.algorithm, "write_checkpoint", held_write)
    api.app[GRAPH].runtime().checkpoint()  # the learner's thread is held inside it
    await asyncio.wait_for(inside.wait(), 10)
    fetching = asyncio.ensure_future(api.client.post("/shepherd/policy/", json={"session_key": key}))
    await asyncio.sleep(0.1)  # the fetch's build is queued behind the checkpoint (were it not yet, it would be 410 too)
    deleting = asyncio.ensure_future(api.post("/agents/1/delete"))
    await asyncio.wait_for(session_ended(api.app[GRAPH], key), 10)
    release.set()
    response = await fetching
    await deleting
    assert response.status == 410, await response.text()
    assert "agent pole was deleted" in (await response.json())["error"]
