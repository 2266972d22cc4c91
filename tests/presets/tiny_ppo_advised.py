"""A tiny advised PPO CartPole agent for tests: a learner per named client, small rollouts, an evaluation of
one episode every 200 steps of each client, and a validation target any client meets at once."""

from shepherd.graph import AgentSpec, GraphManager, PresetValidation, Schedule

graph_manager = GraphManager(
    owner="tests",
    agents=[AgentSpec(name="arms", algorithm="PPO", observation_space=[[4], "-inf", "inf"], action_space=2,
                      parameters={"n_envs": 1, "n_steps": 32, "batch_size": 32, "n_epochs": 1, "seed": 0,
                                  "policy_kwargs": {"net_arch": [8]}},
                      sharing="advised")],
    schedule=Schedule(steps_between_evaluation_periods=200, evaluation_episodes=1,
                      checkpoint_every_steps=200, checkpoint_every_seconds=1.0),
    validation=PresetValidation(env_id="CartPole-v1", target_return=1.0, max_steps=100_000, clients=2,
                                timeout_seconds=120.0),
)
