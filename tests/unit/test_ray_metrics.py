"""The actor's side of SB3's training values on Ray (`shepherd.agents.ray.metrics`): what the model records
is taken once, as plain Python values, and recorded into the head's writer as SB3 would record it."""

import pickle

import numpy as np
import torch

from shepherd.agents.ray.metrics import RecordingLogger, plain, replay


def test_what_the_model_records_is_taken_once_as_plain_values():
    recording = RecordingLogger()
    recording.record("train/loss", torch.tensor(0.5))
    recording.record("train/approx_kl", np.float32(0.25))
    recording.record("train/n_updates", 4, exclude="tensorboard")
    recording.record("train/n_updates", 6, exclude="tensorboard")  # a later value replaces it, as in SB3
    recording.record_mean("rollout/mean", 1.0)
    recording.record_mean("rollout/mean", 3.0)
    recording.record("train/histogram", np.zeros(3))  # not a scalar: left out
    recording.dump(10)  # the actor dumps nothing; the head does
    taken = recording.take()
    assert taken == {"train/loss": (0.5, ("",)), "train/approx_kl": (0.25, ("",)),
                     "train/n_updates": (6, ("tensorboard",)), "rollout/mean": (2.0, ("",))}
    assert all(type(value) in (int, float) for value, _ in taken.values())
    assert pickle.loads(pickle.dumps(taken)) == taken  # what crosses to the head
    assert recording.take() == {}


def test_the_head_records_them_into_its_writers_logger():
    class Writer:
        logger = RecordingLogger()

    replay(Writer(), {"train/loss": (0.5, ("",)), "train/n_updates": (6, ("tensorboard",))})
    assert Writer.logger.name_to_value == {"train/loss": 0.5, "train/n_updates": 6}
    assert Writer.logger.name_to_excluded["train/n_updates"] == ("tensorboard",)
    replay(None, {"train/loss": (1.0, ("",))})  # no writer: nothing to do


def test_plain_values():
    assert plain(np.int64(3)) == 3 and type(plain(np.int64(3))) is int
    assert plain("train") == "train" and plain(True) is True
    assert plain(torch.zeros(2)) is None and plain(object()) is None
