"""Finding, listing and loading preset files into a `Preset`: Python modules that define ``preset`` (or, the
older form, ``graph_manager``), YAML files of the same fields (`shepherd.loading.yaml_preset`) and RL Zoo's
entries (``zoo:``, `shepherd.loading.zoo`), with ``-cp`` and ``--seed`` applied.

The presets live in ``presets/`` at the top of the repository; the packaging installs that folder as the
package ``shepherd.presets`` (setup.py), so an installed copy finds them there, and a checkout that is not
installed finds them in the repository's folder.
"""

from __future__ import annotations

import ast
import importlib.resources
import importlib.util
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from shepherd.agents.bounds import DEFAULT_BOUNDS, ParameterBounds
from shepherd.graph.manager import GraphManager
from shepherd.graph.preset import InvalidPreset, Preset, PresetError, Problem
from shepherd.loading.overrides import overridden, parse_override, seed_overrides
from shepherd.loading.yaml_preset import YAML_SUFFIXES, preset_data, preset_from_data, read_yaml_preset

logger = logging.getLogger(__name__)

#: the presets package, as setup.py installs the repository's ``presets/`` folder
PRESETS_PACKAGE = "shepherd.presets"
#: the presets folder of a checkout (``presets/`` next to the ``shepherd`` package)
REPOSITORY_PRESETS = Path(__file__).resolve().parents[2] / "presets"


def presets_folder() -> Path:
    """The folder of the bundled presets of the running code: ``shepherd/presets`` as a wheel installs it,
    else the checkout's ``presets/`` next to the ``shepherd`` package, else wherever the
    `PRESETS_PACKAGE` is importable from.

    The folders next to the running package come first, so that a checkout run with ``PYTHONPATH`` (a git
    worktree, say) finds its own presets even when another checkout is installed in editable mode.
    """
    installed = Path(__file__).resolve().parents[1] / "presets"
    for folder in (installed, REPOSITORY_PRESETS):
        if folder.is_dir():
            return folder
    try:
        found = importlib.resources.files(PRESETS_PACKAGE)
    except ModuleNotFoundError:
        return REPOSITORY_PRESETS
    if isinstance(found, Path) and found.is_dir():
        return found
    logger.warning("the presets package %s is not a folder (%s); using %s", PRESETS_PACKAGE, found,
                   REPOSITORY_PRESETS)
    return REPOSITORY_PRESETS


#: where presets are found by name unless a folder is given
PRESETS_DIR = presets_folder()
#: the suffixes of preset files: Python modules and YAML files
SUFFIXES = (".py", *YAML_SUFFIXES)


@dataclass(frozen=True)
class PresetEntry:
    """A preset file as ``run.py -l`` lists it: its name, kind (``python`` or ``yaml``) and description."""

    name: str
    kind: str
    description: str
    path: Path


def preset_path(name: str, folder: Path | None = None) -> Path:
    """A preset's file, by name (``cartpole_ppo``: ``cartpole_ppo.py``, ``.yaml`` or ``.yml`` in the
    folder) or path (``my/preset.py``, ``my/preset.yaml``).

    Raises:
        PresetError: no such preset (the message lists the available ones), or two files of that name.
    """
    candidate = Path(name)
    if candidate.suffix in SUFFIXES and candidate.is_file():
        return candidate
    folder = PRESETS_DIR if folder is None else folder
    found = [folder / f"{name}{suffix}" for suffix in SUFFIXES if (folder / f"{name}{suffix}").is_file()]
    if not found:
        available = ", ".join(sorted({entry.name for entry in preset_entries(folder)})) or "none"
        raise PresetError(f"no preset named {name!r}; available: {available}")
    if len(found) > 1:
        raise PresetError(f"two presets are named {name!r} ({', '.join(path.name for path in found)}); "
                          "give the file's path, or rename one")
    return found[0]


def preset_entries(folder: Path | None = None) -> list[PresetEntry]:
    """Every preset file of the folder (the bundled presets unless ``folder`` is given), by name, read
    without importing them: a Python preset's docstring, a YAML preset's ``description`` (the first line)."""
    entries = []
    folder = PRESETS_DIR if folder is None else folder
    for path in sorted(path for suffix in SUFFIXES for path in folder.glob(f"*{suffix}")):
        if path.name.startswith("_"):
            continue
        if path.suffix == ".py":
            kind = "python"
            try:
                doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as error:  # listed, never a traceback
                doc = f"(not readable: {type(error).__name__}: {error})"
        else:
            kind = "yaml"
            try:
                data = read_yaml_preset(path)
            except PresetError as error:
                doc = f"(not readable: {error})"
            else:
                doc = data.get("description", "") if isinstance(data, dict) else ""
                doc = doc if isinstance(doc, str) else ""
        entries.append(PresetEntry(path.stem, kind, doc.strip().splitlines()[0] if doc.strip() else "", path))
    return sorted(entries, key=lambda entry: (entry.name, entry.kind))


def list_presets(folder: Path | None = None) -> dict[str, str]:
    """Preset names and the first line of their descriptions (Python presets' docstrings, YAML presets'
    ``description``), read without importing them (the bundled presets unless ``folder`` is given)."""
    return {entry.name: entry.description for entry in preset_entries(folder)}


def load_preset(name: str, folder: Path | None = None, overrides: Sequence[str] = (),
                seed: int | None = None, bounds: ParameterBounds = DEFAULT_BOUNDS) -> Preset:
    """A preset (a Python preset's ``preset``, or the one a YAML file or a ``zoo:`` entry describes),
    checked (its parameters held to ``bounds``, those of the server that will serve it); with ``seed``, every agent's ``seed`` parameter set to it; then with the overrides
    (``KEY=VALUE``, see `shepherd.loading.overrides.apply_overrides`) applied, in order.

    Raises:
        PresetError: the file is missing, does not define a preset, or the preset is invalid (an
            `InvalidPreset` listing every problem, each with its file or its ``-cp``).
    """
    if name.startswith("zoo:"):  # RL Zoo's hyperparameters: shepherd.loading.zoo
        from shepherd.loading import zoo

        return zoo.load(name, list(overrides), seed, bounds)
    path = preset_path(name, folder)
    problems: list[Problem] = []
    parsed = []
    for text in overrides:
        try:
            parsed.append(parse_override(text))
        except PresetError as error:
            problems.append(Problem("", str(error).removeprefix(f"-cp {text}: "), f"-cp {text}"))
    try:
        if path.suffix in YAML_SUFFIXES:  # overrides go into the file's data: its problems and theirs at once
            data = read_yaml_preset(path)
            if not parsed and not problems and seed is None:
                return preset_from_data(data, path.stem, bounds)
            return overridden(data, path.stem, seed_overrides(data, seed) + parsed, problems, bounds)
        preset = _load_python_preset(path, bounds)
        if not parsed and not problems and seed is None:
            return preset
        data = preset_data(preset)
        return overridden(data, preset.name, seed_overrides(data, seed) + parsed, problems, bounds)
    except InvalidPreset as error:
        raise error.located(shown_path(path)) from None


def shown_path(path: Path) -> str:
    """A preset file's path as messages show it: relative to the working folder when it is inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _load_python_preset(path: Path, bounds: ParameterBounds) -> Preset:
    spec = importlib.util.spec_from_file_location(f"shepherd_preset_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise PresetError(f"preset {path.stem}: {path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except PresetError:
        raise
    except Exception as error:
        raise PresetError(f"preset {path.stem}: {type(error).__name__}: {error}") from None
    preset = getattr(module, "preset", None)
    graph_manager = getattr(module, "graph_manager", None)
    if not isinstance(preset, Preset) and isinstance(graph_manager, GraphManager):  # the older form
        preset = graph_manager.preset
    if not isinstance(preset, Preset):
        raise PresetError(f"preset {path.stem} must define preset = Preset(...) (or graph_manager = GraphManager(...))")
    description = preset.description or ((module.__doc__ or "").strip().splitlines() or [""])[0]
    preset = replace(preset, name=preset.name or path.stem, description=description)
    preset.check(bounds)
    return preset
