"""CartPole DQN with RL Zoo's hyperparameters for one vector client of 4 envs, for the performance benchmarks.

``n_envs`` 4 gives the replay buffer 4 columns: transitions are stored in rows of 4 and ``train_freq``
counts rows, as SB3 counts steps of its 4-env ``VecEnv``. ``train_freq`` 64 rows = 256 transitions per
128 gradient steps, RL Zoo's ratio for its one env (and what perf.py's SB3 side runs with 4 envs).
"""

from shepherd.graph import AgentSpec, GraphManager, Schedule

graph_manager = GraphManager(
    owner="perf",
    agents=[AgentSpec("perf-dqn-vec", "DQN", [[4], "-inf", "inf"], 2, {
        "n_envs": 4, "learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000, "gamma": 0.99,
        "target_update_interval": 10, "train_freq": 64, "gradient_steps": 128, "exploration_fraction": 0.16,
        "exploration_final_eps": 0.04, "policy_kwargs": {"net_arch": [256, 256]}, "seed": 0})],
    schedule=Schedule(heatup_steps=1_000, steps_between_evaluation_periods=None, evaluation_episodes=0,
                      checkpoint_every_steps=10 ** 9, checkpoint_every_seconds=10 ** 9),
)
