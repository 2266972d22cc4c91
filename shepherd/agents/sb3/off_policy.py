"""Pooled off-policy learning (DQN, SAC, TD3, DDPG; sb3-contrib's QR-DQN, TQC, CrossQ): every session's
transitions go into one replay buffer.

The learner mirrors SB3's ``collect_rollouts`` and ``_sample_action`` for one environment, counted in
transitions over all sessions:

- random actions until ``learning_starts`` (Shepherd's heatup); then the learner's exploration policy:
  epsilon-greedy for DQN, a sample of SAC's squashed Gaussian, TD3's and DDPG's deterministic actor;
- for ``Box`` actions the replay buffer stores the action scaled into [-1, 1] (plus action noise, clipped
  to [-1, 1]) and the client gets it unscaled into ``[low, high]``, exactly as SB3 does;
- action noise (``NormalActionNoise``, ``OrnsteinUhlenbeckActionNoise``) is kept per session and reset when
  its episode starts, as SB3's ``VectorizedActionNoise`` keeps one per environment: an Ornstein-Uhlenbeck
  process never mixes two clients' noise;
- ``_on_step`` after each transition (DQN's target network and exploration rate), and
  ``train(gradient_steps)`` after every ``train_freq`` transitions once past ``learning_starts``;
- time limits are stored as SB3 stores them (``TimeLimit.truncated`` in ``infos``), so they are bootstrapped.

With ``n_envs`` above 1 the replay buffer has that many columns, as SB3's has for a ``VecEnv``: transitions
are stored in rows of ``n_envs`` (whichever sessions they come from), and a row is what SB3 counts as one
step of its vector env (``_on_step``, ``train_freq``, ``gradient_steps=-1``). The acts of one vector step
(a ``Request.group``) share one epsilon draw, as SB3's ``predict`` draws once for a batch. One vector client
with ``n_envs`` envs therefore learns exactly as SB3's ``learn()`` with ``n_envs`` envs does.

Within one worker iteration the transitions that arrived are stored first (and trained on, when due), then
every pending act request is answered by one batched forward pass: an action is chosen with the weights
and the step count SB3 would have at that point.

A checkpoint holds the replay buffer (a file beside the zip, unless ``checkpoint_replay_buffer`` is false) and
the transitions waiting for a row, so a restart goes on as if there had been none (``resume.py``).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, cast

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit

from shepherd.agents import checkpoint
from shepherd.agents.core import ActMode, Kind, Request, Upload
from shepherd.agents.filters import Filtering
from shepherd.agents.sb3 import replay_uploads, resume
from shepherd.agents.sb3.base import SB3Algorithm, stack_observations
from shepherd.agents.sb3.outputs import unbounded_rows
from shepherd.wire import BadRequest
from shepherd.wire.observations import suspect

logger = logging.getLogger(__name__)


@dataclass
class _Actor:
    """A session's last observation and action, waiting for their outcome, and its own action noise."""

    obs: Any = None
    action: Any = None  # as the replay buffer stores it: scaled into [-1, 1] for boxes
    noise: ActionNoise | None = None


class OffPolicyAdapter(SB3Algorithm):
    """An SB3 off-policy algorithm (DQN, SAC, TD3, DDPG, QRDQN, TQC, CrossQ) fed by many sessions through one
    replay buffer."""

    model: OffPolicyAlgorithm

    def __init__(self, model: OffPolicyAlgorithm, name: str, total_steps: int | None) -> None:
        super().__init__(model, name, total_steps, scaled_actions=True)  # SB3's off-policy actors act in [-1, 1]
        # SB3's set-up made these a TrainFreq and a buffer; their declared types also allow what it was given
        self._train_freq = cast(TrainFreq, model.train_freq)
        self._replay = cast(ReplayBuffer, model.replay_buffer)
        if self._train_freq.unit is not TrainFrequencyUnit.STEP:
            raise ValueError("train_freq must be counted in steps for a pooled learner, not episodes")
        self._actors: dict[int, _Actor] = {}
        self._n_envs = int(model.n_envs)  # replay buffer columns: transitions are stored a row at a time
        self._row: list[tuple[Any, ...]] = []  # (obs, next_obs, action, reward, done, truncated, next_mask)
        self._since_train = 0  # rows stored since the last training
        self._box = isinstance(self.action_space, spaces.Box)
        actor = getattr(model.policy, "actor", None)
        self._stochastic = hasattr(actor, "get_action_dist_params")  # SAC's policy samples; TD3's does not
        self._min_buffer = 1  # transitions needed before training; more after a restore (empty buffer)
        #: how many versions behind a client-acting session's samples may be (0: only the current one)
        self.max_policy_lag = 0
        #: whether checkpoints hold the replay buffer (a file beside the zip): without it a restart refills it
        self.checkpoint_replay_buffer = True
        self.uploaded = False  # whether the replay buffer ever took an upload's transitions (`_train_if_due`)
        model.policy.set_training_mode(False)

    # -- the worker's work -------------------------------------------------------------------------
    def process(self, messages: list[Request]) -> None:
        acting = []
        if any(m.mode.learns and m.kind is not Kind.DROP and suspect(_sent(m.obs, m.raw_obs)) for m in messages):
            messages = self._refuse_unbounded(messages)
        for message in messages:
            if message.kind is Kind.DROP:
                self._actors.pop(message.actor, None)
                continue
            actor = self._actors.get(message.actor)
            if actor is None:
                actor = self._actors[message.actor] = _Actor(noise=copy.deepcopy(self.model.action_noise))
            if message.kind is Kind.BEGIN:
                actor.obs = None
                if actor.noise is not None:
                    actor.noise.reset()
            elif message.mode.learns and actor.obs is not None:
                self._store(actor, message)
            if message.kind is Kind.END:
                actor.obs = None
            else:
                acting.append(message)
        self._train_if_due()
        if acting:
            self._act(acting)

    def unbounded_observations(self, observations: list[Any]) -> list[int]:
        """The indexes of ``observations`` (as clients send them) its networks cannot take (`_refuse_unbounded`'s
        rule), on the learner's thread: a session asks before its step changes anything (`Level.observed_by`)."""
        suspects = [index for index, obs in enumerate(observations) if suspect(obs)]
        if not suspects:
            return []
        batch = stack_observations([self.as_trained(observations[index]) for index in suspects])
        return [suspects[row] for row in unbounded_rows(self, batch).tolist()]

    def _refuse_unbounded(self, messages: list[Request]) -> list[Request]:
        """The messages less those whose observation the networks cannot take (`outputs.unbounded_rows`), each
        refused with a 400 before anything of it is recorded or acted on (a vector step's every env with it):
        in the replay buffer it would make every batch that samples it fail the agent (issue 48, H1)."""
        checked = [m for m in messages if m.mode.learns and m.kind is not Kind.DROP]
        batch = stack_observations([self.as_trained(_sent(m.obs, m.raw_obs)) for m in checked])
        bad = {id(checked[row]) for row in unbounded_rows(self, batch)}
        if not bad:
            return messages
        groups = {m.group for m in checked if id(m) in bad and m.group}
        kept = []
        for message in messages:
            if id(message) in bad or (message.group and message.group in groups):
                self.refuse_with(message, BadRequest(
                    "'obs' makes the agent's networks give a NaN, infinite or overflowing output (a number far "
                    "beyond what its observations hold); the step was not recorded"))
            else:
                kept.append(message)
        return kept

    def _act(self, messages: list[Request]) -> None:
        """Answer act requests; those that need the policy share one forward pass."""
        drawn: dict[int, bool] = {}  # a vector step's choice, drawn once for its envs
        randomly = [self._acts_randomly(m, drawn) for m in messages]
        needed = [m for m, r in zip(messages, randomly) if not r]
        nothing = np.empty(0)
        explore, greedy = self._forward(needed) if needed else (nothing, nothing)
        row = 0
        for message, is_random in zip(messages, randomly):
            if message.mode is ActMode.GREEDY:
                self.answer(message, greedy[row])
                row += 1
                continue
            if is_random:
                buffer_action = self._random_action_of(message)
                if self._box:
                    buffer_action = self.actions.to_policy(buffer_action)
            else:
                buffer_action = explore[row]
                row += 1
            actor = self._actors.get(message.actor)  # None: the session ended while this request waited
            if self._box:
                if actor is not None and actor.noise is not None:
                    buffer_action = np.clip(buffer_action + actor.noise(), -1, 1)
                action = self.actions.to_env(buffer_action)
            else:
                action = buffer_action
            if actor is not None:  # the replay buffer keeps observations before normalisation
                actor.obs, actor.action = _sent(message.obs, message.raw_obs), buffer_action
            self.answer_env(message, action)

    def _acts_randomly(self, message: Request, drawn: dict[int, bool]) -> bool:
        """SB3's choice between a random action and the policy's (DQN: epsilon-greedy, one draw for the
        acts of one vector step, kept in ``drawn`` by group)."""
        if message.mode is ActMode.GREEDY:
            return False
        if message.mode is ActMode.RANDOM or self.model.num_timesteps < self.model.learning_starts:
            return True
        if self._box:
            return False
        if message.group and message.group in drawn:
            return drawn[message.group]
        choice = bool(np.random.rand() < getattr(self.model, "exploration_rate", 0.0))
        if message.group:
            drawn[message.group] = choice
        return choice

    def _random_action_of(self, message: Request) -> Any:
        """A random action for ``message`` (heatup, DQN's epsilon): the action space's sample (a subclass may
        keep to the message's action mask)."""
        return self._random_action()

    @th.no_grad()
    def _forward(self, messages: list[Request]) -> tuple[np.ndarray, np.ndarray]:
        """Exploration and greedy actions for the messages' observations, from one forward pass (boxes: scaled,
        in [-1, 1])."""
        policy: Any = self.model.policy  # SAC's, TD3's or DQN's: their actors differ
        obs_tensor, _ = policy.obs_to_tensor(stack_observations([m.obs for m in messages]))
        if self._stochastic:  # SAC: a sample of the squashed Gaussian explores; its mode is greedy
            mean, log_std, kwargs = policy.actor.get_action_dist_params(obs_tensor)
            distribution = policy.actor.action_dist.proba_distribution(mean, log_std, **kwargs)
            explore = distribution.get_actions(deterministic=False)
            greedy = distribution.get_actions(deterministic=True)
        else:  # DQN's argmax, TD3's and DDPG's deterministic actor
            explore = greedy = policy._predict(obs_tensor, deterministic=True)
        shape = (-1, *(self.action_space.shape or ()))
        return explore.numpy().reshape(shape), greedy.numpy().reshape(shape)

    def learn_upload(self, upload: Upload) -> Callable[[], None] | None:
        """A client-acting session's upload, stored as SB3 stores transitions (``replay_uploads.py``)."""
        return replay_uploads.learn_off_policy(self, upload)

    def _store(self, actor: _Actor, message: Request) -> None:
        done = message.kind is Kind.END
        self.add_transition(actor.obs, _sent(message.obs, message.raw_obs), actor.action,
                            _sent(message.reward, message.raw_reward), done, done and message.truncated,
                            message.mask)

    def add_transition(self, obs: Any, next_obs: Any, action: Any, reward: float, done: bool, truncated: bool,
                       next_mask: Any = None) -> None:
        """Store one transition (observations as the client sent them, the buffer's action, and the action
        mask of the next observation, if any); every ``n_envs`` of them make a row of the replay buffer, counted
        as SB3 counts a step of its ``VecEnv``."""
        self._row.append((obs, next_obs, action, reward, done, truncated, next_mask))
        if len(self._row) < self._n_envs:
            return
        row, self._row = self._row, []
        observations, next_observations, actions, rewards, dones, truncations = zip(*(r[:6] for r in row))
        self._store_row_masks([r[6] if len(r) > 6 else None for r in row])  # (rows of checkpoints before: 6)
        model = self.model
        self._replay.add(
            stack_observations(list(observations)), stack_observations(list(next_observations)),
            np.stack([np.asarray(action).reshape(-1) for action in actions]),
            np.array(rewards, dtype=np.float32), np.array(dones),
            [{"TimeLimit.truncated": bool(truncated)} for truncated in truncations],
        )
        model.num_timesteps += self._n_envs
        self._progress_remaining()
        model._on_step()
        self._since_train += 1

    def _store_row_masks(self, next_masks: list[Any]) -> None:
        """The next observations' action masks of the row about to be stored (None: no mask); kept by a
        subclass whose algorithm takes masks."""

    def _train_if_due(self) -> str | None:
        """The gradient steps that are due; None, or why the update was refused: once the replay buffer holds
        uploaded transitions every update is guarded (`SB3Algorithm.guarded_update`), so none fails the agent."""
        model = self.model
        frequency = self._train_freq.frequency
        if self._since_train < frequency:
            return None
        rounds, self._since_train = divmod(self._since_train, frequency)
        if model.num_timesteps <= model.learning_starts:  # as SB3: collected, but no update yet
            return None
        per_round = model.gradient_steps if model.gradient_steps >= 0 else frequency * self._n_envs
        if per_round <= 0 or self._replay.size() * self._n_envs < self._min_buffer:
            return None
        self._min_buffer = 1
        started = self.begin_update()
        refused = None
        if self.uploaded:
            refused = self.guarded_update(lambda: model.train(gradient_steps=rounds * per_round,
                                                              batch_size=model.batch_size), started)
        else:
            model.train(gradient_steps=rounds * per_round, batch_size=model.batch_size)
            self.after_update(started)
        model.policy.set_training_mode(False)
        return refused

    def use_filters(self, filtering: Filtering) -> None:
        """SB3's replay buffer keeps what the client sent and normalises each sampled batch through
        ``_vec_normalize_env``, as under ``VecNormalize``."""
        super().use_filters(filtering)
        self.model._vec_normalize_env = filtering  # type: ignore[assignment]

    # -- checkpoints -------------------------------------------------------------------------------
    def _counters(self) -> dict[str, Any]:
        return {**super()._counters(), "n_calls": int(getattr(self.model, "_n_calls", 0)),
                "since_train": self._since_train, "min_buffer": self._min_buffer}

    def _restore_counters(self, counters: dict[str, Any]) -> None:
        super()._restore_counters(counters)
        model = self.model
        if hasattr(model, "_n_calls"):  # DQN counts its _on_step calls (target updates)
            model._n_calls = int(counters.get("n_calls", 0))
        self._since_train = int(counters.get("since_train", 0))
        self._progress_remaining()
        if hasattr(model, "exploration_schedule"):
            schedule: Any = getattr(model, "exploration_schedule")  # DQN's epsilon
            setattr(model, "exploration_rate", schedule(model._current_progress_remaining))

    def _write_beside(self, path: Path) -> dict[str, Any]:
        """The replay buffer, beside the zip (`resume.write_replay_buffer`), unless it is left out."""
        if not self.checkpoint_replay_buffer:
            checkpoint.replay_buffer_path(path).unlink(missing_ok=True)  # never read with a later zip
            return {"replay_buffer": None}
        return {"replay_buffer": resume.write_replay_buffer(self, path)}

    def _resume_state(self) -> dict[str, Any]:
        return {**super()._resume_state(), "row": list(self._row)}  # transitions waiting for a row of n_envs

    def _load_resume_state(self, path: Path, counters: dict[str, Any], extra: dict[str, Any]) -> None:
        super()._load_resume_state(path, counters, extra)
        model = self.model
        if resume.load_replay_buffer(self, path, counters.get("replay_buffer")):
            self._replay = cast(ReplayBuffer, model.replay_buffer)
            self._row = list(extra.get("row", []))
            self._min_buffer = int(counters.get("min_buffer", 1))
            logger.info("agent %s: its replay buffer is back (%d transitions)", self.name,
                        self._replay.size() * self._n_envs)
            return
        # no replay buffer: refill it before training again rather than overfit a few steps
        self._min_buffer = max(1, model.batch_size, model.learning_starts)
        logger.info("agent %s: training resumes once the replay buffer holds %d transitions", self.name,
                    self._min_buffer)


def _sent(value: Any, raw: Any) -> Any:
    """What the client sent: ``raw`` when a filter replaced ``value``."""
    return value if raw is None else raw
