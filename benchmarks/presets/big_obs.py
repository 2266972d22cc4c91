"""Two agents for benchmarks/eval_isolation.py: one with large observations (a Box of 4096 numbers), whose
evaluate-mode vector steps load the server, and a small CartPole-sized one whose steps are timed."""

from shepherd.graph import AgentSpec, Preset, Schedule

preset = Preset(
    owner="bench",
    agents=[
        AgentSpec(name="big", algorithm="PPO", observation_space=[[4096], "-inf", "inf"], action_space=2,
                  parameters={"n_envs": 16, "n_steps": 32, "batch_size": 64}),
        AgentSpec(name="small", algorithm="PPO", observation_space=[[4], "-inf", "inf"], action_space=2,
                  parameters={"n_envs": 1, "n_steps": 256, "batch_size": 64}),
    ],
    schedule=Schedule(heatup_steps=0, steps_between_evaluation_periods=None, evaluation_episodes=0),
)
