"""The code blocks of the README and the docs that the tests run, read from the Markdown itself.

A block to run is the fenced block right after an HTML comment naming it, which neither GitHub nor the site
shows:

    <!-- docs-test: readme-python -->
    ```python
    ...
    ```
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKED = re.compile(r"^<!-- docs-test: ([\w-]+) -->\n```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def code_blocks(path: Path) -> dict[str, tuple[str, str]]:
    """name -> (language, code) of every marked block of a Markdown file. Raises ValueError for a name used
    twice."""
    found: dict[str, tuple[str, str]] = {}
    for match in MARKED.finditer(path.read_text()):
        name, language, code = match.groups()
        if name in found:
            raise ValueError(f"{path}: two blocks named {name}")
        found[name] = (language, code)
    return found


def block(relative: str, name: str) -> str:
    """The code of one marked block of ROOT/relative. Raises KeyError naming the blocks there are."""
    blocks = code_blocks(ROOT / relative)
    if name not in blocks:
        raise KeyError(f"{relative} has no block marked docs-test: {name} (it has {sorted(blocks)})")
    return blocks[name][1]
