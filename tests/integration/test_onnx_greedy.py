"""An image agent's greedy steps answered on the server from its greedy ONNX file (`shepherd.agents.onnx_greedy`):
the learner's own greedy actions (torch), one step or a vector step at a time, only with the file of the learner's
current version, under masks for a masked agent, and not for an agent whose filters the file cannot carry."""

from __future__ import annotations

import time

import numpy as np

from shepherd.agents import ActMode, build_learner
from shepherd.agents.core import Kind, Request
from shepherd.definition import Filters
from shepherd.wire.spaces import parse_space
from tests.frames import frames

EYES = parse_space(["Image", [36, 36, 3]])
PARAMS = {"seed": 1, "n_steps": 16, "batch_size": 16, "n_epochs": 1}


def train(learner, rng, count: int) -> None:
    """``count`` explore steps of actor 1 (past an update every 16: the weights move)."""
    learner.begin_episode(1, frames(rng, 1)[0], ActMode.EXPLORE).result(30)
    for frame in frames(rng, count):
        learner.step(1, float(frame[..., 0].mean() > frame[..., 1].mean()), frame, ActMode.EXPLORE).result(30)


def until_loaded(learner, frame, mask=None) -> None:
    """Greedy steps until the file of the learner's current version answers one (asking builds and loads it)."""
    answered = learner.file_greedy.answered
    for _ in range(600):  # at most 30 s
        learner.step(7, 0.0, frame, ActMode.GREEDY, mask).result(30)
        if learner.file_greedy.answered > answered:
            return
        time.sleep(0.05)
    raise AssertionError("the greedy file never answered")


def torch_greedy(learner, observed, masks=None) -> list[int]:
    """The learner's own greedy actions (a BEGIN is always answered by the learner's torch forward)."""
    return [int(learner.begin_episode(100 + i, frame, ActMode.GREEDY, None if masks is None else masks[i]).result(30))
            for i, frame in enumerate(observed)]


def test_an_image_agents_greedy_steps_come_from_its_greedy_file_with_the_learners_actions():
    learner = build_learner("PPO", "eyes", EYES, parse_space(4), PARAMS, None)
    assert learner.greedy is None and learner.file_greedy is not None  # convolutions: no numpy snapshot
    learner.start()
    try:
        rng = np.random.default_rng(0)
        train(learner, rng, 20)
        version = learner.policy_version
        assert version > 0
        observed = frames(rng, 40)
        until_loaded(learner, observed[0])
        before = learner.file_greedy.answered
        futures = [learner.step(7, 0.0, frame, ActMode.GREEDY) for frame in observed]
        ours = [int(future.result(30)) for future in futures]
        assert learner.file_greedy.answered == before + len(observed)  # every one from the file
        assert {future.policy_version for future in futures} == {version}
        expected = torch_greedy(learner, observed)
        assert len(set(expected)) > 1, expected  # a comparison that could fail
        assert ours == expected
        vector = learner.submit([Request(Kind.STEP, 200 + i, frame, 0.0, False, ActMode.GREEDY)
                                 for i, frame in enumerate(observed[:8])])
        assert [int(action) for action in vector.result(30)] == expected[:8]
        assert learner.file_greedy.answered == before + len(observed) + 8
        assert learner.policy_version == version  # greedy steps changed nothing
    finally:
        learner.close()


def test_after_an_update_the_old_file_answers_nothing():
    learner = build_learner("PPO", "eyes", EYES, parse_space(4), PARAMS, None)
    learner.start()
    try:
        rng = np.random.default_rng(1)
        train(learner, rng, 4)
        observed = frames(rng, 12)
        until_loaded(learner, observed[0])
        old = learner.policy_version
        train(learner, rng, 20)  # an update: a new version
        assert learner.policy_version > old
        answered = learner.file_greedy.answered
        future = learner.step(7, 0.0, observed[1], ActMode.GREEDY)
        future.result(30)
        assert learner.file_greedy.answered == answered  # the learner answered: its file is of an older version
        assert future.policy_version == learner.policy_version
        until_loaded(learner, observed[0])  # the new version's file, built and loaded on asking
        futures = [learner.step(7, 0.0, frame, ActMode.GREEDY) for frame in observed]
        assert [int(f.result(30)) for f in futures] == torch_greedy(learner, observed)
        assert {f.policy_version for f in futures} == {learner.policy_version}
    finally:
        learner.close()


def test_a_masked_image_agents_file_answers_under_the_masks_as_the_learner():
    learner = build_learner("MaskablePPO", "eyes", EYES, parse_space(4), PARAMS, None)
    assert learner.file_greedy is not None
    learner.start()
    try:
        rng = np.random.default_rng(3)
        observed = frames(rng, 24)
        masks = []
        for _ in observed:
            mask = rng.random(4) < 0.5
            mask[rng.integers(4)] = True
            masks.append(mask)
        until_loaded(learner, observed[0], masks[0])
        before = learner.file_greedy.answered
        ours = [int(learner.step(7, 0.0, frame, ActMode.GREEDY, mask).result(30)) for frame, mask in zip(observed, masks)]
        assert learner.file_greedy.answered == before + len(observed)
        assert all(mask[action] for action, mask in zip(ours, masks))
        assert ours == torch_greedy(learner, observed, masks)
    finally:
        learner.close()


def test_an_image_agent_with_filters_is_answered_by_its_learner():
    """A frame stack is each actor's past frames, kept by the learner: the file has no input for it."""
    learner = build_learner("PPO", "eyes", EYES, parse_space(4), PARAMS, None, Filters(frame_stack=4))
    assert learner.file_greedy is None
    assert build_learner("PPO", "pole", parse_space([[4], -1, 1]), parse_space(2), PARAMS, None).file_greedy is None
