"""The command line behind ``python run.py``: serve a preset, list presets, and the admin subcommands."""

from shepherd.cli.main import main

__all__ = ["main"]
