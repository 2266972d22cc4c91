"""A front end's sessions and snapshots as the head ends sessions (a front end and a head in one process, over
loopback HTTP): a session ``"obs": null`` ended is forgotten with its snapshot, a snapshot whose last session left
while it was fetched is not kept (nothing would release it), and a retried step the front end answered from its
snapshot is counted once in ``shepherd_snapshot_steps_total`` (a retry counted again: 4 steps, 5 counted)."""

import asyncio

import pytest

from aiohttp.test_utils import TestClient, TestServer

from shepherd.front.app import SNAPSHOTS, FrontConfig, create_app as create_front
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from shepherd.http.errors import Unauthorized
from shepherd.http.state import METRICS

TOKEN = "t" * 32
PPO = {"n_envs": 1, "n_steps": 16, "batch_size": 16, "n_epochs": 1, "seed": 0}
OBS = [0.01, -0.02, 0.03, 0.04]


async def pair(tmp_path, **config):
    graph = GraphManager(owner="tests", agents=[AgentSpec("tiny", "PPO", [[4], "-inf", "inf"], 2, dict(PPO))],
                         schedule=Schedule(steps_between_evaluation_periods=None, evaluation_episodes=0))
    head_app = create_app(ServerConfig(graph, tmp_path / "data", front_end_token=TOKEN, **config))
    head = TestClient(TestServer(head_app, host="127.0.0.1"))
    await head.start_server()
    front = TestClient(TestServer(create_front(FrontConfig(str(head.make_url("")).rstrip("/"), TOKEN)),
                                  host="127.0.0.1"))
    await front.start_server()
    return head, front, head_app[CREATED_KEYS]["tiny"]


async def post(client, path, body):
    reply = await client.post(path, json=body)
    return reply.status, dict(reply.headers), await reply.json()


async def evaluate_session(front, key, steps=6):
    status, _, login = await post(front, "/shepherd/login_user/", {"apikey": key, "mode": "evaluate"})
    assert status == 200, login
    session = login["session_key"]
    for seq in range(1, steps + 1):
        status, headers, reply = await post(front, "/shepherd/env/", {"session_key": session, "obs": OBS,
                                                                      "reward": 0.0, "done": False, "seq": seq})
        assert status == 200, reply
        await asyncio.sleep(0.3)  # the snapshot is fetched
    return session, headers


async def test_obs_null_ends_the_session_in_the_front_end_too(tmp_path):
    head, front, key = await pair(tmp_path)
    try:
        session, headers = await evaluate_session(front, key)
        assert "X-Shepherd-Snapshot" in headers  # answered from the snapshot
        cache = front.app[SNAPSHOTS]
        status, _, reply = await post(front, "/shepherd/env/", {"session_key": session, "obs": None})
        assert status == 200 and reply == {"ok": True}
        with pytest.raises(Unauthorized):  # the head ended it
            head.app[GRAPH].session(session)
        assert session not in cache.sessions and not cache.snapshots
    finally:
        await front.close()
        await head.close()


def snapshot_steps(head) -> float:
    return head.app[METRICS].snapshot_steps._value.get()


async def test_a_retried_greedy_step_is_counted_once_in_snapshot_steps(tmp_path):
    head, front, key = await pair(tmp_path)
    try:
        session, headers = await evaluate_session(front, key, steps=4)
        assert "X-Shepherd-Snapshot" in headers
        graph = head.app[GRAPH]
        body = {"session_key": session, "obs": OBS, "reward": 0.0, "done": False, "seq": 100}
        status, headers, first = await post(front, "/shepherd/env/", body)
        assert status == 200 and "X-Shepherd-Snapshot" in headers
        before = snapshot_steps(head)
        steps_before = sum(sum(r.phase_steps.values()) for r in graph.every_runtime())
        status, headers, again = await post(front, "/shepherd/env/", body)  # the client's retry (lost reply)
        assert status == 200 and again == first and "X-Shepherd-Snapshot" in headers
        steps_after = sum(sum(r.phase_steps.values()) for r in graph.every_runtime())
        assert steps_after == steps_before
        assert snapshot_steps(head) == before  # (a retry was counted again)
    finally:
        await front.close()
        await head.close()


async def test_a_snapshot_fetched_after_its_last_session_left_is_not_kept(tmp_path):
    head, front, key = await pair(tmp_path)
    try:
        cache = front.app[SNAPSHOTS]
        status, _, login = await post(front, "/shepherd/login_user/", {"apikey": key, "mode": "evaluate"})
        assert status == 200
        session = login["session_key"]
        status, _, reply = await post(front, "/shepherd/logout/", {"session_key": session})  # a short session
        assert status == 200, reply
        await asyncio.sleep(1.5)  # the fetch the login started ends
        assert not cache.snapshots
    finally:
        await front.close()
        await head.close()
