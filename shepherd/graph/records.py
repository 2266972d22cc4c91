"""One learner's records: every finished episode's return in the store's curve, and what displays, metrics and
advice read of them in memory (episodes and steps by phase, recent training returns, evaluations)."""

from __future__ import annotations

import collections
import logging
import time
from typing import Any

from shepherd.graph.schedule import EvaluationResult
from shepherd.level import Episode, Phase
from shepherd.storage import EpisodeReturn, Store

logger = logging.getLogger(__name__)


class Records:
    """The records of one learner (an agent's, or one client's of an advised agent: ``client``)."""

    def __init__(self, store: Store, agent_id: int, client: str | None) -> None:
        self.store = store
        self.agent_id = agent_id
        self.client = client
        self.episodes = 0  # completed, since this runtime started (or the curve was forgotten)
        self.evaluations: list[EvaluationResult] = []
        self.train_returns: collections.deque[float] = collections.deque(maxlen=100)
        #: the mean return of its last evaluation (kept in its checkpoints): how advisors are chosen
        self.recent_return: float | None = None
        # counted since this runtime started, for monitoring: steps and completed episodes by phase
        self.phase_steps: collections.Counter[Phase] = collections.Counter()
        self.phase_episodes: collections.Counter[Phase] = collections.Counter()
        self.unrecorded = 0  # returns that could not be appended to the curve (a full disk), since it started

    def episode(self, episode: Episode) -> None:
        """A completed episode: its return appended to the curve with its phase, client, lesson and config."""
        self.episodes += 1
        self.phase_episodes[episode.phase] += 1
        setup = episode.setup
        try:
            self.store.append_return(self.agent_id, EpisodeReturn(
                time.time(), float(episode.total), episode.length, episode.phase.value, self.client,
                None if setup is None else setup.lesson, None if setup is None else setup.config))
        except OSError as error:  # the curve misses it; the schedule, trials and lessons must not (a period
            self.unrecorded += 1  # left open for good made every later episode an evaluation's)
            logger.error("agent %s: an episode's return could not be appended to its curve (%s): the curve "
                         "misses it (%d so far), learning goes on", self.agent_id, error, self.unrecorded)
        if episode.phase is Phase.TRAIN:
            self.train_returns.append(float(episode.total))

    def evaluation(self, result: EvaluationResult) -> None:
        """An evaluation period closed with ``result``."""
        self.evaluations.append(result)
        self.recent_return = result.mean_return

    def mean_train_return(self, last: int = 100) -> float | None:
        """The mean of the last ``last`` training returns (None: none yet). Any thread: it copies first."""
        train = list(self.train_returns)[-last:]  # one C-level copy: the event loop may append meanwhile
        return sum(train) / len(train) if train else None

    def forget(self) -> None:
        """Forget the returns kept in memory for displays (the curve on disk is the store's)."""
        self.train_returns.clear()
        self.evaluations.clear()
        self.episodes = 0


class Part:
    """An attribute of an owner that lives on one of its parts (``owner.<part>.<name>``), read and set through it."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return getattr(getattr(instance, self.part), self.name)

    def __set__(self, instance: Any, value: Any) -> None:
        setattr(getattr(instance, self.part), self.name, value)
