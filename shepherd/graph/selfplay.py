"""Self-play as ML-Agents' ghost trainer, for an environment whose roles are played by one agent (or one agent per
team): one team learns, the others play a snapshot of their agent drawn from the last ``window`` (the latest
policy with probability ``against_latest``) or a scripted opponent; the learning team changes every
``swap_every`` of its agent's steps, and a snapshot is taken every ``snapshot_every``. An opponent's steps are
not learned from: it plays the frozen snapshot (`shepherd.level.episodes.Trial`, the frozen copy that a trial of
another policy plays; the learner answers what the copy cannot, the ``latest`` of an agent without a copy
among them), drawing each action from the policy's distribution as ML-Agents' ghost does (``opponent_actions:
sample``, the learner drawing with a seed of the checkpointed generator's; a deterministic game's greedy
opponents would repeat the same lines), or its greedy action (``greedy``).

A snapshot is a frozen copy of the agent's numpy greedy policy (`GreedyPolicy.frozen`) where the agent has one
(its weights kept beside the checkpoint as a file of their own, `WeightsFile`);
an agent without one (images through a CNN, a network over the numpy copy's size) is snapshotted as its behaviour
file of that version (`FrozenFile`, built on the learner's thread between two batches, played by onnxruntime: the
``train`` file samples, the ``evaluate`` file is greedy). A policy no file can hold (a recurrent one) gets no
snapshots, and says so once."""

from __future__ import annotations

import collections
import logging
import random
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import numpy as np
from gymnasium import spaces

from shepherd.agents import algorithm_info
from shepherd.agents.core import ExperienceLearner, HasGreedy, VersionedWeights
from shepherd.agents.greedy_policy import FixedWeights, GreedyPolicy
from shepherd.environments import EnvironmentSpec
from shepherd.graph.runtime import AgentRuntime
from shepherd.graph.snapshot_files import WeightsFile, decoded, weights_of
from shepherd.hierarchy import load_function
from shepherd.level.episodes import Trial

if TYPE_CHECKING:
    from shepherd.agents.frozen_file import FrozenFile  # onnxruntime: imported when a file snapshot is made

logger = logging.getLogger(__name__)
#: a snapshot in an agent's pool: a frozen numpy greedy policy, or a frozen behaviour file
Snapshot = Union[GreedyPolicy, "FrozenFile"]


class Ghost:
    """The self-play of one environment: its snapshot pools (one per agent), which team learns, and each
    episode's opponents (`matchup`)."""

    def __init__(self, spec: EnvironmentSpec, runtimes: dict[str, AgentRuntime], seed: int) -> None:
        assert spec.self_play is not None
        self.spec = spec
        self.play = spec.self_play
        self.team = spec.team_of()
        self.teams = list(dict.fromkeys(self.team[role] for role in spec.roles))
        self.runtimes = runtimes  # by role
        self.random = random.Random(seed)
        #: each agent's snapshots, newest last: (policy version, its frozen policy)
        self.pools: dict[str, collections.deque[tuple[int, Snapshot]]] = {}
        self._taken: dict[str, int] = {}  # the agent's steps at its last snapshot
        self._building: dict[str, tuple[Future, int]] = {}  # a behaviour file asked for, and the steps then
        self._no_files: set[str] = set()  # agents whose policy no file can hold (said once)
        #: the snapshot files beside the checkpoint (written or found there), and what may still name them: each
        #: state taken for a checkpoint not yet written, by its number (`_keep_files`, `written_by`)
        self._files_lock = threading.Lock()
        self._files_on_disk: set[str] = set()
        self._files_pending: dict[int, set[str]] = {}
        self._prepared = 0  # the number of the last state taken
        #: the weights files of the numpy snapshots, by agent, version and the snapshot (``id``: an agent restarted
        #: from scratch takes versions again, and a new snapshot must never be kept with an old one's file)
        self._weight_files: dict[tuple[str, int, int], WeightsFile] = {}
        self.learning = 0  # the index of the team that learns
        self._swap_at: int | None = None
        self.scripts = {name: load_function(name) for name in self.play.opponents}

    def _steps(self, team: str) -> int:
        role = next(role for role in self.spec.roles if self.team[role] == team)
        return self.runtimes[role].tracker.steps

    def _snapshot(self, runtime: AgentRuntime) -> None:
        name = runtime.record.name
        pool = self.pools.setdefault(name, collections.deque(maxlen=self.play.window))
        self._collect(name, pool)
        steps = runtime.tracker.steps
        if self._taken.get(name, 0) > steps:  # its agent went back (restarted, or resumed from a checkpoint older
            self._taken[name] = steps  # than the one holding this self-play, another agent's): count from now
        if pool and steps - self._taken.get(name, 0) < self.play.snapshot_every or name in self._building:
            return
        greedy = runtime.learner.greedy if isinstance(runtime.learner, HasGreedy) else None
        if greedy is None:
            self._ask_file(runtime, steps)
            return
        frozen = greedy.frozen()
        if frozen is None:
            greedy.prepare()  # published by the next episode
            return
        pool.append((frozen.source.version, frozen))
        self._taken[name] = steps

    def _ask_file(self, runtime: AgentRuntime, steps: int) -> None:
        """Ask the learner for its behaviour file of now (an agent without a numpy greedy copy): the snapshot,
        once built (`_collect`). ``train`` where the self-play samples and the policy is categorical and on-policy
        (as a numpy snapshot samples), else ``evaluate`` (greedy)."""
        name, learner = runtime.record.name, runtime.learner
        if name in self._no_files or not isinstance(learner, ExperienceLearner):
            return
        samples = (self.play.opponent_actions == "sample" and algorithm_info(runtime.record.algorithm).on_policy
                   and not isinstance(runtime.action_space, spaces.Box))
        try:
            self._building[name] = (learner.behaviour("train" if samples else "evaluate", name,
                                                      runtime.record.algorithm), steps)
        except Exception as error:  # noqa: BLE001 - refused at once
            self._not_built(name, error)

    def _collect(self, name: str, pool: collections.deque[tuple[int, Snapshot]]) -> None:
        """The behaviour file asked for, into the pool once built."""
        building = self._building.get(name)
        if building is None or not building[0].done():
            return
        from shepherd.agents.frozen_file import FrozenFile

        future, steps = self._building.pop(name)
        try:
            version, data = future.result()
            frozen = FrozenFile(int(version), data, name)
        except Exception as error:  # noqa: BLE001 - its policy has no file (a recurrent one), or a passing failure
            self._not_built(name, error)
            return
        pool.append((frozen.version, frozen))
        self._taken[name] = steps

    def _not_built(self, name: str, error: BaseException) -> None:
        """A file snapshot could not be built: never again for a policy no file can hold (said once); a passing
        failure (its learner closed for a restart, say) is asked again at the next snapshot's turn."""
        from shepherd.agents.export.onnx_graph import NotExportable

        if not isinstance(error, NotExportable):
            logger.info("self-play of %s: no snapshot of agent %s now (%s); asked again later", self.spec.name,
                        name, error)
            return
        self._no_files.add(name)
        logger.warning("self-play of %s: agent %s has no numpy greedy copy and no policy file (%s); it gets no "
                       "snapshots: its opponents are its latest policy and the scripted ones", self.spec.name, name,
                       error)

    def matchup(self) -> dict[str, tuple[str, Any]]:
        """A new episode's opponents: for every role of a team that does not learn now, its label (``latest``,
        ``snapshot:V``, or the scripted ``module:function``) and what plays it (a `Trial` of a frozen policy, or
        the function). The roles of the learning team are left out."""
        for runtime in {id(r): r for r in self.runtimes.values()}.values():
            self._snapshot(runtime)
        learning = self.teams[self.learning]
        steps = self._steps(learning)
        if self._swap_at is None or steps < self._swap_at - self.play.swap_every:  # (or the team's agent went back)
            self._swap_at = steps + self.play.swap_every
        elif steps >= self._swap_at and len(self.teams) > 1:
            self.learning = (self.learning + 1) % len(self.teams)
            learning = self.teams[self.learning]
            self._swap_at = self._steps(learning) + self.play.swap_every
        chosen: dict[str, tuple[str, Any]] = {}
        for team in self.teams:
            if team == learning:
                continue
            roles = [role for role in self.spec.roles if self.team[role] == team]
            runtime = self.runtimes[roles[0]]
            pool = list(self.pools.get(runtime.record.name, ()))
            choices: list[tuple[str, Any]] = [(f"snapshot:{version}", policy) for version, policy in pool]
            choices += list(self.scripts.items())
            if not choices or self.random.random() < self.play.against_latest:  # frozen at its first act
                label, player = "latest", Trial("latest", runtime.learner, sample=self._sampler())
            else:
                label, picked = self.random.choice(choices)
                if callable(picked) and not isinstance(picked, GreedyPolicy):
                    player = picked
                else:
                    player = Trial(label, runtime.learner, sample=self._sampler())
                    player.frozen = picked
            for role in roles:
                chosen[role] = (label, player)
        return chosen

    def _sampler(self) -> np.random.Generator | None:
        """An opponent's generator for its sampled actions (None: greedy), seeded from the checkpointed `random`
        so that a resumed self-play draws as the one it resumes."""
        if self.play.opponent_actions != "sample":
            return None
        return np.random.default_rng(self.random.getrandbits(64))

    # -- the checkpoint ------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Its plain form, checkpointed with the ratings (`Ratings.keep`): the pools (each snapshot's version and the
        name of its file, written beside the checkpoint now: `_keep_files`), when each agent's last
        snapshot was taken, the learning team, the next swap, the generator."""
        kept = self._keep_files()
        return {"pools": {name: [kept[name, version, id(policy)].state() for version, policy in pool]
                          for name, pool in sorted(self.pools.items())},
                "taken": dict(sorted(self._taken.items())), "learning": self.learning, "swap_at": self._swap_at,
                "random": _plain(self.random.getstate())}

    @property
    def folder(self) -> Path:
        """Where its file snapshots are kept: beside the checkpoint of the environment's first role's agent."""
        first = self.runtimes[next(iter(self.spec.roles))]
        return first.model_path.parent / "selfplay" / self.spec.name

    def _keep_files(self) -> dict[tuple[str, int, int], Any]:
        """Write the pools' snapshot files not written yet (a behaviour file's, a numpy snapshot's weights), and
        note that the state taken now names them until its checkpoint is written or fails (`written_by`). Returns
        each snapshot's kept form by agent, version and ``id``."""
        kept: dict[tuple[str, int, int], Any] = {}
        for name, pool in self.pools.items():
            for version, policy in pool:
                if isinstance(policy, GreedyPolicy):
                    known = self._weight_files.get((name, version, id(policy)))
                    kept[name, version, id(policy)] = known or WeightsFile.of(version, weights_of(policy))
                else:
                    kept[name, version, id(policy)] = policy
        self._weight_files = {key: file for key, file in kept.items() if isinstance(file, WeightsFile)}
        held = {file.file_name: file for file in kept.values()}
        with self._files_lock:  # against a written checkpoint's removals on the learner's thread
            self._prepared += 1
            self._files_pending[self._prepared] = set(held)
            if held:
                folder = self.folder
                for file in held.values():
                    file.keep(folder)
                self._files_on_disk.update(held)
        return kept

    def written_by(self, checkpoint: Future) -> None:
        """Age the snapshot files by ``checkpoint``, the write of the state taken last: once it is written, the
        files that neither it nor a checkpoint still being written names leave the folder (a restart reads it
        from then on); a failed write removes none, so the files of the last checkpoint written stay."""
        number = self._prepared
        checkpoint.add_done_callback(
            lambda done: self._written(number, not done.cancelled() and done.exception() is None))

    def _written(self, number: int, ok: bool) -> None:
        """The checkpoint of the state numbered ``number`` was written (``ok``) or failed; on the learner's
        thread. Checkpoints are written in order: a state taken before it and still pending was never written."""
        with self._files_lock:
            named = self._files_pending.pop(number, None)
            for older in [taken for taken in self._files_pending if taken < number]:
                del self._files_pending[older]
            if named is None or not ok:
                return
            gone = self._files_on_disk - named - set().union(*self._files_pending.values())
            if not gone:
                return
            folder = self.folder
            for name in gone:
                (folder / name).unlink(missing_ok=True)
            self._files_on_disk -= gone

    def sweep(self) -> None:
        """Remove the snapshot files in its folder that the checkpoint it resumed from does not name (none: it
        resumed from none): written for a checkpoint that a crash left unwritten, or before the agent's restart."""
        folder = self.folder
        if not folder.is_dir():
            return
        with self._files_lock:
            for path in folder.iterdir():
                if path.is_file() and not path.name.startswith(".") and path.name not in self._files_on_disk:
                    path.unlink(missing_ok=True)

    def load(self, state: dict[str, Any]) -> None:
        """Resume from `state`'s: each snapshot a frozen policy of its agent's network with its weights (and the
        agent's observation statistics of now: those of the snapshot's time are not kept)."""
        runtimes = {runtime.record.name: runtime for runtime in self.runtimes.values()}
        for name, snapshots in state.get("pools", {}).items():
            runtime = runtimes.get(name)
            greedy = None if runtime is None or not isinstance(runtime.learner, HasGreedy) else runtime.learner.greedy
            pool = self.pools.setdefault(name, collections.deque(maxlen=self.play.window))
            for snapshot in snapshots:
                if "file" in snapshot:  # a behaviour file's: it holds its own statistics
                    from shepherd.agents.frozen_file import FrozenFile

                    try:
                        pool.append((int(snapshot["version"]), FrozenFile.of_state(snapshot, self.folder, name)))
                    except OSError as error:
                        logger.warning("self-play of %s: snapshot %s of %s is lost (%s)", self.spec.name,
                                       snapshot["version"], name, error)
                    self._files_on_disk.add(str(snapshot["file"]))
                    continue
                if greedy is None:
                    continue
                version, file = int(snapshot["version"]), None
                if "weights" in snapshot:  # a file beside the checkpoint (inline "arrays" before 2026-11-28)
                    self._files_on_disk.add(str(snapshot["weights"]))
                    try:
                        file = WeightsFile.read(version, self.folder / str(snapshot["weights"]))
                    except (OSError, ValueError) as error:
                        logger.warning("self-play of %s: snapshot %s of %s is lost (%s)", self.spec.name,
                                       version, name, error)
                        continue
                    arrays = file.arrays()
                else:
                    arrays = decoded(snapshot["arrays"])
                weights = VersionedWeights(version, arrays)
                policy = GreedyPolicy(greedy.network, FixedWeights(weights), greedy.actions, greedy.name,
                                      None if greedy.filtering is None else greedy.filtering.frozen())
                if file is not None:
                    self._weight_files[name, version, id(policy)] = file
                pool.append((weights.version, policy))
        self._taken = {name: int(steps) for name, steps in state.get("taken", {}).items()}
        self.learning = int(state.get("learning", 0)) % len(self.teams)
        self._swap_at = state.get("swap_at")
        if state.get("random") is not None:
            self.random.setstate(_tupled(state["random"]))


def ghost_of(spec: EnvironmentSpec, runtimes: dict[str, AgentRuntime]) -> Ghost | None:
    """The self-play of ``spec`` (None: it has none), one per environment and served agent, shared by its
    sessions: kept by its first role's runtime with its ratings (`Ratings.keep`), and resumed from its
    checkpoint (a restarted agent starts a new one from the checkpoint it resumes). A kept one plays with the
    runtimes of the session that asks: another role's agent may have been restarted since (a new runtime), and
    the old one's learner is stopped and its steps no longer move."""
    if spec.self_play is None:
        return None
    first = runtimes[next(iter(spec.roles))]
    ghost = first.ratings.kept.get(spec.name)
    if not isinstance(ghost, Ghost):
        seed = first.record.parameters.get("seed")
        ghost = Ghost(spec, runtimes, seed if isinstance(seed, int) else first.record.id)
        restored = first.ratings.keep(spec.name, ghost)
        if isinstance(restored, dict):
            ghost.load(restored)
        ghost.sweep()
    ghost.runtimes = runtimes
    return ghost


def _plain(value: Any) -> Any:
    return [_plain(item) for item in value] if isinstance(value, (tuple, list)) else value


def _tupled(value: Any) -> Any:
    return tuple(_tupled(item) for item in value) if isinstance(value, list) else value
