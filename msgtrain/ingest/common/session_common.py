"""Building blocks shared by the agent-session and trace readers (Claude Code, Codex, Gemini CLI, SWE-agent,
OpenHands, OpenTelemetry GenAI).

Invariants:
- :class:`Chain` rebuilds the *current branch* of a session log on a :class:`MessageGraph` with ``add_node``:
  appending extends the branch; :meth:`Chain.replace` (compaction) and :meth:`Chain.rewind` start a new branch from
  an anchor and record the parallel edge that says why, so the linearizer can name the cut.
- A chain can be *tainted*: once a record of its branch was rejected (or its context is known to be incomplete),
  the assistant turns appended below it are kept as context (origin ``carried``), never ``sampled``, because the
  context they were sampled in is not what the graph holds. A compaction with an explicit replacement history
  gives a complete new context and clears the taint.
- :class:`SkipTally` counts records that carry no conversation per reason and emits one :class:`ReadSkip` per
  reason at the end of the file, so every input record is accounted for exactly once.
- Graph ids are deterministic: ``<format>:<session id>`` (or a hash of the file name when a log has no id); never
  random.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError
from msgtrain.ingest.common.head_shape import HeadShape
from msgtrain.ingest.core.base import (
    ReadReject,
    ReadSkip,
    SourceRef,
    excerpt,
    load_json_document,
    read_head,
)
from msgtrain.model.graph import EdgeKind, MessageGraph, Origin
from msgtrain.model.message import AnyMessage, Generation


def graph_id_for(fmt: str, key: str | None, path: Path) -> str:
    """``<fmt>:<key>`` for a log that names its session, else ``<fmt>:file-<hash of the file name>``."""
    if key:
        return f"{fmt}:{key}"
    digest = hashlib.blake2b(path.name.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return f"{fmt}:file-{digest}"


def synthetic_call_id(*parts: object) -> str:
    """A deterministic invocation id for formats that log a tool call without one (stable across runs)."""
    digest = hashlib.blake2b("\x00".join(str(p) for p in parts).encode("utf-8", "surrogatepass"), digest_size=8)
    return f"call_{digest.hexdigest()}"


class SkipTally:
    """Counts skipped records per reason; :meth:`events` yields one ReadSkip per reason (first line as source)."""

    def __init__(self, path: Path):
        self.file = str(path)
        self.counts: Counter[str] = Counter()
        self.first: dict[str, str] = {}

    def add(self, reason: str, record: str, count: int = 1) -> None:
        self.counts[reason] += count
        self.first.setdefault(reason, record)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def events(self) -> Iterator[ReadSkip]:
        for reason, count in self.counts.items():
            yield ReadSkip(SourceRef(self.file, self.first[reason]), reason, count)


class Chain:
    """The current branch of a graph being rebuilt from a (mostly) linear session log."""

    def __init__(self, graph: MessageGraph):
        self.graph = graph
        self.path: list[str] = []
        self.taint: str | None = None

    @property
    def head(self) -> str | None:
        return self.path[-1] if self.path else None

    def origin_for(self, message: AnyMessage, origin: Origin | None) -> Origin:
        """The origin a message gets on this chain: assistant turns default to sampled unless tainted."""
        if origin is None:
            origin = Origin.SAMPLED if message.role == "assistant" else Origin.CONTEXT
        if origin is Origin.SAMPLED and self.taint is not None:
            return Origin.CARRIED
        return origin

    def append(self, message: AnyMessage, origin: Origin | None = None, generation: Generation | None = None) -> str:
        nid = self.graph.add_node(self.head, message, origin=self.origin_for(message, origin), generation=generation)
        self.path.append(nid)
        return nid

    def replace(
        self,
        keep: int,
        messages: Sequence[tuple[AnyMessage, Origin]],
        kind: EdgeKind = EdgeKind.COMPACTION,
    ) -> list[str]:
        """Replace everything after the first ``keep`` nodes by ``messages`` and record a ``kind`` edge.

        The replaced run stays in the graph (it is what earlier turns were sampled in); the new run hangs from the
        same anchor. Returns the new node ids.
        """
        keep = max(0, min(keep, len(self.path)))
        anchor = self.path[keep - 1] if keep else None
        old = self.path[keep:]
        parent = anchor
        new: list[str] = []
        for message, origin in messages:
            parent = self.graph.add_node(parent, message, origin=origin)
            new.append(parent)
        # Content addressing makes a replacement that starts like the old run share its first nodes; the edge
        # names only what actually changed, so turns on the shared prefix are not mistaken for post-edge turns.
        same = 0
        while same < min(len(old), len(new)) and old[same] == new[same]:
            same += 1
        edge_anchor = new[same - 1] if same else anchor
        self.graph.record_edge(kind, old[same:], new[same:], edge_anchor)
        self.path = self.path[:keep] + new
        return new

    def rewind(self, keep: int) -> None:
        """Drop the branch after ``keep`` nodes: what is appended next starts a new branch (a REWIND edge)."""
        keep = max(0, min(keep, len(self.path)))
        old = self.path[keep:]
        if not old:
            return
        anchor = self.path[keep - 1] if keep else None
        self.graph.record_edge(EdgeKind.REWIND, old, (), anchor)
        self.path = self.path[:keep]


def folder_records(
    state: Path,
    read_state: Callable[[Any], None],
    files: Iterable[Path],
    read_record: Callable[[Any, str], None],
    rejected: Callable[[str], None],
) -> Iterator[ReadReject]:
    """The records of a log kept as a folder of one JSON document per record (OpenHands V1's events, Strands'
    messages), read in the order of ``files``: the ``state`` document first (``read_state``), then each file
    (``read_record(document, file name)``). A file that cannot be read (one over the record limit,
    ``--max-record-mb``, is not: :func:`~msgtrain.ingest.core.base.load_json_document`) or that its reader refuses is
    a reject with an excerpt of its head; ``rejected(file name)`` is told first, so the reader keeps the turns after
    it out of training (their context held it)."""
    try:
        read_state(load_json_document(state))
    except MsgtrainError as e:
        yield ReadReject(SourceRef(str(state), "file"), e.located(str(state)), "")
    for file in files:
        try:
            read_record(load_json_document(file), file.name)
        except MsgtrainError as e:
            rejected(file.name)
            yield ReadReject(SourceRef(str(file), "file"), e.located(str(file)), excerpt(read_head(file)))


def text_of_blocks(content: Any) -> str | None:
    """The text of a string or of a list of ``{"type": "text", "text": ...}`` blocks; None if anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in content):
        return "\n".join(str(b.get("text", "")) for b in content)
    return None


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (logs leave optional objects out or null)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` if it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def has_any(shape: HeadShape, *paths: str) -> bool:
    """True if the head holds at least one of ``paths`` (record-relative key paths, see head_shape)."""
    return any(shape.has(p) for p in paths)
