"""What a reader reads with: the reader interface (:mod:`msgtrain.ingest.core.events`, re-exported here) and the
helpers that read a file's head, its JSON lines (or a chunk's) and its JSON document.

Layers of the ingest package, bottom up (none imports upwards; ``make lint`` checks it): ``events`` →
``text_check`` → ``base`` → the readers, ``chunks`` → ``faults`` → ``isolate`` → ``registry`` (the table of
readers) → ``detect`` → ``boundary`` (:func:`~msgtrain.ingest.boundary.read_events`).

Invariants:
- A reader turns one file into a stream of events: :class:`ReadGraph` (a message graph built from one or more
  input records), :class:`ReadReject` (a bad record, with the error and a bounded excerpt of the raw bytes), and
  :class:`ReadSkip` (records that carry no conversation, e.g. telemetry lines, counted with a reason).
- Accounting: every input record of a file is counted exactly once, in ``ReadGraph.records``,
  ``ReadReject`` (one each) or ``ReadSkip.count``; the pipeline asserts records read = converted + rejected +
  skipped.
- A bad record never stops the file: readers yield a reject and go on; only an unreadable file (missing, not the
  format at all) raises.
- Readers stream: JSONL is read line by line; a file held whole (a JSON document, a YAML cassette, an archive's
  member) is one record for memory purposes, refused above the same ``--max-record-mb`` before it is read
  (:func:`check_whole_file`) — except a JSON document whose top level is an array: larger than the limit, its items
  are the records, read one at a time (:mod:`msgtrain.ingest.core.json_stream`), never the file whole.
- Bounded lines: every line reader (:func:`bounded_lines`) holds at most :data:`MAX_RECORD_BYTES` + 1 bytes of a
  line; a longer line (a crashed writer's NUL tail, a sparse file) is skipped in :data:`LINE_STEP` steps, never held,
  and comes out as a :class:`LongLine` (its head and its true size), which readers reject as ``record_too_large``.
- Ingest knows nothing of tokens.

The fault boundary (one place, :func:`msgtrain.ingest.boundary.read_events`; every consumer — convert, validate,
inspect — reads through it, never through ``Reader.read`` directly):
- Whatever escapes a reader becomes a reject and the batch goes on. A reader's own :class:`MsgtrainError` keeps its
  code; any other exception (a reader bug, or input nobody foresaw) is a ``reader_error`` reject carrying the
  exception type and message, the record it was reading and a bounded excerpt made by :func:`excerpt`, which
  cannot fail on any value. The traceback rides on the reject (``ReadReject.detail``) for the caller's debug log;
  it is never printed.
- Per record: a reader may yield a :class:`RecordTask` (a record's location, its raw value and a callable that
  parses it into events) instead of parsing inside its generator. The driver calls it inside the boundary, so a
  fault costs exactly that record and the reader's generator (which a raised exception would end for good) goes
  on. :func:`msgtrain.ingest.common.conversation_files.read_conversation_file` does this for every conversation-list
  format.
- Per record, when an exception escapes a reader's generator itself (a session reader builds one session from
  every record of its file, and an exception ends its generator for good): the driver drops the events of that
  read, finds the record the fault comes from and reads the file again with that record handed to the reader as a
  rejected one — a JSONL line as a ``reader_error`` in place of its value, an item of a one-document file's record
  list (a reader's ``document_records``) as ``null``, a directory log's record file as an unreadable file — or,
  for a reader with ``chunk_keys``, without that line's conversation (:mod:`msgtrain.ingest.isolate`). A fault thus
  costs exactly what an unreadable record costs: the reader's own policy applies (a session keeps later turns as
  context only, since their context lacked the record), and every other record is read. Past its fault limit, or
  where the record cannot be found, the rest of the file is one reject standing for every record not yet
  accounted (``ReadReject.count``: the file's non-blank lines minus those accounted, for a line-oriented reader).
- Text: a graph holding a lone UTF-16 surrogate anywhere is an ``invalid_text`` reject naming the field
  (:mod:`msgtrain.ingest.core.text_check`); a JSONL line holding one is rejected on its own by :func:`iter_json_lines`.
- Detection (:func:`msgtrain.ingest.detect.detect_format`) survives bad records: a vote of the head's
  records, not its first lines, decides the reader, which then rejects the records it cannot read one by one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from msgtrain.errors import MsgtrainError, ParseError
from msgtrain.ingest.core.events import (
    EXCERPT_BYTES,
    HEAD_BYTES,
    MAX_RECORD_BYTES,
    PARSED_TEXT_GROWTH,
    Reader,
    ReadEvent,
    ReadGraph,
    ReadItem,
    ReadReject,
    ReadSkip,
    RecordTask,
    SourceRef,
    excerpt,
)
from msgtrain.ingest.core.text_check import line_error
from msgtrain.ingest.core.text_input import file_encoding, line_encoding_hint, open_input

# The reader interface (msgtrain.ingest.core.events) is re-exported: a reader imports what it needs from this module.
__all__ = [
    "EXCERPT_BYTES",
    "HEAD_BYTES",
    "MAX_RECORD_BYTES",
    "PARSED_TEXT_GROWTH",
    "ReadEvent",
    "ReadGraph",
    "ReadItem",
    "ReadReject",
    "ReadSkip",
    "Reader",
    "RecordTask",
    "SourceRef",
    "excerpt",
]

LINE_STEP = 256 * 1024  # bytes read per step while skipping the rest of a line too long to hold


class LongLine(bytes):
    """The first :data:`EXCERPT_BYTES` of a line longer than :data:`MAX_RECORD_BYTES` (what is kept of it for the
    reject's excerpt); ``size`` is the line's true length in bytes, newline included."""

    size: int

    @classmethod
    def of(cls, head: bytes, size: int) -> LongLine:
        line = cls(head)
        line.size = size
        return line


def line_size(raw: bytes) -> int:
    """A line's length in the file (for a :class:`LongLine`, not the head's length but the whole line's)."""
    return raw.size if isinstance(raw, LongLine) else len(raw)


@contextmanager
def record_limit(max_bytes: int | None) -> Iterator[None]:
    """In the body, ``max_bytes`` (``--max-record-mb``) is the largest record every reader holds and the largest
    HTTP body a cassette decodes: one budget, so that what one record may cost a worker follows from one number.
    Readers read the limits at call time; None leaves them as they are."""
    from msgtrain.ingest.core import events, http_bodies

    global MAX_RECORD_BYTES
    if max_bytes is None:
        yield
        return
    # Modules that took the limit by name at import hold a copy of their own.
    holders: list[Any] = [events]
    before = (MAX_RECORD_BYTES, http_bodies.MAX_BODY_BYTES, [m.MAX_RECORD_BYTES for m in holders])
    MAX_RECORD_BYTES = http_bodies.MAX_BODY_BYTES = max_bytes
    for m in holders:
        m.MAX_RECORD_BYTES = max_bytes
    try:
        yield
    finally:
        MAX_RECORD_BYTES, http_bodies.MAX_BODY_BYTES = before[0], before[1]
        for m, value in zip(holders, before[2], strict=True):
            m.MAX_RECORD_BYTES = value


def limit_text(max_bytes: int) -> str:
    """The record limit as a user names it."""
    return f"--max-record-mb limit ({max_bytes / 2**20:g} MiB)"


def check_whole_file(
    size: int, where: str, what: str = "JSON document", hint: str = "split it into JSONL records"
) -> None:
    """Refuse, before it is read, a file a reader holds whole (``what``: a JSON document, a YAML cassette, an archive's
    member) larger than :data:`MAX_RECORD_BYTES` (read at call time): it is one record for memory purposes, so one
    budget, ``--max-record-mb``, bounds what any input costs a worker."""
    if size > MAX_RECORD_BYTES:
        raise ParseError(
            f"{what} of {size} bytes exceeds the {limit_text(MAX_RECORD_BYTES)} (a file read whole is one record)",
            where=where,
            code="record_too_large",
            hint=f"{hint}, or raise --max-record-mb (a worker holds about ten times it)",
        )


def read_bounded_line(f: BinaryIO) -> bytes:
    """The next line of an open binary file (``b""`` at its end), holding at most ``MAX_RECORD_BYTES + 1`` bytes.

    A line longer than :data:`MAX_RECORD_BYTES` (read at call time) is read on in :data:`LINE_STEP` steps that are
    dropped as they come, and returned as a :class:`LongLine`: memory stays bounded whatever a file holds, and the
    file position moves past the line exactly as ``readline`` would."""
    limit = MAX_RECORD_BYTES
    raw = f.readline(limit + 1)
    if len(raw) <= limit:
        return raw
    head, size, ended = raw[:EXCERPT_BYTES], len(raw), raw.endswith(b"\n")
    del raw  # only the head is kept while the rest of the line is skipped
    while not ended:
        step = f.readline(LINE_STEP)
        if not step:
            break
        size, ended = size + len(step), step.endswith(b"\n")
    return LongLine.of(head, size)


def bounded_lines(f: BinaryIO) -> Iterator[bytes]:
    """Every line of an open binary file, as :func:`read_bounded_line` reads them."""
    while raw := read_bounded_line(f):
        yield raw


def read_head(path: Path) -> bytes:
    with open_input(path) as f:
        return f.read(HEAD_BYTES)


def first_two_lines(path: Path) -> tuple[bytes, bytes]:
    """The first two non-blank lines of a file (``b""`` where there is none): what decides JSONL or one document."""
    first = second = b""
    with open_input(path) as f:
        for line in bounded_lines(f):
            if not line.strip():
                continue
            if first:
                return first, line
            first = line
    return first, second


def head_objects(head: bytes, limit: int = 16) -> list[dict[str, Any]]:
    """Up to ``limit`` JSON-object lines parsed from a head (JSONL), skipping lines that do not parse.

    Detectors accept a file when any of these looks like their format: a broken or foreign first record must not
    make a whole file unrecognisable (the reader then rejects just that record).
    """
    lines = head.split(b"\n")
    if len(head) >= HEAD_BYTES:
        lines = lines[:-1]  # the head may end mid-line
    out: list[dict[str, Any]] = []
    for line in lines:
        line = line.strip()
        if not line.startswith(b"{"):
            continue
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            continue
        if isinstance(value, dict):
            out.append(value)
            if len(out) >= limit:
                break
    return out


def head_mostly(head: bytes, test: Callable[[Any], bool]) -> bool:
    """Whether at least half of the head's JSON-object lines (:func:`head_objects`, at least one) pass ``test``: a
    format told by its records' own fields, surviving a few foreign or broken ones."""
    objects = head_objects(head)
    return bool(objects) and sum(map(test, objects)) * 2 >= len(objects)


def first_json_value(head: bytes) -> Any:
    """The first line of a head (JSONL) that parses as a JSON object, or None. Used by detectors.

    Garbage lines before it are skipped, so a file whose first record is broken is still recognised (and that
    record rejected by the reader) instead of the whole file being rejected as an unknown format.
    """
    lines = head.split(b"\n")
    if len(head) >= HEAD_BYTES:
        lines = lines[:-1]  # the head may end mid-line
    for line in lines[:64]:
        line = line.strip()
        if not line or not line.startswith(b"{"):
            continue
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _head_lines(head: bytes) -> tuple[list[bytes], int]:
    """The complete lines of a head that parse alone as JSON objects or arrays (newline-terminated), and how many
    complete non-blank lines it has."""
    lines = head.split(b"\n")
    if len(head) >= HEAD_BYTES:
        lines = lines[:-1]  # the head may end mid-line
    filled = 0
    out: list[bytes] = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        filled += 1
        if line[:1] not in (b"{", b"["):
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict | list):
            out.append(line + b"\n")
    return out, filled


def _mostly_records(records: list[bytes], filled: int) -> bool:
    """A head is JSONL when at least two of its lines, and at least half of them, parse on their own: broken lines
    anywhere (the first ones included) do not change that, and a pretty-printed document has few such lines."""
    return len(records) >= 2 and len(records) * 2 >= filled


def is_json_lines(path: Path) -> bool:
    """Whether ``path`` is JSONL rather than one JSON document — the one rule every reader and the chunker use.

    JSONL when its first two non-blank lines are separate records (the first parses alone, or the second parses
    alone as an object or array: a corrupt first line), or when most lines of its head parse alone (several
    corrupt lines first)."""
    first, second = first_two_lines(path)
    if not second:
        return False
    try:
        json.loads(first)
        return True
    except (ValueError, RecursionError):
        pass
    try:
        if isinstance(json.loads(second), dict | list):
            return True
    except (ValueError, RecursionError):
        pass
    return _mostly_records(*_head_lines(read_head(path)))


def _numbered_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with open_input(path) as f:
        yield from enumerate(bounded_lines(f), 1)


def iter_json_lines(path: Path) -> Iterator[tuple[int, bytes, Any | MsgtrainError]]:
    """(line number, raw bytes, parsed object or the ParseError) for each non-blank line; streams.

    Inside :func:`msgtrain.ingest.core.chunks.reading_chunk` only the chunk's lines are read (original line numbers).
    """
    chunk = active_chunk(path)
    trace = _TRACE.get()
    if trace is not None and trace.path != str(path):
        trace = None
    for lineno, raw in iter_chunk_lines(path, chunk) if chunk is not None else _numbered_lines(path):
        if not raw.strip():
            continue
        if trace is not None:
            trace.line, trace.raw = lineno, raw
        left_out = _LEFT_OUT_LINES.get()
        if left_out is not None and left_out[0] == str(path) and lineno in left_out[1]:
            yield lineno, raw, left_out[1][lineno]  # a line a reader failed on, rejected as a bad line is
            continue
        where = f"{path}:{lineno}"
        if isinstance(raw, LongLine):
            yield (
                lineno,
                raw[:EXCERPT_BYTES],
                ParseError(
                    f"record of {line_size(raw)} bytes exceeds the {limit_text(MAX_RECORD_BYTES)}",
                    where=where,
                    code="record_too_large",
                    hint="split or drop the record, or raise --max-record-mb (a worker holds about ten times it)",
                ),
            )
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
            if _SURROGATE_ESCAPE.search(raw) is not None:  # rare: only then is the value searched
                value = line_error(value, where) or value
            yield lineno, raw, value
        except UnicodeDecodeError as e:
            yield (
                lineno,
                raw,
                bad_text_error(path, raw, e.start, where),
            )
        except json.JSONDecodeError as e:
            truncated = not raw.endswith(b"\n")
            yield (
                lineno,
                raw,
                ParseError(
                    ("truncated last line: " if truncated else "invalid JSON: ") + e.msg,
                    where=where,
                    code="truncated_line" if truncated else "bad_json",
                ),
            )
        except RecursionError:
            yield lineno, raw, too_deep_error(where)


# A JSON escape of a UTF-16 surrogate: the only way a strictly decoded UTF-8 line yields a lone surrogate.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def bad_text_error(path: Path | str, raw: bytes | bytearray, at: int, where: str) -> ParseError:
    """The reject of text that does not decode: named by the encoding the file's byte-order mark gives
    (:mod:`msgtrain.ingest.core.text_input` decodes such a file line by line), else as UTF-8 with a guess at what
    it is instead."""
    encoding = file_encoding(path)
    if encoding is None:
        return ParseError(f"invalid UTF-8 at byte {at}", where=where, code="bad_utf8", hint=not_utf8_hint(raw))
    return ParseError(
        f"text that is not valid {encoding} (the file's encoding, by its byte-order mark)",
        where=where,
        code="bad_utf8",
        hint=line_encoding_hint(path),
    )


def not_utf8_hint(raw: bytes | bytearray) -> str:
    """The fix for bytes that are not UTF-8, naming the encoding they most likely are."""
    try:
        bytes(raw).decode("cp1252")
        guess = "Windows-1252 / Latin-1"
        source = "WINDOWS-1252"
    except UnicodeDecodeError:
        guess, source = "Latin-1", "LATIN1"
    return (
        f"the line is not UTF-8 (it reads as {guess} text); re-encode the file as UTF-8 "
        f"(iconv -f {source} -t UTF-8), the other lines are read as they are"
    )


def too_deep_error(where: str) -> ParseError:
    """Valid JSON nested deeper than the parser goes: said as the nesting limit it is, not as invalid JSON."""
    import sys

    return ParseError(
        f"JSON nested deeper than the parser's nesting limit (about {sys.getrecursionlimit()} levels)",
        where=where,
        code="too_deep",
        hint="no conversation nests this deep: the writer is broken; fix or drop the record",
    )


def load_json_document(path: Path) -> Any:
    """A whole-file JSON document (formats that are one document are bounded by their file)."""
    folder = _FOLDER_READ.get()
    if folder is not None:  # a directory log's record files, one document each (see msgtrain.ingest.isolate)
        left_out = folder.left_out.get(str(path))
        if left_out is not None:
            raise left_out
        folder.last = str(path)
    check_whole_file(path.stat().st_size, str(path))
    with open_input(path) as f:
        raw = f.read()
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        # One bad byte must not cost every item of an array document: its items are recovered one by one.
        from msgtrain.ingest.core.tolerant_json import recover_array_items

        recovered = recover_array_items(raw, str(path))
        if recovered is None:
            raise _document_error(path, e) from e
        value = recovered
    except RecursionError as e:
        raise too_deep_error(str(path)) from e
    view = _DOCUMENT_VIEW.get()
    if view is not None and view.path == str(path):
        value = view.apply(value)
    return value


def _document_error(path: Path, e: UnicodeDecodeError | json.JSONDecodeError) -> ParseError:
    if isinstance(e, UnicodeDecodeError):
        return bad_text_error(path, e.object, e.start, str(path))
    return ParseError(f"invalid JSON at line {e.lineno}: {e.msg}", where=str(path), code="bad_json")


# While the fault boundary re-reads a JSONL file: the lines a reader failed on, each with the error that rejects it.
_LEFT_OUT_LINES: ContextVar[tuple[str, dict[int, MsgtrainError]] | None] = ContextVar(
    "msgtrain_left_out_lines", default=None
)


@dataclass
class _FolderRead:
    """While the fault boundary reads a directory log: the record file loaded last (where a fault comes from), and
    the record files a re-read leaves out, each with the error that rejects it (raised when the reader loads it, so
    the reader rejects that file as it rejects any unreadable one, and goes on)."""

    last: str | None = None
    left_out: dict[str, MsgtrainError] = field(default_factory=dict)


_FOLDER_READ: ContextVar[_FolderRead | None] = ContextVar("msgtrain_folder_read", default=None)


@dataclass
class _DocumentView:
    """While the fault boundary re-reads a one-document file, the records a reader sees in the document's record list
    (named by the reader's ``document_records``): the items a reader failed on are ``null`` (the reader rejects them
    as it rejects any item that is not a record, indices unchanged), and a prefix read sees the first ``limit``."""

    path: str
    key: str
    nulled: frozenset[int] = frozenset()
    limit: int | None = None
    applied: bool = False

    def apply(self, doc: Any) -> Any:
        items = document_records(doc, self.key)
        if items is None:
            return doc
        self.applied = True
        seen = [None if i in self.nulled else item for i, item in enumerate(items[: self.limit])]
        return seen if self.key == "" else {**doc, self.key: seen}


_DOCUMENT_VIEW: ContextVar[_DocumentView | None] = ContextVar("msgtrain_document_view", default=None)


def document_records(doc: Any, key: str) -> list[Any] | None:
    """The record list of a one-document file: the document itself when ``key`` is ``""``, else its ``key`` list."""
    items = doc if key == "" else (doc.get(key) if isinstance(doc, dict) else None)
    return items if isinstance(items, list) else None


@dataclass
class _LineTrace:
    """The line a reader is reading: the last one :func:`iter_json_lines` handed out for ``path``."""

    path: str
    line: int | None = None
    raw: bytes = b""


_TRACE: ContextVar[_LineTrace | None] = ContextVar("msgtrain_line_trace", default=None)


# ------------------------------------------------------------------------------------------------- chunk view
@dataclass(frozen=True)
class Chunk:
    """Lines ``runs`` of one file: ``(start byte, end byte, line number of the first line)``, ascending; or, when
    ``items``, whole items of a top-level JSON array: ``(start byte, end byte, index of the first item)``
    (:func:`msgtrain.ingest.core.json_stream.iter_array_items` reads them)."""

    index: int
    count: int
    runs: tuple[tuple[int, int, int], ...]
    bytes: int
    items: bool = False


_ACTIVE: ContextVar[tuple[str, Chunk] | None] = ContextVar("msgtrain_active_chunk", default=None)


@contextmanager
def reading_chunk(path: Path, chunk: Chunk | None) -> Iterator[None]:
    """While active, line readers of ``path`` see only the chunk's lines (with their original numbers)."""
    if chunk is None:
        yield
        return
    token = _ACTIVE.set((str(path), chunk))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_chunk(path: Path | str) -> Chunk | None:
    active = _ACTIVE.get()
    return active[1] if active is not None and active[0] == str(path) else None


def iter_chunk_lines(path: Path | str, chunk: Chunk) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of the chunk's lines, in file order."""
    with open_input(path) as f:
        for start, end, first in chunk.runs:
            f.seek(start)
            pos, lineno = start, first
            while pos < end:
                raw = read_bounded_line(f)
                if not raw:
                    break
                yield lineno, raw
                pos += line_size(raw)
                lineno += 1


def chunk_through(path: Path | str, within: Chunk | None, last_line: int) -> Chunk | None:
    """The lines of ``within`` (the whole file when None) up to and including line ``last_line``, as a chunk (None
    when no line is left). Used by the fault boundary to read a prefix of a file when it looks for the record a
    fault comes from."""
    runs: list[tuple[int, int, int]] = []
    spans = within.runs if within is not None else ((0, 1 << 62, 1),)
    with open_input(path) as f:
        for start, end, first in spans:
            if first > last_line:
                break
            f.seek(start)
            pos, lineno = start, first
            while pos < end and lineno <= last_line:
                raw = read_bounded_line(f)
                if not raw:
                    break
                pos += line_size(raw)
                lineno += 1
            if pos > start:
                runs.append((start, pos, first))
    if not runs:
        return None
    return Chunk(0, 1, tuple(runs), sum(e - s for s, e, _ in runs))


@contextmanager
def whole_file(path: Path) -> Iterator[None]:
    """Line readers see the whole file again, even inside :func:`reading_chunk` (to look at its first record)."""
    token = _ACTIVE.set(None)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
