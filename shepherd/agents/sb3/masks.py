"""Action masks: sb3-contrib's MaskablePPO fed by the pooled on-policy learner.

A client may send, with each observation, which actions are valid now (``"action_mask"``, checked at the
edge by `shepherd.wire.spaces.check_action_mask`; it reaches the learner as ``Request.mask``). The adapter does
what MaskablePPO's ``collect_rollouts`` does with ``get_action_masks(env)``: the policy's distribution is
masked before an action is drawn (masked-out logits set to -1e8, so their probability is 0), the mask is
stored with the row in the ``MaskableRolloutBuffer``, and MaskablePPO's ``train()`` evaluates the stored
actions under the same masks. Greedy acts (evaluation, deployment) take the mode of the masked
distribution. A request without a mask allows every action (the buffer's default row of ones), as
MaskablePPO does without masking. The numpy snapshot (`greedy_policy.py`) answers greedy steps with the same
masking.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th

from shepherd.agents.core import Request
from shepherd.agents.sb3.on_policy import OnPolicyAdapter
from shepherd.agents.sb3.greedy import draws, modes


class MaskableOnPolicyAdapter(OnPolicyAdapter):
    """MaskablePPO's collection: masked sampling, masks stored with their rows."""

    def __init__(self, model: Any, name: str, total_steps: int | None) -> None:
        super().__init__(model, name, total_steps)
        self._mask_dims = int(self.buffer.mask_dims)  # type: ignore[union-attr]  # a MaskableRolloutBuffer

    def _masks(self, messages: list[Request]) -> np.ndarray | None:
        """The batch's masks as rows (a row of ones for a request without one); None if none has one."""
        if all(m.mask is None for m in messages):
            return None
        ones = np.ones(self._mask_dims, dtype=bool)
        return np.stack([ones if m.mask is None else m.mask for m in messages])

    def _masked(self, distribution: Any, messages: list[Request]) -> Any:
        """A MaskableDistribution of the requests, masked by their masks."""
        masks = self._masks(messages)
        if masks is not None:
            distribution.apply_masking(masks)
        return distribution

    def _distribution(self, latent_pi: th.Tensor, acting: list[Request]) -> Any:
        return self._masked(super()._distribution(latent_pi, acting), acting)

    @th.no_grad()
    def _greedy(self, messages: list[Request]) -> np.ndarray:
        return modes(self._policy_distribution(messages), draws(messages))  # never numpy's unmasked fast path

    def _policy_distribution(self, messages: list[Request]) -> Any:
        return self._masked(super()._policy_distribution(messages), messages)

    def _evaluate_uploaded(self, obs: Any, actions: th.Tensor, masks: np.ndarray | None) -> tuple[th.Tensor, th.Tensor]:
        policy: Any = self.model.policy  # a MaskableActorCriticPolicy
        values, log_probs, _ = policy.evaluate_actions(obs, actions, action_masks=masks)
        return values.flatten(), log_probs.flatten()

    def _write_row(self, row: int, segment: int, message: Request, action, value: float, log_prob: float,
                   start: bool) -> None:
        super()._write_row(row, segment, message, action, value, log_prob, start)
        masks = self.buffer.action_masks  # type: ignore[union-attr]
        masks[row, segment] = 1.0 if message.mask is None else message.mask
