"""Reading the native graph log (format ``msgtrain.graph``, version 1; spec in docs/graph-log.md).

Invariants:
- Records are JSON objects, one per line, each with ``type`` and ``graph``; several graphs may share a file.
- Loading is tolerant of a crashed writer (a truncated last line is reported, earlier records are kept) and
  strict about structure: a node whose parent never appears (dangling), a parent chain that loops (cycle), or one
  id reused for different content (duplicate) is a :class:`ValidationError` naming the file, line and node.
- A version this code does not know is refused with a clear message rather than half-read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import ParseError, ValidationError
from msgtrain.model.graph import (
    GRAPH_LOG_FORMAT,
    GRAPH_LOG_VERSION,
    EdgeKind,
    Env,
    MessageGraph,
    Node,
    Origin,
    ParallelEdge,
    canonical,
)
from msgtrain.model.message import Generation, OptionCallMessage, OptionResultMessage, parse_message


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) per non-empty line; bad lines raise ParseError located at file:line."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ParseError(f"invalid UTF-8 at byte {e.start}", where=f"{path}:{lineno}", code="bad_utf8") from e
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                truncated = not raw.endswith(b"\n")
                raise ParseError(
                    ("truncated last line: " if truncated else "invalid JSON: ") + e.msg,
                    where=f"{path}:{lineno}",
                    hint="the writer was probably killed mid-line; earlier records are still read"
                    if truncated
                    else None,
                    code="truncated_line" if truncated else "bad_json",
                ) from e
            if not isinstance(obj, dict):
                raise ParseError("record is not a JSON object", where=f"{path}:{lineno}", code="bad_record")
            yield lineno, obj


def load_graphs(path: str | Path) -> Iterator[MessageGraph]:
    """Load every graph of a native graph log, in the order their headers appear."""
    yield from graphs_from_records(iter_jsonl(path), source=str(path))


def graphs_from_records(
    records: Iterable[tuple[int, dict[str, Any]] | dict[str, Any]], *, source: str
) -> Iterator[MessageGraph]:
    pending: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    order: list[str] = []
    for n, item in enumerate(records, 1):
        lineno, rec = item if isinstance(item, tuple) else (n, item)
        gid = rec.get("graph")
        if not isinstance(gid, str):
            raise ValidationError(
                "record has no graph id",
                where=f"{source}:{lineno}",
                code="bad_record",
                hint='every graph-log record carries "graph": "<id>"',
            )
        if gid not in pending:
            pending[gid] = []
            order.append(gid)
        pending[gid].append((lineno, rec))
    for gid in order:
        yield _build(gid, pending[gid], source)


def _build(gid: str, recs: list[tuple[int, dict[str, Any]]], source: str) -> MessageGraph:
    header_line, header = next(((n, r) for n, r in recs if r.get("type") == "graph"), (0, None))
    if header is None:
        raise ValidationError(
            f"graph {gid} has no header record",
            where=source,
            code="bad_record",
            hint='the first record of a graph is {"type": "graph", ...}',
        )
    if header.get("format") != GRAPH_LOG_FORMAT or header.get("version") != GRAPH_LOG_VERSION:
        raise ValidationError(
            f"unsupported graph log {header.get('format')!r} version {header.get('version')!r}",
            where=f"{source}:{header_line}",
            hint=f"this msgtrain reads {GRAPH_LOG_FORMAT} version {GRAPH_LOG_VERSION}; upgrade msgtrain",
            code="unsupported_version",
        )
    g = MessageGraph(graph_id=gid, policy=str(header.get("policy", "policy")), metadata=header.get("metadata") or {})
    g.envs.clear()
    node_recs: dict[str, tuple[int, dict[str, Any]]] = {}
    retracted: set[str] = set()
    first_seen: dict[str, int] = {}  # creation order: the line a node was (re-)added on
    head: list[str] | None = None
    for lineno, rec in recs:
        where = f"{source}:{lineno}"
        kind = rec.get("type")
        try:
            if kind == "env":
                env = Env.make(rec.get("tools") or [], rec.get("template_kwargs") or {})
                g.envs[str(rec["env_id"])] = env
            elif kind == "node":
                nid = str(rec["id"])
                if nid in node_recs and node_recs[nid][1].get("message") != rec.get("message"):
                    raise ValidationError(
                        f"duplicate node id {nid} with different content",
                        where=where,
                        code="duplicate_id",
                        hint="node ids must be unique; regenerate the log",
                    )
                prev_origin = node_recs.get(nid, (0, {}))[1].get("origin")
                if prev_origin == "sampled":
                    rec = {**rec, "origin": "sampled"}
                node_recs[nid] = (lineno, rec)
                first_seen.setdefault(nid, lineno)
                retracted.discard(nid)
            elif kind == "generation":
                g.generations[str(rec["id"])] = Generation.model_validate(rec["generation"])
            elif kind == "edge":
                g.edges.append(
                    ParallelEdge(
                        EdgeKind(rec["kind"]),
                        tuple(rec.get("old", ())),
                        tuple(rec.get("new", ())),
                        rec.get("anchor"),
                    )
                )
            elif kind == "retract":
                retracted.update(rec.get("ids", ()))
                for rid in rec.get("ids", ()):
                    first_seen.pop(rid, None)
            elif kind == "head":
                head = list(rec.get("ids", ()))
            elif kind != "graph":
                raise ValidationError(
                    f"unknown record type {kind!r}",
                    where=where,
                    code="bad_record",
                    hint="record types: graph, env, node, generation, edge, retract, head",
                )
        except (KeyError, ValueError, TypeError) as e:
            if isinstance(e, ValidationError):
                raise
            raise ValidationError(f"malformed {kind} record: {e}", where=where, code="bad_record") from e
    for nid in retracted:
        node_recs.pop(nid, None)
    # Resolve parents first, then insert in topological order (a hand-written log may list children early).
    for nid, (lineno, rec) in node_recs.items():
        parent = rec.get("parent")
        if parent is not None and parent not in node_recs:
            raise ValidationError(
                f"node {nid} has a dangling parent {parent}",
                where=f"{source}:{lineno}",
                code="dangling_parent",
                hint="the parent node record is missing from the log",
            )
        if rec.get("env_id") not in g.envs:
            g.envs.setdefault(str(rec.get("env_id")), Env())
    depth: dict[str, int] = {}
    for nid in node_recs:
        _depth(nid, node_recs, depth, source)
    for nid in sorted(node_recs, key=lambda k: (depth[k], first_seen[k])):
        lineno, rec = node_recs[nid]
        try:
            msg = parse_message(rec["message"])
            origin = Origin(rec.get("origin", "context"))
        except (ValueError, KeyError) as e:
            raise ValidationError(
                f"node {nid}: invalid message: {e}", where=f"{source}:{lineno}", code="bad_message"
            ) from e
        if isinstance(msg, OptionCallMessage):
            g._call_names.update({c.invocation_id: c.option_name for c in msg.calls})
        g.nodes[nid] = Node(nid, rec.get("parent"), str(rec.get("env_id")), msg, origin, depth[nid])
        g.children.setdefault(rec.get("parent"), []).append(nid)
    g.nodes = {nid: g.nodes[nid] for nid in sorted(g.nodes, key=first_seen.__getitem__)}
    for gid_ in list(g.generations):
        if gid_ not in g.nodes:
            del g.generations[gid_]
    if head and all(h in g.nodes for h in head):
        g.head = head
    elif g.nodes:
        last = max(node_recs, key=lambda k: node_recs[k][0])
        g.head = [n.id for n in g.path(last)]
    if g.head:
        g.env = g.envs[g.nodes[g.head[0]].env_id]
    elif g.envs:
        g.env = next(iter(g.envs.values()))
    else:
        g.envs[g.env.id] = g.env
    return g


def _depth(nid: str, recs: dict[str, tuple[int, dict[str, Any]]], memo: dict[str, int], source: str) -> int:
    chain: list[str] = []
    seen: set[str] = set()
    cur: str | None = nid
    while cur is not None and cur not in memo:
        if cur in seen:
            raise ValidationError(
                f"node {cur} is its own ancestor (cycle)",
                where=f"{source}:{recs[cur][0]}",
                code="cycle",
                hint="parent links must form a tree",
            )
        seen.add(cur)
        chain.append(cur)
        cur = recs[cur][1].get("parent")
    base = -1 if cur is None else memo[cur]
    for i, n in enumerate(reversed(chain), 1):
        memo[n] = base + i
    return memo[nid]


def graph_from_data(data: dict[str, Any]) -> MessageGraph:
    """The sub-agent graph an option result nests (``MessageGraph.to_data``)."""
    graphs = list(graphs_from_records(data.get("records", []), source="<subgraph>"))
    if len(graphs) != 1:
        raise ValidationError(f"a nested sub-agent graph must hold exactly one graph, found {len(graphs)}")
    return graphs[0]


def subgraphs(graph: MessageGraph) -> list[MessageGraph]:
    """Nested sub-agent graphs held by ``graph``'s option results, one level down."""
    out: dict[str, MessageGraph] = {}
    for n in graph.nodes.values():
        if isinstance(n.message, OptionResultMessage) and n.message.subgraph is not None:
            key = canonical(n.message.subgraph)  # a fork carries the same result (and sub-agent) over
            if key not in out:
                out[key] = graph_from_data(n.message.subgraph)
    return list(out.values())
