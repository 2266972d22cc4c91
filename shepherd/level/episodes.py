"""Episodes as the levels keep them: the phase an episode runs in, its running return and length, what a
level needs from its agent (`EpisodeHost`), and trials of another learner's greedy policy."""

from __future__ import annotations

import dataclasses
import enum
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from shepherd.agents import ActionFuture, ActMode
from shepherd.agents.core import HasGreedy, Kind, Learner, Request
from shepherd.agents.greedy_policy import GreedyPolicy
from shepherd.lessons import EpisodeConfig

if TYPE_CHECKING:
    from shepherd.agents.frozen_file import FrozenFile


class Phase(enum.Enum):
    """The phase an episode runs in, chosen when it starts and kept to its end."""

    HEATUP = "heatup"  # random actions; off-policy learners store them (SB3's learning_starts)
    TRAIN = "train"  # exploration policy; learned from
    EVALUATE = "evaluate"  # greedy, not learned from; its returns form the evaluation curve
    DEPLOY = "deploy"  # greedy, not learned from: evaluate-mode sessions and past the training budget
    TRIAL = "trial"  # greedy with another learner's policy, not learned from: how it does on this system


MODES = {Phase.HEATUP: ActMode.RANDOM, Phase.TRAIN: ActMode.EXPLORE, Phase.EVALUATE: ActMode.GREEDY,
         Phase.DEPLOY: ActMode.GREEDY, Phase.TRIAL: ActMode.GREEDY}


class Trial:
    """Another learner's greedy policy, played for ``episodes`` episodes on a session's own system.

    The policy is frozen when the trial first acts (`GreedyPolicy.frozen`: the weights its learner published
    last, and its observation statistics then), so every step of every episode of the trial plays one
    policy, whatever its learner learns meanwhile, and the host can adopt that very policy (``frozen``).
    Making a trial asks the learner to publish. The learner answers what the frozen copy cannot: steps
    before its weights arrived, masks a plan cannot apply, and every step of a learner without a numpy
    snapshot (``greedy`` None: images, recurrent policies, networks too large), whose trial plays it live.
    With ``sample`` (a numpy ``Generator``: self-play's opponents), each action is drawn from the policy's
    distribution under the step's mask instead of being its mode, where the policy has logits to draw from
    (categorical, multi-categorical, Bernoulli: `GreedyNetwork.samples`): by the frozen copy, or by the learner
    with a seed drawn from ``sample`` (`Request.draw`), so a policy no numpy copy holds samples too.
    """

    def __init__(self, tried: str, learner: Learner, episodes: int = 1,
                 sample: np.random.Generator | None = None) -> None:
        self.tried = tried  # whose policy it is (the host's name for it)
        self.learner = learner
        self.episodes = episodes
        self.returns: list[float] = []  # of the episodes played to their end
        self.frozen: GreedyPolicy | FrozenFile | None = None  # a self-play snapshot may be a file's
        self.sample = sample
        self._live: set[int] = set()  # actors in an episode the learner answers part of
        self._greedy = learner.greedy if isinstance(learner, HasGreedy) else None
        if self._greedy is not None:
            self._greedy.prepare()  # its weights published by the time the trial starts

    @property
    def done(self) -> bool:
        return len(self.returns) >= self.episodes

    def ask(self, request: Request) -> Callable[[], ActionFuture]:
        """The call that answers an actor's act request (BEGIN, STEP) of a trial episode: the frozen copy's
        action, or the tried learner's (greedy or drawn; the actor's first request to it begins its episode there)."""
        if self.frozen is None and self._greedy is not None:
            self.frozen = self._greedy.frozen()
        frozen = self.frozen
        if frozen is not None:
            chosen = frozen.act(request.obs, request.mask, self.sample)
            if chosen is not None:
                return functools.partial(answered, *chosen)
        kind = Kind.STEP if request.actor in self._live else Kind.BEGIN
        self._live.add(request.actor)
        # nothing learned, and of no vector session there: the tried learner sees only the actors in trial
        # episodes; with ``sample``, it draws the action from its distribution with a seed of ours (`Request.draw`)
        draw = None if self.sample is None else int(self.sample.integers(2 ** 63))
        return functools.partial(self.learner.ask, dataclasses.replace(request, kind=kind, mode=ActMode.GREEDY, group=0,
                                                                       draw=draw))

    def end(self, request: Request) -> None:
        """An actor's trial episode ended (END: its last reward and observation)."""
        if request.actor in self._live:
            self.learner.tell(dataclasses.replace(request, mode=ActMode.GREEDY, group=0))
        self.abandon(request.actor)

    def abandon(self, actor: int) -> None:
        """The tried learner forgets the actor at once."""
        if actor in self._live:
            self._live.discard(actor)
            self.learner.end_actor(actor)


def answered(action: Any, version: int) -> ActionFuture:
    """A reply already known: ``action``, chosen by the policy ``version`` names."""
    future = ActionFuture()
    future.policy_version = version
    future.set_result(action)
    return future


@dataclass
class Episode:
    phase: Phase
    total: float = 0.0
    length: int = 0
    trial: Trial | None = None  # a TRIAL episode's: the policy that answers it instead of the host's
    setup: EpisodeConfig | None = None  # its lesson and config (None: the agent has no lessons)

    def count(self, reward: float, host: EpisodeHost) -> None:
        """One step of this episode (the reward for its last action), counted with the host too."""
        self.total += reward
        self.length += 1
        host.count_step(self.phase)


class EpisodeHost(Protocol):
    """What a LevelManager needs from the graph: the learner and the agent's schedule."""

    @property
    def learner(self) -> Learner: ...

    def begin_episode(self) -> Phase: ...

    def current_phase(self) -> Phase:
        """The phase an episode would start in now, without starting one."""
        ...

    def begin_trial(self) -> Trial | None:
        """Another policy to try on this session's next episode instead (None: none)."""
        ...

    def next_config(self) -> EpisodeConfig | None:
        """The config of an episode still to start, drawn from the agent's current lesson (None: no lessons)."""
        ...

    def count_step(self, phase: Phase, steps: int = 1) -> None:
        """Count ``steps`` env steps of ``phase`` (a client-acting block's at once)."""
        ...

    def end_episode(self, episode: Episode, completed: bool) -> None: ...

