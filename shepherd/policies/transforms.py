"""The transform stage between a client and a policy: on the action side, SB3's own action handling (scaling
into [-1, 1] and back, clipping to a ``Box``); on the observation side, VecNormalize's normalising rule
(`normalized`). The agent's filters (``shepherd/agents/filters.py``: normalisation, reward scaling, frame
stacking) keep the statistics, saved in the checkpoint.

A learner, its greedy snapshot and a front end's copy of that snapshot (``shepherd/policies/greedy_snapshot.py``) apply the
same stage, so an action is the same whichever answers it; this module never imports torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces


class ActionTransform:
    """SB3's action handling for one policy: what the client gets for a policy output, and back.

    Off-policy policies and squashed (gSDE) ones act in [-1, 1] and are unscaled into a ``Box``; other
    Gaussian policies are clipped to it, as SB3's ``predict`` does. Discrete actions pass unchanged.
    """

    def __init__(self, action_space: spaces.Space, scaled: bool) -> None:
        self.box = isinstance(action_space, spaces.Box)
        self.scaled = self.box and scaled
        if self.box:
            assert isinstance(action_space, spaces.Box)
            self.low = action_space.low
            self.high = action_space.high

    def to_env(self, action: Any) -> Any:
        """The action the client gets for a policy output (one, or a batch): a Box's in its shape, as SB3's
        policies reshape their flat Gaussian samples."""
        if not self.box:
            return action
        action = self._shaped(np.asarray(action))
        if self.scaled:
            return self.low + 0.5 * (np.asarray(action) + 1.0) * (self.high - self.low)
        return np.clip(action, self.low, self.high)

    def _shaped(self, action: np.ndarray) -> np.ndarray:
        """A Box of two or more dimensions: a flat action (or a batch of them) in the Box's shape."""
        shape = self.low.shape
        if len(shape) < 2 or action.shape[-len(shape):] == shape or action.shape[-1:] != (self.low.size,):
            return action
        return action.reshape(*action.shape[:-1], *shape)

    def to_policy(self, action: Any) -> Any:
        """A client-space action as the policy (and a replay buffer) sees it: scaled into [-1, 1]."""
        if not self.scaled:
            return action
        return 2.0 * ((np.asarray(action) - self.low) / (self.high - self.low)) - 1.0


def normalized(obs: Any, mean: np.ndarray, var: np.ndarray, epsilon: float, clip: float) -> np.ndarray:
    """Observations normalised as VecNormalize does: ``clip((obs - mean) / sqrt(var + epsilon), -clip, clip)``,
    computed in float64 (the statistics' type), as float32."""
    return np.clip((obs - mean) / np.sqrt(var + epsilon), -clip, clip).astype(np.float32)
