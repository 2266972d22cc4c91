"""Graph: the GraphManager built from a `Preset`, its schedule and phases, served agents, sessions and checkpoints
(preset files are read by `shepherd.loading`)."""

from shepherd.graph.agent import AgentKind, AgentStatus, BadClient, ServedAgent
from shepherd.graph.pooled import PooledAgent
from shepherd.graph.advised import AdvisedAgent, TooManyClients
from shepherd.graph.hierarchy.agent import HierarchyAgent
from shepherd.graph.manager import DEFAULT_SCHEDULE, GraphManager, Serving
from shepherd.graph.preset import (AgentSpec, InvalidPreset, Preset, PresetError, PresetValidation, Problem,
                                   programmed_selector)
from shepherd.graph.runtime import AgentRuntime, AgentStats
from shepherd.graph.schedule import EvaluationResult, PhaseTracker, Schedule
from shepherd.graph.session_table import SessionTable
from shepherd.graph.sessions import Acted, ActTimeout, Conflict, Gone, Session, TooManyEnvs, Unauthorized, check_mask
from shepherd.wire.sessions import TooManySessions
from shepherd.level import WrongShape
from shepherd.wire import StepInput, VectorStepInput

__all__ = ["DEFAULT_SCHEDULE", "AdvisedAgent", "HierarchyAgent", "AgentKind", "AgentStatus", "PooledAgent", "ServedAgent", "BadClient", "ActTimeout", "Acted", "AgentRuntime", "AgentSpec", "AgentStats", "Conflict",
           "EvaluationResult", "Gone", "GraphManager", "PhaseTracker", "PresetError", "PresetValidation", "Schedule", "Serving",
           "Session", "SessionTable", "StepInput", "TooManyClients", "TooManyEnvs", "TooManySessions", "Unauthorized",
           "VectorStepInput", "check_mask", "WrongShape", "InvalidPreset", "Preset", "Problem", "programmed_selector"]
