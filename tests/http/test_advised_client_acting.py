"""An advised client acting at the client over HTTP (issue 45): it logs in with its name and ``"acting": "client"``,
fetches a training file that names its advisor and holds the advisor's network, acts with it and uploads, and its
learner learns the blocks (docs/acting.md, "Advised clients")."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import onnx

from shepherd.agents.advice import Advisor
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from tests.http.test_client_acting import N, T, Envs, policy

PPO = {"n_envs": N, "n_steps": T, "batch_size": 16, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]},
       "advice_strength": 1.5}


async def test_an_advised_client_acts_at_the_client_with_its_advisors_network_and_learns(aiohttp_client, tmp_path):
    graph = GraphManager(owner="tests", schedule=Schedule(steps_between_evaluation_periods=10 ** 6), agents=[
        AgentSpec("arms", "PPO", [[4], "-inf", "inf"], 2, dict(PPO), sharing="advised")])
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    apikey = app[CREATED_KEYS]["arms"]

    async def login(name: str, **extra) -> dict:
        response = await client.post("/shepherd/login_user/", json={"apikey": apikey, "client": name, **extra})
        assert response.status == 200, await response.text()
        return await response.json()

    advising = await login("arm-2")  # the advisor: another client of the agent, with a learner of its own
    served = app[GRAPH].served.agents[app[GRAPH].preset_agent_id("arms")]
    advisor = served.session_runtime("arm-2", False)
    advisor.learner.algorithm.latest_weights()  # asked for, it publishes its weights before its next batch
    step = await client.post("/shepherd/env/", json={"session_key": advising["session_key"], "obs": [0.0] * 4,
                                                     "reward": 0.0, "done": False, "info": {}})
    assert step.status == 200, await step.text()
    for _ in range(100):
        if advisor.learner.algorithm.latest_weights() is not None:
            break
        await asyncio.sleep(0.05)
    opened = await login("arm-1", acting="client", n_envs=N)
    assert opened["acting"] == "client" and opened["client"] == "arm-1" and opened["phase"] == "train"
    runtime = served.session_runtime("arm-1", False)
    # the graph chooses advisors from evaluation returns (tested in tests/integration/test_advised.py); here the
    # choice is made for it, as `AdvisedAgent.choose_advisors` makes it
    runtime.learner.algorithm.advice.advisor = Advisor("arm-2", advisor.learner.algorithm, advisor.model_path)

    key, version, steps = opened["session_key"], opened["policy_version"], opened["steps"]
    _, file = await policy(client, key)
    info = json.loads({p.key: p.value for p in onnx.load_from_string(file).metadata_props}["shepherd"])
    assert info["advice"] == {"advisor": "arm-2", "strength": 1.5}
    envs = Envs()
    for seq in range(1, 7):
        response = await client.post("/shepherd/experience/",
                                     json={"session_key": key, **envs.block(file, steps, version, seq)})
        assert response.status == 200, await response.text()
        reply = await response.json()
        assert reply["accepted"] == steps * N
        if reply["policy_version"] != version:
            version = reply["policy_version"]
            file = (await policy(client, key, version - 1))[1]
        steps = reply["steps"]
    assert version == 6 and runtime.learner.steps == 6 * T * N  # every block learned: one update each
    assert np.abs(runtime.learner.algorithm.advice_frame().rows(np.zeros((1, 4), np.float32), lambda o: o)).sum() > 0
    records = app[GRAPH].store.returns(runtime.record.id)
    assert records and {r.client for r in records} == {"arm-1"}
