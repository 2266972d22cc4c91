"""Presets read from files into a `shepherd.graph.Preset`: Python modules, YAML files, RL Zoo's hyperparameter
files (``zoo:ALGO/ENV``), with ``-cp KEY=VALUE`` and ``--seed`` applied, every problem with its key path."""

from shepherd.loading.presets import PRESETS_DIR, PresetEntry, list_presets, load_preset, preset_entries, preset_path

__all__ = ["PRESETS_DIR", "PresetEntry", "list_presets", "load_preset", "preset_entries", "preset_path"]
