"""Recurrent on-policy learning (sb3-contrib's RecurrentPPO): the pooled on-policy learner, with each actor's
LSTM state kept here, on the learner's thread.

The state of an actor (a session, or one env of a vector session) is the LSTM's hidden and cell states of
the actor and of the critic after its last act, each ``(n_lstm_layers, 1, lstm_hidden_size)``. Its rules
are RecurrentPPO's ``collect_rollouts``, with an actor where SB3 has an env column:

- A batch's acts run one forward pass: the actors' states are concatenated along the batch dimension and
  each act's ``episode_start`` (its episode's first observation) resets its state in the forward, as SB3
  passes ``episode_starts`` into the policy. An actor that has no state yet starts from zeros.
- An act's new state is kept only when the act is answered: a request put back to wait for a free segment
  is evaluated again, from the same state, when it acts.
- A row of the rollout buffer stores the states the actor acted *from* (before the step), as
  ``RecurrentRolloutBuffer.add`` does; training starts each sequence from them.
- The end of an episode at a time limit is valued from the actor's state (its bootstrap, as SB3 values the
  terminal observation; in a pass before the acts', `OnPolicyAdapter._learn_and_act`); then the state is dropped. A dropped actor (``Kind.DROP``: the session ended or
  expired) loses its state at once. A new episode always starts from zeros.
- **The fresh-segment rule.** An actor that claims, mid-episode, a segment someone else started writes its
  first row there with ``episode_start`` set (the on-policy learner's rule that keeps GAE from crossing
  clients), and training resets the LSTM at every episode start. So that what is trained is what was
  acted, such an act is evaluated again from zeros and the actor goes on from that reset state: its memory
  of the episode so far is lost at that step, as if a new episode had begun. Segments change hands when
  an episode ends (or a session leaves) mid-segment, so an actor whose segment filled mid-episode claims
  an untouched segment if one is free (and an actor starting an episode a started one), and is reset only
  when none is (`memory_resets` counts those acts).
- Greedy acts (evaluation, deployment) are answered here too, never by the numpy snapshot
  (`shepherd.agents.greedy_policy` refuses recurrent policies); a greedy episode carries the actor's LSTM only
  (an episode's mode never changes, so its critic state is never read).

Actor states are not checkpointed: sessions do not survive a restart either.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy

from shepherd.agents.core import ActMode, Kind, Request
from shepherd.agents.sb3.on_policy import OnPolicyAdapter
from shepherd.agents.sb3.base import stack_observations
from shepherd.agents.sb3.greedy import draws, modes

#: the four states of an actor, stacked: (actor hidden, actor cell, critic hidden, critic cell)
_PI_H, _PI_C, _VF_H, _VF_C = range(4)


class RecurrentOnPolicyAdapter(OnPolicyAdapter):
    """RecurrentPPO fed by segments from many sessions, with each actor's LSTM state kept per actor."""

    def __init__(self, model: Any, name: str, total_steps: int | None) -> None:
        super().__init__(model, name, total_steps)
        policy = model.policy
        if not isinstance(policy, RecurrentActorCriticPolicy):
            raise ValueError(f"{type(self).__name__} needs a recurrent policy, not {type(policy).__name__}")
        lstm = policy.lstm_actor
        self._zero = th.zeros((4, lstm.num_layers, 1, lstm.hidden_size))
        #: each actor's states after its last answered act, (4, layers, 1, hidden); absent: zeros
        self._memory: dict[int, th.Tensor] = {}
        # within one `process` call: each request's input states (None: zeros, an episode start), by id
        self._inputs: dict[int, th.Tensor | None] = {}
        # the last forward pass: row of each request, the states before and after it, (4, layers, batch, hidden)
        self._rows: dict[int, int] = {}
        self._before = self._after = self._zero
        # acts evaluated again from zeros (the fresh-segment rule): their value and states after, by id
        self._reset: dict[int, tuple[float, th.Tensor]] = {}
        #: acts evaluated again from zeros because their actor went on in a segment someone else started
        self.memory_resets = 0

    def client_acting_refused(self) -> str | None:
        return ("a recurrent policy's LSTM state is kept per session on the server, which a policy file cannot "
                "hold; log in with \"acting\": \"server\"")

    @property
    def actor_states(self) -> int:
        """How many actors have an LSTM state kept (for tests and monitoring)."""
        return len(self._memory)

    # -- where states begin and end ---------------------------------------------------------------
    def process(self, messages: list[Request]) -> None:
        # in arrival order: what each request acts from, and which states end (an episode's end is
        # valued from its state first). The acts of this batch keep their new states in `_sample`.
        memory, inputs = self._memory, self._inputs
        inputs.clear()
        for message in messages:
            if message.kind is Kind.BEGIN:
                memory.pop(message.actor, None)
                inputs[id(message)] = None
            elif message.kind is not Kind.DROP:  # STEP, ACT (a request that waited), END
                inputs[id(message)] = memory.get(message.actor)
                if message.kind is Kind.END:
                    memory.pop(message.actor, None)
        try:
            super().process(messages)
        finally:
            self._reset.clear()
        for message in messages:  # after the batch: an act answered before its actor's departure keeps nothing
            if message.kind is Kind.DROP:
                memory.pop(message.actor, None)

    def _choose_segment(self, actor: Any, free: list[int]) -> int:
        """Mid-episode, an untouched segment if any (a segment someone else started would reset the actor's
        memory, the fresh-segment rule); at an episode's start, a started one first (it starts anyway),
        leaving the untouched ones to actors in mid-episode."""
        untouched = [s for s in free if self.segments.position[s] == 0]
        started = [s for s in free if self.segments.position[s] > 0]
        return (started + untouched if actor.new_episode else untouched + started)[0]

    def _states_in(self, messages: list[Request]) -> tuple[th.Tensor, th.Tensor]:
        """The batch's input states (4, layers, batch, hidden) and episode starts (batch,)."""
        found = [self._inputs.get(id(m)) for m in messages]
        states = th.cat([self._zero if s is None else s for s in found], dim=2)
        starts = th.tensor([float(s is None) for s in found], dtype=th.float32)
        return states, starts

    # -- the hooks --------------------------------------------------------------------------------
    @th.inference_mode()
    def _evaluate(self, messages: list[Request]) -> tuple[np.ndarray, th.Tensor]:
        """Values and latent features of a batch, through both LSTMs as RecurrentPPO's forward does."""
        states, starts = self._states_in(messages)
        values, latent_pi, after = self._forward(messages, states, starts)
        self._rows = {id(m): i for i, m in enumerate(messages)}
        self._before, self._after = states, after
        return values, latent_pi

    def _forward(self, messages: list[Request], states: th.Tensor,
                 starts: th.Tensor) -> tuple[np.ndarray, th.Tensor, th.Tensor]:
        """RecurrentActorCriticPolicy.forward without sampling: values, the actor's latent features, and
        the states after the step, (4, layers, batch, hidden)."""
        policy: Any = self.model.policy
        obs_tensor, _ = policy.obs_to_tensor(stack_observations([m.obs for m in messages]))
        features = policy.extract_features(obs_tensor)
        pi_features, vf_features = (features, features) if policy.share_features_extractor else features
        latent_pi, (pi_h, pi_c) = policy._process_sequence(pi_features, (states[_PI_H], states[_PI_C]), starts,
                                                           policy.lstm_actor)
        if policy.lstm_critic is not None:
            latent_vf, (vf_h, vf_c) = policy._process_sequence(vf_features, (states[_VF_H], states[_VF_C]),
                                                               starts, policy.lstm_critic)
        elif policy.shared_lstm:
            latent_vf, (vf_h, vf_c) = latent_pi, (pi_h, pi_c)
        else:  # a feed-forward critic
            latent_vf, (vf_h, vf_c) = policy.critic(vf_features), (pi_h, pi_c)
        latent_pi = policy.mlp_extractor.forward_actor(latent_pi)
        values = policy.value_net(policy.mlp_extractor.forward_critic(latent_vf)).flatten().numpy()
        return values, latent_pi, th.stack([pi_h, pi_c, vf_h, vf_c])

    @th.inference_mode()
    def _sample(self, latent_pi: th.Tensor, acting: list[Request],
                greedy_too: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # the fresh-segment rule: an act whose row starts an episode in the buffer acts from zeros
        again = [j for j, m in enumerate(acting) if self._writes_start(m) and self._inputs.get(id(m)) is not None]
        after = self._after[:, :, [self._rows[id(m)] for m in acting]]
        if again:
            self.memory_resets += len(again)
            redo = [acting[j] for j in again]
            values, latent, states = self._forward(redo, self._zero.expand(-1, -1, len(redo), -1).contiguous(),
                                                   th.ones(len(redo)))
            latent_pi, after = latent_pi.clone(), after.clone()
            for k, j in enumerate(again):
                latent_pi[j], after[:, :, j] = latent[k], states[:, :, k]
                self._reset[id(acting[j])] = (float(values[k]), states[:, :, k:k + 1])
        for j, message in enumerate(acting):
            self._memory[message.actor] = after[:, :, j:j + 1].clone()
        return super()._sample(latent_pi, acting, greedy_too)

    def _writes_start(self, message: Request) -> bool:
        """Whether this act will write a row with ``episode_start`` set (see `OnPolicyAdapter._act`)."""
        actor = self._actors.get(message.actor)
        return (message.mode is ActMode.EXPLORE and actor is not None and actor.segment is not None
                and (actor.new_episode or actor.fresh_segment))

    def _write_row(self, row: int, segment: int, message: Request, action, value: float, log_prob: float,
                   start: bool) -> None:
        redone = self._reset.get(id(message))
        if redone is not None:
            value = redone[0]
        super()._write_row(row, segment, message, action, value, log_prob, start)
        # the states acted from; a row that starts an episode is reset in training, so zeros stand for them
        states = self._zero[:, :, 0] if start else self._before[:, :, self._rows[id(message)]]
        buffer: Any = self.buffer
        for name, index in (("hidden_states_pi", _PI_H), ("cell_states_pi", _PI_C), ("hidden_states_vf", _VF_H),
                            ("cell_states_vf", _VF_C)):
            getattr(buffer, name)[row, :, segment] = states[index].numpy()

    @th.inference_mode()
    def _greedy(self, messages: list[Request]) -> np.ndarray:
        """Greedy actions of a batch nothing learns from, through the actor's LSTM only."""
        policy: Any = self.model.policy
        states, starts = self._states_in(messages)
        obs_tensor, _ = policy.obs_to_tensor(stack_observations([m.obs for m in messages]))
        features = policy.extract_features(obs_tensor)
        pi_features = features if policy.share_features_extractor else features[0]
        latent_pi, (pi_h, pi_c) = policy._process_sequence(pi_features, (states[_PI_H], states[_PI_C]), starts,
                                                           policy.lstm_actor)
        distribution = policy._get_action_dist_from_latent(policy.mlp_extractor.forward_actor(latent_pi))
        after = th.cat([th.stack([pi_h, pi_c]), states[_VF_H:]])
        for i, message in enumerate(messages):  # every request of a greedy batch acts
            self._memory[message.actor] = after[:, :, i:i + 1].clone()
        return modes(distribution, draws(messages))
