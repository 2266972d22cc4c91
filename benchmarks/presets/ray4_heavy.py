"""Four CartPole PPO agents whose training updates outweigh their acting (a wider network, more minibatches
per rollout), for the cores part of benchmarks/ray_learners.py: one client each."""

from shepherd.graph import AgentSpec, GraphManager, Schedule

graph_manager = GraphManager(
    owner="perf",
    agents=[AgentSpec(f"ppo-heavy-{index}", "PPO", [[4], "-inf", "inf"], 2, {
        "n_envs": 8, "n_steps": 32, "batch_size": 64, "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 40,
        "ent_coef": 0.0, "learning_rate": "lin_0.001", "clip_range": "lin_0.2", "seed": index,
        "policy_kwargs": {"net_arch": [512, 512]}})
        for index in range(4)],
    schedule=Schedule(heatup_steps=0, steps_between_evaluation_periods=None, evaluation_episodes=0,
                      checkpoint_every_steps=10 ** 9, checkpoint_every_seconds=10 ** 9),
)
