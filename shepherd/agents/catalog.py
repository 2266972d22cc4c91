"""The algorithms Shepherd serves, as one literal table: each SB3 or sb3-contrib class with the family adapter
that feeds it, the action spaces it handles and the constructor arguments it cannot take here
(`shepherd.agents.registry` reads their parameters and checks agents against them).

PPO and A2C are fed by the on-policy learner, DQN, SAC, TD3 and DDPG by the off-policy learner; of
sb3-contrib's, QR-DQN, TQC and CrossQ by the off-policy learner, TRPO by the on-policy one, MaskablePPO by the
on-policy one with masks (``sb3/masks.py``), DQN and QR-DQN by the off-policy one with masks
(``sb3/value_masks.py``: neither takes masks in SB3, so Shepherd masks their acting, random actions and
target), RecurrentPPO by its recurrent subclass (``sb3/recurrent.py``: each actor's LSTM state kept on the
learner): each keeps its own ``train()``, and the family adapter only replaces the collection loop. ARS is not
served (`NOT_SERVED` says why). Adding an algorithm is one entry in `SERVED`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

from gymnasium import spaces
from sb3_contrib import QRDQN, TQC, TRPO, CrossQ, MaskablePPO, RecurrentPPO
from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3

from shepherd.agents.programmed import ProgrammedSelector
from shepherd.agents.sb3.advised import AdvisedOnPolicyAdapter
from shepherd.agents.sb3.base import SB3Algorithm
from shepherd.agents.sb3.masks import MaskableOnPolicyAdapter
from shepherd.agents.sb3.off_policy import OffPolicyAdapter
from shepherd.agents.sb3.on_policy import OnPolicyAdapter
from shepherd.agents.sb3.recurrent import RecurrentOnPolicyAdapter
from shepherd.agents.sb3.value_masks import MaskableDQNAdapter, MaskableQRDQNAdapter
from shepherd.hierarchy import PROGRAMMED

EVERY_ACTION_SPACE = (spaces.Discrete, spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)
_GSDE = "gSDE's exploration matrix would be shared by every client of the agent; use the default noise"
OFF_POLICY_EXCLUDED = (
    ("n_steps", "n-step returns need one client's consecutive steps, and the replay buffer mixes clients"),
    ("optimize_memory_usage", "it takes the next observation from the next row, which may be another client's"),
)


@dataclass(frozen=True)
class Algorithm:
    """An SB3 algorithm, the family adapter that feeds it, and which action spaces it handles; or a learner
    that is not SB3 (``learner``: builds the worker's `shepherd.agents.algorithm.Algorithm` from the agent's
    name, spaces, parameter values and training budget; ``sb3_class`` then names the class whose constructor
    gives its parameters, and ``family`` is unused)."""

    name: str
    sb3_class: type[Any]
    #: the adapter that feeds the model (model, agent name, total steps): `OnPolicyAdapter`,
    #: `OffPolicyAdapter` or a subclass of one
    family: Callable[[Any, str, int | None], SB3Algorithm]
    action_spaces: tuple[type[spaces.Space], ...]
    # parameters SB3 has but a pooled learner cannot honour, with the reason
    excluded: tuple[tuple[str, str], ...] = ()
    #: whether a step may carry an ``action_mask`` (sb3-contrib's MaskablePPO; DQN and QR-DQN, masked by Shepherd)
    masks: bool = False
    #: whether it takes Dict observations (SB3's MultiInputPolicy)
    dict_observations: bool = True
    #: where the class comes from, as `run.py algorithms` shows it
    package: str = "stable-baselines3"
    #: its SB3 policy names for vector observations and for Dict ones (RecurrentPPO's are LSTM policies)
    policies: tuple[str, str] = ("MlpPolicy", "MultiInputPolicy")
    #: its SB3 policy for image observations (NatureCNN's; None: it has none, and refuses images)
    image_policy: str | None = "CnnPolicy"
    #: the adapter of an ``advised`` agent's client learners (None: the algorithm cannot be advised)
    advised: Callable[..., SB3Algorithm] | None = None
    #: a learner that is not SB3: (agent name, observation space, action space, values, total steps) -> the
    #: algorithm a `ThreadedLearner` drives (None: an SB3 class fed by ``family``)
    learner: Callable[[str, spaces.Space, spaces.Space, dict[str, Any], int | None], Any] | None = None

    @property
    def on_policy(self) -> bool:
        return isinstance(self.family, type) and issubclass(self.family, OnPolicyAdapter)

    @property
    def continuous(self) -> bool:
        """The original Shepherd's flag: whether the algorithm handles continuous (Box) actions."""
        return spaces.Box in self.action_spaces


ON_POLICY_EXCLUDED = (("use_sde", _GSDE), ("sde_sample_freq", _GSDE))
SAC_EXCLUDED = OFF_POLICY_EXCLUDED + (("use_sde", _GSDE), ("sde_sample_freq", _GSDE), ("use_sde_at_warmup", _GSDE))


def _excluded(cls: type, reasons: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The excluded arguments that the class has (the reasons are shared between families)."""
    names = inspect.signature(cls).parameters
    return tuple((name, reason) for name, reason in reasons if name in names)


_CONTRIB = "sb3-contrib"

#: every algorithm agents can choose, in the order `run.py algorithms` lists them
SERVED = (
    Algorithm("PPO", PPO, OnPolicyAdapter, EVERY_ACTION_SPACE, ON_POLICY_EXCLUDED, advised=AdvisedOnPolicyAdapter),
    Algorithm("A2C", A2C, OnPolicyAdapter, EVERY_ACTION_SPACE, ON_POLICY_EXCLUDED, advised=AdvisedOnPolicyAdapter),
    Algorithm("DQN", DQN, MaskableDQNAdapter, (spaces.Discrete,), OFF_POLICY_EXCLUDED, masks=True),
    Algorithm("SAC", SAC, OffPolicyAdapter, (spaces.Box,), SAC_EXCLUDED),
    Algorithm("TD3", TD3, OffPolicyAdapter, (spaces.Box,), OFF_POLICY_EXCLUDED),
    Algorithm("DDPG", DDPG, OffPolicyAdapter, (spaces.Box,), OFF_POLICY_EXCLUDED),
    Algorithm("QRDQN", QRDQN, MaskableQRDQNAdapter, (spaces.Discrete,), _excluded(QRDQN, OFF_POLICY_EXCLUDED),
              package=_CONTRIB, masks=True),
    Algorithm("TQC", TQC, OffPolicyAdapter, (spaces.Box,), _excluded(TQC, SAC_EXCLUDED), package=_CONTRIB),
    Algorithm("CrossQ", CrossQ, OffPolicyAdapter, (spaces.Box,), _excluded(CrossQ, SAC_EXCLUDED), package=_CONTRIB,
              dict_observations=False, image_policy=None),
    Algorithm("TRPO", TRPO, OnPolicyAdapter, EVERY_ACTION_SPACE, _excluded(TRPO, ON_POLICY_EXCLUDED),
              package=_CONTRIB),
    Algorithm("MaskablePPO", MaskablePPO, MaskableOnPolicyAdapter,
              (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary), _excluded(MaskablePPO, ON_POLICY_EXCLUDED),
              package=_CONTRIB, masks=True),
    # not MultiBinary: sb3-contrib 2.9's recurrent buffer hands training the int8 actions SB3 stores for it, which
    # the Bernoulli log-probability refuses (RecurrentPPO.learn fails the same way on a MultiBinary env)
    Algorithm("RecurrentPPO", RecurrentPPO, RecurrentOnPolicyAdapter, (spaces.Discrete, spaces.Box, spaces.MultiDiscrete),
              _excluded(RecurrentPPO, ON_POLICY_EXCLUDED), package=_CONTRIB,
              policies=("MlpLstmPolicy", "MultiInputLstmPolicy"), image_policy="CnnLstmPolicy"),
)

#: algorithms agents run that are not among those to choose from: a programmed selector, declared with
#: ``selector:`` in a preset (a learner that is not SB3, see `Algorithm.learner`)
HIDDEN = (
    Algorithm(PROGRAMMED, ProgrammedSelector, None, (spaces.Discrete,), package="shepherd",  # type: ignore[arg-type]
              dict_observations=True, learner=ProgrammedSelector.build),
)

#: algorithms of the SB3 family that are not served, with the reason (`run.py algorithms` shows them)
NOT_SERVED = {
    "ARS": "ARS learns from the returns of whole episodes played by perturbed copies of its policy, in rounds its "
           "own loop runs (evaluate_candidates); it has no step-by-step collection for clients to feed, so serving "
           "it would mean rewriting its update rather than running sb3-contrib's",
}
