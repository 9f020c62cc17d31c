"""Native graph logs written by ``MessageGraph`` (format ``msgtrain.graph`` v1, docs/graph-log.md).

One graph is one converted unit; its records are every line that names it. A graph whose records are broken
(dangling parent, cycle, duplicate id) is rejected whole, other graphs of the same file are still read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.base import (
    ReadEvent,
    ReadGraph,
    ReadReject,
    ReadSkip,
    SourceRef,
    excerpt,
    head_objects,
    iter_json_lines,
)
from msgtrain.ingest.chunks import ChunkKey, KeyFunction
from msgtrain.model.graph import GRAPH_LOG_FORMAT
from msgtrain.model.graphlog import graphs_from_records


class NativeGraphReader:
    name = "graph"
    description = "msgtrain native graph log (MessageGraph.save / log=...), JSONL of graph/node/edge records"
    example = "sample_logs/native/edit_and_compaction.graph.jsonl"

    def detect(self, path: Path, head: bytes) -> bool:
        return any(o.get("format") == GRAPH_LOG_FORMAT and o.get("type") == "graph" for o in head_objects(head))

    def chunk_keys(self, path: Path) -> KeyFunction:
        """Every record of this format is keyed alike (see :mod:`msgtrain.ingest.chunks`)."""
        return self._chunk_key

    def _chunk_key(self, obj: Any) -> ChunkKey:
        """A graph's records go together (see :mod:`msgtrain.ingest.chunks`); bad records stand alone."""
        gid = obj.get("graph") if isinstance(obj, dict) else None
        return (gid,) if isinstance(gid, str) else ()

    def read(self, path: Path) -> Iterator[ReadEvent]:
        groups: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        first_line: dict[str, int] = {}
        for lineno, raw, obj in iter_json_lines(path):
            if isinstance(obj, MsgtrainError):
                yield ReadReject(SourceRef(str(path), f"line {lineno}"), obj, excerpt(raw))
                continue
            gid = obj.get("graph") if isinstance(obj, dict) else None
            if not isinstance(gid, str):
                err = ValidationError(
                    "record has no graph id",
                    where=f"{path}:{lineno}",
                    code="bad_record",
                    hint='every graph-log record carries "graph": "<id>"',
                )
                yield ReadReject(SourceRef(str(path), f"line {lineno}"), err, excerpt(raw))
                continue
            groups.setdefault(gid, []).append((lineno, obj))
            first_line.setdefault(gid, lineno)
        for gid, recs in groups.items():
            src = SourceRef(str(path), f"line {first_line[gid]}")
            try:
                graphs = list(graphs_from_records(recs, source=str(path)))
            except MsgtrainError as e:
                yield ReadReject(src, e, excerpt(str(recs[0][1])))
                # The other records of a rejected graph are part of the same rejected unit.
                if len(recs) > 1:
                    yield ReadSkip(src, "part_of_rejected_graph", len(recs) - 1)
                continue
            yield ReadGraph(graphs[0], src, records=len(recs))


READER = NativeGraphReader()
