"""Crash safety over real processes: ``kill -9`` at random moments while clients train, and damaged files.

The promises: the store always opens, a checkpoint is never half-written, the agent resumes from its
last checkpoint and loses at most the steps since then, and a damaged file stops the server with a
clear error instead of a silent reset.
"""

import subprocess
import sys

from shepherd.graph import GraphManager
from shepherd.loading import load_preset
from shepherd.storage import Store
from benchmarks.crashloop import crash_loop
from tests.conftest import ROOT, TEST_PRESETS

TINY = str(TEST_PRESETS / "tiny_ppo.py")


def test_kill_9_at_random_moments_never_damages_the_store_and_loses_at_most_a_checkpoint(tmp_path):
    """benchmarks/crashloop.py's loop, shorter: a PPO and a DQN agent trained by a client each, the server
    killed with SIGKILL after 1 to 3 s, five times; the checks are the loop's (see its docstring)."""
    lines: list[str] = []
    # slack: a kill while a checkpoint is written leaves the one before it (rare; the long run reports it)
    rounds = crash_loop(tmp_path / "data", rounds=5, seed=20261122, min_s=1.0, max_s=3.0, report=lines.append,
                        slack=50)
    print("\n".join(lines))  # the per-round figures, shown with -s or when the test fails
    failures = [f"round {r.number}: {failure}" for r in rounds for failure in r.failures]
    assert not failures, "\n".join(lines + failures)
    assert {a.agent for a in rounds[-1].agents} == {"crash-ppo", "crash-dqn"}
    for agent in rounds[-1].agents:
        assert agent.resumed > 5 * 100, agent  # each agent kept learning across all those crashes
        assert agent.records > 5 * 5 and agent.duplicates == 0, agent
    assert all(a.replay_status == 401 for r in rounds for a in r.agents if a.replay_status is not None)


def run_server(data, timeout=60):
    return subprocess.run([sys.executable, str(ROOT / "run.py"), "-p", TINY, "--port", "0", "--data", str(data)],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def start_and_stop_in_process(data) -> int:
    """Create the tiny preset's agent (or resume it), checkpoint it, stop; returns its steps."""
    graph = GraphManager.of(load_preset(TINY))
    store = Store(data)
    try:
        graph.create_graph(store)
        steps = graph.runtime().tracker.steps
        graph.runtime().tracker.steps += 10  # as if it had learned: the next start must see it
        graph.close()
        return steps
    finally:
        store.close()


def test_a_damaged_store_or_checkpoint_stops_the_start_with_a_clear_error_and_is_left_alone(tmp_path):
    data = tmp_path / "data"
    start_and_stop_in_process(data)
    store, model = data / "store.json", data / "agents" / "1" / "model.zip"
    good_store, good_model = store.read_bytes(), model.read_bytes()

    store.write_bytes(good_store[: len(good_store) // 2])  # cut in the middle, by hand
    result = run_server(data)
    assert result.returncode == 2 and "store.json is damaged" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and store.read_bytes() == good_store[: len(good_store) // 2]
    store.write_bytes(good_store)

    model.write_bytes(good_model[:1000])
    result = run_server(data)
    assert result.returncode == 2 and "model.zip cannot be loaded" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and model.read_bytes() == good_model[:1000]
    model.write_bytes(good_model)

    assert start_and_stop_in_process(data) == 10  # repaired by hand: it resumes where it was
