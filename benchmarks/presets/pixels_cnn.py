"""One PPO agent with SB3's CnnPolicy (NatureCNN) that sees 84x84x4 frames (``["Image", ...]``: Atari's after
AtariPreprocessing and a stack of 4), fresh weights, for benchmarks/pixel_round_trip.py."""

from shepherd.graph import AgentSpec, Preset, Schedule

preset = Preset(
    owner="bench",
    agents=[AgentSpec(name="eyes", algorithm="PPO", observation_space=["Image", [84, 84, 4]], action_space=6,
                      parameters={"n_envs": 1, "n_steps": 128, "batch_size": 64, "seed": 0})],
    schedule=Schedule(heatup_steps=0, steps_between_evaluation_periods=None, evaluation_episodes=0),
)
