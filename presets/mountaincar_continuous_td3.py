"""TD3 on MountainCarContinuous-v0 with Ornstein-Uhlenbeck noise per client; 2 clients reach a return of 90."""

from shepherd.graph import AgentSpec, Preset, PresetValidation, Schedule

preset = Preset(
    owner="demo",
    agents=[
        AgentSpec(
            name="mountaincar-td3",
            algorithm="TD3",
            observation_space=[[2], [-1.2, -0.07], [0.6, 0.07]],
            action_space=[[1], -1.0, 1.0],
            parameters={
                "learning_rate": 1e-3,
                "batch_size": 256,
                "buffer_size": 100_000,
                "gamma": 0.99,
                # RL Zoo's: large, temporally correlated exploration finds the hilltop; one process per
                # client, so two clients' noises never mix
                "action_noise": "ornstein-uhlenbeck",
                "action_noise_sigma": 0.5,
                "policy_kwargs": {"net_arch": [64, 64]},
            },
        )
    ],
    schedule=Schedule(
        heatup_steps=1_000,
        improve_steps=100_000,
        steps_between_evaluation_periods=5_000,
        evaluation_episodes=5,
    ),
    validation=PresetValidation(env_id="MountainCarContinuous-v0", clients=2, target_return=90.0,
                                max_steps=100_000, timeout_seconds=1800),
)
