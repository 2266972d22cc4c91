"""Finding, listing and loading preset files (Python modules that define ``graph_manager``)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from shepherd.graph.manager import GraphManager, PresetError

PRESETS_DIR = Path(__file__).resolve().parents[2] / "presets"


def preset_path(name: str, folder: Path = PRESETS_DIR) -> Path:
    """A preset's file, by name (``cartpole_ppo``) or path (``my/preset.py``).

    Raises:
        PresetError: no such preset; the message lists the available ones.
    """
    candidate = Path(name)
    if candidate.suffix == ".py" and candidate.is_file():
        return candidate
    path = folder / f"{name}.py"
    if not path.is_file():
        available = ", ".join(sorted(list_presets(folder))) or "none"
        raise PresetError(f"no preset named {name!r}; available: {available}")
    return path


def list_presets(folder: Path = PRESETS_DIR) -> dict[str, str]:
    """Preset names and the first line of their docstrings, read without importing them."""
    found = {}
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        found[path.stem] = doc.strip().splitlines()[0] if doc.strip() else ""
    return found


def load_preset(name: str, folder: Path = PRESETS_DIR) -> GraphManager:
    """Import a preset and return its ``graph_manager``, checked.

    Raises:
        PresetError: the file is missing, does not define a GraphManager, or the preset is invalid.
    """
    path = preset_path(name, folder)
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
    graph_manager = getattr(module, "graph_manager", None)
    if not isinstance(graph_manager, GraphManager):
        raise PresetError(f"preset {path.stem} must define graph_manager = GraphManager(...)")
    graph_manager.name = graph_manager.name or path.stem
    if not graph_manager.description:
        graph_manager.description = (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else ""
    graph_manager.check()
    return graph_manager
