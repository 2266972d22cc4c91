"""Image observations through the real aiohttp app: the login reply says the space back, steps and vector
steps of nested integer lists are answered, and a bad image is a 400 naming what is wrong."""

import numpy as np
import pytest

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, ServerConfig, create_app
from tests.http.test_protocol import expect_error, step

EYES = ["Image", [36, 36, 3]]
ROBOT = {"camera": ["Image", [36, 36, 1], "channels_first"], "speed": [[1], -1, 1]}


@pytest.fixture
async def client(aiohttp_client, tmp_path):
    params = {"n_envs": 2, "n_steps": 8, "batch_size": 16, "n_epochs": 1, "seed": 0}
    graph = GraphManager(owner="tests", agents=[AgentSpec("eyes", "PPO", EYES, 3, params),
                                                 AgentSpec("robot", "A2C", ROBOT, 2, {"n_steps": 4, "seed": 0})],
                         schedule=Schedule())
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    found = await aiohttp_client(app)
    found.keys = app[CREATED_KEYS]
    return found


async def login(client, agent: str, **extra) -> dict:
    response = await client.post("/shepherd/login_user/", json={"apikey": client.keys[agent], **extra})
    assert response.status == 200, await response.text()
    return await response.json()


def frame(rng, shape) -> list:
    return rng.integers(0, 256, shape).tolist()


async def test_image_steps_are_answered_and_the_login_says_the_space_back(client):
    rng = np.random.default_rng(0)
    reply = await login(client, "eyes")
    assert reply["observation_space"] == EYES
    for _ in range(20):  # past two rollouts of 16 rows: the CnnPolicy learned from them
        response = await step(client, reply["session_key"], frame(rng, (36, 36, 3)), 1.0)
        assert response.status == 200 and (await response.json())["action"] in (0, 1, 2)
    robot = await login(client, "robot", n_envs=2)
    assert robot["observation_space"] == ROBOT
    obs = [{"camera": frame(rng, (1, 36, 36)), "speed": [0.5]} for _ in range(2)]
    response = await client.post("/shepherd/env/", json={"session_key": robot["session_key"], "obs": obs,
                                                         "reward": [0.0, 0.0], "terminated": [False, False],
                                                         "truncated": [False, False]})
    assert response.status == 200 and len((await response.json())["actions"]) == 2


@pytest.mark.parametrize("change, words", [
    (lambda image: image[3][7].__setitem__(0, 256), "obs[3][7][0] is 256, outside 0-255"),
    (lambda image: image[0][0].__setitem__(2, 0.5), "must contain only integers 0-255"),
    (lambda image: image.pop(), "obs has shape [35, 36, 3], expected an image of shape [36, 36, 3]"),
    (lambda image: image[5].__setitem__(1, [1, 2]), "ragged"),
])
async def test_a_bad_image_is_400_naming_it_and_the_session_survives(client, change, words):
    rng = np.random.default_rng(1)
    key = (await login(client, "eyes"))["session_key"]
    image = frame(rng, (36, 36, 3))
    change(image)
    await expect_error(await step(client, key, image, 0.0), 400, words)
    assert (await step(client, key, frame(rng, (36, 36, 3)), 0.0)).status == 200
