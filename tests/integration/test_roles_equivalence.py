"""An agent in one role of a two-role environment with alternate turns, against a scripted other role, learns
exactly as SB3's ``learn()`` on the single-agent env with the other role folded into it: the same weights.

The environment is CartPole with a second role that acts between the pole's actions (a scripted player whose
action the env ignores). Each env step's reward is split: half of it is sent for the pole in the other role's
step (while the pole waits), half in the pole's own next step, so the pole's transition runs from its action
to its next turn only if the rewards sent meanwhile are summed into it. The episode ends with both roles'
last observations in one step. Both runs start from the same seed and see the same episodes, so any
difference in what the learner stores, when it trains or which random numbers it draws shows in the weights
(the tolerance of tests/integration/test_sb3_equivalence.py, which allows for float rounding only).
"""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest
import torch as th

from shepherd.environments import EnvironmentSpec
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import serving_here
from shepherd.storage import Store
from tests.integration.test_sb3_equivalence import sb3_weights

CASES = {  # DQN without learning_starts: a served agent's heatup is whole episodes (tests/e2e/test_vector_exactness.py)
    "PPO": (256, {"n_steps": 64, "batch_size": 32, "n_epochs": 2, "learning_rate": "lin_0.001"}),
    "DQN": (300, {"learning_starts": 0, "batch_size": 16, "train_freq": 4, "gradient_steps": 2,
                  "target_update_interval": 50, "exploration_fraction": 0.5}),
}


def idle(obs, mask):
    """The scripted other role: its action changes nothing in the env."""
    return 0


async def step(graph: GraphManager, session, body: dict) -> dict:
    acted = await graph.step(session, session.parse_step(body))
    return session.level.reply_body(acted.action)


async def served_weights(algorithm: str, steps: int, params: dict, data) -> dict[str, th.Tensor]:
    schedule = Schedule(heatup_steps=0, improve_steps=steps, steps_between_evaluation_periods=None,
                        evaluation_episodes=0, checkpoint_every_steps=10 ** 9, checkpoint_every_seconds=10 ** 9)
    duel = EnvironmentSpec("duel", {"pole": "pole", "other": f"{__name__}:idle"}, "alternate")
    env = gym.make("CartPole-v1")  # before the model, as SB3 makes its env first (numpy's global generator)
    graph = GraphManager(owner="tests", agents=[AgentSpec("pole", algorithm, [[4], "-inf", "inf"], 2, params)],
                         schedule=schedule, environments=(duel,))
    store = Store(data)
    keys = graph.create_graph(store, serving_here())
    try:
        session = graph.login(keys["environment duel"])
        seq = 0

        async def send(**body):
            nonlocal seq
            seq += 1
            return await step(graph, session, {"seq": seq, **body})

        obs, _ = env.reset(seed=params["seed"])
        reply = await send(obs={"pole": obs.tolist()})
        for _ in range(steps):
            obs, reward, terminated, truncated, _ = env.step(int(reply["actions"]["pole"]))
            if terminated or truncated:  # both roles end in one step; the next step begins the next episode
                await send(obs={"pole": obs.tolist(), "other": [0]}, reward={"pole": float(reward)},
                           terminated={"pole": bool(terminated), "other": True},
                           truncated={"pole": bool(truncated), "other": False}, outcome={"pole": 1, "other": 0})
                obs, _ = env.reset()
                reply = await send(obs={"pole": obs.tolist()})
                continue
            waiting = await send(obs={"other": [0]}, reward={"pole": float(reward) / 2})
            assert waiting["actions"] == {"other": 0}
            reply = await send(obs={"pole": obs.tolist()}, reward={"pole": float(reward) / 2})
        runtime = graph.runtime("pole")
        await asyncio.to_thread(lambda: runtime.checkpoint().result(30))  # a barrier: everything handled
        assert runtime.learner.failure is None and runtime.learner.steps == steps
        return {name: tensor.clone() for name, tensor in runtime.learner.model.policy.state_dict().items()}
    finally:
        graph.end_sessions()
        await asyncio.to_thread(graph.close)
        store.close()


@pytest.mark.parametrize("algorithm", list(CASES))
async def test_a_role_against_a_scripted_role_learns_as_sb3_on_the_folded_env(algorithm, tmp_path):
    steps, params = CASES[algorithm]
    params = {**params, "seed": 3, "policy_kwargs": {"net_arch": [16]}}
    expected = sb3_weights(algorithm, "CartPole-v1", steps, params)
    got = await served_weights(algorithm, steps, params, tmp_path / "data")
    assert expected.keys() == got.keys()
    for name in expected:
        assert th.allclose(expected[name], got[name], rtol=1e-4, atol=1e-5), f"{algorithm}: {name} differs"
