"""The engine room's interfaces: what a learner is fed, what it answers, and the plain data in between.

A learner is fed episodes by many actors (one per client session), in Dopamine's push style, as `Request`s
(the form a client's step takes once parsed: a level makes one of each step), and answers every act request
with an action and the policy version that chose it::

    learner.start(deliver)                                  # once: how answers reach the caller's thread
    action = learner.ask(Request(Kind.BEGIN, actor, obs, mode=mode))          # a future action
    while episode goes on:                                  # completes (obs, action, reward), acts anew
        action = learner.ask(Request(Kind.STEP, actor, obs, reward, mode=mode))
    learner.tell(Request(Kind.END, actor, obs, reward, truncated, mode))
    learner.tell(Request(Kind.DROP, actor))                 # the session is gone: close its partial data

(`EpisodeCalls` spells the same as ``begin_episode``, ``step``, ``end_episode`` and ``end_actor``, for code
that drives a learner by hand: tests, benchmarks.)

A client-acting session (issue 35: the client acts with the served policy and uploads its experience) is
one *uploader*: ``learner.begin_uploads(uploader, n_envs)`` says how many steps to collect first, and each
``learner.learn_experience(uploader, experience)`` hands one upload over as one message; both are futures of
an `ExperienceReply`. ``end_actor(uploader)`` ends it (``shepherd/agents/sb3/uploads.py``).

A vector session (one client stepping N environments) hands every env's messages of one step over at once
with ``learner.submit(requests)``: they reach the learner in one batch and in env order, so the learner acts
on them with one forward pass, as SB3 acts on a ``VecEnv``'s N observations.

Between the caller and the learner's worker only plain data travels (`Request`, `Answer`): a ticket
number stands for the caller's future, so a learner could sit in another process behind the same calls.
Weights leave a learner as `VersionedWeights` (numpy arrays and a version) through a `WeightSource`: the
greedy snapshot, an export or another process pull them from there.
"""

from __future__ import annotations

import asyncio
import enum
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generator, Mapping, Protocol, Union, runtime_checkable

import numpy as np

from shepherd.wire.experience import Experience

if TYPE_CHECKING:  # the capabilities' types (their modules import torch, or build on this one)
    from shepherd.agents.advice import Advice
    from shepherd.agents.greedy_policy import GreedyPolicy
    from shepherd.agents.metrics import MetricsWriter
    from shepherd.agents.timing import LearnerStats

#: an observation as the learner takes it: an array, or a dict of arrays for a ``Dict`` space
Observation = Union[np.ndarray, Mapping[str, np.ndarray]]
#: an action as the client gets it before JSON: an integer, or an array in the action space's shape
EnvAction = Union[int, np.integer, np.ndarray]
#: how a caller wants answers run on its own thread (for an asyncio caller, ``loop.call_soon_threadsafe``)
Deliver = Callable[[Callable[[], None]], Any]


class ActMode(enum.Enum):
    """How an action is chosen, and whether the learner learns from the step."""

    RANDOM = "random"  # heatup: uniform random actions, transitions stored
    EXPLORE = "explore"  # training: the learner's exploration policy, transitions stored
    GREEDY = "greedy"  # evaluation and deployment: deterministic policy, nothing stored

    @property
    def learns(self) -> bool:
        return self is not ActMode.GREEDY


class AgentFailed(RuntimeError):
    """The learner stopped after an error; the message gives the reason."""


class AgentClosed(RuntimeError):
    """The learner was shut down (server stopping or agent restarted)."""


class LearnerUnavailable(RuntimeError):
    """The learner's process is gone for a moment (a Ray actor being restarted from its last checkpoint):
    the request was not learned from; the client may send it again after ``retry_after`` seconds."""

    retry_after = 2


def lost(future: Any) -> bool:
    """Whether a learner call's future failed because the learner's process died (`LearnerUnavailable`): asked
    again, the restarted learner answers it. A call that was answered, or is still waiting, is not lost."""
    return (future is not None and future.done() and not future.cancelled()
            and isinstance(future.exception(), LearnerUnavailable))


class StalePolicy(RuntimeError):
    """An upload's samples were drawn with a policy version the learner cannot learn from; nothing of it
    was recorded. ``policy_version`` is the current one (409)."""

    def __init__(self, policy_version: int, detail: str) -> None:
        super().__init__(detail)
        self.policy_version = policy_version

    def __reduce__(self) -> tuple[Any, ...]:  # a refusal crosses a process boundary (``--ray``) whole
        return (StalePolicy, (self.policy_version, str(self)))


class NotClientActing(ValueError):
    """The agent's policy cannot act at the client (per-session state the policy file cannot hold:
    recurrent state, frame stacks, advice); the message says why (400: act at the server instead)."""


class Kind(enum.Enum):
    """What a `Request` asks of the learner."""

    BEGIN = 1  # new episode: act on its first observation
    STEP = 2  # complete the pending transition, act on the new observation
    END = 3  # complete the pending transition; the episode is over
    ACT = 4  # act only (a request put back to wait, for example for a free rollout segment)
    DROP = 5  # the actor is gone: close its partial data


@dataclass(eq=False)
class Request:
    """One episode message to a learner; plain data. ``ticket`` names the answer the caller waits for
    (0: none is awaited); ``submitted`` is when it was queued (``time.perf_counter()``; 0: not noted).
    ``group`` is the vector session the actor belongs to (0: a session of its own): a group's actors step
    together, so a learner must never make one of them wait for another's progress. ``mask`` is the
    client's action mask for this act (a flat boolean array, true where allowed; None: every action).
    ``raw_obs`` and ``raw_reward`` are what the client sent, kept when the learner's filters replaced ``obs``
    or ``reward`` (``agents/filters.py``; None: nothing was replaced). ``draw``, on a greedy act (nothing
    learned), is a seed: the action is drawn from the policy's distribution with a numpy generator of that seed
    instead of being its mode (a self-play opponent that the learner plays live, `shepherd.level.episodes.Trial`),
    where the distribution has logits (categorical, multi-categorical, Bernoulli: `shepherd.agents.sb3.greedy.modes`);
    a seed, not a generator, so that a learner in another process draws as one here would."""

    kind: Kind
    actor: int
    obs: Any = None
    reward: float = 0.0
    truncated: bool = False
    mode: ActMode = ActMode.GREEDY
    ticket: int = 0
    submitted: float = 0.0
    group: int = 0
    mask: Any = None
    raw_obs: Any = None
    raw_reward: float | None = None
    draw: int | None = None

    @property
    def wants_mode(self) -> bool:
        """A greedy act that takes the policy's mode (no ``draw``): what a greedy snapshot may answer instead of
        the learner (`shepherd.agents.futures`)."""
        return self.mode is ActMode.GREEDY and self.draw is None


class Outcome(enum.Enum):
    """How a request was answered."""

    ACTION = 1
    FAILED = 2  # the learner failed: ``detail`` is the reason
    CLOSED = 3  # the learner was shut down
    DROPPED = 4  # the actor ended while its request waited
    REFUSED = 5  # the learner refused the request: ``action`` is the exception to raise (an upload's)


@dataclass(frozen=True)
class Answer:
    """The answer to one ticket; plain data. ``version`` is the policy version that chose ``action``."""

    ticket: int
    outcome: Outcome
    action: Any = None
    version: int = 0
    detail: str = ""


@dataclass(eq=False)
class Upload:
    """One client-acting session's message to a learner; plain data. ``experience`` is one upload (an
    `Experience`), or None when the session opens and asks how many steps to collect; ``n_envs`` its envs.
    ``ticket`` names the `ExperienceReply` the caller waits for."""

    uploader: int
    n_envs: int
    experience: Experience | None = None
    ticket: int = 0
    submitted: float = 0.0


@dataclass(frozen=True)
class ExperienceReply:
    """What a learner answers an upload (or a session's opening): act next with ``policy_version`` and
    upload after ``steps`` steps of every env; ``accepted`` env steps of this upload were taken (T*N; 0 for
    an opening)."""

    policy_version: int
    steps: int
    accepted: int = 0


@dataclass(frozen=True)
class VersionedWeights:
    """A policy's weights at one version, as numpy arrays by SB3's ``state_dict`` names."""

    version: int
    arrays: Mapping[str, np.ndarray] = field(repr=False)


class ActionFuture(Future):
    """A future action that also tells which policy version chose it (set before its result). It may be
    awaited on an event loop, as a level's step reply is (`shepherd.level.Level`)."""

    policy_version: int = 0

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self).__await__()


class WeightSource(Protocol):
    """Versioned weights, published by a learner after its updates."""

    @property
    def version(self) -> int:
        """The version of the learner's current weights (one more after every update)."""

    def latest_weights(self) -> VersionedWeights | None:
        """The last weights published, or None before any; asking makes the learner publish from now on."""


class Learner(Protocol):
    """Episodes fed by many actors; answers handed back with the function given to `start`."""

    name: str
    failure: str | None

    @property
    def steps(self) -> int:
        """Transitions learned from so far."""

    def start(self, deliver: Deliver | None = None) -> None:
        """Start the worker; ``deliver`` runs each batch's answers on the caller's thread (None: on the
        learner's)."""

    def ask(self, request: Request) -> ActionFuture:
        """One actor's act request (BEGIN, STEP): a future of its action, whose ``policy_version`` says
        which policy chose it."""

    def tell(self, request: Request) -> None:
        """One actor's request that awaits no action (END: the episode's last reward and observation;
        DROP: the actor is gone, its partial data is closed)."""

    def end_actor(self, actor: int) -> None:
        """``tell`` a DROP of ``actor``."""

    def submit(self, requests: list[Request]) -> ActionFuture:
        """Hand over one vector step's requests (made by the caller, any kinds) as one unit, in order;
        returns one future of the actions of its act requests (BEGIN, STEP), a list in order."""

    def drain(self) -> None:
        """The server is stopping: answer every held-back request now, and never hold one back again."""

    def close(self, timeout: float = 60.0, interrupt: bool = False) -> bool:
        """Stop after everything queued so far is handled, or with ``interrupt`` at once (an update in
        progress ends at its next optimiser step); wait up to ``timeout`` seconds. Returns whether it
        stopped within that time."""


class EpisodeCalls:
    """A learner's requests of one actor's episode spelled as calls (`Learner.ask`, `Learner.tell`), for code
    that drives a learner by hand (tests, benchmarks) and the session's end (`end_actor`)."""

    def ask(self, request: Request) -> ActionFuture:
        raise NotImplementedError

    def tell(self, request: Request) -> None:
        raise NotImplementedError

    def begin_episode(self, actor: int, obs: Observation, mode: ActMode, mask: Any = None) -> ActionFuture:
        return self.ask(Request(Kind.BEGIN, actor, obs, 0.0, False, mode, mask=mask))

    def step(self, actor: int, reward: float, obs: Observation, mode: ActMode, mask: Any = None) -> ActionFuture:
        return self.ask(Request(Kind.STEP, actor, obs, reward, False, mode, mask=mask))

    def end_episode(self, actor: int, reward: float, obs: Observation, truncated: bool, mode: ActMode) -> None:
        self.tell(Request(Kind.END, actor, obs, reward, truncated, mode))

    def end_actor(self, actor: int) -> None:
        self.tell(Request(Kind.DROP, actor))


@runtime_checkable
class ExperienceLearner(Protocol):
    """A learner that client-acting sessions upload experience to (`ThreadedLearner`; the graph, the HTTP
    edge and a process boundary call these). Every call is one message to the learner's thread."""

    @property
    def policy_version(self) -> int:
        """The version of the policy the learner acts with now."""

    def behaviour(self, phase: str, agent: str, algorithm: str) -> Future:
        """The behaviour policy file of ``phase`` at the current version: a future of ``(version, bytes)``."""

    def begin_uploads(self, uploader: int, n_envs: int) -> Future:
        """A client-acting session of ``n_envs`` envs opens: a future of the `ExperienceReply` with the version
        to act with and the steps to collect first (accepted 0). Raises `NotClientActing` at once."""

    def learn_experience(self, uploader: int, experience: Experience) -> Future:
        """One upload, learned from; a future of the `ExperienceReply`, set once the learner has done what
        the upload completes (its exception: `StalePolicy`, `BadExperience`, `AgentFailed`, `AgentClosed`)."""


class Checkpointable(Protocol):
    """A learner whose state (weights, optimizer, counters) is saved to and loaded from one file."""

    def checkpoint(self, path: Path, state: dict[str, Any]) -> Future:
        """Write the learner's state with ``state`` (the schedule's) to ``path``, atomically, on the
        learner's thread; the future gives ``path`` when written."""

    def restore(self, path: Path) -> dict[str, Any]:
        """Load a checkpoint before `start`; returns the state saved with it."""


class ServedLearner(Learner, Checkpointable, ExperienceLearner, Protocol):
    """What the graph holds of an agent's learner (`ThreadedLearner` in process, `RayLearner` in a Ray actor):
    a `Learner` whose state is checkpointed, that client-acting sessions upload to, whose live parameters are
    set between updates, and whose checkpoint is checked against it before a restore."""

    #: the learner's algorithm as the graph reads it (its stats, its advice, its action space's sampler);
    #: a `RayLearner`'s is the head's status of the remote one, with the same attributes
    algorithm: Any
    #: its greedy numpy policy (None: it has none), as `HasGreedy` says
    greedy: GreedyPolicy | None
    #: its measurements (steps, updates, timings) and the writer of its training metrics (set by `metrics.attach`)
    stats: LearnerStats
    metrics: MetricsWriter | None

    @property
    def alive(self) -> bool:
        """Whether its worker is running."""

    @property
    def queue_depth(self) -> int:
        """Requests waiting for its worker."""

    @property
    def available(self) -> bool:
        """Whether its process answers (always in process; a Ray actor's not while it is created again)."""

    @property
    def sample_space(self) -> Any:
        """What an uploaded sample is checked against (`shepherd.wire.experience.sample_space`)."""

    def set_parameters(self, values: dict[str, Any]) -> Future:
        """Set live parameters between updates (`shepherd.agents.live`); the future settles once set."""

    def checkpoint_mismatch(self, path: Path) -> list[str]:
        """Why the checkpoint at ``path`` does not fit this learner (empty: it fits)."""


# -- capabilities: what some learners (or their algorithms) offer beyond the interfaces above, checked with
# isinstance by the graph and the levels instead of probing attributes

@runtime_checkable
class HasGreedy(Protocol):
    """A learner whose greedy acts a numpy copy of its policy may answer from its published weights
    (``greedy`` None: it has none, as for images, recurrent policies or networks too large)."""

    greedy: GreedyPolicy | None


@runtime_checkable
class Advised(Protocol):
    """An algorithm that takes advice from another client's policy (an advised agent's client): the graph
    sets its `Advice` (its advisor, an adoption) and reads who advises it."""

    advice: Advice


@runtime_checkable
class StartsFrom(Protocol):
    """An algorithm that can start from another learner's saved weights before it learns (a new client of an
    advised agent starts from the best client's)."""

    def start_from(self, path: Path) -> None: ...
