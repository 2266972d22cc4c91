"""Graceful shutdown on a real socket: requests still open are answered, then every agent is checkpointed."""

import asyncio
import json
import zipfile

import aiohttp

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import ServerConfig
from shepherd.http.server import RunningServer

OBS4 = [0.01, -0.02, 0.03, 0.04]


async def test_a_step_waiting_for_an_update_is_answered_when_the_server_stops(tmp_path):
    graph = GraphManager(owner="tests", schedule=Schedule(), agents=[
        AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, {"n_envs": 2, "n_steps": 4, "batch_size": 8})])
    server = await RunningServer.start(ServerConfig(graph, tmp_path / "data"), "127.0.0.1", 0)
    graph.runtime().learner.algorithm.handover_timeout = 600  # the holder keeps its segment: nothing frees it
    url = server.url + "/shepherd/"
    async with aiohttp.ClientSession() as http:
        async def post(path, body):
            async with http.post(url + path, json=body) as response:
                return response.status, await response.json()

        apikey = server.created_keys["pole"]
        waiter = (await post("login_user/", {"apikey": apikey}))[1]["session_key"]
        holder = (await post("login_user/", {"apikey": apikey}))[1]["session_key"]
        assert (await post("env/", {"session_key": holder, "obs": OBS4, "reward": 0, "done": False}))[0] == 200
        for _ in range(4):
            assert (await post("env/", {"session_key": waiter, "obs": OBS4, "reward": 1, "done": False}))[0] == 200
        waiting = asyncio.create_task(
            post("env/", {"session_key": waiter, "obs": OBS4, "reward": 1, "done": False}))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # every segment is held: it waits for an update that will not come
        await asyncio.wait_for(server.stop(), 20)
        status, reply = await asyncio.wait_for(waiting, 5)
    assert status == 200 and reply["action"] in (0, 1)
    with zipfile.ZipFile(tmp_path / "data" / "agents" / "1" / "model.zip") as archive:
        assert json.loads(archive.read("shepherd.json"))["schedule"]["steps"] == 4
