"""A tiny PPO agent with a CnnPolicy: it sees 36 x 36 x 3 images (``["Image", ...]``), for front ends' greedy files."""

from shepherd.graph import AgentSpec, GraphManager, Schedule

graph_manager = GraphManager(
    owner="tests",
    agents=[AgentSpec(name="eyes", algorithm="PPO", observation_space=["Image", [36, 36, 3]], action_space=4,
                      parameters={"n_envs": 1, "n_steps": 16, "batch_size": 16, "n_epochs": 1, "seed": 3})],
    schedule=Schedule(steps_between_evaluation_periods=None, evaluation_episodes=0,
                      checkpoint_every_steps=10 ** 6, checkpoint_every_seconds=3600.0),
)
