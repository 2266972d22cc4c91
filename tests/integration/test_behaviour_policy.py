"""The behaviour policy file (issue 35, acting at the client) draws as SB3 does, state by state.

Each distribution test runs the file `behaviour_adapter` builds 20,000 times on one fixed observation, with
uniform noise from a fixed seed (so the tests are deterministic), and tests the draws against the
distribution SB3's own policy has for that observation, at significance level ALPHA = 0.001 per test:
Pearson's chi-square (categorical), the exact binomial test (a bit, an epsilon-greedy frequency, a clipped
share), Kolmogorov-Smirnov per dimension (Gaussian, squashed Gaussian through atanh, uniform). Policies'
weights are drawn wider than SB3's initialisation so that the distributions are far from uniform. Each
distribution test was seen failing with the sampling broken once: the categorical's uniform scaled by
0.97, Box-Muller with -ln instead of -2 ln or its sine replaced by the cosine, half the epsilon, SAC's
log-deviation taken as the deviation, a Bernoulli bit inverted, the mask left out, the off-policy
heatup's 2u - 1 as 2u - 0.9, the clip of off-policy samples left out.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch as th
from sb3_contrib import RecurrentPPO  # noqa: F401  (registered with the other algorithms)
from stable_baselines3 import PPO

from shepherd.agents import build_learner, parameters
from shepherd.agents.export.behaviour import PHASES, NotActableAtClient, behaviour_adapter, behaviour_onnx
from shepherd.agents.export.export import Normalization, metadata
from shepherd.agents.sb3.on_policy import OnPolicyAdapter
from shepherd.agents.sb3.base import SpacesEnv
from shepherd.definition import Filters
from shepherd.wire.spaces import parse_space

ALPHA = 1e-3  # significance level of every statistical test here
DRAWS = 20_000
BOX_OBS = [[3], "-inf", "inf"]
OBS = np.array([0.4, -1.1, 0.7], dtype=np.float32)
BOX = [[2], -1, 2]  # bounds that clip a Gaussian often
SMALL = {"policy_kwargs": {"net_arch": [16]}, "seed": 0}


class _Stats:
    """``scipy.stats``, imported when a test first uses it: its import takes ~2 s, which every test process
    collecting this file paid before."""

    def __getattr__(self, name: str):
        from scipy import stats as module

        return getattr(module, name)


stats = _Stats()


def adapter(algorithm: str, action_spec, spread: float = 0.6, **values):
    """A fresh agent's adapter (not started), its policy's weights drawn from N(0, spread^2) (0: SB3's)."""
    filters = Filters(**values.pop("filters", {}))
    values = {name: value for name, value in values.items() if name in parameters(algorithm)}  # learning_starts
    learner = build_learner(algorithm, "tester", parse_space(BOX_OBS), parse_space(action_spec), {**SMALL, **values},
                            None, filters)
    if spread:
        generator = th.Generator().manual_seed(3)
        with th.no_grad():
            for parameter in learner.algorithm.model.policy.parameters():
                parameter.copy_(th.normal(0.0, spread, parameter.shape, generator=generator))
    return learner.algorithm


def run(data: bytes, obs: np.ndarray, seed: int = 0, mask=None) -> tuple[np.ndarray, np.ndarray, dict]:
    """The file's ``action`` and ``sample`` for a batch of observations, with uniform noise from ``seed``."""
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    info = metadata(onnx.load_from_string(data))
    feeds = {"obs": obs.astype(np.float32),
             "noise": np.random.default_rng(seed).random((len(obs), info["noise_size"]), dtype=np.float32)}
    if info["takes_masks"]:
        feeds["action_mask"] = (np.ones((len(obs), info["mask_size"]), dtype=bool) if mask is None
                                else np.repeat(np.asarray(mask, dtype=bool)[None], len(obs), axis=0))
    action, sample = session.run(["action", "sample"], feeds)
    return action, sample, info


def draws(agent, algorithm: str, phase: str = "train", mask=None, seed: int = 0):
    return run(behaviour_adapter(agent, "tester", algorithm, phase), np.repeat(OBS[None], DRAWS, axis=0), seed, mask)


def distribution(agent, mask=None):
    """SB3's action distribution of the actor-critic for OBS (its torch distribution)."""
    policy = agent.model.policy
    obs, _ = policy.obs_to_tensor(OBS[None])
    with th.no_grad():
        found = policy.get_distribution(obs, action_masks=mask) if mask is not None else policy.get_distribution(obs)
    return found.distribution if hasattr(found, "distribution") else found.distributions  # masked multi: a list


def assert_categorical(values: np.ndarray, probs: np.ndarray, where: str) -> None:
    """Pearson's chi-square of the counts against the probabilities (choices of probability 0: never)."""
    counts = np.bincount(values, minlength=len(probs))
    assert len(counts) == len(probs), f"{where}: a choice out of range"
    probs = np.asarray(probs, dtype=np.float64)
    possible = probs > 0
    assert counts[~possible].sum() == 0, f"{where}: drew a choice of probability 0: {counts}"
    if possible.sum() == 1:
        return  # one choice allowed: drawn every time (checked above)
    expected = probs[possible] / probs[possible].sum() * counts.sum()
    p = stats.chisquare(counts[possible], expected).pvalue
    assert p > ALPHA, f"{where}: counts {counts} against {expected.round(1)}: chi-square p = {p:.2e}"


def assert_binomial(successes: int, trials: int, probability: float, where: str) -> None:
    p = stats.binomtest(int(successes), trials, probability).pvalue
    assert p > ALPHA, f"{where}: {successes}/{trials} against {probability:.4f}: binomial p = {p:.2e}"


def assert_ks(values: np.ndarray, cdf, where: str) -> None:
    p = stats.kstest(values, cdf).pvalue
    assert p > ALPHA, f"{where}: Kolmogorov-Smirnov p = {p:.2e}"


@pytest.mark.parametrize("algorithm", ["PPO", "A2C", "TRPO"])
def test_a_discrete_draw_is_sb3s_categorical(algorithm):
    """Chi-square (5 choices, 4 degrees of freedom) at ALPHA against SB3's softmax probabilities; the
    sample is the action."""
    agent = adapter(algorithm, 5)
    action, sample, info = draws(agent, algorithm)
    probs = distribution(agent).probs.numpy()[0]
    assert info["noise_size"] == 1 and probs.max() > 0.3  # far from uniform
    assert_categorical(sample, probs, algorithm)
    np.testing.assert_array_equal(action, sample)


def test_multidiscrete_and_multibinary_draws_are_sb3s():
    """MultiDiscrete: chi-square per sub-action; MultiBinary: an exact binomial test per bit against its
    sigmoid; both at ALPHA."""
    agent = adapter("PPO", ["MultiDiscrete", [3, 4]])
    action, sample, info = draws(agent, "PPO")
    assert info["noise_size"] == 2 and sample.shape == (DRAWS, 2)
    for column, part in enumerate(distribution(agent)):
        assert_categorical(sample[:, column], part.probs.numpy()[0], f"sub-action {column}")
    agent = adapter("A2C", ["MultiBinary", 3])
    action, sample, info = draws(agent, "A2C")
    assert info["noise_size"] == 3 and set(np.unique(sample)) <= {0, 1}
    for bit, probability in enumerate(distribution(agent).probs.numpy()[0]):
        assert_binomial(sample[:, bit].sum(), DRAWS, float(probability), f"bit {bit}")
    np.testing.assert_array_equal(action, sample)


def test_maskable_ppo_never_draws_a_masked_action_and_draws_sb3s_masked_categorical():
    """Chi-square at ALPHA over the allowed choices against sb3-contrib's masked distribution (Discrete,
    per sub-action of a MultiDiscrete, per bit of a MultiBinary); not one masked choice in 20,000 draws,
    in training and in heatup (uniform over the allowed)."""
    mask = np.array([True, False, True, True, False])
    agent = adapter("MaskablePPO", 5)
    _, sample, info = draws(agent, "MaskablePPO", mask=mask)
    assert info["takes_masks"] and info["mask_size"] == 5
    assert_categorical(sample, distribution(agent, mask[None]).probs.numpy()[0], "masked")
    _, sample, _ = draws(agent, "MaskablePPO", "heatup", mask=mask)
    assert_categorical(sample, mask / mask.sum(), "masked heatup")
    masks = np.array([True, False, True, False, True, True, False, True])  # MultiDiscrete [3, 2, 3]
    agent = adapter("MaskablePPO", ["MultiDiscrete", [3, 2, 3]])
    _, sample, _ = draws(agent, "MaskablePPO", mask=masks)
    for column, part in enumerate(distribution(agent, masks[None])):
        assert_categorical(sample[:, column], part.probs.numpy()[0], f"masked sub-action {column}")
    bits = np.array([True, True, False, True, True, True])  # MultiBinary 3: (0, 1) per bit; bit 1 must be 0
    agent = adapter("MaskablePPO", ["MultiBinary", 3])
    _, sample, info = draws(agent, "MaskablePPO", mask=bits)
    assert info["noise_size"] == 3
    for column, part in enumerate(distribution(agent, bits[None])):
        assert_categorical(sample[:, column], part.probs.numpy()[0], f"masked bit {column}")


@pytest.mark.parametrize("algorithm", ["PPO", "A2C"])
def test_a_box_draw_is_sb3s_gaussian_unclipped_and_its_action_clipped(algorithm):
    """Per dimension: the mean within 4 standard errors (sigma / sqrt(n)), the deviation within 4 of its
    standard errors (sigma / sqrt(2 n)), and Kolmogorov-Smirnov at ALPHA against SB3's Normal; the two
    dimensions independent (Pearson's correlation test at ALPHA: a diagonal Gaussian); the action is the
    sample clipped to the box, as SB3 does."""
    agent = adapter(algorithm, BOX)
    action, sample, info = draws(agent, algorithm)
    normal = distribution(agent)
    mean, std = normal.mean.numpy()[0].astype(np.float64), normal.stddev.numpy()[0].astype(np.float64)
    assert info["noise_size"] == 2
    for j in range(2):
        assert abs(sample[:, j].mean() - mean[j]) < 4 * std[j] / np.sqrt(DRAWS), f"dimension {j}'s mean"
        assert abs(sample[:, j].std() / std[j] - 1) < 4 / np.sqrt(2 * DRAWS), f"dimension {j}'s deviation"
        assert_ks(sample[:, j], stats.norm(mean[j], std[j]).cdf, f"dimension {j}")
    correlation = stats.pearsonr(sample[:, 0], sample[:, 1])
    assert correlation.pvalue > ALPHA, f"dimensions correlated: r = {correlation.statistic:.4f}"
    assert ((sample < -1) | (sample > 2)).mean() > 0.05  # the clip matters here
    np.testing.assert_array_equal(action, np.clip(sample, np.float32(-1), np.float32(2)))


@pytest.mark.parametrize("algorithm", ["SAC", "TQC"])
def test_a_squashed_draw_is_sacs_and_its_action_unscaled(algorithm):
    """atanh of the sample, per dimension: Kolmogorov-Smirnov at ALPHA against the Normal of SB3's actor
    (``get_action_dist_params``; here a deviation above 2 in one dimension, so a few draws saturate to
    +-1 in float32, as torch's do: their atanh is infinite, which the test takes as it is); the action is
    the sample unscaled into the box."""
    agent = adapter(algorithm, BOX, spread=0.2, learning_starts=0)
    action, sample, info = draws(agent, algorithm)
    with th.no_grad():
        mean, log_std, _ = agent.model.policy.actor.get_action_dist_params(th.as_tensor(OBS[None]))
    mean, std = mean.numpy()[0].astype(np.float64), log_std.exp().numpy()[0].astype(np.float64)
    assert info["noise_size"] == 2 and np.all(np.abs(sample) <= 1)
    with np.errstate(divide="ignore"):
        gaussian = np.arctanh(sample.astype(np.float64))
    for j in range(2):
        assert_ks(gaussian[:, j], stats.norm(mean[j], std[j]).cdf, f"dimension {j}")
    np.testing.assert_allclose(action, -1 + 0.5 * (sample + 1) * 3, atol=1e-6)


@pytest.mark.parametrize("algorithm", ["TD3", "DDPG"])
def test_normal_action_noise_is_added_to_the_actor_then_clipped(algorithm):
    """With sigma 0.1 (no clipping at this state): Kolmogorov-Smirnov at ALPHA per dimension against
    N(actor, 0.1); with sigma 1.5: the share clipped to each bound, an exact binomial test at ALPHA against
    the Normal's mass beyond it, and nothing beyond [-1, 1]."""
    agent = adapter(algorithm, BOX, spread=0, learning_starts=0, action_noise="normal", action_noise_sigma=0.1)
    with th.no_grad():
        actor = agent.model.policy.actor(th.as_tensor(OBS[None])).numpy()[0].astype(np.float64)
    assert np.all(np.abs(actor) < 0.5)
    action, sample, info = draws(agent, algorithm)
    assert info["noise_size"] == 2
    for j in range(2):
        assert_ks(sample[:, j], stats.norm(actor[j], 0.1).cdf, f"dimension {j}")
    np.testing.assert_allclose(action, -1 + 0.5 * (sample + 1) * 3, atol=1e-6)
    agent = adapter(algorithm, BOX, spread=0, learning_starts=0, action_noise="normal", action_noise_sigma=1.5)
    _, sample, _ = draws(agent, algorithm, seed=1)
    assert np.all(np.abs(sample) <= 1)
    for j in range(2):
        assert_binomial((sample[:, j] == -1).sum(), DRAWS, stats.norm(actor[j], 1.5).cdf(-1), f"{j} at -1")
        assert_binomial((sample[:, j] == 1).sum(), DRAWS, stats.norm(actor[j], 1.5).sf(1), f"{j} at 1")


@pytest.mark.parametrize("algorithm", ["DQN", "QRDQN"])
def test_epsilon_greedy_takes_the_greedy_action_at_1_minus_eps_plus_eps_over_n(algorithm):
    """With exploration_rate 0.3 and 4 actions: the greedy action's share, an exact binomial test at ALPHA
    against 1 - eps + eps / n; the others, chi-square at ALPHA against equal shares."""
    agent = adapter(algorithm, 4, learning_starts=0)
    agent.model.exploration_rate = 0.3
    greedy = int(agent.model.predict(OBS[None], deterministic=True)[0][0])
    _, sample, info = draws(agent, algorithm)
    assert info["noise_size"] == 2
    assert_binomial((sample == greedy).sum(), DRAWS, 1 - 0.3 + 0.3 / 4, "the greedy action")
    others = sample[sample != greedy]
    assert_categorical(others, np.array([0.0 if a == greedy else 1.0 for a in range(4)]), "the other actions")


def test_heatup_is_uniform_over_the_action_space():
    """Chi-square at ALPHA against equal shares (Discrete, MultiDiscrete); Kolmogorov-Smirnov at ALPHA per
    dimension against the uniform distribution: an on-policy Box's action in [low, high], an off-policy
    Box's sample in [-1, 1] (what its replay buffer stores) with the action unscaled from it. An off-policy
    agent in training before learning_starts acts as in heatup, as its learner does."""
    _, sample, info = draws(adapter("PPO", 5), "PPO", "heatup")
    assert info["noise_size"] == 1 and info["phase"] == "heatup"
    assert_categorical(sample, np.full(5, 0.2), "Discrete")
    _, sample, _ = draws(adapter("A2C", ["MultiDiscrete", [3, 2]]), "A2C", "heatup")
    assert_categorical(sample[:, 0], np.full(3, 1 / 3), "MultiDiscrete 0")
    assert_categorical(sample[:, 1], np.full(2, 1 / 2), "MultiDiscrete 1")
    action, sample, _ = draws(adapter("PPO", BOX), "PPO", "heatup")
    np.testing.assert_array_equal(action, sample)
    for j in range(2):
        assert_ks(action[:, j], stats.uniform(-1, 3).cdf, f"on-policy Box {j}")
    action, sample, info = draws(adapter("SAC", BOX, learning_starts=100), "SAC", "train")
    assert info["noise_size"] == 2 and info["phase"] == "train"
    for j in range(2):
        assert_ks(sample[:, j], stats.uniform(-1, 2).cdf, f"off-policy Box {j}")
    np.testing.assert_allclose(action, -1 + 0.5 * (sample + 1) * 3, atol=1e-6)


GREEDY_CASES = [("PPO", 3), ("PPO", BOX), ("A2C", ["MultiDiscrete", [3, 2]]), ("A2C", ["MultiBinary", 3]),
                ("TRPO", BOX), ("DQN", 4), ("QRDQN", 3), ("SAC", BOX), ("TQC", BOX), ("CrossQ", BOX), ("TD3", BOX),
                ("DDPG", BOX), ("MaskablePPO", 4), ("MaskablePPO", ["MultiDiscrete", [3, 2]])]


@pytest.mark.parametrize("algorithm, action_spec", GREEDY_CASES, ids=[f"{a}-{json.dumps(s)}" for a, s in GREEDY_CASES])
def test_evaluate_and_deploy_are_sb3s_deterministic_predict(algorithm, action_spec):
    """On 300 observations (random masks for MaskablePPO): the action equals
    ``model.predict(obs, deterministic=True)`` (discrete: identical; continuous: within 1e-5); noise of
    width 0, with the noise ignored."""
    agent = adapter(algorithm, action_spec, learning_starts=0)
    rng = np.random.default_rng(5)
    obs = rng.normal(0, 2, size=(300, 3)).astype(np.float32)
    mask, kwargs = None, {}
    if algorithm == "MaskablePPO":
        width = 4 if action_spec == 4 else 5
        mask = np.ones(width, dtype=bool)
        mask[rng.choice(width if action_spec == 4 else 3, size=1)] = False
        kwargs["action_masks"] = np.repeat(mask[None], len(obs), axis=0)
    expected = agent.model.predict(obs, deterministic=True, **kwargs)[0]
    for phase in ("evaluate", "deploy"):
        action, sample, info = run(behaviour_adapter(agent, "tester", algorithm, phase), obs, mask=mask)
        assert info["noise_size"] == 0 and info["phase"] == phase
        if np.issubdtype(action.dtype, np.integer):
            np.testing.assert_array_equal(action, np.asarray(expected).reshape(action.shape))
        else:
            np.testing.assert_allclose(action, expected, atol=1e-5)


def test_the_file_carries_the_metadata_and_the_normalisation_of_its_version():
    """Raw observations in: the action of the agent's policy on observations its filter normalised with
    the statistics at build time; the metadata is the export's plus phase and noise_size."""
    agent = adapter("PPO", 3, filters={"normalize_observations": True, "clip_observations": 2.0})
    mean, var = np.array([1.0, -2.0, 0.5]), np.array([4.0, 0.25, 9.0])
    agent.filtering.observations[None].load({"mean": mean.tolist(), "var": var.tolist(), "count": 50.0})
    obs = np.random.default_rng(2).normal(0, 3, size=(300, 3)).astype(np.float32)
    normalised = Normalization(mean, var, 1e-8, 2.0).apply(obs)
    data = behaviour_adapter(agent, "tester", "PPO", "evaluate")
    action, _, info = run(data, obs)
    np.testing.assert_array_equal(action, agent.model.predict(normalised, deterministic=True)[0])
    assert info["filters"]["statistics"] == agent.filtering.state()
    assert {info[key] for key in ("format", "agent", "algorithm", "phase")} == {1, "tester", "PPO", "evaluate"}
    assert info["policy_version"] == agent.version and info["noise_size"] == 0
    model = onnx.load_from_string(data)
    assert [i.name for i in model.graph.input] == ["obs", "noise"]
    assert [o.name for o in model.graph.output] == ["action", "sample"]
    explicit = behaviour_onnx(adapter("PPO", 3), "tester", "PPO", "train", {"": Normalization(np.zeros(3), np.ones(3))})
    assert "obs" in metadata(onnx.load_from_string(explicit))["filters"]["observation_normalization"]


def gsde_agent():
    env = SpacesEnv(parse_space(BOX_OBS), parse_space(BOX))
    return OnPolicyAdapter(PPO("MlpPolicy", env, use_sde=True, n_steps=64, batch_size=64, device="cpu"), "tester", None)


@pytest.mark.parametrize("make, algorithm, reason", [
    (lambda: adapter("RecurrentPPO", 3, spread=0), "RecurrentPPO", "LSTM state"),
    (lambda: adapter("PPO", 3, spread=0, filters={"frame_stack": 3}), "PPO", "stacks 3 frames"),
    (lambda: adapter("TD3", BOX, spread=0, action_noise="ornstein-uhlenbeck"), "TD3", "OrnsteinUhlenbeck"),
    (gsde_agent, "PPO", "gSDE"),
], ids=["recurrent", "frame-stack", "ornstein-uhlenbeck", "gSDE"])
def test_what_cannot_act_at_the_client_is_refused_with_its_reason(make, algorithm, reason):
    agent = make()
    for phase in PHASES:
        with pytest.raises(NotActableAtClient, match=reason) as refused:
            behaviour_adapter(agent, "tester", algorithm, phase)
        assert '"acting": "server"' in str(refused.value)


def test_an_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="unknown phase 'explore'"):
        behaviour_adapter(adapter("PPO", 3, spread=0), "tester", "PPO", "explore")


@pytest.mark.parametrize("algorithm, action_spec", [("PPO", 3), ("SAC", BOX)])
def test_dict_observations_come_in_as_obs_dot_key(algorithm, action_spec):
    """Inputs ``obs.<key>`` per Dict key, as the greedy export's ``observation.<key>``: greedy equals
    ``predict`` on 200 observations (continuous within 1e-5)."""
    space = parse_space({"position": [[2], -1, 1], "room": 4})
    values = {**SMALL, **({"learning_starts": 0} if algorithm == "SAC" else {})}
    agent = build_learner(algorithm, "tester", space, parse_space(action_spec), values, None).algorithm
    rng = np.random.default_rng(4)
    obs = {"position": rng.uniform(-1, 1, (200, 2)).astype(np.float32), "room": rng.integers(0, 4, 200)}
    data = behaviour_adapter(agent, "tester", algorithm, "evaluate")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs.position", "obs.room", "noise"]
    action = session.run(["action"], {"obs.position": obs["position"], "obs.room": obs["room"],
                                      "noise": np.zeros((200, 0), dtype=np.float32)})[0]
    np.testing.assert_allclose(action, agent.model.predict(obs, deterministic=True)[0], atol=1e-5)


IMAGE_CASES = [("PPO", ["Image", [36, 36, 3]], 3), ("A2C", ["Image", [36, 40, 1], "channels_first"], BOX),
               ("DQN", ["Image", [40, 36, 2]], 4), ("SAC", ["Image", [36, 36, 1]], BOX),
               ("PPO", {"eye": ["Image", [36, 36, 3]], "speed": [[2], -1, 1]}, 3)]


def _image_agent(algorithm: str, obs_spec, action_spec):
    """A fresh image agent's adapter, its weights drawn from N(0, 0.2^2) so that images' actions differ."""
    values = {**SMALL, **({"learning_starts": 0} if algorithm in ("DQN", "SAC") else {})}
    agent = build_learner(algorithm, "tester", parse_space(obs_spec), parse_space(action_spec), values, None).algorithm
    generator = th.Generator().manual_seed(3)
    with th.no_grad():
        for parameter in agent.model.policy.parameters():
            parameter.copy_(th.normal(0.0, 0.2, parameter.shape, generator=generator))
    return agent


def _images(space, rng: np.random.Generator, count: int):
    """Client observations (uint8 images in their declared layout) and SB3's (channels first, as after
    VecTransposeImage)."""
    from shepherd.wire.images import ImageBox

    def one(sub):
        if not isinstance(sub, ImageBox):
            return rng.uniform(-1, 1, (count, *sub.shape)).astype(np.float32), None
        coarse = rng.integers(0, 256, (count, *(-(-n // 9) for n in sub.shape)))  # blocks of 9: images far apart
        for axis in range(1, 4):
            coarse = np.repeat(coarse, 9, axis=axis)
        images = coarse[:, :sub.shape[0], :sub.shape[1], :sub.shape[2]].astype(np.uint8)
        return images, (images if sub.channels_first else np.moveaxis(images, -1, -3))

    if hasattr(space, "spaces"):
        parts = {key: one(sub) for key, sub in space.spaces.items()}
        return ({key: client for key, (client, _) in parts.items()},
                {key: client if sb3 is None else sb3 for key, (client, sb3) in parts.items()})
    return one(space)


@pytest.mark.parametrize("algorithm, obs_spec, action_spec", IMAGE_CASES,
                         ids=[f"{a}-{json.dumps(o)}" for a, o, _ in IMAGE_CASES])
def test_an_image_agents_evaluate_file_is_sb3s_deterministic_predict(algorithm, obs_spec, action_spec):
    """Images come in as uint8 in the client's layout; the file transposes a channels-last one and scales it
    by 1/255 before its NatureCNN: its actions on 64 random images equal SB3's ``predict`` on the same images
    channels first (continuous within 1e-5)."""
    agent = _image_agent(algorithm, obs_spec, action_spec)
    space = parse_space(obs_spec)
    client, sb3 = _images(space, np.random.default_rng(2), 64)
    data = behaviour_adapter(agent, "tester", algorithm, "evaluate")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feeds = ({f"obs.{key}": value for key, value in client.items()} if isinstance(client, dict) else {"obs": client})
    assert all(i.type == "tensor(uint8)" for i in session.get_inputs() if i.name in ("obs", "obs.eye"))
    if any(i.name == "action_mask" for i in session.get_inputs()):  # DQN's file takes masks: all allowed
        feeds["action_mask"] = np.ones((64, int(agent.action_space.n)), dtype=bool)
    action = session.run(["action"], {**feeds, "noise": np.zeros((64, 0), dtype=np.float32)})[0]
    expected = agent.model.predict(sb3, deterministic=True)[0]
    assert metadata(onnx.load_from_string(data))["observation_space"] == obs_spec
    if np.issubdtype(action.dtype, np.integer):
        np.testing.assert_array_equal(action, np.asarray(expected).reshape(action.shape))
        assert len(np.unique(action)) > 1, "the actions differ between images: the test can tell layouts apart"
    else:
        np.testing.assert_allclose(action, expected, atol=1e-5)


def test_an_image_agents_train_draw_is_sb3s_categorical():
    """Chi-square against SB3's softmax probabilities for one channels-last image (transposed for SB3)."""
    agent = _image_agent("PPO", ["Image", [36, 36, 3]], 4)
    client, sb3 = _images(parse_space(["Image", [36, 36, 3]]), np.random.default_rng(8), 1)
    data = behaviour_adapter(agent, "tester", "PPO", "train")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    noise = np.random.default_rng(0).random((DRAWS, 1), dtype=np.float32)
    sample = session.run(["sample"], {"obs": np.repeat(client, DRAWS, axis=0), "noise": noise})[0]
    policy = agent.model.policy
    with th.no_grad():
        probs = policy.get_distribution(policy.obs_to_tensor(sb3)[0]).distribution.probs.numpy()[0]
    assert_categorical(sample, probs, "PPO on an image")
