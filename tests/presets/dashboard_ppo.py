"""PPO on CartPole for the dashboard's browser tests: quick updates, an evaluation every 1,500 steps."""

from shepherd.graph import AgentSpec, GraphManager, Schedule

graph_manager = GraphManager(
    owner="tests",
    agents=[AgentSpec(name="cartpole", algorithm="PPO", observation_space=[[4], "-inf", "inf"], action_space=2,
                      parameters={"n_envs": 2, "n_steps": 64, "batch_size": 64, "n_epochs": 4,
                                  "learning_rate": 0.001, "seed": 0})],
    schedule=Schedule(steps_between_evaluation_periods=1_500, evaluation_episodes=2,
                      checkpoint_every_steps=1_000, checkpoint_every_seconds=2.0),
)
