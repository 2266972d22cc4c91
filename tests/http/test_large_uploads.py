"""A client-acting session's upload over 64 kB is parsed and checked on a worker thread, as a large step is
(issue 48, M4: 930 kB uploads parsed on the event loop held every other agent's steps up); a small one inline."""

from __future__ import annotations

import threading

import numpy as np

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, ServerConfig, create_app, operations
from shepherd.level import client as client_level

T, OBS = 8, 500


async def test_an_upload_over_64_kb_is_parsed_off_the_event_loop_and_a_small_one_on_it(aiohttp_client, tmp_path,
                                                                                        monkeypatch):
    graph = GraphManager(owner="tests", agents=[AgentSpec("wide", "PPO", [[OBS], "-inf", "inf"], 2, {
        "n_envs": 1, "n_steps": T, "batch_size": T, "n_epochs": 1, "seed": 0})],
        schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=5))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    response = await client.post("/shepherd/login_user/", json={"apikey": app[CREATED_KEYS]["wide"],
                                                                 "acting": "client", "n_envs": 1})
    opened = await response.json()
    key, version, rng = opened["session_key"], opened["policy_version"], np.random.default_rng(0)
    threads: dict[str, list[int]] = {"parse_object": [], "parse_experience": []}
    # the body is read by the operation, the upload checked by the session's level (`Level.parse_upload`)
    for module, name in ((operations, "parse_object"), (client_level, "parse_experience")):
        real = getattr(module, name)

        def spy(*args, real=real, name=name):
            threads[name].append(threading.get_ident())
            return real(*args)

        monkeypatch.setattr(module, name, spy)
    loop_thread = threading.get_ident()

    def body(seq: int, digits: int) -> dict:
        obs = np.round(rng.normal(size=(T + 1, 1, OBS)), digits)
        return {"session_key": key, "seq": seq, "policy_version": version, "obs": obs.tolist(),
                "sample": [[int(a)] for a in rng.integers(0, 2, T)], "reward": [[1.0]] * T,
                "terminated": [[False]] * T, "truncated": [[False]] * T}

    large = body(1, 17)
    response = await client.post("/shepherd/experience/", json=large)
    assert response.status == 200, await response.text()
    assert int(response.request_info.headers.get("Content-Length", 0)) > operations.INLINE_BODY_BYTES
    assert threads["parse_object"][-1] != loop_thread and threads["parse_experience"][-1] != loop_thread
    version = (await response.json())["policy_version"]
    small = body(2, 1)
    response = await client.post("/shepherd/experience/", json=small)
    assert response.status == 200, await response.text()
    assert int(response.request_info.headers.get("Content-Length", 0)) <= operations.INLINE_BODY_BYTES
    assert threads["parse_object"][-1] == loop_thread and threads["parse_experience"][-1] == loop_thread
