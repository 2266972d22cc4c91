"""The training metrics through the admin API: ``GET .../agents/{id}/metrics`` serves the last rows a real
PPO learner wrote, limited and picked by column, to whoever may see the agent."""

import asyncio

import pytest

from shepherd.agents.metrics import MetricsWriter
from shepherd.http import GRAPH
from tests.http.test_admin_api import API, play


@pytest.fixture(autouse=True)
def row_after_every_update(monkeypatch):
    monkeypatch.setattr(MetricsWriter, "update_seconds", 0.0)


async def rows_with(api, column, count, token=None):
    """Poll until ``count`` rows have a value in ``column`` (the learner writes them on its thread)."""
    for _ in range(100):
        reply = await api.get_json("/agents/1/metrics", token=token)
        if column in reply["columns"]:
            index = reply["columns"].index(column)
            if sum(row[index] is not None for row in reply["rows"]) >= count:
                return reply
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {count} rows with {column}: {reply}")


async def test_the_metrics_of_a_learning_agent(api):
    assert await api.get_json("/agents/1/metrics") == {"columns": [], "rows": []}  # nothing learned yet
    await play(api.client, api.pole_key, episodes=6, steps=5)  # 30 transitions: 3 rollouts of 8
    reply = await rows_with(api, "train/approx_kl", 3)
    columns = reply["columns"]
    for name in ("train/approx_kl", "train/entropy_loss", "train/value_loss", "train/explained_variance",
                 "train/clip_fraction", "train/loss", "time/total_timesteps", "shepherd/steps_per_second",
                 "shepherd/sessions", "shepherd/phase", "shepherd/act_latency_ms", "shepherd/batch_size",
                 "rollout/ep_rew_mean"):
        assert name in columns, name
    last = dict(zip(columns, reply["rows"][-1]))
    assert last["shepherd/phase"] == "train" and last["time/total_timesteps"] >= 24
    assert isinstance(last["train/loss"], float) and last["shepherd/sessions"] == 1
    assert last["rollout/ep_rew_mean"] == 5.0  # every episode returned 5

    picked = await api.get_json("/agents/1/metrics?rows=2&columns=train/loss,time/total_timesteps,nope")
    assert picked["columns"] == ["train/loss", "time/total_timesteps", "nope"]
    assert len(picked["rows"]) == 2 and [row[2] for row in picked["rows"]] == [None, None]
    assert picked["rows"] == [[row[columns.index("train/loss")], row[columns.index("time/total_timesteps")], None]
                              for row in reply["rows"][-2:]]

    # the agent's own key sees them; the errors are the admin API's
    assert (await api.get_json("/agents/1/metrics?rows=1", token=api.pole_key))["columns"] == columns
    for query in ("rows=0", "rows=10001", "rows=x", "columns=" + "a" * 2001):
        assert "error" in await api.get_json(f"/agents/1/metrics?{query}", status=400)
    assert "no agent" in (await api.get_json("/agents/999/metrics", status=404))["error"]
    await api.get("/agents/1/metrics", token="not-a-token", status=401)
    assert api.app[GRAPH].runtime().learner.failure is None


async def test_another_agents_key_gets_not_found(api):
    await api.post("/users", {"name": "bob"}, status=201)
    bob = await api.add_agent("bob", "robot")
    bob_key = (await api.post(f"/agents/{bob['id']}/keys", status=201))["key"]
    await play(api.client, api.pole_key, episodes=2, steps=5)
    await rows_with(api, "train/loss", 1)
    response = await api.client.get(f"{API}/agents/1/metrics", headers={"Authorization": f"Bearer {bob_key}"})
    assert response.status == 404 and "pole" not in await response.text()
