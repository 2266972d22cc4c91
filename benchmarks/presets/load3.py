"""Three CartPole agents (PPO, DQN, PPO) for the load test: 64 clients spread over them.

The DQN's replay buffer is small enough to fill during the warm-up: SB3 allocates it up front and the
memory becomes resident as it fills, which would otherwise read as growth in the memory figures."""

from shepherd.graph import AgentSpec, GraphManager, Schedule

PPO = {"n_envs": 24, "n_steps": 64, "batch_size": 256, "n_epochs": 4, "learning_rate": 1e-3}
graph_manager = GraphManager(
    owner="load",
    agents=[
        AgentSpec("load-ppo-a", "PPO", [[4], "-inf", "inf"], 2, PPO),
        AgentSpec("load-dqn", "DQN", [[4], "-inf", "inf"], 2,
                  {"train_freq": 16, "gradient_steps": 4, "batch_size": 64, "buffer_size": 10_000}),
        AgentSpec("load-ppo-c", "PPO", [[4], "-inf", "inf"], 2, PPO),
    ],
    schedule=Schedule(heatup_steps=0, steps_between_evaluation_periods=None, evaluation_episodes=0),
)
