"""DQN on CartPole-v1 (RL Zoo hyperparameters); heatup fills the replay buffer, then 2 clients reach 475."""

from shepherd.graph import AgentSpec, Preset, PresetValidation, Schedule

preset = Preset(
    owner="demo",
    agents=[
        AgentSpec(
            name="cartpole-dqn",
            algorithm="DQN",
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
                "policy_kwargs": {"net_arch": [256, 256]},
            },
        )
    ],
    schedule=Schedule(
        heatup_steps=1_000,  # random steps filling the replay buffer: SB3's learning_starts
        improve_steps=80_000,
        steps_between_evaluation_periods=5_000,
        evaluation_episodes=5,
    ),
    validation=PresetValidation(env_id="CartPole-v1", clients=2, target_return=475.0, max_steps=80_000,
                                timeout_seconds=900),
)
