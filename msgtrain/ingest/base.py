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
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from msgtrain.errors import FormatError, MsgtrainError, ParseError
from msgtrain.model.graph import MessageGraph

EXCERPT_BYTES = 2048
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
    source: SourceRef
    error: MsgtrainError
    excerpt: str = ""


@dataclass
class ReadSkip:
    source: SourceRef
    reason: str
    count: int = 1


ReadEvent = ReadGraph | ReadReject | ReadSkip


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

    def read(self, path: Path) -> Iterator[ReadEvent]: ...


REGISTRY: dict[str, Reader] = {}


def register(reader: Reader) -> Reader:
    if reader.name in REGISTRY:
        raise ValueError(f"reader {reader.name!r} registered twice")
    REGISTRY[reader.name] = reader
    return reader


def excerpt(raw: bytes | str, limit: int = EXCERPT_BYTES) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return text if len(text) <= limit else text[:limit] + f"…(+{len(text) - limit} chars)"


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


def detect_format(path: Path) -> Reader:
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
    for reader in REGISTRY.values():
        if reader.detect(path, head):
            return reader
    known = ", ".join(REGISTRY)
    raise FormatError(
        "no reader recognises this file",
        where=str(path),
        hint=f"force one with --input-format NAME; known formats: {known}",
    )


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
    for lineno, raw in iter_chunk_lines(path, chunk) if chunk is not None else _numbered_lines(path):
        if not raw.strip():
            continue
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
            yield lineno, raw, json.loads(raw.decode("utf-8"))
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
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ParseError(f"invalid UTF-8 at byte {e.start}", where=str(path), code="bad_utf8") from e
    except json.JSONDecodeError as e:
        raise ParseError(f"invalid JSON at line {e.lineno}: {e.msg}", where=str(path), code="bad_json") from e
    except RecursionError as e:
        raise ParseError("JSON nested too deeply", where=str(path), code="too_deep") from e
