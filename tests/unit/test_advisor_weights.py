"""An advisee holds its advisor's weights by the object published, not by its version number: an advisor's Ray
actor replaced after a loss numbers its versions past the last one the head saw, but an advisee's actor reads the
advisor's actor directly and may have read a later version, which the replacement then gives to other weights
(the advisee kept the lost ones for that version)."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy

from shepherd.agents.advice import Advisor
from shepherd.agents.core import VersionedWeights
from shepherd.agents.sb3.advised import AdvisorPolicy


class Source:
    """What an advisee's `RemoteAdvisor` hands out: the weights last read from the advisor's actor."""

    weights: VersionedWeights | None = None

    def latest_weights(self) -> VersionedWeights | None:
        return self.weights


def test_weights_of_a_version_number_seen_before_are_loaded_when_they_are_other_weights():
    policy = ActorCriticPolicy(spaces.Box(-1, 1, (4,)), spaces.Discrete(2), lambda _: 1e-3, net_arch=[8])
    copy = AdvisorPolicy(policy)
    source = Source()
    advisor = Advisor("advisor", source, None)

    def first_weight() -> float:
        return float(next(iter(copy.of(advisor).state_dict().values())).flatten()[0])

    def filled(value: float) -> dict:
        return {key: np.full(tensor.shape, value, np.float32) for key, tensor in policy.state_dict().items()}

    source.weights = VersionedWeights(8, filled(0.5))  # read from the advisor's actor, which then died
    assert first_weight() == 0.5
    source.weights = VersionedWeights(8, filled(-0.25))  # its replacement's version 8: the checkpoint's weights
    assert first_weight() == -0.25
    held = copy.of(advisor)
    assert copy.of(advisor) is held and first_weight() == -0.25  # the same weights again: nothing reloaded
