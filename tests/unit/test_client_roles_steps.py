"""What `shepherd.client`'s PettingZoo drivers send for one agent's turn or one parallel step: a role's action mask
goes with its observation while it lives and with its last one at a time limit (a value-based learner bootstraps
over those actions), never with a terminal one."""

from __future__ import annotations

import pytest

from shepherd.client.roles import _aec_turn, _ParallelCopy

MASK = [1, 0, 1]


class AecEnd:
    def __init__(self, terminated: bool, truncated: bool) -> None:
        self.flags = terminated, truncated

    def last(self):
        return {"observation": [0.5], "action_mask": MASK}, 1.0, *self.flags, {}


@pytest.mark.parametrize("terminated, truncated, sent", [(False, False, True), (False, True, True), (True, False, False)])
def test_an_aec_turn_sends_its_mask_unless_the_agent_terminated(terminated, truncated, sent):
    step, ended = _aec_turn(AecEnd(terminated, truncated), "p0", {})
    assert ended == (terminated or truncated) and step["obs"] == {"p0": [0.5]}
    assert step.get("action_mask") == ({"p0": MASK} if sent else None)


def test_a_parallel_step_sends_masks_of_live_and_truncated_agents_only():
    copy = _ParallelCopy(env=None)
    copy.observations = {a: {"observation": [0.0], "action_mask": MASK} for a in ("live", "cut", "over")}
    copy.ends = {"cut": (False, True), "over": (True, False)}
    assert copy.step()["action_mask"] == {"live": MASK, "cut": MASK}
