"""Two tiny CartPole agents, PPO and DQN, checkpointed every 200 steps or every second, for the
crash loop (benchmarks/crashloop.py and tests/e2e/test_crashes.py); the DQN's heatup is SB3's learning_starts
default, 100 random steps."""

from shepherd.graph import AgentSpec, GraphManager, Schedule

CHECKPOINT_EVERY_STEPS = 200

graph_manager = GraphManager(
    owner="crash",
    agents=[
        AgentSpec("crash-ppo", "PPO", [[4], "-inf", "inf"], 2,
                  {"n_envs": 2, "n_steps": 16, "batch_size": 32, "n_epochs": 2, "seed": 0}),
        AgentSpec("crash-dqn", "DQN", [[4], "-inf", "inf"], 2,
                  {"buffer_size": 5_000, "train_freq": 4, "gradient_steps": 1,
                   "batch_size": 32, "target_update_interval": 100, "seed": 0}),
    ],
    schedule=Schedule(heatup_steps=0, steps_between_evaluation_periods=None, evaluation_episodes=0,
                      checkpoint_every_steps=CHECKPOINT_EVERY_STEPS, checkpoint_every_seconds=1.0),
)
