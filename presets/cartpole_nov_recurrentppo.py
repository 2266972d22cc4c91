"""RecurrentPPO on CartPole without velocities (RL Zoo's CartPoleNoVel); 4 clients reach an evaluation return of 475.

The observations are [x, theta] only: the LSTM must remember. RL Zoo's ppo_lstm CartPoleNoVel-v1
hyperparameters, without its observation normalisation (Shepherd has no observation filter yet), so with
twice its budget.
"""

from shepherd.graph import AgentSpec, Preset, PresetValidation, Schedule

preset = Preset(
    owner="demo",
    agents=[
        AgentSpec(
            name="cartpole_nov",
            algorithm="RecurrentPPO",
            observation_space=[[2], "-inf", "inf"],
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
                "policy_kwargs": {"ortho_init": False, "activation_fn": "relu", "lstm_hidden_size": 64,
                                  "enable_critic_lstm": True, "net_arch": {"pi": [64], "vf": [64]}},
            },
        )
    ],
    schedule=Schedule(
        heatup_steps=0,
        improve_steps=200_000,  # RL Zoo: 100,000 with normalised observations
        steps_between_evaluation_periods=5_000,
        evaluation_episodes=5,
    ),
    validation=PresetValidation(env_id="shepherd.envs:shepherd/CartPoleNoVel-v1", clients=4, target_return=475.0,
                                max_steps=200_000, timeout_seconds=1800),
)
