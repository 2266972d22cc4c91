"""Reads of a whole learning curve: the JSON reply (a poll answered whole, a long curve streamed piece by
piece) and the CSV download, each holding one of the caller's few curve-read slots while it streams."""

from __future__ import annotations

import asyncio
import csv
import datetime
import io
import itertools
from collections.abc import Iterator
from typing import Any

import orjson
from aiohttp import web

from shepherd.admin import Operations
from shepherd.http.admin import NO_STORE, agent_id, operations, query_number
from shepherd.http.limits import StalledReader
from shepherd.http.state import CURVE_READS
from shepherd.storage import EpisodeReturn
from shepherd.storage import returns as return_log


async def agent_returns(request: web.Request) -> web.StreamResponse:
    """The episode returns (an advised agent's ``client``'s only, if named), from ``offset`` on; a client polling with ``offset`` and ``first`` (the time of
    the first record it has) gets everything again, with ``"reset": true``, when the curve was deleted.
    Only the records sent are read, off the event loop; a long reply (more than one piece of the file: a whole
    curve) takes one of the caller's few curve-read slots and is streamed, each piece read as it is written."""
    ops = operations(request)
    page = await ops.returns_json(agent_id(request), query_number(request, "offset", int) or 0,
                                  query_number(request, "first", float), request.query.get("client"))
    head = orjson.dumps({"total": page.total, "offset": page.offset, "reset": page.reset})[:-1] + b',"returns":['
    source = iter(page.pieces)
    try:
        pieces: Iterator[bytes] = source
        if page.size <= return_log.SCAN_BYTES:  # at most one piece of the file: a poll, but for large configs
            first = await asyncio.to_thread(next, source, None)  # (records refer to them: see ConfigTable)
            second = None if first is None else await asyncio.to_thread(next, source, None)
            if second is None:
                return web.Response(body=head + (first or b"") + b"]}", content_type="application/json",
                                    headers=NO_STORE)
            assert first is not None  # a second piece has a first
            pieces = itertools.chain((first, second), source)
        slots = request.app[CURVE_READS]
        with slots.slot(_reader(ops), "whole-curve reads"):
            response = web.StreamResponse(headers={**NO_STORE, "Content-Type": "application/json"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            try:
                await slots.send(request, response, head)
                separator = b""
                while (piece := await asyncio.to_thread(next, pieces, None)) is not None:
                    await slots.send(request, response, separator + piece)
                    separator = b","
                await slots.send(request, response, b"]}")
            except StalledReader:
                return response  # its connection is dropped already
            await response.write_eof()
            return response
    finally:
        await asyncio.to_thread(getattr(source, "close", lambda: None))  # the file, if not read to its end


def _reader(ops: Operations) -> str:
    """Whose curve-read slots a read takes: the admin's, or the holders' of one agent's keys."""
    return "admin" if ops.principal.admin else f"agent {ops.principal.agent_id}"


CSV_HEADER = "episode,time_unix,time_utc,return,length,phase"


def csv_rows(records: list[EpisodeReturn], first_number: int, clients: bool = False, lessons: bool = False) -> bytes:
    """CSV rows of ``records``, numbered from ``first_number``; with ``clients``, each row ends with its client;
    with ``lessons`` (an agent with lessons), then with its lesson and its config as JSON."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for number, record in enumerate(records, first_number):
        when = datetime.datetime.fromtimestamp(record.time, datetime.timezone.utc).isoformat(timespec="seconds")
        row: list[Any] = [number, f"{record.time:.3f}", when, repr(record.value), record.length, record.phase]
        if clients:
            row.append(record.client or "")
        if lessons:
            row += [record.lesson or "", "" if record.config is None else orjson.dumps(record.config).decode()]
        writer.writerow(row)
    return out.getvalue().encode()


async def returns_csv(request: web.Request) -> web.StreamResponse:
    """The whole curve as CSV, streamed: each piece is read, parsed and written out off the event loop. An
    advised agent's rows end with their client (``client`` picks one client's)."""
    ops = operations(request)
    view = await ops.agent(agent_id(request))
    client = request.query.get("client")
    with request.app[CURVE_READS].slot(_reader(ops), "whole-curve reads"):
        return await _stream_csv(request, ops, view, client)


async def _stream_csv(request: web.Request, ops: Operations, view: Any, client: str | None) -> web.StreamResponse:
    chunks = await ops.returns_chunks(view.id, client)
    clients = view.clients is not None  # an agent with named clients: each row ends with its client
    lessons = bool(view.lessons)
    numbered = 1

    def next_rows() -> bytes | None:
        nonlocal numbered
        records = next(chunks, None)
        if records is None:
            return None
        rows = csv_rows(records, numbered, clients, lessons)
        numbered += len(records)
        return rows

    response = web.StreamResponse(headers={
        **NO_STORE, "Content-Type": "text/csv; charset=utf-8",
        "Content-Disposition": f'attachment; filename="{view.owner}-{view.name}{"-" + client if client else ""}-returns.csv"'})
    response.enable_chunked_encoding()
    await response.prepare(request)
    slots = request.app[CURVE_READS]
    try:
        await slots.send(request, response, (CSV_HEADER + (",client" if clients else "")
                                             + (",lesson,config" if lessons else "") + "\n").encode())
        while (rows := await asyncio.to_thread(next_rows)) is not None:
            if rows:
                await slots.send(request, response, rows)
    except StalledReader:
        return response  # its connection is dropped already
    finally:
        await asyncio.to_thread(chunks.close)  # type: ignore[attr-defined]
    await response.write_eof()
    return response
