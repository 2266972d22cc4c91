"""A features extractor that sees a grid as a grid: boards, maps and small images (``policy_kwargs``:
``{"features_extractor_class": "GridCNN"}``).

SB3 flattens a vector-like Box into an MLP, which sees a Connect Four board as 84 unrelated numbers, and sees
images through NatureCNN, whose 8 x 8 stride-4 first layer needs at least 36 x 36 pixels. `GridCNN` is the
network between the two: ``layers`` 3 x 3 convolutions of ``filters`` channels each, zero-padded so that every
layer keeps the grid's size (a pattern anywhere on the board is seen the same way), then one linear layer of
``features_dim`` features, all with ReLU, as AlphaZero-style board networks begin.

What it takes, as the policy sees it:
- a Box of 2 or 3 dimensions that is not an image: ``(rows, columns)`` (one plane) or ``(rows, columns,
  planes)``, channels last, as PettingZoo's boards and Shepherd's images on the wire come (``(6, 7, 2)``);
- an image (``["Image", [H, W, C]]``): Shepherd hands the policy images channels first and scaled to [0, 1],
  as SB3's CnnPolicy takes them, and `GridCNN` convolves them so (images of any size whose channels are no more
  than their rows or columns: SB3 takes an image's smallest dimension for its channels, and Shepherd refuses
  the others when the agent is checked).

Its weights grow with the grid (the linear layer has ``filters x rows x columns x features_dim``), so it suits
boards and small images; `shepherd.agents.sizes` refuses one that would not fit the machine. A policy with it
has no numpy snapshot (its greedy actions come from the learner, its self-play snapshots are ONNX files);
the exporters write its layers (`shepherd.agents.export.onnx_graph.features`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch as th
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

#: ``features_extractor_kwargs`` it takes, with their defaults
DEFAULTS = {"filters": 64, "layers": 3, "features_dim": 256}


def grid_shape(space: gym.spaces.Space) -> tuple[int, int, int, bool]:
    """(planes, rows, columns, channels_last) of a space `GridCNN` takes.

    Raises:
        ValueError: a space it cannot take, saying which it can.
    """
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"GridCNN takes a Box of 2 or 3 dimensions or an image, not {space}")
    shape = tuple(int(n) for n in space.shape)
    if is_image_space(space, check_channels=False):  # as the policy sees it: channels first
        if len(shape) != 3:
            raise ValueError(f"GridCNN takes images of 3 dimensions, not of shape {list(shape)}")
        return shape[0], shape[1], shape[2], False
    if len(shape) == 2:
        return 1, shape[0], shape[1], True
    if len(shape) == 3:
        return shape[2], shape[0], shape[1], True
    raise ValueError(f"GridCNN takes a Box of 2 dimensions (rows, columns) or 3 (rows, columns, planes), "
                     f"not of shape {list(shape)}")


def check_kwargs(kwargs: Any) -> dict[str, int]:
    """``features_extractor_kwargs`` checked and completed with `DEFAULTS`.

    Raises:
        ValueError: an unknown name or a value that is not a whole number of at least 1.
    """
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise ValueError(f"GridCNN's features_extractor_kwargs must be an object, not {kwargs!r}")
    unknown = sorted(set(kwargs) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"GridCNN takes no {', '.join(map(repr, unknown))}; it takes {', '.join(DEFAULTS)}")
    for name, value in kwargs.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"GridCNN's {name} must be a whole number of at least 1, not {value!r}")
    return {**DEFAULTS, **kwargs}


def weights(space: gym.spaces.Space, filters: int, layers: int, features_dim: int) -> int:
    """How many weights a `GridCNN` of these settings has on ``space``."""
    planes, rows, columns, _ = grid_shape(space)
    convolutions = (planes * 9 + 1) * filters + (layers - 1) * (filters * 9 + 1) * filters
    return convolutions + (filters * rows * columns + 1) * features_dim


class GridCNN(BaseFeaturesExtractor):
    """Padded 3 x 3 convolutions over a grid, then a linear layer (the module's docstring says what it takes)."""

    def __init__(self, observation_space: gym.spaces.Space, filters: int = 64, layers: int = 3,
                 features_dim: int = 256) -> None:
        check_kwargs({"filters": filters, "layers": layers, "features_dim": features_dim})
        planes, rows, columns, self.channels_last = grid_shape(observation_space)
        super().__init__(observation_space, features_dim)
        stack: list[th.nn.Module] = []
        for layer in range(layers):
            stack += [th.nn.Conv2d(planes if layer == 0 else filters, filters, 3, padding=1), th.nn.ReLU()]
        self.cnn = th.nn.Sequential(*stack, th.nn.Flatten())
        self.linear = th.nn.Sequential(th.nn.Linear(filters * rows * columns, features_dim), th.nn.ReLU())

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return self.linear(self.cnn(planes_first(observations, self.channels_last)))


def planes_first(observations: th.Tensor, channels_last: bool) -> th.Tensor:
    """A batch of grids as ``[batch, planes, rows, columns]``."""
    if not channels_last:
        return observations
    if observations.dim() == 3:  # (batch, rows, columns): one plane
        return observations.unsqueeze(1)
    return observations.permute(0, 3, 1, 2)
