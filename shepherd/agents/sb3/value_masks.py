"""Action masks for DQN and QR-DQN, fed by the pooled off-policy learner.

SB3's DQN and sb3-contrib's QR-DQN take no masks (sb3-contrib masks PPO only), so Shepherd masks them where a
mask changes what they do, and nowhere else (QR-DQN's values below are its quantiles' means, and a mask applies
to every quantile of an action): a step's ``"action_mask"`` (checked at the edge, as MaskablePPO's; it reaches
the learner as ``Request.mask``) keeps

- the greedy action (acting, evaluation, deployment) to the allowed actions: the argmax of the Q-values with the
  others set to -inf (the numpy snapshot and the exported files do the same);
- the random actions (before ``learning_starts``, and epsilon's) to a uniform draw of the allowed ones (the action
  space's ``sample(mask)``);
- the target's max to the actions allowed in the next observation: each transition is stored with the next
  observation's mask (`MaskedReplayBuffer`), and the target network's Q-values of the others are set to
  `DISALLOWED` for the batch being trained (`MaskedTarget`), so a state's value is never that of a move it cannot
  make.

A step without a mask allows every action, so an agent whose clients send none learns exactly as SB3's DQN does
(the masks are all ones, and ``where`` with all ones changes no value).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer

from shepherd.agents.core import Request
from shepherd.agents.sb3.base import stack_observations
from shepherd.agents.sb3.off_policy import OffPolicyAdapter

#: a disallowed action's Q-value in the target: never the max, and 0 once multiplied by a terminal's (1 - done)
DISALLOWED = -1e9


class _NextMasks:
    """A replay buffer's next-observation masks (`next_masks`: buffer_size x n_envs x actions, all allowed until
    written) and the masks of the batch sampled last (`sampled`), for `MaskedTarget`."""

    next_masks: np.ndarray
    sampled: th.Tensor | None

    def _start_masks(self, actions: int) -> None:
        buffer: Any = self  # a ReplayBuffer
        self.next_masks = np.ones((buffer.buffer_size, buffer.n_envs, actions), dtype=bool)
        self.sampled = None

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> Any:
        # SB3's _get_samples draws each sample's env first: drawn again from the same state, they are the same
        state = np.random.get_state()
        samples = super()._get_samples(batch_inds, env)  # type: ignore[misc]
        after = np.random.get_state()
        np.random.set_state(state)
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))  # type: ignore[attr-defined]
        np.random.set_state(after)
        self.sampled = th.as_tensor(self.next_masks[batch_inds, env_indices])
        return samples


class MaskedReplayBuffer(_NextMasks, ReplayBuffer):
    """SB3's `ReplayBuffer` with each transition's next action mask (`_NextMasks`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._start_masks(int(self.action_space.n))  # type: ignore[attr-defined]


class MaskedDictReplayBuffer(_NextMasks, DictReplayBuffer):
    """SB3's `DictReplayBuffer` with each transition's next action mask (`_NextMasks`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._start_masks(int(self.action_space.n))  # type: ignore[attr-defined]


class MaskedTarget(th.nn.Module):
    """DQN's (QR-DQN's) target network as its ``train()`` calls it: the next Q-values (quantiles) with the actions
    the sampled batch's next observations do not allow set to `DISALLOWED` (its parameters are the wrapped
    network's)."""

    def __init__(self, network: th.nn.Module, buffer: _NextMasks) -> None:
        super().__init__()
        self.network = network
        self.buffer = buffer

    def forward(self, obs: Any) -> th.Tensor:
        q_values = self.network(obs)  # (batch, actions), QR-DQN's (batch, quantiles, actions)
        allowed = self.buffer.sampled
        if allowed is None or (allowed.shape[0], allowed.shape[-1]) != (q_values.shape[0], q_values.shape[-1]):
            return q_values
        if q_values.dim() == 3:  # every quantile of a disallowed action
            allowed = allowed[:, None, :]
        return th.where(allowed.to(q_values.device), q_values, th.full_like(q_values, DISALLOWED))


class MaskableDQNAdapter(OffPolicyAdapter):
    """DQN with action masks (module docstring)."""

    #: the model's target network, as its ``train()`` reads it
    target_network = "q_net_target"

    def __init__(self, model: Any, name: str, total_steps: int | None) -> None:
        super().__init__(model, name, total_steps)
        self._use_masked_buffer()

    def _use_masked_buffer(self) -> None:
        """The model's replay buffer as its masked kind (SB3's, or a checkpoint's of before masks, taken over with
        every stored transition's next mask allowing all), and its target network masked by it."""
        model: Any = self.model  # a DQN
        buffer: Any = model.replay_buffer
        kind = MaskedDictReplayBuffer if isinstance(buffer, DictReplayBuffer) else MaskedReplayBuffer
        if not isinstance(buffer, kind):
            masked = kind.__new__(kind)
            masked.__dict__.update(buffer.__dict__)  # the same arrays: the subclass only adds the masks
            masked._start_masks(int(self.action_space.n))  # type: ignore[attr-defined]
            model.replay_buffer_class, model.replay_buffer = kind, masked
        self._replay = model.replay_buffer
        target = MaskedTarget(getattr(model.policy, self.target_network), model.replay_buffer)
        setattr(model, self.target_network, target)

    def _random_action_of(self, message: Request) -> Any:
        if message.mask is None:
            return self._random_action()
        return self.action_space.sample(mask=np.asarray(message.mask, dtype=np.int8))

    @th.no_grad()
    def _forward(self, messages: list[Request]) -> tuple[np.ndarray, np.ndarray]:
        if all(m.mask is None for m in messages):
            return super()._forward(messages)
        policy: Any = self.model.policy
        obs_tensor, _ = policy.obs_to_tensor(stack_observations([m.obs for m in messages]))
        q_values = self._values(obs_tensor)
        ones = np.ones(q_values.shape[1], dtype=bool)
        allowed = th.as_tensor(np.stack([ones if m.mask is None else np.asarray(m.mask, dtype=bool)
                                         for m in messages]))
        actions = th.where(allowed, q_values, th.full_like(q_values, -th.inf)).argmax(dim=1).numpy()
        return actions, actions

    def _values(self, obs: th.Tensor) -> th.Tensor:
        """The values the greedy action maximises: the Q-values (batch, actions)."""
        policy: Any = self.model.policy
        return policy.q_net(obs)

    def _store_row_masks(self, next_masks: list[Any]) -> None:
        buffer: Any = self._replay
        row = buffer.next_masks[buffer.pos]
        for index, mask in enumerate(next_masks):
            row[index] = True if mask is None else np.asarray(mask, dtype=bool)

    def _load_resume_state(self, path: Any, counters: dict[str, Any], extra: dict[str, Any]) -> None:
        super()._load_resume_state(path, counters, extra)
        self._use_masked_buffer()  # a loaded buffer (of the same kind), or a checkpoint's of before masks


class MaskableQRDQNAdapter(MaskableDQNAdapter):
    """QR-DQN with action masks (module docstring): its values are the means of its quantiles."""

    target_network = "quantile_net_target"

    def _values(self, obs: th.Tensor) -> th.Tensor:
        policy: Any = self.model.policy
        return policy.quantile_net(obs).mean(dim=1)
