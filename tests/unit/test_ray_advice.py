"""The advice of an advised client whose learner is a Ray actor: what the head forwards is plain data (and
an adoption request with the tried policy's arrays), the actor's `Advice` is set from it, and the
advisor's filter statistics, received as the checkpoint keeps them,
normalise as the advisor's own filters would (no Ray cluster: the parts that need none)."""

import json
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e .[ray])")

from shepherd.agents.advice import Adoption, Advice, Advisor  # noqa: E402
from shepherd.agents.sb3.advised import advisor_observations  # noqa: E402
from shepherd.agents.core import VersionedWeights  # noqa: E402
from shepherd.agents.filters import Filtering, Filters  # noqa: E402
from shepherd.agents.ray.advice import RemoteAdvisor, advice_data, advice_status, apply_advice  # noqa: E402


class Status:
    """The head's view of an advisor's learner in an actor (`shepherd.agents.ray.status._RemoteStatus`)."""

    actor_name = "shepherd-learner/3/arm-1"


class Adapter:
    """An advised learner in its actor: its `Advice` and its filters."""

    def __init__(self, filtering=None) -> None:
        self.name = "arms"
        self.advice = Advice(strength=0.5)
        self.filtering = filtering


def test_the_head_forwards_the_advisor_by_its_actor_name_and_the_returns_as_plain_data():
    head = Advice()
    assert advice_data(head) == {"advisor": None, "name": None, "recent_return": None, "own_return": None,
                                 "adopt": None}
    head.advisor = Advisor("arm-1", Status(), Path("/head/only/model.zip"), 120.0)  # type: ignore[arg-type]
    head.own_return = 30.0
    data = advice_data(head)
    assert json.loads(json.dumps(data)) == data  # nothing but plain values
    assert data == {"advisor": "shepherd-learner/3/arm-1", "name": "arm-1", "recent_return": 120.0, "own_return": 30.0,
                    "adopt": None}
    tried = VersionedWeights(4, {"w": np.ones(2, np.float32)})
    head.adopt = Adoption("arm-1", 2, tried)  # and the very policy tried, arrays and all
    data = advice_data(head)
    assert data["adopt"] == Adoption("arm-1", 2) and data["adopt"].weights is tried
    assert data != {**data, "adopt": Adoption("arm-1", 3)}  # a new request is sent again


def test_the_actor_sets_its_advice_from_the_forwarded_data_and_keeps_its_advisor_source():
    adapter = Adapter()
    apply_advice(adapter, {"advisor": "shepherd-learner/3/arm-1", "name": "arm-1", "recent_return": 120.0,
                           "own_return": 30.0, "adopt": Adoption("arm-1", 2)}, "shepherd")
    assert adapter.advice.adopt == Adoption("arm-1", 2)  # adopted in the actor after its next update
    advisor = adapter.advice.advisor
    assert advisor is not None and advisor.name == "arm-1" and advisor.recent_return == 120.0
    assert advisor.model_path is None  # no advice before the advisor's actor publishes
    assert isinstance(advisor.weights, RemoteAdvisor) and advisor.weights.actor_name == "shepherd-learner/3/arm-1"
    assert adapter.advice.own_return == 30.0
    assert adapter.advice.strength == 0.5  # the actor's own parameters stay
    assert adapter.advice.strength_at(0) == pytest.approx(0.5 * (120.0 - 30.0) / 120.0)  # fades as on the head
    source = advisor.weights
    apply_advice(adapter, {"advisor": "shepherd-learner/3/arm-1", "name": "arm-1", "recent_return": 150.0,
                           "own_return": 40.0}, "shepherd")
    assert adapter.advice.advisor.weights is source  # the same advisor: its weights stay cached
    apply_advice(adapter, {"advisor": "shepherd-learner/3/arm-2", "name": "arm-2", "recent_return": 150.0,
                           "own_return": 40.0}, "shepherd")
    assert adapter.advice.advisor.weights is not source
    assert advice_status(adapter) == {"advisor": "shepherd-learner/3/arm-2", "reads": 0, "version": -1, "adoptions": 0,
                                     "adopted_at": None}
    apply_advice(adapter, {"advisor": None, "name": None, "recent_return": None, "own_return": 41.0}, "shepherd")
    assert adapter.advice.advisor is None and adapter.advice.own_return == 41.0


def test_a_learner_without_advice_refuses_it():
    adapter = Adapter()
    del adapter.advice
    with pytest.raises(ValueError, match="takes no advice"):
        apply_advice(adapter, {"advisor": None, "own_return": None}, "shepherd")


def test_the_advisors_filter_statistics_normalise_as_its_own_filters_do():
    space = spaces.Box(-10, 10, (2,))
    filters = Filters(normalize_observations=True)
    own, advisor = Filtering(filters, space, 0.99), Filtering(filters, space, 0.99)
    rng = np.random.default_rng(5)
    own.observations[None].update(rng.normal([1.0, -2.0], [0.5, 3.0], size=(200, 2)))
    advisor.observations[None].update(rng.normal([-1.0, 4.0], [2.0, 0.2], size=(200, 2)))
    remote = RemoteAdvisor("shepherd-learner/3/arm-1", "shepherd", own)
    assert remote.filtering is not None
    remote.filtering.load(json.loads(json.dumps(advisor.state())))  # as the advisor's actor sends them
    raw = rng.normal(size=(5, 2))
    converted = advisor_observations(own.normalize_obs(raw), own, remote.filtering)  # type: ignore[arg-type]
    assert np.allclose(converted, advisor.normalize_obs(raw), atol=1e-4)
    assert RemoteAdvisor("x", "shepherd", None).filtering is None  # no normalisation: nothing to convert
