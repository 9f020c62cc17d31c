"""Re-reading a file around the records a reader fails on: the part of the fault boundary that isolates a fault
which escaped a reader's generator (:func:`msgtrain.ingest.core.base.read_events` calls it).

Invariants:
- A fault costs exactly what an unreadable record costs. The file is read again with the failing record handed to
  the reader as a rejected one (a JSONL line as a ``reader_error`` in place of its value, a document's item as
  ``null``, a directory log's record file as an unreadable file), so the reader applies its own policy — a session
  keeps the turns after a rejected record as context only, never trained, since the context they were sampled in
  held that record — and reads every other record. A reader that groups lines (``chunk_keys``) loses the failing
  record's conversation instead, as a chunk leaves it out (:mod:`msgtrain.ingest.core.chunks`).
- The failing record is the one being read when the fault escaped, or — for a reader that builds its session after
  the last record was handed out — the last record of the shortest failing prefix, found by binary search (about
  log2(records) reads per fault; faults are rare). The reject carries the fault (type, message, traceback).
- Bounded: after :data:`MAX_RETRIES` faults in one file, the rest of it is one reject; books always balance.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError
from msgtrain.ingest.core.base import (
    _DOCUMENT_VIEW,
    _FOLDER_READ,
    _LEFT_OUT_LINES,
    Reader,
    ReadEvent,
    ReadReject,
    SourceRef,
    _DocumentView,
    _FolderRead,
    _numbered_lines,
    document_records,
    excerpt,
    load_json_document,
)
from msgtrain.ingest.faults import (
    _Fault,
    _fault_to_reject,
    _read_once,
    _unaccounted,
    _unaccounted_items,
    fault_reject,
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
    from msgtrain.ingest.core.chunks import is_jsonl, key_function

    try:
        if not is_jsonl(path):
            return None
        return key_function(reader, path) or _each_line
    except Exception:
        return None


def read_isolating(reader: Reader, path: Path, keys: Any) -> Iterator[ReadEvent]:
    """Read a JSONL file isolating each fault: a reader that groups lines loses the failing record's conversation
    (:func:`read_grouped_isolating`); any other reader sees the failing line as a rejected line
    (:func:`read_lines_isolating`)."""
    if keys is _each_line:
        return read_lines_isolating(reader, path)
    return read_grouped_isolating(reader, path, keys)


def read_lines_isolating(reader: Reader, path: Path) -> Iterator[ReadEvent]:
    """Read a JSONL file, re-reading it with each line a fault comes from (:func:`_culprit`) handed to the reader as
    a rejected line: a ``reader_error`` in place of its value, which the reader rejects as it rejects a line that is
    not JSON — and, like it, keeps later turns of that session as context, never trained (their context lacked the
    record): a fault costs exactly what an unreadable line costs. Tracebacks are put back on those rejects."""
    from msgtrain.ingest.core.chunks import active_chunk

    failed: dict[int, MsgtrainError] = {}
    details: dict[int, str] = {}
    token = _LEFT_OUT_LINES.set((str(path), failed))
    try:
        for attempt in range(MAX_RETRIES + 1):
            events: list[ReadEvent] = []
            fault: _Fault | None = None
            for item in _read_once(reader, path):
                if isinstance(item, _Fault):
                    fault = item
                    break
                events.append(item)
            events = [_with_line_detail(ev, details) for ev in events]
            if fault is None:
                yield from events
                return
            stuck = fault.line is None or fault.line in failed
            if attempt == MAX_RETRIES or stuck:
                rest = _unaccounted(path, sum(records_of(ev) for ev in events)) if fault.line is not None else 1
                if attempt == MAX_RETRIES and not stuck and not isinstance(fault.error, MsgtrainError):
                    fault.error = _too_many(reader, fault)
                yield from events
                yield _fault_to_reject(reader, path, fault, max(rest, 1))
                return
            fault = _culprit(reader, path, active_chunk(path), fault)
            assert fault.line is not None
            ref = SourceRef(str(path), f"line {fault.line}")
            if isinstance(fault.error, MsgtrainError):
                failed[fault.line] = own_error_at(fault.error, ref)
                continue
            error = fault_reject(ref, fault.error, f"the {reader.name} reader", "").error
            failed[fault.line] = MsgtrainError(error.message, hint=error.hint, code="reader_error")
            details[fault.line] = fault.detail
    finally:
        _LEFT_OUT_LINES.reset(token)


def own_error_at(e: MsgtrainError, ref: SourceRef) -> MsgtrainError:
    """A reader's own error, located at the record it comes from (``ref``). A location the error carried in the
    same file names where the reader noticed it (a session reader notices at the file's last line), not the
    record, so it is replaced; any other (``message[3]``) is kept after the record's."""
    inner = e.where or ""
    if inner.startswith(ref.file):
        inner = inner[len(ref.file) :].lstrip(":0123456789").strip()
    return type(e)(e.message, where=f"{ref} {inner}".strip(), hint=e.hint, code=e.code)


def _same_fault(a: BaseException, b: BaseException) -> bool:
    """Whether two faults are the same kind: the same exception type and, for msgtrain's own errors, code."""
    return type(a) is type(b) and getattr(a, "code", None) == getattr(b, "code", None)


def _with_line_detail(event: ReadEvent, details: dict[int, str]) -> ReadEvent:
    """A reject of a line the boundary handed over as rejected, with the traceback of the fault it caused."""
    if isinstance(event, ReadReject) and event.error.code == "reader_error" and not event.detail:
        number = event.source.record.removeprefix("line ")
        if number.isdigit() and int(number) in details:
            return dataclasses.replace(event, detail=details[int(number)])
    return event


def _too_many(reader: Reader, fault: _Fault) -> MsgtrainError:
    return MsgtrainError(
        f"{MAX_RETRIES} records of this file made the {reader.name} reader fail; the rest of the file is not read"
        f" (last: {type(fault.error).__name__}: {excerpt(str(fault.error), 300)})",
        code="reader_error",
        hint="the earlier reader_error rejects of this file name the records; their tracebacks are in the debug log",
    )


def read_grouped_isolating(reader: Reader, path: Path, keys: Any) -> Iterator[ReadEvent]:
    """Read a JSONL file, re-reading it without the record each fault comes from (:func:`_culprit`), and without the
    rest of that record's conversation group (``keys``).

    Events are held back until a read completes, since a fault may invalidate what came before it (a reader that
    groups lines emits its conversations at the end)."""
    from msgtrain.ingest.core.chunks import active_chunk, chunk_without, reading_chunk

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
            if fault is not None and (fault.line is None or attempt == MAX_RETRIES):
                accounted = sum(records_of(ev) for ev in events)
                rest = _unaccounted(path, accounted) if fault.line is not None else 1
                if attempt == MAX_RETRIES and fault.line is not None and not isinstance(fault.error, MsgtrainError):
                    fault.error = _too_many(reader, fault)
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
        if isinstance(fault.error, MsgtrainError):
            fault.error = own_error_at(fault.error, SourceRef(str(path), f"line {fault.line}"))
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
    from msgtrain.ingest.core.chunks import chunk_through, iter_chunk_lines, reading_chunk

    assert fault.line is not None
    # Line numbers only: the file's lines are not held (one is read back below, the culprit's).
    lines: list[int] = []
    numbered = iter_chunk_lines(path, within) if within is not None else _numbered_lines(path)
    for n, raw in numbered:
        if n > fault.line:
            break
        if raw.strip():
            lines.append(n)
    if not lines:
        return fault

    def fails(count: int) -> bool:
        """Whether reading only the first ``count`` records raises the fault again."""
        prefix = chunk_through(path, within, lines[count - 1]) if count else None
        if prefix is None:
            return False
        with reading_chunk(path, prefix):
            return any(
                isinstance(item, _Fault) and _same_fault(item.error, fault.error) for item in _read_once(reader, path)
            )

    hi = len(lines)  # the first ``hi`` records fail (the reader failed having been handed no more)
    if fails(hi - 1):
        lo, hi = 0, hi - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fails(mid):
                hi = mid
            else:
                lo = mid
    line = lines[hi - 1]
    if line == fault.line:
        return fault
    numbered = iter_chunk_lines(path, within) if within is not None else _numbered_lines(path)
    raw = next((raw for n, raw in numbered if n == line), b"")
    return _Fault(fault.error, fault.detail, line, raw)


def read_document_isolating(reader: Reader, path: Path, key: str) -> Iterator[ReadEvent]:
    """Read a one-document file, re-reading it with each record a fault comes from made ``null``.

    The reader names its document's record list (``document_records``); the fault boundary serves
    :func:`load_json_document` through a :class:`_DocumentView` and finds the failing record as the last item of the
    shortest failing prefix of that list (binary search), as :func:`_culprit` does for lines. On the re-read the
    reader rejects that ``null`` item as it rejects any item that is not a record — keeping later turns of the session
    as context, never trained — and the boundary puts the fault (``reader_error``, traceback, excerpt) on that reject:
    a fault costs exactly what an unreadable item costs. A fault the view cannot help with (the reader did not load
    the document, a reader's own error, no record list, :data:`MAX_RETRIES` faults) ends as :func:`_read_streaming`
    ends: the rest of the file is one reject."""
    nulled: dict[int, ReadReject] = {}
    items: list[Any] | None = None
    for attempt in range(MAX_RETRIES + 1):
        events, fault, _ = _read_document(reader, path, key, frozenset(nulled), None)
        if nulled:
            events = [_fault_on_item(ev, key, nulled) for ev in events]
        if fault is None:
            yield from events
            return
        if items is None:  # the first fault: is the document's record list there to narrow it down?
            try:
                items = document_records(load_json_document(path), key) or []
            except Exception:
                items = []
        culprit = None
        if attempt < MAX_RETRIES and items:
            culprit = _document_culprit(reader, path, key, len(items), frozenset(nulled), fault.error)
        if culprit is None or culprit in nulled:
            accounted = sum(records_of(ev) for ev in events)
            yield from events
            total = len(items) if items else _unaccounted_items(path, 0)
            yield _fault_to_reject(reader, path, fault, max(total - accounted, 1))
            return
        ref = SourceRef(str(path), _item_ref(key, culprit))
        if isinstance(fault.error, MsgtrainError):
            nulled[culprit] = ReadReject(ref, own_error_at(fault.error, ref), excerpt(items[culprit]))
        else:
            nulled[culprit] = fault_reject(ref, fault.error, f"the {reader.name} reader", fault.detail, items[culprit])


def _item_ref(key: str, index: int) -> str:
    """How the boundary names an item of a document's record list (readers say ``item 3`` or ``history[3]``)."""
    return f"{key}[{index}]" if key else f"item {index}"


def _fault_on_item(event: ReadEvent, key: str, nulled: dict[int, ReadReject]) -> ReadEvent:
    """The reader's reject of an item the boundary made ``null``, carrying the fault that item caused instead."""
    if not isinstance(event, ReadReject):
        return event
    for index, fault in nulled.items():
        if event.source.record in (_item_ref(key, index), f"item {index}"):
            return dataclasses.replace(fault, source=event.source, count=event.count)
    return event


def _read_document(
    reader: Reader, path: Path, key: str, nulled: frozenset[int], limit: int | None
) -> tuple[list[ReadEvent], _Fault | None, _DocumentView]:
    """One read of a document through a view (items ``nulled`` made null, only the first ``limit`` items)."""
    view = _DocumentView(str(path), key, nulled, limit)
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


def _document_culprit(
    reader: Reader, path: Path, key: str, size: int, nulled: frozenset[int], kind: BaseException
) -> int | None:
    """The index of the item a fault comes from: the last item of the shortest prefix of the record list (of
    ``size`` items) whose reading raises a fault of ``kind`` again; None when the reader does not read through the
    view."""

    def fails(count: int) -> bool | None:
        _, fault, probe = _read_document(reader, path, key, nulled, count)
        if not probe.applied:
            return None
        return fault is not None and _same_fault(fault.error, kind)

    lo, hi = 0, size  # reading every item fails
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
    return hi - 1


def read_folder_isolating(reader: Reader, path: Path) -> Iterator[ReadEvent]:
    """Read a directory log, re-reading it without each record file a fault comes from: the file the reader loaded
    last (:func:`load_json_document`) when the fault escaped. On the re-read, loading that file raises the fault as a
    ``reader_error``, so the reader rejects it as it rejects any unreadable record file and reads the others; its
    traceback is put back on that reject. A fault this cannot place ends as :func:`_read_streaming` ends."""
    folder = _FolderRead()
    details: dict[str, str] = {}
    for attempt in range(MAX_RETRIES + 1):
        folder.last = None
        token = _FOLDER_READ.set(folder)
        try:
            events: list[ReadEvent] = []
            fault: _Fault | None = None
            for item in _read_once(reader, path):
                if isinstance(item, _Fault):
                    fault = item
                    break
                events.append(item)
        finally:
            _FOLDER_READ.reset(token)
        events = [_with_detail(ev, details) for ev in events]
        last = folder.last
        if fault is None:
            yield from events
            return
        if attempt == MAX_RETRIES or last is None or last in folder.left_out:
            yield from events
            yield _fault_to_reject(reader, path, fault, 1)
            return
        if isinstance(fault.error, MsgtrainError):  # the reader's own error: that record file is rejected with it
            folder.left_out[last] = type(fault.error)(fault.error.message, hint=fault.error.hint, code=fault.error.code)
            continue
        error = fault_reject(SourceRef(last, "file"), fault.error, f"the {reader.name} reader", fault.detail).error
        folder.left_out[last] = MsgtrainError(error.message, hint=error.hint, code=error.code)  # the reader locates it
        details[last] = fault.detail


def _with_detail(event: ReadEvent, details: dict[str, str]) -> ReadEvent:
    """A reject of a record file the boundary left out, with the traceback of the fault that file caused."""
    if isinstance(event, ReadReject) and event.error.code == "reader_error" and event.source.file in details:
        return dataclasses.replace(event, detail=details[event.source.file])
    return event
