"""What every stable-baselines3 family adapter shares: the model, answers, versioned weights, checkpoints.

An adapter is the `Algorithm` a `ThreadedLearner` drives: it keeps SB3's policy, buffers, ``train()`` and
save format, and replaces only SB3's collection loop, because here the clients, not the learner, drive
time. The on-policy and off-policy families subclass `SB3Algorithm` (``on_policy.py``, ``off_policy.py``).
"""

from __future__ import annotations

import io
import logging
import pickle
import time
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.save_util import load_from_zip_file, recursive_getattr, recursive_setattr

from shepherd.agents import checkpoint
from shepherd.agents.core import Answer, ExperienceReply, NotClientActing, Outcome, Request, Upload, VersionedWeights
from shepherd.agents.greedy_policy import weights_of
from shepherd.agents.timing import WORK_BUCKETS, Histogram
from shepherd.agents.filters import Filtering, ImageLayout
from shepherd.agents.sb3 import resume
from shepherd.policies.transforms import ActionTransform
from shepherd.wire.experience import sample_space

logger = logging.getLogger(__name__)


class SpacesEnv(gym.Env):
    """An environment that only carries spaces: the remote client, not SB3, drives time."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space = observation_space
        self.action_space = action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        raise RuntimeError("a Shepherd agent's environment is driven by its remote clients")

    def step(self, action: Any) -> Any:
        raise RuntimeError("a Shepherd agent's environment is driven by its remote clients")


def _clone(state: Any) -> Any:
    """A copy of a state dict (a module's or an optimizer's): its tensors cloned, its containers copied; 5 to 10
    times faster than ``copy.deepcopy``, which goes through each tensor's Python pickling hooks."""
    if isinstance(state, th.Tensor):
        return state.detach().clone()
    if isinstance(state, dict):
        return type(state)((key, _clone(value)) for key, value in state.items())
    if isinstance(state, (list, tuple)):
        return type(state)(_clone(value) for value in state)
    return state


def stack_observations(observations: list[Any]) -> Any:
    """Stack single observations (arrays, or dicts of arrays) into one batch."""
    first = observations[0]
    if isinstance(first, dict):
        return {key: np.stack([obs[key] for obs in observations]) for key in first}
    return np.stack([np.asarray(obs) for obs in observations])


class SB3Algorithm:
    """An SB3 model as a worker's `Algorithm`, and the `WeightSource` of its policy.

    Subclasses implement `process` (and, if they hold requests back, `drain` and `stop_waiting`).
    """

    def __init__(self, model: BaseAlgorithm, name: str, total_steps: int | None, scaled_actions: bool) -> None:
        self.model = model
        self.name = name
        self.total_steps = total_steps
        self.observation_space = model.observation_space
        self.action_space = model.action_space
        self.draining = False
        self.filtering: Filtering | None = None  # the agent's filters, if any (`use_filters`)
        #: the clients' images turned channels first after the filters (`use_layout`; SB3's VecTransposeImage)
        self.layout: ImageLayout | None = None
        #: the observation space the clients send (an image in its declared layout): an exported file's input
        self.client_space: gym.Space = model.observation_space
        self.actions = ActionTransform(model.action_space, scaled_actions)
        #: the support of what the policy draws, as the buffers store it (an upload's ``sample``)
        self.sample_space = sample_space(model.action_space, bounded=scaled_actions)
        #: the observation filters with the statistics of the current version, as a client-acting session's
        #: policy applies them (None: no filters); replaced at every new version
        self.version_filtering: Filtering | None = None
        self._answers: list[Answer] = []
        self._version = 0
        self._published: VersionedWeights | None = None
        self._wanted = False  # someone asked for weights: publish them after updates
        #: behaviour files by phase, (version, bytes): rebuilt at every new version for the phases asked since
        #: the last one, so a client-acting session's fetch never waits behind an update (`published_behaviour`)
        self._behaviours: dict[str, tuple[int, bytes]] = {}
        self._behaviours_asked: dict[str, tuple[str, str]] = {}  # phase -> (agent, algorithm) to build them
        self.updates = Histogram(WORK_BUCKETS)  # each training update's duration (seconds)
        #: when the update under way started (``time.monotonic()``; None: none is), read by other threads (health)
        self.updating_since: float | None = None
        #: updates that made a weight NaN or infinite, undone (`guarded_update`)
        self.refused_updates = 0

    @property
    def steps(self) -> int:
        """Transitions learned from so far (SB3's ``num_timesteps``)."""
        return int(self.model.num_timesteps)

    # -- answers ---------------------------------------------------------------------------------
    def answer(self, request: Request, policy_action: Any) -> None:
        """Answer an act request with a policy output, through the action transform."""
        self.answer_env(request, self.actions.to_env(policy_action))

    def answer_env(self, request: Request, action: Any) -> None:
        """Answer an act request with an action already in the client's space."""
        if request.ticket:
            self._answers.append(Answer(request.ticket, Outcome.ACTION, action, self._version))

    def refuse(self, request: Request | Upload, outcome: Outcome, detail: str = "") -> None:
        if request.ticket:
            self._answers.append(Answer(request.ticket, outcome, detail=detail))

    def answer_upload(self, upload: Upload, steps: int, accepted: int) -> None:
        """Answer an upload (or a session's opening) with the current version and the steps to collect next."""
        if upload.ticket:
            reply = ExperienceReply(self._version, steps, accepted)
            self._answers.append(Answer(upload.ticket, Outcome.ACTION, reply, self._version))

    def refuse_with(self, message: Request | Upload, error: Exception) -> None:
        """Refuse an upload or a step: its future raises ``error`` (nothing of it was recorded or acted on)."""
        if message.ticket:
            self._answers.append(Answer(message.ticket, Outcome.REFUSED, error, self._version, str(error)))

    def take_answers(self) -> list[Answer]:
        answers, self._answers = self._answers, []
        return answers

    # -- the WeightSource ------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._version

    def number_versions_after(self, version: int) -> None:
        """Number the weights it acts with now, and its later ones, past ``version`` (a Ray actor replacing a
        lost one restores an older checkpoint: the lost actor's later versions named weights now gone)."""
        self._version = max(self._version, version + 1)

    def latest_weights(self) -> VersionedWeights | None:
        self._wanted = True
        return self._published

    def before_batch(self) -> None:
        published = self._published
        if self._wanted and (published is None or published.version != self._version):
            self._publish()

    def _publish(self) -> None:
        self._published = VersionedWeights(self._version, weights_of(self.model.policy))

    # -- hooks -----------------------------------------------------------------------------------
    def use_filters(self, filtering: Filtering) -> None:
        """Filter every batch from now on (before `start`); an off-policy subclass also hands them to
        SB3's replay buffer."""
        self.filtering = filtering
        self.version_filtering = filtering.frozen()

    def use_layout(self, layout: ImageLayout) -> None:
        """Turn the clients' channels-last images channels first after the filters, from now on (before
        `start`), as the policy takes them."""
        self.layout = layout if layout.transposes else None
        self.client_space = layout.client

    def to_policy(self, obs: Any) -> Any:
        """Filtered observations (one, or a batch with any leading dimensions) in the policy's layout."""
        return obs if self.layout is None else self.layout(obs)

    def as_trained(self, obs: Any) -> Any:
        """Observations as the client sent them (one, or a batch), as a training batch sees them: normalised by
        the filters, then in the policy's layout."""
        return self.to_policy(obs if self.filtering is None else self.filtering.normalize_obs(obs))

    def behaviour_file(self, phase: str, agent: str, algorithm: str) -> tuple[int, bytes]:
        """The current policy version and its behaviour policy file of ``phase``, on the learner's thread
        (`shepherd.agents.export.behaviour.behaviour_of_version`); built again at every new version from now
        on while clients keep asking (`published_behaviour`)."""
        self._behaviours_asked[phase] = (agent, algorithm)
        return self._build_behaviour(phase, agent, algorithm)

    def _build_behaviour(self, phase: str, agent: str, algorithm: str) -> tuple[int, bytes]:
        from shepherd.agents.export.behaviour import behaviour_of_version  # onnx, only for client-acting sessions

        built = self._behaviours[phase] = behaviour_of_version(self, agent, algorithm, phase)
        return built

    def published_behaviour(self, phase: str, agent: str, algorithm: str) -> tuple[int, bytes] | None:
        """The behaviour file of ``phase`` at the current version if it is built (None: build it on the
        learner's thread with `behaviour_file`). Any thread: an update in progress never delays it. Asking
        keeps the phase's file built at the next version too."""
        built = self._behaviours.get(phase)
        if built is None or built[0] != self._version:
            return None
        self._behaviours_asked[phase] = (agent, algorithm)
        return built

    def _rebuild_behaviours(self) -> None:
        """At a new version, on the learner's thread: the files of the phases asked for since the last one (a
        phase nobody fetches any more is not built again)."""
        asked, self._behaviours_asked = self._behaviours_asked, {}
        for phase, (agent, algorithm) in asked.items():
            try:
                self._build_behaviour(phase, agent, algorithm)
            except Exception:  # noqa: BLE001 - the fetch builds it again and says why
                self._behaviours.pop(phase, None)

    def client_acting_refused(self) -> str | None:
        """Why this agent's policy cannot act at the client (None: it can); a subclass adds its reasons."""
        if self.filtering is not None and self.filtering.filters.frame_stack > 1:
            return ("this agent stacks frames (frame_stack), which the server keeps per session; log in with "
                    "\"acting\": \"server\"")
        return None

    def learn_upload(self, upload: Upload) -> Callable[[], None] | None:
        """Learn from a client-acting session's upload (the families implement it: ``uploads.py``)."""
        self.refuse_with(upload, NotClientActing(f"{type(self.model).__name__} agents cannot take uploads"))
        return None

    def filter(self, requests: list[Request]) -> None:
        """Apply the agent's filters to a batch before `process` (in place)."""
        if self.filtering is not None:
            self.filtering.apply(requests)
        if self.layout is not None:
            for request in requests:
                request.obs, request.raw_obs = self.layout(request.obs), self.layout(request.raw_obs)

    def process(self, requests: list[Request]) -> None:
        raise NotImplementedError

    def idle(self) -> None:
        pass

    def drain(self) -> None:
        pass

    def stop_waiting(self, outcome: Outcome, detail: str) -> None:
        pass

    def set_live_parameters(self, values: dict[str, Any]) -> None:
        """Set parameters checked by `shepherd.agents.live.check_live` on the model (the learner's thread)."""
        from shepherd.agents import live

        live.apply(self.model, values)

    # -- checkpoints -----------------------------------------------------------------------------
    def write_checkpoint(self, path: Path, state: dict[str, Any]) -> None:
        """SB3's zip with the counters and what the learner needs to go on exactly (`shepherd.agents.sb3.resume`),
        the files beside it (a replay buffer) written first: the zip names them."""
        beside = self._write_beside(path)
        buffer = io.BytesIO()
        self.model.save(buffer)
        counters = {**self._counters(), "version": self._version, **beside}
        if self.filtering is not None:
            counters["filters"] = self.filtering.state()
        if self.version_filtering is not None:  # what the current version's files normalise with
            counters["version_filters"] = self.version_filtering.state()
        extra = pickle.dumps(self._resume_state(), protocol=pickle.HIGHEST_PROTOCOL)
        checkpoint.write(path, buffer.getvalue(), counters, state, {checkpoint.RESUME_MEMBER: extra})
        logger.info("agent %s checkpointed at %d steps", self.name, self.steps)

    def restore(self, path: Path) -> dict[str, Any]:
        state = checkpoint.read_state(path)
        _, params, variables = load_from_zip_file(path, device="cpu")
        self.model.set_parameters(params, exact_match=True, device="cpu")
        for name, tensor in (variables or {}).items():  # e.g. SAC's entropy coefficient, not in set_parameters
            recursive_setattr(self.model, f"{name}.data", tensor.data)
        counters = state.get("learner", {})
        self._restore_counters(counters)
        self._version = int(counters.get("version", self.model._n_updates))
        if self.filtering is not None:
            self.filtering.load(counters.get("filters", {}))
            # the version's own statistics, as its files (fetched before the restart, uploaded from after it)
            # normalised: the running ones moved since (a checkpoint of before 2026-11-29 has only those)
            self.version_filtering = self.filtering.frozen()
            self.version_filtering.load(counters.get("version_filters") or counters.get("filters", {}))
        self._published = None
        extra = checkpoint.read_member(path, checkpoint.RESUME_MEMBER)  # None: a checkpoint written before it
        self._load_resume_state(path, counters, {} if extra is None else pickle.loads(extra))
        return state

    def _write_beside(self, path: Path) -> dict[str, Any]:
        """Write the files that go beside the checkpoint ``path``; what its counters say of them."""
        return {}

    def _resume_state(self) -> dict[str, Any]:
        """What the learner needs besides SB3's zip and its counters to go on exactly (pickled into the zip)."""
        return {"generators": resume.generators(self.model)}

    def _load_resume_state(self, path: Path, counters: dict[str, Any], extra: dict[str, Any]) -> None:
        """Take back what `_resume_state` gave (empty: the checkpoint has none) and the files beside ``path``."""
        if "generators" in extra:
            resume.set_generators(self.model, extra["generators"])

    def checkpoint_mismatch(self, path: Path) -> list[str]:
        """How the spaces and policy weights saved at ``path`` differ from this model's, the weights by name and
        shape (empty: they fit, and `restore` can load them); read without loading the weights."""
        loaded, params, _ = load_from_zip_file(path, device="cpu", load_data=True)
        data = loaded or {}
        found = [f"{space}: saved {data[space]}, now {getattr(self.model, space)}"
                 for space in ("observation_space", "action_space")
                 if data.get(space) is not None and data[space] != getattr(self.model, space)]
        policy: Any = (params or {}).get("policy", {})  # the policy's state dict, as SB3 saved it
        saved = {name: tuple(tensor.shape) for name, tensor in policy.items()}
        now = {name: tuple(tensor.shape) for name, tensor in self.model.policy.state_dict().items()}
        found += [f"{name}: saved {list(saved[name])}, now {list(now[name])}"
                  for name in now if name in saved and saved[name] != now[name]]
        found += [f"{name}: not in the saved model" for name in now if name not in saved]
        found += [f"{name}: saved, not in the model now" for name in saved if name not in now]
        return found

    def _counters(self) -> dict[str, Any]:
        return {"num_timesteps": int(self.model.num_timesteps), "n_updates": int(self.model._n_updates)}

    def _restore_counters(self, counters: dict[str, Any]) -> None:
        self.model.num_timesteps = int(counters.get("num_timesteps", 0))
        self.model._n_updates = int(counters.get("n_updates", 0))

    # -- helpers for subclasses ------------------------------------------------------------------
    def begin_update(self) -> float:
        """Before an update of the weights: say that one is under way (`updating_since`); returns its start as
        ``time.perf_counter()``, for `after_update`."""
        self.updating_since = time.monotonic()
        return time.perf_counter()

    def after_update(self, started: float | None = None) -> None:
        """After every update of the weights: note its duration (since ``started``, a
        ``time.perf_counter()``), check them, count a new version, and publish it if wanted."""
        self.updating_since = None
        if started is not None:
            self.updates.observe(time.perf_counter() - started)
        self._check_finite()
        self.new_version()

    def new_version(self) -> None:
        """Count a new policy version (the weights changed: an update, or an adopted policy) and publish it
        if wanted."""
        self._version += 1
        if self.filtering is not None:
            self.version_filtering = self.filtering.frozen()
        if self._wanted:
            self._wanted = False  # published once more; a reader asking again keeps it coming
            self._publish()
        if self._behaviours_asked:
            self._rebuild_behaviours()

    def guarded_update(self, train: Callable[[], None], started: float) -> str | None:
        """``train()``, an update fed by clients (every on-policy one, an off-policy one once uploads fed its
        buffer): one that makes a weight NaN or infinite is undone (every
        tensor SB3 saves: the policy, its optimizers, SAC's entropy coefficient; and the update count), so that
        no upload fails the agent for its other clients (issue 48, H1). None when the update was kept (a new
        version, as `after_update`), else why it was refused (the caller refuses the upload with it)."""
        saved = self._learning_state()
        try:
            train()
            bad = self._nonfinite()
            what = None if bad is None else f"the policy's {bad} NaN or infinite"
        except (FloatingPointError, RuntimeWarning) as error:  # numpy's overflow where warnings are errors
            what = f"an overflow ({error})"
        if what is None:
            self.after_update(started)
            return None
        self._load_learning_state(saved)
        self.updating_since = None
        self.refused_updates += 1
        logger.warning("agent %s: an update made %s; undone (%d so far)", self.name, what, self.refused_updates)
        return (f"the update this upload completed made {what}: it was undone, and the agent's parameters are "
                f"those of version {self._version}")

    def _learning_state(self) -> dict[str, Any]:
        """A copy of what an update changes: the state dicts and tensors SB3 saves, and the update count."""
        dicts, tensors = self.model._get_torch_save_params()
        return {"dicts": {name: _clone(recursive_getattr(self.model, name).state_dict()) for name in dicts},
                "tensors": {name: recursive_getattr(self.model, name).detach().clone() for name in tensors},
                "n_updates": self.model._n_updates}

    def _load_learning_state(self, saved: dict[str, Any]) -> None:
        for name, state in saved["dicts"].items():
            recursive_getattr(self.model, name).load_state_dict(state)
        for name, tensor in saved["tensors"].items():
            recursive_getattr(self.model, name).data.copy_(tensor)
        self.model._n_updates = saved["n_updates"]

    def _nonfinite(self) -> str | None:
        """The name of the policy's first parameter that holds a NaN or an infinity (None: all finite)."""
        with th.no_grad():  # one reduction per tensor, one check: a NaN or an infinity makes its sum non-finite
            sums = [parameter.sum() for parameter in self.model.policy.parameters()]
            sums += [recursive_getattr(self.model, name).sum() for name in self.model._get_torch_save_params()[1]]
            if bool(th.isfinite(th.stack(sums)).all()):
                return None
        for name, parameter in self.model.policy.named_parameters():
            if not bool(th.isfinite(parameter).all()):
                return name
        for name in self.model._get_torch_save_params()[1]:  # e.g. SAC's entropy coefficient
            if not bool(th.isfinite(recursive_getattr(self.model, name)).all()):
                return name
        return None

    def _check_finite(self) -> None:
        """After an update: a NaN or infinite weight fails the agent (SB3 would go on training silently).

        Raises:
            FloatingPointError: naming the update; the worker marks the agent failed with it.
        """
        bad = self._nonfinite()
        if bad is not None:
            raise FloatingPointError(
                f"update {self.model._n_updates} made the policy's {bad} NaN or infinite (a learning rate "
                "too high, or rewards too large?); restart the agent with other parameters")

    def _progress_remaining(self) -> None:
        """Set SB3's progress (1 -> 0 over the training budget) that drives its schedules."""
        if self.total_steps:
            self.model._update_current_progress_remaining(self.model.num_timesteps, self.total_steps)
        else:
            self.model._current_progress_remaining = 1.0

    def _random_action(self) -> Any:
        return self.action_space.sample()
