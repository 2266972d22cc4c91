"""An agent's lesson state (docs/lessons.md): which lesson its episodes are drawn from, the streak of
evaluations that reached the lesson's ``until``, and the seeded generator every episode's config is drawn
with. One per runtime (an advised agent's clients each have their own); kept in the checkpoint.

Not thread-safe: the event loop owns it, as it owns the runtime's phase tracker.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from shepherd.lessons import EpisodeConfig, Lesson

logger = logging.getLogger(__name__)


class UnknownLesson(KeyError):
    """A lesson name the agent does not have (the message names those it has)."""

    def __str__(self) -> str:
        return str(self.args[0])


def stored_state(lesson: str | None, streak: int = 0) -> dict[str, Any]:
    """A checkpoint's lesson state (its ``lessons`` key): the lesson by name, and the streak toward its until."""
    return {"lesson": lesson, "streak": streak}


class LessonState:
    """The current lesson of one agent, how many evaluations in a row reached its ``until``, and the
    generator of its episodes' configs (seeded with ``seed``; None: from the system's entropy)."""

    def __init__(self, lessons: tuple[Lesson, ...], seed: int | None = None, label: str = "") -> None:
        self.lessons = lessons
        self.index = 0
        self.streak = 0
        #: how often the lesson changed since this state was made (advanced, moved by hand, restored)
        self.changes = 0
        self.label = label
        self._rng = np.random.default_rng(seed)

    @property
    def active(self) -> bool:
        """The agent has lessons (without them, no episode gets a config and the wire stays as before)."""
        return bool(self.lessons)

    @property
    def current(self) -> Lesson | None:
        return self.lessons[self.index] if self.lessons else None

    @property
    def name(self) -> str | None:
        lesson = self.current
        return None if lesson is None else lesson.name

    @property
    def at_last(self) -> bool:
        """In the last lesson, or without lessons: where the preset's validation target applies."""
        return self.index >= len(self.lessons) - 1

    def draw(self) -> EpisodeConfig | None:
        """The next episode's config, drawn from the current lesson (None without lessons)."""
        lesson = self.current
        if lesson is None:
            return None
        return EpisodeConfig(lesson.name, lesson.draw(self._rng))

    def observe(self, mean_return: float) -> str | None:
        """An evaluation's mean return: counts toward the current lesson's ``until``; returns the name of
        the lesson the agent advanced to, if it did."""
        lesson = self.current
        if lesson is None or lesson.until is None:
            return None
        if mean_return >= lesson.until.evaluation_return:
            self.streak += 1
        else:
            self.streak = 0
        if self.streak < lesson.until.evaluations:
            return None
        self._go(self.index + 1)
        logger.info("agent %s: lesson %r reached (%d evaluation(s) in a row >= %g); now in lesson %r", self.label,
                    lesson.name, lesson.until.evaluations, lesson.until.evaluation_return, self.name)
        return self.name

    def move(self, name: str) -> None:
        """Move to the lesson ``name`` by hand (its streak starts at 0).

        Raises:
            UnknownLesson: no lesson of that name (or the agent has no lessons).
        """
        self._go(self.find(name))
        logger.info("agent %s: moved to lesson %r by hand", self.label, name)

    def find(self, name: str) -> int:
        for index, lesson in enumerate(self.lessons):
            if lesson.name == name:
                return index
        if not self.lessons:
            raise UnknownLesson("this agent has no lessons")
        raise UnknownLesson(f"no lesson {name!r}; the lessons are " + ", ".join(repr(l.name) for l in self.lessons))

    def _go(self, index: int) -> None:
        self.index, self.streak = index, 0
        self.changes += 1

    def state(self) -> dict[str, Any] | None:
        """What a checkpoint keeps (None without lessons): the lesson, the streak, and the generator's state (a
        restart draws the configs it would have drawn)."""
        if not self.lessons:
            return None
        return {**stored_state(self.name, self.streak), "generator": self._rng.bit_generator.state}

    def load(self, state: Any) -> None:
        """Take a checkpoint's state: its lesson by name (a lesson the agent no longer has: the first, with
        a warning), its streak, and its generator's state (when the checkpoint has one)."""
        if not self.lessons or not isinstance(state, dict) or not isinstance(state.get("lesson"), str):
            return
        generator = state.get("generator")
        if isinstance(generator, dict) and generator.get("bit_generator") == type(self._rng.bit_generator).__name__:
            try:
                self._rng.bit_generator.state = generator
            except (TypeError, ValueError, KeyError):
                logger.warning("agent %s: its checkpoint's lesson generator cannot be read; it draws anew", self.label)
        try:
            index = self.find(state["lesson"])
        except UnknownLesson:
            logger.warning("agent %s: its checkpoint's lesson %r is not among its lessons now; it starts in %r",
                           self.label, state["lesson"], self.lessons[0].name)
            return
        self._go(index)
        streak = state.get("streak", 0)
        self.streak = streak if isinstance(streak, int) and not isinstance(streak, bool) and streak >= 0 else 0
