"""Pooled on-policy learning (PPO, A2C, sb3-contrib's TRPO; MaskablePPO and RecurrentPPO through the subclasses
in ``masks.py`` and ``recurrent.py``): rollouts made of fixed-length segments, each filled by one client.

SB3's ``RolloutBuffer`` has ``n_envs`` columns of ``n_steps`` rows. Here a column is a *segment*: a
client session claims a free one when it needs to act, writes its transitions down it, and releases it
when its episode ends or the segment is full. When every segment is full, the rollout is complete: GAE is
computed by SB3's ``compute_returns_and_advantage`` and SB3's ``train()`` runs. Sessions that need to act
while no segment is free wait for that update, exactly as SB3's vectorised envs wait for ``train()``.

A session that leaves mid-segment (or stalls while others wait) hands its segment over: its last
transition is bootstrapped with the value of its next observation, as SB3 bootstraps a time limit, and
the next writer starts with ``episode_start`` set, so GAE never crosses from one client to another.

A vector session's envs cannot wait for each other: one that finds no free segment splits a group-mate's
(``_split``), and acts unlearned (``unlearned_steps``) only when no rollout has room for it. A checkpoint keeps
the rollout collected so far, as every session's logout would leave it (``resume.py``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.torch_layers import FlattenExtractor

from shepherd.agents.core import ActMode, Kind, Outcome, Request, Upload
from shepherd.agents.sb3 import resume
from shepherd.agents.sb3.base import SB3Algorithm, stack_observations
from shepherd.agents.sb3.greedy import draws, greedy_actions, modes
from shepherd.agents.sb3.segments import Segments
from shepherd.agents.sb3.uploads import OnPolicyUploads
from shepherd.wire.experience import Experience

logger = logging.getLogger(__name__)


@dataclass
class _Actor:
    """What the learner keeps for one session: its segment and whether an action awaits its outcome."""

    segment: int | None = None
    pending: bool = False  # the row at the segment's position holds obs/action/value, not yet a reward
    new_episode: bool = True
    fresh_segment: bool = False  # claimed a segment started by someone else: GAE must not cross into it
    last_seen: float = 0.0
    group: int = 0  # the vector session it steps with (0: none)


class OnPolicyAdapter(SB3Algorithm):
    """PPO, A2C or TRPO (any SB3 on-policy algorithm) fed by segments from many sessions."""

    model: OnPolicyAlgorithm

    #: a session holding a segment while others wait for one loses it after this many idle seconds
    handover_timeout = 5.0
    #: seconds a client-acting session's reserved rows stay its own, unwritten, while others wait for rows
    reservation_timeout = 60.0
    #: ... and of a session's first block (one that crashed right after its login holds nothing for long)
    first_block_timeout = 10.0

    def __init__(self, model: OnPolicyAlgorithm, name: str, total_steps: int | None) -> None:
        # SB3 clips a Gaussian policy's actions to the box, and unscales squashed (gSDE) ones
        super().__init__(model, name, total_steps, scaled_actions=bool(getattr(model.policy, "squash_output", False)))
        self.buffer: RolloutBuffer | DictRolloutBuffer = model.rollout_buffer
        self.n_steps, self.n_segments = model.n_steps, model.n_envs  # a segment per buffer column, n_steps rows
        self._actors: dict[int, _Actor] = {}
        self._waiting: list[Request] = []
        #: exploring acts answered without a segment (a vector session with more envs than segments): not learned from
        self.unlearned_steps = 0
        self.uploads = OnPolicyUploads(self)  # client-acting sessions: their reserved segments
        self._reset_rollout()
        model.policy.set_training_mode(False)
        # float vectors through SB3's flatten extractor: the greedy path can hand them to the layers as they are
        self._vector_observations = (isinstance(model.observation_space, gym.spaces.Box)
                                     and len(model.observation_space.shape) == 1
                                     and isinstance(model.policy.features_extractor, FlattenExtractor))

    def _reset_rollout(self) -> None:
        """An empty rollout: a segment per buffer column (a split adds one: a column's tail, ``_split``)."""
        self.buffer.reset()
        self.segments = Segments.empty(self.n_segments, self.n_steps)

    # -- the batched forward pass ------------------------------------------------------------------
    # The four hooks an adapter subclass overrides when its algorithm needs more than observations (masks,
    # recurrent state): the forward pass, sampling, the greedy actions, and what a row of the buffer holds.
    @th.inference_mode()
    def _evaluate(self, messages: list[Request]) -> tuple[np.ndarray, th.Tensor]:
        """Values and the policy's latent features of a batch of requests: the one forward pass."""
        policy = self.model.policy
        features: Any
        if self._vector_observations:  # SB3's preprocessing and flattening would change nothing
            features = th.from_numpy(np.stack([m.obs for m in messages]).astype(np.float32, copy=False))
        else:
            obs_tensor, _ = policy.obs_to_tensor(stack_observations([m.obs for m in messages]))
            features = policy.extract_features(obs_tensor)
        if policy.share_features_extractor:
            latent_pi, latent_vf = policy.mlp_extractor(features)
        else:
            latent_pi = policy.mlp_extractor.forward_actor(features[0])
            latent_vf = policy.mlp_extractor.forward_critic(features[1])
        return policy.value_net(latent_vf).flatten().numpy(), latent_pi

    def _greedy(self, messages: list[Request]) -> np.ndarray:
        """Greedy actions only, for batches that nothing learns from (evaluation, deployment), or drawn where a
        request has a ``draw`` seed (`modes`)."""
        seeds = draws(messages)
        if seeds:
            return modes(self._policy_distribution(messages), seeds)
        return greedy_actions(self.model.policy, [m.obs for m in messages], self._vector_observations)

    @th.inference_mode()
    def _policy_distribution(self, messages: list[Request]) -> Any:
        """The policy's own action distribution at the requests' observations (a subclass may mask it)."""
        policy = self.model.policy
        obs_tensor, _ = policy.obs_to_tensor(stack_observations([m.obs for m in messages]))
        return policy.get_distribution(obs_tensor)

    @th.inference_mode()
    def _sample(self, latent_pi: th.Tensor, acting: list[Request],
                greedy_too: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sampled actions, greedy actions (if ``greedy_too``; else the sampled ones again) and
        log-probabilities of the requests that act now (``latent_pi``'s rows, in order). Rows that only end
        an episode or wait for a segment draw nothing, so the random numbers drawn are SB3's."""
        distribution = self._distribution(latent_pi, acting)
        sampled = distribution.get_actions(deterministic=False)
        greedy = modes(distribution, draws(acting)) if greedy_too else sampled.numpy()
        return sampled.numpy(), greedy, distribution.log_prob(sampled).numpy()

    def _distribution(self, latent_pi: th.Tensor, acting: list[Request]) -> Any:
        """The policy's action distribution for the acting requests (a subclass may mask it)."""
        return self.model.policy._get_action_dist_from_latent(latent_pi)

    def process(self, messages: list[Request]) -> None:
        # what needs the policy: every act; an episode's end only for its value, used at a time limit alone
        forward = [m for m in messages if m.kind in (Kind.BEGIN, Kind.STEP, Kind.ACT)]
        learns = any(m.mode.learns for m in messages if m.kind is not Kind.DROP)
        if forward and not learns:
            self._answer_greedy(messages, forward)
        else:
            self._learn_and_act(messages, forward)
        if self._rollout_full():
            self._train()
        elif (self._waiting or self.uploads.held) and self._free_segment():  # a segment was left: free again
            self._serve_waiting()

    def learn_upload(self, upload: Upload) -> None:
        """A client-acting session's upload, written into the segments it reserved (``uploads.py``)."""
        self.uploads.learn(upload)

    def upload_advice(self, experience: Experience) -> np.ndarray | None:
        """The advice rows of an upload's T x N acts (an advised client's, `AdvisedOnPolicyAdapter`); None: the
        policy is its own."""
        return None

    def mixed(self, advice: np.ndarray | None) -> ContextManager[None]:
        """While it lasts, the policy's distributions mix in ``advice`` (an advised client's); here: its own."""
        return contextlib.nullcontext()

    def _evaluate_uploaded(self, obs: Any, actions: th.Tensor, masks: np.ndarray | None) -> tuple[th.Tensor, th.Tensor]:
        """Values and log-probabilities of uploaded samples: SB3's ``evaluate_actions``, as ``train()`` calls
        it (a subclass may mask it with ``masks``, one row per sample)."""
        values, log_probs, _ = self.model.policy.evaluate_actions(obs, actions)
        return values.flatten(), log_probs.flatten()

    def _learn_and_act(self, messages: list[Request], forward: list[Request]) -> None:
        """Complete transitions, claim segments, and answer every act (``forward``) with one forward pass.

        An episode's end is valued in a pass of its own, never beside the acts: one client's end (sent without
        waiting for an answer) and its next episode's start reach the worker in one batch or in two as its
        threads happen to run, and torch rounds a row of a one-row pass apart from the same row in a larger
        one; with the end's pass apart, the start's act gets the same numbers either way, so one seeded client
        trains the same weights in every run (issue 48's exact resume compares two). Only a time limit uses
        an end's value (a terminal state is worth nothing), so only those ends cost a pass."""
        ends = [m for m in messages if m.kind is Kind.END and m.mode.learns and m.truncated]
        value_of: dict[int, float] = {}
        if ends:  # before the acts' pass: a subclass keeps what it needs of the acts' (the LSTM states)
            value_of = {id(m): float(v) for m, v in zip(ends, self._evaluate(ends)[0])}
        row_of: dict[int, int] = {}
        if forward:
            values, latent_pi = self._evaluate(forward)
            row_of = {id(m): i for i, m in enumerate(forward)}
            value_of.update((id(m), float(values[i])) for i, m in enumerate(forward))
        # first every outcome (transitions completed, segments left), then every act: the segments a
        # batch frees are free for its acts, and a vector step's envs claim theirs in env order
        acts: list[tuple[Request, _Actor]] = []
        for message in messages:
            actor = self._actors.setdefault(message.actor, _Actor())
            actor.last_seen = time.monotonic()
            actor.group = message.group
            if message.kind is Kind.DROP:
                self._drop(message.actor)
                continue
            if message.kind is Kind.BEGIN:
                self._leave_segment(actor, bootstrap=True)
                actor.new_episode = True
            if message.kind in (Kind.STEP, Kind.END) and message.mode.learns and actor.pending:
                self._complete(actor, message, value_of.get(id(message), 0.0))  # a terminal end: not valued
            if message.kind is Kind.END:
                self._leave_segment(actor, bootstrap=False)
                actor.new_episode = True
            else:
                acts.append((message, actor))
        acting: list[tuple[Request, _Actor]] = []
        for message, actor in acts:
            if message.mode is ActMode.RANDOM:  # on-policy heatup is refused by the graph; never stored
                self.answer_env(message, self._random_action())
            elif (message.mode is ActMode.EXPLORE and actor.segment is None
                  and self._claim(message.actor, actor) is None and not self.draining
                  and not self._group_fills(actor.group)):
                message.kind = Kind.ACT  # its transition is stored; only the action waits for the update
                self._waiting.append(message)
            else:  # with a segment, greedy, draining, or a group-mate still filling one: act
                acting.append((message, actor))
        if acting:
            rows = [row_of[id(message)] for message, _ in acting]
            greedy_too = any(message.mode is ActMode.GREEDY for message, _ in acting)
            chosen = latent_pi if len(rows) == len(forward) else latent_pi[th.as_tensor(rows, dtype=th.long)]
            sampled, greedy, log_probs = self._sample(chosen, [message for message, _ in acting], greedy_too)
            for j, (message, actor) in enumerate(acting):
                self._act(actor, message, sampled[j], greedy[j], float(values[rows[j]]), float(log_probs[j]))

    def _answer_greedy(self, messages: list[Request], forward: list[Request]) -> None:
        """A batch that nothing learns from: greedy actions, and the bookkeeping of ends and departures."""
        greedy = self._greedy(forward)
        row_of = {id(m): i for i, m in enumerate(forward)}
        for message in messages:
            actor = self._actors.setdefault(message.actor, _Actor())
            actor.last_seen = time.monotonic()
            if message.kind is Kind.DROP:
                self._drop(message.actor)
                continue
            if message.kind in (Kind.BEGIN, Kind.END):
                self._leave_segment(actor, bootstrap=message.kind is Kind.BEGIN)
                actor.new_episode = True
            if message.kind is not Kind.END:
                self.answer(message, greedy[row_of[id(message)]])

    def _group_fills(self, group: int) -> bool:
        """Whether an actor of this vector session still has rows to fill in its segment. Its other envs then act
        without a segment (their transitions are not learned from) instead of waiting: the session steps all its
        envs together, so a wait would stall the segments it holds, and with them the rollout. That happens when
        nothing was left to split (``_split``): at the step that fills a rollout, or to the envs of a session
        with more envs than the agent has segments (``n_envs``)."""
        segments = self.segments
        return bool(group) and any(
            owner is not None and segments.rows(s) > 0 and getattr(self._actors.get(owner), "group", 0) == group
            for s, owner in enumerate(segments.owner))

    def _free_segment(self) -> bool:
        return bool(self.segments.free())

    def _act(self, actor: _Actor, message: Request, sampled, greedy, value: float, log_prob: float) -> None:
        """Reply with the greedy action, or write the sampled one down the actor's segment and reply with it."""
        if message.mode is ActMode.GREEDY:
            self.answer(message, greedy)
            return
        segment = actor.segment
        if segment is None:  # the server is stopping, or no segment is free for it: answer, learn nothing
            if not self.draining:
                if not self.unlearned_steps:
                    logger.warning("agent %s: envs of a vector session found no free row in the rollout (%d "
                                   "segments, n_envs): they act but are not learned from (as at the step that "
                                   "fills a rollout when envs left for evaluations; give the agent n_envs of at "
                                   "least the envs of a session; /metrics counts them in "
                                   "shepherd_unlearned_steps_total)", self.name, self.n_segments)
                self.unlearned_steps += 1
            self.answer(message, sampled)
            return
        row, column = self.segments.at(segment)
        self._write_row(row, column, message, sampled, value, log_prob, start=actor.new_episode or actor.fresh_segment)
        actor.pending, actor.new_episode, actor.fresh_segment = True, False, False
        self.answer(message, sampled)

    def _write_row(self, row: int, segment: int, message: Request, action, value: float, log_prob: float,
                   start: bool) -> None:
        """Write an act's row down a segment (what SB3's ``RolloutBuffer.add`` stores, less the reward)."""
        buffer = self.buffer
        obs = message.obs
        if isinstance(buffer.observations, dict):
            for key, part in obs.items():
                buffer.observations[key][row, segment] = part
        else:
            buffer.observations[row, segment] = obs
        buffer.actions[row, segment] = np.asarray(action).reshape(buffer.action_dim)
        buffer.values[row, segment] = value
        buffer.log_probs[row, segment] = log_prob
        buffer.episode_starts[row, segment] = float(start)

    def _complete(self, actor: _Actor, message: Request, next_value: float) -> None:
        """Store the reward of the pending row; bootstrap a time limit with the next value, and so the last
        row of a segment that a split cut short (the next row starts another actor's stretch)."""
        segment, segments = actor.segment, self.segments
        assert segment is not None  # a pending row lies in the actor's segment
        row, column = segments.at(segment)
        reward = message.reward
        done = message.kind is Kind.END
        if done and message.truncated:
            reward += self.model.gamma * next_value
        elif segments.cut_short(segment, row) and not done:
            reward += self.model.gamma * next_value
        self.buffer.rewards[row, column] = reward
        self.model.num_timesteps += 1
        actor.pending = False
        if segments.filled(segment):
            if segments.ends_column(segment):
                segments.last_values[column] = next_value
                segments.last_dones[column] = float(done)
            segments.release(segment)
            actor.segment = None

    def _claim(self, actor_id: int, actor: _Actor) -> int | None:
        free = self.segments.free()
        if not free:
            return self._split(actor_id, actor) if 0 < actor.group and self._fits(actor.group) else None
        segment = self._choose_segment(actor, free)
        self.segments.take(segment, actor_id)
        actor.segment = segment
        actor.fresh_segment = self.segments.position[segment] > 0
        return segment

    def _choose_segment(self, actor: _Actor, free: list[int]) -> int:
        """Which of the free segments (in order) an actor claims: the first (a subclass may prefer others)."""
        return free[0]

    def _fits(self, group: int) -> bool:  # a session of more envs than segments: its extra envs act unlearned
        return sum(a.group == group for a in self._actors.values()) <= self.n_segments

    def _split(self, actor_id: int, actor: _Actor) -> int | None:
        """No segment is free: a vector session's env takes the later half of the rows a group-mate has left
        in its segment (the one with the most, if two or more), instead of acting unlearned. The group-mate
        stops at the split, bootstrapped there (``_complete``), and the new segment starts fresh. Rollouts
        desynchronised by envs that left for an unlearned episode (an evaluation) then still end together."""
        segments = self.segments
        mates = [s for s, owner in enumerate(segments.owner) if owner is not None and owner != actor_id
                 and getattr(self._actors.get(owner), "group", 0) == actor.group
                 and self._actors[owner].segment == s and segments.rows(s) >= 2]
        if not mates:
            return None
        segment = segments.split(max(mates, key=segments.rows), actor_id)
        actor.segment, actor.fresh_segment = segment, True
        return segment

    def _leave_segment(self, actor: _Actor, bootstrap: bool) -> None:
        """Release the actor's segment; a pending row is dropped and, if asked, its value bootstraps
        the previous row (the episode is cut there, as at a time limit)."""
        segment = actor.segment
        if segment is None:
            return
        row, column = self.segments.at(segment)
        if actor.pending and bootstrap and row > 0 and not self.buffer.episode_starts[row, column]:
            self.buffer.rewards[row - 1, column] += self.model.gamma * self.buffer.values[row, column]
        self.segments.release(segment)
        actor.segment, actor.pending, actor.fresh_segment = None, False, False

    def _drop(self, actor_id: int) -> None:
        self.uploads.drop(actor_id)
        actor = self._actors.pop(actor_id, None)
        if actor is not None:
            self._leave_segment(actor, bootstrap=True)
        for message in [m for m in self._waiting if m.actor == actor_id]:
            self._waiting.remove(message)
            self.refuse(message, Outcome.DROPPED)

    def _rollout_full(self) -> bool:
        return self.segments.full

    def _train(self) -> str | None:
        """Update from the full rollout and start the next; None, or why the update was refused. Every update
        is guarded (`SB3Algorithm.guarded_update`: one the rollout makes NaN is undone and the rollout
        discarded), so that no client's steps or uploads fail the agent for the others; it costs ~0.0002 of
        an update (benchmarks/guarded_update.py)."""
        buffer = self.buffer
        buffer.pos, buffer.full = self.n_steps, True

        def update() -> None:  # the returns too: a reward of 1e38 overflows them already
            buffer.compute_returns_and_advantage(th.as_tensor(self.segments.last_values), self.segments.last_dones)
            self.model.train()

        self._progress_remaining()
        started = self.begin_update()
        refused = self.guarded_update(update, started)
        self.model.policy.set_training_mode(False)
        self._reset_rollout()
        self._serve_waiting()  # the sessions that waited for this update reserve first
        return refused

    def idle(self) -> None:
        """Hand segments of stalled sessions over when others are waiting for one: a server-acting session's
        after `handover_timeout`, a client-acting session's reservation after `reservation_timeout`."""
        if not (self._waiting or self.uploads.held) or self._free_segment():
            return
        now = time.monotonic()
        deadline = now - self.handover_timeout
        stalled = [a for a in self._actors.values() if a.segment is not None and a.last_seen < deadline]
        for actor in stalled:
            logger.info("agent %s: a stalled session hands its segment over", self.name)
            self._leave_segment(actor, bootstrap=True)
        if self.uploads.lapse(now - self.reservation_timeout, now - self.first_block_timeout):
            logger.info("agent %s: a client-acting session that did not upload hands its reserved rows over", self.name)
        elif not stalled:
            return
        self._serve_waiting()

    def drain(self) -> None:
        self._serve_waiting()

    def _serve_waiting(self) -> None:
        """Serve the held replies of client-acting sessions, then the acts that waited for a segment (in order)."""
        self.uploads.serve_held()
        waiting, self._waiting = self._waiting, []
        if waiting:
            self.process(waiting)

    def stop_waiting(self, outcome: Outcome, detail: str) -> None:
        self.uploads.stop_waiting(outcome, detail)
        waiting, self._waiting = self._waiting, []
        for message in waiting:
            self.refuse(message, outcome, detail)

    def _resume_state(self) -> dict[str, Any]:  # the rollout collected so far (`shepherd.agents.sb3.resume`)
        return {**super()._resume_state(), "rollout": resume.rollout_state(self)}

    def _load_resume_state(self, path: Path, counters: dict[str, Any], extra: dict[str, Any]) -> None:
        super()._load_resume_state(path, counters, extra)
        resume.load_rollout(self, extra.get("rollout"))
