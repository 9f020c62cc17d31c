"""The fault boundary: the one way every consumer (convert, validate, inspect) reads a file — never through
``Reader.read`` directly.

Invariants (the details are in :mod:`msgtrain.ingest.core.base`'s docstring):
- :func:`open_reader` never raises: a file no reader recognises, or one that cannot be read, is one reject.
- :func:`read_events` never raises for anything a reader does (only ``KeyboardInterrupt`` and the like pass):
  whatever escapes a reader costs the record it comes from (:mod:`msgtrain.ingest.isolate`), and a graph holding
  text that is not Unicode is an ``invalid_text`` reject (:mod:`msgtrain.ingest.core.text_check`).
- Every graph read is checked for a reported prompt size that shrank along a branch, whatever its reader: the replies
  from there on were sampled in a history the log does not show and are kept as context
  (:func:`msgtrain.model.completeness.carry_replies_after_shrunk_prompt`).
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from pathlib import Path

from msgtrain.errors import FormatError, MsgtrainError
from msgtrain.ingest.core.base import (
    Reader,
    ReadEvent,
    ReadGraph,
    ReadReject,
    ReadSkip,
    SourceRef,
    read_head,
)
from msgtrain.ingest.core.text_check import graph_reject
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.faults import _read_streaming, fault_reject, unreadable_file_error
from msgtrain.ingest.isolate import read_document_isolating, read_folder_isolating, read_isolating, retry_keys
from msgtrain.model.completeness import carry_replies_after_shrunk_prompt


def open_reader(path: Path, forced: Reader | None = None) -> Reader | ReadReject:
    """The reader for ``path`` (``forced``, or detected), or the reject that stands for the whole file."""
    file_ref = SourceRef(str(path), "file")
    if forced is not None:
        return forced
    try:
        return detect_format(path)
    except MsgtrainError as e:
        from msgtrain.ingest.structure.structural import file_assistant_turns

        return ReadReject(file_ref, e, turns=file_assistant_turns(path))
    except OSError as e:
        return ReadReject(file_ref, unreadable_file_error(path, e))
    except Exception as e:
        return fault_reject(file_ref, e, "format detection", traceback.format_exc(), path)


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
    from msgtrain.ingest.structure.structural import file_assistant_turns

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
            try:
                carry_replies_after_shrunk_prompt(event.graph)
            except Exception as e:  # a check of what was read: a failure costs this graph, never the run
                yield fault_reject(event.source, e, "the prompt-size check", "", count=event.records)
                continue
        yield event
