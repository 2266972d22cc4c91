"""Graph: the GraphManager, its schedule and phases, checkpoints and preset loading."""

from shepherd.graph.advised import AdvisedAgent, BadClient, TooManyClients
from shepherd.graph.manager import DEFAULT_SCHEDULE, AgentSpec, GraphManager, PresetError, PresetValidation, Serving
from shepherd.graph.presets import list_presets, load_preset
from shepherd.graph.runtime import AgentRuntime, AgentStats
from shepherd.graph.schedule import EvaluationResult, PhaseTracker, Schedule
from shepherd.graph.sessions import (Acted, ActTimeout, Conflict, Gone, Session, SessionTable, StepInput, TooManyEnvs,
                                     TooManySessions, Unauthorized, VectorStepInput, WrongShape, check_mask)

__all__ = ["DEFAULT_SCHEDULE", "AdvisedAgent", "BadClient", "ActTimeout", "Acted", "AgentRuntime", "AgentSpec", "AgentStats", "Conflict",
           "EvaluationResult", "Gone", "GraphManager", "PhaseTracker", "PresetError", "PresetValidation", "Schedule", "Serving",
           "Session", "SessionTable", "StepInput", "TooManyClients", "TooManyEnvs", "TooManySessions", "Unauthorized", "VectorStepInput", "check_mask",
           "WrongShape", "list_presets", "load_preset"]
