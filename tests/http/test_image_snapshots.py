"""The head's side of image agents' snapshots for front ends (docs/front-ends.md, "Greedy steps from snapshots"): an
evaluate-mode session of a CnnPolicy agent is noted, ``GET /internal/snapshot`` answers its greedy ONNX file at
the learner's version (204 when the front end holds it already), and an agent whose file cannot be built
(frame stacking) answers 404 once and is noted no more."""

import numpy as np

from shepherd.definition import Filters
from shepherd.front.frames import SNAPSHOT_PATH, TOKEN_HEADER
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from shepherd.policies.onnx_snapshot import OnnxSnapshot, snapshot_from_bytes

EYES = ["Image", [36, 36, 3]]
PPO = {"n_envs": 1, "n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0}
TOKEN = "t" * 32


async def make_client(aiohttp_client, tmp_path):
    graph = GraphManager(owner="tests", agents=[AgentSpec("eyes", "PPO", EYES, 3, dict(PPO)),
                                                AgentSpec("stacked", "PPO", EYES, 3, dict(PPO),
                                                          filters=Filters(frame_stack=2))],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6))
    app = create_app(ServerConfig(graph, tmp_path / "data", front_end_token=TOKEN))
    client = await aiohttp_client(app)
    client.keys = app[CREATED_KEYS]
    return client


async def session_of(client, agent):
    response = await client.post("/shepherd/login_user/", json={"apikey": client.keys[agent], "mode": "evaluate"})
    assert response.status == 200, await response.text()
    return client.app[GRAPH].session((await response.json())["session_key"])


async def fetch(client, name, newer=-1):
    response = await client.get(SNAPSHOT_PATH, params={"name": name, "newer": str(newer)},
                                headers={TOKEN_HEADER: TOKEN})
    return response.status, await response.read()


async def test_an_image_agents_evaluate_session_is_noted_and_its_greedy_file_served(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    session = await session_of(client, "eyes")
    assert session.runtime.learner.greedy is None  # a CnnPolicy: no numpy snapshot
    name, version, n_envs = session.snapshot
    status, data = await fetch(client, name)
    assert status == 200, data
    snapshot = snapshot_from_bytes(data)
    assert isinstance(snapshot, OnnxSnapshot) and (snapshot.name, snapshot.version) == (name, version)
    frame = np.random.default_rng(0).integers(0, 256, (36, 36, 3), dtype=np.uint8)
    assert int(snapshot.act(frame)) in range(3)
    assert (await fetch(client, name, newer=version))[0] == 204  # nothing newer than what the front end holds


async def test_a_frame_stacking_image_agent_is_refused_once_and_noted_no_more(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    session = await session_of(client, "stacked")
    name, _, _ = session.snapshot  # noted until its file is asked for
    status, data = await fetch(client, name)
    assert status == 404, data
    assert session.snapshot is None and "frame" in session.runtime.greedy_file_refused
    assert (await fetch(client, name))[0] == 404
