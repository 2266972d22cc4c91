"""PPO on CartPole-v1 (RL Zoo hyperparameters); 4 clients reach an evaluation return of 475."""

from shepherd.graph import AgentSpec, Preset, PresetValidation, Schedule

preset = Preset(
    owner="demo",
    agents=[
        AgentSpec(
            name="cartpole",
            algorithm="PPO",
            observation_space=[[4], "-inf", "inf"],
            action_space=2,
            parameters={
                "n_envs": 8,  # rollout segments, each filled by one client
                "n_steps": 32,
                "batch_size": 256,
                "gae_lambda": 0.8,
                "gamma": 0.98,
                "n_epochs": 20,
                "ent_coef": 0.0,
                "learning_rate": "lin_0.001",
                "clip_range": "lin_0.2",
            },
        )
    ],
    schedule=Schedule(
        heatup_steps=0,
        improve_steps=100_000,
        steps_between_evaluation_periods=5_000,
        evaluation_episodes=5,
    ),
    validation=PresetValidation(env_id="CartPole-v1", clients=4, target_return=475.0, max_steps=100_000,
                                timeout_seconds=900),
)
