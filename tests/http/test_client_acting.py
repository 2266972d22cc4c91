"""Client-acting sessions through the real aiohttp app (docs/protocol.md, "Acting at the client"): login with
``"acting": "client"``, the policy file (and 304), uploads learned from once per block, retries, refusals."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import numpy as np
import onnxruntime as ort
import pytest

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from tests.binary_bodies import ENCODINGS, request

N, T = 2, 8


def graph_manager(algorithm: str = "PPO", parameters: dict | None = None, **schedule: int) -> GraphManager:
    parameters = parameters or {"n_envs": N, "n_steps": T, "batch_size": 16, "n_epochs": 1, "seed": 0}
    return GraphManager(owner="tests", agents=[AgentSpec("pole", algorithm, [[4], "-inf", "inf"], 2, parameters)],
                        schedule=Schedule(steps_between_evaluation_periods=schedule.get("every", 10 ** 6),
                                          evaluation_episodes=schedule.get("episodes", 5)))


async def make_client(aiohttp_client, tmp_path, graph: GraphManager | None = None):
    app = create_app(ServerConfig(graph or graph_manager(), tmp_path / "data"))
    client = await aiohttp_client(app)
    client.apikey = app[CREATED_KEYS]["pole"]
    return client


async def login(client, **extra) -> dict:
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey, "acting": "client",
                                                                 "n_envs": N, **extra})
    assert response.status == 200, await response.text()
    return await response.json()


async def policy(client, key: str, version: int | None = None) -> tuple[int, bytes]:
    body = {"session_key": key} if version is None else {"session_key": key, "policy_version": version}
    response = await client.post("/shepherd/policy/", json=body)
    assert response.status in (200, 304), await response.text()
    return response.status, await response.read() if response.status == 200 else b""


class Envs:
    """N CartPoles stepped as a client does, acting with the ONNX file, collecting one block's columns."""

    def __init__(self, seed: int = 0) -> None:
        self.envs = [gym.make("CartPole-v1") for _ in range(N)]
        self.obs = [env.reset(seed=seed + i)[0].tolist() for i, env in enumerate(self.envs)]
        self.rng = np.random.default_rng(seed)
        self.returns: list[float] = []
        self._running = [0.0] * N

    def block(self, onnx: bytes, steps: int, version: int, seq: int) -> dict:
        session = ort.InferenceSession(onnx)
        noise_size = session.get_inputs()[1].shape[1] if len(session.get_inputs()) > 1 else 0
        rows = {"obs": [list(self.obs)], "sample": [], "reward": [], "terminated": [], "truncated": [],
                "final_obs": []}
        for _ in range(steps):
            noise = self.rng.random((N, noise_size if isinstance(noise_size, int) else 1), dtype=np.float32)
            feeds = {"obs": np.asarray(self.obs, np.float32), "noise": noise}
            if any(i.name == "action_mask" for i in session.get_inputs()):  # DQN's files take masks: none here
                feeds["action_mask"] = np.ones((N, 2), dtype=bool)
            action, sample = session.run(["action", "sample"], feeds)
            row = {"reward": [], "terminated": [], "truncated": [], "final_obs": []}
            for i, env in enumerate(self.envs):
                obs, reward, terminated, truncated, _ = env.step(int(action[i]))
                self._running[i] += float(reward)
                final = None
                if terminated or truncated:
                    final, obs = obs.tolist(), env.reset()[0]
                    self.returns.append(self._running[i])
                    self._running[i] = 0.0
                self.obs[i] = obs.tolist()
                row["reward"].append(float(reward))
                row["terminated"].append(bool(terminated))
                row["truncated"].append(bool(truncated))
                row["final_obs"].append(final)
            rows["sample"].append(np.asarray(sample).tolist())
            for name, values in row.items():
                rows[name].append(values)
            rows["obs"].append(list(self.obs))
        return {"seq": seq, "policy_version": version, **rows}


async def test_a_client_acting_session_learns_block_by_block_and_records_its_returns(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    opened = await login(client)
    assert opened["acting"] == "client" and opened["phase"] == "train" and opened["steps"] == T
    key, version, steps = opened["session_key"], opened["policy_version"], opened["steps"]
    status, onnx = await policy(client, key)
    assert status == 200 and onnx[:2] != b"{\""
    assert (await policy(client, key, version))[0] == 304  # the file held is the one to act with
    envs = Envs()
    runtime = client.app[GRAPH].runtime()
    for seq in range(1, 31):
        body = envs.block(onnx, steps, version, seq)
        response = await client.post("/shepherd/experience/", json={"session_key": key, **body})
        assert response.status == 200, await response.text()
        reply = await response.json()
        assert reply["accepted"] == steps * N and reply["phase"] == "train"
        if reply["policy_version"] != version:
            assert reply["policy_version"] == version + 1  # one update per completed rollout
            version = reply["policy_version"]
            onnx = (await policy(client, key, version - 1))[1]
        steps = reply["steps"]
    assert version == 30  # every block of N x T fills the rollout: one update each
    assert runtime.tracker.steps == 30 * T * N  # every uploaded env step counted
    recorded = [r for r in client.app[GRAPH].store.returns(runtime.record.id) if r.phase == "train"]
    assert [r.value for r in recorded] == envs.returns[:len(recorded)] and len(recorded) >= len(envs.returns) - N


async def test_a_retried_upload_is_answered_once_and_another_body_with_its_seq_is_refused(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    opened = await login(client)
    key, version = opened["session_key"], opened["policy_version"]
    onnx = (await policy(client, key))[1]
    envs = Envs()
    body = {"session_key": key, **envs.block(onnx, opened["steps"], version, seq=1)}
    first = await client.post("/shepherd/experience/", json=body)
    again = await client.post("/shepherd/experience/", json=body)
    assert first.status == again.status == 200 and await first.json() == await again.json()
    assert client.app[GRAPH].runtime().tracker.steps == T * N  # recorded once
    other = {**body, "reward": [[0.5] * N] * T}
    conflict = await client.post("/shepherd/experience/", json=other)
    assert conflict.status == 409 and "seq 1" in (await conflict.json())["error"]


async def test_a_stale_version_is_refused_with_the_current_one_and_nothing_recorded(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    opened = await login(client)
    key = opened["session_key"]
    onnx = (await policy(client, key))[1]
    body = {"session_key": key, **Envs().block(onnx, opened["steps"], opened["policy_version"] + 5, seq=1)}
    response = await client.post("/shepherd/experience/", json=body)
    assert response.status == 409, await response.text()
    assert (await response.json())["policy_version"] == opened["policy_version"]
    assert client.app[GRAPH].runtime().tracker.steps == 0


@pytest.mark.parametrize("change, words", [
    (lambda b: b.update(reward=b["reward"][:-1]), "reward"),
    (lambda b: b["reward"][2].__setitem__(1, "x"), "reward[2][1]"),
    (lambda b: b["sample"][3].__setitem__(0, 7), "sample[3][0]"),
    (lambda b: b["final_obs"][0].__setitem__(0, [0.0] * 4), "final_obs[0][0]"),
])
@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_a_bad_upload_is_refused_naming_the_field_and_nothing_is_recorded(aiohttp_client, tmp_path, change,
                                                                               words, encoding):
    """Refused alike whether the body is all JSON or carries its columns as binary tensors."""
    client = await make_client(aiohttp_client, tmp_path)
    opened = await login(client)
    key = opened["session_key"]
    body = {"session_key": key, **Envs().block((await policy(client, key))[1], opened["steps"],
                                               opened["policy_version"], seq=1)}
    body["terminated"][0][0] = False
    change(body)
    response = await client.post("/shepherd/experience/", **request(body, encoding))
    assert response.status == 400 and words in (await response.json())["error"], await response.text()
    assert client.app[GRAPH].runtime().tracker.steps == 0


async def test_steps_and_uploads_go_to_their_own_kind_of_session(aiohttp_client, tmp_path):
    client = await make_client(aiohttp_client, tmp_path)
    acting = (await login(client))["session_key"]
    step = await client.post("/shepherd/env/", json={"session_key": acting, "obs": [0.0] * 4, "reward": 0})
    assert step.status == 400 and "acts at the client" in (await step.json())["error"]
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey})
    server = (await response.json())["session_key"]
    for path in ("/shepherd/experience/", "/shepherd/policy/"):
        refused = await client.post(path, json={"session_key": server})
        assert refused.status == 400 and "acts at the server" in (await refused.json())["error"]


async def test_a_recurrent_agent_refuses_client_acting_logins_and_says_what_works(aiohttp_client, tmp_path):
    graph = graph_manager("RecurrentPPO", {"n_envs": N, "n_steps": T, "batch_size": 16, "n_epochs": 1})
    client = await make_client(aiohttp_client, tmp_path, graph)
    response = await client.post("/shepherd/login_user/", json={"apikey": client.apikey, "acting": "client"})
    assert response.status == 400, await response.text()
    assert '"acting": "server"' in (await response.json())["error"]
    assert client.app[GRAPH].runtime().sessions == 0


async def test_a_policy_file_not_built_within_the_act_timeout_is_503_and_its_build_goes_on(aiohttp_client, tmp_path):
    """A learner busy with an update builds the file late: the request is answered 503 with Retry-After, the
    build is not cancelled (a cancelled future handed back to the learner's thread failed the agent), and the
    client's retry gets the file it made."""
    import threading
    from concurrent.futures import Future

    app = create_app(ServerConfig(graph_manager(), tmp_path / "data", act_timeout_seconds=0.2))
    client = await aiohttp_client(app)
    client.apikey = app[CREATED_KEYS]["pole"]
    key = (await login(client))["session_key"]
    learner = app[GRAPH].runtime().learner
    build, builds = learner.behaviour, []

    def slow_behaviour(*args):  # the first build handed back 0.6 s late, as after a long update
        if builds:  # later asks reach the learner, which keeps the file it built (published_behaviour)
            return build(*args)
        late: Future = Future()
        builds.append(late)
        threading.Timer(0.6, lambda: late.set_result(build(*args).result())).start()
        return late

    learner.behaviour = slow_behaviour
    first = await client.post("/shepherd/policy/", json={"session_key": key})
    assert first.status == 503 and first.headers["Retry-After"], await first.text()
    await asyncio.sleep(0.7)
    status, onnx = await policy(client, key)
    assert status == 200 and onnx and len(builds) == 1  # the retry got the one build, done meanwhile
    assert learner.algorithm.published_behaviour("deploy", "pole", "PPO") is not None or \
        learner.algorithm.published_behaviour("train", "pole", "PPO") is not None  # kept by the learner
    assert learner.failure is None


async def test_after_a_stale_upload_the_policy_held_is_not_answered_304(aiohttp_client, tmp_path):
    """Two sessions of a DQN agent at max_policy_lag 0: A's block trains the agent, so B's block, drawn with the
    version before, is stale. B asks for the policy naming the version it holds: it gets the current file, not 304."""
    parameters = {"n_envs": N, "train_freq": T, "gradient_steps": 1, "learning_starts": 0, "batch_size": 8,
                  "seed": 0}
    client = await make_client(aiohttp_client, tmp_path, graph_manager("DQN", parameters))
    a, b = await login(client), await login(client)
    assert a["policy_version"] == b["policy_version"] == 0
    onnx = (await policy(client, a["session_key"]))[1]
    assert (await policy(client, b["session_key"]))[1] == onnx  # B holds version 0's file too
    for opened, seed in ((a, 0), (b, 10)):
        body = {"session_key": opened["session_key"], **Envs(seed).block(onnx, opened["steps"], 0, seq=1)}
        response = await client.post("/shepherd/experience/", json=body)
        if opened is a:
            assert response.status == 200 and (await response.json())["policy_version"] == 1, await response.text()
    assert response.status == 409 and (await response.json())["policy_version"] == 1
    fetched = await client.post("/shepherd/policy/", json={"session_key": b["session_key"], "policy_version": 0})
    assert fetched.status == 200 and fetched.headers["Shepherd-Policy-Version"] == "1"


async def test_an_upload_its_learner_lost_is_learned_when_retried_with_the_same_seq(aiohttp_client, tmp_path):
    """A Ray actor that dies with an upload in flight fails it with `LearnerUnavailable` (503); the client's retry
    with the same seq, as after any 503, was a 400 ("an upload is not sent again by the server"), and the acting
    client gave up. The retry hands the upload to the (new) learner."""
    from concurrent.futures import Future

    from shepherd.agents.core import LearnerUnavailable

    client = await make_client(aiohttp_client, tmp_path)
    opened = await login(client)
    key, version = opened["session_key"], opened["policy_version"]
    onnx = (await policy(client, key))[1]
    learner = client.app[GRAPH].runtime().learner
    real, calls = learner.learn_experience, []

    def dies_once(uploader, experience):  # what RayLearner._lose does to an upload in flight
        calls.append(experience)
        if len(calls) == 1:
            future: Future = Future()
            future.set_exception(LearnerUnavailable("agent pole's learner was lost (RayActorError)"))
            return future
        return real(uploader, experience)

    learner.learn_experience = dies_once
    body = {"session_key": key, **Envs().block(onnx, opened["steps"], version, seq=1)}
    first = await client.post("/shepherd/experience/", json=body)
    assert first.status == 503
    again = await client.post("/shepherd/experience/", json=body)
    assert again.status == 200, await again.text()
    assert len(calls) == 2 and calls[1] is calls[0]  # the same upload, handed over once more
    assert (await again.json())["accepted"] == opened["steps"] * 2
