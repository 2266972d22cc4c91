"""A2C on CartPole-v1; 4 clients, each filling its own rollout segments, reach an evaluation return of 475."""

from shepherd.graph import AgentSpec, Preset, PresetValidation, Schedule

preset = Preset(
    owner="demo",
    agents=[
        AgentSpec(
            name="cartpole-a2c",
            algorithm="A2C",
            observation_space=[[4], "-inf", "inf"],
            action_space=2,
            parameters={
                "n_envs": 4,  # rollout segments, each filled by one client
                "n_steps": 8,
                "gamma": 0.99,
                "ent_coef": 0.0,
                "learning_rate": "lin_0.001",
            },
        )
    ],
    schedule=Schedule(
        heatup_steps=0,  # on-policy: A2C learns only from its own policy's actions
        improve_steps=200_000,
        steps_between_evaluation_periods=5_000,
        evaluation_episodes=5,
    ),
    validation=PresetValidation(env_id="CartPole-v1", clients=4, target_return=475.0, max_steps=200_000,
                                timeout_seconds=1200),
)
