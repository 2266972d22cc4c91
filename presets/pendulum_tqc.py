"""TQC (sb3-contrib) on Pendulum-v1 (RL Zoo's settings, without gSDE); 2 clients reach -200."""

from shepherd.graph import AgentSpec, Preset, PresetValidation, Schedule

preset = Preset(
    owner="demo",
    agents=[
        AgentSpec(
            name="pendulum-tqc",
            algorithm="TQC",
            observation_space=[[3], [-1.0, -1.0, -8.0], [1.0, 1.0, 8.0]],
            action_space=[[1], -2.0, 2.0],  # the client gets torques in [-2, 2]; TQC acts in [-1, 1]
            parameters={
                "learning_rate": 1e-3,
                "train_freq": 64,
                "gradient_steps": 64,
                # RL Zoo also sets use_sde (and log_std_init for it): gSDE's exploration matrix would be
                # shared by every client, so Shepherd does not serve it; TQC's default noise explores
                "policy_kwargs": {"net_arch": [64, 64]},
            },
        )
    ],
    schedule=Schedule(
        heatup_steps=100,  # TQC's default learning_starts (RL Zoo keeps it)
        improve_steps=20_000,  # RL Zoo's budget
        steps_between_evaluation_periods=2_000,
        evaluation_episodes=5,
    ),
    validation=PresetValidation(env_id="Pendulum-v1", clients=2, target_return=-200.0, max_steps=20_000,
                                timeout_seconds=1200),
)
