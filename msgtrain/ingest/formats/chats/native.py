"""Native graph logs written by ``MessageGraph`` (format ``msgtrain.graph`` v1, docs/graph-log.md).

One graph is one converted unit; its records are every line that names it. A bad record costs only itself and
what depends on it (a node's subtree, a sampled node's training when its generation is bad); only a missing or
unsupported header costs the whole graph. Other graphs of the same file are read either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.core.chunks import ChunkKey, KeyFunction
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadReject,
    ReadSkip,
    SourceRef,
    excerpt,
    head_objects,
    iter_json_lines,
    quoted,
)
from msgtrain.model.graph import GRAPH_LOG_FORMAT
from msgtrain.model.graphlog import Damage, graph_from_records


class NativeGraphReader:
    name = "graph"
    description = "msgtrain native graph log (MessageGraph.save / log=...), JSONL of graph/node/edge records"
    example = "sample_logs/native/edit_and_compaction.graph.jsonl"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted([GRAPH_LOG_FORMAT]))

    def detect(self, path: Path, head: bytes) -> bool:
        return any(o.get("format") == GRAPH_LOG_FORMAT and o.get("type") == "graph" for o in head_objects(head))

    def chunk_keys(self, path: Path) -> KeyFunction:
        """Every record of this format is keyed alike (see :mod:`msgtrain.ingest.core.chunks`)."""
        return self._chunk_key

    def _chunk_key(self, obj: Any) -> ChunkKey:
        """A graph's records go together (see :mod:`msgtrain.ingest.core.chunks`); bad records stand alone."""
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
            yield from self._graph_events(path, gid, recs, first_line[gid])

    def _graph_events(
        self, path: Path, gid: str, recs: list[tuple[int, dict[str, Any]]], first: int
    ) -> Iterator[ReadEvent]:
        """One graph's events: a bad record costs itself and the nodes below it (a tolerant build, see
        :func:`msgtrain.model.graphlog.graph_from_records`); only a bad header costs the graph."""
        src = SourceRef(str(path), f"line {first}")
        damage = Damage()
        try:
            graph = graph_from_records(gid, recs, str(path), damage)
        except MsgtrainError as e:
            yield ReadReject(src, e, excerpt(str(recs[0][1])))
            # The other records of a rejected graph are part of the same rejected unit.
            if len(recs) > 1:
                yield ReadSkip(src, "part_of_rejected_graph", len(recs) - 1)
            return
        by_line = dict(recs)
        for lineno, error in sorted(damage.rejected.items()):
            ref = SourceRef(str(path), f"line {lineno}")
            err = error if error.where else error.located(str(ref))
            yield ReadReject(ref, err, excerpt(by_line.get(lineno)))
        if damage.dependent:
            ref = SourceRef(str(path), f"line {min(damage.dependent)}")
            yield ReadSkip(ref, "depends_on_rejected_record", len(damage.dependent))
        kept = len(recs) - len(damage.rejected) - len(damage.dependent)
        if kept > 0:
            yield ReadGraph(graph, src, records=kept)


READER = NativeGraphReader()
