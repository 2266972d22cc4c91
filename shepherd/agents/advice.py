"""Advice between the clients of an ``advised`` agent, as plain data: who advises a client (`Advisor`), its
settings and strength (`Advice`, set by the graph and read by the learner), and a request to adopt the
advisor's policy (`Adoption`). How a learner acts and learns with it is the learner's: the SB3 families'
Actor-Advisor is `shepherd.agents.sb3.advised`; on Ray it crosses as plain data (`shepherd.agents.ray.advice`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from shepherd.agents.core import VersionedWeights, WeightSource


@dataclass(frozen=True)
class Advisor:
    """Who advises a client: its name, its learner's weights, and its checkpoint (read before it publishes;
    None: no advice before it publishes, as for an advisor in another process)."""

    name: str
    weights: WeightSource
    model_path: Path | None
    recent_return: float | None = None  # its own policy's recent evaluation return, when it was chosen


@dataclass(frozen=True, eq=False)
class Adoption:
    """The graph's request that a client adopt its advisor's policy after its next update: whose, the
    request's number (two requests are equal when these are), and the very policy that was tried on the
    client's system: its weights and the observation statistics it normalised with (`Trial.frozen`).
    None for either: the advisor's latest (a trial played live: its learner has no numpy snapshot)."""

    advisor: str
    number: int
    weights: VersionedWeights | None = None
    observations: Mapping[str | None, tuple[np.ndarray, np.ndarray]] | None = None  # (mean, var) by key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Adoption) and (self.advisor, self.number) == (other.advisor, other.number)

    def __hash__(self) -> int:
        return hash((self.advisor, self.number))


def catch_up(own: float | None, advisor: float | None) -> float:
    """How much of the advice a client still takes, from 1 (its own policy is far behind its advisor's, or
    not evaluated yet) to 0 (it has caught up): the advisor's lead over the client's own recent evaluation
    return, relative to the advisor's, clipped to [0, 1]."""
    if own is None or advisor is None:
        return 1.0
    return min(1.0, max(0.0, (advisor - own) / max(abs(advisor), 1e-8)))


class Advice:
    """A client's advice settings and advisor. The graph sets `advisor` and `own_return` (assignments, from
    its thread); the learner reads them on its own."""

    def __init__(self, strength: float = 1.0, decay_steps: int = 0, keep_steps: int = 0) -> None:
        self.strength = float(strength)
        self.decay_steps = int(decay_steps)
        #: steps of the client over which an adopted policy is kept: the client is distilled towards it after
        #: every update, less and less (`keep_weight`); 0: not kept
        self.keep_steps = int(keep_steps)
        self.advisor: Advisor | None = None
        self.own_return: float | None = None  # the client's own policy's recent evaluation return
        #: adopt this advisor's policy after the next update; set by the graph when the advisor's policy,
        #: tried on the client's own system, beat the client's own
        self.adopt: Adoption | None = None

    def strength_at(self, steps: int) -> float:
        """The advice strength after ``steps`` learned: ``strength``, falling linearly to zero over
        ``decay_steps`` (0: no decay by steps), times how far the client's own evaluation is behind its
        advisor's (`catch_up`): advice fades as the client catches up."""
        strength = self.strength
        if self.decay_steps > 0:
            strength *= max(0.0, 1.0 - steps / self.decay_steps)
        advisor = self.advisor
        return strength * catch_up(self.own_return, None if advisor is None else advisor.recent_return)


def keep_weight(steps_since: int, keep_steps: int) -> float:
    """The weight of the pull towards an adopted policy ``steps_since`` steps after adopting it: 1 at once,
    falling linearly to 0 over ``keep_steps`` (0: no pull)."""
    if keep_steps <= 0:
        return 0.0
    return max(0.0, 1.0 - steps_since / keep_steps)
