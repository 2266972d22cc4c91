"""A learner that is not stable-baselines3 is registered and served like any other: tabular Q-learning, registered
with ``Algorithm(..., learner=...)``, learns FrozenLake over the real app's HTTP protocol and is checkpointed."""

import asyncio
import json
import zipfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from shepherd.agents.core import ActMode, Answer, Kind, Outcome, Request
from shepherd.agents.algorithm import PlainAlgorithm
from shepherd.agents.registry import ALGORITHMS, Algorithm, parameters, register
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app


class TabularQ(PlainAlgorithm):
    """One-step Q-learning on a table, for Discrete observations and actions: the worker's `Algorithm`."""

    on_policy = False  # its metrics rows follow its steps, not rollouts

    def __init__(self, learning_rate: float = 0.5, gamma: float = 0.95, exploration_rate: float = 0.1,
                 learning_starts: int = 0, seed: int = 0) -> None:
        self.learning_rate, self.gamma, self.exploration_rate = learning_rate, gamma, exploration_rate
        self.rng = np.random.default_rng(seed)
        super().__init__()
        self.q = np.zeros((0, 0))
        self._pending: dict[int, tuple[int, int]] = {}  # actor -> the observation and action of its last act
        self._steps = self._version = 0

    @classmethod
    def build(cls, name: str, observation_space: spaces.Space, action_space: spaces.Space,
              values: dict[str, Any], total_steps: int | None) -> "TabularQ":
        learner = cls(**values)
        learner.name = name
        # optimistic values: every untried action looks good until tried, so the table explores systematically
        learner.q = np.ones((int(observation_space.n), int(action_space.n)))  # type: ignore[attr-defined]
        return learner

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def version(self) -> int:
        return self._version

    def process(self, requests: list[Request]) -> None:
        for request in requests:
            if request.kind in (Kind.STEP, Kind.END) and request.actor in self._pending:
                self._learn(request)
            if request.kind is Kind.DROP or request.kind is Kind.END:
                self._pending.pop(request.actor, None)
                continue
            obs = int(request.obs)
            if request.mode is ActMode.GREEDY or self.rng.random() >= self.exploration_rate:
                best = np.flatnonzero(self.q[obs] == self.q[obs].max())
                action = int(best[0] if request.mode is ActMode.GREEDY else self.rng.choice(best))
            else:
                action = int(self.rng.integers(self.q.shape[1]))
            if request.mode.learns:
                self._pending[request.actor] = (obs, action)
            self._answers.append(Answer(request.ticket, Outcome.ACTION, action, self._version))

    def _learn(self, request: Request) -> None:
        obs, action = self._pending[request.actor]
        ended = request.kind is Kind.END and not request.truncated
        target = request.reward + (0.0 if ended else self.gamma * float(np.max(self.q[int(request.obs)])))
        self.q[obs, action] += self.learning_rate * (target - self.q[obs, action])
        self._steps += 1
        self._version += 1

    def client_acting_refused(self) -> str | None:
        return "a table is not an ONNX policy file"

    def write_checkpoint(self, path: Path, state: dict[str, Any]) -> None:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("q.json", json.dumps(self.q.tolist()))
            archive.writestr("shepherd.json", json.dumps({**state, "steps": self._steps}))

    def restore(self, path: Path) -> dict[str, Any]:
        with zipfile.ZipFile(path) as archive:
            self.q = np.asarray(json.loads(archive.read("q.json")))
            return json.loads(archive.read("shepherd.json"))  # type: ignore[no-any-return]


@pytest.fixture
def tabular_q():
    register(Algorithm("TabularQ", TabularQ, None, (spaces.Discrete,), package="tests",  # type: ignore[arg-type]
                       dict_observations=False, learner=TabularQ.build))
    yield
    del ALGORITHMS["TABULARQ"]  # other tests list the registered algorithms


@pytest.mark.e2e  # trains to a target
async def test_a_non_sb3_learner_registers_and_learns_frozen_lake_over_http(tabular_q, aiohttp_client, tmp_path):
    assert set(parameters("tabularq")) == {"learning_rate", "gamma", "exploration_rate", "learning_starts", "seed"}
    graph = GraphManager(owner="tests", agents=[AgentSpec("lake", "TabularQ", 16, 4, {"seed": 0})],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, checkpoint_every_steps=500))
    app = create_app(ServerConfig(graph, tmp_path / "data"))
    client = await aiohttp_client(app)
    env = gym.make("FrozenLake-v1", is_slippery=False)

    async def episode(mode: str) -> float:
        response = await client.post("/shepherd/login_user/", json={"apikey": app[CREATED_KEYS]["lake"], "mode": mode})
        key = (await response.json())["session_key"]
        obs, _ = env.reset(seed=0)
        total, reward, done, truncated = 0.0, 0.0, False, False
        while True:
            body = {"session_key": key, "obs": int(obs), "reward": reward, "done": done, "truncated": truncated}
            reply = await (await client.post("/shepherd/env/", json=body)).json()
            if done:
                break
            obs, reward, terminated, truncated, _ = env.step(reply["action"])
            total += reward
            done = terminated or truncated
        await client.post("/shepherd/logout/", json={"session_key": key})
        return total

    for _ in range(150):
        await episode("train")
    assert await episode("evaluate") == 1.0  # the greedy table walks to the goal
    runtime = app[GRAPH].runtime()
    assert runtime.learner.failure is None and runtime.tracker.steps > 500
    path = await asyncio.wrap_future(runtime.checkpoint())  # checkpointed as any learner is, and read back
    restored = TabularQ.build("lake", spaces.Discrete(16), spaces.Discrete(4), {}, None)
    assert restored.restore(Path(path))["steps"] == runtime.learner.steps
    assert np.array_equal(restored.q, runtime.learner.algorithm.q)
