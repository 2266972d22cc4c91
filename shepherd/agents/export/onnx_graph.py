"""Torch modules of an SB3 policy as ONNX nodes: the pieces `shepherd.agents.export.export` assembles a greedy
policy from.

The graph is written node by node with ``onnx.helper`` from the modules' own weights, not traced: every
layer a served policy can have (linear layers, convolutions, the activations of ``policy_kwargs``, CrossQ's
BatchRenorm in evaluation mode, SB3's flatten, NatureCNN and combined extractors, Shepherd's `GridCNN`, and
SB3's observation preprocessing, images scaled by 1/255)
has its ONNX form here, and anything else is refused with `NotExportable` naming it, so an exported file
never holds an approximation. The arithmetic is the modules' own, in float32, in the same order.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import torch as th
from gymnasium import spaces
from onnx import TensorProto, helper, numpy_helper
from sb3_contrib.common.torch_layers import BatchRenorm
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.torch_layers import CombinedExtractor, FlattenExtractor, NatureCNN

from shepherd.agents.grid_cnn import GridCNN
from shepherd.wire.images import ImageBox

OPSET = 17
IR_VERSION = 8  # opset 17's, which every onnxruntime since 1.12 loads


class NotExportable(ValueError):
    """The policy has a part with no exact ONNX form here (the message names it and why)."""


class GraphBuilder:
    """An ONNX graph under construction: nodes, constants (initializers), inputs and outputs."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._count = 0

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, value: Any, hint: str = "const", dtype: Any = np.float32) -> str:
        """A constant tensor (an initializer); returns its name."""
        name = self._name(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, **attributes: Any) -> str:
        """One node of one output; returns the output's name."""
        output = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], **attributes))
        return output

    def input(self, name: str, elem_type: int, shape: tuple[int, ...]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, ["batch", *shape]))
        return name

    def output(self, source: str, name: str, elem_type: int, shape: tuple[int, ...]) -> None:
        self.nodes.append(helper.make_node("Identity", [source], [name]))
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, ["batch", *shape]))

    def model(self, graph_name: str, metadata: dict[str, str]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, graph_name, self.inputs, self.outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="shepherd")
        model.ir_version = IR_VERSION
        helper.set_model_props(model, metadata)
        onnx.checker.check_model(model, full_check=True)
        return model


def module(graph: GraphBuilder, layer: th.nn.Module, x: str) -> str:
    """The nodes of a torch module applied to ``x`` (a [batch, features] float tensor).

    Raises:
        NotExportable: a layer with no ONNX form here.
    """
    if isinstance(layer, th.nn.Sequential):
        for child in layer:
            x = module(graph, child, x)
        return x
    if isinstance(layer, th.nn.Linear):  # x @ W.T + b, as F.linear's addmm
        weight = graph.const(_array(layer.weight), "weight")
        if layer.bias is None:
            return graph.op("Gemm", x, weight, transB=1)
        return graph.op("Gemm", x, weight, graph.const(_array(layer.bias), "bias"), transB=1)
    if isinstance(layer, th.nn.Conv2d):
        return _conv(graph, layer, x)
    if isinstance(layer, NatureCNN):  # its convolutions (ending in a flatten), then its linear layer
        return module(graph, layer.linear, module(graph, layer.cnn, x))
    if isinstance(layer, (th.nn.Identity, th.nn.Dropout)):  # dropout: the policy acts in evaluation mode
        return x
    if isinstance(layer, th.nn.Flatten):
        if layer.start_dim != 1 or layer.end_dim != -1:
            raise NotExportable(f"a Flatten over dims {layer.start_dim}..{layer.end_dim}")
        return graph.op("Flatten", x, axis=1)
    if isinstance(layer, th.nn.Tanh):
        return graph.op("Tanh", x)
    if isinstance(layer, th.nn.ReLU):
        return graph.op("Relu", x)
    if isinstance(layer, th.nn.Sigmoid):
        return graph.op("Sigmoid", x)
    if isinstance(layer, th.nn.ELU):
        return graph.op("Elu", x, alpha=float(layer.alpha))
    if isinstance(layer, th.nn.LeakyReLU):
        return graph.op("LeakyRelu", x, alpha=float(layer.negative_slope))
    if isinstance(layer, th.nn.GELU) and layer.approximate == "none":  # x * 0.5 * (1 + erf(x / sqrt(2)))
        erf = graph.op("Erf", graph.op("Mul", x, graph.const(1 / math.sqrt(2))))
        return graph.op("Mul", graph.op("Mul", x, graph.const(0.5)), graph.op("Add", erf, graph.const(1.0)))
    if isinstance(layer, BatchRenorm):
        return _batch_renorm(graph, layer, x)
    raise NotExportable(f"the layer {type(layer).__name__} has no ONNX form in Shepherd's exporter")


def _conv(graph: GraphBuilder, layer: th.nn.Conv2d, x: str) -> str:
    """A 2-d convolution of an NCHW tensor, zero-padded as torch pads it."""
    if isinstance(layer.padding, str) or layer.padding_mode != "zeros":
        raise NotExportable(f"a Conv2d with padding {layer.padding!r} ({layer.padding_mode}); Shepherd's exporter "
                            "writes numeric zero padding")
    pad_h, pad_w = (int(p) for p in layer.padding)
    inputs = [x, graph.const(_array(layer.weight), "conv_weight")]
    if layer.bias is not None:
        inputs.append(graph.const(_array(layer.bias), "conv_bias"))
    return graph.op("Conv", *inputs, kernel_shape=[int(k) for k in layer.kernel_size],
                    strides=[int(s) for s in layer.stride], dilations=[int(d) for d in layer.dilation],
                    pads=[pad_h, pad_w, pad_h, pad_w], group=int(layer.groups))


def _batch_renorm(graph: GraphBuilder, layer: BatchRenorm, x: str) -> str:
    """CrossQ's BatchRenorm as it acts in evaluation mode: the running statistics, then the affine map."""
    if layer.training:
        raise NotExportable("a BatchRenorm layer in training mode normalises with each batch's statistics")
    mean, var = _array(layer.ra_mean), _array(layer.ra_var)
    std = np.sqrt(var + np.float32(layer.eps))  # (ra_var + eps).sqrt(), in float32 as torch
    x = graph.op("Div", graph.op("Sub", x, graph.const(mean[None], "ra_mean")), graph.const(std[None], "ra_std"))
    if layer.affine:
        x = graph.op("Add", graph.op("Mul", graph.const(_array(layer.scale)[None], "scale"), x),
                     graph.const(_array(layer.bias)[None], "shift"))
    return x


def features(graph: GraphBuilder, extractor: th.nn.Module, space: spaces.Space, inputs: dict[str, str],
             normalize_images: bool = True) -> str:
    """SB3's ``extract_features``: each observation preprocessed (``preprocess_obs``, images scaled by 1/255
    when ``normalize_images``, the policy's) and run through the features extractor, for the observations in
    ``inputs`` (by Dict key; the key "" for a non-Dict space), in the policy's layout (images channels first,
    `image_input`). Returns the [batch, features] float tensor.

    Raises:
        NotExportable: an extractor other than SB3's flatten, NatureCNN and combined ones and Shepherd's
            `GridCNN`.
    """
    if isinstance(extractor, (FlattenExtractor, NatureCNN)):
        if isinstance(space, spaces.Dict):
            raise NotExportable(f"a {type(extractor).__name__} on Dict observations")
        layer = extractor.flatten if isinstance(extractor, FlattenExtractor) else extractor
        return module(graph, layer, preprocess(graph, space, inputs[""], normalize_images))
    if isinstance(extractor, GridCNN) and not isinstance(space, spaces.Dict):
        x = preprocess(graph, space, inputs[""], normalize_images)
        if extractor.channels_last:  # (batch, rows, columns[, planes]) -> (batch, planes, rows, columns)
            x = (graph.op("Unsqueeze", x, graph.const(np.array([1], np.int64), "plane_axis", np.int64))
                 if len(space.shape or ()) == 2 else graph.op("Transpose", x, perm=[0, 3, 1, 2]))
        return module(graph, extractor.linear, module(graph, extractor.cnn, x))
    if isinstance(extractor, CombinedExtractor) and isinstance(space, spaces.Dict):
        parts = [module(graph, sub, preprocess(graph, space.spaces[key], inputs[key], normalize_images))
                 for key, sub in extractor.extractors.items()]  # the order CombinedExtractor concatenates in
        return parts[0] if len(parts) == 1 else graph.op("Concat", *parts, axis=1)
    raise NotExportable(f"the features extractor {type(extractor).__name__} has no ONNX form in Shepherd's "
                        "exporter (it exports SB3's FlattenExtractor, NatureCNN and CombinedExtractor, and GridCNN)")


def image_input(graph: GraphBuilder, space: spaces.Space, x: str) -> str:
    """An observation input in the policy's layout: a channels-last image transposed to channels first (SB3's
    ``VecTransposeImage``, still uint8); anything else as it is."""
    if isinstance(space, ImageBox) and not space.channels_first:
        return graph.op("Transpose", x, perm=[0, 3, 1, 2])
    return x


def preprocess(graph: GraphBuilder, space: spaces.Space, x: str, normalize_images: bool = True) -> str:
    """SB3's ``preprocess_obs`` for one observation space: one-hot for discrete ones, ``obs.float() / 255``
    for images (when ``normalize_images``), float otherwise."""
    if isinstance(space, spaces.Box) and is_image_space(space):  # uint8: the policy's own scaling
        x = graph.op("Cast", x, to=TensorProto.FLOAT)
        return graph.op("Div", x, graph.const(255.0, "pixel_scale")) if normalize_images else x
    if isinstance(space, spaces.Box):
        return x  # float32 already
    if isinstance(space, spaces.Discrete):  # F.one_hot(obs, n).float(); the input holds indices from 0
        return graph.op("OneHot", x, graph.const(int(space.n), "depth", np.int64), graph.const([0.0, 1.0], "values"),
                        axis=-1)
    if isinstance(space, spaces.MultiDiscrete):  # each column one-hot, concatenated
        nvec = np.asarray(space.nvec).reshape(-1)
        parts = [graph.op("OneHot", graph.op("Gather", x, graph.const(column, "column", np.int64), axis=1),
                          graph.const(int(n), "depth", np.int64), graph.const([0.0, 1.0], "values"), axis=-1)
                 for column, n in enumerate(nvec)]
        return parts[0] if len(parts) == 1 else graph.op("Concat", *parts, axis=1)
    if isinstance(space, spaces.MultiBinary):
        return x  # float32 bits
    raise NotExportable(f"observations of {type(space).__name__} have no ONNX form in Shepherd's exporter")


def input_type(space: spaces.Space) -> tuple[int, tuple[int, ...]]:
    """The ONNX element type and shape (without the batch) of an observation input, per the contract."""
    if isinstance(space, spaces.Discrete):
        return TensorProto.INT64, ()
    if isinstance(space, spaces.MultiDiscrete):
        return TensorProto.INT64, tuple(int(n) for n in space.shape)
    if isinstance(space, ImageBox):  # the image as the client sends it: uint8, in its own layout
        return TensorProto.UINT8, tuple(int(n) for n in space.shape)
    if isinstance(space, (spaces.Box, spaces.MultiBinary)):
        return TensorProto.FLOAT, tuple(int(n) for n in space.shape)
    raise NotExportable(f"observations of {type(space).__name__} have no ONNX form in Shepherd's exporter")


def _array(tensor: Any) -> np.ndarray:
    return tensor.detach().cpu().numpy().astype(np.float32)
