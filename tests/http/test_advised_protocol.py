"""Logins to an advised agent over HTTP: ``"client"`` names the client; missing and bad names are 400s."""

import pytest

from shepherd.graph import AdvisedAgent, AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, ServerConfig, create_app

OBS4 = [0.01, -0.02, 0.03, 0.04]
PPO = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}


@pytest.fixture
async def app_client(aiohttp_client, tmp_path):
    graph = GraphManager(owner="tests", schedule=Schedule(), agents=[
        AgentSpec("arms", "PPO", [[4], "-inf", "inf"], 2, dict(PPO), sharing="advised"),
        AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, dict(PPO))])
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    client.keys = app[CREATED_KEYS]
    return client


async def post_login(http, agent, **extra):
    return await http.post("/shepherd/login_user/", json={"apikey": http.keys[agent], **extra})


async def expect_error(response, status, words):
    assert response.status == status
    body = await response.json()
    assert set(body) == {"error"} and words in body["error"], body


async def test_a_named_client_logs_in_and_steps(app_client):
    response = await post_login(app_client, "arms", client="arm-3")
    assert response.status == 200
    reply = await response.json()
    assert reply["ok"] is True and reply["agent"] == "arms" and reply["client"] == "arm-3"
    step = await app_client.post("/shepherd/env/", json={"session_key": reply["session_key"], "obs": OBS4,
                                                         "reward": 0.0, "done": False, "info": {}})
    assert step.status == 200 and (await step.json())["action"] in (0, 1)
    evaluation = await post_login(app_client, "arms", mode="evaluate")  # no name: the best (only) client
    assert evaluation.status == 200 and (await evaluation.json())["client"] == "arm-3"


async def test_missing_bad_and_misplaced_client_names_are_400(app_client):
    await expect_error(await post_login(app_client, "arms"), 400, "names its client")
    await expect_error(await post_login(app_client, "arms", client="../x"), 400, "'client' must be")
    await expect_error(await post_login(app_client, "arms", client=""), 400, "'client' must be")
    await expect_error(await post_login(app_client, "arms", client=3), 400, "'client' must be")
    await expect_error(await post_login(app_client, "pole", client="arm-1"), 400, "pooled")
    pooled = await post_login(app_client, "pole")
    assert pooled.status == 200 and "client" not in await pooled.json()


async def test_an_advised_agent_takes_at_most_max_clients_names(aiohttp_client, tmp_path):
    """Each client name is a learner (a thread, a model, a folder): past the server's limit, a login with a new
    name is refused naming the limit and the option, and builds nothing; the names it has still log in."""
    assert ServerConfig(GraphManager([]), tmp_path).max_clients_per_agent == 64  # the default
    graph = GraphManager(owner="tests", schedule=Schedule(), agents=[
        AgentSpec("arms", "PPO", [[4], "-inf", "inf"], 2, dict(PPO), sharing="advised")])
    app = create_app(ServerConfig(graph, tmp_path / "data", max_clients_per_agent=2))
    http = await aiohttp_client(app)
    http.keys = app[CREATED_KEYS]
    for name in ("arm-1", "arm-2"):
        assert (await post_login(http, "arms", client=name)).status == 200
    await expect_error(await post_login(http, "arms", client="arm-3"), 400,
                       "agent arms has 2 clients, the most this server allows an advised agent")
    await expect_error(await post_login(http, "arms", client="arm-3", mode="evaluate"), 400,
                       "run.py --max-clients N")
    advised = graph.served.agent(graph.preset_agent_id("arms"), AdvisedAgent)
    assert sorted(advised.clients) == ["arm-1", "arm-2"] and "arm-3" not in advised.saved_names()
    assert (await post_login(http, "arms", client="arm-1")).status == 200
    assert (await post_login(http, "arms", mode="evaluate")).status == 200


async def test_an_advised_agent_of_dict_observations_learns_with_advice(aiohttp_client, tmp_path):
    """Its clients' rollouts are SB3's Dict buffer with each row's advice (before, a plain rollout buffer: every
    login failed with "PPO rejected its parameters: 'str' object cannot be interpreted as an integer")."""
    graph = GraphManager(owner="tests", schedule=Schedule(), agents=[
        AgentSpec("arms", "PPO", {"position": [[2], -1, 1], "mode": 3}, 2, dict(PPO), sharing="advised")])
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    http = await aiohttp_client(app)
    keys = {}
    for name in ("arm-1", "arm-2"):
        login = await http.post("/shepherd/login_user/", json={"apikey": app[CREATED_KEYS]["arms"], "client": name})
        assert login.status == 200, await login.text()
        keys[name] = (await login.json())["session_key"]

    async def drive(name: str, steps: int) -> None:
        for t in range(steps):
            step = await http.post("/shepherd/env/", json={
                "session_key": keys[name], "obs": {"position": [0.1 * (t % 5), -0.2], "mode": t % 3},
                "reward": 1.0, "done": t % 5 == 4})
            assert step.status == 200, await step.text()

    for name in keys:
        await drive(name, 20)  # two updates each
    agent = graph.preset_agent("arms", AdvisedAgent)
    first, second = agent.clients["arm-1"], agent.clients["arm-2"]
    first.recent_return, second.recent_return = 10.0, 0.0
    agent.choose_advisors()  # arm-1 advises arm-2
    second.trials.clear()  # (its trial of arm-1's policy would take its next episode)
    await drive("arm-2", 6)
    algorithm = second.learner.algorithm
    assert algorithm.advice.advisor is not None and algorithm.version > 0
    rows = int(algorithm.segments.position[0])
    assert type(algorithm.buffer).__name__ == "AdvisedDictRolloutBuffer"
    assert rows > 0 and algorithm.buffer.advice[:rows, 0].any()
