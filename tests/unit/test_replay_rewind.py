"""An upload whose update went NaN is taken back out of the replay buffer (`_ReplayMark.rewind`: the buffer then
holds what it held). A full buffer's overwritten rows got SB3's arrays back, but not a masked DQN's next-observation
masks (the old transitions kept the refused upload's masks, so the target's max ran over the wrong actions), and
the model's step counts stayed moved (``num_timesteps``; DQN's ``_n_calls``, which drives its exploration schedule
and target updates)."""

from __future__ import annotations

import numpy as np

from shepherd.agents import build_learner
from shepherd.agents.sb3.replay_uploads import _ReplayMark
from shepherd.wire.spaces import parse_space


def test_a_rewound_upload_gives_back_the_next_masks_and_the_step_counts():
    learner = build_learner("DQN", "d", parse_space([[2], -1, 1]), parse_space(3),
                            {"buffer_size": 8, "learning_starts": 1000, "seed": 0}, None)
    try:
        adapter = learner.algorithm
        only_first, only_last = np.array([True, False, False]), np.array([False, False, True])
        obs = np.zeros(2, np.float32)
        for _ in range(10):  # a full buffer (8 rows), every next mask allowing action 0 only
            adapter.add_transition(obs, obs, np.array([0]), 0.0, False, False, only_first)
        replay, model = adapter._replay, adapter.model
        masks, steps, calls = replay.next_masks.copy(), model.num_timesteps, model._n_calls
        mark = _ReplayMark.of(adapter, 3)
        for _ in range(3):  # the upload refused later: its next masks allow action 2 only
            adapter.add_transition(obs, obs, np.array([1]), 9.0, False, False, only_last)
        model.num_timesteps, model._n_calls = steps + 3, calls + 3  # as recording the upload moves them
        mark.rewind(adapter)
        assert (replay.rewards == 0).all()
        assert (replay.next_masks == masks).all()
        assert (model.num_timesteps, model._n_calls) == (steps, calls)
    finally:
        learner.close()
