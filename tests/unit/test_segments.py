"""The rollout's segment table (`shepherd.agents.sb3.segments.Segments`): columns taken and released, a split's
later half, rows filled up to a full rollout, and the state a restart takes back."""

from __future__ import annotations

import numpy as np

from shepherd.agents.sb3.segments import Segments


def test_segments_are_taken_split_filled_and_released_until_the_rollout_is_full():
    table = Segments.empty(2, 5)
    assert table.free() == [0, 1] and table.untouched and not table.full
    table.take(0, owner=7)
    assert table.free() == [1]
    assert table.filled(0, 2) is False and table.at(0) == (2, 0)
    later = table.split(0, owner=8)  # rows 2..4 left: the later half, rows 4..4, is the new segment's
    assert later == 2 and table.at(later) == (4, 0) and table.end[0] == 4 and table.rows(0) == 2
    assert table.cut_short(0, 3) and not table.cut_short(later, 4) and table.ends_column(later)
    table.release(0, owner=8)  # not its owner: kept
    assert table.owner[0] == 7
    assert table.filled(0, 2) and table.filled(later) and table.filled(1, 5)
    table.release(0)
    assert table.full and table.free() == []


def test_the_state_a_restart_takes_back_has_every_owner_gone():
    table = Segments.empty(2, 4)
    table.take(1, owner=3)
    table.filled(1, 3)
    table.last_values[1] = 0.5
    again = Segments.load(2, 4, table.state())
    assert again.position == [0, 3] and again.rows_left == 5 and again.owner == [None, None]
    assert np.array_equal(again.last_values, [0.0, 0.5]) and again.free() == [0, 1]
