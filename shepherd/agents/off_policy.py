"""Pooled off-policy learning (DQN): every session's transitions go into one SB3 replay buffer.

The learner mirrors SB3's ``collect_rollouts`` for one environment, counted in transitions over all
sessions: random actions until ``learning_starts`` (Shepherd's heatup), epsilon-greedy exploration
following SB3's schedule, ``_on_step`` after each transition (target network, exploration rate), and
``train(gradient_steps)`` after every ``train_freq`` transitions. Time limits are stored as SB3 stores
them (``TimeLimit.truncated`` in ``infos``), so the replay buffer bootstraps them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.type_aliases import TrainFrequencyUnit

from shepherd.agents.base import ActMode, Kind, Message, PooledLearner, reply, stack_observations


@dataclass
class _Actor:
    """A session's last observation and action, waiting for their outcome."""

    obs: Any = None
    action: Any = None


class DQNLearner(PooledLearner):
    """DQN fed by many sessions through one replay buffer."""

    def __init__(self, model: OffPolicyAlgorithm, name: str, total_steps: int | None) -> None:
        super().__init__(model, name, total_steps)
        if model.train_freq.unit is not TrainFrequencyUnit.STEP:
            raise ValueError("train_freq must be counted in steps for a pooled learner, not episodes")
        self._actors: dict[int, _Actor] = {}
        self._since_train = 0
        model.policy.set_training_mode(False)

    @th.no_grad()
    def _greedy(self, observations: list) -> np.ndarray:
        policy = self.model.policy
        obs_tensor, _ = policy.obs_to_tensor(stack_observations(observations))
        return policy._predict(obs_tensor, deterministic=True).numpy()

    def _process(self, messages: list[Message]) -> None:
        acting = [m for m in messages if m.kind in (Kind.BEGIN, Kind.STEP, Kind.ACT) and self._needs_policy(m)]
        greedy = self._greedy([m.obs for m in acting]) if acting else None
        index = {id(m): i for i, m in enumerate(acting)}
        for message in messages:
            if message.kind is Kind.DROP:
                self._actors.pop(message.actor, None)
                continue
            actor = self._actors.setdefault(message.actor, _Actor())
            if message.kind is Kind.BEGIN:
                actor.obs = None
            if message.kind in (Kind.STEP, Kind.END) and message.mode.learns and actor.obs is not None:
                self._store(actor, message)
            if message.kind is Kind.END:
                actor.obs = None
                continue
            i = index.get(id(message))
            action = self._random_action() if i is None else greedy[i]
            if message.mode.learns:
                actor.obs, actor.action = message.obs, action
            reply(message, action)
        self._train_if_due()

    def _needs_policy(self, message: Message) -> bool:
        if message.mode is ActMode.GREEDY:
            return True
        if message.mode is ActMode.RANDOM or self.model.num_timesteps < self.model.learning_starts:
            return False
        return np.random.rand() >= self.model.exploration_rate

    def _store(self, actor: _Actor, message: Message) -> None:
        done = message.kind is Kind.END
        model = self.model
        action = np.asarray(actor.action).reshape(1, -1)
        model.replay_buffer.add(
            _batch1(actor.obs), _batch1(message.obs), action,
            np.array([message.reward], dtype=np.float32), np.array([done]),
            [{"TimeLimit.truncated": bool(done and message.truncated)}],
        )
        model.num_timesteps += 1
        self._progress_remaining()
        model._on_step()
        self._since_train += 1

    def _train_if_due(self) -> None:
        model = self.model
        frequency = model.train_freq.frequency
        if self._since_train < frequency:
            return
        rounds, self._since_train = divmod(self._since_train, frequency)
        if model.num_timesteps <= model.learning_starts:  # as SB3: collected, but no update yet
            return
        per_round = model.gradient_steps if model.gradient_steps >= 0 else frequency
        if model.replay_buffer.size() < model.batch_size:
            return
        model.train(gradient_steps=rounds * per_round, batch_size=model.batch_size)
        model.policy.set_training_mode(False)

    def _counters(self) -> dict[str, Any]:
        return {**super()._counters(), "n_calls": int(self.model._n_calls), "since_train": self._since_train}

    def _restore_counters(self, counters: dict[str, Any]) -> None:
        super()._restore_counters(counters)
        self.model._n_calls = int(counters.get("n_calls", 0))
        self._since_train = int(counters.get("since_train", 0))
        self._progress_remaining()
        self.model.exploration_rate = self.model.exploration_schedule(self.model._current_progress_remaining)


def _batch1(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {key: np.asarray(value)[None] for key, value in obs.items()}
    return np.asarray(obs)[None]
