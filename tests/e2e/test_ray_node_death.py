"""A local Ray whose node dies (``run.py --ray`` alone): the head notices its raylet is gone, starts a new
local Ray, and creates its learners again there from their last checkpoints, reporting health degraded
meanwhile; its clients see only 503s and retries (no step counted twice), and a run still reaches its target."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")


@pytest.fixture
def local_ray():
    """A local Ray started by the head's `RayLink`, as ``run.py --ray`` starts it; this test process is its driver."""
    from ray._private import ray_constants

    from shepherd.agents.ray.cluster import link

    # RAY_AUTH_TOKEN stays set afterwards: this process's Ray keeps token authentication on once it was, and a
    # cluster started later in this process (tests/e2e/test_ray.py's) then needs the token in its environment
    saved = {name: os.environ.get(name) for name in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",)}
    joined = link(None)
    try:
        yield joined
    finally:
        joined.close()
        ray_constants.ENABLE_RAY_CLUSTER = True
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def raylet_of_this_process():
    return ray._private.worker._global_node.all_processes["raylet"][0].process


#: set in the process of its own that the first test runs in (`in_a_process_of_its_own`)
OWN_PROCESS = "SHEPHERD_RAY_NODE_DEATH_OWN_PROCESS"


@pytest.fixture
def in_a_process_of_its_own(request):
    """Run the test in a pytest process of its own and report its outcome here: the test is its Ray's driver, and
    after other tests' Ray clusters ran in the same process, Ray's core worker ended the whole process (every later
    test with it) at the head's `ray.shutdown()` after the raylet died ("Exiting because the Raylet IPC connection
    failed"); run alone it passes, and `run.py --ray` is such a process of its own."""
    if os.environ.get(OWN_PROCESS) == "1":
        yield
        return
    result = subprocess.run([sys.executable, "-m", "pytest", f"{__file__}::{request.node.name}", "-q",
                             "-p", "no:cacheprovider"], cwd=ROOT, env={**os.environ, OWN_PROCESS: "1"},
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    yield "ran"


@pytest.mark.timeout(960)
def test_a_dead_local_ray_node_is_replaced_and_the_learner_restored_with_no_step_counted_twice(
        in_a_process_of_its_own, request, tmp_path):
    if in_a_process_of_its_own == "ran":
        return  # it ran, and passed, in its own process
    local_ray = request.getfixturevalue("local_ray")
    from tests.e2e.test_ray import health, serve_and_lose_the_learner

    seen = []

    def kill_the_raylet(learner):
        raylet_of_this_process().send_signal(signal.SIGKILL)  # as the OOM killer would

    def while_down(learner, url):
        deadline = time.monotonic() + 30
        while learner.available and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not learner.available, "the head did not notice that its Ray node died"
        seen.append(health(url))

    serve_and_lose_the_learner(tmp_path, kill_the_raylet, link=local_ray, while_down=while_down)
    assert local_ray.restarts == 1 and local_ray.generation == 1
    assert raylet_of_this_process().poll() is None  # the new Ray's raylet runs
    assert seen[0]["status"] == "degraded" and seen[0]["agents"]["restoring"] == 1, seen[0]


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def descendants(pid):
    """The processes under ``pid`` (from /proc), with their command lines."""
    children: dict[int, list[int]] = {}
    commands = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = commands.get(child, "")
            todo.append(child)
    return found


@pytest.mark.timeout(900)
def test_run_py_reaches_its_target_when_its_local_ray_node_dies_mid_run(tmp_path):
    """The review's case: ``run.py --ray --clients 4``, its raylet killed once the learner checkpointed; the run
    still reaches its (shortened) target."""
    port, data = free_port(), tmp_path / "data"
    with open(tmp_path / "out", "w+") as out, open(tmp_path / "err", "w+") as err:
        run = subprocess.Popen(
            [sys.executable, str(ROOT / "run.py"), "-p", "cartpole_ppo", "-cp", "validation.target_return=150",
             "-cp", "schedule.checkpoint_every_steps=1000", "--clients", "4", "--port", str(port), "--data",
             str(data), "--ray", "-v"], cwd=ROOT, stdout=out, stderr=err, text=True)
        try:
            deadline = time.monotonic() + 300
            while not (data / "agents" / "1" / "model.zip").exists():
                assert run.poll() is None and time.monotonic() < deadline, "no checkpoint was written"
                time.sleep(0.2)
            raylets = [pid for pid, command in descendants(run.pid).items() if "/raylet/raylet" in command]
            assert raylets, descendants(run.pid)
            os.kill(raylets[0], signal.SIGKILL)
            status = run.wait(600)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait(30)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    assert status == 0, stdout[-2000:] + stderr[-4000:]
    assert "the local Ray node died (its raylet died)" in stderr
    assert "its Ray actor is back" in stderr
    assert stderr.index("its Ray actor is back") < stderr.index("target reached")  # reached after the node died
    assert "target reached" in stdout
