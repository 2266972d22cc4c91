"""Where an agent's training metrics live in its folder, and reading the last rows of their CSV.

The learner writes them (`shepherd.agents.metrics`): ``<agent folder>/metrics/progress.csv`` (SB3's CSV
format: one header line naming every column, then a row per dump, empty where a value was not recorded)
and TensorBoard event files beside it. This module reads the CSV's tail without reading the whole file, so
polling a long run costs the rows asked for.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

METRICS_FOLDER = "metrics"
PROGRESS_FILE = "progress.csv"
_BLOCK = 64 * 1024


def metrics_folder(agent_folder: Path) -> Path:
    """Where an agent's metrics (CSV and TensorBoard event files) are written."""
    return agent_folder / METRICS_FOLDER


def progress_path(agent_folder: Path) -> Path:
    return metrics_folder(agent_folder) / PROGRESS_FILE


@dataclass(frozen=True)
class MetricRows:
    """The last rows of an agent's metrics: ``columns`` by name, each row a list in that order (a number,
    a text such as the phase, or None where the row has no value)."""

    columns: list[str]
    rows: list[list[Any]]


def _value(text: str) -> Any:
    if text == "":
        return None
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else None


def _tail_lines(handle: Any, size: int, start: int, count: int) -> list[bytes]:
    """The last ``count`` complete lines between ``start`` and ``size`` (a line still being written, without
    its newline, is left out)."""
    end, data = size, b""
    while end > start and data.count(b"\n") <= count:
        begin = max(start, end - _BLOCK)
        handle.seek(begin)
        data = handle.read(end - begin) + data
        end = begin
    if not data.endswith(b"\n"):
        data = data[:data.rfind(b"\n") + 1]
    lines = data.split(b"\n")[:-1]
    if end > start:  # the first piece may be the end of an earlier line
        lines = lines[1:]
    return lines[-count:] if count else []


def read_progress(path: Path, rows: int, columns: list[str] | None = None) -> MetricRows:
    """The last ``rows`` rows of a metrics CSV, with only ``columns`` (in that order; unknown names come
    back as all None) or every column. A missing file has none (an agent that has not learned yet, or a
    data folder from before metrics were written)."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return MetricRows(list(columns or []), [])
    with handle:
        size = os.fstat(handle.fileno()).st_size
        header = handle.readline()
        if not header.endswith(b"\n"):
            return MetricRows(list(columns or []), [])
        names = next(csv.reader([header.decode()]))
        lines = _tail_lines(handle, size, len(header), max(0, rows))
    wanted = list(columns) if columns else names
    where = {name: index for index, name in enumerate(names)}
    picked = [where.get(name) for name in wanted]
    out = []
    for fields in csv.reader(io.StringIO(b"\n".join(lines).decode(errors="replace"))):
        if len(fields) != len(names):  # read while the writer rewrote the file for a new column
            continue
        out.append([None if index is None else _value(fields[index]) for index in picked])
    return MetricRows(wanted, out)
