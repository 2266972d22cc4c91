"""QR-DQN (sb3-contrib) on CartPole-v1 (RL Zoo hyperparameters); after heatup, 2 clients reach 475."""

from shepherd.graph import AgentSpec, Preset, PresetValidation, Schedule

preset = Preset(
    owner="demo",
    agents=[
        AgentSpec(
            name="cartpole-qrdqn",
            algorithm="QRDQN",
            observation_space=[[4], "-inf", "inf"],
            action_space=2,
            parameters={
                "learning_rate": 2.3e-3,
                "batch_size": 64,
                "buffer_size": 100_000,
                "gamma": 0.99,
                "target_update_interval": 10,
                "train_freq": 256,
                "gradient_steps": 128,
                "exploration_fraction": 0.16,
                "exploration_final_eps": 0.04,
                "policy_kwargs": {"net_arch": [256, 256], "n_quantiles": 10},
            },
        )
    ],
    schedule=Schedule(
        heatup_steps=1_000,  # random steps filling the replay buffer: SB3's learning_starts
        improve_steps=50_000,  # RL Zoo's budget
        steps_between_evaluation_periods=5_000,
        evaluation_episodes=5,
    ),
    validation=PresetValidation(env_id="CartPole-v1", clients=2, target_return=475.0, max_steps=50_000,
                                timeout_seconds=900),
)
