"""One PPO agent with SB3's CnnPolicy that sees Atari frames as AtariPreprocessing + FrameStackObservation give them
(4 x 84 x 84 uint8, channels first), 6 actions (Pong's), fresh weights, for benchmarks/atari_vector.py."""

from shepherd.graph import AgentSpec, Preset, Schedule

preset = Preset(
    owner="bench",
    agents=[AgentSpec(name="atari", algorithm="PPO", observation_space=["Image", [84, 84, 4], "channels_first"],
                      action_space=6, parameters={"n_envs": 8, "n_steps": 128, "batch_size": 256, "seed": 0})],
    schedule=Schedule(heatup_steps=0, steps_between_evaluation_periods=None, evaluation_episodes=0),
)
