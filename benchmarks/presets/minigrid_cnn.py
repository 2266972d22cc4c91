"""PPO with SB3's CnnPolicy for MiniGrid from pixels (RGBImgPartialObsWrapper + ImgObsWrapper: 56 x 56 x 3, 7 actions),
8 envs, for benchmarks/minigrid_pixels.py (its PARAMS are these)."""

from shepherd.graph import AgentSpec, Preset, Schedule

preset = Preset(
    owner="bench",
    agents=[AgentSpec(name="grid", algorithm="PPO", observation_space=["Image", [56, 56, 3]], action_space=7,
                      parameters={"n_envs": 8, "n_steps": 128, "batch_size": 256, "n_epochs": 4,
                                  "learning_rate": 2.5e-4, "ent_coef": 0.01, "gamma": 0.99, "gae_lambda": 0.95,
                                  "clip_range": 0.2, "seed": 0})],
    schedule=Schedule(heatup_steps=0, steps_between_evaluation_periods=None, evaluation_episodes=0,
                      checkpoint_every_steps=10 ** 9, checkpoint_every_seconds=3600.0),
)
