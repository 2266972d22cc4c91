"""One served agent: its learner, its phase tracker, its checkpoints and the records of its episodes."""

from __future__ import annotations

import asyncio

import collections
import logging
import secrets
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from shepherd.agents import ServedLearner, algorithm_info, checkpoint as checkpoint_format
from shepherd.agents import metrics as training_metrics
from shepherd.agents.export.behaviour import GREEDY_FILE
from shepherd.definition import check_client_name
from shepherd.graph.checkpoints import Checkpoints
from shepherd.graph.lessons import LessonState
from shepherd.graph.ratings import Ratings
from shepherd.graph.records import Part, Records
from shepherd.graph.schedule import EvaluationResult, PhaseTracker, Schedule
from shepherd.lessons import EpisodeConfig
from shepherd.level import Episode, Phase, Trial
from shepherd.wire.images import is_image
from shepherd.wire.spaces import parse_space
from shepherd.storage import AgentRecord, Store, StoreError
from shepherd.storage.metrics import metrics_folder

logger = logging.getLogger(__name__)



#: the folder under an agent's folder that holds an advised agent's clients, one folder per client name
CLIENTS_FOLDER = "clients"


def client_folder(agent_folder: Path, client: str) -> Path:
    """Where one client of an advised agent keeps its checkpoint."""
    return agent_folder / CLIENTS_FOLDER / client


def saved_client_names(agent_folder: Path) -> list[str]:
    """The client names with a folder of their own in an agent's folder (an advised agent's clients that
    logged in before)."""
    folder = agent_folder / CLIENTS_FOLDER
    if not folder.is_dir():
        return []
    names = []
    for entry in sorted(folder.iterdir()):
        try:
            names.append(check_client_name(entry.name))
        except ValueError:
            continue  # not a client's folder (a temporary file, say)
    return names


@dataclass(frozen=True)
class AgentStats:
    """A snapshot for progress displays and the admin API."""

    agent: str
    steps: int
    steps_per_second: float
    phase: str
    sessions: int
    episodes: int
    mean_train_return: float | None
    last_evaluation: EvaluationResult | None
    failure: str | None


class AgentRuntime:
    """Hosts one agent for its LevelManagers (the `EpisodeHost` protocol) and keeps its records.

    All methods run on the event loop (or whichever single thread drives the graph); the learner does its
    work on its own thread. Its records (`Records`) and checkpoints (`Checkpoints`) are parts of their own; the
    attributes below read and set theirs.
    """

    episodes = Part("records")
    evaluations = Part("records")
    train_returns = Part("records")
    recent_return = Part("records")
    phase_steps = Part("records")
    phase_episodes = Part("records")
    last_active = Part("checkpoints")

    def __init__(self, record: AgentRecord, learner: ServedLearner, schedule: Schedule, store: Store,
                 on_evaluation: Callable[[AgentRuntime, EvaluationResult], None] | None = None,
                 client: str | None = None,
                 on_trial: Callable[[AgentRuntime, Trial], None] | None = None) -> None:
        self.record = record
        #: the client name of an advised agent's client learner (None: the agent's one learner)
        self.client = client
        self.snapshot_token = secrets.token_hex(6)  # names its greedy snapshot (`sessions.snapshot_name`)
        self.observation_space = parse_space(record.observation_space)
        self.action_space = parse_space(record.action_space)
        self.takes_masks = algorithm_info(record.algorithm).masks  # a step may carry an action mask
        self.learner = learner
        self.schedule = schedule
        self.store = store
        self.tracker = PhaseTracker(schedule)
        seed = record.parameters.get("seed")
        #: the agent's lessons: each episode's config, and when it advances (docs/lessons.md)
        self.lessons = LessonState(record.definition.lessons, seed if isinstance(seed, int) else None, self.label)
        #: the ratings of environments with roles whose first role it plays (`shepherd.graph.ratings`), checkpointed
        self.ratings = Ratings()
        #: one behaviour file build at a time per phase, or of the greedy file (the learner keeps the files built:
        #: `ServedLearner.behaviour`)
        self._building: dict[str, asyncio.Future[tuple[int, bytes]]] = {}
        #: why the greedy file cannot be built (None: it can, as far as anyone asked)
        self.greedy_file_refused: str | None = None
        self.sessions = 0
        #: the returns of its episodes, in the store's curve and in memory for displays and advice
        self.records = Records(store, record.id, client)
        #: when its checkpoints are due, the one pending, the last good one
        self.checkpoints = Checkpoints(learner, lambda: self.model_path, schedule, self.label,
                                       lambda active: store.update_agent(record.id, last_active=active),
                                       record.last_active)
        self.act_timeouts = 0  # steps whose action did not come within the act timeout, since it started
        self._on_evaluation = on_evaluation
        #: other clients' policies to try on this client's system, in place of training episodes (advised agents)
        self.trials: collections.deque[Trial] = collections.deque()
        self._on_trial = on_trial
        self._rate: collections.deque[tuple[float, int]] = collections.deque(maxlen=20)  # (time, steps) samples for steps/s
        # SB3's logger and Shepherd's values, written by the learner into <agent folder>/metrics/ (an advised
        # agent's clients: into <agent folder>/clients/<name>/metrics/)
        folder = store.agent_folder(record.id)
        folder = folder if client is None else client_folder(folder, client)
        training_metrics.attach(learner, metrics_folder(folder)).follow(self.metric_values)

    @property
    def model_path(self) -> Path:
        folder = self.store.agent_folder(self.record.id)
        return checkpoint_format.model_path(folder if self.client is None else client_folder(folder, self.client))

    @property
    def label(self) -> str:
        """The agent's name, with the client's for a client learner (``cartpole/arm-3``), for messages."""
        return self.record.name if self.client is None else f"{self.record.name}/{self.client}"

    def resume(self) -> bool:
        """Load the last checkpoint if there is one; returns whether it did.

        Raises:
            StoreError: the checkpoint exists but cannot be loaded (damaged, or another agent's).
        """
        if not self.model_path.exists():
            return False
        try:
            state = self.learner.restore(self.model_path)
        except Exception as error:  # noqa: BLE001 - whatever is wrong with it, never start over silently
            raise StoreError(
                f"the checkpoint {self.model_path} cannot be loaded ({type(error).__name__}: {error}); restore "
                "it from a backup, or move it away to start this agent afresh") from None
        self.tracker.load(state.get("schedule", {}))
        self.lessons.load(state.get("lessons"))
        self.ratings.load(state.get("ratings"))
        recent = state.get("recent_return")
        self.recent_return = float(recent) if isinstance(recent, (int, float)) else None
        self.load_state(state)
        self.checkpoints.resumed(self.tracker.steps)
        logger.info("agent %s resumed at %d steps", self.record.name, self.tracker.steps)
        return True

    # -- EpisodeHost ---------------------------------------------------------------------------
    def begin_episode(self) -> Phase:
        return self.tracker.begin_episode()

    async def behaviour(self, phase: Phase, timeout: float) -> tuple[int, bytes]:
        """The behaviour policy file of ``phase`` at the learner's current version, and that version: built on
        the learner's thread once per version and phase and kept there (`ServedLearner.behaviour`: at once when
        built); one build at a time is asked for here.

        Raises:
            NotActableAtClient: the policy cannot act at the client; TimeoutError after ``timeout`` seconds.
        """
        return await self._file(phase.value, timeout)

    @property
    def greedy_file_snapshots(self) -> bool:
        """Whether front ends answer its greedy steps from its greedy ONNX file (`greedy_file`): an image agent
        without a numpy snapshot (convolutions), whose file could be built so far."""
        return self.learner.greedy is None and is_image(self.observation_space) and self.greedy_file_refused is None

    async def greedy_file(self, timeout: float) -> tuple[int, bytes]:
        """The greedy ONNX file (`export_onnx`'s) at the learner's current version, and that version, built as
        behaviour files are (`GREEDY_FILE`): what a front end answers an image agent's greedy steps with.

        Raises:
            ValueError: the policy has no exact ONNX form (`NotExportable` in process, a ValueError with its text
                from a Ray actor; then `greedy_file_snapshots` is False from now on); TimeoutError after
                ``timeout`` seconds.
        """
        try:
            return await self._file(GREEDY_FILE, timeout)
        except ValueError as error:  # NotExportable, or its text relayed by a Ray actor (agents/ray/learner.py)
            self.greedy_file_refused = str(error)
            raise

    async def _file(self, kind: str, timeout: float) -> tuple[int, bytes]:
        building = self._building.get(kind)
        if building is None:  # one build at a time per kind; a request that timed out leaves it running
            asked = self.learner.behaviour(kind, self.record.name, self.record.algorithm)
            if asked.done() and not asked.cancelled() and asked.exception() is None:
                # built at this version already (every upload's reply after the first of a version): no task,
                # no timer and no wake-up of the loop from another thread for a file that is here
                built: tuple[int, bytes] = asked.result()
                return built
            building = self._building[kind] = asyncio.ensure_future(self._build(kind, asked))
            building.add_done_callback(lambda done: done.cancelled() or done.exception())  # heard by waiters
        return await asyncio.wait_for(asyncio.shield(building), timeout)  # a timeout never cancels the build

    async def _build(self, kind: str, asked: Future) -> tuple[int, bytes]:
        try:
            built: tuple[int, bytes] = await asyncio.wrap_future(asked)
        finally:
            del self._building[kind]
        return built

    def next_config(self) -> EpisodeConfig | None:
        """The config of an episode still to start, drawn from the current lesson (None without lessons)."""
        return self.lessons.draw()

    def move_lesson(self, name: str) -> None:
        """Move to a lesson by hand, and checkpoint so that a restart keeps it.

        Raises:
            UnknownLesson: no such lesson.
        """
        self.lessons.move(name)
        if self.learner.failure is None:
            self.checkpoint()

    def current_phase(self) -> Phase:
        """The phase an episode would start in now (a client-acting session's next block acts in it): an
        evaluation period whose episodes have all started, held by other sessions, no longer holds anyone else's
        training (issue 48, M3)."""
        return self.tracker.next_phase

    def begin_trial(self) -> Trial | None:
        """The next queued trial, taken in place of a training episode (never in heatup, an evaluation
        period or past the budget; a trial whose learner failed is dropped)."""
        while self.trials and self.tracker.phase is Phase.TRAIN:
            trial = self.trials.popleft()
            if trial.learner.failure is None:
                return trial
        return None

    def count_step(self, phase: Phase, steps: int = 1) -> None:
        self.last_active = time.time()
        self.phase_steps[phase] += steps
        self.tracker.count_step(phase, steps)
        if self.checkpoints.due(self.tracker.steps):
            self.checkpoint()

    def changed(self) -> None:
        """State its checkpoint keeps changed without a step of its own (an environment's ratings it holds, rated
        while another team's agent learns): checkpointed when one is due by time, as steps are."""
        self.checkpoints.changed = True
        if self.checkpoints.due(self.tracker.steps) and self.learner.failure is None:
            self.checkpoint()

    def end_episode(self, episode: Episode, completed: bool) -> None:
        if completed:
            self.records.episode(episode)
            if episode.trial is not None:
                trial = episode.trial
                trial.returns.append(float(episode.total))
                if not trial.done:
                    self.trials.appendleft(trial)  # its next episode is this client's next one
                elif self._on_trial is not None:
                    self._on_trial(self, trial)
        elif episode.trial is not None:
            self.trials.appendleft(episode.trial)  # abandoned: the next episode tries it
        result = self.tracker.end_episode(episode, completed)
        if result is not None:
            lessons = self.lessons
            ran = {lesson for lesson in result.episode_lessons if lesson is not None}
            if lessons.active and ran <= {lessons.name}:  # judged in the lesson: it counts toward its until
                result = replace(result, lesson=lessons.name, final_lesson=lessons.at_last)
                if lessons.observe(result.mean_return) is not None and self.learner.failure is None:
                    self.checkpoint()  # a restart resumes in the new lesson
            elif lessons.active:  # episodes of another lesson (configs drawn before an advance or a move): none's
                result = replace(result, lesson=next(iter(ran)) if len(ran) == 1 else None, final_lesson=False)
                logger.info("agent %s: evaluation %d ran in lesson(s) %s, not in lesson %r: it does not count toward "
                            "that lesson's until", self.record.name, result.period, ", ".join(sorted(ran)),
                            lessons.name)
            self.records.evaluation(result)
            logger.info("agent %s evaluation %d at %d steps: mean return %.1f", self.record.name,
                        result.period, result.steps, result.mean_return)
            if self._on_evaluation is not None:
                self._on_evaluation(self, result)

    # -- checkpoints ---------------------------------------------------------------------------
    def checkpoint(self) -> Future:
        """Queue a checkpoint on the learner's thread; it sees every step handed over before it."""
        try:
            state = self.checkpoint_state()
        except OSError as error:  # a self-play snapshot's file not written (a full disk): a failed checkpoint,
            future = self.checkpoints.failed(self.tracker.steps, error)  # retried as one; the step goes on
        else:
            future = self.checkpoints.write(self.tracker.steps, state)
        self.ratings.written_by(future)  # the self-play's files beside it age by the checkpoints written
        return future

    def checkpoint_state(self) -> dict[str, Any]:
        """What its checkpoint holds besides the learner's own (`resume` reads it back: `load_state`)."""
        ratings = self.ratings.state()  # only an agent that plays environments' first roles has any
        return {"schedule": self.tracker.state(), "recent_return": self.recent_return, "lessons": self.lessons.state(),
                **({"ratings": ratings} if ratings else {})}

    def load_state(self, state: dict[str, Any]) -> None:
        """Read back what a subclass added to `checkpoint_state` (nothing here)."""

    def clear_curve_memory(self) -> None:
        """Forget the returns kept in memory for displays (the curve on disk is the store's)."""
        self.records.forget()

    def discard(self, timeout: float = 60.0) -> bool:
        """Stop the learner at once without checkpointing: an update in progress ends at its next optimiser
        step, and what it learned since the last checkpoint is dropped. Waits up to ``timeout`` seconds;
        returns whether the learner stopped within them. Blocks: run it off the event loop."""
        return self.learner.close(timeout, interrupt=True)

    def close(self, timeout: float = 60.0) -> bool:
        """Checkpoint (unless the learner failed), then stop the learner; one whose final checkpoint is
        not written within ``timeout`` (an update far longer than that) is stopped at once, as `discard`
        does. Returns whether the learner stopped."""
        interrupt = False
        if self.learner.failure is None:
            try:
                self.checkpoint().result(timeout)
            except Exception as error:  # noqa: BLE001 - reported, and shutdown goes on
                logger.error("agent %s: final checkpoint failed: %s", self.record.name, str(error) or type(error).__name__)
                interrupt = isinstance(error, TimeoutError)
        self.checkpoints.store_last_active()
        return self.learner.close(timeout, interrupt=interrupt)

    # -- display -------------------------------------------------------------------------------
    def stats(self) -> AgentStats:
        now = time.monotonic()
        self._rate.append((now, self.tracker.steps))
        first_time, first_steps = self._rate[0]
        rate = (self.tracker.steps - first_steps) / (now - first_time) if now > first_time else 0.0
        train = list(self.train_returns)[-20:]
        return AgentStats(
            agent=self.record.name, steps=self.tracker.steps, steps_per_second=rate,
            phase=self.tracker.phase.value if self.learner.failure is None else "failed",
            sessions=self.sessions, episodes=self.episodes,
            mean_train_return=sum(train) / len(train) if train else None,
            last_evaluation=self.evaluations[-1] if self.evaluations else None,
            failure=self.learner.failure,
        )

    def metric_values(self) -> dict[str, Any]:
        """The graph's part of a training metrics row; called on the learner's thread, so it only reads."""
        train = list(self.train_returns)  # one C-level copy: the event loop may append meanwhile
        served = sum(list(self.phase_steps.values()))
        return {"shepherd/steps": self.tracker.steps, "shepherd/served_steps": served, "shepherd/sessions": self.sessions,
                "shepherd/episodes": self.episodes, "shepherd/phase": self.tracker.phase.value,
                **({"shepherd/lesson": self.lessons.index} if self.lessons.active else {}),
                "rollout/ep_rew_mean": sum(train) / len(train) if train else None}

    def options_used(self) -> dict[str, Any]:
        """A selector's options' use by skill (``{"chosen", "steps", "reward", "mean_steps"}``); {} for a flat agent."""
        return {}

    def describe(self) -> dict[str, Any]:
        return {"id": self.record.id, "name": self.record.name, "algorithm": self.record.algorithm}
