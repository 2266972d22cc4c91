"""The front ends' records of steps they answered from a snapshot (`shepherd.wire.GreedyStep`,
`GreedyVectorStep`): what the head reads back, and the digests a retry is matched by."""

from __future__ import annotations

import numpy as np
import pytest

from shepherd.wire import (BadRequest, GreedyStep, GreedyVectorStep, StepInput, VectorStepInput, fingerprint,
                           greedy_step, greedy_vector_step, parse_greedy_step, vector_fingerprint)

OBS = [np.array([0.1, -0.2], np.float32), np.array([0.3, 0.4], np.float32)]


def vector(**changes) -> VectorStepInput:
    values = dict(obs=OBS, reward=[1.0, 0.5], terminated=[False, True], truncated=[False, False],
                  final_obs=[None, np.array([9.0, 9.0], np.float32)], seq=4, masks=None)
    values.update(changes)
    return VectorStepInput.of(**values)


def test_the_head_reads_back_what_a_front_end_sends():
    single = greedy_step("k" * 20, StepInput.of(OBS[0], 1.5, done=False, seq=3), 1, version=7)
    assert parse_greedy_step(single.to_json()) == single
    many = greedy_vector_step("k" * 20, vector(), [0, 1], version=7)
    read = parse_greedy_step(many.to_json())
    assert isinstance(read, GreedyVectorStep) and read == many and read.ended == [False, True]
    assert isinstance(parse_greedy_step(greedy_step("k" * 20, StepInput.of(OBS[0], 0.0, done=True), None, 2).to_json()),
                      GreedyStep)


def test_a_vector_record_needs_one_reward_flag_and_action_per_env():
    body = greedy_vector_step("k" * 20, vector(), [0, 1], version=7).to_json()
    with pytest.raises(BadRequest, match="one item per env"):
        parse_greedy_step(body.replace(b'"actions":[0,1]', b'"actions":[0]'))
    with pytest.raises(BadRequest, match="reward"):
        parse_greedy_step(body.replace(b'"reward":[1.0,0.5]', b'"reward":[1.0,true]'))


def test_a_vector_steps_digest_changes_with_every_part_of_it():
    digest = vector_fingerprint(vector())
    assert digest == vector_fingerprint(vector()) and digest != fingerprint(StepInput.of(OBS[0], 1.0, done=False))
    others = [vector(obs=[OBS[1], OBS[0]]), vector(reward=[1.0, 0.25]),
              vector(terminated=[True, True], final_obs=[OBS[0], np.array([9.0, 9.0], np.float32)]),
              vector(truncated=[False, True], terminated=[False, False]),
              vector(final_obs=[None, np.array([9.0, 8.0], np.float32)]),
              vector(masks=[np.array([True, False]), np.array([True, True])])]
    assert len({digest, *map(vector_fingerprint, others)}) == 1 + len(others)
    assert greedy_vector_step("k" * 20, vector(seq=None), [0, 1], 1).fingerprint == ""  # no seq: never a retry
