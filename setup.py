"""Packaging for Shepherd. Install torch==2.13.0 first (see the README) so pip keeps that CPU build."""

from setuptools import find_packages, setup

setup(
    name="shepherd-rl",
    version="0.1.0",
    description="Reinforcement learning as a service: remote environments drive stable-baselines3 "
                "learners over JSON/HTTP",
    python_requires=">=3.10",
    # the presets stay in presets/ at the top of the repository and are installed as shepherd.presets
    packages=[*find_packages(include=["shepherd", "shepherd.*"]), "shepherd.presets"],
    package_dir={"shepherd.presets": "presets"},
    package_data={"shepherd": ["py.typed", "http/openapi.yaml", "http/static/*"],
                  "shepherd.presets": ["*.yaml", "*.yml"]},  # YAML presets, beside the Python ones
    install_requires=[
        "aiohttp>=3.9",
        "stable-baselines3>=2.3",
        "sb3-contrib>=2.3",
        "gymnasium>=0.29",
        "torch>=2.1",
        "pyyaml>=6",
        "tinydb>=4.8",
        "orjson>=3.9",
        "prometheus-client>=0.20",
        "tensorboard>=2.14",  # the training metrics' event files (SB3's TensorBoard writer), and to read them
        "onnx>=1.15",  # the ONNX export of a greedy policy (shepherd/agents/export/export.py)
        "onnxruntime>=1.17",  # shepherd.policies.onnx and the deploy server (run.py deploy) run exported policies
        "openskill>=6",  # ratings of environments with roles from their outcomes (shepherd/graph/ratings.py)
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-aiohttp>=1.0",
            "pytest-timeout>=2.2",
            "pytest-xdist>=3.5",  # -n 2: the fast tier on both cores (CONTRIBUTING.md)
            "requests>=2.28",  # examples/seed_client.py, the original client, uses it
            "schemathesis>=4.0",  # fuzzes the running server against its OpenAPI description
            "playwright>=1.40",
            "mypy>=1.10",  # the type check of shepherd/ (mypy.ini), run by tests/test_types.py  # the dashboard's browser tests, driving the system's chromium (never its own)
            "rl_zoo3>=2.3",  # RL Zoo's hyperparameter files, for zoo:ALGO/ENV presets (read, never imported)
            "ray>=2.60,<3",  # run.py --ray: learners as Ray actors (tests/e2e/test_ray.py)
            "scipy>=1.10",  # chi-square, binomial and Kolmogorov-Smirnov tests of the behaviour policy's draws
            "mkdocs==1.6.1",  # the documentation site (mkdocs.yml), built --strict by tests/docs
            "mkdocs-material==9.8.2",  # its theme
        ],
        "ray": ["ray>=2.60,<3"],  # run.py --ray (docs/distributed.md); never imported without it
        # pixel environments for issue 47's benchmarks (benchmarks/atari_vector.py, benchmarks/minigrid_pixels.py);
        # ale-py bundles its ROMs; never imported by shepherd/ or the tests
        "pixels": ["ale-py>=0.9", "opencv-python-headless>=4.8", "minigrid>=2.3"],  # opencv: AtariPreprocessing
        # benchmarks/selfplay.py's games (Connect Four, tic-tac-toe, mpe2's simple_adversary) driven through
        # environments with roles; shepherd.client.roles itself is duck-typed and imports neither. The classic
        # games import pygame (pygame-ce, as mpe2 takes), not the [classic] extra's open_spiel, rlcard, chess
        "multiagent": ["pettingzoo>=1.24", "pygame-ce>=2.4", "mpe2>=1.0"],
    },
)
