"""Training metrics: real PPO and DQN agents, driven in-process by CartPole, write SB3's logger values and
Shepherd's own into <agent folder>/metrics/ as CSV (progress.csv) and TensorBoard event files."""

from __future__ import annotations

import asyncio
import csv
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from shepherd.agents.metrics import AppendingCSV
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import drive, serving_here
from shepherd.storage import Store
from shepherd.storage.metrics import metrics_folder, progress_path, read_progress

CARTPOLE_OBS = [[4], "-inf", "inf"]
AGENTS = {
    "PPO": ({"n_envs": 1, "n_steps": 32, "batch_size": 32, "n_epochs": 2, "seed": 0,
             "policy_kwargs": {"net_arch": [16]}}, 0),
    "DQN": ({"learning_starts": 50, "batch_size": 16, "train_freq": 4, "seed": 0, "exploration_fraction": 0.5,
             "policy_kwargs": {"net_arch": [16]}}, 50),
}
SB3_COLUMNS = {
    "PPO": {"train/approx_kl", "train/entropy_loss", "train/value_loss", "train/policy_gradient_loss",
            "train/explained_variance", "train/clip_fraction", "train/loss", "train/n_updates"},
    "DQN": {"train/loss", "rollout/exploration_rate", "train/n_updates", "train/learning_rate"},
}
SHEPHERD_COLUMNS = {"time/total_timesteps", "shepherd/steps", "shepherd/steps_per_second", "shepherd/sessions",
                    "shepherd/phase", "shepherd/act_latency_ms", "shepherd/batch_size", "rollout/ep_rew_mean"}


def graph_for(algorithm: str) -> GraphManager:
    parameters, heatup = AGENTS[algorithm]
    schedule = Schedule(heatup_steps=heatup, improve_steps=2000, steps_between_evaluation_periods=10_000, evaluation_episodes=1,
                        checkpoint_every_steps=10_000, checkpoint_every_seconds=3600.0)
    return GraphManager(owner="tests", agents=[AgentSpec("pole", algorithm, CARTPOLE_OBS, 2, dict(parameters))],
                        schedule=schedule)


async def serve_and_drive(data: Path, algorithm: str, steps: int, remote_learners: Any = None) -> Path:
    """Serve a fresh graph on ``data`` (its learners built by ``remote_learners`` if given: on Ray), drive
    ``steps`` CartPole steps, stop; the agent's folder."""
    graph, store = graph_for(algorithm), Store(data)
    graph.remote_learners = remote_learners
    keys = graph.create_graph(store, serving_here())
    key = keys["pole"] if keys else store.add_api_key(store.agents()[0].id, "tests")[0]
    try:
        await drive(graph, key, gym.make("CartPole-v1"), steps=steps, seed=0)
    finally:
        graph.end_sessions()
        await asyncio.to_thread(graph.close)  # the learner writes its last row as it stops
        store.close()
    return store.agent_folder(store.agents()[0].id)


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("algorithm", sorted(AGENTS))
async def test_a_learning_agent_writes_sb3_and_shepherd_metrics(tmp_path, algorithm, frequent_rows):
    folder = await serve_and_drive(tmp_path / "data", algorithm, steps=400)
    check_metrics(folder, algorithm)


def check_metrics(folder: Path, algorithm: str) -> None:
    """The metrics of 400 steps of ``AGENTS[algorithm]`` with `frequent_rows`: SB3's values and Shepherd's,
    a row per PPO update, in the CSV and in TensorBoard's files (tests/e2e/test_ray.py checks them on Ray)."""
    rows = csv_rows(progress_path(folder))
    assert rows, "no metrics row written"
    columns = set(rows[0])
    assert SB3_COLUMNS[algorithm] <= columns, SB3_COLUMNS[algorithm] - columns
    assert SHEPHERD_COLUMNS <= columns, SHEPHERD_COLUMNS - columns
    trained = [row for row in rows if row["train/loss"]]
    assert trained and all(float(row["time/total_timesteps"]) > 0 for row in trained)
    assert all(math.isfinite(float(row[key])) for row in trained for key in SB3_COLUMNS[algorithm] if row[key])
    assert {row["shepherd/phase"] for row in rows} <= {"heatup", "train", "evaluate"}
    assert max(float(row["shepherd/steps"]) for row in rows) >= 300
    if algorithm == "PPO":  # a row after each update: 400 steps are 12 rollouts of 32
        assert len(trained) >= 10
        assert int(float(trained[-1]["train/n_updates"])) == 2 * len(trained)  # n_epochs per rollout
    else:
        epsilons = [float(row["rollout/exploration_rate"]) for row in rows if row["rollout/exploration_rate"]]
        assert epsilons and epsilons[-1] < 1.0  # epsilon decays as the agent trains

    # TensorBoard reads the event files back, with SB3's scalars and Shepherd's
    events = EventAccumulator(str(metrics_folder(folder)))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    wanted = (SB3_COLUMNS[algorithm] - {"train/n_updates"}) | {"shepherd/steps_per_second", "shepherd/sessions",
                                                                "time/total_timesteps"}
    assert wanted <= scalars, wanted - scalars
    losses = events.Scalars("train/loss")
    assert len(losses) == len(trained) and all(event.step > 0 for event in losses)


async def test_a_restart_of_the_server_appends_to_the_csv(tmp_path, frequent_rows):
    data = tmp_path / "data"
    folder = await serve_and_drive(data, "PPO", steps=200)
    first = progress_path(folder).read_text()
    first_rows = csv_rows(progress_path(folder))
    await serve_and_drive(data, "PPO", steps=200)
    rows = csv_rows(progress_path(folder))
    assert len(rows) > len(first_rows)
    assert rows[:len(first_rows)] == first_rows  # kept as they were, in the same columns
    assert progress_path(folder).read_text().startswith(first.splitlines()[0])
    steps = [float(row["time/total_timesteps"]) for row in rows]
    assert steps[len(first_rows)] >= steps[len(first_rows) - 1]  # the resumed agent counts on
    assert len(list(metrics_folder(folder).glob("events.out.tfevents.*"))) == 2  # one event file per run
    import stat  # readable by the owner only, as every file of the data folder (TensorBoard's were 0644)
    assert {stat.S_IMODE(path.stat().st_mode) for path in metrics_folder(folder).iterdir()} == {0o600}


def test_appending_keeps_the_header_and_drops_a_half_written_row(tmp_path):
    path = tmp_path / "progress.csv"
    path.write_text("a,b\n1,2\n3,")
    writer = AppendingCSV(path)
    writer.write({"a": 5, "b": 6}, {"a": None, "b": None})
    writer.write({"a": 7, "c": 8}, {"a": None, "c": None})
    writer.close()
    assert path.read_text() == "a,b,c\n1,2,\n5,6,\n7,,8\n"
    assert read_progress(path, 2) .rows == [[5.0, 6.0, None], [7.0, None, 8.0]]
    assert read_progress(path, 10, ["c", "nope"]).rows == [[None, None], [None, None], [8.0, None]]


def test_new_columns_widen_the_csv_into_a_new_file_so_a_crash_meanwhile_leaves_the_old_one_whole(tmp_path,
                                                                                                  monkeypatch):
    """SB3 rewrote the file in place for a row with new columns (the first update's ``train/...``): a crash, a
    full disk, mid-way left the header widened and the rows after it cut and shifted."""
    import os
    import stat

    path = tmp_path / "progress.csv"
    writer = AppendingCSV(path)
    for n in range(50):
        writer.write({"a": n, "b": 2 * n}, {"a": None, "b": None})
    before = path.read_text()
    real_fsync = os.fsync

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    try:
        writer.write({"a": 50, "c": 1}, {"a": None, "c": None})
    except OSError:
        pass
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert path.read_text() == before and list(tmp_path.iterdir()) == [path]  # no temporary left either
    writer.write({"a": 51, "c": 2}, {"a": None, "c": None})  # the disk has room again
    writer.write({"a": 52, "b": 3}, {"a": None, "b": None})
    writer.close()
    lines = path.read_text().splitlines()
    assert lines[0] == "a,b,c" and lines[1:51] == [f"{n},{2 * n}," for n in range(50)]
    assert lines[51:] == ["51,,2", "52,3,"] and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_reading_the_tail_of_a_long_csv(tmp_path):
    path = tmp_path / "progress.csv"
    lines = ["x,phase"] + [f"{n},train" for n in range(20_000)]
    path.write_text("\n".join(lines) + "\n99999,tra")  # a row still being written is not read
    tail = read_progress(path, 3)
    assert tail.columns == ["x", "phase"] and tail.rows == [[19997.0, "train"], [19998.0, "train"],
                                                            [19999.0, "train"]]
    assert len(read_progress(path, 50_000).rows) == 20_000
    assert read_progress(path, 0).rows == []
    assert read_progress(tmp_path / "missing.csv", 5).rows == []


def test_the_command_line_prints_the_latest_values(tmp_path, capsys, frequent_rows):
    from shepherd.cli import main

    data = tmp_path / "data"
    assert main(["agents", "metrics", "pole", "--data", str(data)]) == 2  # no such folder: one line, status 2
    capsys.readouterr()
    asyncio.run(serve_and_drive(data, "PPO", steps=100))
    assert main(["agents", "metrics", "pole", "--data", str(data)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["METRIC", "LATEST"]
    latest = dict(line.split(None, 1) for line in lines[1:])
    assert latest["shepherd/phase"] == "train" and float(latest["train/approx_kl"]) >= 0
    assert 96 <= float(latest["time/total_timesteps"]) <= 100  # the last row, at the learner's stop
