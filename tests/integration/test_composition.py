"""Every combination of Shepherd's features, generated from the table in docs/composition.md (issue 45): for each
in-process cell, session shape x agent kind x lessons, either a short session that the agent learns from and
whose episodes are recorded with the fields the cell promises, or a login refused with the reason the table
gives. The cells on Ray are run by tests/e2e/test_composition_ray.py from the same table."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import LocalClient, make_step, serving_here
from shepherd.storage import Store
from shepherd.wire import VectorStepInput
from shepherd.wire.experience import Experience

TABLE = Path(__file__).resolve().parents[2] / "docs" / "composition.md"
OBS = [[3], -1, 1]
PPO = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}
LESSONS = [{"name": "only", "config": {"length": 0.5}}]
EPISODE = 4  # steps of every episode the clients play
N_ENVS = 2


@dataclass(frozen=True)
class Cell:
    shape: str  # single, vector, client
    kind: str  # pooled, advised, selector
    lessons: bool
    where: str  # in-process, ray
    served: bool
    reason: str  # why a refused cell is refused (a phrase of the login's refusal)

    @property
    def name(self) -> str:
        return f"{self.shape}-{self.kind}-{'lessons' if self.lessons else 'plain'}-{self.where}"


def cells(where: str | None = None) -> list[Cell]:
    """The table's rows: | shape | kind | lessons | where | served or refused | why |."""
    rows = re.findall(r"^\| (single|vector|client) \| (pooled|advised|selector) \| (yes|no) \| (in-process|ray) \| "
                      r"(served|refused) \| ([^|]*) \|$", TABLE.read_text(), re.MULTILINE)
    found = [Cell(shape, kind, lessons == "yes", place, status == "served", why.strip().strip("`"))
             for shape, kind, lessons, place, status, why in rows]
    return [cell for cell in found if where is None or cell.where == where]


def test_the_table_has_every_cell_once():
    seen = {(c.shape, c.kind, c.lessons, c.where) for c in cells()}
    assert len(cells()) == len(seen) == 3 * 3 * 2 * 2


def graph_for(kind: str, lessons: bool) -> GraphManager:
    sharing = {"sharing": "advised"} if kind == "advised" else {}
    taught = {"lessons": LESSONS} if lessons else {}
    if kind == "selector":
        level = {"skills": ["left", "right"], "option_steps": 3, "skills_learn": True}
        agents = [AgentSpec("left", "PPO", OBS, 2, dict(PPO)), AgentSpec("right", "PPO", OBS, 2, dict(PPO)),
                  AgentSpec("agent", "PPO", OBS, 2, dict(PPO), level=level, **taught)]
    else:
        agents = [AgentSpec("agent", "PPO", OBS, 2, dict(PPO), **sharing, **taught)]
    return GraphManager(owner="tests", agents=agents,
                        schedule=Schedule(checkpoint_every_seconds=3600.0, steps_between_evaluation_periods=None))


def obs(t: int) -> list[float]:
    return [t / 10.0, 0.5, -0.5]


async def play_single(graph: GraphManager, key: str, client: str | None) -> list[dict]:
    local = LocalClient(graph, key, client=client)
    local.login()
    replies = []
    for _ in range(4):
        await local.step(np.array(obs(0), np.float32), 0.0, False)
        for t in range(1, EPISODE + 1):
            acted = await local.send(local_step(local, t))
            replies.append(acted.fields)
    local.logout()
    return replies


def local_step(local: LocalClient, t: int):
    local.seq += 1
    return make_step(local.session.observation_space, np.array(obs(t), np.float32), 1.0, t == EPISODE, False,
                     local.seq)


async def play_vector(graph: GraphManager, key: str, client: str | None) -> list[dict]:
    session = graph.login(key, n_envs=N_ENVS, client=client)
    replies = []
    for t in range(4 * EPISODE + 1):
        ended = [t > 0 and t % EPISODE == 0] * N_ENVS
        step = VectorStepInput.of([obs(t % EPISODE)] * N_ENVS, [0.0 if t == 0 else 1.0] * N_ENVS, ended,
                                  [False] * N_ENVS, final_obs=[obs(EPISODE) if end else None for end in ended],
                                  seq=t + 1)
        replies.append((await graph.step(session, step)).fields)
    graph.logout(session.key)
    return replies


async def play_client(graph: GraphManager, key: str, client: str | None) -> list[dict]:
    session = graph.login(key, n_envs=N_ENVS, client=client, acting="client")
    plan = await session.opened(30)
    replies = [plan]
    rng = np.random.default_rng(0)
    for seq in range(1, 4):
        steps = plan["steps"]
        ended = np.zeros((steps, N_ENVS), bool)
        ended[EPISODE - 1::EPISODE] = True
        finals = [[np.array(obs(EPISODE), np.float32) if ended[t, i] else None for i in range(N_ENVS)]
                  for t in range(steps)]
        experience = Experience.of(np.tile(np.array(obs(1), np.float32), (steps + 1, N_ENVS, 1)),
                                   rng.integers(0, 2, (steps, N_ENVS)), np.ones((steps, N_ENVS)), ended,
                                   np.zeros((steps, N_ENVS), bool), finals, plan["policy_version"], seq=seq)
        plan = (await graph.step(session, experience)).action
        replies.append(plan)
    graph.logout(session.key)
    return replies


PLAY = {"single": play_single, "vector": play_vector, "client": play_client}


@pytest.mark.parametrize("cell", cells("in-process"), ids=lambda c: c.name)
async def test_each_in_process_cell_is_served_or_refused_as_the_table_says(cell, tmp_path):
    await run_cell(cell, tmp_path)


async def run_cell(cell: Cell, tmp_path: Path, remote_learners: Any = None) -> None:
    """Serve the cell's agent (its learners built by ``remote_learners``, when given: Ray's), and play its shape:
    refused with the table's reason, or learned from and recorded with the cell's fields."""
    graph = graph_for(cell.kind, cell.lessons)
    graph.remote_learners = remote_learners
    store = Store(tmp_path / "data")
    keys = graph.create_graph(store, serving_here())
    client = "c1" if cell.kind == "advised" else None
    try:
        if cell.kind == "advised":
            await graph.prepare_client(keys["agent"], client)
        if not cell.served:
            with pytest.raises(Exception) as refused:
                await PLAY[cell.shape](graph, keys["agent"], client)
            assert cell.reason and cell.reason in str(refused.value), (cell.reason, refused.value)
            return
        replies = await PLAY[cell.shape](graph, keys["agent"], client)
        agent = graph.served.agents[graph.preset_agent_id("agent")]
        runtime = agent.runtimes[0]
        await asyncio.wrap_future(runtime.checkpoint())  # everything handed over is learned and recorded
        assert runtime.learner.steps > 0, "the agent learned nothing from the session"
        records = store.returns(runtime.record.id)
        assert len(records) >= 3 and all(r.length > 0 for r in records), records
        if cell.lessons:
            assert {r.lesson for r in records} == {"only"} and all(r.config == {"length": 0.5} for r in records)
            assert any("configs" in reply or "episode_config" in reply or "next_episode_config" in reply
                       for reply in replies)
        else:
            assert all(r.lesson is None and r.config is None for r in records)
        if cell.kind == "advised":
            assert {r.client for r in records} == {client}
        if cell.kind == "selector":
            assert any("option" in reply or "options" in reply for reply in replies)
            assert sum(use["chosen"] for use in runtime.options_used().values()) > 0
            left, right = (graph.served.agents[graph.preset_agent_id(name)].runtimes[0] for name in ("left", "right"))
            assert left.learner.steps + right.learner.steps > 0, "no skill learned from the steps it answered"
    finally:
        graph.end_sessions()
        await asyncio.to_thread(graph.close)
        store.close()
