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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ParseError, ValidationError
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


@dataclass
class Damage:
    """What a tolerant build (``problems`` given to :func:`graph_from_records`) left out of a graph: each bad record
    with the error that rejects it (line → error), and the lines of node records dropped only because they hang
    below a bad or missing node (their context held it)."""

    rejected: dict[int, MsgtrainError] = field(default_factory=dict)
    dependent: set[int] = field(default_factory=set)


def graph_from_records(
    gid: str, recs: list[tuple[int, dict[str, Any]]], source: str, damage: Damage | None = None
) -> MessageGraph:
    """One graph from its records. Strict without ``damage`` (the first bad record raises); with it, a bad record
    costs only itself and what depends on it: a node with a bad field, a dangling parent, a duplicate id, an unknown
    environment or in a cycle is left out with its subtree; a bad generation leaves its node as ``carried`` (its
    engine facts are unknown, so it is not trained); a bad edge, retract or head record is ignored. A missing or
    unsupported header still rejects the graph (everything depends on it)."""
    return _build(gid, recs, source, damage)


def _build(gid: str, recs: list[tuple[int, dict[str, Any]]], source: str, damage: Damage | None = None) -> MessageGraph:
    def fail(lineno: int, err: MsgtrainError) -> None:
        if damage is None:
            raise err
        damage.rejected.setdefault(lineno, err)

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
    metadata = header.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):  # only the metadata column depends on it
        fail(header_line, ValidationError("graph metadata is not an object", where=f"{source}:{header_line}"))
        metadata = None
    g = MessageGraph(graph_id=gid, policy=str(header.get("policy", "policy")), metadata=metadata or {})
    g.content_ids = False  # the ids are the log's: nothing checks that they are the content's
    g.envs.clear()
    node_recs: dict[str, tuple[int, dict[str, Any]]] = {}
    retracted: set[str] = set()
    first_seen: dict[str, int] = {}  # creation order: the line a node was (re-)added on
    head: list[str] | None = None
    bad_ids: set[str] = set()  # nodes left out with their subtrees
    bad_envs: set[str] = set()
    no_generation: set[str] = set()  # sampled nodes whose generation record is bad
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
                    bad_ids.add(nid)
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
                try:
                    g.generations[str(rec["id"])] = Generation.model_validate(rec["generation"])
                except (KeyError, ValueError, TypeError):
                    if isinstance(rec.get("id"), str):
                        no_generation.add(rec["id"])
                    raise
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
                ids = [str(rid) for rid in rec.get("ids", ())]
                retracted.update(ids)
                for rid in ids:
                    first_seen.pop(rid, None)
            elif kind == "head":
                head = [str(h) for h in rec.get("ids", ())]
            elif kind != "graph":
                raise ValidationError(
                    f"unknown record type {kind!r}",
                    where=where,
                    code="bad_record",
                    hint="record types: graph, env, node, generation, edge, retract, head",
                )
        except (KeyError, ValueError, TypeError, AttributeError) as e:
            if damage is None and isinstance(e, AttributeError):
                raise
            if kind == "env":
                bad_envs.add(str(rec.get("env_id")))
            if kind == "node" and isinstance(rec.get("id"), str | int):
                bad_ids.add(str(rec["id"]))
            fail(lineno, e if isinstance(e, ValidationError) else _malformed(kind, e, where))
    for nid in retracted:
        node_recs.pop(nid, None)
    messages: dict[str, tuple[Any, Origin]] = {}
    for nid, (lineno, rec) in node_recs.items():
        where = f"{source}:{lineno}"
        if nid in bad_ids:
            continue
        try:
            parsed = parse_message(rec["message"])
            origin = Origin(rec.get("origin", "context"))
        except (ValueError, KeyError, TypeError) as e:
            bad_ids.add(nid)
            fail(lineno, ValidationError(f"node {nid}: invalid message: {e}", where=where, code="bad_message"))
            continue
        messages[nid] = (parsed, origin)
        parent = rec.get("parent")
        if parent is not None and parent not in node_recs:
            bad_ids.add(nid)
            fail(
                lineno,
                ValidationError(
                    f"node {nid} has a dangling parent {parent}",
                    where=where,
                    code="dangling_parent",
                    hint="the parent node record is missing from the log",
                ),
            )
        elif rec.get("env_id") in bad_envs:
            bad_ids.add(nid)
            fail(lineno, ValidationError(f"node {nid}: its environment record is bad", where=where, code="bad_record"))
        elif rec.get("env_id") not in g.envs:
            g.envs.setdefault(str(rec.get("env_id")), Env())

    def drop(bad: set[str]) -> None:
        """Leave out ``bad`` and the nodes below them (a tolerant build only; a strict one raised already)."""
        assert damage is not None
        for nid in _with_subtrees(bad, node_recs):
            lineno = node_recs.pop(nid)[0]
            if lineno not in damage.rejected:
                damage.dependent.add(lineno)

    if bad_ids and damage is not None:
        drop(bad_ids)
    depth: dict[str, int] = {}
    in_cycles: set[str] = set()
    for nid in node_recs:
        try:
            _depth(nid, node_recs, depth, source)
        except ValidationError as e:  # a cycle: its nodes (and what hangs below them) are left out
            fail(node_recs[nid][0], e)
            cur: Any = nid
            while cur is not None and cur not in depth:
                in_cycles.add(cur)
                depth[cur] = -1
                cur = node_recs[cur][1].get("parent")
    if in_cycles:
        drop(in_cycles)
    for nid in sorted(node_recs, key=lambda k: (depth[k], first_seen.get(k, 0))):
        lineno, rec = node_recs[nid]
        msg, origin = messages[nid]
        if nid in no_generation and origin is Origin.SAMPLED:
            origin = Origin.CARRIED  # sampled, but its engine facts are lost: context, never trained
        if isinstance(msg, OptionCallMessage):
            g._call_names.update({c.invocation_id: c.option_name for c in msg.calls})
        g.nodes[nid] = Node(nid, rec.get("parent"), str(rec.get("env_id")), msg, origin, depth[nid])
        g.children.setdefault(rec.get("parent"), []).append(nid)
    g.nodes = {nid: g.nodes[nid] for nid in sorted(g.nodes, key=lambda k: first_seen.get(k, 0))}
    for gid_ in list(g.generations):
        if gid_ not in g.nodes:
            del g.generations[gid_]
    if damage is not None:
        g.edges = [e for e in g.edges if all(n in g.nodes for n in (*e.old, *e.new))]
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


def _malformed(kind: Any, e: Exception, where: str) -> ValidationError:
    return ValidationError(f"malformed {kind} record: {e}", where=where, code="bad_record")


def _with_subtrees(bad: set[str], recs: dict[str, tuple[int, dict[str, Any]]]) -> set[str]:
    """``bad`` and every node whose parent chain passes through one of them."""
    children: dict[str, list[str]] = {}
    for nid, (_, rec) in recs.items():
        parent = rec.get("parent")
        if isinstance(parent, str):
            children.setdefault(parent, []).append(nid)
    out: set[str] = set()
    stack = [n for n in bad if n in recs]
    while stack:
        nid = stack.pop()
        if nid in out:
            continue
        out.add(nid)
        stack.extend(children.get(nid, ()))
    return out


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
