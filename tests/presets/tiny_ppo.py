"""A tiny PPO CartPole agent for tests: small rollouts and frequent checkpoints."""

from shepherd.graph import AgentSpec, GraphManager, Schedule

graph_manager = GraphManager(
    owner="tests",
    agents=[AgentSpec(name="tiny", algorithm="PPO", observation_space=[[4], "-inf", "inf"], action_space=2,
                      parameters={"n_envs": 2, "n_steps": 16, "batch_size": 32, "n_epochs": 2, "seed": 0})],
    schedule=Schedule(steps_between_evaluation_periods=None, evaluation_episodes=0,
                      checkpoint_every_steps=200, checkpoint_every_seconds=1.0),
)
