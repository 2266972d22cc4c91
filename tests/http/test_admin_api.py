"""The JSON admin API through the real app (``aiohttp_client``): every operation, its errors, and owners
kept apart."""

import io
import json
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from stable_baselines3 import PPO

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import GRAPH, STORE, ServerConfig, create_app
from shepherd.http.state import CREATED_ADMIN_TOKEN

API = "/shepherd/admin/api"
OBS4 = [0.01, -0.02, 0.03, 0.04]
BOX4 = [[4], "-inf", "inf"]
SMALL_PPO = {"n_envs": 1, "n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0}


def graph_manager():
    return GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", BOX4, 2, dict(SMALL_PPO))],
                        schedule=Schedule())


class Api:
    """An aiohttp test client with a default Bearer token."""

    def __init__(self, client, token):
        self.client = client
        self.token = token

    def headers(self, token):
        token = self.token if token is None else token
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def get(self, path, token=None, status=200):
        response = await self.client.get(API + path, headers=self.headers(token))
        assert response.status == status, (path, response.status, await response.text())
        return response

    async def get_json(self, path, token=None, status=200):
        return await (await self.get(path, token, status)).json()

    async def post(self, path, body=None, token=None, status=200):
        response = await self.client.post(API + path, json={} if body is None else body, headers=self.headers(token))
        assert response.status == status, (path, response.status, await response.text())
        return await response.json()

    async def add_agent(self, owner, name, algorithm="PPO", parameters=None, status=201, **extra):
        body = {"owner": owner, "name": name, "algorithm": algorithm, "observation_space": BOX4,
                "action_space": 2, "parameters": dict(SMALL_PPO) if parameters is None else parameters, **extra}
        return await self.post("/agents", body, status=status)


async def play(client, apikey, episodes=1, steps=5):
    """Log in with ``apikey`` and play ``episodes`` episodes of ``steps`` steps; returns the session key."""
    response = await client.post("/shepherd/login_user/", json={"apikey": apikey})
    assert response.status == 200, await response.text()
    key = (await response.json())["session_key"]
    for _ in range(episodes):  # the reset observation, then ``steps`` transitions of reward 1
        for step in range(steps + 1):
            response = await client.post("/shepherd/env/", json={"session_key": key, "obs": OBS4, "reward": 1.0,
                                                                 "done": step == steps, "info": {}})
            assert response.status == 200, await response.text()
    return key


async def step_status(client, session_key):
    response = await client.post("/shepherd/env/", json={"session_key": session_key, "obs": OBS4, "reward": 0.0,
                                                         "done": False, "info": {}})
    return response.status


# -- credentials ------------------------------------------------------------------------------------
ROUTES = [("GET", "/whoami"), ("GET", "/users"), ("POST", "/users"), ("GET", "/algorithms"),
          ("POST", "/admin-token"), ("GET", "/agents"), ("POST", "/agents"), ("GET", "/agents/1"),
          ("GET", "/agents/1/returns"), ("GET", "/agents/1/returns.csv"), ("GET", "/agents/1/metrics"),
          ("GET", "/agents/1/model.zip"), ("GET", "/agents/1/export?format=onnx"),
          ("POST", "/agents/1/delete-model"), ("POST", "/agents/1/delete-returns"), ("POST", "/agents/1/restart"),
          ("POST", "/agents/1/keys"), ("GET", "/keys"), ("POST", "/keys/1/revoke"), ("POST", "/agents/1/delete"),
          ("POST", "/users/1/delete"), ("GET", "/environments"), ("POST", "/environments/keys"),
          ("GET", "/environments/keys"), ("POST", "/environments/keys/1/revoke")]


@pytest.mark.parametrize("method, path", ROUTES)
async def test_every_admin_route_refuses_a_missing_or_wrong_credential(api, method, path):
    for headers in [{}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic eDp5"},
                    {"Authorization": "Bearer "}, {"Cookie": "shepherd_signin=forged"}]:
        response = await api.client.request(method, API + path, headers=headers, json={})
        assert response.status == 401, headers
        body = await response.json()
        assert set(body) == {"error"} and "not-a-token" not in body["error"]
    runtime = api.app[GRAPH].runtime()
    assert runtime.learner.failure is None and runtime.model_path.exists() is False


async def test_the_admin_token_is_shown_once_stored_hashed_and_kept_across_restarts(aiohttp_client, tmp_path):
    data = tmp_path / "data"
    app = create_app(ServerConfig(graph_manager(), data))
    client = await aiohttp_client(app)
    token = app[CREATED_ADMIN_TOKEN]
    assert len(token) >= 40
    assert (await client.get(API + "/whoami", headers={"Authorization": f"Bearer {token}"})).status == 200
    await client.close()
    assert token not in (data / "store.json").read_text()
    again = create_app(ServerConfig(graph_manager(), data))
    client = await aiohttp_client(again)
    assert again[CREATED_ADMIN_TOKEN] == ""
    response = await client.get(API + "/whoami", headers={"Authorization": f"Bearer {token}"})
    assert await response.json() == {"role": "admin", "agent": None}


async def test_replacing_the_admin_token_stops_the_old_one(api):
    new = (await api.post("/admin-token"))["token"]
    assert new != api.token and len(new) >= 40
    await api.get("/whoami", status=401)
    assert (await api.get_json("/whoami", token=new))["role"] == "admin"
    await api.post("/admin-token", token=api.pole_key, status=403)


# -- users, agents, keys ----------------------------------------------------------------------------
async def test_an_agent_added_while_serving_is_served_at_once(api):
    assert (await api.post("/users", {"name": "alice"}, status=201))["name"] == "alice"
    view = await api.add_agent("alice", "thermostat", "DQN", {"learning_starts": 20, "seed": 1})
    assert view["served"] and view["phase"] == "heatup" and view["owner"] == "alice"
    created = await api.post(f"/agents/{view['id']}/keys", {"label": "laptop"}, status=201)
    assert created["agent"] == "alice/thermostat" and len(created["key"]) >= 40
    await play(api.client, created["key"], episodes=2, steps=5)
    shown = await api.get_json(f"/agents/{view['id']}")
    assert shown["steps"] == 10 and shown["sessions"] == 1 and shown["parameters"] == {"learning_starts": 20, "seed": 1}
    runtime = api.app[GRAPH].runtimes[view["id"]]
    assert runtime.schedule.heatup_steps == 20 and runtime.schedule.improve_steps is None
    users = await api.get_json("/users")
    assert {(u["name"], u["agents"]) for u in users} == {("tests", 1), ("alice", 1)}
    keys = await api.get_json(f"/keys?agent={view['id']}")
    assert [(k["label"], k["revoked"]) for k in keys] == [("laptop", False)]
    assert "key" not in keys[0] and "hash" not in keys[0]


async def test_an_advised_agent_is_created_and_lists_its_clients(api):
    await api.post("/users", {"name": "alice"}, status=201)
    body = {"owner": "alice", "name": "arms", "algorithm": "PPO", "observation_space": BOX4, "action_space": 2,
            "parameters": dict(SMALL_PPO), "sharing": "advised"}
    reply = await api.post("/agents", body, status=201)
    assert reply["sharing"] == "advised" and reply["clients"] == []
    pooled = [agent for agent in await api.get_json("/agents") if agent["name"] == "pole"]
    assert pooled[0]["clients"] is None


@pytest.mark.parametrize("change, status, words", [
    ({"algorithm": "A9C"}, 400, "unknown algorithm"),
    ({"observation_space": [[4], 1]}, 400, "observation_space"),
    ({"action_space": [[1], -1, 1], "algorithm": "DQN", "parameters": {}}, 400, "DQN cannot handle Box"),
    ({"parameters": {"gama": 0.9}}, 400, "no parameter 'gama'"),
    ({"parameters": {"n_steps": "many"}}, 400, "must be an integer"),
    ({"parameters": {"gamma": "nan"}}, 400, "finite"),
    ({"parameters": {"n_steps": 1, "n_envs": 1}}, 400, "cannot be built"),  # SB3 itself refuses
    ({"name": "no spaces"}, 400, "agent name"),
    ({"name": "../x"}, 400, "agent name"),
    ({"owner": "nobody"}, 404, "no user named 'nobody'"),
    ({"name": "pole", "owner": "tests"}, 409, "already"),
    ({"sharing": "federated"}, 400, "not available"),
    ({"sharing": "advised", "action_space": ["MultiDiscrete", [2, 3]]}, 400, "cannot be advised"),
    ({"colour": "red"}, 400, "unknown field(s) ['colour']"),
    ({"parameters": [1]}, 400, "'parameters' must be an object"),
])
async def test_bad_new_agents_are_refused_with_the_reason_and_leave_nothing(api, change, status, words):
    await api.post("/users", {"name": "alice"}, status=201)
    body = {"owner": "alice", "name": "x", "algorithm": "PPO", "observation_space": BOX4, "action_space": 2,
            "parameters": dict(SMALL_PPO), **change}
    reply = await api.post("/agents", body, status=status)
    assert words in reply["error"]
    names = [agent["name"] for agent in await api.get_json("/agents")]
    assert names == ["pole"]
    assert set(api.app[GRAPH].runtimes) == {1}
    await api.add_agent("alice", "x")  # the name is free: nothing was half-created


async def test_bad_users_are_refused(api):
    assert "user name" in (await api.post("/users", {"name": ""}, status=400))["error"]
    assert "'name'" in (await api.post("/users", {"name": 5}, status=400))["error"]
    assert "exists already" in (await api.post("/users", {"name": "tests"}, status=409))["error"]


async def test_a_revoked_key_logs_in_no_more_and_signs_in_no_more(api):
    created = await api.post("/agents/1/keys", {"label": "temp"}, status=201)
    assert (await api.get_json("/whoami", token=created["key"]))["agent_ref"] == "tests/pole"
    sessions = []
    for key in (created["key"], api.pole_key):  # one session with the key to revoke, one with another
        response = await api.client.post("/shepherd/login_user/", json={"apikey": key})
        sessions.append((await response.json())["session_key"])
    revoked = await api.post(f"/keys/{created['id']}/revoke")
    statuses = []
    for session in sessions:
        step = {"session_key": session, "obs": OBS4, "reward": 0.0, "done": False}
        statuses.append((await api.client.post("/shepherd/env/", json=step)).status)
    assert statuses == [401, 200]  # the revoked key's session ended; the other key's goes on
    assert revoked["revoked"] is True
    await api.get("/whoami", token=created["key"], status=401)
    response = await api.client.post("/shepherd/login_user/", json={"apikey": created["key"]})
    assert response.status == 401
    await api.post("/keys/999/revoke", status=404)


async def test_algorithms_and_their_typed_parameters(api):
    algorithms = {a["name"]: a for a in await api.get_json("/algorithms", token=api.pole_key)}
    assert {"PPO", "DQN"} <= set(algorithms)
    gamma = next(p for p in algorithms["PPO"]["parameters"] if p["name"] == "gamma")
    assert gamma["type"] == 2 and gamma["default"] == 0.99


# -- the curve --------------------------------------------------------------------------------------
async def test_returns_as_json_incrementally_and_as_csv(api):
    await play(api.client, api.pole_key, episodes=3, steps=4)
    reply = await api.get_json("/agents/1/returns")
    assert reply["total"] == 3 and reply["reset"] is False
    assert [(r["value"], r["length"], r["phase"]) for r in reply["returns"]] == [(4.0, 4, "train")] * 3
    first = reply["returns"][0]["time"]
    await play(api.client, api.pole_key, episodes=1, steps=6)
    more = await api.get_json(f"/agents/1/returns?offset=3&first={first}")
    assert more["offset"] == 3 and [r["value"] for r in more["returns"]] == [6.0]
    csv_text = await (await api.get("/agents/1/returns.csv")).text()
    lines = csv_text.splitlines()
    assert lines[0] == "episode,time_unix,time_utc,return,length,phase"
    assert len(lines) == 5 and lines[4].endswith(",6.0,6,train")
    await api.post("/agents/1/delete-returns")
    await play(api.client, api.pole_key, episodes=4, steps=2)
    after = await api.get_json(f"/agents/1/returns?offset=3&first={first}")
    assert after["reset"] is True and after["offset"] == 0 and len(after["returns"]) == 4
    await api.get("/agents/1/returns?offset=x", status=400)


async def test_polling_the_curve_parses_only_what_is_new(api, monkeypatch):
    from shepherd.storage import EpisodeReturn
    from shepherd.storage import returns as returns_module
    for i in range(300):
        api.app[STORE].append_return(1, EpisodeReturn(1000.0 + i, float(i), 5, "train"))
    reply = await api.get_json("/agents/1/returns")
    assert reply["total"] == 300 and len(reply["returns"]) == 300
    api.app[STORE].append_return(1, EpisodeReturn(2000.0, 9.0, 9, "evaluate"))
    parsed = []

    class Counting:  # the JSON modules of the return log, counting the lines parsed
        def __init__(self, module):
            self.module = module

        def __getattr__(self, name):
            return getattr(self.module, name)

        def loads(self, text):
            parsed.append(text)
            return self.module.loads(text)

    import orjson
    monkeypatch.setattr(returns_module, "json", Counting(json))
    monkeypatch.setattr(returns_module, "orjson", Counting(orjson), raising=False)
    more = await api.get_json("/agents/1/returns?offset=300&first=1000.0")
    assert more == {"total": 301, "offset": 300, "reset": False,
                    "returns": [{"time": 2000.0, "value": 9.0, "length": 9, "phase": "evaluate"}]}
    assert len(parsed) == 1


async def test_the_returns_csv_is_streamed_in_chunks_made_off_the_event_loop(api, monkeypatch):
    import threading

    from shepherd.http import curves as admin_module
    from shepherd.storage import EpisodeReturn
    for i in range(20_000):
        api.app[STORE].append_return(1, EpisodeReturn(1000.0 + i, float(i), 5, "train"))
    threads = set()
    real = admin_module.csv_rows
    monkeypatch.setattr(admin_module, "csv_rows",
                        lambda *args: threads.add(threading.current_thread()) or real(*args))
    response = await api.get("/agents/1/returns.csv")
    assert response.headers.get("Transfer-Encoding") == "chunked" and "Content-Length" not in response.headers
    lines = (await response.text()).splitlines()
    assert len(lines) == 20_001 and lines[-1].startswith("20000,20999.000,") and lines[-1].endswith(",19999.0,5,train")
    assert threads and threading.main_thread() not in threads
    whole = await api.get_json("/agents/1/returns")  # more than one piece of the file: streamed as well
    assert whole["total"] == 20_000 and len(whole["returns"]) == 20_000
    assert whole["returns"][-1] == {"time": 20999.0, "value": 19999.0, "length": 5, "phase": "train"}


# -- special actions --------------------------------------------------------------------------------
async def test_the_exported_model_is_a_loadable_sb3_zip_with_the_latest_steps(api):
    await api.get("/agents/1/model.zip", status=404)  # nothing learned, nothing saved yet
    await play(api.client, api.pole_key, episodes=5, steps=5)
    response = await api.get("/agents/1/model.zip")
    assert response.headers["Content-Disposition"] == 'attachment; filename="tests-pole-model.zip"'
    data = await response.read()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert json.loads(archive.read("shepherd.json"))["schedule"]["steps"] == 25
    model = PPO.load(io.BytesIO(data), device="cpu")
    action, _ = model.predict(OBS4, deterministic=True)
    assert int(action) in (0, 1)


async def test_the_export_endpoint_gives_the_zip_or_the_greedy_policy_as_onnx(api):
    await api.get("/agents/1/export?format=onnx", status=404)  # nothing learned, nothing saved yet
    await play(api.client, api.pole_key, episodes=5, steps=5)
    zipped = await api.get("/agents/1/export")  # sb3 by default: the model zip
    assert zipped.headers["Content-Disposition"] == 'attachment; filename="tests-pole-model.zip"'
    assert zipfile.is_zipfile(io.BytesIO(await zipped.read()))
    response = await api.get("/agents/1/export?format=onnx")
    assert response.headers["Content-Disposition"] == 'attachment; filename="tests-pole-policy.onnx"'
    data = await response.read()
    info = json.loads({p.key: p.value for p in onnx.load_from_string(data).metadata_props}["shepherd"])
    assert info["agent"] == "pole" and info["algorithm"] == "PPO" and info["observation_space"] == [[4], "-inf", "inf"]
    action = ort.InferenceSession(data).run(["action"], {"observation": np.array([OBS4], dtype=np.float32)})[0]
    runtime = api.app[GRAPH].runtime()
    # the learner is idle: its weights are the exported ones
    expected, _ = runtime.learner.model.predict(np.array([OBS4], dtype=np.float32), deterministic=True)
    assert action.tolist() == expected.tolist()
    reply = await api.get_json("/agents/1/export?format=tflite", status=400)
    assert "unknown export format 'tflite'; use one of sb3, onnx" in reply["error"]


async def test_deleting_the_model_while_the_agent_learns(api):
    await play(api.client, api.pole_key, episodes=2, steps=5)
    runtime = api.app[GRAPH].runtime()
    runtime.checkpoint().result(30)
    buffer = runtime.model_path.with_name("replay_buffer.pkl")  # as an off-policy agent's beside its zip
    buffer.write_bytes(b"a replay buffer of gigabytes")
    runtime.checkpoint()  # in flight while the delete comes
    reply = await api.post("/agents/1/delete-model")
    assert reply["done"] is True and "keeps learning" in reply["message"]
    assert not runtime.model_path.exists() and not buffer.exists()  # (the buffer stayed)
    assert (await api.post("/agents/1/delete-model"))["done"] is False
    await play(api.client, api.pole_key, episodes=1, steps=5)
    assert (await api.get_json("/agents/1"))["steps"] == 15  # the learner went on
    runtime.checkpoint().result(30)
    assert runtime.model_path.exists()


async def test_restart_ends_the_sessions_and_forgets_model_and_counters(api):
    session = await play(api.client, api.pole_key, episodes=3, steps=5)
    old_runtime = api.app[GRAPH].runtime()
    old_runtime.checkpoint().result(30)
    reply = await api.post("/agents/1/restart")
    assert "1 session(s) ended" in reply["message"]
    assert await step_status(api.client, session) == 401
    view = await api.get_json("/agents/1")
    assert view["steps"] == 0 and view["model"] is None and view["sessions"] == 0 and view["phase"] == "train"
    new_runtime = api.app[GRAPH].runtime()
    assert new_runtime is not old_runtime and new_runtime.learner.steps == 0
    assert old_runtime.learner._closed
    await api.get("/agents/1/model.zip", status=404)
    await play(api.client, api.pole_key, episodes=1, steps=5)  # the same key logs in to the fresh agent
    assert len((await api.get_json("/agents/1/returns"))["returns"]) == 4  # the curve is kept


async def test_restart_revives_a_failed_agent(api):
    session = await play(api.client, api.pole_key)
    api.app[GRAPH].runtime().learner.failure = "RuntimeError: boom"
    assert (await api.get_json("/agents/1"))["phase"] == "failed"
    assert await step_status(api.client, session) == 503
    await api.post("/agents/1/restart", token=api.pole_key)  # the owner may restart their agent
    assert (await api.get_json("/agents/1"))["phase"] == "train"
    await play(api.client, api.pole_key)


async def test_a_stored_agent_that_cannot_be_built_does_not_stop_the_server(aiohttp_client, tmp_path):
    from shepherd.storage import Store

    data = tmp_path / "data"
    store = Store(data)
    owner = store.ensure_user("carol")
    broken = store.add_agent(owner.id, "broken", "PPO", BOX4, 2, {"n_steps": 1, "n_envs": 1})
    key, _ = store.add_api_key(broken.id)
    fine = store.add_agent(owner.id, "fine", "DQN", BOX4, 2, {"learning_starts": 7})
    fine_key, _ = store.add_api_key(fine.id)
    store.close()
    app = create_app(ServerConfig(graph_manager(), data))
    client = await aiohttp_client(app)
    api = Api(client, app[CREATED_ADMIN_TOKEN])
    views = {view["name"]: view for view in await api.get_json("/agents")}
    assert views["broken"]["phase"] == "failed" and "cannot be started" in views["broken"]["failure"]
    assert views["fine"]["served"] and app[GRAPH].runtimes[fine.id].schedule.heatup_steps == 7
    response = await client.post("/shepherd/login_user/", json={"apikey": key})
    assert response.status == 503
    assert "cannot be rebuilt" in (await api.post(f"/agents/{broken.id}/restart", status=400))["error"]
    await play(client, fine_key)


# -- owners kept apart ------------------------------------------------------------------------------
async def test_an_agents_key_sees_and_touches_only_that_agent(api):
    await api.post("/users", {"name": "alice"}, status=201)
    await api.post("/users", {"name": "bob"}, status=201)
    alice = await api.add_agent("alice", "secret-thermostat")
    bob = await api.add_agent("bob", "bobs-robot")
    alice_key = (await api.post(f"/agents/{alice['id']}/keys", status=201))["key"]
    bob_key = (await api.post(f"/agents/{bob['id']}/keys", status=201))["key"]
    await play(api.client, alice_key, episodes=2)
    api.app[GRAPH].runtimes[alice["id"]].checkpoint().result(30)

    assert [a["name"] for a in await api.get_json("/agents", token=bob_key)] == ["bobs-robot"]
    assert await api.get_json("/whoami", token=bob_key) == {"role": "agent", "agent": bob["id"],
                                                            "agent_ref": "bob/bobs-robot"}
    missing = await api.get_json("/agents/999", token=bob_key, status=404)
    for method, suffix in [("GET", ""), ("GET", "/returns"), ("GET", "/returns.csv"), ("GET", "/metrics"), ("GET", "/model.zip"),
                           ("POST", "/delete-model"), ("POST", "/delete-returns"), ("POST", "/restart")]:
        response = await api.client.request(method, f"{API}/agents/{alice['id']}{suffix}", json={},
                                            headers={"Authorization": f"Bearer {bob_key}"})
        assert response.status == 404, suffix
        text = await response.text()
        assert "alice" not in text and "thermostat" not in text
        assert (await response.json())["error"] == missing["error"].replace("999", str(alice["id"]))
    for method, path in [("GET", "/users"), ("POST", "/users"), ("POST", "/agents"), ("GET", "/keys"),
                         (("POST", f"/agents/{bob['id']}/keys")), ("POST", "/keys/1/revoke"),
                         ("POST", "/admin-token"), ("GET", "/environments"), ("GET", "/environments/keys"),
                         ("POST", "/environments/keys"), ("POST", "/environments/keys/1/revoke")]:
        response = await api.client.request(method, API + path, json={"name": "x"},
                                            headers={"Authorization": f"Bearer {bob_key}"})
        assert response.status == 403, path
        assert "alice" not in await response.text()
    # alice's agent is untouched, and her own key acts on it
    view = await api.get_json(f"/agents/{alice['id']}", token=alice_key)
    assert view["steps"] == 10 and view["model"] is not None
    assert len((await api.get_json(f"/agents/{alice['id']}/returns", token=alice_key))["returns"]) == 2
    await api.post(f"/agents/{alice['id']}/delete-returns", token=alice_key)
    assert (await api.get_json(f"/agents/{bob['id']}/returns", token=bob_key))["total"] == 0


# -- the dashboard's sign-in ------------------------------------------------------------------------
async def test_dashboard_sign_in_sets_a_strict_cookie_and_posts_need_the_csrf_token(api):
    client = api.client
    response = await client.post(API + "/signin", json={"token": "wrong"})
    assert response.status == 401 and "Set-Cookie" not in response.headers
    response = await client.post(API + "/signin", json={"token": api.pole_key})
    assert response.status == 200
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/shepherd/admin" in cookie
    signed = await response.json()
    assert signed["role"] == "agent" and signed["agent_ref"] == "tests/pole" and len(signed["csrf"]) >= 40
    assert [a["name"] for a in await (await client.get(API + "/agents")).json()] == ["pole"]
    assert (await (await client.get(API + "/signin")).json())["csrf"] == signed["csrf"]
    await play(client, api.pole_key)
    for headers in ({}, {"X-CSRF-Token": "forged"}):
        response = await client.post(API + "/agents/1/delete-returns", json={}, headers=headers)
        assert response.status == 403 and "X-CSRF-Token" in (await response.json())["error"]
    assert len(api.app[STORE].returns(1)) == 1
    response = await client.post(API + "/agents/1/delete-returns", json={}, headers={"X-CSRF-Token": signed["csrf"]})
    assert response.status == 200 and api.app[STORE].returns(1) == []
    assert (await client.post(API + "/signout", json={})).status == 403  # sign-out needs the token too
    response = await client.post(API + "/signout", json={}, headers={"X-CSRF-Token": signed["csrf"]})
    assert response.status == 200
    assert (await client.get(API + "/agents")).status == 401
    assert (await client.get(API + "/signin")).status == 401


async def test_revoking_the_key_ends_its_dashboard_sign_ins(api):
    created = await api.post("/agents/1/keys", status=201)
    response = await api.client.post(API + "/signin", json={"token": created["key"]})
    assert response.status == 200
    assert (await api.client.get(API + "/agents")).status == 200
    await api.post(f"/keys/{created['id']}/revoke")
    assert (await api.client.get(API + "/agents")).status == 401


async def test_the_dashboard_page_and_its_files(api):
    client = api.client
    response = await client.get("/shepherd/admin", allow_redirects=False)
    assert response.status == 302 and response.headers["Location"] == "/shepherd/admin/"
    response = await client.get("/shepherd/admin/")
    assert response.status == 200 and response.content_type == "text/html"
    policy = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert response.headers["X-Frame-Options"] == "DENY"
    page = await response.text()
    assert "<script src=\"static/dashboard.js\"" in page and "http" not in page.split("<body>")[1]
    for name, kind in [("dashboard.js", "text/javascript"), ("chart.js", "text/javascript"),
                       ("dashboard.css", "text/css")]:
        response = await client.get(f"/shepherd/admin/static/{name}")
        assert response.status == 200 and response.content_type == kind
        assert "://" not in await response.text()  # nothing is loaded from elsewhere
    for path in ["/shepherd/admin/static/nothing.js", "/shepherd/admin/static/..%2Fadmin.py",
                 "/shepherd/admin/static/../app.py"]:
        assert (await client.get(path)).status == 404


async def test_a_server_that_fails_to_start_releases_the_data_folder(tmp_path):
    from shepherd.graph import PresetError
    from shepherd.http.server import RunningServer
    from shepherd.storage import DataFolderLock, Store

    data = tmp_path / "data"
    store = Store(data)
    store.add_agent(store.ensure_user("tests").id, "pole", "DQN", BOX4, 2, {})  # not what the preset says
    store.close()
    with pytest.raises(PresetError, match="exists in the store with algorithm DQN"):
        await RunningServer.start(ServerConfig(graph_manager(), data), "127.0.0.1", 0)
    lock = DataFolderLock(data)
    assert lock.try_acquire()  # an admin command can work on the folder now
    lock.release()
    assert not (data / "server.json").exists()


@pytest.mark.parametrize("secure", [False, True])
async def test_secure_cookies_mark_the_sign_in_cookie_secure(aiohttp_client, tmp_path, secure):
    app = create_app(ServerConfig(graph_manager(), tmp_path / "data", secure_cookies=secure))
    client = await aiohttp_client(app)
    response = await client.post(API + "/signin", json={"token": app[CREATED_ADMIN_TOKEN]})
    assert response.status == 200
    attributes = [part.strip().lower() for part in response.headers["Set-Cookie"].split(";")]
    assert ("secure" in attributes) is secure and "httponly" in attributes
