"""Shepherd: reinforcement learning as a service over JSON/HTTP, with stable-baselines3 learners."""

__version__ = "0.1.0"
