"""A client of an advised agent whose checkpoint cannot be loaded at the start is failed alone; a login naming it
is a 503 saying why (before, a 500, and each such login built its learner again), and an evaluation login without
a name, when every client has failed, a 503 too (not a 400 "no client yet")."""

from __future__ import annotations

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, ServerConfig, create_app

PPO = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}


def graph() -> GraphManager:
    return GraphManager(owner="tests", schedule=Schedule(), agents=[
        AgentSpec("arms", "PPO", [[4], "-inf", "inf"], 2, dict(PPO), sharing="advised")])


async def test_a_login_naming_a_client_that_cannot_be_loaded_is_a_503(aiohttp_client, tmp_path):
    data = tmp_path / "data"
    app = create_app(ServerConfig(graph(), data))
    client = await aiohttp_client(app)
    key = app[CREATED_KEYS]["arms"]
    assert (await client.post("/shepherd/login_user/", json={"apikey": key, "client": "arm-1"})).status == 200
    await client.close()
    [model] = data.glob("agents/*/clients/arm-1/model.zip")
    model.write_bytes(b"not a zip")
    client = await aiohttp_client(create_app(ServerConfig(graph(), data)))
    for _ in range(2):
        response = await client.post("/shepherd/login_user/", json={"apikey": key, "client": "arm-1"})
        assert response.status == 503, await response.text()
        assert "arm-1" in (await response.json())["error"]
    response = await client.post("/shepherd/login_user/", json={"apikey": key, "mode": "evaluate"})
    assert response.status == 503, await response.text()
    other = await client.post("/shepherd/login_user/", json={"apikey": key, "client": "arm-2"})
    assert other.status == 200, await other.text()  # the other clients serve


async def test_a_new_client_the_cluster_cannot_place_yet_is_a_503_to_retry_not_a_failure(aiohttp_client, tmp_path,
                                                                                         monkeypatch):
    """Under --ray, a new client's actor that the cluster cannot place (or that died while placed) is
    `LearnerUnavailable` (`RayLearners`): the login gets 503 with Retry-After and the client is not failed (the Ray
    errors were a 500)."""
    from shepherd.agents import LearnerUnavailable
    from shepherd.graph import AdvisedAgent

    real, calls = AdvisedAgent.build_client, []

    def unplaced_once(self, name):
        calls.append(name)
        if len(calls) == 1:
            raise LearnerUnavailable("agent arms's learner could not be started on the Ray cluster yet; retry in 2 s")
        return real(self, name)

    monkeypatch.setattr(AdvisedAgent, "build_client", unplaced_once)
    app = create_app(ServerConfig(graph(), tmp_path / "data"))
    client = await aiohttp_client(app)
    login = {"apikey": app[CREATED_KEYS]["arms"], "client": "arm-1"}
    first = await client.post("/shepherd/login_user/", json=login)
    assert first.status == 503 and first.headers.get("Retry-After") == "2", await first.text()
    again = await client.post("/shepherd/login_user/", json=login)
    assert again.status == 200, await again.text()
