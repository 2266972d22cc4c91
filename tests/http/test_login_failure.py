"""A login that fails after its session was opened holds no session."""

from __future__ import annotations

from shepherd.graph import AgentSpec, GraphManager, Schedule
from tests.http.test_lessons_wire import GRAPH, make_client


async def test_a_login_whose_reply_fails_holds_no_session(aiohttp_client, tmp_path, monkeypatch):
    """A login that fails after its session was opened (here its reply cannot be written; before lessons' configs
    were checked for the wire, a 65-bit constant did that) logs the session out: each such 500 held a session
    that counted toward the agent's session limit until it expired."""
    from shepherd.http import operations

    graph = GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2,
                                                         {"n_steps": 8, "batch_size": 8})], schedule=Schedule())
    client = await make_client(aiohttp_client, tmp_path, graph)

    def unwritable(reply):
        raise TypeError("Integer exceeds 64-bit range")

    monkeypatch.setattr(operations, "_json", unwritable)
    for _ in range(3):
        response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey})
        assert response.status == 500
    assert client.server.app[GRAPH].runtime().sessions == 0
