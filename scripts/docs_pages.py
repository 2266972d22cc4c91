"""The documentation site's generated reference pages, built from the code at `mkdocs build` time.

    command_line_page()   every parser and subcommand of `python run.py`, then `python -m shepherd.client`,
                          from their own argparse parsers
    algorithms_page()     the algorithm registry: algorithms, action spaces and typed parameters
    openapi_page()        shepherd/http/openapi.yaml: every path, operation, status and schema

scripts/mkdocs_hooks.py adds them to the site (mkdocs.yml's `hooks:`); tests/docs check them. Nothing here is
copied by hand into docs/: change the code and the page follows.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
OPENAPI = ROOT / "shepherd" / "http" / "openapi.yaml"
TYPE_NAMES = {1: "int", 2: "float", 3: "bool", 4: "str", 5: "json"}
GENERATED = ("<!-- generated at build time by scripts/docs_pages.py from {source}; "
             "do not edit: change the source -->\n\n")


def _cell(text: Any) -> str:
    """A value fit for a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


# --- the command line ------------------------------------------------------------------------------------

def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:  # argparse exposes subcommands only through its actions
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _walk(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """The parser and every subcommand's parser under it, depth first, in the order they were added."""
    yield parser
    for _, sub in _subparsers(parser):
        yield from _walk(sub)


def command_line_page() -> str:
    """`python run.py -h` and every `python run.py COMMAND [ACTION] -h`, as argparse prints them (100 columns)."""
    from shepherd.cli.main import build_parser
    from shepherd.client.__main__ import build_parser as client_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to $COLUMNS: the same page on every machine
    try:
        parsers = [*_walk(build_parser()), client_parser()]
        helps = [(p.prog, p.format_help()) for p in parsers]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    source = "the argparse parsers of run.py (shepherd/cli/) and of shepherd/client/__main__.py"
    lines = ["# The command line", "", GENERATED.format(source=source),
             "Every command of `python run.py`, with what `-h` prints for it. The exit status is 0 on success, "
             "1 when `--clients` did not reach the preset's target (or the server could not stop cleanly), "
             "2 on bad usage or input. Last, the client that drives a gymnasium env against a server, "
             "`python -m shepherd.client` (exit status 1 when the server refuses it or cannot be reached, 2 on "
             "bad usage).", "", "Commands:", ""]
    lines += [f"- [`{prog}`](#{_anchor(prog)})" for prog, _ in helps]
    for prog, text in helps:
        lines += ["", f"## `{prog}`", "", "```text", text.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def _anchor(prog: str) -> str:
    """The id mkdocs' toc extension gives the heading `` `prog` `` (Python-Markdown's own slugify)."""
    from markdown.extensions.toc import slugify

    return slugify(prog, "-")


# --- the algorithms ---------------------------------------------------------------------------------------

def algorithms_page() -> str:
    """The registry's algorithms (`run.py algorithms`) and each one's parameters (`run.py algorithms NAME`)."""
    from shepherd.agents import parameters
    from shepherd.agents.registry import ALGORITHMS, NOT_SERVED

    lines = ["# Algorithms and their parameters", "",
             GENERATED.format(source="the algorithm registry (shepherd/agents/registry.py)"),
             "What `python run.py algorithms` and `python run.py algorithms NAME` print, for every algorithm the "
             "registry holds. Parameters are stable-baselines3's (or sb3-contrib's) constructor arguments, "
             "checked against these types when a preset loads or an agent is added; types are numbered as in "
             "the original Shepherd (1 int, 2 float, 3 bool, 4 str, 5 JSON). A float parameter marked "
             "*schedule* also takes `lin_<start>`, a linear schedule as RL Zoo writes it.", "",
             "| algorithm | package | learner | action masks | Dict observations | image observations "
             "| action spaces |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for info in ALGORITHMS.values():
        lines.append(f"| [{info.name}](#{info.name.lower()}) | {info.package} | "
                     f"{'on-policy' if info.on_policy else 'off-policy'} | {'yes' if info.masks else 'no'} | "
                     f"{'yes' if info.dict_observations else 'no'} | "
                     f"{f'`{info.image_policy}`' if info.image_policy else 'no'} | "
                     f"{', '.join(f'`{s.__name__}`' for s in info.action_spaces)} |")
    if NOT_SERVED:
        lines += ["", "Not served:", ""] + [f"- **{name}**: {_cell(reason)}." for name, reason in NOT_SERVED.items()]
    for info in ALGORITHMS.values():
        lines += ["", f"## {info.name}", "",
                  f"{info.package}'s `{info.sb3_class.__name__}`, "
                  f"{'on' if info.on_policy else 'off'}-policy; actions: "
                  f"{', '.join(s.__name__ for s in info.action_spaces)}.", "",
                  "| parameter | type | default | also takes | meaning |", "| --- | --- | --- | --- | --- |"]
        for param in parameters(info.name).values():
            takes = [word for flag, word in ((param.nullable, "null"), (param.schedule, "schedule"),
                                             (param.text, "a string")) if flag]
            if param.choices:
                takes.append("one of " + ", ".join(f"`{c}`" for c in param.choices))
            lines.append(f"| `{param.name}` | {int(param.type)} {TYPE_NAMES[int(param.type)]} | "
                         f"`{_cell(json.dumps(param.default))}` | {_cell(', '.join(takes))} | {_cell(param.doc)} |")
        if info.excluded:
            lines += ["", "Not available in Shepherd:", ""]
            lines += [f"- `{name}`: {_cell(reason)}" for name, reason in info.excluded]
    return "\n".join(lines) + "\n"


# --- the OpenAPI description ------------------------------------------------------------------------------

def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _schema_text(schema: dict[str, Any]) -> str:
    """A schema in a few words: a link to a named schema, or its type."""
    if "$ref" in schema:
        name = _ref_name(schema["$ref"])
        return f"[{name}](#{name.lower()})"
    for key, word in (("anyOf", " or "), ("oneOf", " or "), ("allOf", " and ")):
        if key in schema:
            return word.join(_schema_text(part) for part in schema[key])
    kind = schema.get("type", "any")
    if kind == "array" and "items" in schema:
        return f"array of {_schema_text(schema['items'])}"
    if "enum" in schema:
        return " or ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    return f"{kind}{' (' + schema['format'] + ')' if 'format' in schema else ''}"


def _operation(path: str, method: str, operation: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    lines = ["", f"### `{method.upper()} {path}`", "", _cell(operation.get("summary", ""))]
    if operation.get("description"):
        lines += ["", operation["description"].strip()]
    body = operation.get("requestBody", {})
    if "$ref" in body:
        body = spec["components"]["requestBodies"][_ref_name(body["$ref"])]
    for media, content in body.get("content", {}).items():
        lines += ["", f"Request body ({media}): {_schema_text(content.get('schema', {}))}"]
    params = operation.get("parameters", [])
    if params:
        names = [p.get("name") or _ref_name(p["$ref"]) for p in params]
        lines += ["", "Parameters: " + ", ".join(f"`{n}`" for n in names)]
    lines += ["", "| status | meaning | body |", "| --- | --- | --- |"]
    for status, reply in operation.get("responses", {}).items():
        if "$ref" in reply:
            reply = spec["components"]["responses"][_ref_name(reply["$ref"])]
        schemas = [_schema_text(c.get("schema", {})) for c in reply.get("content", {}).values()]
        lines.append(f"| {status} | {_cell(reply.get('description', ''))} | {'; '.join(schemas) or '(none)'} |")
    return lines


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    lines = ["", f"### {name}", ""]
    if schema.get("description"):
        lines += [_cell(schema["description"]), ""]
    properties = schema.get("properties")
    if not properties:
        return lines + [f"{_schema_text(schema)}"]
    required = set(schema.get("required", ()))
    lines += ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
    for field, value in properties.items():
        lines.append(f"| `{field}` | {_schema_text(value)} | {'yes' if field in required else ''} | "
                     f"{_cell(value.get('description', ''))} |")
    return lines


def openapi_page() -> str:
    """shepherd/http/openapi.yaml as a page: operations by path with their statuses, then the schemas."""
    import yaml

    source = OPENAPI.read_text()
    spec = yaml.safe_load(source)
    lines = ["# OpenAPI description", "", GENERATED.format(source="shepherd/http/openapi.yaml"),
             _cell(spec["info"].get("description", "")), "",
             "A running server serves this description as JSON at `/shepherd/openapi.json`; the test suite "
             "fuzzes a live server against it (tests/e2e/test_openapi_fuzz.py).", "", "## Operations"]
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            if method in ("get", "post", "put", "delete", "patch"):
                lines += _operation(path, method, operation, spec)
    lines += ["", "## Schemas"]
    for name, schema in spec["components"]["schemas"].items():
        lines += _schema(name, schema)
    lines += ["", "## The source", "", '??? note "shepherd/http/openapi.yaml"', "",
              "    ```yaml", *("    " + line if line else "" for line in source.rstrip().splitlines()), "    ```"]
    return "\n".join(lines) + "\n"


#: the generated pages: path under docs/ -> the function that writes it
PAGES = {"reference/cli.md": command_line_page, "reference/algorithms.md": algorithms_page,
         "reference/openapi.md": openapi_page}
