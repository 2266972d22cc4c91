"""Sizes no machine can hold: a rollout or replay buffer, or a network, whose memory alone would exceed this
machine's, refused with one line before stable-baselines3 tries to allocate it (and fails with a traceback,
or, with overcommitted memory, succeeds and is killed when the buffer fills).

The estimates are lower bounds (float32 values, the buffers' main arrays, each network's weights with its
gradient and Adam's two moments), so a refused size is impossible here, not merely large.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space

from shepherd.agents import grid_cnn
from shepherd.agents.parameters import ParameterError

#: bytes per network weight: the weight, its gradient and Adam's two moments, in float32
_BYTES_PER_WEIGHT = 16
#: the features an image (CNN) extractor hands the network (SB3's NatureCNN)
_CNN_FEATURES = 512
#: the features of each image of a Dict observation (SB3's CombinedExtractor)
_DICT_CNN_FEATURES = 256


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (None if the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _bytes(number: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if number < 1024 or unit == "PiB":
            return f"{number:.1f} {unit}" if unit != "B" else f"{number:.0f} B"
        number /= 1024
    return f"{number:.1f} PiB"  # pragma: no cover


def _space_bytes(space: spaces.Space, float32: bool = False) -> tuple[int, int]:
    """One observation's or action's values and bytes, as SB3's buffers store them: in its own dtype (a
    replay buffer's), or as float32 (``float32``: a rollout buffer's, uint8 images included)."""
    if isinstance(space, spaces.Dict):
        parts = [_space_bytes(sub, float32) for sub in space.spaces.values()]
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    shape = space.shape or (1,)
    size = int(np.prod(shape, dtype=np.float64))
    itemsize = 4 if float32 or space.dtype is None else np.dtype(space.dtype).itemsize
    return size, size * itemsize


def _features(space: spaces.Space) -> int:
    """What the features extractor hands the network: NatureCNN's 512 for an image, 256 per image of a Dict
    (CombinedExtractor's ``cnn_output_dim``), each other value as it is."""
    if isinstance(space, spaces.Dict):
        return sum(_DICT_CNN_FEATURES if isinstance(sub, spaces.Box) and is_image_space(sub) else _space_bytes(sub)[0]
                   for sub in space.spaces.values())
    return _CNN_FEATURES if isinstance(space, spaces.Box) and is_image_space(space) else _space_bytes(space)[0]


def _conv_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


def _cnn_weights(space: spaces.Space) -> float:
    """The weights of SB3's NatureCNN on each image the policy sees (channels first): three convolutions
    and the linear layer of 512 features, whose input is what makes a large image's network large."""
    subs = space.spaces.values() if isinstance(space, spaces.Dict) else [space]
    total = 0.0
    for sub in subs:
        if isinstance(sub, spaces.Box) and is_image_space(sub):
            channels, height, width = sub.shape
            for kernel, stride in ((8, 4), (4, 2), (3, 1)):
                height, width = _conv_out(height, kernel, stride), _conv_out(width, kernel, stride)
            convolutions = channels * 32 * 64 + 32 + 32 * 64 * 16 + 64 + 64 * 64 * 9 + 64
            total += convolutions + 64.0 * max(height, 0) * max(width, 0) * _CNN_FEATURES + _CNN_FEATURES
    return total


def _layers(net_arch: Any) -> list[list[int]]:
    """The hidden layer widths of each network a ``net_arch`` describes (a list: one, shared in shape)."""
    if isinstance(net_arch, dict):
        return [list(widths) for widths in net_arch.values() if isinstance(widths, (list, tuple))]
    if isinstance(net_arch, (list, tuple)):
        return [list(net_arch)]
    return []


def _network_weights(net_arch: Any, inputs: int, outputs: int) -> float:
    """The weights of the networks of ``net_arch`` on ``inputs`` features, each ending in ``outputs``."""
    total = 0.0
    for widths in _layers(net_arch):
        previous = float(inputs)
        for width in widths:
            if isinstance(width, (int, float)) and not isinstance(width, bool):
                total += previous * float(width) + float(width)
                previous = float(width)
        total += previous * outputs
    return total


def check_memory(algorithm: str, on_policy: bool, observation_space: spaces.Space, action_space: spaces.Space,
                 kwargs: dict[str, Any], n_envs: int, memory: int | None = None) -> None:
    """Refuse buffer and network sizes whose memory alone exceeds this machine's (``memory``; None: the
    machine's own, `machine_memory`).

    ``kwargs`` are SB3's constructor arguments (`registry.sb3_arguments`'s): ``n_steps``, ``buffer_size``,
    ``policy_kwargs.net_arch``.

    Raises:
        ParameterError: naming the parameter, the size it makes, this machine's memory and what to lower.
    """
    memory = machine_memory() if memory is None else memory
    if not memory:
        return
    observed, observation_bytes = _space_bytes(observation_space, float32=on_policy)
    actions, action_bytes = _space_bytes(action_space)
    policy_kwargs = kwargs.get("policy_kwargs") or {}
    features = _features(observation_space)
    if isinstance(policy_kwargs, dict) and policy_kwargs.get("features_extractor_class") is grid_cnn.GridCNN:
        settings = policy_kwargs.get("features_extractor_kwargs") or grid_cnn.DEFAULTS
        try:
            cnn = float(grid_cnn.weights(observation_space, **settings))
        except ValueError as error:
            raise ParameterError(str(error)) from None
        features, network, lower = settings["features_dim"], "grid network (GridCNN)", (
            "lower filters or features_dim in policy_kwargs.features_extractor_kwargs")
        seen = "observations"
    else:  # the policy's (one features extractor; SB3 shares it by default)
        cnn, network, lower = _cnn_weights(observation_space), "image network (SB3's NatureCNN)", "send smaller images"
        seen = "images"
    if cnn * _BYTES_PER_WEIGHT > memory:
        raise ParameterError(
            f"{algorithm}'s {network} on {list(observation_space.shape or ())} {seen} has "
            f"at least {cnn:.3g} weights, which with their gradients and optimiser state take "
            f"{_bytes(cnn * _BYTES_PER_WEIGHT)}, more than this machine's {_bytes(memory)} of memory; {lower}")
    if on_policy:
        n_steps = kwargs.get("n_steps")
        if isinstance(n_steps, int):
            rows = float(n_steps) * n_envs
            needed = rows * (observation_bytes + action_bytes + 6 * 4)  # rewards, returns, values, ...
            if needed > memory:
                raise ParameterError(
                    f"{algorithm}'s rollout buffer of n_steps {n_steps} x n_envs {n_envs} rows would take at least "
                    f"{_bytes(needed)}, more than this machine's {_bytes(memory)} of memory; lower n_steps or n_envs")
    else:
        buffer_size = kwargs.get("buffer_size")
        if isinstance(buffer_size, int):
            copies = 1 if kwargs.get("optimize_memory_usage") else 2  # observations and next observations
            needed = float(buffer_size) * (copies * observation_bytes + action_bytes + 3 * 4)
            if needed > memory:
                raise ParameterError(
                    f"{algorithm}'s replay buffer of buffer_size {buffer_size} transitions would take at least "
                    f"{_bytes(needed)}, more than this machine's {_bytes(memory)} of memory; lower buffer_size")
    net_arch = policy_kwargs.get("net_arch") if isinstance(policy_kwargs, dict) else None
    if net_arch is not None:
        weights = _network_weights(net_arch, features, max(actions, 1))
        needed = weights * _BYTES_PER_WEIGHT
        if needed > memory:
            raise ParameterError(
                f"{algorithm}'s network of net_arch {net_arch!r} has at least {weights:.3g} weights, which with "
                f"their gradients and optimiser state take {_bytes(needed)}, more than this machine's "
                f"{_bytes(memory)} of memory; give smaller layers in policy_kwargs.net_arch")
