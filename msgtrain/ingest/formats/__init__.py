"""The format readers, grouped by kind: per-call API logs and cassettes (``api``), agent sessions (``sessions``),
chat exports (``chats``), traces and spans (``traces``), eval and RL harnesses (``harnesses``).

What a reader imports from the rest of ingest: the reader protocol (:mod:`msgtrain.ingest.core.events`), the
reading helpers of :mod:`msgtrain.ingest.core.base` and the head-shape probe detectors use, re-exported here;
the shapes readers share (``msgtrain.ingest.common``) and the structural reader below them as needed."""

from msgtrain.ingest.common.head_shape import head_shape
from msgtrain.ingest.core.base import (
    ReadEvent,
    ReadGraph,
    ReadItem,
    ReadReject,
    ReadSkip,
    RecordTask,
    SourceRef,
    excerpt,
    head_objects,
    iter_json_lines,
    load_json_document,
    read_head,
)
from msgtrain.ingest.core.marks import Marks, quoted

__all__ = [
    "Marks",
    "ReadEvent",
    "ReadGraph",
    "ReadItem",
    "ReadReject",
    "ReadSkip",
    "RecordTask",
    "SourceRef",
    "excerpt",
    "head_objects",
    "head_shape",
    "iter_json_lines",
    "load_json_document",
    "quoted",
    "read_head",
]
