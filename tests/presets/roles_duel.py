"""An environment with roles for the dashboard's browser tests and the admin commands against a server: a PPO
agent against a scripted player."""

from shepherd.environments import EnvironmentSpec
from shepherd.graph import AgentSpec, GraphManager, Schedule


def still(obs, mask):
    """The scripted player: always the first action."""
    return 0


graph_manager = GraphManager(
    owner="tests",
    agents=[AgentSpec(name="player", algorithm="PPO", observation_space=[[2], -1.0, 1.0], action_space=2,
                      parameters={"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0,
                                  "policy_kwargs": {"net_arch": [8]}})],
    schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1, checkpoint_every_seconds=2.0),
    environments=(EnvironmentSpec("duel", {"hero": "player", "rival": "tests.presets.roles_duel:still"},
                                  "simultaneous"),),
)
