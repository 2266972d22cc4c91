"""`GridCNN`, the features extractor a preset names in ``policy_kwargs`` for boards, maps and small images
(`shepherd.agents.grid_cnn`): an agent with it is served, learns, and its exported file answers as the server
does; bad settings are refused naming what is wrong."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch as th

from shepherd.agents import ParameterError, build_learner, check_agent
from shepherd.agents.export.export import metadata
from shepherd.agents.grid_cnn import GridCNN
from shepherd.agents.sizes import check_memory
from shepherd.definition import AgentDefinition
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import serving_here
from shepherd.storage import Store
from shepherd.wire.spaces import parse_space
from tests.integration.test_onnx_export import compare, feeds, greedy_answers, masks, observations, train

GRID = {"features_extractor_class": "GridCNN", "features_extractor_kwargs": {"filters": 8, "layers": 2,
                                                                                 "features_dim": 32}}
PARAMS = {"MaskablePPO": {"n_steps": 16, "batch_size": 32, "n_epochs": 1, "n_envs": 2},
          "PPO": {"n_steps": 16, "batch_size": 32, "n_epochs": 1, "n_envs": 2},
          "DQN": {"buffer_size": 1000, "train_freq": 4, "batch_size": 32},
          "SAC": {"buffer_size": 1000, "train_freq": 4, "batch_size": 32}}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm, obs_spec, action_spec", [
    pytest.param("MaskablePPO", [[6, 7, 2], 0, 1], 7, id="MaskablePPO-board-planes-last"),
    pytest.param("DQN", [[5, 4], -1, 1], 3, id="DQN-one-plane"),
    pytest.param("PPO", ["Image", [8, 6, 3]], 3, id="PPO-small-image"),
    pytest.param("SAC", [[4, 4, 2], -1, 1], [[2], -1, 1], id="SAC-board"),
])
async def test_a_grid_agent_learns_and_its_file_answers_as_the_server_does(tmp_path, algorithm, obs_spec,
                                                                            action_spec):
    rng = np.random.default_rng(3)
    space, action_space = parse_space(obs_spec), parse_space(action_spec)
    values = {"seed": 0, "learning_rate": 0.01, "policy_kwargs": {**GRID, "net_arch": [16]}, **PARAMS[algorithm]}
    graph = GraphManager(owner="tests", agents=[AgentSpec("agent", algorithm, obs_spec, action_spec, values)],
                         schedule=Schedule(heatup_steps=0 if "PPO" in algorithm else 16,
                                           checkpoint_every_steps=100_000, checkpoint_every_seconds=3600.0))
    key = graph.create_graph(Store(tmp_path / "data"), serving_here())["agent"]
    try:
        runtime = graph.runtime()
        policy = runtime.learner.algorithm.model.policy
        extractors = [module for module in policy.modules() if isinstance(module, GridCNN)]
        assert extractors and all(extractor.features_dim == 32 for extractor in extractors)
        before = {name: tensor.clone() for name, tensor in policy.state_dict().items()}
        await train(graph, key, space, action_space, rng)
        assert runtime.learner.failure is None and runtime.learner.algorithm.version > 0
        convolution = next(name for name in before if "cnn.0.weight" in name)
        assert not th.equal(before[convolution], policy.state_dict()[convolution])  # the convolutions learn
        batch = observations(space, rng, 300)
        mask = masks(action_space, rng, len(batch)) if runtime.takes_masks else None
        expected = await greedy_answers(graph, key, space, batch, mask)
        data = await graph.served.export_onnx(runtime.record.id)
        assert metadata(onnx.load_from_string(data))["policy_version"] == runtime.learner.algorithm.version
        got = ort.InferenceSession(data).run(["action"], feeds(space, batch, mask))[0]
        compare(got, expected, action_space, "exported GridCNN")
    finally:
        graph.end_sessions()


@pytest.mark.parametrize("policy_kwargs, words", [
    ({"features_extractor_class": "ResNet"}, "features_extractor_class 'ResNet' unknown; Shepherd offers GridCNN"),
    ({"features_extractor_class": "GridCNN", "features_extractor_kwargs": {"kernel": 5}},
     "GridCNN takes no 'kernel'; it takes filters, layers, features_dim"),
    ({"features_extractor_class": "GridCNN", "features_extractor_kwargs": {"filters": 0}},
     "GridCNN's filters must be a whole number of at least 1, not 0"),
    ({"features_extractor_kwargs": {"filters": 8}}, "features_extractor_kwargs needs a features_extractor_class"),
])
def test_bad_extractor_settings_are_refused_naming_them(policy_kwargs, words):
    with pytest.raises(ParameterError, match=words):
        build_learner("PPO", "t", parse_space([[6, 7, 2], 0, 1]), parse_space(7), {"policy_kwargs": policy_kwargs}, None)
    with pytest.raises(ParameterError, match=words):  # and when a preset or the admin API gives the agent
        check_agent(AgentDefinition("agent", "PPO", [[6, 7, 2], 0, 1], 7, {"policy_kwargs": policy_kwargs}))


def test_observations_it_cannot_take_are_refused_saying_which_it_can():
    words = r"GridCNN takes a Box of 2 dimensions \(rows, columns\) or 3 \(rows, columns, planes\), not of shape \[6\]"
    with pytest.raises(ParameterError, match=words):
        build_learner("PPO", "t", parse_space([[6], 0, 1]), parse_space(7),
                      {"policy_kwargs": {"features_extractor_class": "GridCNN"}}, None)
    with pytest.raises(ParameterError, match=words):
        check_agent(AgentDefinition("agent", "PPO", [[6], 0, 1], 7,
                                    {"policy_kwargs": {"features_extractor_class": "GridCNN"}}))


def test_a_grid_network_larger_than_the_machine_is_refused_before_it_is_built():
    kwargs = {"policy_kwargs": {"features_extractor_class": GridCNN,
                                "features_extractor_kwargs": {"filters": 64, "layers": 3, "features_dim": 256}}}
    space = parse_space([[200, 200, 3], 0, 1])  # its linear layer: 64 x 200 x 200 x 256 weights
    check_memory("PPO", True, space, parse_space(3), kwargs, 1, memory=2**40)  # fits a TiB
    with pytest.raises(ParameterError, match=r"grid network \(GridCNN\) on \[200, 200, 3\] observations has at "
                                             r"least 6.55e\+08 weights.*lower filters or features_dim"):
        check_memory("PPO", True, space, parse_space(3), kwargs, 1, memory=2**33)


@pytest.mark.parametrize("obs_spec, words", [
    (["Image", [7, 9, 3]], "an image of 7 x 9 is smaller than SB3's NatureCNN takes"),
    ({"eye": ["Image", [40, 20, 1]], "v": 2}, "the image 'eye' of 40 x 20 is smaller than SB3's NatureCNN takes"),
])
def test_an_image_too_small_for_natures_cnn_is_refused_naming_grid_cnn(obs_spec, words):
    with pytest.raises(ParameterError, match=words + r" \(36 x 36\); name a network for small images in "
                                                     r'policy_kwargs: \{"features_extractor_class": "GridCNN"\}'):
        check_agent(AgentDefinition("agent", "PPO", obs_spec, 3))
    check_agent(AgentDefinition("agent", "PPO", ["Image", [7, 9, 3]], 3,
                                {"policy_kwargs": {"features_extractor_class": "GridCNN"}}))


def test_a_preset_names_the_key_of_an_extractor_that_cannot_take_its_observations():
    from shepherd.graph.preset import InvalidPreset, Preset

    def problems(agent: AgentSpec) -> str:
        with pytest.raises(InvalidPreset) as raised:
            Preset(agents=[agent]).check()
        return str(raised.value)

    assert "agents[0].parameters.policy_kwargs: features_extractor_class 'Grid' unknown" in problems(
        AgentSpec("a", "PPO", [[6, 7, 2], 0, 1], 7, {"policy_kwargs": {"features_extractor_class": "Grid"}}))
    assert "agents[0].observation_space: an image of 8 x 8 is smaller than SB3's NatureCNN takes" in problems(
        AgentSpec("a", "PPO", ["Image", [8, 8, 1]], 7))


@pytest.mark.parametrize("obs_spec", [[[6, 7, 2], 0, 1], [[5, 4], -1, 1]])
def test_the_memory_check_counts_the_weights_the_network_has(obs_spec):
    from shepherd.agents import grid_cnn

    space = parse_space(obs_spec)
    network = GridCNN(space, filters=5, layers=4, features_dim=9)
    assert grid_cnn.weights(space, 5, 4, 9) == sum(p.numel() for p in network.parameters())
