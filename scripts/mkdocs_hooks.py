"""mkdocs hooks (mkdocs.yml's `hooks:`): add the generated reference pages of scripts/docs_pages.py to the site.

They are made from the code at every build (`mkdocs build`, `mkdocs serve`) and never written into docs/.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the repository's shepherd package and scripts/, wherever mkdocs runs from
    sys.path.insert(0, str(ROOT))
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

import docs_pages  # noqa: E402


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path, page in docs_pages.PAGES.items():
        if files.get_file_from_path(path) is not None:
            raise ValueError(f"docs/{path} is generated at build time (scripts/docs_pages.py): remove the file")
        files.append(File.generated(config, path, content=page()))
    return files
