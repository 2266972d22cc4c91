"""Three agents for benchmarks/binary_steps.py: a CartPole-sized one and one that sees 84x84x4 frames (Atari's) as a
``Box``, both PPO with SB3's default MLP, and one that sees them as an ``Image``, PPO with SB3's CnnPolicy (NatureCNN),
served in evaluate mode by the benchmark."""

from shepherd.graph import AgentSpec, Preset, Schedule

preset = Preset(
    owner="bench",
    agents=[
        AgentSpec(name="pole", algorithm="PPO", observation_space=[[4], "-inf", "inf"], action_space=2,
                  parameters={"n_envs": 1, "n_steps": 256, "batch_size": 64, "seed": 0}),
        AgentSpec(name="frames", algorithm="PPO", observation_space=[[84, 84, 4], 0, 255], action_space=6,
                  parameters={"n_envs": 1, "n_steps": 256, "batch_size": 64, "seed": 0}),
        AgentSpec(name="eyes", algorithm="PPO", observation_space=["Image", [84, 84, 4]], action_space=6,
                  parameters={"n_envs": 1, "n_steps": 256, "batch_size": 64, "seed": 0}),
    ],
    schedule=Schedule(heatup_steps=0, steps_between_evaluation_periods=None, evaluation_episodes=0),
)
