"""Binary tensors over HTTP (docs/protocol.md, "Binary tensors"; issue 47): steps and uploads whose arrays follow
their JSON as raw bytes are answered as their JSON is, a retry is the same step in either encoding, sizes that do
not add up get 400, large ones are parsed off the event loop; and the policy file in an upload's reply
(``"policy_in_reply"``, docs/acting.md)."""

import json

import numpy as np
import onnxruntime as ort
import pytest

from shepherd.client.tensors import HEADER, decode_reply, encode
from shepherd.front.frames import INTERNAL_PATH, TOKEN_HEADER, Item, answer_header, decode_items, encode_items
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from shepherd.http.operations import INLINE_BODY_BYTES
from shepherd.wire import tensors
from tests.binary_bodies import request

FRAME = [[84, 84, 4], 0, 255]
PPO = {"n_envs": 2, "n_steps": 8, "batch_size": 16, "n_epochs": 1, "seed": 0}


def graph_manager(observation=FRAME):
    return GraphManager(owner="tests", agents=[AgentSpec("eye", "PPO", observation, 2, dict(PPO))],
                        schedule=Schedule(steps_between_evaluation_periods=10 ** 6))


async def make_client(aiohttp_client, tmp_path, observation=FRAME, **config):
    app = create_app(ServerConfig(graph_manager(observation), tmp_path / "data", **config))
    client = await aiohttp_client(app)
    client.apikey = app[CREATED_KEYS]["eye"]
    return client


async def login(client, **extra):
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey, **extra})
    assert response.status == 200, await response.text()
    return await response.json()


def frame(seed):
    return np.random.default_rng(seed).integers(0, 256, (84, 84, 4), dtype=np.uint8)


def binary(body):
    data, length = encode(body)
    return {"data": data, "headers": {HEADER: str(length)}}


async def test_a_binary_step_and_its_retries_in_either_encoding_are_one_step(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, max_body_bytes=1 << 20)
    key = (await login(client))["session_key"]
    runtime = client.app[GRAPH].runtime()
    step = {"session_key": key, "obs": frame(0), "reward": 0.0, "done": False, "seq": 1}
    first = await client.post("/shepherd/env/", **binary(step))
    assert first.status == 200, await first.text()
    action = await first.json()
    assert await (await client.post("/shepherd/env/", **binary(step))).json() == action  # the same step, answered again
    as_json = await client.post("/shepherd/env/", json={**step, "obs": step["obs"].tolist()})
    assert as_json.status == 200 and await as_json.json() == action  # the same step in JSON: the same digest
    other = await client.post("/shepherd/env/", **binary({**step, "obs": frame(1)}))
    assert other.status == 409  # another observation with that seq
    assert runtime.tracker.steps == 0  # an episode's first step: nothing counted yet, and only one session step
    second = await client.post("/shepherd/env/", **binary({**step, "obs": frame(2), "reward": 1.0, "seq": 2}))
    assert second.status == 200 and runtime.tracker.steps == 1


@pytest.mark.parametrize("cut, words", [
    (lambda data, length: (data[:-1], length), "bytes before its tensors"),
    (lambda data, length: (data + b"\0", length), "1 bytes after its tensors"),
    (lambda data, length: (data, len(data) + 1), "bytes of JSON, but the body has"),
    (lambda data, length: (data, "twelve"), "must be the number of bytes"),
    (lambda data, length: (data.replace(b'"UINT8"', b'"UINT4"'), length), "unknown tensor datatype"),
    (lambda data, length: (data.replace(b'"binary_data_size": 28224', b'"binary_data_size": 28225'), length),
     "has 28224 bytes, but its binary_data_size is 28225"),
])
async def test_sizes_that_do_not_add_up_get_400_and_the_session_survives(aiohttp_client, tmp_path, cut, words):
    client = await make_client(aiohttp_client, tmp_path, max_body_bytes=1 << 20)
    key = (await login(client))["session_key"]
    data, length = cut(*encode({"session_key": key, "obs": frame(0), "reward": 0.0, "done": False}))
    response = await client.post("/shepherd/env/", data=data, headers={HEADER: str(length)})
    assert response.status == 400, await response.text()
    assert words in (await response.json())["error"]
    again = await client.post("/shepherd/env/", **binary({"session_key": key, "obs": frame(0), "reward": 0.0,
                                                          "done": False}))
    assert again.status == 200


@pytest.mark.parametrize("shape, size, words", [
    ([1] * 70, 1, "at most 32 dimensions"),  # numpy holds 64
    ([0, 10 ** 9, 10 ** 9, 10 ** 9], 0, "cannot be read"),  # no values, yet too big for an array
])
async def test_shapes_no_array_can_have_get_400_not_500(aiohttp_client, tmp_path, shape, size, words):
    client = await make_client(aiohttp_client, tmp_path, max_body_bytes=1 << 20)
    key = (await login(client))["session_key"]
    head = json.dumps({"session_key": key, "obs": {"datatype": "UINT8", "shape": shape, "binary_data_size": size},
                       "reward": 0.0, "done": False}).encode()
    response = await client.post("/shepherd/env/", data=head + b"\1" * size, headers={HEADER: str(len(head))})
    assert response.status == 400, await response.text()
    assert words in (await response.json())["error"]


async def test_an_uploads_image_tensor_is_checked_as_its_json_and_a_retry_may_switch_encodings(aiohttp_client,
                                                                                              tmp_path):
    """Pixels outside 0-255 (or not integers) in an image upload's tensor are refused as in its JSON (they reached
    the learner: a DQN's byte buffer kept 1000 as 232); good ones are kept as bytes, so the JSON retry of a binary
    upload is the same upload (it was 409: its pixels were floats one way, bytes the other)."""
    client = await make_client(aiohttp_client, tmp_path, ["Image", [36, 36, 1]], max_body_bytes=1 << 20)

    def upload(reply, seq, obs):
        steps = reply["steps"]
        return {"session_key": reply["session_key"], "seq": seq, "policy_version": reply["policy_version"],
                "obs": obs(steps), "sample": np.zeros((steps, 1), np.int64), "reward": np.zeros((steps, 1)),
                "terminated": np.zeros((steps, 1), bool), "truncated": np.zeros((steps, 1), bool)}

    reply = await login(client, acting="client", n_envs=1)
    for bad in (np.int64(1000), np.int64(-7), np.float32(0.5)):
        body = upload(reply, 1, lambda steps: np.full((steps + 1, 1, 36, 36, 1), bad))
        response = await client.post("/shepherd/experience/", **binary(body))
        assert response.status == 400, (bad, await response.text())
        assert "outside 0-255" in (await response.json())["error"] or "integer" in (await response.json())["error"]
    pixels = np.random.default_rng(0).integers(0, 256, (reply["steps"] + 1, 1, 36, 36, 1), dtype=np.uint8)
    body = upload(reply, 1, lambda steps: pixels)
    first = await client.post("/shepherd/experience/", **binary(body))
    assert first.status == 200, await first.text()
    as_json = {name: value.tolist() if isinstance(value, np.ndarray) else value for name, value in body.items()}
    again = await client.post("/shepherd/experience/", json=as_json)
    assert again.status == 200 and await again.json() == await first.json(), await again.text()


async def test_a_binary_body_is_held_to_the_body_limit(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, max_body_bytes=20_000)
    key = (await login(client))["session_key"]
    response = await client.post("/shepherd/env/", **binary({"session_key": key, "obs": frame(0), "reward": 0.0,
                                                             "done": False}))
    assert response.status == 413


async def test_a_large_binary_body_is_decoded_off_the_event_loop(aiohttp_client, tmp_path, monkeypatch):
    client = await make_client(aiohttp_client, tmp_path, max_body_bytes=1 << 20)
    key = (await login(client, n_envs=4))["session_key"]
    body = {"session_key": key, "obs": np.stack([frame(i) for i in range(4)]), "reward": [0.0] * 4,
            "terminated": [False] * 4, "truncated": [False] * 4}
    assert len(encode(body)[0]) > INLINE_BODY_BYTES
    threads = []
    real = tensors.decode

    def decode(*args):
        import threading

        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr("shepherd.wire.parse.decode", decode)
    response = await client.post("/shepherd/env/", **binary(body))
    assert response.status == 200, await response.text()
    assert len((await response.json())["actions"]) == 4
    assert threads and threads[0].startswith("shepherd-parse")


# -- the policy in the reply -----------------------------------------------------------------------------------

async def upload(client, key, version, seq, steps, n=2, body_encoding="json"):
    rng = np.random.default_rng(seq)
    body = {"session_key": key, "policy_version": version, "seq": seq,
            "obs": rng.normal(size=(steps + 1, n, 4)).tolist(), "sample": rng.integers(0, 2, (steps, n)).tolist(),
            "reward": [[1.0] * n] * steps, "terminated": [[False] * n] * steps, "truncated": [[False] * n] * steps}
    return await client.post("/shepherd/experience/", **request(body, body_encoding))


async def test_an_upload_after_which_the_version_changed_carries_the_new_policy_file(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, observation=[[4], "-inf", "inf"])
    opened = await login(client, acting="client", n_envs=2, policy_in_reply=True)
    assert opened["policy_in_reply"] is True
    key, version, steps = opened["session_key"], opened["policy_version"], opened["steps"]
    assert (await client.post("/shepherd/policy/", json={"session_key": key})).status == 200
    for seq, encoding in ((1, "json"), (2, "binary")):  # each block fills the rollout: an update each
        response = await upload(client, key, version, seq, steps, body_encoding=encoding)
        assert response.status == 200, await response.text()
        raw = await response.read()
        length = int(response.headers[HEADER])
        header = json.loads(raw[:length])
        size = len(raw) - length
        assert header["policy"] == {"datatype": "UINT8", "shape": [size], "binary_data_size": size}
        assert header["policy_version"] == version + 1 and header["accepted"] == steps * 2
        reply, files = decode_reply(raw, length)
        fetched = await client.post("/shepherd/policy/", json={"session_key": key})
        assert files["policy"] == await fetched.read()  # the file a fetch gives now
        assert int(fetched.headers["Shepherd-Policy-Version"]) == reply["policy_version"]
        session = ort.InferenceSession(files["policy"])
        assert json.loads(session.get_modelmeta().custom_metadata_map["shepherd"])["policy_version"] == version + 1
        again = await upload(client, key, version, seq, steps, body_encoding=encoding)  # a retry of that upload
        assert again.status == 200 and HEADER in again.headers  # its reply carries the file again
        version, steps = reply["policy_version"], reply["steps"]


async def test_a_reply_after_which_the_file_is_the_same_is_json_and_the_option_needs_acting_at_the_client(
        aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, observation=[[4], "-inf", "inf"])
    opened = await login(client, acting="client", n_envs=2, policy_in_reply=True, mode="evaluate")
    key, version = opened["session_key"], opened["policy_version"]
    assert (await client.post("/shepherd/policy/", json={"session_key": key})).status == 200
    response = await upload(client, key, version, 1, opened["steps"])
    assert response.status == 200 and HEADER not in response.headers
    assert (await response.json())["policy_version"] == version and "policy" not in await response.json()
    plain = await login(client, acting="client", n_envs=2)  # without the option: JSON always, as before
    await client.post("/shepherd/policy/", json={"session_key": plain["session_key"]})
    response = await upload(client, plain["session_key"], plain["policy_version"], 1, plain["steps"])
    assert response.status == 200 and HEADER not in response.headers
    assert (await response.json())["policy_version"] == plain["policy_version"] + 1
    for extra, words in (({}, "for sessions acting at the client"), ({"acting": "client"}, "true or false")):
        refused = await client.post("/shepherd/login_user/", json={"apikey": client.apikey, **extra,
                                                                   "policy_in_reply": 1 if extra else True})
        assert refused.status == 400 and words in (await refused.json())["error"]


# -- the front ends' batch endpoint ------------------------------------------------------------------------------

def test_a_frame_carries_its_bodys_json_length():
    items = [Item("step", "198.51.100.7", b'{"a": 1}\x00\x01', 8), Item("login", "198.51.100.8", b"{}")]
    assert decode_items(encode_items(items)) == items


async def test_the_batch_endpoint_answers_a_binary_step_as_the_public_route(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path, max_body_bytes=1 << 20, front_end_token="t" * 32)
    key = (await login(client))["session_key"]
    data, length = encode({"session_key": key, "obs": frame(0), "reward": 0.0, "done": False, "seq": 1})
    batch = encode_items([Item("step", "198.51.100.7", data, length), Item("step", "198.51.100.7", data[:-1], length)])
    response = await client.post(INTERNAL_PATH, data=batch, headers={TOKEN_HEADER: "t" * 32})
    assert response.status == 200
    answers = {}
    for _ in range(2):
        index, status, _, size, _ = answer_header(await response.content.readline())
        answers[index] = (status, json.loads(await response.content.readexactly(size)))
    assert answers[0][0] == 200 and answers[0][1]["action"] in (0, 1)
    assert answers[1][0] == 400 and "bytes before its tensors" in answers[1][1]["error"]
