"""The fault boundary's machinery: an exception that escapes a reader becomes a reject (``reader_error``, or the
reader's own error code), located at the record being read; records not yet accounted are counted into it.

:mod:`msgtrain.ingest.boundary` drives it (:func:`~msgtrain.ingest.boundary.read_events`), and
:mod:`msgtrain.ingest.isolate` re-reads a file without the record a fault comes from.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ParseError
from msgtrain.ingest.core import base
from msgtrain.ingest.core.base import (
    _TRACE,
    Reader,
    ReadEvent,
    ReadGraph,
    ReadReject,
    RecordTask,
    SourceRef,
    _LineTrace,
    _numbered_lines,
    active_chunk,
    excerpt,
    iter_chunk_lines,
    load_json_document,
)
from msgtrain.ingest.core.json_stream import is_array_document, iter_array_items


@dataclass
class _Fault:
    """An exception that escaped a reader's generator (which cannot go on after it)."""

    error: BaseException
    detail: str
    line: int | None
    raw: bytes


def unreadable_file_error(path: Path, e: OSError) -> MsgtrainError:
    return MsgtrainError(
        f"{type(e).__name__}: {e.strerror or e}",
        where=str(path),
        code="unreadable_file",
        hint="check the path and its permissions",
    )


def fault_reject(
    source: SourceRef, e: BaseException, who: str, detail: str, raw: Any = None, count: int = 1
) -> ReadReject:
    """The ``reader_error`` reject for an exception that escaped a reader (never raises)."""
    try:
        text = str(e)
    except Exception:
        text = ""
    message = excerpt(f"{type(e).__name__}: {text}" if text else type(e).__name__, 500)
    err = MsgtrainError(
        message,
        where=str(source),
        code="reader_error",
        hint=f"{who} failed on this record (input it does not expect, or a bug in it); traceback in the debug log",
    )
    return ReadReject(source, err, excerpt(raw) if raw is not None else "", count=count, detail=detail)


def log_traceback(debug_log: str | Path | None, reject: ReadReject) -> None:
    """Append a reader_error's traceback to the debug log (best effort: a log that cannot be written loses the
    traceback, never the run). One ``write`` per entry, so entries of parallel workers do not interleave."""
    if not debug_log:
        return
    entry = f"--- {reject.source} [{reject.error.code}] {reject.error.message}\n{reject.detail.rstrip()}\n"
    try:
        with open(debug_log, "a", encoding="utf-8", errors="replace") as f:
            f.write(entry)
    except OSError:
        pass


def default_debug_log() -> Path:
    """The debug log of commands without a state directory (validate, inspect, stats): one file in the temp dir."""
    return Path(tempfile.gettempdir()) / "msgtrain-debug.log"


def _read_once(reader: Reader, path: Path) -> Iterator[ReadEvent | _Fault]:
    trace = _LineTrace(str(path))
    token = _TRACE.set(trace)
    try:
        items = iter(reader.read(path))
        while True:
            try:
                item = next(items)
            except StopIteration:
                return
            except Exception as e:
                yield _Fault(e, traceback.format_exc(), trace.line, trace.raw)
                return
            if isinstance(item, RecordTask):
                yield from _run_task(reader, item)
            else:
                yield item
    finally:
        # A generator closed from another context cannot reset; that context never saw the trace anyway.
        with contextlib.suppress(ValueError):
            _TRACE.reset(token)


def _oversized(task: RecordTask) -> ReadReject | None:
    """A reject when a record cut out of a document is larger than the per-record limit.

    JSONL lines are bounded as they are read (:func:`iter_json_lines`); a record inside a JSON document (an item of
    a list, a simulation of a results file) is bounded here, before any reader works on it, so the same limit holds
    whatever container the record came in. The size is that of its compact JSON text (C speed, linear), measured
    unless the reader bounds it within the limit (``RecordTask.size_bound``: a record of a small JSON file).
    """
    if task.raw is None or task.source.record.startswith("line ") or not isinstance(task.raw, dict | list):
        return None
    if task.size_bound is not None and task.size_bound <= base.MAX_RECORD_BYTES:
        return None
    try:
        size = len(json.dumps(task.raw, ensure_ascii=False, separators=(",", ":"), default=str))
    except (TypeError, ValueError, RecursionError):
        return None  # not JSON text at all: the reader's own checks judge it
    if size <= base.MAX_RECORD_BYTES:
        return None
    err = ParseError(
        f"record of about {size} bytes exceeds the {base.limit_text(base.MAX_RECORD_BYTES)}",
        where=str(task.source),
        hint="split or drop the record, or raise --max-record-mb (a worker holds about ten times it)",
        code="record_too_large",
    )
    return ReadReject(task.source, err, excerpt(task.raw), count=task.records)


def _run_task(reader: Reader, task: RecordTask) -> list[ReadEvent]:
    too_large = _oversized(task)
    if too_large is not None:
        return [too_large]
    from msgtrain.ingest.common.message_like import assistant_turns_in

    try:
        events = list(task.parse())
    except MsgtrainError as e:
        err = e if e.where else e.located(str(task.source))
        turns = assistant_turns_in(task.raw)
        return [ReadReject(task.source, err, excerpt(task.raw), count=task.records, turns=turns)]
    except Exception as e:
        reject = fault_reject(
            task.source, e, f"the {reader.name} reader", traceback.format_exc(), task.raw, task.records
        )
        reject.turns = assistant_turns_in(task.raw)
        return [reject]
    for event in events:
        if isinstance(event, ReadReject) and not event.turns:
            event.turns = assistant_turns_in(task.raw) if event.count == task.records else 0
    return events


def records_of(event: ReadEvent) -> int:
    """How many input records an event accounts for."""
    if isinstance(event, ReadGraph):
        return event.records
    return event.count


def _fault_to_reject(reader: Reader, path: Path, fault: _Fault, count: int) -> ReadReject:
    """The reject for a fault: located at the line being read when known, else at the file."""
    source = SourceRef(str(path), f"line {fault.line}") if fault.line is not None else SourceRef(str(path), "file")
    e = fault.error
    if isinstance(e, MsgtrainError):
        err = e if e.where else e.located(str(source))
        return ReadReject(source, err, excerpt(fault.raw) if fault.raw else "", count=count)
    if isinstance(e, OSError):
        return ReadReject(source, unreadable_file_error(path, e), count=count)
    return fault_reject(source, e, f"the {reader.name} reader", fault.detail, fault.raw or None, count)


def _read_streaming(reader: Reader, path: Path) -> Iterator[ReadEvent]:
    accounted = 0
    for item in _read_once(reader, path):
        if isinstance(item, _Fault):
            rest = _unaccounted(path, accounted) if item.line is not None else _unaccounted_items(path, accounted)
            yield _fault_to_reject(reader, path, item, max(rest, 1))
            return
        accounted += records_of(item)
        yield item


def _unaccounted_items(path: Path, accounted: int) -> int:
    """Records of a one-document file not yet accounted: a top-level list's items count one each (the readers of
    such files account per item; one larger than a record is counted as it is read, item by item), any other
    document is one record."""
    try:
        chunk = active_chunk(path)
        if chunk is not None and chunk.items:  # a chunk of such an array's items: its own items
            return sum(1 for run in chunk.runs for _ in iter_array_items(path, str(path), span=run)) - accounted
        if path.stat().st_size > base.MAX_RECORD_BYTES and is_array_document(path):
            return sum(1 for _ in iter_array_items(path, str(path))) - accounted
        value = load_json_document(path)
    except (MsgtrainError, OSError, MemoryError):
        return 1
    return len(value) - accounted if isinstance(value, list) else 1 - accounted


def _unaccounted(path: Path, accounted: int) -> int:
    """Non-blank lines of ``path`` (or of its active chunk) not yet accounted by ``accounted`` records."""
    chunk = active_chunk(path)
    try:
        lines = iter_chunk_lines(path, chunk) if chunk is not None else _numbered_lines(path)
        total = sum(1 for _, raw in lines if raw.strip())
    except OSError:
        return 1
    return total - accounted
