"""A tiny PPO agent that sees frames of 40 x 60 x 1 (examples/cartpole_client.js --pixels draws its CartPole so)."""

from shepherd.graph import AgentSpec, GraphManager, Schedule

graph_manager = GraphManager(
    owner="tests",
    agents=[AgentSpec(name="pixels", algorithm="PPO", observation_space=[[40, 60, 1], 0, 255], action_space=2,
                      parameters={"n_envs": 2, "n_steps": 16, "batch_size": 32, "n_epochs": 1, "seed": 0})],
    schedule=Schedule(steps_between_evaluation_periods=None, evaluation_episodes=0,
                      checkpoint_every_steps=10 ** 6, checkpoint_every_seconds=3600.0),
)
