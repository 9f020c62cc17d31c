"""The reader interface every input format implements, the registry, and per-file detection.

Invariants:
- A reader turns one file into a stream of events: :class:`ReadGraph` (a message graph built from one or more
  input records), :class:`ReadReject` (a bad record, with the error and a bounded excerpt of the raw bytes), and
  :class:`ReadSkip` (records that carry no conversation, e.g. telemetry lines, counted with a reason).
- Accounting: every input record of a file is counted exactly once, in ``ReadGraph.records``,
  ``ReadReject`` (one each) or ``ReadSkip.count``; the pipeline asserts records read = converted + rejected +
  skipped.
- A bad record never stops the file: readers yield a reject and go on; only an unreadable file (missing, not the
  format at all) raises.
- Readers stream: JSONL is read line by line; a single JSON document is bounded by its file.
- Bounded lines: every line reader (:func:`bounded_lines`) holds at most :data:`MAX_RECORD_BYTES` + 1 bytes of a
  line; a longer line (a crashed writer's NUL tail, a sparse file) is skipped in :data:`LINE_STEP` steps, never held,
  and comes out as a :class:`LongLine` (its head and its true size), which readers reject as ``record_too_large``.
- Ingest knows nothing of tokens.

The fault boundary (one place, :func:`read_events`; every consumer — convert, validate, inspect — reads through it,
never through ``Reader.read`` directly):
- Whatever escapes a reader becomes a reject and the batch goes on. A reader's own :class:`MsgtrainError` keeps its
  code; any other exception (a reader bug, or input nobody foresaw) is a ``reader_error`` reject carrying the
  exception type and message, the record it was reading and a bounded excerpt made by :func:`excerpt`, which
  cannot fail on any value. The traceback rides on the reject (``ReadReject.detail``) for the caller's debug log;
  it is never printed.
- Per record: a reader may yield a :class:`RecordTask` (a record's location, its raw value and a callable that
  parses it into events) instead of parsing inside its generator. The driver calls it inside the boundary, so a
  fault costs exactly that record and the reader's generator (which a raised exception would end for good) goes
  on. :func:`msgtrain.ingest.conversation_files.read_conversation_file` does this for every conversation-list
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
  (:mod:`msgtrain.ingest.text_check`); a JSONL line holding one is rejected on its own by :func:`iter_json_lines`.
- Detection (:func:`detect_format`, :mod:`msgtrain.ingest.detect`) survives bad records: a vote of the head's
  records, not its first lines, decides the reader, which then rejects the records it cannot read one by one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from msgtrain.errors import FormatError, MsgtrainError, ParseError
from msgtrain.model.graph import MessageGraph

EXCERPT_BYTES = 2048
HEAD_BYTES = 64 * 1024
# Absurd sizes are rejected, not attempted: a record larger than this is a bug in the writer, not a conversation.
MAX_RECORD_BYTES = 64 * 1024 * 1024
MAX_DOCUMENT_BYTES = 512 * 1024 * 1024
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


@dataclass(frozen=True)
class SourceRef:
    """Where something came from: the file and the record inside it (``line 12``, ``item 3``, ``file``)."""

    file: str
    record: str = "file"

    def __str__(self) -> str:
        return (
            f"{self.file}:{self.record.removeprefix('line ')}"
            if self.record.startswith("line ")
            else f"{self.file} ({self.record})"
        )


@dataclass
class ReadGraph:
    graph: MessageGraph
    source: SourceRef
    records: int = 1
    # Extra per-graph fields carried to every sample (reward, task id, ...): JSON-serialisable values.
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class ReadReject:
    """A bad record. ``count`` is how many input records it stands for (more than one only when a reader failed
    part-way through a file and the rest of it is rejected as a unit); ``detail`` is the full traceback of a
    ``reader_error``, for a debug log, never for the terminal."""

    source: SourceRef
    error: MsgtrainError
    excerpt: str = ""
    count: int = 1
    detail: str = ""
    # An estimate of the assistant turns the rejected records held (their assistant-like messages), so the books
    # show turns lost, not only records: a file of 99 % lost turns is one rejected record otherwise.
    turns: int = 0


@dataclass
class ReadSkip:
    source: SourceRef
    reason: str
    count: int = 1


ReadEvent = ReadGraph | ReadReject | ReadSkip


@dataclass
class RecordTask:
    """One record's parsing, deferred so that :func:`read_events` runs it inside the fault boundary.

    ``parse()`` returns the events of exactly ``records`` input records (a graph, a reject, a skip...). If it
    raises, those records become one ``reader_error`` reject at ``source`` with an excerpt of ``raw``.
    """

    source: SourceRef
    parse: Callable[[], Iterable[ReadEvent]]
    records: int = 1
    raw: Any = None


# What a reader's ``read`` yields: events, or record tasks the driver runs inside the boundary.
ReadItem = ReadEvent | RecordTask


class Reader(Protocol):
    """One input format. ``detect`` must be cheap (it sees the file's first 64 KiB); ``read`` streams.

    Optional: ``chunk_keys(path)`` returns, for one JSONL file, a function naming the conversation(s) each parsed
    record belongs to, with exactly the keys ``read`` groups records by (``None``: keep it with the line before
    it), or None when the file cannot be cut. A reader that has it lets huge JSONL files be cut into chunks of
    whole conversations (:mod:`msgtrain.ingest.chunks`); ``read`` must then read via :func:`iter_json_lines` or
    ``iter_raw_records``, which honour the active chunk, and pick its layout from the file's first record, not
    the whole file's (``vote_layout`` in :mod:`msgtrain.ingest.conversation_files`).

    Optional: ``detect_directory(path)`` makes the reader's unit a *directory* (a log written as a folder, one file
    per event): it says, cheaply (a few ``stat`` calls), whether ``path`` is one of its folders. Input discovery
    then hands the folder to ``read`` once and does not look at the files inside it
    (:func:`unit_directories`); ``detect`` is still asked about single files and should claim none of them.
    """

    name: str
    description: str
    example: str  # a path under sample_logs/ (a folder for a directory reader)

    def detect(self, path: Path, head: bytes) -> bool: ...

    def read(self, path: Path) -> Iterator[ReadItem]: ...


# Optional reader methods (looked up with getattr, so a reader without them still works):
# - ``chunk_keys(path)``: see :class:`Reader`; also lets the fault boundary re-read a file without a failing group.
# - ``document_records: str``: for a reader of one-document files whose records are the items of one list, that
#   list's key (``""`` for a top-level list): a fault costs only the item it comes from (the boundary re-reads the
#   document with that item ``null``, :mod:`msgtrain.ingest.isolate`); the reader must load the document with
#   :func:`load_json_document` and reject an item that is not a record under its own name (``item 3``/``key[3]``).
# - ``explain(path, head) -> str | None``: why this reader refuses a file it was closest to, in one phrase
#   ("messages are under `simulations[].messages`"); shown in the ``unknown_format`` hint.


REGISTRY: dict[str, Reader] = {}


def register(reader: Reader) -> Reader:
    if reader.name in REGISTRY:
        raise ValueError(f"reader {reader.name!r} registered twice")
    REGISTRY[reader.name] = reader
    return reader


def excerpt(raw: Any, limit: int = EXCERPT_BYTES) -> str:
    """A bounded, printable, JSON-safe excerpt of any value; never raises.

    Bytes are decoded as UTF-8 with replacement; strings lose lone surrogates (they cannot be written as UTF-8);
    any other value is rendered as compact JSON-like text by :func:`_render`, which bounds depth and size and
    falls back to the type name for objects it does not know. Only the first ``limit`` characters are kept.
    """
    try:
        if isinstance(raw, bytes | bytearray | memoryview):
            text = bytes(raw[: 4 * limit]).decode("utf-8", "replace")
            total = len(raw)
        elif isinstance(raw, str):
            text, total = raw[: limit + 1], len(raw)
        else:
            parts: list[str] = []
            _render(raw, parts, 0, [4 * limit])
            text = "".join(parts)
            total = len(text)
        text = text.encode("utf-8", "replace").decode("utf-8")
        if len(text) <= limit and total <= limit:
            return text
        return text[:limit] + f"…(+{max(total - limit, 0)} more)"
    except Exception:  # a value whose __len__ or slicing misbehaves: the excerpt is a courtesy, never a new fault
        return f"<{type(raw).__name__}>"


_MAX_RENDER_DEPTH = 20


def _render(value: Any, out: list[str], depth: int, budget: list[int]) -> None:
    """Append a compact JSON-like rendering of ``value`` to ``out`` until ``budget[0]`` characters are spent."""
    if budget[0] <= 0:
        return
    if isinstance(value, str):
        piece = json.dumps(value[: budget[0]], ensure_ascii=False)
    elif value is None or isinstance(value, bool | int | float):
        piece = json.dumps(value) if not isinstance(value, int) or abs(value) < 10**30 else "<big int>"
    elif isinstance(value, bytes | bytearray):
        piece = json.dumps(bytes(value[: budget[0]]).decode("utf-8", "replace"), ensure_ascii=False)
    elif depth >= _MAX_RENDER_DEPTH:
        piece = "…"
    elif isinstance(value, dict):
        out.append("{")
        budget[0] -= 1
        for i, (k, v) in enumerate(value.items()):
            if budget[0] <= 0:
                break
            key = json.dumps(k if isinstance(k, str) else str(k)[:64], ensure_ascii=False)
            out.append(("," if i else "") + key + ":")
            budget[0] -= len(key) + 2
            _render(v, out, depth + 1, budget)
        piece = "}"
    elif isinstance(value, list | tuple):
        out.append("[")
        budget[0] -= 1
        for i, v in enumerate(value):
            if budget[0] <= 0:
                break
            if i:
                out.append(",")
            _render(v, out, depth + 1, budget)
        piece = "]"
    else:
        piece = f"<{type(value).__name__}>"
    out.append(piece)
    budget[0] -= len(piece)


def read_head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(HEAD_BYTES)


def first_two_lines(path: Path) -> tuple[bytes, bytes]:
    """The first two non-blank lines of a file (``b""`` where there is none): what decides JSONL or one document."""
    first = second = b""
    with open(path, "rb") as f:
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


def directory_reader(path: Path) -> Reader | None:
    """The reader whose unit is the directory ``path`` (see ``Reader.detect_directory``), or None."""
    from msgtrain.ingest import registry  # noqa: F401 - importing registers the built-in readers

    for reader in REGISTRY.values():
        detect_directory = getattr(reader, "detect_directory", None)
        if detect_directory is not None and detect_directory(path):
            return reader
    return None


def unit_directories(root: Path) -> list[Path]:
    """The directories under ``root`` (itself included) that a directory reader claims, sorted.

    The walk does not descend into a claimed directory (its files belong to it) nor into hidden ones.
    """
    found: list[Path] = []
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if directory_reader(here) is not None:
            found.append(here)
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return sorted(found)


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


def detect_format(path: Path) -> Reader:
    """The reader for ``path``, by a vote of its records (:func:`msgtrain.ingest.detect.detect_format`); raises
    :class:`FormatError` with an explaining hint."""
    from msgtrain.ingest.detect import detect_format as detect

    return detect(path)


def get_reader(name: str) -> Reader:
    from msgtrain.ingest import registry  # noqa: F401

    try:
        return REGISTRY[name]
    except KeyError:
        raise FormatError(f"unknown input format {name!r}", hint=f"known formats: {', '.join(REGISTRY)}") from None


def _numbered_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as f:
        yield from enumerate(bounded_lines(f), 1)


def iter_json_lines(path: Path) -> Iterator[tuple[int, bytes, Any | MsgtrainError]]:
    """(line number, raw bytes, parsed object or the ParseError) for each non-blank line; streams.

    Inside :func:`msgtrain.ingest.chunks.reading_chunk` only the chunk's lines are read (original line numbers).
    """
    from msgtrain.ingest.chunks import active_chunk, iter_chunk_lines

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
                    f"record of {line_size(raw)} bytes exceeds the {MAX_RECORD_BYTES} byte limit",
                    where=where,
                    code="record_too_large",
                ),
            )
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
            if _SURROGATE_ESCAPE.search(raw) is not None:  # rare: only then is the value searched
                from msgtrain.ingest.text_check import line_error

                value = line_error(value, where) or value
            yield lineno, raw, value
        except UnicodeDecodeError as e:
            yield (
                lineno,
                raw,
                ParseError(f"invalid UTF-8 at byte {e.start}", where=where, code="bad_utf8"),
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
            yield lineno, raw, ParseError("JSON nested too deeply", where=where, code="too_deep")


# A JSON escape of a UTF-16 surrogate: the only way a strictly decoded UTF-8 line yields a lone surrogate.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def load_json_document(path: Path) -> Any:
    """A whole-file JSON document (formats that are one document are bounded by their file)."""
    folder = _FOLDER_READ.get()
    if folder is not None:  # a directory log's record files, one document each (see msgtrain.ingest.isolate)
        left_out = folder.left_out.get(str(path))
        if left_out is not None:
            raise left_out
        folder.last = str(path)
    size = path.stat().st_size
    if size > MAX_DOCUMENT_BYTES:
        raise ParseError(
            f"JSON document of {size} bytes exceeds the {MAX_DOCUMENT_BYTES} byte limit",
            where=str(path),
            hint="split it into JSONL records",
            code="record_too_large",
        )
    raw = path.read_bytes()
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        # One bad byte must not cost every item of an array document: its items are recovered one by one.
        from msgtrain.ingest.tolerant_json import recover_array_items

        recovered = recover_array_items(raw, str(path))
        if recovered is None:
            raise _document_error(path, e) from e
        value = recovered
    except RecursionError as e:
        raise ParseError("JSON nested too deeply", where=str(path), code="too_deep") from e
    view = _DOCUMENT_VIEW.get()
    if view is not None and view.path == str(path):
        value = view.apply(value)
    return value


def _document_error(path: Path, e: UnicodeDecodeError | json.JSONDecodeError) -> ParseError:
    if isinstance(e, UnicodeDecodeError):
        return ParseError(f"invalid UTF-8 at byte {e.start}", where=str(path), code="bad_utf8")
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


# --------------------------------------------------------------------------------------------- the fault boundary


@dataclass
class _LineTrace:
    """The line a reader is reading: the last one :func:`iter_json_lines` handed out for ``path``."""

    path: str
    line: int | None = None
    raw: bytes = b""


_TRACE: ContextVar[_LineTrace | None] = ContextVar("msgtrain_line_trace", default=None)


@dataclass
class _Fault:
    """An exception that escaped a reader's generator (which cannot go on after it)."""

    error: BaseException
    detail: str
    line: int | None
    raw: bytes


def open_reader(path: Path, forced: Reader | None = None) -> Reader | ReadReject:
    """The reader for ``path`` (``forced``, or detected), or the reject that stands for the whole file."""
    if forced is not None:
        return forced
    file_ref = SourceRef(str(path), "file")
    try:
        return detect_format(path)
    except MsgtrainError as e:
        from msgtrain.ingest.structural import file_assistant_turns

        return ReadReject(file_ref, e, turns=file_assistant_turns(path))
    except OSError as e:
        return ReadReject(file_ref, unreadable_file_error(path, e))
    except Exception as e:
        return fault_reject(file_ref, e, "format detection", traceback.format_exc(), path)


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


def read_events(reader: Reader, path: Path, forced: bool = False) -> Iterator[ReadEvent]:
    """Every event of ``path`` read by ``reader``, inside the fault boundary (module docstring); never raises for
    anything a reader does (only ``KeyboardInterrupt`` and the like pass).

    ``forced``: the user chose the reader (``--input-format``). When its detector does not recognise the file and
    the read yields no conversation, what it skipped is one ``forced_format_not_recognised`` reject, never a
    clean, empty success: a forced reader that finds nothing it knows says so."""
    if forced and not path.is_dir() and not _recognises(reader, path):
        yield from _forced_unrecognised(reader, path)
        return
    yield from _read_events(reader, path)


def _recognises(reader: Reader, path: Path) -> bool:
    try:
        return bool(reader.detect(path, read_head(path)))
    except Exception:
        return False


def _forced_unrecognised(reader: Reader, path: Path) -> Iterator[ReadEvent]:
    skipped: list[ReadSkip] = []
    graphs = False
    for event in _read_events(reader, path):
        if isinstance(event, ReadSkip) and not graphs:
            skipped.append(event)
            continue
        graphs = graphs or isinstance(event, ReadGraph)
        yield event
    if not skipped:
        return
    if graphs:
        yield from skipped
        return
    from msgtrain.ingest.structural import file_assistant_turns

    count = sum(s.count for s in skipped)
    reasons = ", ".join(sorted({s.reason for s in skipped}))
    err = FormatError(
        f"the forced {reader.name} reader recognises nothing in this file ({count} records skipped: {reasons})",
        where=str(path),
        code="forced_format_not_recognised",
        hint="force the reader of this file's format (see msgtrain formats --explain FILE), or write a --map",
    )
    yield ReadReject(SourceRef(str(path), "file"), err, count=count, turns=file_assistant_turns(path))


def _read_events(reader: Reader, path: Path) -> Iterator[ReadEvent]:
    from msgtrain.ingest.isolate import read_document_isolating, read_folder_isolating, read_isolating, retry_keys
    from msgtrain.ingest.text_check import graph_reject

    keys = retry_keys(reader, path)
    record_key = getattr(reader, "document_records", None)
    events: Iterator[ReadEvent]
    if keys is not None:
        events = read_isolating(reader, path, keys)
    elif path.is_dir():
        events = read_folder_isolating(reader, path)
    elif isinstance(record_key, str):
        events = read_document_isolating(reader, path, record_key)
    else:
        events = _read_streaming(reader, path)
    for event in events:
        if isinstance(event, ReadGraph):
            invalid = graph_reject(event)
            if invalid is not None:
                yield invalid
                continue
        yield event


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
    whatever container the record came in. The size is that of its compact JSON text (C speed, linear).
    """
    if task.raw is None or task.source.record.startswith("line ") or not isinstance(task.raw, dict | list):
        return None
    try:
        size = len(json.dumps(task.raw, ensure_ascii=False, separators=(",", ":"), default=str))
    except (TypeError, ValueError, RecursionError):
        return None  # not JSON text at all: the reader's own checks judge it
    if size <= MAX_RECORD_BYTES:
        return None
    err = ParseError(
        f"record of about {size} bytes exceeds the {MAX_RECORD_BYTES} byte limit",
        where=str(task.source),
        hint="a record this large is a writer bug, not a conversation; split or drop it",
        code="record_too_large",
    )
    return ReadReject(task.source, err, excerpt(task.raw), count=task.records)


def _run_task(reader: Reader, task: RecordTask) -> list[ReadEvent]:
    too_large = _oversized(task)
    if too_large is not None:
        return [too_large]
    from msgtrain.ingest.shapes import assistant_turns_in

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
    such files account per item), any other document is one record."""
    try:
        value = load_json_document(path)
    except (MsgtrainError, OSError, MemoryError):
        return 1
    return len(value) - accounted if isinstance(value, list) else 1 - accounted


def _unaccounted(path: Path, accounted: int) -> int:
    """Non-blank lines of ``path`` (or of its active chunk) not yet accounted by ``accounted`` records."""
    from msgtrain.ingest.chunks import active_chunk, iter_chunk_lines

    chunk = active_chunk(path)
    try:
        lines = iter_chunk_lines(path, chunk) if chunk is not None else _numbered_lines(path)
        total = sum(1 for _, raw in lines if raw.strip())
    except OSError:
        return 1
    return total - accounted
