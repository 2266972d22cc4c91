"""The ``advised`` sharing mode: a learner per named client, advised by the policy of a better client
(docs/advice.md). `AdvisedAgent` (agent.py) holds the clients' runtimes and serves them; `Advising`
(advising.py) chooses who advises whom, runs trials of an advisor's policy on a client's own system and
adopts a clear win; `Advised` (kind.py) builds an advised agent, and reads one no server serves from its
clients' checkpoints."""

from shepherd.graph.advised.advising import ADOPT_GAIN, JUDGE_EPISODES, TRIAL_EPISODES, Advising, clearly_better
from shepherd.graph.advised.agent import MAX_CLIENTS, AdvisedAgent, TooManyClients
from shepherd.graph.advised.kind import Advised
from shepherd.graph.agent import BadClient

__all__ = ["ADOPT_GAIN", "JUDGE_EPISODES", "MAX_CLIENTS", "TRIAL_EPISODES", "Advised", "AdvisedAgent", "Advising",
           "BadClient", "TooManyClients", "clearly_better"]
