"""The schedule (Coach's step counts) and the tracker that moves one agent through its phases."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from shepherd.level import Episode, Phase


@dataclass(frozen=True)
class Schedule:
    """When an agent explores, learns and is evaluated, counted in steps over all its clients.

    ``heatup_steps`` count toward ``improve_steps``, as SB3's ``learning_starts`` counts toward
    ``total_timesteps``. ``improve_steps=None`` trains forever. After every
    ``steps_between_evaluation_periods`` learned steps, and once when ``improve_steps`` is reached, the
    next ``evaluation_episodes`` episodes that start (from any client) run greedy and unlearned.
    """

    heatup_steps: int = 0
    improve_steps: int | None = None
    steps_between_evaluation_periods: int | None = None
    evaluation_episodes: int = 5
    checkpoint_every_steps: int = 10_000
    checkpoint_every_seconds: float = 60.0

    def __post_init__(self) -> None:
        for name in ("heatup_steps", "evaluation_episodes"):
            if getattr(self, name) < 0:
                raise ValueError(f"schedule: {name} must not be negative")
        if self.checkpoint_every_steps < 1:  # 0: a whole checkpoint (a replay buffer's too) at every step
            raise ValueError("schedule: checkpoint_every_steps must be at least 1")
        if not (math.isfinite(self.checkpoint_every_seconds) and self.checkpoint_every_seconds > 0):
            raise ValueError("schedule: checkpoint_every_seconds must be a positive number of seconds (as -s)")
        for name in ("improve_steps", "steps_between_evaluation_periods"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"schedule: {name} must be positive or None")


@dataclass(frozen=True)
class EvaluationResult:
    period: int
    steps: int
    mean_return: float
    returns: tuple[float, ...]
    lesson: str | None = None  # the lesson it was judged in (None: the agent has none, or its episodes ran in several)
    final_lesson: bool = True  # in its last lesson (or without lessons): the preset's validation target applies
    #: the lesson each of its episodes ran in, in order (None: the agent has no lessons, or a checkpoint of before
    #: kept the episode's return without it)
    episode_lessons: tuple[str | None, ...] = ()


class PhaseTracker:
    """The live phase state of one agent. Not thread-safe: one owner (the event loop) drives it."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.steps = 0
        self.period = 0
        self.to_start = 0  # evaluation episodes of the open period not yet started
        self.running = 0  # evaluation episodes started and not yet ended
        self.period_returns: list[float] = []
        self.period_lessons: list[str | None] = []  # the lesson each of them ran in
        self.next_evaluation = schedule.steps_between_evaluation_periods
        self.final_started = False

    @property
    def budget_spent(self) -> bool:
        return self.schedule.improve_steps is not None and self.steps >= self.schedule.improve_steps

    @property
    def finished(self) -> bool:
        """The training budget is spent and its final evaluation is over."""
        return self.budget_spent and self.to_start == 0 and self.running == 0

    @property
    def phase(self) -> Phase:
        """The phase a new episode would start in now (without starting one)."""
        if self.to_start or self.running:
            return Phase.EVALUATE
        if self.steps < self.schedule.heatup_steps:
            return Phase.HEATUP
        return Phase.DEPLOY if self.budget_spent else Phase.TRAIN

    @property
    def next_phase(self) -> Phase:
        """The phase `begin_episode` would start an episode in now, without starting one: evaluation only while
        the open period has episodes still to start (`phase` says evaluation while any is still running)."""
        if self.to_start:
            return Phase.EVALUATE
        if self.steps < self.schedule.heatup_steps:
            return Phase.HEATUP
        return Phase.DEPLOY if self.budget_spent else Phase.TRAIN

    def begin_episode(self) -> Phase:
        if self.to_start:
            self.to_start -= 1
            self.running += 1
            return Phase.EVALUATE
        if self.steps < self.schedule.heatup_steps:
            return Phase.HEATUP
        return Phase.DEPLOY if self.budget_spent else Phase.TRAIN

    def count_step(self, phase: Phase, steps: int = 1) -> None:
        """Count ``steps`` steps of ``phase`` (a client-acting block's at once: each counted as one would be,
        periods opened at the step that opens them)."""
        if phase not in (Phase.HEATUP, Phase.TRAIN):
            return
        if steps != 1:
            end = self.steps + steps
            if (self.next_evaluation is None or end < self.next_evaluation) and (
                    self.final_started or self.schedule.improve_steps is None or end < self.schedule.improve_steps):
                self.steps = end  # no period opens on the way
            else:
                for _ in range(steps):
                    self.count_step(phase)
            return
        self.steps += 1
        if self.next_evaluation is not None and self.steps >= self.next_evaluation:
            self.next_evaluation += self.schedule.steps_between_evaluation_periods or 0
            self._open_period()
        if self.budget_spent and not self.final_started:
            self.final_started = True
            if not (self.to_start or self.running):
                self._open_period()

    def _open_period(self) -> None:
        if self.schedule.evaluation_episodes:
            if not (self.to_start or self.running):
                self.period += 1
            self.to_start += self.schedule.evaluation_episodes

    def end_episode(self, episode: Episode, completed: bool) -> EvaluationResult | None:
        """Account an episode's end; returns the evaluation result when it closes a period."""
        if episode.phase is not Phase.EVALUATE:
            return None
        self.running -= 1
        if not completed:
            self.to_start += 1  # an abandoned evaluation episode is replaced by the next one to start
            return None
        self.period_returns.append(episode.total)
        self.period_lessons.append(None if episode.setup is None else episode.setup.lesson)
        if self.running or self.to_start:
            return None
        returns, self.period_returns = tuple(self.period_returns), []
        lessons, self.period_lessons = tuple(self.period_lessons), []
        return EvaluationResult(self.period, self.steps, statistics.fmean(returns), returns, episode_lessons=lessons)

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps; evaluation episodes in flight are started again after a resume."""
        return {"steps": self.steps, "period": self.period, "next_evaluation": self.next_evaluation,
                "final_started": self.final_started, "evaluations_to_start": self.to_start + self.running,
                "period_returns": list(self.period_returns), "period_lessons": list(self.period_lessons)}

    def load(self, state: dict[str, Any]) -> None:
        self.steps = int(state.get("steps", 0))
        self.period = int(state.get("period", 0))
        # both from the schedule as it is now (a preset's schedule may change between runs: -cp schedule.FIELD):
        # the next multiple of the interval (where the periods of an unchanged one open), and a final evaluation
        # only for a budget spent (a raised budget evaluates again at its end)
        interval = self.schedule.steps_between_evaluation_periods
        self.next_evaluation = None if interval is None else (self.steps // interval + 1) * interval
        self.final_started = bool(state.get("final_started", False)) and self.budget_spent
        self.to_start = int(state.get("evaluations_to_start", 0))
        self.running = 0
        self.period_returns = [float(v) for v in state.get("period_returns", [])]
        lessons = state.get("period_lessons") or []  # (none before 2026-11-29: unknown, counted as the current)
        self.period_lessons = [lessons[i] if i < len(lessons) else None for i in range(len(self.period_returns))]
