"""Finding, listing and loading preset files (Python modules that define ``graph_manager``).

The presets live in ``presets/`` at the top of the repository; the packaging installs that folder as the
package ``shepherd.presets`` (setup.py), so an installed copy finds them there, and a checkout that is not
installed finds them in the repository's folder.
"""

from __future__ import annotations

import ast
import importlib.resources
import importlib.util
import logging
from pathlib import Path

from shepherd.graph.manager import GraphManager, PresetError

logger = logging.getLogger(__name__)

#: the presets package, as setup.py installs the repository's ``presets/`` folder
PRESETS_PACKAGE = "shepherd.presets"
#: the presets folder of a checkout (``presets/`` next to the ``shepherd`` package)
REPOSITORY_PRESETS = Path(__file__).resolve().parents[2] / "presets"


def presets_folder() -> Path:
    """The folder of the bundled presets: the installed `PRESETS_PACKAGE`, else the repository's folder."""
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


def preset_path(name: str, folder: Path | None = None) -> Path:
    """A preset's file, by name (``cartpole_ppo``) or path (``my/preset.py``).

    Raises:
        PresetError: no such preset; the message lists the available ones.
    """
    candidate = Path(name)
    if candidate.suffix == ".py" and candidate.is_file():
        return candidate
    folder = PRESETS_DIR if folder is None else folder
    path = folder / f"{name}.py"
    if not path.is_file():
        available = ", ".join(sorted(list_presets(folder))) or "none"
        raise PresetError(f"no preset named {name!r}; available: {available}")
    return path


def list_presets(folder: Path | None = None) -> dict[str, str]:
    """Preset names and the first line of their docstrings, read without importing them (the bundled
    presets unless ``folder`` is given)."""
    found = {}
    for path in sorted((PRESETS_DIR if folder is None else folder).glob("*.py")):
        if path.name.startswith("_"):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        found[path.stem] = doc.strip().splitlines()[0] if doc.strip() else ""
    return found


def load_preset(name: str, folder: Path | None = None) -> GraphManager:
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
