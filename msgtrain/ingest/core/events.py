"""The reader interface every input format implements: the events a reader yields and the :class:`Reader`
protocol (the bottom of the ingest package: it imports no other ingest module).

Invariants:
- A reader turns one file into a stream of events: :class:`ReadGraph` (a message graph built from one or more
  input records), :class:`ReadReject` (a bad record, with the error and a bounded excerpt of the raw bytes), and
  :class:`ReadSkip` (records that carry no conversation, e.g. telemetry lines, counted with a reason).
- Accounting: every input record of a file is counted exactly once, in ``ReadGraph.records``,
  ``ReadReject`` (one each) or ``ReadSkip.count``; the pipeline asserts records read = converted + rejected +
  skipped.
- :func:`excerpt` cannot fail on any value.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from msgtrain.errors import MsgtrainError
from msgtrain.model.graph import MessageGraph

EXCERPT_BYTES = 2048
HEAD_BYTES = 64 * 1024
# Absurd sizes are rejected, not attempted: a record larger than this is a bug in the writer, not a conversation.
# A file a reader holds whole (a JSON document, a YAML cassette) is one record for memory purposes: the same limit
# (msgtrain.ingest.core.base.check_whole_file).
MAX_RECORD_BYTES = 64 * 1024 * 1024


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
    """One record's parsing, deferred so that :func:`~msgtrain.ingest.boundary.read_events` runs it inside the
    fault boundary.

    ``parse()`` returns the events of exactly ``records`` input records (a graph, a reject, a skip...). If it
    raises, those records become one ``reader_error`` reject at ``source`` with an excerpt of ``raw``.

    ``size_bound``: an upper bound of the length of ``raw``'s compact JSON text, when the reader knows one; the
    driver then does not serialize a record bounded within the record limit to measure it (see
    :data:`PARSED_TEXT_GROWTH`).
    """

    source: SourceRef
    parse: Callable[[], Iterable[ReadEvent]]
    records: int = 1
    raw: Any = None
    size_bound: int | None = None


# How much longer than the JSON text it was parsed from a value's compact JSON (``json.dumps`` without ASCII escapes)
# can be, times a file's size: a number comes back as Python writes it, at most 4.5 times longer (``1e15`` is
# ``1000000000000000.0``); strings, literals and structure never grow (escapes come back as short or shorter, blanks
# go); a file with a byte-order mark is read through a UTF-8 copy at most 1.5 times its size (UTF-16 text). So a
# value parsed from a JSON file of n bytes writes at most 8 n characters.
PARSED_TEXT_GROWTH = 8


# What a reader's ``read`` yields: events, or record tasks the driver runs inside the boundary.
ReadItem = ReadEvent | RecordTask


class Reader(Protocol):
    """One input format. ``detect`` must be cheap (it sees the file's first 64 KiB); ``read`` streams.

    Optional: ``chunk_keys(path)`` returns, for one JSONL file, a function naming the conversation(s) each parsed
    record belongs to, with exactly the keys ``read`` groups records by (``None``: keep it with the line before
    it), or None when the file cannot be cut. A reader that has it lets huge JSONL files be cut into chunks of
    whole conversations (:mod:`msgtrain.ingest.core.chunks`); ``read`` must then read via :func:`iter_json_lines` or
    ``iter_raw_records``, which honour the active chunk, and pick its layout from the file's first record, not
    the whole file's (``vote_layout`` in :mod:`msgtrain.ingest.common.conversation_files`). With ``chunk_items =
    True`` too (``read`` reads only through ``iter_raw_records``), a top-level JSON array that ``iter_raw_records``
    reads item by item is cut the same way, into chunks of whole items keyed by the same function.

    Optional, and required of a reader that consults any file other than its input (files that answer each other:
    a batch output and its input file, answers and their ``question.jsonl``, a sub-agent and its parent session):
    ``partners(location, beside)`` declares the files it joins the input at ``location`` with, decided from
    locations, folder listings and files' first bytes (:class:`msgtrain.ingest.core.files.Beside`), absent ones
    included, and returns [] for an input it would read alone. It reaches them only through
    :func:`msgtrain.ingest.core.files.input_files`. A part's key covers their bytes, so changing either side of a join
    converts again exactly the parts that used it (:func:`msgtrain.run.units.input_digest`).

    Optional: ``detect_directory(path)`` makes the reader's unit a *directory* (a log written as a folder, one file
    per event): it says, cheaply (a few ``stat`` calls), whether ``path`` is one of its folders. Input discovery
    then hands the folder to ``read`` once and does not look at the files inside it
    (:func:`~msgtrain.ingest.registry.unit_directories`); ``detect`` is still asked about single files and should
    claim none of them.

    Optional: ``marks`` (:class:`msgtrain.ingest.core.marks.Marks`): texts one of which ``detect`` needs in a file's
    head, or path patterns one of which its path matches; detection imports and asks only the readers whose marks
    admit a file (the registry's catalogue holds them as data). ``partner_marks`` say the same of ``partners``. No
    marks: any file.
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
