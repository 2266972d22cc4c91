"""Learners as Ray actors (run.py --ray), on a local multi-node Ray cluster on loopback sized for two cores:
a preset learns to its target over real HTTP, a killed learner actor comes back from its checkpoint with
its clients seeing only 503s and retries (no step counted twice), and without --ray Ray is never imported."""

import os
import subprocess
import sys
import threading
import time

import gymnasium as gym
import pytest

from shepherd.client import Client, ShepherdError
from tests.conftest import ROOT, TEST_PRESETS, ServerThread

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes on 127.0.0.1 (one logical CPU each); this test process is their driver."""
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    saved = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback addresses (see shepherd.agents.ray.cluster.connect)
    ray_constants.ENABLE_RAY_CLUSTER = False
    nodes = Cluster(initialize_head=True, connect=False,
                    head_node_args={"num_cpus": 1, "include_dashboard": False, "node_ip_address": "127.0.0.1"})
    nodes.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    nodes.wait_for_nodes()
    ray.init(address=nodes.address, namespace="shepherd", log_to_driver=False)
    try:
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()
        ray_constants.ENABLE_RAY_CLUSTER = True
        if saved is None:
            os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        else:
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = saved


def run_preset(cluster, tmp_path, *overrides):
    return subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-p", "cartpole_ppo", *overrides, "--clients", "4", "--port", "0",
         "--data", str(tmp_path / "data"), "--ray", cluster.address, "-v"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_cartpole_ppo_learns_with_its_learner_in_a_ray_actor(cluster, tmp_path):
    """A shortened target (200 instead of 475) keeps it under a minute; the next test runs the preset's."""
    result = run_preset(cluster, tmp_path, "-cp", "validation.target_return=200")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "target reached" in result.stdout
    assert "shepherd.agents.ray.cluster" in result.stderr  # it ran on Ray, not in-process
    assert (tmp_path / "data" / "agents" / "1" / "model.zip").stat().st_size > 10_000  # written by the head


def test_cartpole_ppo_learns_on_ray_behind_two_front_ends(cluster, tmp_path):
    """The whole of it at once: clients through two front-end processes, sessions on the head, the learner
    in a Ray actor."""
    result = run_preset(cluster, tmp_path, "-cp", "validation.target_return=200", "--front-ends", "2")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "target reached" in result.stdout
    assert "Front ends: 2 processes" in result.stdout
    assert "shepherd.agents.ray.cluster" in result.stderr


def test_front_ends_answer_evaluate_steps_from_snapshots_of_the_actors_weights(cluster, server_factory):
    """With --ray, an evaluate-mode session's steps are answered by the front end from a snapshot of the weights
    the learner actor published, and recorded once by the head."""
    from tests.e2e.test_front_end_snapshots import OBSERVATIONS, SNAPSHOT_HEADER, Connection, deploy_steps

    server = server_factory(str(TEST_PRESETS / "tiny_ppo.py"), "--front-ends", "1", "--ray", cluster.address)
    public = Connection(server.url)
    try:
        status, _, login = public.post("/shepherd/login_user/", {"apikey": server.api_key, "mode": "evaluate"})
        assert status == 200, login
        answered_here = 0
        for seq, obs in enumerate(OBSERVATIONS, start=1):
            status, headers, reply = public.post("/shepherd/env/", {
                "session_key": login["session_key"], "obs": obs, "reward": 1.0, "done": seq % 20 == 0, "seq": seq})
            assert status == 200, reply
            answered_here += SNAPSHOT_HEADER in headers
            if seq <= 2:
                time.sleep(1.0)  # the head's snapshot of the actor's weights, then the front end's of it
        assert answered_here >= len(OBSERVATIONS) - 4, answered_here
        assert deploy_steps(server) == len(OBSERVATIONS) - 3
    finally:
        public.close()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_cartpole_ppo_reaches_its_preset_target_on_ray(cluster, tmp_path):
    result = run_preset(cluster, tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "target reached" in result.stdout


class CountingClient(Client):
    """A client that notes every error status it was answered with (it retries 503s and 429s itself)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.statuses: list[int] = []

    def post(self, path, payload):
        try:
            return super().post(path, payload)
        except ShepherdError as error:
            self.statuses.append(error.status)
            raise


def drive(url, key, seed, stop, totals, index):
    """Step CartPole until ``stop``; ``totals[index]`` = (steps sent, episodes begun, error statuses)."""
    client = CountingClient(url, key, timeout=60, retry_seconds=120)
    client.login()
    episodes = [0]
    try:
        play(client, seed, stop, episodes)
    finally:
        totals[index] = (client.seq, episodes[0], client.statuses)
        client.close()


def play(client, seed, stop, episodes):
    """Step CartPole episodes through a logged-in client until ``stop`` (an episode under way is finished);
    ``episodes[0]`` counts the episodes begun."""
    env = gym.make("CartPole-v1")
    while not stop.is_set():
        obs, _ = env.reset(seed=seed + episodes[0])
        episodes[0] += 1
        action = client.step(obs.tolist(), 0.0, False)
        while True:
            obs, reward, terminated, truncated, _ = env.step(action)
            action = client.step(obs.tolist(), float(reward), terminated or truncated, truncated=truncated)
            if terminated or truncated:
                break


def health(url):
    """The server's /shepherd/health reply (the test is a local client: its details included)."""
    import json
    import urllib.request

    with urllib.request.urlopen(url + "/shepherd/health", timeout=10) as reply:
        return json.loads(reply.read())


def serve_and_lose_the_learner(tmp_path, lose, actor_options=None, after=None, num_cpus=0.0, link=None,
                               while_down=None):
    """Serve tiny_ppo with its learner on Ray, drive it with two clients, ``lose(learner)`` once a
    checkpoint is written, ``while_down(learner, url)`` then (before its actor is back), ``after(learner)``
    once a new actor took over, and check that the agent resumed from the checkpoint with every step
    counted once."""
    from shepherd.agents.ray.cluster import RayLearners
    from shepherd.graph import GraphManager
    from shepherd.loading import load_preset
    from shepherd.http import ServerConfig

    graph = GraphManager.of(load_preset(str(TEST_PRESETS / "tiny_ppo.py")))
    graph.remote_learners = RayLearners(num_cpus, actor_options) if link is None else RayLearners(
        num_cpus, actor_options, link)
    server = ServerThread(ServerConfig(graph, tmp_path / "data")).start_and_wait()
    stop, totals = threading.Event(), [None, None]
    try:
        runtime = graph.runtime()
        learner = runtime.learner
        key = server.server.created_keys["tiny"]
        clients = [threading.Thread(target=drive, args=(server.server.url, key, 100 * i, stop, totals, i), daemon=True)
                   for i in range(2)]
        for thread in clients:
            thread.start()
        deadline = time.monotonic() + 60
        while not (runtime.model_path.exists() and learner.steps >= 600) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert runtime.model_path.exists(), "no checkpoint was written"
        lose(learner)
        if while_down is not None:
            while_down(learner, server.server.url)
        deadline = time.monotonic() + 120
        while learner.restarts == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert learner.restarts == 1, f"the learner actor was not started again (failure: {learner.failure})"
        resumed_at = learner.steps
        if after is not None:
            after(learner)
        deadline = time.monotonic() + 60  # the clients go on with the new actor (slower on a loaded machine)
        while learner.steps <= resumed_at and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)
        stop.set()
        for thread in clients:
            thread.join(150)
            assert not thread.is_alive(), "a client got stuck"
        assert all(totals), f"a client failed: {totals}"
        assert learner.failure is None
        assert learner.steps > resumed_at >= 200  # restored from a checkpoint (every 200 steps), learning again
        statuses = {status for _, _, seen in totals for status in seen}
        assert statuses <= {503}, f"clients saw {statuses}"
        assert 503 in statuses, "no client was stepping while the actor was down"
        # every step the clients sent (their seq, less the first step of each episode, which begins it and
        # is no transition) is counted exactly once, retries included
        sent = sum(seq - episodes for seq, episodes, _ in totals)
        assert sum(runtime.phase_steps.values()) == runtime.tracker.steps == sent
    finally:
        stop.set()
        server.stop()


def test_a_killed_learner_actor_resumes_from_its_checkpoint_and_no_step_counts_twice(cluster, tmp_path):
    # the process dies; Ray does not restart it (max_restarts=0): the head makes a new one
    serve_and_lose_the_learner(tmp_path, lambda learner: ray.kill(learner.handle, no_restart=False))


def test_a_learner_whose_node_is_removed_waits_for_the_cluster_to_place_it_again(cluster, tmp_path):
    """``--ray ADDRESS``: the only node that can hold the learner (a resource no other node has) is removed
    mid-run; the head answers 503 (Retry-After) and reports the learner restoring (health degraded) while
    the cluster cannot place it, and creates it again, restored from its checkpoint, once a node that can
    joins; the clients' every step is counted once."""
    doomed = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1", resources={"learner": 1})
    cluster.wait_for_nodes()
    seen = []

    def remove_its_node(learner):
        node = ray.get(learner.handle.node.remote())
        assert node == doomed.node_id, "the learner's actor is not on the only node with its resource"
        cluster.remove_node(doomed)

    def wait_then_add_a_node(learner, url):
        deadline = time.monotonic() + 60
        while learner.available and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not learner.available, "the head did not notice its actor's node died"
        time.sleep(15)  # longer than a placement slice: the head keeps waiting for room, it does not give up
        assert learner.restarts == 0 and learner.failure is None
        seen.append(health(url))
        cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1", resources={"learner": 1})

    serve_and_lose_the_learner(tmp_path, remove_its_node, {"resources": {"learner": 1}},
                               after=lambda learner: seen.append(ray.get(learner.handle.node.remote())),
                               while_down=wait_then_add_a_node)
    assert seen[0]["status"] == "degraded" and seen[0]["agents"]["restoring"] == 1, seen[0]
    assert seen[0]["restoring"] == ["tests/tiny"] and seen[0]["failures"] == {}, seen[0]
    assert seen[1] != doomed.node_id


def test_a_learner_whose_node_is_removed_resumes_on_another_node(cluster, tmp_path):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    doomed = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    deadline = time.monotonic() + 30  # until the scheduler knows the node (the affinity below is best effort)
    while not any(node["NodeID"] == doomed.node_id and node["Alive"] for node in ray.nodes()):
        assert time.monotonic() < deadline, "the new node never joined"
        time.sleep(0.2)
    placed = []

    def remove_its_node(learner):
        placed.append(ray.get(learner.handle.node.remote()))
        hosts = [node for node in cluster.worker_nodes if node.node_id == placed[0]]
        assert hosts, "the learner's actor runs on the head node, which cannot be removed"
        cluster.remove_node(hosts[0])

    serve_and_lose_the_learner(  # first on the new node, likely; anywhere once it is gone (the affinity is soft)
        tmp_path, remove_its_node, {"scheduling_strategy": NodeAffinitySchedulingStrategy(doomed.node_id, soft=True)},
        after=lambda learner: placed.append(ray.get(learner.handle.node.remote())), num_cpus=0.5)
    assert placed[1] != placed[0]


@pytest.mark.parametrize("algorithm", ["DQN", "PPO"])
async def test_sb3s_training_values_reach_the_heads_metrics_files(cluster, tmp_path, algorithm, frequent_rows):
    """The in-process metrics test's agents, on Ray: what SB3's train() records in the actor is in the
    head's CSV and TensorBoard rows as in-process (a row per PPO update with its values)."""
    from shepherd.agents.ray.cluster import RayLearners
    from tests.integration.test_training_metrics import check_metrics, serve_and_drive

    check_metrics(await serve_and_drive(tmp_path / "data", algorithm, 400, RayLearners()), algorithm)


@pytest.mark.parametrize("algorithm", ["DQN", "PPO"])
async def test_a_restart_changes_nothing_a_seeded_agent_learns_in_a_ray_actor(cluster, tmp_path, algorithm):
    """The in-process exact-resume test's agents, each learner in a Ray actor: the checkpoint's files (the zip
    and DQN's replay buffer) cross from the actor to the head's data folder and back to a new actor."""
    from shepherd.agents.ray.cluster import RayLearners
    from tests.integration.test_exact_resume import check_the_same, run

    check_the_same(await run(tmp_path / "straight", algorithm, False, RayLearners()),
                   await run(tmp_path / "resumed", algorithm, True, RayLearners()))
    assert (tmp_path / "resumed" / "agents" / "1" / "replay_buffer.pkl").exists() == (algorithm == "DQN")


def test_without_ray_it_is_never_imported(tmp_path):
    code = f"""
import sys
from shepherd.cli.main import build_parser
from shepherd.graph import GraphManager
from shepherd.loading import load_preset
from shepherd.storage import Store
build_parser()
graph = GraphManager.of(load_preset("cartpole_ppo"))
store = Store({str(tmp_path / "data")!r})
graph.create_graph(store)
graph.close()
store.close()
assert "ray" not in sys.modules, "ray was imported"
print("no ray")
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "no ray" in result.stdout


def drive_client(url, key, name, seed, stop, errors):
    """Step CartPole as the advised agent's client ``name`` until ``stop``."""
    try:
        client = Client(url, key, timeout=60, retry_seconds=60, client=name)
        client.login()
        try:
            play(client, seed, stop, [0])
        finally:
            client.close()
    except Exception as error:  # noqa: BLE001 - the test reports it
        errors.append(f"{name}: {type(error).__name__}: {error}")


def test_an_advised_agents_clients_learn_in_named_actors_and_the_advisee_reads_its_advisors_weights(
        cluster, tmp_path, frequent_rows):
    """tiny_ppo_advised over HTTP with two named clients: each client's learner is its own named actor, both
    learn, the graph on the head gives one the other as advisor, and the advisee's actor reads the
    advisor's actor's published weights (the head forwards only the advisor's actor name), plays a trial
    episode with the advisor's actor's greedy policy (frozen on the head), and adopts the advisor's weights
    when the graph asks; a third client plugged in later plays plug-in trials and its actor adopts the
    chosen policy before it learns a step; each client's metrics, in its folder on the head, have SB3's
    training values."""
    from shepherd.agents.advice import Adoption
    from shepherd.agents.ray.actor import NAMESPACE
    from shepherd.agents.ray.cluster import RayLearners
    from shepherd.agents.ray.learner import RayLearner
    from shepherd.graph import AdvisedAgent, GraphManager
    from shepherd.loading import load_preset
    from shepherd.graph.runtime import client_folder
    from shepherd.level import Phase
    from shepherd.level.episodes import Trial
    from shepherd.storage.metrics import progress_path, read_progress
    from shepherd.http import ServerConfig

    graph = GraphManager.of(load_preset(str(TEST_PRESETS / "tiny_ppo_advised.py")))
    graph.remote_learners = RayLearners()
    server = ServerThread(ServerConfig(graph, tmp_path / "data")).start_and_wait()
    stop, errors = threading.Event(), []
    try:
        key = server.server.created_keys["arms"]
        clients = [threading.Thread(target=drive_client, args=(server.server.url, key, name, 100 * i, stop, errors),
                                    daemon=True) for i, name in enumerate(("arm-1", "arm-2"))]
        for thread in clients:
            thread.start()
        advised = graph.preset_agent("arms", AdvisedAgent)
        agent_id = advised.record.id
        names = {client: f"shepherd-learner/{agent_id}/{client}" for client in ("arm-1", "arm-2")}
        read, seen, deadline = None, [], time.monotonic() + 60
        while read is None and time.monotonic() < deadline and not errors:
            time.sleep(0.5)
            for row in advised.describe_clients():
                if row["advisor"] is None:
                    continue
                status = ray.get(ray.get_actor(names[row["client"]], namespace=NAMESPACE).advice_status.remote())
                seen.append((row["client"], row["advisor"], status))
                if status["advisor"] == names[row["advisor"]] and status["reads"] >= 2 and status["version"] > 0:
                    read = status  # the advisee's actor read newer weights of its advisor's actor as it learned
                    advisee, advisor = row["client"], row["advisor"]
        assert not errors, errors
        assert seen, "the graph gave no client an advisor"
        assert read is not None, f"the advisee's actor read no weights of its advisor's actor: {seen[-5:]}"
        advisee_runtime = advised.clients[advisee]
        trial = Trial(advisor, advised.clients[advisor].learner)  # asks the advisor's actor for its weights
        snapshot, deadline = advised.clients[advisor].learner.greedy.source, time.monotonic() + 30
        while snapshot.weights is None and time.monotonic() < deadline:
            time.sleep(0.05)  # as between choose_advisors queuing a trial and the advisee's next episode
        assert snapshot.weights is not None, "asked once, the advisor's actor sent no weights to the head"
        advisee_runtime.trials.clear()  # trials the graph queued itself (it may have tried the advisor already)
        advisee_runtime.trials.append(trial)  # as choose_advisors queues one
        deadline = time.monotonic() + 60
        while not trial.done and time.monotonic() < deadline and not errors:
            time.sleep(0.2)  # the advisee's next training episode is played by the advisor's actor, greedily
        assert trial.done, "the trial of the advisor's policy was not played"
        assert advisor in advised.tried.get(advisee, {})
        trials = [r for r in graph.store.returns(advisee_runtime.record.id, client=advisee) if r.phase == "trial"]
        assert trial.returns[0] in [r.value for r in trials]
        assert advisee_runtime.phase_episodes[Phase.TRIAL] >= 1
        assert trial.frozen is not None  # played by the head's frozen copy of the advisor actor's weights
        adopted, request, deadline = None, 1000, time.monotonic() + 60
        while adopted is None and time.monotonic() < deadline and not errors:
            for row in advised.describe_clients():  # the graph's adoption request, to whoever advises now
                if row["advisor"] is not None:
                    request += 1
                    advised.clients[row["client"]].learner.algorithm.advice.adopt = Adoption(row["advisor"], request)
                    status = ray.get(ray.get_actor(names[row["client"]], namespace=NAMESPACE).advice_status.remote())
                    adopted = status if status["adoptions"] >= 1 else None
            time.sleep(0.5)
        assert adopted is not None, "no advisee's actor adopted its advisor's weights"
        assert set(advised.clients) == {"arm-1", "arm-2"}
        for client, runtime in advised.clients.items():
            learner = runtime.learner
            assert isinstance(learner, RayLearner) and learner.actor_name == names[client]
            assert ray.get_actor(names[client], namespace=NAMESPACE) is not None
            assert learner.failure is None
            assert learner.steps > 0 and runtime.tracker.steps > 0, f"client {client} did not learn"
        folders = [client_folder(graph.store.agent_folder(agent_id), client) for client in names]
        # a client plugged in now tries the rated clients' policies (frozen on the head) on its system first,
        # and its actor adopts the tried policy of the advisor the head then chooses, before it learns
        deadline = time.monotonic() + 60
        while any(r.recent_return is None for r in advised.clients.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        late = threading.Thread(target=drive_client, args=(server.server.url, key, "arm-3", 300, stop, errors),
                                daemon=True)
        clients.append(late)
        late.start()
        adopted, deadline = None, time.monotonic() + 90
        while adopted is None and time.monotonic() < deadline and not errors:
            time.sleep(0.5)
            if "arm-3" in advised.clients and "arm-3" not in advised.plugging:
                actor = ray.get_actor(f"shepherd-learner/{agent_id}/arm-3", namespace=NAMESPACE)
                status = ray.get(actor.advice_status.remote())
                adopted = status if status["adoptions"] >= 1 else None
        assert not errors, errors
        new = advised.clients["arm-3"]
        assert new.phase_episodes[Phase.TRIAL] >= 1 and set(advised.tried["arm-3"]) <= {"arm-1", "arm-2"}
        assert adopted is not None, f"the plugged-in client's actor adopted nothing: {advised.describe_clients()}"
        assert adopted["adopted_at"] == 0, adopted  # before it learned a step
    finally:
        stop.set()
        for thread in clients:
            thread.join(60)
        server.stop()
    for folder in folders:
        rows = read_progress(progress_path(folder), 1000, ["train/approx_kl", "train/loss"]).rows
        assert any(kl is not None and loss is not None for kl, loss in rows), f"{folder}: no SB3 values"


def test_client_acting_sessions_learn_on_ray_one_actor_call_per_upload(cluster, server_factory):
    """A client acting with the policy file uploads its blocks; the learner in the Ray actor learns each one
    as the in-process one does (an update per rollout: the version moves on with every 16 x 4 training block), exports
    the file from its own weights, and refuses a stale block with 409 naming the current version."""
    import http.client
    import json
    from urllib.parse import urlsplit

    from shepherd.client.acting import ActingClient, run_acting_env

    server = server_factory(str(TEST_PRESETS / "tiny_ppo_vector.py"), "--ray", cluster.address)
    client = ActingClient(server.url, server.api_key, 4, seed=0)
    try:
        opened = client.login()
        assert (opened["acting"], opened["policy_version"], opened["steps"]) == ("client", 0, 16)
        run_acting_env(client, "CartPole-v1", seed=0, steps=3 * 64)  # training blocks (evaluation at 256)
        assert (client.policy_version, client.phase) == (3, "train") and client.fetches == 4  # a file per update
        assert client.metadata["policy_version"] == client.policy_version
        steps = client.steps
        stale = {"session_key": client.session_key, "seq": client.seq + 1, "policy_version": 0,
                 "obs": [[[0.0] * 4] * 4] * (steps + 1), "sample": [[0] * 4] * steps,
                 "reward": [[1.0] * 4] * steps, "terminated": [[False] * 4] * steps,
                 "truncated": [[False] * 4] * steps, "final_obs": None}
        connection = http.client.HTTPConnection(urlsplit(server.url).netloc, timeout=60)
        connection.request("POST", "/shepherd/experience/", json.dumps(stale), {"Content-Type": "application/json"})
        response = connection.getresponse()
        body = json.loads(response.read())
        connection.close()
        assert response.status == 409 and body["policy_version"] == client.policy_version, body
        assert ray.get_actor("shepherd-learner/1", namespace="shepherd") is not None  # learned there
    finally:
        client.close()


def test_cartpole_ppo_acting_at_the_client_learns_on_ray(cluster, tmp_path):
    """The preset with one client of 8 envs acting at the client, its learner in a Ray actor: a shortened
    target (200 instead of 475) is reached."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-p", "cartpole_ppo", "-cp", "validation.target_return=200",
         "--clients", "1", "--envs-per-client", "8", "--acting", "client", "--port", "0",
         "--data", str(tmp_path / "data"), "--ray", cluster.address, "-v"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "target reached" in result.stdout
    assert "shepherd.agents.ray.cluster" in result.stderr  # it ran on Ray, not in-process
