"""What crosses between a caller and a learner's worker is plain data: it could cross a process boundary."""

import dataclasses
import pickle

import numpy as np

from shepherd.agents.core import ActMode, Answer, Kind, Outcome, Request, VersionedWeights


def _plain(value) -> bool:
    if isinstance(value, (type(None), bool, int, float, str, np.ndarray, np.generic)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _plain(item) for key, item in value.items())
    return isinstance(value, (Kind, ActMode, Outcome))


def test_requests_answers_and_weights_hold_no_futures_or_callables_and_survive_pickling():
    messages = [
        Request(Kind.STEP, actor=3, obs=np.arange(4, dtype=np.float32), reward=1.0, mode=ActMode.EXPLORE, ticket=7),
        Request(Kind.BEGIN, actor=1, obs={"a": np.zeros(2), "b": np.int64(1)}, mode=ActMode.GREEDY, ticket=8),
        Answer(7, Outcome.ACTION, np.int64(1), version=4),
        Answer(8, Outcome.FAILED, detail="FloatingPointError: update 3 made the policy NaN"),
        VersionedWeights(4, {"action_net.weight": np.ones((2, 4), dtype=np.float32)}),
    ]
    for message in messages:
        assert all(_plain(getattr(message, f.name)) for f in dataclasses.fields(message)), message
        copy = pickle.loads(pickle.dumps(message))
        assert type(copy) is type(message)
        for f in dataclasses.fields(message):
            a, b = getattr(message, f.name), getattr(copy, f.name)
            if isinstance(a, dict):
                assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
            else:
                assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
