"""Agents: the learner interface and the pooled stable-baselines3 learners behind it."""

from shepherd.agents.base import ActMode, AgentClosed, AgentFailed, PooledLearner
from shepherd.agents.parameters import Parameter, ParameterError, ParamType
from shepherd.agents.registry import (ALGORITHMS, SHARING_MODES, algorithm_info, build_learner, check_agent,
                                      check_parameters, check_spaces, parameters, registry_records, sb3_arguments)

__all__ = ["ALGORITHMS", "SHARING_MODES", "ActMode", "AgentClosed", "AgentFailed", "ParamType", "Parameter",
           "ParameterError", "PooledLearner", "algorithm_info", "build_learner", "check_agent", "check_parameters",
           "check_spaces", "parameters", "registry_records", "sb3_arguments"]
