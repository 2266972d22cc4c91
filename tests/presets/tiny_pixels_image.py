"""A tiny PPO agent that sees CartPole frames as an image, channels first (40 x 60 x 3, sent as 3 x 40 x 60; a CNN learns from it):
examples/cartpole_client.js --pixels draws them so."""

from shepherd.graph import AgentSpec, GraphManager, Schedule

graph_manager = GraphManager(
    owner="tests",
    agents=[AgentSpec(name="pixels", algorithm="PPO", observation_space=["Image", [40, 60, 3], "channels_first"],
                      action_space=2,
                      parameters={"n_envs": 2, "n_steps": 16, "batch_size": 32, "n_epochs": 1, "seed": 0})],
    schedule=Schedule(steps_between_evaluation_periods=None, evaluation_episodes=0,
                      checkpoint_every_steps=10 ** 6, checkpoint_every_seconds=3600.0),
)
