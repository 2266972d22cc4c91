"""sb3-contrib's algorithms, registered as any algorithm is (see `shepherd.agents.registry.register`).

QR-DQN, TQC and CrossQ are fed by the off-policy learner, TRPO by the on-policy one, MaskablePPO by the
on-policy one with masks (``masks.py``), RecurrentPPO by its recurrent subclass (``recurrent.py``: each
actor's LSTM state kept on the learner): each keeps its own ``train()``, and the family adapter only
replaces the collection loop, as for SB3's six. ARS is not served
(`NOT_SERVED` says why).
"""

from __future__ import annotations

import inspect
from typing import Any

from gymnasium import spaces
from sb3_contrib import QRDQN, TQC, TRPO, CrossQ, MaskablePPO, RecurrentPPO

from shepherd.agents.sb3.masks import MaskableOnPolicyAdapter
from shepherd.agents.sb3.off_policy import OffPolicyAdapter
from shepherd.agents.sb3.on_policy import OnPolicyAdapter
from shepherd.agents.sb3.recurrent import RecurrentOnPolicyAdapter
from shepherd.agents.registry import (EVERY_ACTION_SPACE, NOT_SERVED, OFF_POLICY_EXCLUDED, ON_POLICY_EXCLUDED,
                                      SAC_EXCLUDED, Algorithm, register)


def _excluded(cls: type, reasons: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The excluded arguments that the class has (the reasons are shared between families)."""
    names = inspect.signature(cls).parameters
    return tuple((name, reason) for name, reason in reasons if name in names)


def _contrib(name: str, cls: type, family: type, action_spaces: tuple[type[spaces.Space], ...],
             excluded: tuple[tuple[str, str], ...], **extra: Any) -> Algorithm:
    return register(Algorithm(name, cls, family, action_spaces, _excluded(cls, excluded), package="sb3-contrib",
                              **extra))


_contrib("QRDQN", QRDQN, OffPolicyAdapter, (spaces.Discrete,), OFF_POLICY_EXCLUDED)
_contrib("TQC", TQC, OffPolicyAdapter, (spaces.Box,), SAC_EXCLUDED)
_contrib("CrossQ", CrossQ, OffPolicyAdapter, (spaces.Box,), SAC_EXCLUDED, dict_observations=False,
         image_policy=None)
_contrib("TRPO", TRPO, OnPolicyAdapter, EVERY_ACTION_SPACE, ON_POLICY_EXCLUDED)
_contrib("MaskablePPO", MaskablePPO, MaskableOnPolicyAdapter, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary),
         ON_POLICY_EXCLUDED, masks=True)
# not MultiBinary: sb3-contrib 2.9's recurrent buffer hands training the int8 actions SB3 stores for it, which
# the Bernoulli log-probability refuses (RecurrentPPO.learn fails the same way on a MultiBinary env)
_contrib("RecurrentPPO", RecurrentPPO, RecurrentOnPolicyAdapter,
         (spaces.Discrete, spaces.Box, spaces.MultiDiscrete), ON_POLICY_EXCLUDED,
         policies=("MlpLstmPolicy", "MultiInputLstmPolicy"), image_policy="CnnLstmPolicy")

NOT_SERVED["ARS"] = (
    "ARS learns from the returns of whole episodes played by perturbed copies of its policy, in rounds its "
    "own loop runs (evaluate_candidates); it has no step-by-step collection for clients to feed, so serving "
    "it would mean rewriting its update rather than running sb3-contrib's")
