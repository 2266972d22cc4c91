"""mkdocs hooks (mkdocs.yml's `hooks:`): add the generated reference pages of scripts/docs_pages.py to the site,
and read the pages' lists as GitHub does.

The generated pages are made from the code at every build (`mkdocs build`, `mkdocs serve`) and never written
into docs/. The pages are written for GitHub (CommonMark: a list item's paragraphs, tables and code blocks
indented by its marker's width, 2 spaces); Python-Markdown, which mkdocs uses, wants 4 and ends a list at
a paragraph indented less, so `commonmark_lists` indents them as it wants before each page is rendered.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the repository's shepherd package and scripts/, wherever mkdocs runs from
    sys.path.insert(0, str(ROOT))
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

import docs_pages  # noqa: E402

ITEM = re.compile(r"(?:[-*+]|\d+[.)]) ")
FENCES = ("```", "~~~")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path, page in docs_pages.PAGES.items():
        if files.get_file_from_path(path) is not None:
            raise ValueError(f"docs/{path} is generated at build time (scripts/docs_pages.py): remove the file")
        files.append(File.generated(config, path, content=page()))
    return files


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return commonmark_lists(markdown)


def commonmark_lists(text: str) -> str:
    """The lines of top-level list items indented for Python-Markdown: a continuation indented 2 or 3 gets 2
    more (4 and more: a nested list's, 4 more), a code fence inside an item moves with its lines, and an item
    that holds more than one block is ended by a blank line before the next item. Text outside lists and
    top-level code blocks are left as they are."""
    out: list[str] = []
    in_list = loose = False
    fence: tuple[str, int] | None = None  # the open fence's marker, and how far its lines move
    for line in text.split("\n"):
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if fence is not None:
            if stripped.rstrip() == fence[0]:
                fence, line = None, " " * fence[1] + line
            elif line:
                line = " " * fence[1] + line
        elif stripped.startswith(FENCES):
            in_list = in_list and indent > 0
            fence = (stripped[:3], 2 if in_list else 0)
            line = " " * fence[1] + line
        elif indent == 0 and ITEM.match(line):
            if in_list and loose:
                out.append("")
            in_list, loose = True, False
        elif indent == 0 and line:
            in_list = False
        elif in_list and not line:
            loose = True
        elif in_list:
            line = " " * (2 if indent < 4 else 4) + line
        out.append(line)
    return "\n".join(out)
