"""A preset's validation run, decided by the graph: did an evaluation reach the target within the step budget."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Final, Iterable

from shepherd.graph.schedule import EvaluationResult

if TYPE_CHECKING:
    from shepherd.graph.manager import GraphManager
    from shepherd.graph.preset import PresetValidation
    from shepherd.graph.runtime import AgentRuntime

logger = logging.getLogger(__name__)

#: `Outcome.code` once an evaluation reached the target (the exit status of ``run.py --clients``)
REACHED: Final = 0
#: `Outcome.code` once the budget is spent without reaching it, or the run was given up
NOT_REACHED: Final = 1


@dataclass
class Outcome:
    """How a validation run ended: ``code`` is None while undecided, then `REACHED` or `NOT_REACHED`."""

    code: int | None = None
    reason: str = ""

    @property
    def decided(self) -> bool:
        return self.code is not None

    @property
    def reached(self) -> bool:
        return self.code == REACHED


def judge(validation: PresetValidation, result: EvaluationResult, budget_finished: bool = False) -> Outcome:
    """The outcome one evaluation decides: reached if its mean return is at least the target, in the agent's
    last lesson (docs/lessons.md: an easier lesson's evaluation never reaches it); not reached if it did not
    and the run's ``max_steps`` (or the schedule's training budget, ``budget_finished``) is spent; otherwise
    undecided (``code`` None)."""
    if result.mean_return >= validation.target_return and result.final_lesson:
        return Outcome(REACHED, f"target reached: evaluation {result.period} at {result.steps} steps returned "
                                f"{result.mean_return:.1f} >= {validation.target_return:g}")
    if result.steps >= validation.max_steps or budget_finished:
        if not result.final_lesson:
            return Outcome(NOT_REACHED, f"target not reached within {validation.max_steps} steps: the agent is "
                                        f"still in lesson {result.lesson!r}, not its last")
        return Outcome(NOT_REACHED, f"target not reached within {validation.max_steps} steps: last evaluation "
                                    f"returned {result.mean_return:.1f} < {validation.target_return:g}")
    return Outcome()


def watch(graph: GraphManager, agent_id: int, outcome: Outcome, stop: asyncio.Event,
          clients: Iterable[str] = (), reached_only: bool = False) -> Callable[[AgentRuntime, EvaluationResult], None]:
    """Decide ``outcome`` from each evaluation of the validated agent, once, and set ``stop`` then. An
    advised agent reaches the target once every client's last evaluation does, every client it has and
    every name in ``clients`` (the local clients `run.py --clients` starts, counted before their first
    login, so a fast client cannot end the run before a slow one has logged in); one client that spends its
    budget below it decides "not reached", unless ``reached_only`` (``run.py -asc`` serving other clients: only
    the target reached decides, and serving goes on past ``max_steps``).
    Returns the listener added to ``graph.evaluation_listeners`` (for the caller to remove).

    The agent is known by its store id: a restart (from the dashboard or the admin commands) gives it a
    new runtime whose evaluations still count.

    Raises:
        ValueError: the graph has no validation block.
    """
    validation = graph.validation
    if validation is None:
        raise ValueError(f"preset {graph.name or '(unnamed)'} has no validation block")

    latest: dict[str, EvaluationResult] = {}  # an advised agent's clients' last evaluations
    expected = set(clients)

    def on_evaluation(runtime: AgentRuntime, result: EvaluationResult) -> None:
        if runtime.record.id != agent_id or outcome.decided:
            return
        decided = judge(validation, result, runtime.tracker.finished)
        if runtime.client is not None:  # an advised agent: reached once every client's last evaluation is
            latest[runtime.client] = result
            agent = graph.served.agents.get(agent_id)
            names = (set(agent.clients) if agent is not None else set(latest)) | expected
            if decided.reached and not all(
                    name in latest and latest[name].mean_return >= validation.target_return for name in names):
                return
            if decided.reached:
                decided.reason = (f"target reached by every client ({', '.join(sorted(names))}): last evaluations "
                                  + ", ".join(f"{name} {latest[name].mean_return:.1f}" for name in sorted(names))
                                  + f" >= {validation.target_return:g}")
            elif decided.decided:
                decided.reason = f"client {runtime.client}: {decided.reason}"
        if decided.decided and (decided.reached or not reached_only):
            outcome.code, outcome.reason = decided.code, decided.reason
            logger.info("validation of agent id %d: %s", agent_id, decided.reason)
            stop.set()

    graph.evaluation_listeners.append(on_evaluation)
    return on_evaluation
