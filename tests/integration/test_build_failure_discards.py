"""A learner served for an agent whose build then fails (a damaged checkpoint) is discarded: under --ray it is an
actor that kept its name for as long as the server ran, so that the admin restart the failure asks for waited for
the name and failed ("could not be restarted"), and an advised client whose build failed could never be built."""

from __future__ import annotations

import asyncio

import pytest

from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import serving_here
from shepherd.graph.runtime import AgentRuntime
from shepherd.storage import Store, StoreError

PPO = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}


def graph(sharing: str = "pooled") -> GraphManager:
    return GraphManager(owner="tests", schedule=Schedule(),
                        agents=[AgentSpec("arms", "PPO", [[4], "-inf", "inf"], 2, dict(PPO), sharing=sharing)])


@pytest.fixture
def discarded(monkeypatch) -> list[AgentRuntime]:
    """The runtimes discarded, in order (their learners stopped)."""
    seen: list[AgentRuntime] = []
    real = AgentRuntime.discard

    def discard(self, timeout: float = 60.0) -> bool:
        seen.append(self)
        return real(self, timeout)

    monkeypatch.setattr(AgentRuntime, "discard", discard)
    return seen


async def test_a_pooled_agent_whose_checkpoint_cannot_be_loaded_discards_its_learner(tmp_path, discarded):
    store = Store(tmp_path / "data")
    first = graph()
    first.create_graph(store, serving_here())
    first.runtime("arms").checkpoint().result(30)
    path = first.runtime("arms").model_path
    await asyncio.to_thread(first.close)
    path.write_bytes(b"not a zip")
    with pytest.raises(StoreError):
        graph().create_graph(store, serving_here())
    assert len(discarded) == 1 and discarded[0].learner._closed
    store.close()


async def test_an_advised_client_whose_checkpoint_cannot_be_loaded_discards_its_learner(tmp_path, discarded):
    store = Store(tmp_path / "data")
    first = graph("advised")
    keys = first.create_graph(store, serving_here())
    first.login(keys["arms"], client="arm-1")
    await asyncio.to_thread(first.close)
    [model] = (tmp_path / "data").glob("agents/*/clients/arm-1/model.zip")
    model.write_bytes(b"not a zip")
    second = graph("advised")
    second.create_graph(store, serving_here())  # the client alone fails
    assert len(discarded) == 1 and discarded[0].client == "arm-1" and discarded[0].learner._closed
    await asyncio.to_thread(second.close)
    store.close()
