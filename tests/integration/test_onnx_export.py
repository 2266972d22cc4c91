"""The exported ONNX policy answers as the server does (issue 17).

For every served algorithm in every action space it handles (and Dict, Discrete, MultiDiscrete and
MultiBinary observations): an agent is served in-process, trained a little through a vector session, then
asked greedy (evaluate-mode) steps on 1,000 observations through `GraphManager.step`, exactly as the HTTP
edge asks; the file `ServedAgents.export_onnx` writes, run with onnxruntime on the same observations, must
give the same actions (discrete: identical; continuous: within 1e-5). With synthetic normalisation
statistics, the file on raw observations must answer what the server answers on the normalised ones.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from shepherd.agents import ALGORITHMS, build_learner, parameters
from shepherd.agents.export.export import FORMAT, METADATA_KEY, Normalization, NotExportable, export_onnx, metadata
from shepherd.client import to_json
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import serving_here
from shepherd.wire import VectorStepInput
from shepherd.wire.images import is_image
from shepherd.wire.observations import check_observation
from shepherd.wire.spaces import check_action_mask, mask_size, parse_space
from shepherd.storage import NotFound, Store
from gymnasium import spaces

BOX_OBS = [[3], "-inf", "inf"]
ACTIONS = {spaces.Discrete: 3, spaces.Box: [[2], -2, 3], spaces.MultiDiscrete: ["MultiDiscrete", [3, 2]],
           spaces.MultiBinary: ["MultiBinary", 3]}
N_ENVS, GREEDY_STEPS = 100, 10  # 1,000 greedy observations
TRAIN_ENVS, TRAIN_STEPS = 8, 40  # 320 transitions learned from
#: small and quick to learn from; each algorithm takes the ones it has
PARAMS = {"policy_kwargs": {"net_arch": [16]}, "seed": 0, "learning_rate": 0.01, "n_envs": 2, "n_steps": 16,
          "batch_size": 32, "n_epochs": 1, "buffer_size": 1000, "train_freq": 4}
#: QRDQN's 200 quantiles by default made its updates the slowest here; the export averages however many
QUANTILES = {"QRDQN": 25}


def params(algorithm: str) -> dict:
    known = parameters(algorithm)
    found = {name: value for name, value in PARAMS.items() if name in known}
    if algorithm in QUANTILES:
        found["policy_kwargs"] = {**found["policy_kwargs"], "n_quantiles": QUANTILES[algorithm]}
    return found


def cases() -> list:
    found = []
    for info in ALGORITHMS.values():
        if info.name == "RecurrentPPO":
            continue  # refused: test_recurrent_ppo_is_refused_with_its_reason
        for kind in info.action_spaces:
            found.append(pytest.param(info.name, BOX_OBS, ACTIONS[kind], id=f"{info.name}-{kind.__name__}"))
    dict_obs = {"position": [[2], -1, 1], "room": 4}
    found += [pytest.param("PPO", dict_obs, 3, id="PPO-Dict-obs"), pytest.param("SAC", dict_obs, [[2], -2, 3],
                                                                                 id="SAC-Dict-obs"),
              pytest.param("QRDQN", dict_obs, 3, id="QRDQN-Dict-obs"),
              pytest.param("MaskablePPO", dict_obs, ["MultiDiscrete", [3, 2]], id="MaskablePPO-Dict-obs"),
              pytest.param("DQN", 5, 3, id="DQN-Discrete-obs"), pytest.param("TD3", 5, [[2], -2, 3], id="TD3-Discrete-obs"),
              pytest.param("A2C", ["MultiDiscrete", [3, 4]], ["MultiBinary", 3], id="A2C-MultiDiscrete-obs"),
              pytest.param("PPO", ["MultiBinary", 4], [[2], -2, 3], id="PPO-MultiBinary-obs")]
    # images (CnnPolicy, NatureCNN): the graph transposes channels-last ones and scales them by 1/255 as SB3 does
    found += [pytest.param("PPO", ["Image", [36, 36, 3]], 3, id="PPO-Image-obs"),
              pytest.param("DQN", ["Image", [36, 40, 2], "channels_first"], 3, id="DQN-Image-channels-first-obs"),
              pytest.param("SAC", {"eye": ["Image", [36, 36, 1]], "speed": [[2], -1, 1]}, [[2], -2, 3],
                           id="SAC-Dict-Image-obs"),
              pytest.param("MaskablePPO", ["Image", [40, 36, 1]], ["MultiDiscrete", [3, 2]],
                           id="MaskablePPO-Image-obs")]
    return found


def observations(space: spaces.Space, rng: np.random.Generator, count: int) -> list:
    """Observations as a client would send them (wide: some beyond any normalisation clip)."""
    if isinstance(space, spaces.Dict):
        parts = {key: observations(sub, rng, count) for key, sub in space.spaces.items()}
        return [{key: parts[key][i] for key in parts} for i in range(count)]
    if is_image(space):
        return list(rng.integers(0, 256, size=(count, *space.shape)).astype(np.uint8))
    if isinstance(space, spaces.Box):
        return list(rng.normal(0.5, 3.0, size=(count, *space.shape)).astype(np.float32))
    if isinstance(space, spaces.Discrete):
        return list(rng.integers(0, space.n, size=count))
    if isinstance(space, spaces.MultiDiscrete):
        return list(rng.integers(0, space.nvec, size=(count, len(space.nvec))))
    return list(rng.integers(0, 2, size=(count, *space.shape)))


def masks(space: spaces.Space, rng: np.random.Generator, count: int) -> list[np.ndarray]:
    """Random action masks that leave at least one choice of every sub-action, checked as the edge does."""
    groups = ([int(n) for n in space.nvec] if isinstance(space, spaces.MultiDiscrete) else
              [2] * int(np.prod(space.shape)) if isinstance(space, spaces.MultiBinary) else [int(space.n)])
    found = []
    for _ in range(count):
        mask = []
        for width in groups:
            part = rng.random(width) < 0.5
            part[rng.integers(width)] = True
            mask += part.tolist()
        found.append(check_action_mask(space, mask))
    return found


def feeds(space: spaces.Space, batch: list, mask: list | None) -> dict[str, np.ndarray]:
    """The ONNX inputs of a batch of observations, typed as the contract says."""
    def typed(sub: spaces.Space, values: list) -> np.ndarray:
        dtype = (np.int64 if isinstance(sub, (spaces.Discrete, spaces.MultiDiscrete)) else
                 np.uint8 if is_image(sub) else np.float32)
        return np.asarray(values, dtype=dtype)

    if isinstance(space, spaces.Dict):
        inputs = {f"observation.{key}": typed(sub, [obs[key] for obs in batch]) for key, sub in space.spaces.items()}
    else:
        inputs = {"observation": typed(space, batch)}
    if mask is not None:
        inputs["action_mask"] = np.asarray(mask, dtype=bool)
    return inputs


async def greedy_answers(graph: GraphManager, key: str, space: spaces.Space, batch: list,
                         mask: list | None) -> np.ndarray:
    """The server's greedy answers: an evaluate-only vector session through `GraphManager.step`."""
    session = graph.login(key, evaluate_only=True, n_envs=N_ENVS)
    answers = []
    try:
        for start in range(0, len(batch), N_ENVS):
            rows = batch[start:start + N_ENVS]
            checked = [check_observation(space, to_json(obs)) for obs in rows]
            step = VectorStepInput.of(checked, [0.0] * len(rows), [False] * len(rows), [False] * len(rows),
                                      masks=None if mask is None else mask[start:start + N_ENVS])
            acted = await graph.step(graph.session(session.key), step)
            answers += [np.asarray(action) for action in acted.action]
    finally:
        graph.logout(session.key)
    return np.stack(answers)


async def train(graph: GraphManager, key: str, space: spaces.Space, action_space: spaces.Space,
                rng: np.random.Generator) -> None:
    """A few hundred transitions through a training vector session (an episode ends every 20 steps)."""
    session = graph.login(key, n_envs=TRAIN_ENVS)
    takes_masks = mask_size(action_space) is not None and graph.runtime().takes_masks
    try:
        for t in range(TRAIN_STEPS):
            obs = [check_observation(space, to_json(o)) for o in observations(space, rng, TRAIN_ENVS)]
            ended = [t > 0 and (t + i) % 20 == 0 for i in range(TRAIN_ENVS)]
            finals = [check_observation(space, to_json(o)) if end else None
                      for o, end in zip(observations(space, rng, TRAIN_ENVS), ended)]
            step = VectorStepInput.of(obs, list(rng.normal(size=TRAIN_ENVS)), ended, [False] * TRAIN_ENVS,
                                      final_obs=finals, masks=masks(action_space, rng, TRAIN_ENVS) if takes_masks else None)
            await graph.step(graph.session(session.key), step)
    finally:
        graph.logout(session.key)


async def served_agent(tmp_path, algorithm: str, obs_spec, action_spec, filters=None) -> tuple[GraphManager, Store, str]:
    graph = GraphManager(owner="tests", agents=[AgentSpec("agent", algorithm, obs_spec, action_spec, params(algorithm),
                                                          filters=filters)],
                         schedule=Schedule(heatup_steps=0 if ALGORITHMS[algorithm.upper()].on_policy else 16, checkpoint_every_steps=100_000, checkpoint_every_seconds=3600.0))
    store = Store(tmp_path / "data")
    keys = graph.create_graph(store, serving_here())
    return graph, store, keys["agent"]


def compare(got: np.ndarray, expected: np.ndarray, action_space: spaces.Space, what: str) -> None:
    assert got.shape == expected.shape, (what, got.shape, expected.shape)
    if isinstance(action_space, spaces.Box):
        assert got.dtype == np.float32
        difference = float(np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64))))
        assert difference <= 1e-5, f"{what}: max abs difference {difference}"
    else:
        assert got.dtype == np.int64
        assert np.array_equal(got, expected.astype(np.int64)), f"{what}: {np.sum(got != expected)} actions differ"


def synthetic_statistics(space: spaces.Space, rng: np.random.Generator) -> dict[str, Normalization]:
    """Statistics for every Box observation (key "" of a non-Dict space), clipping some values at 2."""
    boxes = dict(space.spaces) if isinstance(space, spaces.Dict) else {"": space}
    return {key: Normalization(rng.normal(0.5, 1.0, sub.shape), rng.uniform(0.5, 4.0, sub.shape), 1e-8, 2.0)
            for key, sub in boxes.items() if isinstance(sub, spaces.Box) and not is_image(sub)}


def normalized(space: spaces.Space, stats: dict[str, Normalization], obs):
    if isinstance(space, spaces.Dict):
        return {key: stats[key].apply(value) if key in stats else value for key, value in obs.items()}
    return stats[""].apply(obs)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm, obs_spec, action_spec", cases())
async def test_the_onnx_policy_answers_as_the_server_does(tmp_path, algorithm, obs_spec, action_spec):
    rng = np.random.default_rng(7)
    space, action_space = parse_space(obs_spec), parse_space(action_spec)
    graph, store, key = await served_agent(tmp_path, algorithm, obs_spec, action_spec)
    try:
        runtime = graph.runtime()
        await train(graph, key, space, action_space, rng)
        assert runtime.learner.failure is None and runtime.learner.algorithm.version > 0  # trained: not the initial weights
        batch = observations(space, rng, N_ENVS * GREEDY_STEPS)
        mask = masks(action_space, rng, len(batch)) if runtime.takes_masks else None
        expected = await greedy_answers(graph, key, space, batch, mask)

        data = await graph.served.export_onnx(runtime.record.id)
        model = onnx.load_from_string(data)
        info = metadata(model)
        assert info["policy_version"] == runtime.learner.algorithm.version and info["algorithm"] == algorithm
        session = ort.InferenceSession(data)
        compare(session.run(["action"], feeds(space, batch, mask))[0], expected, action_space, "exported")

        stats = synthetic_statistics(space, rng)
        if not stats:
            return
        changed = [normalized(space, stats, obs) for obs in batch]
        expected_normalized = await greedy_answers(graph, key, space, changed, mask)
        resumed = await asyncio.to_thread(graph.build_agent, runtime.record)  # the checkpoint just written
        try:
            with_stats = export_onnx(resumed.runtime.learner.algorithm, "agent", algorithm, stats)
        finally:
            resumed.discard()
        info = metadata(onnx.load_from_string(with_stats))
        assert set(info["filters"]["observation_normalization"]) == {
            "observation" if k == "" else f"observation.{k}" for k in stats}
        got = ort.InferenceSession(with_stats).run(["action"], feeds(space, batch, mask))[0]
        compare(got, expected_normalized, action_space, "exported with normalisation")
    finally:
        graph.end_sessions()
        await asyncio.to_thread(graph.close)
        store.close()


async def test_recurrent_ppo_is_refused_with_its_reason(tmp_path):
    graph = GraphManager(owner="tests", agents=[AgentSpec("lstm", "RecurrentPPO", BOX_OBS, 3,
                                                          {"n_steps": 16, "batch_size": 16, "n_epochs": 1})],
                         schedule=Schedule(checkpoint_every_steps=100_000, checkpoint_every_seconds=3600.0))
    store = Store(tmp_path / "data")
    graph.create_graph(store, serving_here())
    try:
        runtime = graph.runtime()
        runtime.checkpoint().result(30)
        with pytest.raises(NotExportable, match="LSTM state"):
            await graph.served.export_onnx(runtime.record.id)
    finally:
        await asyncio.to_thread(graph.close)
        store.close()


async def test_no_model_yet_is_not_found(tmp_path):
    graph, store, _ = await served_agent(tmp_path, "PPO", BOX_OBS, 3)
    try:
        with pytest.raises(NotFound, match="no saved model yet"):
            await graph.served.export_onnx(graph.runtime().record.id)
    finally:
        await asyncio.to_thread(graph.close)
        store.close()


def test_the_file_carries_the_contracts_metadata_and_damage_or_a_foreign_file_shows(tmp_path):
    learner = build_learner("MaskablePPO", "maze", parse_space({"cell": 5, "goal": [[2], -1, 1]}),
                            parse_space(["MultiDiscrete", [3, 2]]), {"seed": 0}, None)
    stats = {"goal": Normalization(np.zeros(2), np.ones(2), 1e-8, 5.0)}
    data = export_onnx(learner.algorithm, "maze", "MaskablePPO", stats)
    model = onnx.load_from_string(data)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 17
    info = json.loads({p.key: p.value for p in model.metadata_props}[METADATA_KEY])
    assert set(info) == {"format", "agent", "algorithm", "observation_space", "action_space", "policy_version",
                         "takes_masks", "mask_size", "filters", "exported_at", "shepherd_version"}
    assert info["format"] == FORMAT == 1 and info["agent"] == "maze" and info["algorithm"] == "MaskablePPO"
    assert parse_space(info["observation_space"]) == learner.algorithm.observation_space
    assert info["action_space"] == ["MultiDiscrete", [3, 2]] and info["policy_version"] == 0
    assert info["takes_masks"] is True and info["mask_size"] == 5
    assert info["filters"] == {"observation_normalization": {"observation.goal": {
        "mean": [0.0, 0.0], "var": [1.0, 1.0], "epsilon": 1e-8, "clip": 5.0}}}
    assert info["exported_at"].endswith("+00:00") and isinstance(info["shepherd_version"], str)
    session = ort.InferenceSession(data)
    assert [(i.name, i.type, i.shape) for i in session.get_inputs()] == [
        ("observation.cell", "tensor(int64)", ["batch"]), ("observation.goal", "tensor(float)", ["batch", 2]),
        ("action_mask", "tensor(bool)", ["batch", 5])]
    assert [(o.name, o.type, o.shape) for o in session.get_outputs()] == [("action", "tensor(int64)", ["batch", 2])]
    plain = onnx.load_from_string(export_onnx(build_learner("PPO", "p", parse_space(BOX_OBS), parse_space(3), {}, None)
                                              .algorithm, "p", "PPO"))
    assert metadata(plain)["filters"] is None and metadata(plain)["mask_size"] is None

    with pytest.raises(Exception):  # damaged: onnx cannot parse a truncated file
        onnx.load_from_string(data[: len(data) // 2])
    foreign = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])], "foreign",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])]))
    assert metadata(onnx.load_from_string(foreign.SerializeToString())) is None  # not a Shepherd policy


def test_normalising_a_discrete_observation_or_an_unknown_key_is_refused():
    learner = build_learner("PPO", "p", parse_space({"cell": 5, "goal": [[2], -1, 1]}), parse_space(3), {}, None)
    with pytest.raises(NotExportable, match="only Box observations are normalised"):
        export_onnx(learner.algorithm, "p", "PPO", {"cell": Normalization(np.zeros(1), np.ones(1))})
    with pytest.raises(NotExportable, match="its keys: \\['cell', 'goal'\\]"):
        export_onnx(learner.algorithm, "p", "PPO", {"": Normalization(np.zeros(2), np.ones(2))})
    with pytest.raises(NotExportable, match="does not fit"):
        export_onnx(learner.algorithm, "p", "PPO", {"goal": Normalization(np.zeros(3), np.ones(3))})


async def test_run_py_agents_export_format_onnx(tmp_path, capsys):
    from shepherd.cli import main

    graph, store, key = await served_agent(tmp_path, "SAC", BOX_OBS, [[2], -2, 3])
    rng = np.random.default_rng(1)
    space, action_space = parse_space(BOX_OBS), parse_space([[2], -2, 3])
    try:
        await train(graph, key, space, action_space, rng)
        batch = observations(space, rng, N_ENVS)
        expected = await greedy_answers(graph, key, space, batch, None)
    finally:
        await asyncio.to_thread(graph.close)  # checkpoints: the folder's model is the served weights
        store.close()
    out = tmp_path / "policy.onnx"
    code = await asyncio.to_thread(main, ["agents", "export", "tests/agent", "--format", "onnx", "-o", str(out),
                                          "--data", str(tmp_path / "data")])
    assert code == 0 and "greedy policy (ONNX) of agent tests/agent written to" in capsys.readouterr().out
    got = ort.InferenceSession(str(out)).run(["action"], feeds(space, batch, None))[0]
    compare(got, expected, action_space, "run.py agents export --format onnx")
    code = await asyncio.to_thread(main, ["agents", "export", "tests/agent", "--format", "onnx", "-o", str(out),
                                          "--data", str(tmp_path / "data")])
    assert code == 2 and "exists; add --force" in capsys.readouterr().err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm, obs_spec, action_spec", [
    ("PPO", BOX_OBS, 3), ("SAC", BOX_OBS, [[2], -1, 2]), ("PPO", {"goal": [[2], -5, 5], "cell": 4}, 3)])
async def test_an_agent_with_observation_normalisation_exports_its_filter(tmp_path, algorithm, obs_spec, action_spec):
    """The agent's own filter, with the statistics its training made, is inside the file: raw observations
    in, the server's greedy answers (which it normalises) out."""
    rng = np.random.default_rng(11)
    space, action_space = parse_space(obs_spec), parse_space(action_spec)
    filters = {"normalize_observations": True, "normalize_rewards": True, "clip_observations": 2.0}
    graph, store, key = await served_agent(tmp_path, algorithm, obs_spec, action_spec, filters)
    try:
        runtime = graph.runtime()
        await train(graph, key, space, action_space, rng)
        filtering = runtime.learner.algorithm.filtering
        assert filtering is not None and all(stats.count > 100 for stats in filtering.observations.values())
        batch = observations(space, rng, N_ENVS * GREEDY_STEPS)
        expected = await greedy_answers(graph, key, space, batch, None)
        data = await graph.served.export_onnx(runtime.record.id)
        info = metadata(onnx.load_from_string(data))
        assert info["filters"]["normalize_observations"] is True
        assert info["filters"]["statistics"] == filtering.state()
        got = ort.InferenceSession(data).run(["action"], feeds(space, batch, None))[0]
        compare(got, expected, action_space, "exported with the agent's filter")
    finally:
        graph.end_sessions()
        await asyncio.to_thread(graph.close)
        store.close()


async def test_frame_stacking_is_refused_with_its_reason(tmp_path):
    graph, store, _ = await served_agent(tmp_path, "PPO", BOX_OBS, 3, {"frame_stack": 2})
    try:
        runtime = graph.runtime()
        runtime.checkpoint().result(30)
        with pytest.raises(NotExportable, match="stacks 2 frames"):
            await graph.served.export_onnx(runtime.record.id)
    finally:
        await asyncio.to_thread(graph.close)
        store.close()


@pytest.mark.parametrize("obs_spec", [["Image", [36, 36, 3]], ["Image", [36, 36, 2], "channels_first"]])
def test_the_deploy_servers_policy_reads_an_image_agents_file_and_acts_as_sb3_predicts(obs_spec):
    """`shepherd.policies.onnx.Policy` (the deploy server's, the client's greedy acting) takes an image agent's
    file: uint8 input in the client's layout, its observations checked as the server checks them, and its
    actions on images sent as JSON lists equal SB3's ``predict`` on the same images channels first."""
    from shepherd.policies.onnx import Policy

    learner = build_learner("PPO", "eyes", parse_space(obs_spec), parse_space(4), params("PPO"), None)
    adapter = learner.algorithm
    data = export_onnx(adapter, "eyes", "PPO")
    policy = Policy.from_bytes(data)
    assert policy.observation_space == parse_space(obs_spec)
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (32, *parse_space(obs_spec).shape)).astype(np.uint8)
    sb3 = images if len(obs_spec) == 3 else np.moveaxis(images, -1, -3)
    expected = adapter.model.predict(sb3, deterministic=True)[0]
    assert policy.act_batch([image.tolist() for image in images]) == np.asarray(expected).tolist()
    # arrays (the deploy server's binary bodies) checked as arrays, not listed and checked again on the event loop
    assert policy.act_batch(images) == policy.act_batch(list(images)) == np.asarray(expected).tolist()
    assert policy.act(images[3]) == int(np.asarray(expected).reshape(-1)[3])
    with pytest.raises(ValueError, match=r"is 256, outside 0-255"):
        policy.act(np.full(images.shape[1:], 256).tolist())
    with pytest.raises(ValueError, match=r"observations\[1\]"):
        policy.act_batch([images[0], np.full(images.shape[1:], 256)])
