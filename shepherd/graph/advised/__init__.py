"""The ``advised`` sharing mode: a learner per named client, advised by the policy of a better client
(docs/advice.md). `AdvisedAgent` (agent.py) holds the clients' runtimes; `Advising` (advising.py) chooses
who advises whom, runs trials of an advisor's policy on a client's own system and adopts a clear win."""

from shepherd.graph.advised.advising import ADOPT_GAIN, JUDGE_EPISODES, TRIAL_EPISODES, Advising, clearly_better
from shepherd.graph.advised.agent import MAX_CLIENTS, AdvisedAgent, BadClient, TooManyClients

__all__ = ["ADOPT_GAIN", "JUDGE_EPISODES", "MAX_CLIENTS", "TRIAL_EPISODES", "AdvisedAgent", "Advising", "BadClient",
           "TooManyClients", "clearly_better"]
