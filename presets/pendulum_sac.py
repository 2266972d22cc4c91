"""SAC on Pendulum-v1 (continuous torque); 2 clients reach an evaluation return of -200."""

from shepherd.graph import AgentSpec, Preset, PresetValidation, Schedule

preset = Preset(
    owner="demo",
    agents=[
        AgentSpec(
            name="pendulum-sac",
            algorithm="SAC",
            observation_space=[[3], [-1.0, -1.0, -8.0], [1.0, 1.0, 8.0]],
            action_space=[[1], -2.0, 2.0],  # the client gets torques in [-2, 2]; SAC acts in [-1, 1]
            parameters={
                "learning_rate": 1e-3,
                "batch_size": 256,
                "buffer_size": 100_000,
                "gamma": 0.99,
                "tau": 0.005,
                "ent_coef": "auto",
                "policy_kwargs": {"net_arch": [64, 64]},
            },
        )
    ],
    schedule=Schedule(
        heatup_steps=1_000,  # random steps filling the replay buffer: SB3's learning_starts
        improve_steps=30_000,
        steps_between_evaluation_periods=2_000,
        evaluation_episodes=5,
    ),
    validation=PresetValidation(env_id="Pendulum-v1", clients=2, target_return=-200.0, max_steps=30_000,
                                timeout_seconds=1200),
)
