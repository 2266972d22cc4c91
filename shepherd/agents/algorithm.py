"""What the worker drives and what it takes besides requests: the `Algorithm` protocol, the worker's own
`Control` messages (checkpoint, live parameters, a policy file, drain, mark, stop) with the controls that
settle a future on the learner's thread, and the interrupt that ends an update at its next optimiser step
when a learner is discarded (`UpdateInterrupted`)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from torch.optim.optimizer import register_optimizer_step_pre_hook

from shepherd.agents.core import AgentClosed, AgentFailed, Answer, Outcome, Request, Upload
from shepherd.agents.timing import LearnerStats
from shepherd.storage.files import abandoned_when

logger = logging.getLogger(__name__)


class UpdateInterrupted(Exception):
    """Raised on a worker's thread at an optimiser step once its learner is stopped with ``interrupt``
    (`ThreadedLearner.close`): the update in progress ends there, and the worker stops."""


#: the stop event of the worker whose thread this is (`ThreadedLearner._run` sets it)
WORKER = threading.local()


def _interrupt_at_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    """Every optimiser step of the process (SB3's updates, advice's distillation) first checks whether the
    worker whose thread runs it is being stopped; other threads' steps pass at once."""
    event: threading.Event | None = getattr(WORKER, "interrupt", None)
    if event is not None and event.is_set():
        raise UpdateInterrupted("the learner is being stopped")


_hooked = threading.Lock()
_hook: list[Any] = []  # the handle of the hook, once installed


def install_interrupt_hook() -> None:
    """Install `_interrupt_at_step` as torch's global optimiser pre-step hook, once per process: when the first
    learner starts (`ThreadedLearner.start`), not when the module is imported."""
    with _hooked:
        if not _hook:
            _hook.append(register_optimizer_step_pre_hook(_interrupt_at_step))


class Algorithm(Protocol):
    """What the worker drives: one learning algorithm, called only on the worker's thread."""

    name: str
    draining: bool

    @property
    def steps(self) -> int: ...

    @property
    def version(self) -> int:
        """The policy version it acts with (one more after every update)."""
        ...

    def filter(self, requests: list[Request]) -> None:
        """Filter a batch's observations and rewards in place, before `process` sees any of it."""

    def process(self, requests: list[Request]) -> None:
        """Handle episode requests in arrival order; answer every act with one batched forward pass."""

    def take_answers(self) -> list[Answer]:
        """The answers given since the last call."""

    def idle(self) -> None:
        """Housekeeping, called when the queue was quiet for a while."""

    def drain(self) -> None:
        """Answer every request held back, without learning from it."""

    def stop_waiting(self, outcome: Outcome, detail: str) -> None:
        """Answer every request held back with a refusal."""

    def before_batch(self) -> None:
        """Called before each batch (publish weights that someone waits for)."""

    def client_acting_refused(self) -> str | None:
        """Why a client-acting session cannot act with this algorithm's policy (None: it can)."""

    def published_behaviour(self, phase: str, agent: str, algorithm: str) -> tuple[int, bytes] | None:
        """The behaviour policy file of ``phase`` at the current version, ``(version, bytes)``, if it is built
        already (None: a ``"behaviour"`` control builds it on the worker's thread). Called from any thread."""

    def learn_upload(self, upload: Upload) -> Callable[[], None] | None:
        """Learn from one client-acting session's upload (or open the session); answer its ticket with an
        `ExperienceReply` or a refusal. Returns work to run once the answers so far are handed over (training
        that the reply need not wait for), or None."""

    def write_checkpoint(self, path: Path, state: dict[str, Any]) -> None: ...

    def restore(self, path: Path) -> dict[str, Any]: ...


class PlainAlgorithm:
    """A base for an `Algorithm` that is not stable-baselines3 (a table, a programmed function): it answers
    each act at once into ``self._answers``, holds nothing back, filters nothing and takes no uploads. A
    subclass writes `steps`, `version`, `process`, `write_checkpoint` and `restore`, and says in
    `client_acting_refused` why a client cannot act with it."""

    name = ""
    draining = False

    def __init__(self) -> None:
        self._answers: list[Answer] = []

    def filter(self, requests: list[Request]) -> None:
        pass

    def take_answers(self) -> list[Answer]:
        answers, self._answers = self._answers, []
        return answers

    def idle(self) -> None:
        pass

    def drain(self) -> None:
        pass

    def before_batch(self) -> None:
        pass

    def stop_waiting(self, outcome: Outcome, detail: str) -> None:
        pass

    def client_acting_refused(self) -> str | None:
        return f"{type(self).__name__} has no policy file a client can act with"

    def published_behaviour(self, phase: str, agent: str, algorithm: str) -> tuple[int, bytes] | None:
        return None

    def learn_upload(self, upload: Upload) -> Callable[[], None] | None:
        raise NotImplementedError(f"{type(self).__name__} takes no uploads")


@dataclass(eq=False)
class Control:
    """A request to the worker itself, not to the algorithm."""

    what: str  # "checkpoint", "set" (live parameters), "behaviour" (a policy file), "drain", "mark" or "stop"
    future: Future | None = None
    payload: Any = None


def answer_control(future: Future | None, result: Any = None, error: BaseException | None = None) -> None:
    """Set a control's future on the worker's thread, unless its caller gave it up meanwhile (cancelled it: a
    wait's timeout that did not shield it): a caller's timeout must never fail the learner."""
    if future is None:
        return
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass


def _checkpoint(algorithm: Algorithm, message: Control, name: str, stats: LearnerStats) -> float:
    path, state = message.payload
    began = time.perf_counter()
    try:
        with abandoned_when(getattr(WORKER, "interrupt", None)):  # a discarded learner lands no checkpoint
            algorithm.write_checkpoint(path, state)
    except OSError as error:  # a full disk or a read-only folder: the caller retries; learning goes on
        logger.warning("agent %s: checkpoint not written: %s", name, error)
        answer_control(message.future, error=error)
        return 0.0
    took = time.perf_counter() - began
    stats.checkpoints.observe(took)
    answer_control(message.future, path)
    return took


def _answered_by(call: Callable[[Algorithm, Any], Any]) -> Callable[[Algorithm, Control, str, LearnerStats], float]:
    """A control whose future gets what ``call`` returns, or its exception (the caller hears it; learning
    goes on)."""
    def run(algorithm: Algorithm, message: Control, name: str, stats: LearnerStats) -> float:
        try:
            result = call(algorithm, message.payload)
        except Exception as error:  # noqa: BLE001
            answer_control(message.future, error=error)
        else:
            answer_control(message.future, result)
        return 0.0
    return run


def _none(rows: list[Any]) -> list[int]:
    return []


#: the controls that settle a future on the learner's thread, by name; each returns the seconds it wrote a file
CONTROLS: dict[str, Callable[[Algorithm, Control, str, LearnerStats], float]] = {
    "checkpoint": _checkpoint,
    "set": _answered_by(lambda algorithm, values: algorithm.set_live_parameters(values)),  # type: ignore[attr-defined]
    "behaviour": _answered_by(lambda algorithm, args: algorithm.behaviour_file(*args)),  # type: ignore[attr-defined]
    # the observations its networks cannot take (an off-policy agent's; others take any): `Learner.unbounded`
    "unbounded": _answered_by(lambda algorithm, rows: getattr(algorithm, "unbounded_observations", _none)(rows)),
}


def take_queued(queued: queue.SimpleQueue[Any]) -> list[Any]:
    """Everything left in a worker's queue, a vector step's requests one by one."""
    taken: list[Any] = []
    while True:
        try:
            item = queued.get_nowait()
        except queue.Empty:
            return taken
        taken.extend(item if isinstance(item, list) else (item,))


def refuse(batch: list[Request | Control | Upload], outcome: Outcome, reason: str) -> list[Answer]:
    """The refusals (``outcome`` FAILED or CLOSED) of a batch's requests and uploads; its controls' futures
    get the matching exception now."""
    for message in batch:
        if isinstance(message, Control) and message.future is not None and not message.future.done():
            failed = AgentFailed(reason) if outcome is Outcome.FAILED else AgentClosed(reason)
            answer_control(message.future, error=failed)
    return [Answer(m.ticket, outcome, detail=reason) for m in batch if isinstance(m, (Request, Upload)) and m.ticket]
