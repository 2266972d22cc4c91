"""Observations an off-policy agent's networks cannot take: those they give a NaN, an infinite or an overflowing
output for (an unbounded ``Box``'s 3e38 overflows the first layer; 1e30 gives a Q-value whose square, in the
critic's loss, does). Such an observation in the replay buffer would make every later batch that samples it
fail the agent for all its clients (issue 48, H1), so uploads and server-acting steps are refused before
it gets there (``replay_uploads.py``, `OffPolicyAdapter.process`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch as th

if TYPE_CHECKING:
    from shepherd.agents.sb3.off_policy import OffPolicyAdapter

#: the largest output magnitude an observation may give: squared and summed over a batch of a million it stays
#: finite in float32 (3.4e38); no honest value comes near (rewards are bounded by --max-reward)
OUTPUT_LIMIT = 1e15


@th.no_grad()
def unbounded_rows(adapter: OffPolicyAdapter, batch: Any) -> np.ndarray:
    """The rows of a batch of observations (in the policy's layout, normalised as a training batch is) whose
    outputs are not finite or beyond `OUTPUT_LIMIT`: DQN's Q-values (QR-DQN's quantiles), else the actor's
    action and the critics' values of it."""
    policy: Any = adapter.model.policy
    obs_tensor, _ = policy.obs_to_tensor(batch)
    values = getattr(policy, "q_net", None) or getattr(policy, "quantile_net", None)
    if values is not None:
        outputs = [values(obs_tensor)]
    else:
        actor = policy.actor  # SAC's (TQC's, CrossQ's) deterministic action: no random number drawn, so the
        # learner's generator stays SB3's
        actions = actor(obs_tensor, deterministic=True) if hasattr(actor, "get_action_dist_params") else actor(obs_tensor)
        critics = policy.critic(obs_tensor, actions)
        outputs = [actions, *(critics if isinstance(critics, (tuple, list)) else [critics])]
    rows = [output.reshape(output.shape[0], -1) for output in outputs]
    bounded = th.stack([(th.isfinite(row) & (row.abs() <= OUTPUT_LIMIT)).all(dim=1) for row in rows]).all(dim=0)
    return np.flatnonzero(~bounded.numpy())
