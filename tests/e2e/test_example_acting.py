"""examples/cartpole_client.js --acting client against a real server: the policy runs in Node with
onnxruntime-node, the experience travels in blocks over real HTTP, and the agent learns CartPole from it."""

import http.client
import json
import os
import shutil
import subprocess
import time

import pytest

from tests.conftest import ROOT, TEST_PRESETS

SCRIPT = ROOT / "examples" / "cartpole_client.js"
#: a modest target for a PPO CartPole agent (CartPole's episodes end at 500): far above a random policy's ~22
TARGET = 200.0


def node() -> str:
    executable = shutil.which("node")
    if executable is None:
        pytest.skip("Node.js is not installed (scripts/install.sh --test installs it)")
    assert (ROOT / "examples" / "node_modules" / "onnxruntime-node").is_dir(), \
        "onnxruntime-node is missing: run `npm install` in examples/ (scripts/install.sh --test does)"
    return executable


def last_evaluation(server) -> dict | None:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET", "/shepherd/admin/api/agents/1",
                           headers={"Authorization": f"Bearer {server.admin_token}"})
        response = connection.getresponse()
        assert response.status == 200
        return json.loads(response.read())["last_evaluation"]
    finally:
        connection.close()


def returns_recorded(data) -> list[dict]:
    path = data / "agents" / "1" / "returns.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_javascript_client_acting_at_the_client_learns_cartpole(server_factory, tmp_path):
    """cartpole_ppo (RL Zoo's PPO, 8 rollout segments) fed by one Node client of 8 CartPoles acting with the
    served file: every upload of 32 x 8 rows completes a rollout, the reply names the next version and the
    client fetches it; an evaluation period (greedy blocks) reaches the target within two minutes."""
    executable = node()
    server = server_factory("cartpole_ppo", "--seed", "0", "-cp", "schedule.steps_between_evaluation_periods=2000")
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key}
    out, err = tmp_path / "client.out", tmp_path / "client.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        client = subprocess.Popen([executable, str(SCRIPT), "--acting", "client", "--envs", "8"], env=env,
                                  stdout=stdout, stderr=stderr, text=True)
    try:
        deadline, evaluation = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            assert client.poll() is None, err.read_text()
            evaluation = last_evaluation(server)
            if evaluation is not None and evaluation["mean_return"] >= TARGET:
                break
            time.sleep(1.0)
    finally:
        client.kill()
        client.wait()
    assert evaluation is not None and evaluation["mean_return"] >= TARGET, (evaluation, out.read_text()[-2000:])
    lines = out.read_text().splitlines()
    assert lines[0].startswith("logged in to agent cartpole acting at the client with 8 CartPole(s)")
    assert "phase train, policy version 0, 32 steps a block" in lines[0]
    fetched = [line for line in lines if line.startswith("acting with policy version")]
    assert any("phase train (noise_size 1)" in line for line in fetched)  # a categorical draw: one uniform
    assert any("phase evaluate (noise_size 0)" in line for line in fetched)  # greedy, noise ignored
    versions = [int(line.split()[4].rstrip(",")) for line in fetched]
    # one update per upload (8 x 32 rows fill the rollout), each version fetched as it came; an evaluation's
    # greedy file is fetched at the version of the training file before it
    assert versions == sorted(versions) and set(versions) == set(range(versions[-1] + 1))
    assert "refused" not in err.read_text()  # one session of 8 envs fills every rollout: nothing is ever stale
    # every episode it printed was recorded by the server, in order, with the same return
    printed = [float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("episode ")]
    recorded = [row["value"] for row in returns_recorded(server.data)]
    assert printed and recorded[:len(printed)] == printed
    assert {row["phase"] for row in returns_recorded(server.data)} >= {"train", "evaluate"}
    assert server.stop() == 0


def test_an_upload_that_waits_out_a_slow_update_is_retried_with_its_seq_and_recorded_once(server_factory):
    """Every upload of 2 CartPoles x 16 steps completes tiny's rollout, whose update (300 epochs) outlasts the
    act timeout (0.1 s): the upload is answered 503, sent again with its seq, and counted once."""
    executable = node()
    server = server_factory(str(TEST_PRESETS / "tiny_ppo.py"), "--act-timeout", "0.1", "-cp",
                            "agents.tiny.parameters.n_epochs=300", "--parameter-bound", "n_epochs=1:300")
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key}
    result = subprocess.run([executable, str(SCRIPT), "6", "--acting", "client", "--envs", "2"], env=env,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert "retrying upload seq" in result.stderr and "HTTP 503" in result.stderr  # it did wait out updates
    played = [float(line.rsplit(" ", 1)[1]) for line in result.stdout.splitlines() if line.startswith("episode ")]
    assert len(played) >= 6
    assert [row["value"] for row in returns_recorded(server.data)] == played
    assert server.stop() == 0


def test_stale_uploads_of_two_off_policy_clients_are_dropped_and_their_episodes_not_counted(server_factory):
    """Two clients of a DQN agent at max_policy_lag 0: each upload's gradient steps make the other client's
    block stale (409 with the current version). The client fetches the current file and goes on from where its
    CartPoles are; the episodes it prints are exactly those the server recorded."""
    executable = node()
    server = server_factory("cartpole_dqn", "-cp", "agents.cartpole-dqn.parameters.train_freq=16",
                            "-cp", "agents.cartpole-dqn.parameters.gradient_steps=4", "-cp", "schedule.heatup_steps=64")
    env = {**os.environ, "SHEPHERD_URL": server.url, "SHEPHERD_API_KEY": server.api_key}
    clients = [subprocess.Popen([executable, str(SCRIPT), "15", "--acting", "client", "--envs", "2"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [client.communicate(timeout=180) + (client.returncode,) for client in clients]
    for stdout, stderr, status in results:
        assert status == 0, stderr
    assert any("refused as stale" in stderr for _, stderr, _ in results)
    played = sorted(float(line.rsplit(" ", 1)[1]) for stdout, _, _ in results for line in stdout.splitlines()
                    if line.startswith("episode "))
    assert sorted(row["value"] for row in returns_recorded(server.data)) == played
    assert server.stop() == 0
