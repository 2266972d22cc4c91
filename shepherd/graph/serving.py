"""How a graph serves its sessions (`Serving`), given once to `GraphManager.create_graph`."""

from __future__ import annotations

from dataclasses import dataclass

from shepherd.agents import Deliver
from shepherd.agents.bounds import DEFAULT_BOUNDS, ParameterBounds
from shepherd.graph.agent import MAX_CLIENTS
from shepherd.graph.start_from import StartingCheckpoints
from shepherd.wire.steps import DEFAULT_MAX_REWARD


@dataclass(frozen=True)
class Serving:
    """How a graph serves its sessions, given once to `GraphManager.create_graph`.

    ``deliver`` runs the learners' answers on the thread that drives the graph (an event loop's
    ``call_soon_threadsafe``; None: on the learners' threads, for callers that block on futures).
    ``evaluate_only`` (``run.py --evaluate``): every login is answered in evaluate mode, whatever it asked,
    so nothing is learned, and no checkpoint is written when the graph closes. ``start_from`` (``run.py -crd``,
    ``-crf``): the checkpoints that the preset's agents without a model of their own start from.
    """

    deliver: Deliver | None = None
    act_timeout_seconds: float = 30.0
    max_sessions_per_agent: int | None = None
    max_envs_per_session: int = 1024  # the most envs one vector session may drive
    max_clients_per_agent: int | None = MAX_CLIENTS  # the most client names an agent takes (None: any)
    evaluate_only: bool = False
    start_from: StartingCheckpoints | None = None
    #: how long a session may sit idle holding evaluation episodes before they are handed back to the period
    #: (its episodes go on, greedy and unrecorded as evaluations): a client that vanished mid-evaluation must
    #: not hold the agent's evaluation period open for every other client (issue 48, M3)
    evaluation_hold_seconds: float = 30.0
    #: the largest reward magnitude a step or upload may carry (``run.py --max-reward``; inf: none)
    max_reward: float = DEFAULT_MAX_REWARD
    #: the bounds parameter values are held to (``run.py --parameter-bound``): the preset's, the stored agents'
    #: when their learners are built, new agents' and live changes (the admin operations)
    bounds: ParameterBounds = DEFAULT_BOUNDS
