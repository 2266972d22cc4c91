"""A client-acting session whose phase changes while the version stays (an evaluation period opens before the
rollout fills) and whose reply carrying the new phase's file is lost: the client holds the old phase's file. It
names the version and phase it holds (``"phase"`` in ``/shepherd/policy/``) and gets the file, not a 304 (the
server compared with the file it last sent, which never came); a retried upload of a ``policy_in_reply`` session
gets the file again (it came without it: the file last sent was already of the next phase)."""

from __future__ import annotations

import asyncio
import json

import onnxruntime as ort

from shepherd.graph import AgentSpec, GraphManager, Schedule
from tests.http.test_client_acting import Envs, N, T, login, make_client


def graph() -> GraphManager:
    # 4 rollout segments, the session drives 2: its first block does not fill the rollout (the version stays 0),
    # and an evaluation period opens after it
    parameters = {"n_envs": 4, "n_steps": T, "batch_size": 16, "n_epochs": 1, "seed": 0}
    return GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, parameters)],
                        schedule=Schedule(steps_between_evaluation_periods=T * N, evaluation_episodes=5))


def phase_of(onnx: bytes) -> str:
    meta = ort.InferenceSession(onnx).get_modelmeta().custom_metadata_map
    return json.loads(meta["shepherd"])["phase"]


async def test_a_fetch_naming_the_phase_held_gets_the_file_its_lost_reply_carried(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, graph())
    opened = await login(client)
    key = opened["session_key"]
    onnx = await (await client.post("/shepherd/policy/", json={"session_key": key})).read()
    assert phase_of(onnx) == "train"
    body = {"session_key": key, **Envs().block(onnx, opened["steps"], 0, seq=1)}
    reply = await (await client.post("/shepherd/experience/", json=body)).json()
    assert (reply["policy_version"], reply["phase"]) == (0, "evaluate")
    held = {"session_key": key, "policy_version": 0, "phase": "train"}
    fetched = await client.post("/shepherd/policy/", json=held)
    assert fetched.status == 200 and phase_of(await fetched.read()) == "evaluate"
    retry = await client.post("/shepherd/policy/", json=held)  # that reply was lost: the train file is held
    assert retry.status == 200 and phase_of(await retry.read()) == "evaluate"
    kept = await client.post("/shepherd/policy/", json={**held, "phase": "evaluate"})
    assert kept.status == 304
    wrong = await client.post("/shepherd/policy/", json={**held, "phase": ["train"]})
    assert wrong.status == 400 and "'phase' must be the phase of the file held" in (await wrong.json())["error"]
    wrong = await client.post("/shepherd/policy/", json={**held, "phase": "exploring"})
    assert wrong.status == 400


async def test_a_retried_upload_gets_the_file_of_the_next_phase_again(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, graph())
    opened = await login(client, policy_in_reply=True)
    key = opened["session_key"]
    onnx = await (await client.post("/shepherd/policy/", json={"session_key": key})).read()
    body = {"session_key": key, **Envs().block(onnx, opened["steps"], 0, seq=1)}
    first = await client.post("/shepherd/experience/", json=body)
    assert first.status == 200 and first.headers.get("Inference-Header-Content-Length") is not None
    again = await client.post("/shepherd/experience/", json=body)  # its reply was lost: the same seq and body
    assert again.status == 200 and again.headers.get("Inference-Header-Content-Length") is not None
    assert await again.read() == await first.read()



async def test_an_upload_retried_after_its_reply_changed_the_block_length_is_answered_again(aiohttp_client, tmp_path):
    """The retry of an upload whose reply was lost (docs/protocol.md: sent again exactly, with its seq) was
    checked against the next block's T, which that reply had changed (a server-acting session shares the rollout:
    the client's block ends where its segments do), and refused with 400 ("'obs' has 9 rows; expected 2"): both
    acting clients, Python's and the JavaScript example, ended on it."""
    parameters = {"n_envs": 5, "n_steps": T, "batch_size": 20, "n_epochs": 1, "seed": 0}
    client = await make_client(aiohttp_client, tmp_path, GraphManager(owner="tests", agents=[
        AgentSpec("pole", "PPO", [[4], "-inf", "inf"], 2, parameters)],
        schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1)))
    steps = await client.post("/shepherd/login_user/", json={"apikey": client.apikey, "n_envs": 3})
    stepping = (await steps.json())["session_key"]

    async def vector_steps(count: int) -> None:  # the server-acting session's 3 envs fill their segments
        for _ in range(count):
            reply = await client.post("/shepherd/env/", json={
                "session_key": stepping, "obs": [[0.01, 0.0, 0.0, 0.0]] * 3, "reward": [1.0] * 3,
                "terminated": [False] * 3, "truncated": [False] * 3})
            assert reply.status == 200, await reply.text()

    await vector_steps(3)
    opened = await login(client)
    key, length, version = opened["session_key"], opened["steps"], opened["policy_version"]
    onnx = await (await client.post("/shepherd/policy/", json={"session_key": key})).read()
    envs = Envs()
    for seq in range(1, 6):
        body = {"session_key": key, **envs.block(onnx, length, version, seq=seq)}
        uploading = asyncio.ensure_future(client.post("/shepherd/experience/", json=body))
        await vector_steps(T - 3)  # the rollout fills with the upload: an update, then a new rollout
        first = await uploading
        assert first.status == 200, await first.text()
        reply = await first.json()
        if reply["steps"] != length:
            break
        version = reply["policy_version"]
        onnx = await (await client.post("/shepherd/policy/", json={"session_key": key})).read()
    else:
        raise AssertionError("the block length never changed")
    again = await client.post("/shepherd/experience/", json=body)  # its reply was lost
    assert again.status == 200, await again.text()
    assert await again.json() == reply
