"""DQN on Acrobot-v1 (RL Zoo hyperparameters); 2 clients reach an evaluation return of -100."""

from shepherd.graph import AgentSpec, Preset, PresetValidation, Schedule

preset = Preset(
    owner="demo",
    agents=[
        AgentSpec(
            name="acrobot-dqn",
            algorithm="DQN",
            observation_space=[[6], "-inf", "inf"],
            action_space=3,
            parameters={
                "learning_rate": 6.3e-4,
                "batch_size": 128,
                "buffer_size": 50_000,
                "gamma": 0.99,
                "target_update_interval": 250,
                "train_freq": 4,
                "gradient_steps": -1,
                "exploration_fraction": 0.12,
                "exploration_final_eps": 0.1,
                "policy_kwargs": {"net_arch": [256, 256]},
            },
        )
    ],
    schedule=Schedule(
        heatup_steps=1_000,
        improve_steps=100_000,
        steps_between_evaluation_periods=5_000,
        evaluation_episodes=5,
    ),
    validation=PresetValidation(env_id="Acrobot-v1", clients=2, target_return=-100.0, max_steps=100_000,
                                timeout_seconds=1500),
)
