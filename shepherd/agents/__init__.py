"""Agents: the learner interface and the pooled stable-baselines3 learners behind it."""

from shepherd.agents.base import ActMode, AgentClosed, AgentFailed, PooledLearner
from shepherd.agents.registry import (ALGORITHMS, ParameterError, algorithm_info, build_learner,
                                      check_parameters, check_spaces, parameters, registry_records)

__all__ = ["ALGORITHMS", "ActMode", "AgentClosed", "AgentFailed", "ParameterError", "PooledLearner",
           "algorithm_info", "build_learner", "check_parameters", "check_spaces", "parameters",
           "registry_records"]
