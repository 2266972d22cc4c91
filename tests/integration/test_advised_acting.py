"""An advised client acting at the client (issue 45): its training file draws from the product of its own policy and
its advisor's, as its learner acts at the server (the advisor's network normalising the raw observations with the
advisor's own statistics), and the server evaluates the version's uploads under the very same product (the
version's `AdviceFrame`), whatever the advisor publishes meanwhile.

The draw tests run the file 20,000 times on one observation with seeded uniform noise (deterministic) and test
the draws against the mixed distribution torch computes (`shepherd.agents.sb3.mixing`) at ALPHA = 0.001, and
against the client's own distribution, which they must reject: the advice is in the file."""

from __future__ import annotations

import math
from concurrent.futures import Future
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch as th
from scipy import stats

from shepherd.agents.advice import Advisor
from shepherd.agents.core import VersionedWeights
from shepherd.agents.export.behaviour import behaviour_adapter
from shepherd.agents.export.export import metadata
from shepherd.agents.factories import build_advised_learner
from shepherd.agents.greedy_policy import weights_of
from shepherd.agents.sb3.mixing import advice_rows, mix
from shepherd.definition import Filters
from shepherd.wire.experience import Experience
from shepherd.wire.spaces import parse_space

ALPHA = 1e-3
DRAWS = 20_000
OBS_SPACE = parse_space([[3], "-inf", "inf"])
OBS = np.array([0.4, -1.1, 0.7], dtype=np.float32)
SMALL = {"policy_kwargs": {"net_arch": [16]}, "seed": 0, "n_steps": 16, "batch_size": 16}


class Published:
    """The advisor's learner as the advisee sees it (`WeightSource`): its published weights and its filters."""

    def __init__(self, policy: Any, filtering: Any = None, version: int = 7) -> None:
        self.weights = VersionedWeights(version, weights_of(policy))
        self.filtering = filtering

    @property
    def version(self) -> int:
        return self.weights.version

    def latest_weights(self) -> VersionedWeights:
        return self.weights


def spread(policy: Any, seed: int, scale: float = 0.6) -> None:
    """Weights drawn wide, so that the distributions are far from uniform and from each other."""
    generator = th.Generator().manual_seed(seed)
    with th.no_grad():
        for parameter in policy.parameters():
            parameter.copy_(th.normal(0.0, scale, parameter.shape, generator=generator))


def advised_pair(action_spec: Any, strength: float = 2.0, filters: Filters | None = None):
    """A client's advised learner (not started) whose advisor is another client's learner of the same agent."""
    values = {**SMALL, "advice_strength": strength}
    own = build_advised_learner("PPO", "c1", OBS_SPACE, parse_space(action_spec), values, None, filters)
    advisor = build_advised_learner("PPO", "c2", OBS_SPACE, parse_space(action_spec), values, None, filters)
    spread(own.algorithm.model.policy, 3)
    spread(advisor.algorithm.model.policy, 4)
    source = Published(advisor.algorithm.model.policy, advisor.algorithm.filtering)
    own.algorithm.advice.advisor = Advisor("c2", source, None)  # type: ignore[arg-type]
    return own.algorithm, advisor.algorithm, source


def run(data: bytes, obs: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The file's ``action`` and ``sample`` for a batch, and the uniform noise it was given."""
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    noise = np.random.default_rng(seed).random((len(obs), metadata(onnx.load_from_string(data))["noise_size"]),
                                               dtype=np.float32)
    action, sample = session.run(["action", "sample"], {"obs": obs.astype(np.float32), "noise": noise})
    return action, sample, noise


def own_and_mixed(own: Any, advisor: Any, obs: np.ndarray, strength: float, advisor_obs: np.ndarray | None = None):
    """The client's own distribution of a batch and its product with the advisor's (torch), from scratch."""
    with th.no_grad():  # SB3 hands out one distribution object per policy: each is read before the next call
        tensor, _ = own.model.policy.obs_to_tensor(obs)
        mine = own.model.policy.get_distribution(tensor).distribution
        theirs_obs, _ = advisor.model.policy.obs_to_tensor(obs if advisor_obs is None else advisor_obs)
        rows = advice_rows(advisor.model.policy.get_distribution(theirs_obs), strength)
        mixed = mix(own.model.policy.get_distribution(tensor), rows).distribution
    return mine, mixed, rows.numpy()


def expected_counts(probs: th.Tensor) -> np.ndarray:
    """The expected counts of DRAWS draws (in float64, summing to DRAWS as the chi-square test wants)."""
    p = probs.numpy()[0].astype(np.float64)
    return p / p.sum() * DRAWS


def test_a_discrete_file_draws_from_the_product_with_the_advisor():
    own, advisor, _ = advised_pair(4)
    data = behaviour_adapter(own, "tester", "PPO", "train")
    assert metadata(onnx.load_from_string(data))["advice"] == {"advisor": "c2", "strength": 2.0}
    action, _, _ = run(data, np.repeat(OBS[None], DRAWS, axis=0))
    mine, mixed, _ = own_and_mixed(own, advisor, OBS[None], 2.0)
    counts = np.bincount(action, minlength=4)
    assert stats.chisquare(counts, expected_counts(mixed.probs)).pvalue > ALPHA, (counts, mixed.probs)
    assert stats.chisquare(counts, expected_counts(mine.probs)).pvalue < ALPHA, "the advice changed nothing"


def test_a_gaussian_file_draws_from_the_product_of_the_gaussians():
    own, advisor, _ = advised_pair([[2], -1, 2])
    _, sample, _ = run(behaviour_adapter(own, "tester", "PPO", "train"), np.repeat(OBS[None], DRAWS, axis=0))
    mine, mixed, _ = own_and_mixed(own, advisor, OBS[None], 2.0)
    for d in range(2):
        mean, std = float(mixed.mean[0, d]), float(mixed.stddev[0, d])
        assert stats.kstest(sample[:, d], stats.norm(mean, std).cdf).pvalue > ALPHA, d
        theirs = stats.norm(float(mine.mean[0, d]), float(mine.stddev[0, d])).cdf
        assert stats.kstest(sample[:, d], theirs).pvalue < ALPHA, f"dimension {d}: the advice changed nothing"


def test_without_an_advisor_the_file_is_the_clients_own_policy():
    own, _, _ = advised_pair(4)
    own.advice.advisor = None
    data = behaviour_adapter(own, "tester", "PPO", "train")
    assert "advice" not in metadata(onnx.load_from_string(data))
    action, _, _ = run(data, np.repeat(OBS[None], DRAWS, axis=0))
    mine, _, _ = own_and_mixed(own, own, OBS[None], 2.0)
    assert stats.chisquare(np.bincount(action, minlength=4), expected_counts(mine.probs)).pvalue > ALPHA


def normalising_pair():
    """A Gaussian pair with observation normalisation, each client's statistics its own."""
    own, advisor, source = advised_pair([[2], -1, 2], filters=Filters(normalize_observations=True))
    own.filtering.observations[None].moments = (np.array([1.0, -2.0, 0.5]), np.array([4.0, 0.25, 9.0]))
    own.version_filtering = own.filtering.frozen()
    advisor.filtering.observations[None].moments = (np.array([-3.0, 0.0, 2.0]), np.array([0.5, 16.0, 1.0]))
    return own, advisor, source


def experience_of(obs: np.ndarray, sample: np.ndarray, version: int, steps: int, n: int) -> Experience:
    return Experience.of(obs.reshape(steps + 1, n, 3), sample[:steps * n].reshape(steps, n, 2),
                         np.zeros((steps, n)), np.zeros((steps, n), bool), np.zeros((steps, n), bool),
                         [[None] * n for _ in range(steps)], version)


def test_the_server_evaluates_an_upload_under_the_product_the_file_drew_from():
    """File and server agree row by row, each client's observations normalised with its own statistics: the
    file's sample minus the server's mixed mean, over its deviation, is the file's Box-Muller normal of the
    noise; the stored log-probabilities are that Gaussian's, the stored advice rows the advisor's."""
    own, advisor, _ = normalising_pair()
    steps, n = 4, 2
    obs = np.random.default_rng(1).normal(0, 3, ((steps + 1) * n, 3)).astype(np.float32)
    _, sample, noise = run(behaviour_adapter(own, "tester", "PPO", "train"), obs)
    seen, _, log_probs, _, advice = own.uploads._evaluate(experience_of(obs, sample, own.version, steps, n))

    rows = steps * n
    own_obs = own.version_filtering.normalize_obs(obs[:rows])
    advisor_obs = advisor.filtering.frozen().normalize_obs(obs[:rows])
    _, mixed, expected_rows = own_and_mixed(own, advisor, own_obs, 2.0, advisor_obs)
    u1, u2 = noise[:rows, :1], noise[:rows, 1:2]
    radius = np.sqrt(-2.0 * np.log(1.0 - u1))
    z = np.concatenate([radius * np.cos(2 * math.pi * u2), radius * np.sin(2 * math.pi * u2)], axis=1)
    np.testing.assert_allclose((sample[:rows] - mixed.mean.numpy()) / mixed.stddev.numpy(), z, atol=2e-3)
    np.testing.assert_allclose(log_probs.reshape(-1), mixed.log_prob(th.as_tensor(sample[:rows])).sum(-1).numpy(),
                               rtol=1e-5, atol=1e-5)
    assert advice is not None
    np.testing.assert_allclose(advice.reshape(rows, -1), expected_rows, rtol=1e-5)
    assert np.abs(expected_rows).min() > 0


def test_the_advice_of_a_version_is_fixed_until_the_next():
    own, advisor, source = normalising_pair()
    obs = np.random.default_rng(2).normal(0, 3, (6, 3)).astype(np.float32)
    behaviour_adapter(own, "tester", "PPO", "train")  # the version's file fixes its frame
    upload = experience_of(obs, np.zeros((5, 2), np.float32), own.version, 5, 1)
    before = own.upload_advice(upload)
    spread(advisor.model.policy, 5)  # the advisor publishes new weights and statistics
    advisor.filtering.observations[None].moments = (np.zeros(3), np.ones(3))
    source.weights = VersionedWeights(8, weights_of(advisor.model.policy))
    np.testing.assert_array_equal(own.upload_advice(upload), before)
    own.new_version()  # the client's next update: its next file and uploads take the new advice
    after = own.upload_advice(upload)
    _, _, expected = own_and_mixed(own, advisor, obs[:5], 2.0, advisor.filtering.frozen().normalize_obs(obs[:5]))
    assert not np.allclose(after, before)
    np.testing.assert_allclose(after, expected, rtol=1e-5)


def test_an_advised_clients_upload_is_stored_with_its_advice_rows():
    """Through the learner's thread: a one-env session's upload fills its segment of a two-segment rollout,
    each row with the advice the version's frame gives its observation."""
    own, advisor, _ = normalising_pair()
    learner = build_advised_learner("PPO", "c1", OBS_SPACE, parse_space([[2], -1, 2]),
                                    {**SMALL, "advice_strength": 2.0, "n_envs": 2}, None,
                                    Filters(normalize_observations=True))
    learner.algorithm.advice.advisor = own.advice.advisor
    learner.start()
    try:
        reply = learner.begin_uploads(1, 1).result(30)
        steps = reply.steps
        obs = np.random.default_rng(3).normal(0, 3, (steps + 1, 3)).astype(np.float32)
        version = learner.algorithm.version  # the learner's thread waits for the upload meanwhile
        _, sample, _ = run(behaviour_adapter(learner.algorithm, "tester", "PPO", "train"), obs[:steps])
        upload = experience_of(obs, sample, version, steps, 1)
        expected = learner.algorithm.upload_advice(upload)
        done: Future = learner.learn_experience(1, upload)
        assert done.result(30).accepted == steps
        buffer = learner.algorithm.buffer
        column = int(np.flatnonzero(np.abs(buffer.advice).sum(axis=(0, 2)) > 0)[0])
        np.testing.assert_allclose(buffer.advice[:steps, column], expected, rtol=1e-6)
        assert np.abs(buffer.advice[:, 1 - column]).sum() == 0  # the other segment: nobody wrote it yet
    finally:
        learner.close()


def test_a_new_client_acting_at_the_client_adopts_before_it_learns():
    """As a server-acting one adopts in its first batch: a client-acting session's opening carries out the graph's
    adoption of a client that has learned nothing, and the session acts with the adopted policy's version."""
    from shepherd.agents.advice import Adoption

    own, advisor, source = advised_pair([[2], -1, 2])
    learner = build_advised_learner("PPO", "c1", OBS_SPACE, parse_space([[2], -1, 2]), {**SMALL, "n_envs": 2},
                                    None)
    learner.algorithm.advice.advisor = own.advice.advisor
    learner.algorithm.advice.adopt = Adoption("c2", 1, source.weights)
    learner.start()
    try:
        reply = learner.begin_uploads(1, 1).result(30)
        assert learner.algorithm.adoptions == 1 and reply.policy_version == 1
        adopted = learner.algorithm.model.policy.state_dict()
        for name, array in source.weights.arrays.items():
            np.testing.assert_array_equal(adopted[name].numpy(), array)
    finally:
        learner.close()


def test_a_learner_restored_from_its_checkpoint_does_not_adopt_again_a_request_it_carried_out(tmp_path):
    """Under --ray a replaced actor is restored from the checkpoint and its head sends the advice again, the last
    adopt request with it (the head's `Advice` keeps it): the restored learner adopted it again, over the weights
    learned since. The checkpoint keeps the number of the last request carried out."""
    from shepherd.agents.advice import Adoption

    own, advisor, source = advised_pair([[2], -1, 2])
    request = Adoption("c2", 7, source.weights)
    learner = build_advised_learner("PPO", "c1", OBS_SPACE, parse_space([[2], -1, 2]), {**SMALL, "n_envs": 2},
                                    None)
    learner.algorithm.advice.advisor, learner.algorithm.advice.adopt = own.advice.advisor, request
    learner.start()
    try:
        learner.begin_uploads(1, 1).result(30)
        assert learner.algorithm.adoptions == 1
        path = tmp_path / "model.zip"
        learner.checkpoint(path, {}).result(30)
    finally:
        learner.close()
    restored = build_advised_learner("PPO", "c1", OBS_SPACE, parse_space([[2], -1, 2]), {**SMALL, "n_envs": 2}, None)
    restored.algorithm.restore(path)
    restored.algorithm.advice.advisor, restored.algorithm.advice.adopt = own.advice.advisor, request  # sent again
    with th.no_grad():
        for parameter in restored.algorithm.model.policy.parameters():
            parameter.add_(1.0)  # as the weights it learned after the adoption
    learned = {k: v.clone() for k, v in restored.algorithm.model.policy.state_dict().items()}
    restored.start()
    try:
        restored.begin_uploads(1, 1).result(30)
        assert restored.algorithm.adoptions == 1  # (the restored count), and no new adoption
        now = restored.algorithm.model.policy.state_dict()
        assert all(th.equal(now[k], learned[k]) for k in learned)
    finally:
        restored.close()
