"""Re-reading a file without the records a reader fails on: the part of the fault boundary that isolates a fault
which escaped a reader's generator (:func:`msgtrain.ingest.base.read_events` calls it).

Invariants:
- Only the failing record is lost (or, for a reader that groups lines, its conversation): the file is read again
  without it, as a chunk leaves lines out (:mod:`msgtrain.ingest.chunks`) or as a view of a one-document file leaves
  an item out (:class:`msgtrain.ingest.base._DocumentView`), so every other record yields what it would have yielded.
- The failing record is the one being read when the fault escaped, or — for a reader that builds its session after
  the last record was handed out — the last record of the shortest failing prefix, found by binary search (about
  log2(records) reads per fault; faults are rare).
- Bounded: after :data:`MAX_RETRIES` faults in one file, the rest of it is one reject; books always balance.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError
from msgtrain.ingest.base import (
    _DOCUMENT_VIEW,
    Reader,
    ReadEvent,
    ReadReject,
    SourceRef,
    _DocumentView,
    _Fault,
    _fault_to_reject,
    _numbered_lines,
    _read_once,
    _unaccounted,
    _unaccounted_items,
    document_records,
    excerpt,
    fault_reject,
    load_json_document,
    records_of,
)

MAX_RETRIES = 8  # faults per file the boundary isolates by re-reading; after that the rest is one reject


def _each_line(value: Any) -> tuple[str, ...]:
    """The key function of a JSONL file whose reader does not group lines: every line stands alone, so the boundary
    leaves out just the line a fault comes from."""
    return ()


def retry_keys(reader: Reader, path: Path) -> Any:
    """How to leave out a failing record of this file when reading it again: the reader's chunk key function (the
    record's whole conversation goes), or :func:`_each_line` for a JSONL file it does not cut (only that line goes);
    None when the file is not line-oriented."""
    from msgtrain.ingest.chunks import is_jsonl, key_function

    try:
        if not is_jsonl(path):
            return None
        return key_function(reader, path) or _each_line
    except Exception:
        return None


def read_isolating(reader: Reader, path: Path, keys: Any) -> Iterator[ReadEvent]:
    """Read a JSONL file, re-reading it without the record each fault comes from (:func:`_culprit`), and without the
    rest of that record's conversation group (``keys``).

    Events are held back until a read completes, since a fault may invalidate what came before it (a reader that
    groups lines emits its conversations at the end)."""
    from msgtrain.ingest.chunks import active_chunk, chunk_without, reading_chunk

    base = active_chunk(path)
    failed: list[int] = []
    rejects: list[ReadReject] = []
    chunk = base
    for attempt in range(MAX_RETRIES + 1):
        events: list[ReadEvent] = []
        fault: _Fault | None = None
        with reading_chunk(path, chunk):
            for item in _read_once(reader, path):
                if isinstance(item, _Fault):
                    fault = item
                    break
                events.append(item)
            if fault is not None and (
                fault.line is None or attempt == MAX_RETRIES or isinstance(fault.error, MsgtrainError)
            ):
                accounted = sum(records_of(ev) for ev in events)
                rest = _unaccounted(path, accounted) if fault.line is not None else 1
                if attempt == MAX_RETRIES and fault.line is not None:
                    fault.error = MsgtrainError(
                        f"{MAX_RETRIES} records of this file made the {reader.name} reader fail; the rest of the"
                        f" file is not read (last: {type(fault.error).__name__}: {excerpt(str(fault.error), 300)})",
                        code="reader_error",
                        hint="the earlier reader_error rejects of this file name the records; their tracebacks are"
                        " in the debug log",
                    )
                events.append(_fault_to_reject(reader, path, fault, max(rest, 1)))
                fault = None
        if fault is None:
            yield from rejects
            yield from events
            return
        try:
            fault = _culprit(reader, path, chunk, fault)
            assert fault.line is not None
            failed.append(fault.line)
            chunk, counts = chunk_without(path, keys, base, failed)
        except Exception as e:  # the file cannot be regrouped: what is left is one reject
            yield from rejects
            rest = max(_unaccounted(path, sum(r.count for r in rejects)), 1)
            yield fault_reject(SourceRef(str(path), "file"), e, "regrouping", traceback.format_exc(), count=rest)
            return
        rejects.append(_fault_to_reject(reader, path, fault, counts[fault.line]))
        if chunk is None:  # nothing left to read
            yield from rejects
            return


def _culprit(reader: Reader, path: Path, within: Any, fault: _Fault) -> _Fault:
    """``fault`` located at the record it comes from: the last line of the shortest prefix of the file (of
    ``within``, a chunk, when set) whose reading raises the same exception type.

    A streaming reader fails on the line it was handed last (one prefix read confirms it). A reader that collects
    every record and builds its session at the end fails after the last line was handed out, whichever record is
    bad: a binary search over prefixes finds that record in about log2(lines) reads. Faults are rare, and
    :data:`MAX_RETRIES` bounds how many a file may cost."""
    from msgtrain.ingest.chunks import chunk_through, iter_chunk_lines, reading_chunk

    assert fault.line is not None
    numbered = iter_chunk_lines(path, within) if within is not None else _numbered_lines(path)
    lines = [(n, raw) for n, raw in numbered if raw.strip() and n <= fault.line]
    if not lines:
        return fault
    kind = type(fault.error)

    def fails(count: int) -> bool:
        """Whether reading only the first ``count`` records raises the fault again."""
        prefix = chunk_through(path, within, lines[count - 1][0]) if count else None
        if prefix is None:
            return False
        with reading_chunk(path, prefix):
            return any(isinstance(item, _Fault) and type(item.error) is kind for item in _read_once(reader, path))

    hi = len(lines)  # the first ``hi`` records fail (the reader failed having been handed no more)
    if fails(hi - 1):
        lo, hi = 0, hi - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fails(mid):
                hi = mid
            else:
                lo = mid
    line, raw = lines[hi - 1]
    return fault if line == fault.line else _Fault(fault.error, fault.detail, line, raw)


def read_document_isolating(reader: Reader, path: Path, key: str) -> Iterator[ReadEvent]:
    """Read a one-document file, re-reading it without each record a fault comes from.

    The reader names its document's record list (``document_records``); the fault boundary serves
    :func:`load_json_document` with items left out (:class:`_DocumentView`) and finds the failing record as the last
    item of the shortest failing prefix of that list (binary search), as :func:`_culprit` does for lines. Events are
    held back until a read completes. A fault the view cannot help with (the reader did not load the document, a
    reader's own error, no record list, :data:`MAX_RETRIES` faults) ends as :func:`_read_streaming` ends: the rest of
    the file is one reject."""
    keep: list[int] | None = None
    rejects: list[ReadReject] = []
    items: list[Any] = []
    for attempt in range(MAX_RETRIES + 1):
        events, fault, _ = _read_document(reader, path, key, keep)
        if keep is not None:
            events = [_renumbered(ev, path, key, keep) for ev in events]
        if fault is None:
            yield from rejects
            yield from events
            return
        if keep is None:  # the first fault: is the document's record list there to narrow it down?
            try:
                found = document_records(load_json_document(path), key)
            except Exception:
                found = None
            items = found or []
            keep = list(range(len(items)))
        culprit = None
        if attempt < MAX_RETRIES and not isinstance(fault.error, MsgtrainError) and keep:
            culprit = _document_culprit(reader, path, key, keep, type(fault.error))
        if culprit is None:
            yield from rejects
            accounted = sum(records_of(ev) for ev in events) + sum(r.count for r in rejects)
            yield from events
            total = len(items) if items else _unaccounted_items(path, 0)
            yield _fault_to_reject(reader, path, fault, max(total - accounted, 1))
            return
        ref = SourceRef(str(path), f"{key}[{culprit}]" if key else f"item {culprit}")
        rejects.append(fault_reject(ref, fault.error, f"the {reader.name} reader", fault.detail, items[culprit]))
        keep.remove(culprit)


def _renumbered(event: ReadEvent, path: Path, key: str, keep: list[int]) -> ReadEvent:
    """``event`` of a read through a view, its record named by its index in the whole document (``item 3``,
    ``history[3]``) rather than in the view, which lacks the items left out."""
    record = event.source.record
    prefix, close = ("item ", "") if key == "" else (f"{key}[", "]")
    number = record[len(prefix) : len(record) - len(close)] if record.startswith(prefix) else ""
    if not number.isdigit() or not record.endswith(close) or int(number) >= len(keep):
        return event
    renamed = f"{prefix}{keep[int(number)]}{close}"
    source = SourceRef(event.source.file, renamed)
    if isinstance(event, ReadReject):
        err = event.error
        where = (err.where or "").replace(f"({record})", f"({renamed})").replace(f" {record} ", f" {renamed} ")
        error = type(err)(err.message, where=where or None, hint=err.hint, code=err.code)
        return ReadReject(source, error, event.excerpt, event.count, event.detail)
    return dataclasses.replace(event, source=source)


def _read_document(
    reader: Reader, path: Path, key: str, keep: list[int] | None
) -> tuple[list[ReadEvent], _Fault | None, _DocumentView | None]:
    """One read of a document (seen through a view keeping the items ``keep``, when given): its events and fault."""
    view = _DocumentView(str(path), key, keep) if keep is not None else None
    token = _DOCUMENT_VIEW.set(view)
    try:
        events: list[ReadEvent] = []
        for item in _read_once(reader, path):
            if isinstance(item, _Fault):
                return events, item, view
            events.append(item)
        return events, None, view
    finally:
        _DOCUMENT_VIEW.reset(token)


def _document_culprit(reader: Reader, path: Path, key: str, keep: list[int], kind: type[BaseException]) -> int | None:
    """The index (into the whole document's records) of the item a fault comes from: the last item of the shortest
    prefix of ``keep`` whose reading raises ``kind`` again; None when the reader does not read through the view."""

    def fails(count: int) -> bool | None:
        _, fault, probe = _read_document(reader, path, key, keep[:count])
        if probe is None or not probe.applied:
            return None
        return fault is not None and type(fault.error) is kind

    lo, hi = 0, len(keep)  # reading all of ``keep`` fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        verdict = fails(mid)
        if verdict is None:
            return None
        if verdict:
            hi = mid
        else:
            lo = mid
    if fails(hi) is not True:  # the view did not take, or the fault does not come from the records
        return None
    return keep[hi - 1]
