"""Exported-policy files for the tests, built with ``onnx.helper`` to the contract of docs/deploy.md (the
format the exporter writes), so that the readers are tested without the exporter.

Each builder returns the file's path and the numpy function it computes, for comparisons:

- `linear_discrete`: Box(n) -> Discrete(k), argmax(obs @ W + b); `cartpole_controller` is one that
  balances CartPole-v1 (its returns show that actions reach the env the right way round), and
  `cartpole_by_angle` one whose returns vary (equal returns show equal actions);
- `linear_box`: Box(n) -> Box(m) with bounds: tanh(obs @ W + b) scaled into [low, high] and clipped;
- `masked_discrete`: Box(n) -> Discrete(k) with an ``action_mask`` input (masked-out logits at -inf);
- `dict_discrete`: Dict{position: Box(2), cell: Discrete(3)} -> Discrete(2);
- `mlp_discrete`: any stack of (W, b) layers with tanh between them, the shape of SB3's MlpPolicy actor.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
#: the IR version that goes with opset 17: onnx's default (the newest) is more than onnxruntime-node 1.30 loads
IR_VERSION = 8


def metadata(observation_space: Any, action_space: Any, *, agent: str = "tiny", algorithm: str = "PPO",
             policy_version: int = 7, takes_masks: bool = False, mask_size: int | None = None,
             filters: Any = None, **overrides: Any) -> dict[str, Any]:
    """The ``shepherd`` metadata object of the contract (``overrides`` replace or add keys)."""
    data = {"format": 1, "agent": agent, "algorithm": algorithm, "observation_space": observation_space,
            "action_space": action_space, "policy_version": policy_version, "takes_masks": takes_masks,
            "mask_size": mask_size, "filters": filters,
            "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "shepherd_version": "0.1.0"}
    data.update(overrides)
    return data


def save(path: Path, nodes: list, inputs: list, outputs: list, initializers: list,
         meta: dict[str, Any] | None) -> Path:
    graph = helper.make_graph(nodes, "policy", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="shepherd-tests",
                              ir_version=IR_VERSION)
    if meta is not None:
        helper.set_model_props(model, {"shepherd": json.dumps(meta)})
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _float(name: str, *shape: Any) -> Any:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", *shape])


def _init(name: str, value: np.ndarray) -> Any:
    return numpy_helper.from_array(np.asarray(value), name)


def _action(elem: int, *shape: Any) -> Any:
    return helper.make_tensor_value_info("action", elem, ["batch", *shape])


def linear_discrete(path: Path, weights: np.ndarray, bias: np.ndarray, **meta: Any
                    ) -> tuple[Path, Callable[[np.ndarray], np.ndarray]]:
    n, k = weights.shape
    nodes = [helper.make_node("MatMul", ["observation", "W"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["logits"]),
             helper.make_node("ArgMax", ["logits"], ["action"], axis=1, keepdims=0)]
    save(path, nodes, [_float("observation", n)], [_action(TensorProto.INT64)],
         [_init("W", weights.astype(np.float32)), _init("b", bias.astype(np.float32))],
         metadata([[n], "-inf", "inf"], k, **meta))
    return path, lambda obs: np.argmax(obs.astype(np.float32) @ weights.astype(np.float32) + bias, axis=1)


#: CartPole-v1: push right when the pole falls right (angle plus its velocity): returns of 500 mostly
CARTPOLE_W = np.array([[0.0, 0.0], [0.0, 0.5], [0.0, 10.0], [0.0, 1.0]], dtype=np.float32)


def cartpole_controller(path: Path, **meta: Any) -> tuple[Path, Callable[[np.ndarray], np.ndarray]]:
    meta.setdefault("agent", "cartpole")
    return linear_discrete(path, CARTPOLE_W, np.zeros(2, dtype=np.float32), **meta)


def cartpole_by_angle(path: Path, **meta: Any) -> tuple[Path, Callable[[np.ndarray], np.ndarray]]:
    """A CartPole-v1 controller that pushes by the pole's angle alone: returns of 30 to 60 that differ from
    one episode to the next, so equal returns show equal actions."""
    weights = np.zeros((4, 2), dtype=np.float32)
    weights[2, 1] = 1.0
    meta.setdefault("agent", "cartpole")
    return linear_discrete(path, weights, np.zeros(2, dtype=np.float32), **meta)


def linear_box(path: Path, weights: np.ndarray, bias: np.ndarray, low: list[float], high: list[float],
               **meta: Any) -> tuple[Path, Callable[[np.ndarray], np.ndarray]]:
    n, m = weights.shape
    lo, hi = np.asarray(low, dtype=np.float32), np.asarray(high, dtype=np.float32)
    nodes = [helper.make_node("MatMul", ["observation", "W"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["z"]),
             helper.make_node("Tanh", ["z"], ["t"]),  # in [-1, 1]: SB3's unscaling into [low, high]
             helper.make_node("Add", ["t", "one"], ["t1"]),
             helper.make_node("Mul", ["t1", "half_range"], ["scaled"]),
             helper.make_node("Add", ["scaled", "low"], ["unclipped"]),
             helper.make_node("Max", ["unclipped", "low"], ["above"]),
             helper.make_node("Min", ["above", "high"], ["action"])]
    save(path, nodes, [_float("observation", n)], [_action(TensorProto.FLOAT, m)],
         [_init("W", weights.astype(np.float32)), _init("b", bias.astype(np.float32)),
          _init("one", np.float32(1.0)), _init("half_range", (hi - lo) / 2), _init("low", lo), _init("high", hi)],
         metadata([[n], -10, 10], [[m], low, high], **meta))

    def compute(obs: np.ndarray) -> np.ndarray:
        t = np.tanh(obs.astype(np.float32) @ weights.astype(np.float32) + bias.astype(np.float32))
        return np.clip((t + 1) * (hi - lo) / 2 + lo, lo, hi)

    return path, compute


def masked_discrete(path: Path, weights: np.ndarray, bias: np.ndarray, **meta: Any
                    ) -> tuple[Path, Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    n, k = weights.shape
    nodes = [helper.make_node("MatMul", ["observation", "W"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["logits"]),
             helper.make_node("Where", ["action_mask", "logits", "minus_inf"], ["masked"]),
             helper.make_node("ArgMax", ["masked"], ["action"], axis=1, keepdims=0)]
    mask_input = helper.make_tensor_value_info("action_mask", TensorProto.BOOL, ["batch", k])
    save(path, nodes, [_float("observation", n), mask_input], [_action(TensorProto.INT64)],
         [_init("W", weights.astype(np.float32)), _init("b", bias.astype(np.float32)),
          _init("minus_inf", np.float32(-np.inf))],
         metadata([[n], "-inf", "inf"], k, algorithm="MaskablePPO", takes_masks=True, mask_size=k, **meta))
    return path, lambda obs, mask: np.argmax(
        np.where(mask, obs.astype(np.float32) @ weights.astype(np.float32) + bias, -np.inf), axis=1)


def dict_discrete(path: Path, **meta: Any) -> tuple[Path, Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    """Dict{position: Box(2), cell: Discrete(3)} -> Discrete(2): logits = position @ W + onehot(cell) @ C."""
    weights = np.array([[1.0, -1.0], [0.5, 2.0]], dtype=np.float32)
    cells = np.array([[0.0, 3.0], [3.0, 0.0], [0.0, 0.0]], dtype=np.float32)
    nodes = [helper.make_node("MatMul", ["observation.position", "W"], ["xw"]),
             helper.make_node("Gather", ["C", "observation.cell"], ["cw"], axis=0),
             helper.make_node("Add", ["xw", "cw"], ["logits"]),
             helper.make_node("ArgMax", ["logits"], ["action"], axis=1, keepdims=0)]
    inputs = [_float("observation.position", 2),
              helper.make_tensor_value_info("observation.cell", TensorProto.INT64, ["batch"])]
    save(path, nodes, inputs, [_action(TensorProto.INT64)], [_init("W", weights), _init("C", cells)],
         metadata({"position": [[2], -5, 5], "cell": 3}, 2, **meta))
    return path, lambda position, cell: np.argmax(position.astype(np.float32) @ weights + cells[cell], axis=1)


def mlp_discrete(path: Path, layers: list[tuple[np.ndarray, np.ndarray]], **meta: Any) -> Path:
    """A stack of linear layers (weights of shape [in, out]) with tanh between them, and argmax: SB3's
    MlpPolicy actor for a Discrete action (its hidden layers, then action_net)."""
    nodes, initializers, x = [], [], "observation"
    for i, (weights, bias) in enumerate(layers):
        initializers += [_init(f"W{i}", weights.astype(np.float32)), _init(f"b{i}", bias.astype(np.float32))]
        nodes += [helper.make_node("MatMul", [x, f"W{i}"], [f"m{i}"]), helper.make_node("Add", [f"m{i}", f"b{i}"], [f"z{i}"])]
        x = f"z{i}"
        if i < len(layers) - 1:
            nodes.append(helper.make_node("Tanh", [x], [f"h{i}"]))
            x = f"h{i}"
    nodes.append(helper.make_node("ArgMax", [x], ["action"], axis=1, keepdims=0))
    n, k = layers[0][0].shape[0], layers[-1][0].shape[1]
    meta.setdefault("observation_space", [[n], "-inf", "inf"])
    meta.setdefault("action_space", k)
    observation_space, action_space = meta.pop("observation_space"), meta.pop("action_space")
    return save(path, nodes, [_float("observation", n)], [_action(TensorProto.INT64)], initializers,
                metadata(observation_space, action_space, **meta))
