"""``GET /metrics`` and ``GET /shepherd/health`` through the real app (``aiohttp_client``): the families a
scrape during training shows, parsed with prometheus-client's own parser; who may read them; and the
health check's contract (ok, a failed learner, an unwritable store)."""

import asyncio
import math
from unittest import mock

import pytest
from aiohttp.test_utils import make_mocked_request
from prometheus_client.parser import text_string_to_metric_families

from shepherd.agents.timing import Histogram
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from shepherd.http import monitoring
from shepherd.http.state import CREATED_ADMIN_TOKEN, HEALTH_PROBE, METRICS

BOX4 = [[4], "-inf", "inf"]
TINY_PPO = {"n_envs": 2, "n_steps": 16, "batch_size": 32, "n_epochs": 1, "seed": 0}
AGENT = "tests/pole"


def graph_manager():
    return GraphManager(owner="tests", agents=[AgentSpec("pole", "PPO", BOX4, 2, dict(TINY_PPO))],
                        schedule=Schedule(checkpoint_every_steps=100, checkpoint_every_seconds=600))


async def serve(aiohttp_client, tmp_path, **config):
    app = create_app(ServerConfig(graph_manager(), tmp_path / "data", **config))
    client = await aiohttp_client(app)
    return app, client


async def train(client, apikey, steps, episode_length=20):
    """One session taking ``steps`` training steps in episodes of ``episode_length``."""
    reply = await client.post("/shepherd/login_user/", json={"apikey": apikey})
    assert reply.status == 200, await reply.text()
    key = (await reply.json())["session_key"]
    for step in range(steps):
        done = (step + 1) % episode_length == 0
        body = {"session_key": key, "obs": [0.01 * (step % 7), -0.02, 0.03, 0.04], "reward": 1.0, "done": done}
        reply = await client.post("/shepherd/env/", json=body)
        assert reply.status == 200, await reply.text()
    return key


async def scrape(client, headers=None):
    reply = await client.get("/metrics", headers=headers or {})
    assert reply.status == 200, await reply.text()
    assert reply.headers["Content-Type"].startswith("text/plain")
    return {family.name: family for family in text_string_to_metric_families(await reply.text())}


def value(family, suffix="", **labels):
    """The value of the sample ``family.name + suffix`` whose labels include ``labels``."""
    found = [s.value for s in family.samples if s.name == family.name + suffix
             and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (family.name + suffix, labels, family.samples)
    return found[0]


async def test_a_scrape_during_training_shows_every_family_with_sensible_values(aiohttp_client, tmp_path):
    app, client = await serve(aiohttp_client, tmp_path)
    apikey = app[CREATED_KEYS]["pole"]
    first = await scrape(client)  # before any step: the families are there, at zero
    assert value(first["shepherd_agent_steps"], "_total", agent=AGENT, phase="train") == 0
    await asyncio.gather(train(client, apikey, 200), train(client, apikey, 200))  # two sessions at once
    await client.post("/shepherd/env/", json={"session_key": "nope", "obs": [0, 0, 0, 0], "reward": 0, "done": False})
    families = await scrape(client)

    # each episode's first message is its reset observation, not a step: 400 messages are 380 steps
    assert value(families["shepherd_agent_steps"], "_total", agent=AGENT, phase="train") == 380
    assert value(families["shepherd_agent_steps"], "_total", agent=AGENT, phase="evaluate") == 0
    assert value(families["shepherd_agent_learned_steps"], agent=AGENT) == 380
    assert value(families["shepherd_agent_episodes"], "_total", agent=AGENT, phase="train") == 20
    assert value(families["shepherd_agent_up"], agent=AGENT) == 1
    assert value(families["shepherd_agent_sessions"], agent=AGENT) == 2
    assert value(families["shepherd_act_timeouts"], "_total", agent=AGENT) == 0
    assert value(families["shepherd_learner_queue_depth"], agent=AGENT) >= 0
    assert value(families["shepherd_agent_steps_per_second"], agent=AGENT, phase="train") >= 0
    # 380 steps of a 32-row rollout: a dozen updates, each one more policy version
    updates = value(families["shepherd_training_update_duration_seconds"], "_count", agent=AGENT)
    assert updates >= 10
    assert value(families["shepherd_policy_version"], agent=AGENT) == updates
    assert value(families["shepherd_refused_updates"], "_total", agent=AGENT) == 0
    assert value(families["shepherd_unlearned_steps"], "_total", agent=AGENT) == 0  # two sessions, two rollout columns
    assert value(families["shepherd_training_update_duration_seconds"], "_sum", agent=AGENT) > 0
    # every message but the episodes' last (which ask for no action) waited in the queue and was answered
    latency = families["shepherd_act_latency_seconds"]
    assert value(latency, "_count", agent=AGENT, part="queue_wait") == 400 - 20
    assert value(latency, "_count", agent=AGENT, part="forward") > 0
    assert value(latency, "_bucket", agent=AGENT, part="forward", le="+Inf") == value(
        latency, "_count", agent=AGENT, part="forward")
    buckets = [s.value for s in latency.samples if s.name.endswith("_bucket") and s.labels["part"] == "queue_wait"]
    assert buckets == sorted(buckets)  # cumulative
    batches = families["shepherd_batch_size"]
    assert value(batches, "_count", agent=AGENT) > 0
    assert value(batches, "_sum", agent=AGENT) == value(latency, "_count", agent=AGENT, part="queue_wait")
    # checkpoints every 100 steps
    assert value(families["shepherd_checkpoint_duration_seconds"], "_count", agent=AGENT) >= 3
    # requests by route pattern and status; an unknown session is a 401 on the same route
    requests = families["shepherd_http_requests"]
    assert value(requests, "_total", method="POST", route="/shepherd/env/", status="200") == 400
    assert value(requests, "_total", method="POST", route="/shepherd/env/", status="401") == 1
    assert value(requests, "_total", method="POST", route="/shepherd/login_user/", status="200") == 2
    assert value(requests, "_total", method="GET", route="/metrics", status="200") == 1
    assert value(families["process_resident_memory_bytes"]) > 10 * 2 ** 20


async def test_envs_no_rollout_row_was_free_for_are_counted_as_unlearned(aiohttp_client, tmp_path):
    """A vector session of 3 envs on an agent of n_envs 2: its third env acts, and is not learned from."""
    app, client = await serve(aiohttp_client, tmp_path)
    reply = await client.post("/shepherd/login_user/", json={"apikey": app[CREATED_KEYS]["pole"], "n_envs": 3})
    assert reply.status == 200, await reply.text()
    key = (await reply.json())["session_key"]
    for _ in range(5):
        reply = await client.post("/shepherd/env/", json={
            "session_key": key, "obs": [[0.0, 0.1, 0.2, 0.3]] * 3, "reward": [1.0] * 3, "terminated": [False] * 3,
            "truncated": [False] * 3})
        assert reply.status == 200, await reply.text()
    learner = app[GRAPH].runtime().learner
    assert learner.algorithm.unlearned_steps > 0
    families = await scrape(client)
    assert value(families["shepherd_unlearned_steps"], "_total", agent=AGENT) == learner.algorithm.unlearned_steps


async def test_routes_are_counted_by_pattern_never_by_raw_path(aiohttp_client, tmp_path):
    app, client = await serve(aiohttp_client, tmp_path)
    token = app[CREATED_ADMIN_TOKEN]
    for agent_id in (1, 2, 777):
        await client.get(f"/shepherd/admin/api/agents/{agent_id}", headers={"Authorization": f"Bearer {token}"})
    for path in ("/nothing/here", "/nothing/else"):
        assert (await client.get(path)).status == 404
    await client.request("TRACE", "/metrics")
    requests = (await scrape(client))["shepherd_http_requests"]
    routes = {s.labels["route"] for s in requests.samples}
    assert "/shepherd/admin/api/agents/{agent_id}" in routes
    assert not any("777" in route or "nothing" in route for route in routes)
    assert value(requests, "_total", method="GET", route="unmatched", status="404") == 2
    assert value(requests, "_total", method="GET", route="/shepherd/admin/api/agents/{agent_id}", status="200") == 1
    assert value(requests, "_total", method="GET", route="/shepherd/admin/api/agents/{agent_id}", status="404") == 2
    assert value(requests, "_total", method="other", route="unmatched", status="405") == 1  # no route takes TRACE


async def test_metrics_off_is_404(aiohttp_client, tmp_path):
    _, client = await serve(aiohttp_client, tmp_path, metrics="off")
    reply = await client.get("/metrics")
    assert reply.status == 404
    assert "error" in await reply.json()


async def test_metrics_open_answers_anyone(aiohttp_client, tmp_path):
    _, client = await serve(aiohttp_client, tmp_path, metrics="open")
    assert "shepherd_agent_up" in await scrape(client, {"X-Forwarded-For": "203.0.113.9"})


async def test_metrics_local_answers_loopback_or_the_admin_token_only(aiohttp_client, tmp_path):
    app, client = await serve(aiohttp_client, tmp_path)  # local is the default
    assert "shepherd_agent_up" in await scrape(client)  # the test client is on 127.0.0.1
    proxied = {"X-Forwarded-For": "203.0.113.9"}  # what a proxy on this machine adds: not a local client
    reply = await client.get("/metrics", headers=proxied)
    assert reply.status == 401
    assert "admin token" in (await reply.json())["error"]
    agent_key = app[CREATED_KEYS]["pole"]
    reply = await client.get("/metrics", headers={**proxied, "Authorization": f"Bearer {agent_key}"})
    assert reply.status == 403
    reply = await client.get("/metrics", headers={**proxied, "Authorization": "Bearer wrong"})
    assert reply.status == 401
    admin = {**proxied, "Authorization": f"Bearer {app[CREATED_ADMIN_TOKEN]}"}
    assert "shepherd_agent_up" in await scrape(client, admin)


@pytest.mark.parametrize("peer, headers, local", [
    ("127.0.0.1", {}, True), ("127.8.9.10", {}, True), ("::1", {}, True), ("::ffff:127.0.0.1", {}, True),
    ("10.0.0.5", {}, False), ("203.0.113.9", {}, False), ("2001:db8::1", {}, False),
    ("127.0.0.1", {"X-Forwarded-For": "203.0.113.9"}, False), ("127.0.0.1", {"Forwarded": "for=1.2.3.4"}, False),
])
def test_a_local_peer_is_a_loopback_address_through_no_proxy(peer, headers, local):
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (peer, 1234) if name == "peername" else default
    request = make_mocked_request("GET", "/metrics", headers=headers, transport=transport)
    assert monitoring.local_peer(request) is local


async def test_health_is_ok_when_every_learner_serves(aiohttp_client, tmp_path):
    _, client = await serve(aiohttp_client, tmp_path)
    reply = await client.get("/shepherd/health")
    assert reply.status == 200
    assert await reply.json() == {"status": "ok", "store": "writable",
                                  "agents": {"serving": 1, "failed": 0, "restoring": 0, "long_updates": 0},
                                  "checkpoints": {"failing": 0}, "failures": {}, "checkpoint_failures": {},
                                  "restoring": [], "long_updates": {}}
    assert not list((tmp_path / "data").glob(".health.*"))  # the probe left nothing behind


async def test_health_shows_a_failed_learner_as_degraded_with_its_reason(aiohttp_client, tmp_path):
    app, client = await serve(aiohttp_client, tmp_path, metrics="open")
    runtime = next(iter(app[GRAPH].runtimes.values()))
    runtime.learner.failure = "FloatingPointError: update 3 made the policy's weights NaN"
    reply = await client.get("/shepherd/health")
    assert reply.status == 200  # alive: the other agents serve; an admin restarts the failed one
    assert await reply.json() == {"status": "degraded", "store": "writable",
                                  "agents": {"serving": 0, "failed": 1, "restoring": 0, "long_updates": 0},
                                  "checkpoints": {"failing": 0}, "failures": {AGENT: runtime.learner.failure},
                                  "checkpoint_failures": {}, "restoring": [], "long_updates": {}}
    assert value((await scrape(client))["shepherd_agent_up"], agent=AGENT) == 0


async def test_health_names_failures_only_to_whoever_may_read_metrics(aiohttp_client, tmp_path):
    app, client = await serve(aiohttp_client, tmp_path)
    next(iter(app[GRAPH].runtimes.values())).learner.failure = "RuntimeError: broken"
    reply = await client.get("/shepherd/health", headers={"X-Forwarded-For": "203.0.113.9"})
    assert reply.status == 200
    assert await reply.json() == {"status": "degraded", "store": "writable",
                                  "agents": {"serving": 0, "failed": 1, "restoring": 0, "long_updates": 0}, "checkpoints": {"failing": 0}}


async def test_health_is_degraded_while_a_learner_s_process_is_created_again(aiohttp_client, tmp_path, monkeypatch):
    """A learner in a Ray actor being created again (its actor or its node died) is not available: degraded,
    counted as restoring and named, not failed."""
    app, client = await serve(aiohttp_client, tmp_path, metrics="open")
    learner = next(iter(app[GRAPH].runtimes.values())).learner
    monkeypatch.setattr(type(learner), "available", property(lambda self: False))
    reply = await client.get("/shepherd/health")
    assert reply.status == 200
    body = await reply.json()
    assert body["status"] == "degraded"
    assert body["agents"] == {"serving": 0, "failed": 0, "restoring": 1, "long_updates": 0}
    assert body["restoring"] == [AGENT] and body["failures"] == {}


async def test_failing_checkpoints_show_in_health_and_metrics_with_the_last_good_one_s_age(aiohttp_client, tmp_path,
                                                                                         monkeypatch):
    from shepherd.agents import checkpoint

    app, client = await serve(aiohttp_client, tmp_path, metrics="open")
    apikey = app[CREATED_KEYS]["pole"]
    runtime = next(iter(app[GRAPH].runtimes.values()))
    real_write = checkpoint.write

    def full_disk(path, *args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "write", full_disk)
    await train(client, apikey, 120)  # a checkpoint comes due at 100 steps, and fails
    await asyncio.sleep(0.2)
    reply = await (await client.get("/shepherd/health")).json()
    assert reply["status"] == "degraded" and reply["agents"] == {"serving": 1, "failed": 0, "restoring": 0, "long_updates": 0}
    assert reply["checkpoints"] == {"failing": 1} and reply["failures"] == {}
    trouble = reply["checkpoint_failures"][AGENT]
    assert "1 checkpoint write(s) failed in a row" in trouble and "No space left on device" in trouble
    assert "no checkpoint written yet" in trouble
    families = await scrape(client)
    assert value(families["shepherd_checkpoint_failures"], "_total", agent=AGENT) == 1
    assert not families["shepherd_checkpoint_age_seconds"].samples  # none written yet
    monkeypatch.setattr(checkpoint, "write", real_write)
    runtime.checkpoints._retry_at = 0.0  # the retry is due (its back-off is seconds long)
    await train(client, apikey, 5)
    await asyncio.wrap_future(runtime.checkpoints.pending)
    await asyncio.sleep(0.05)
    reply = await (await client.get("/shepherd/health")).json()
    assert reply["status"] == "ok" and reply["checkpoints"] == {"failing": 0}
    families = await scrape(client)
    assert value(families["shepherd_checkpoint_failures"], "_total", agent=AGENT) == 1  # a count since the start
    assert 0 <= value(families["shepherd_checkpoint_age_seconds"], agent=AGENT) < 30


async def test_health_is_503_when_the_store_cannot_be_written(aiohttp_client, tmp_path):
    _, client = await serve(aiohttp_client, tmp_path)
    with mock.patch("tempfile.mkstemp", side_effect=OSError(28, "No space left on device")):
        reply = await client.get("/shepherd/health")
    assert reply.status == 503
    data = await reply.json()
    assert data["status"] == "unavailable"
    assert data["store"] == "not writable: No space left on device"


async def test_health_writes_to_the_data_folder_at_most_once_per_period(aiohttp_client, tmp_path):
    """Unauthenticated health checks, however many and however concurrent, make one probe write per
    `PROBE_SECONDS`."""
    app, client = await serve(aiohttp_client, tmp_path)
    with mock.patch("tempfile.mkstemp", wraps=monitoring.tempfile.mkstemp) as mkstemp:
        replies = await asyncio.gather(*(client.get("/shepherd/health") for _ in range(20)))
        replies += [await client.get("/shepherd/health") for _ in range(20)]
        assert {reply.status for reply in replies} == {200}
        assert mkstemp.call_count == 1
        app[HEALTH_PROBE]._at -= monitoring.PROBE_SECONDS  # the period passed: the next check probes again
        assert (await (await client.get("/shepherd/health")).json())["store"] == "writable"
        assert mkstemp.call_count == 2


async def test_health_is_503_before_the_graph_is_started(tmp_path):
    app = create_app(ServerConfig(graph_manager(), tmp_path / "data"))
    request = make_mocked_request("GET", "/shepherd/health", app=app)
    reply = await monitoring.health(request)
    assert reply.status == 503


def test_an_unknown_metrics_setting_is_refused(tmp_path):
    with pytest.raises(ValueError, match="off, local, open"):
        create_app(ServerConfig(graph_manager(), tmp_path / "data", metrics="public"))


def test_a_histogram_snapshot_is_cumulative_and_ends_with_inf():
    histogram = Histogram((0.1, 1.0))
    for observed in (0.05, 0.1, 0.5, 3.0):
        histogram.observe(observed)
    buckets, total = histogram.snapshot()
    assert buckets == [(0.1, 2), (1.0, 3), (math.inf, 4)]
    assert total == pytest.approx(3.65)
    assert histogram.count == 4


def test_each_app_keeps_a_registry_of_its_own(tmp_path):
    from prometheus_client import REGISTRY
    first, second = (create_app(ServerConfig(graph_manager(), tmp_path / name)) for name in ("a", "b"))
    assert first[METRICS].registry is not second[METRICS].registry
    assert not any(name.startswith("shepherd_") for name in REGISTRY._names_to_collectors)


async def test_health_is_degraded_while_a_learner_is_inside_one_long_update(aiohttp_client, tmp_path, monkeypatch):
    """Issue 48, L14: health said ``ok`` while a learner had been inside one update for 30 s or more (its clients
    waiting). Here every update is long (the bound set to 0) and one is held on the learner's thread: degraded,
    counted and named with how long; ok again once it ends."""
    app, client = await serve(aiohttp_client, tmp_path, metrics="open")
    monkeypatch.setattr(monitoring, "LONG_UPDATE_SECONDS", 0.0)
    learner = next(iter(app[GRAPH].runtimes.values())).learner
    model, inside, release = learner.algorithm.model, asyncio.Event(), __import__("threading").Event()
    loop, real_train = asyncio.get_running_loop(), learner.algorithm.model.train

    def held_train(*args, **kwargs):
        loop.call_soon_threadsafe(inside.set)
        assert release.wait(10)
        return real_train(*args, **kwargs)

    monkeypatch.setattr(model, "train", held_train)
    assert (await (await client.get("/shepherd/health")).json())["status"] == "ok"  # no update under way
    stepping = asyncio.create_task(train(client, app[CREATED_KEYS]["pole"], 40))  # a rollout of 2 x 16 fills
    await asyncio.wait_for(inside.wait(), 10)
    body = await (await client.get("/shepherd/health")).json()
    release.set()
    assert body["status"] == "degraded" and body["agents"]["long_updates"] == 1 and body["agents"]["serving"] == 1
    assert list(body["long_updates"]) == [AGENT] and body["long_updates"][AGENT].startswith("in one update for ")
    await stepping
    body = await (await client.get("/shepherd/health")).json()
    assert body["status"] == "ok" and body["long_updates"] == {}
