"""The documentation site: mkdocs.yml's nav holds every page of docs/, `mkdocs build --strict` passes (no broken
link or anchor, no page left out of nav), and the generated reference pages hold what the code has."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.docs.blocks import ROOT, code_blocks

DOCS = ROOT / "docs"


def docs_pages():
    spec = importlib.util.spec_from_file_location("docs_pages", ROOT / "scripts" / "docs_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nav_files(entries) -> list[str]:
    files: list[str] = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        files += nav_files(value) if isinstance(value, list) else [value]
    return files


def test_every_page_of_docs_is_in_the_nav_once_and_every_nav_entry_exists_or_is_generated():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = nav_files(config["nav"])
    generated = set(docs_pages().PAGES)
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert len(nav) == len(set(nav)), "a page is in the nav twice"
    assert on_disk - set(nav) == set(), "pages missing from mkdocs.yml's nav"
    assert set(nav) - on_disk - generated == set(), "nav entries with no page"
    assert generated & on_disk == set(), "a generated page must not also be a file in docs/"
    assert config["validation"] == {"omitted_files": "warn", "not_found": "warn", "absolute_links": "warn",
                                    "unrecognized_links": "warn", "anchors": "warn"}  # --strict fails on each


def test_the_command_line_page_has_every_command_and_option_of_run_py_and_of_the_client():
    from shepherd.cli.main import build_parser
    from shepherd.client.__main__ import build_parser as client_parser

    page = docs_pages().command_line_page()
    parsers = [build_parser(), client_parser()]
    seen = 0
    while parsers:
        parser = parsers.pop()
        assert f"## `{parser.prog}`" in page
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += action.choices.values()
            for flag in action.option_strings:
                assert flag in page, f"{parser.prog} {flag}"
        seen += 1
    assert seen > 20  # run.py, its commands and their actions


def test_the_algorithms_page_has_every_algorithm_and_parameter_of_the_registry():
    from shepherd.agents import parameters
    from shepherd.agents.registry import ALGORITHMS, NOT_SERVED

    page = docs_pages().algorithms_page()
    for info in ALGORITHMS.values():
        section = page.split(f"\n## {info.name}\n", 1)[1].split("\n## ", 1)[0]
        for param in parameters(info.name).values():
            assert f"| `{param.name}` | {int(param.type)} " in section, f"{info.name}.{param.name}"
        for name, _ in info.excluded:
            assert f"- `{name}`:" in section
    for name in NOT_SERVED:
        assert f"**{name}**" in page


def test_the_openapi_page_has_every_operation_and_status_of_openapi_yaml():
    spec = yaml.safe_load((ROOT / "shepherd" / "http" / "openapi.yaml").read_text())
    page = docs_pages().openapi_page()
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            section = page.split(f"### `{method.upper()} {path}`\n", 1)[1].split("\n### ", 1)[0]
            for status in operation["responses"]:
                assert f"\n| {status} |" in section, f"{method} {path} {status}"
    for name in spec["components"]["schemas"]:
        assert f"\n### {name}\n" in page


def test_the_protocol_page_lists_every_status_the_client_calls_can_answer():
    """docs/protocol.md's Errors table names each status openapi.yaml gives the client protocol's calls
    (the 410 of a deleted agent's sessions included)."""
    spec = yaml.safe_load((ROOT / "shepherd" / "http" / "openapi.yaml").read_text())
    statuses = {status for path, methods in spec["paths"].items()
                if path.startswith("/shepherd/") and not path.startswith("/shepherd/admin")
                for operation in methods.values() for status in operation["responses"]}
    table = (DOCS / "protocol.md").read_text().split("\n## Errors\n", 1)[1]
    listed = {part.strip() for line in table.splitlines() if line.startswith("| ")
              for part in line.split("|")[1].split(",")}
    assert {"400", "401", "410", "503"} <= statuses
    assert statuses - {"200"} - listed == set()


@pytest.mark.e2e
def test_mkdocs_build_strict_passes(tmp_path):
    site = tmp_path / "site"
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                             "-d", str(site)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stderr[-5000:]
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "python run.py agents add" in cli and "--clients" in cli
    assert "MaskablePPO" in (site / "reference" / "algorithms" / "index.html").read_text()
    assert "/shepherd/login_user/" in (site / "reference" / "openapi" / "index.html").read_text()
    assert not list(Path(ROOT / "docs").rglob("cli.md"))  # generated into the site, never into docs/


@pytest.mark.parametrize("name", ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"])
def test_the_top_level_pages_links_lead_to_files_and_headings_that_exist(name):
    """mkdocs checks docs/; the README, CONTRIBUTING and CHANGELOG are read on GitHub, where a link to a
    generated page or a missing heading would be broken: each relative link names a file of the repository,
    and its #anchor a heading of it."""
    from markdown.extensions.toc import slugify

    text = (ROOT / name).read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links or name == "CHANGELOG.md"  # the changelog names files without linking them
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path if path else ROOT / name
        assert target.is_file(), f"{name}: {link}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(), re.MULTILINE)
            assert anchor in {slugify(h.replace("`", ""), "-") for h in headings}, f"{name}: {link}"


README_COMMANDS = ("scripts/install.sh && .venv/bin/python run.py -p cartpole_ppo --clients 4",
                   "scripts/install.sh --test && .venv/bin/python -m pytest")


def test_the_readme_is_short_its_two_commands_are_what_ci_runs_and_its_clients_are_short():
    readme = (ROOT / "README.md").read_text()
    assert readme.count("\n") <= 200
    for command in README_COMMANDS:
        assert f"\n{command}\n" in readme
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-2:] == ["scripts/install.sh --test", ".venv/bin/python -m pytest"]
    blocks = code_blocks(ROOT / "README.md")
    assert set(blocks) == {"readme-python", "readme-js", "readme-curl"}  # each run by test_docs_blocks.py
    for name, (_, code) in blocks.items():
        assert code.count("\n") < 25, name


def test_every_marked_code_block_is_run_by_a_test():
    """A block marked `docs-test: NAME` in the README or docs/ is named by tests/docs/test_docs_blocks.py."""
    runner = (ROOT / "tests" / "docs" / "test_docs_blocks.py").read_text()
    pages = [ROOT / "README.md", *DOCS.rglob("*.md")]
    names = [name for page in pages for name in code_blocks(page)]
    assert len(names) >= 8
    assert [name for name in names if f'"{name}"' not in runner] == []


def test_lists_written_for_github_are_indented_for_python_markdown():
    """A CommonMark item's second paragraph, table and code fence (2 spaces) reach Python-Markdown indented 4,
    and the next item still starts a new item; what is outside lists is left alone."""
    import markdown

    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = ("Intro\n\n- **One**: first\n  line\n\n  | a | b |\n  | --- | --- |\n  | 1 | 2 |\n\n  ```sh\n  run\n    deeper\n"
            "  ```\n  last paragraph\n- **Two**\n  - nested\n    more\n\n```\n  top-level code\n```\n")
    fixed = hooks.commonmark_lists(page)
    assert fixed.startswith("Intro\n\n- **One**: first\n    line\n\n    | a | b |")
    assert "    ```sh\n    run\n      deeper\n    ```\n    last paragraph\n\n- **Two**\n    - nested\n        more" in fixed
    assert fixed.endswith("```\n  top-level code\n```\n")
    html = markdown.markdown(fixed, extensions=["tables", "pymdownx.superfences"])
    assert html.count("<li>") == 3 and "<table>" in html and html.count("<pre") == 2
    assert re.search(r"<li>\s*<p><strong>Two</strong>", html)  # a new item, not a line of the first


NUMBERS = {word: n for n, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}


def test_the_architecture_s_hop_and_file_counts_agree_with_its_table():
    """docs/architecture.md, "One step, end to end": the hops and files it counts in words are its table's
    rows and the distinct files of their second column (issue 37 found them disagreeing once)."""
    section = (DOCS / "architecture.md").read_text().split("\n## One step, end to end\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| `([^`]+)`", section, re.MULTILINE)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1))
    hops = re.search(r"\b(\w+) hops, (\w+) thread crossings", section)
    assert hops and NUMBERS[hops.group(1).lower()] == len(rows)
    crossings = sum(line.count("⇒") for line in section.splitlines() if line.startswith("| "))
    assert NUMBERS[hops.group(2).lower()] == crossings
    files = re.search(r"The hops belong to (\w+) files", section)
    assert files and NUMBERS[files.group(1).lower()] == len({path for _, path in rows})


def test_the_monitoring_page_lists_every_metric_family_the_server_exposes():
    """Every ``shepherd_*`` family `shepherd/http/metrics.py` declares is in the table of the how-to on
    running for a long time (a counter with its ``_total``, as Prometheus' text format names it)."""
    source = (ROOT / "shepherd" / "http" / "metrics.py").read_text()
    declared = set(re.findall(r'(?:MetricFamily|Counter)\(\s*"(shepherd_[a-z_]+)"', source))
    counters = set(re.findall(r'(?:CounterMetricFamily|Counter)\(\s*"(shepherd_[a-z_]+)"', source))
    page = (DOCS / "how-to" / "long-running.md").read_text()
    listed = set(re.findall(r"^\| `(shepherd_[a-z_]+)`", page, re.MULTILINE))
    assert len(declared) >= 19
    expected = {name + "_total" if name in counters else name for name in declared}
    assert expected - listed == set(), "families missing from docs/how-to/long-running.md's table"
    assert listed - expected == set(), "families in the table that the server does not expose"

