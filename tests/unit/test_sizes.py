"""The sizes check (shepherd/agents/sizes.py) on images: SB3's rollout buffer keeps them as float32, and a large
image's NatureCNN alone can exceed a machine."""

import numpy as np
import pytest
from gymnasium import spaces

from shepherd.agents.parameters import ParameterError
from shepherd.agents.sizes import check_memory

MiB = 1 << 20
FRAMES = spaces.Box(0, 255, (3, 84, 84), np.uint8)  # what the policy sees: channels first


def test_a_rollout_buffer_of_images_is_counted_in_float32_a_replay_buffer_in_uint8():
    # 1,000 rows of 21,168 pixels: 20 MiB as uint8, 81 MiB as the float32 SB3's RolloutBuffer allocates
    with pytest.raises(ParameterError, match="rollout buffer of n_steps 1000 x n_envs 1"):
        check_memory("PPO", True, FRAMES, spaces.Discrete(4), {"n_steps": 1000}, 1, memory=50 * MiB)
    check_memory("DQN", False, FRAMES, spaces.Discrete(4), {"buffer_size": 1000}, 1, memory=50 * MiB)


def test_the_nature_cnn_of_a_large_image_is_refused_with_its_size():
    big = spaces.Box(0, 255, (1, 1000, 1000), np.uint8)  # its linear layer: 64 x 121 x 121 inputs x 512
    with pytest.raises(ParameterError, match=r"image network \(SB3's NatureCNN\) on \[1, 1000, 1000\] images has at "
                                             r"least 4.8e\+08 weights"):
        check_memory("PPO", True, big, spaces.Discrete(4), {"n_steps": 8}, 1, memory=1024 * MiB)
    check_memory("PPO", True, FRAMES, spaces.Discrete(4), {"n_steps": 8}, 1, memory=1024 * MiB)


def test_a_dicts_images_count_as_their_cnn_features_in_the_networks_size():
    # CombinedExtractor hands 256 features per image: 256 + 1 inputs to a layer of 10^7, not 1,000,000 + 1
    camera = spaces.Dict({"camera": spaces.Box(0, 255, (1, 1000, 1000), np.uint8),
                          "speed": spaces.Box(-1, 1, (1,), np.float32)})
    kwargs = {"n_steps": 1, "policy_kwargs": {"net_arch": [10_000_000]}}
    check_memory("PPO", True, camera, spaces.Discrete(2), kwargs, 1, memory=80_000 * MiB)  # NatureCNN's 7.7 GB too
    with pytest.raises(ParameterError, match="network of net_arch"):
        check_memory("PPO", True, camera, spaces.Discrete(2), kwargs, 1, memory=30_000 * MiB)  # 2.6e9 x 16 B
