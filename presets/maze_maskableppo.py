"""MaskablePPO in a maze whose walls make moves invalid; 2 clients sending action masks reach -14.

The maze is `shepherd.envs.gridworld`'s: clients send each step's valid moves as "action_mask", so the agent
never walks into a wall; -14 is the shortest path's return."""

from shepherd.graph import AgentSpec, Preset, PresetValidation, Schedule

preset = Preset(
    owner="demo",
    agents=[
        AgentSpec(
            name="maze",
            algorithm="MaskablePPO",
            observation_space=[[25], 0, 1],
            action_space=4,
            parameters={
                "n_envs": 4,  # rollout segments, two per client
                "n_steps": 64,
                "batch_size": 64,
                "n_epochs": 10,
                "gamma": 0.99,
                "ent_coef": 0.05,  # 0.01 settled now and then on a longer path or a greedy loop
                "learning_rate": 0.001,
            },
        )
    ],
    schedule=Schedule(
        heatup_steps=0,
        improve_steps=50_000,
        steps_between_evaluation_periods=1_000,
        evaluation_episodes=1,  # the maze and the greedy policy are deterministic
    ),
    validation=PresetValidation(env_id="shepherd.envs.gridworld:MaskedGrid-v0", clients=2, target_return=-14.0,
                                max_steps=50_000, timeout_seconds=600),
)
