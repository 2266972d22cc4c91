"""A tiny PPO CartPole agent validated by one client of 4 envs (``run.py --clients 1 --envs-per-client 4``):
a rollout segment per env, an evaluation every 256 steps and a target any CartPole episode reaches, so a
run ends at its first evaluation."""

from shepherd.graph import AgentSpec, GraphManager, PresetValidation, Schedule

graph_manager = GraphManager(
    owner="tests",
    agents=[AgentSpec(name="tiny", algorithm="PPO", observation_space=[[4], "-inf", "inf"], action_space=2,
                      parameters={"n_envs": 4, "n_steps": 16, "batch_size": 32, "n_epochs": 2, "seed": 0})],
    schedule=Schedule(steps_between_evaluation_periods=256, evaluation_episodes=4,
                      checkpoint_every_steps=200, checkpoint_every_seconds=1.0),
    validation=PresetValidation(env_id="CartPole-v1", target_return=5.0, max_steps=5_000, clients=1,
                                timeout_seconds=120),
)
