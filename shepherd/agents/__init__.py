"""Agents: the learner interfaces (`core`), the batching worker, and the stable-baselines3 adapters behind them."""

from shepherd.agents.core import (ActionFuture, ActMode, AgentClosed, AgentFailed, Checkpointable, Deliver, ServedLearner,
                                  ExperienceLearner, ExperienceReply, Kind, Learner, LearnerUnavailable,
                                  NotClientActing, Request, StalePolicy, VersionedWeights, WeightSource, lost)
from shepherd.agents.parameters import Parameter, ParameterError, ParamType
from shepherd.agents.registry import (ALGORITHMS, SHARING_MODES, algorithm_info, check_agent, check_parameters, check_spaces,
                                      parameters, registry_records)
from shepherd.agents.factories import build_learner, learner_for, sb3_arguments
from shepherd.agents.worker import ThreadedLearner

__all__ = ["ALGORITHMS", "SHARING_MODES", "ActMode", "ActionFuture", "AgentClosed", "AgentFailed", "Checkpointable", "ServedLearner",
           "Deliver", "ExperienceLearner", "ExperienceReply", "Kind", "NotClientActing", "StalePolicy", "Learner", "LearnerUnavailable", "ParamType", "Parameter", "ParameterError", "Request", "ThreadedLearner", "VersionedWeights",
           "WeightSource", "algorithm_info", "build_learner", "check_agent", "check_parameters", "check_spaces", "learner_for",
           "lost", "parameters", "registry_records", "sb3_arguments"]
