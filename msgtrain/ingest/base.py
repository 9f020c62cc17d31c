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
- Per line of a JSONL file: when an exception escapes the generator itself (a session reader builds one session
  from every line of its file, and an exception ends its generator for good), the driver drops the events of that
  read, finds the record the fault comes from (:func:`_culprit`: the line being read, or — for a fault raised while
  the session is built, after the last line was handed out — the last line of the shortest failing prefix, by
  binary search) and reads the file again without it: without that line alone, or, for a reader with
  ``chunk_keys``, without that line's conversation group, exactly as it would read a chunk without it
  (:mod:`msgtrain.ingest.chunks`). So every other record yields what it would have yielded. After
  :data:`MAX_RETRIES` faults, or for other files, the rest of the file is one reject standing for every record not
  yet accounted (``ReadReject.count``: the file's non-blank lines minus those accounted, for a line-oriented
  reader; 1 otherwise).
- Per item of a JSON document: a reader of one-document sessions names its record list (``document_records``);
  after a fault the driver serves :func:`load_json_document` through a view without the failing item (found the
  same way, by the shortest failing prefix of the list) and renumbers the events of the re-read to the whole
  document's indices (:func:`_read_document_isolating`).
- Text: a graph holding a lone UTF-16 surrogate anywhere is an ``invalid_text`` reject naming the field
  (:mod:`msgtrain.ingest.text_check`); a JSONL line holding one is rejected on its own by :func:`iter_json_lines`.
- Detection (:func:`detect_format`) survives bad records: each parseable record of the head votes, and the reader
  accepting most of them (at least half; ties by registry order) reads the file, rejecting the records it cannot
  read one by one; only when no reader takes half of the records does the head as a whole decide. When none does,
  the ``unknown_format`` reject says what the file looks like and why the closest readers refused (their optional
  ``explain``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import tempfile
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from msgtrain.errors import FormatError, MsgtrainError, ParseError
from msgtrain.model.graph import MessageGraph

EXCERPT_BYTES = 2048
INVALID_TEXT_HINT = (
    "the log has a \\uD800-\\uDFFF escape without its pair (a writer that cut a string between the two halves of"
    " a character) or bytes decoded with surrogateescape; fix the writer, or repair the record (e.g. replace it"
    " with U+FFFD) and convert again"
)
HEAD_BYTES = 64 * 1024
# Absurd sizes are rejected, not attempted: a record larger than this is a bug in the writer, not a conversation.
MAX_RECORD_BYTES = 64 * 1024 * 1024
MAX_DOCUMENT_BYTES = 512 * 1024 * 1024


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
    the chunk's (``first_file_record``).

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
#   document without it, :func:`_read_document_isolating`); the reader must load it with :func:`load_json_document`.
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
        for line in f:
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


VOTE_RECORDS = 32  # records of the head that vote on the file's format


def detect_format(path: Path) -> Reader:
    """The reader for ``path`` (see the module docstring); raises :class:`FormatError` with an explaining hint.

    A directory goes to the directory reader that claims it. A file's format is decided by its records, not its
    first lines: each of the first :data:`VOTE_RECORDS` records of its head that parse (JSONL lines, or the items of
    a top-level JSON array) is shown to every detector on its own, as a one-record file would be; a reader that
    accepts at least half of them reads the file (the one accepting most; ties by registry order), so bad records
    anywhere — the first ones included — cost only themselves. Formats whose records cannot be told apart one by
    one (a session header line, then events) are recognised from the head as a whole: when no reader takes half of
    the records, the first reader (registry order) accepting the whole head reads the file. Cost: one 64 KiB head,
    at most ``VOTE_RECORDS`` × readers cheap detector calls, each record's shape scanned once.
    """
    from msgtrain.ingest import registry  # noqa: F401 - importing registers the built-in readers

    if path.is_dir():
        reader = directory_reader(path)
        if reader is not None:
            return reader
        raise FormatError(
            "no reader takes this directory as one log",
            where=str(path),
            hint="pass the log files inside it, or a folder a directory reader knows (see msgtrain formats)",
        )
    head = read_head(path)
    voted = _majority_reader(path, head)
    if voted is not None:
        return voted
    for reader in REGISTRY.values():
        if _accepts(reader, path, head):
            return reader
    raise FormatError("no reader recognises this file", where=str(path), hint=unknown_format_hint(path, head))


EXPLAIN_BYTES = 4 * 1024 * 1024  # how much of an unrecognised file the explanations look at


def _explain_head(path: Path, head: bytes) -> bytes:
    """More of the file than detection saw, so an explanation can find messages nested deep in a document."""
    if len(head) < HEAD_BYTES:
        return head
    try:
        with open(path, "rb") as f:
            return f.read(EXPLAIN_BYTES)
    except OSError:
        return head


def _accepts(reader: Reader, path: Path, head: bytes) -> bool:
    try:
        return bool(reader.detect(path, head))
    except Exception:  # a detector that trips on odd bytes has not recognised the file; the others still look
        return False


def head_records(head: bytes, limit: int = VOTE_RECORDS) -> list[bytes]:
    """Up to ``limit`` records of a head, each as the bytes of a one-record file: the lines of a JSONL head that
    parse as JSON objects or arrays (newline-terminated), or the object items of a top-level JSON array (each as
    ``[item]``). Records cut off by the end of the head, and heads of any other shape, give none."""
    records, filled = _head_lines(head)
    if _mostly_records(records, filled):
        return records[:limit]
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"[":
        return _array_items(head, limit)
    return []


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


_DECODER = json.JSONDecoder()


def _array_items(head: bytes, limit: int) -> list[bytes]:
    """The complete object items at the start of a head holding a top-level JSON array, each as ``[item]``."""
    text = head.decode("utf-8", "ignore").lstrip("\ufeff \t\r\n")
    pos = 1  # after the "["
    out: list[bytes] = []
    n = len(text)
    while len(out) < limit:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n or text[pos] == "]":
            break
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):  # an item cut off by the head's end, or not JSON: no more items
            break
        if isinstance(value, dict):
            out.append(b"[" + text[pos:end].encode("utf-8", "replace") + b"]")
        pos = end
    return out


def _majority_reader(path: Path, head: bytes) -> Reader | None:
    """The reader accepting most of the head's records if it accepts at least half of them (ties: registry order),
    or None (fewer than two records, or no reader takes half). Records are looked at one at a time, every reader
    in turn, so each record's shape is scanned once (detectors share :func:`head_shape`'s cache)."""
    records = head_records(head)
    if len(records) < 2:
        return None
    readers = list(REGISTRY.values())
    votes = [0] * len(readers)
    for record in records:
        for i, reader in enumerate(readers):
            votes[i] += _accepts(reader, path, record)
    best = max(votes)
    if best == 0 or best * 2 < len(records):
        return None
    return readers[votes.index(best)]


def describe_head(head: bytes) -> str:
    """What a file looks like, in one phrase, from its head (``JSONL of objects with keys a, b, c``)."""
    from msgtrain.ingest.head_shape import head_shape

    shape = head_shape(head)
    if shape.layout == "other":
        text = head[:40].decode("utf-8", "replace").strip()
        return f"not JSON (it starts with {text!r})" if text else "an empty file"
    top = sorted({p.split(".")[1].split("[")[0] for p in shape.paths if p.count(".") == 1})
    what = {"jsonl": "JSONL of objects", "array": "a JSON array of objects", "object": "a JSON object"}[shape.layout]
    if not top:
        return what
    shown = ", ".join(top[:12]) + (f" (+{len(top) - 12} more)" if len(top) > 12 else "")
    return f"{what} with keys {shown}"


def unknown_format_hint(path: Path, head: bytes) -> str:
    """The hint of an ``unknown_format`` reject: what the file looks like, and why the closest readers refused."""
    reasons: list[str] = []
    wide = _explain_head(path, head)
    for reader in REGISTRY.values():
        explain = getattr(reader, "explain", None)
        if not callable(explain):
            continue
        try:
            why = explain(path, wide)
        except Exception:
            why = None
        if why:
            reasons.append(f"{reader.name}: {why}")
    text = f"the file looks like {describe_head(wide)}"
    if reasons:
        text += "; closest readers: " + "; ".join(reasons[:3])
        text += "; fix those records, or force a reader with --input-format NAME"
    else:
        text += f"; no reader comes close (known formats: {', '.join(REGISTRY)})"
    return text


def get_reader(name: str) -> Reader:
    from msgtrain.ingest import registry  # noqa: F401

    try:
        return REGISTRY[name]
    except KeyError:
        raise FormatError(f"unknown input format {name!r}", hint=f"known formats: {', '.join(REGISTRY)}") from None


def _numbered_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as f:
        yield from enumerate(f, 1)


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
        where = f"{path}:{lineno}"
        if len(raw) > MAX_RECORD_BYTES:
            yield (
                lineno,
                raw[:EXCERPT_BYTES],
                ParseError(
                    f"record of {len(raw)} bytes exceeds the {MAX_RECORD_BYTES} byte limit",
                    where=where,
                    code="record_too_large",
                ),
            )
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
            yield lineno, raw, _invalid_text_in_line(value, raw, where) or value
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


def _invalid_text_in_line(value: Any, raw: bytes, where: str) -> ParseError | None:
    """The ``invalid_text`` error of a JSONL line whose value holds a lone surrogate (a ``\\ud800`` escape without its
    pair), naming the field: the line is rejected on its own, as a bad line is, and the rest of its conversation
    or session is still read. Pairs (an emoji written ``\\ud83d\\ude00``) are whole characters and pass."""
    if _SURROGATE_ESCAPE.search(raw) is None:
        return None
    from msgtrain.ingest.text_check import lone_surrogate_field

    found = lone_surrogate_field(iter([("", value)]))
    if found is None:
        return None
    field_path, text, at = found
    field_path = field_path.lstrip(".") or "the record"
    return ParseError(
        f"lone UTF-16 surrogate U+{ord(text[at]):04X} at character {at} of {field_path}: text that is not Unicode"
        " cannot be tokenized or written",
        where=f"{where} {field_path}",
        code="invalid_text",
        hint=INVALID_TEXT_HINT,
    )


def load_json_document(path: Path) -> Any:
    """A whole-file JSON document (formats that are one document are bounded by their file)."""
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
    except UnicodeDecodeError as e:
        raise ParseError(f"invalid UTF-8 at byte {e.start}", where=str(path), code="bad_utf8") from e
    except json.JSONDecodeError as e:
        raise ParseError(f"invalid JSON at line {e.lineno}: {e.msg}", where=str(path), code="bad_json") from e
    except RecursionError as e:
        raise ParseError("JSON nested too deeply", where=str(path), code="too_deep") from e
    view = _DOCUMENT_VIEW.get()
    if view is not None and view.path == str(path):
        value = view.apply(value)
    return value


@dataclass
class _DocumentView:
    """While the fault boundary re-reads a one-document file, the records a reader sees: the items ``keep`` (indices
    into the document's record list, named by the reader's ``document_records``) in that order."""

    path: str
    key: str
    keep: list[int]
    applied: bool = False

    def apply(self, doc: Any) -> Any:
        items = document_records(doc, self.key)
        if items is None:
            return doc
        self.applied = True
        kept = [items[i] for i in self.keep if i < len(items)]
        return kept if self.key == "" else {**doc, self.key: kept}


_DOCUMENT_VIEW: ContextVar[_DocumentView | None] = ContextVar("msgtrain_document_view", default=None)


def document_records(doc: Any, key: str) -> list[Any] | None:
    """The record list of a one-document file: the document itself when ``key`` is ``""``, else its ``key`` list."""
    items = doc if key == "" else (doc.get(key) if isinstance(doc, dict) else None)
    return items if isinstance(items, list) else None


# --------------------------------------------------------------------------------------------- the fault boundary
MAX_RETRIES = 8  # faults per file the boundary isolates by re-reading; after that the rest is one reject


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
        return ReadReject(file_ref, e)
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


def read_events(reader: Reader, path: Path) -> Iterator[ReadEvent]:
    """Every event of ``path`` read by ``reader``, inside the fault boundary (module docstring); never raises for
    anything a reader does (only ``KeyboardInterrupt`` and the like pass)."""
    keys = _retry_keys(reader, path)
    record_key = getattr(reader, "document_records", None)
    if keys is not None:
        events = _read_isolating(reader, path, keys)
    elif isinstance(record_key, str):
        events = _read_document_isolating(reader, path, record_key)
    else:
        events = _read_streaming(reader, path)
    for event in events:
        if isinstance(event, ReadGraph):
            invalid = _invalid_text(event)
            if invalid is not None:
                yield invalid
                continue
        yield event


def _graph_values(event: ReadGraph) -> Iterator[tuple[str, Any]]:
    """Every value of a read graph that reaches the output, named as a reject names it."""
    g = event.graph
    yield "the file name", event.source.file
    yield "the graph id", g.graph_id
    yield "the policy", g.policy
    yield "metadata", g.metadata
    index: dict[str, int] = {}
    for i, node in enumerate(g.nodes.values()):
        index[node.id] = i
        yield f"message[{i}] id", node.id
        yield f"message[{i}]", node.message
    for node_id, generation in g.generations.items():
        yield f"message[{index.get(node_id, '?')}] generation", generation
    for env in g.envs.values():
        yield "tools", env.tools
        yield "template kwargs", env.template_kwargs
    yield "extras", event.extras


def _invalid_text(event: ReadGraph) -> ReadReject | None:
    """The ``invalid_text`` reject of a graph holding a lone surrogate (see :mod:`msgtrain.ingest.text_check`)."""
    from msgtrain.ingest.text_check import lone_surrogate_field

    try:
        found = lone_surrogate_field(_graph_values(event))
    except Exception:  # the check is a guard, not a new way to fail: an odd value is judged further down
        return None
    if found is None:
        return None
    field_path, text, at = found
    err = MsgtrainError(
        f"lone UTF-16 surrogate U+{ord(text[at]):04X} at character {at} of {field_path}: text that is not Unicode"
        " cannot be tokenized or written",
        where=f"{event.source} {field_path}",
        code="invalid_text",
        hint=INVALID_TEXT_HINT,
    )
    return ReadReject(event.source, err, excerpt(text[max(at - 200, 0) : at + 200]), count=event.records)


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
    try:
        return list(task.parse())
    except MsgtrainError as e:
        err = e if e.where else e.located(str(task.source))
        return [ReadReject(task.source, err, excerpt(task.raw), count=task.records)]
    except Exception as e:
        return [
            fault_reject(task.source, e, f"the {reader.name} reader", traceback.format_exc(), task.raw, task.records)
        ]


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


def _each_line(value: Any) -> tuple[str, ...]:
    """The key function of a JSONL file whose reader does not group lines: every line stands alone, so the boundary
    leaves out just the line a fault comes from."""
    return ()


def _retry_keys(reader: Reader, path: Path) -> Any:
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


def _read_isolating(reader: Reader, path: Path, keys: Any) -> Iterator[ReadEvent]:
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


def _read_document_isolating(reader: Reader, path: Path, key: str) -> Iterator[ReadEvent]:
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
