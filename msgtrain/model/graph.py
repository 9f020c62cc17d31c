"""MessageGraph: a DAG of immutable, content-addressed messages with transparent edits (seed 000).

Invariants:
- A :class:`Node` never changes once created (the one exception is record-keeping: a node that was first seen as
  carried over and is later reported as sampled in exactly that context is upgraded to ``sampled``; its content
  and id do not change).
- ``Node.id`` = hash(parent id — or the environment id at a root —, canonical message). Equal prefixes are equal
  nodes, so branches that share history share storage; the environment (tool schemas and chat-template kwargs
  the policy was given) is part of what it saw, so a new environment starts new nodes.
- Sequential edges are parent pointers. Parallel edges (:class:`ParallelEdge`) record versions: an edit, a
  compaction that replaced a range, a deletion, a tool/kwargs change, a rewind recorded by an agent.
- The graph is usable as the plain list of OpenAI dicts of its *current branch* (the head). Assigning into it
  before or at an already-sampled assistant turn forks: history is kept, a new branch is made and a parallel
  edge records why. Assigning after the last sampled turn (nobody saw it yet) just replaces, as the seed says.
- Only nodes with origin ``sampled`` are ever trained: an assistant message appended to the graph is a policy
  sample unless marked otherwise; assistant messages re-created on a new branch are ``carried``; assistant text
  written by hand (an edit) is ``edited``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cached_property
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from pathlib import Path
from typing import IO, Any, overload

from msgtrain.errors import ValidationError
from msgtrain.model.message import (
    DEFAULT_POLICY,
    AnyMessage,
    Generation,
    OptionCallMessage,
    OptionResultMessage,
    PartsMessage,
    parse_message,
)
from msgtrain.model.openai import arguments_text, from_openai_message, result_text, to_openai_message

GRAPH_LOG_FORMAT = "msgtrain.graph"
GRAPH_LOG_VERSION = 1
# Graph metadata naming the group of rollouts the graph is one of (n samples of one context a log keeps as a list,
# each with its own reward): its turns share their ``group_id`` with the other rollouts' first turns of that context.
ROLLOUT_GROUP = "rollout_group"
# Message metadata of a reply a rollout holds as the history its group was started from: a copy of a reply sampled
# before the group (where it is a turn of its own), kept as context and not a turn of this rollout.
HISTORY_COPY = "history_copy"


class Origin(StrEnum):
    """How a node came to be in its context. Only ``SAMPLED`` assistant nodes are trained."""

    SAMPLED = "sampled"  # the policy generated it in exactly this context
    CONTEXT = "context"  # system / user / tool input
    CARRIED = "carried"  # an assistant message re-created on a new branch (it was sampled elsewhere, if at all)
    EDITED = "edited"  # assistant text written or changed by hand
    INJECTED = "injected"  # inserted by the framework or another model (e.g. a compaction summary, a demo turn)
    PREFILL = "prefill"  # a forced assistant prefix


class EdgeKind(StrEnum):
    EDIT = "edit"
    COMPACTION = "compaction"
    DELETE = "delete"
    ENV_CHANGE = "env_change"
    REWIND = "rewind"


def _hash(*chunks: str) -> str:
    h = hashlib.blake2b(digest_size=12)
    for c in chunks:
        h.update(c.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def canonical(obj: Any) -> str:
    """``json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``, the same text
    (:func:`_compact`)"""
    return _compact(obj, sort_keys=True)


def _compact(obj: Any, *, sort_keys: bool) -> str:
    """``json.dumps(obj, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys)``, the same text and errors
    (a circular reference, a value JSON has no form for), from json's C encoder called directly: ``json.dumps`` builds a
    ``JSONEncoder`` and walks its Python layers on every call, which cost as much as encoding a small tool list (the
    environment of every graph read is hashed in both forms)."""
    if c_make_encoder is None:
        return json.dumps(obj, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)
    if isinstance(obj, str):
        return encode_basestring(obj)
    encode = c_make_encoder({}, _DEFAULT, encode_basestring, None, ":", ",", sort_keys, False, True)
    return "".join(encode(obj, 0))


_DEFAULT = json.JSONEncoder().default  # raises TypeError for a value JSON has no form for, as json.dumps does


def is_unicode(text: str) -> bool:
    """Whether ``text`` holds no lone UTF-16 surrogate (it encodes as UTF-8): ASCII text is known at once."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def record_json(record: dict[str, Any]) -> str:
    """One log line: the record's own fields in sorted order, its content (messages, tool schemas, kwargs) in the
    order it was given. Templates render tool schemas and arguments with ``tojson`` in their key order, so sorting
    them would make a reloaded graph render other tokens than the policy saw."""
    return json.dumps({k: record[k] for k in sorted(record)}, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Env:
    """What the policy was given besides messages: tool schemas and chat-template kwargs."""

    tools: tuple[Any, ...] = ()
    template_kwargs: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def make(cls, tools: Iterable[Any] | None = None, template_kwargs: dict[str, Any] | None = None) -> Env:
        return cls(tuple(tools or ()), tuple(sorted((template_kwargs or {}).items())))

    @property
    def id(self) -> str:
        return self._identity[0]

    @property
    def text_is_unicode(self) -> bool:
        """Whether every string of the tools and template kwargs (keys too) is valid Unicode: found while the id is
        hashed, from the same JSON text (the fault boundary rejects a graph holding a lone surrogate)."""
        return self._identity[1]

    @cached_property
    def _identity(self) -> tuple[str, bool]:
        # Cached: readers ask for the id once per message, and hashing a large tool list each time was measurable.
        data = {"kwargs": dict(self.template_kwargs), "tools": list(self.tools)}  # top level in sorted order
        sorted_form = canonical(data)
        given = _compact(data, sort_keys=False)
        # Version-1 ids hash the sorted form. Schemas whose keys are not in sorted order hash their given order
        # too, so two environments that differ only in key order (and so render differently) get distinct ids.
        env_id = _hash("env", sorted_form if given == sorted_form else sorted_form + "\n" + given)
        return env_id, is_unicode(given)

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.template_kwargs)


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    parent: str | None
    env_id: str
    message: AnyMessage
    origin: Origin
    depth: int

    @property
    def sampled(self) -> bool:
        return self.origin is Origin.SAMPLED

    @property
    def is_assistant(self) -> bool:
        return self.message.role == "assistant"


@dataclass(frozen=True)
class ParallelEdge:
    """A version edge: the nodes ``old`` (a contiguous run on the old branch) were replaced by ``new``.

    ``anchor`` is the parent both runs hang from (None at the root); ``new`` may be empty (a deletion).
    """

    kind: EdgeKind
    old: tuple[str, ...]
    new: tuple[str, ...]
    anchor: str | None = None


def node_id(parent: str | None, env_id: str, message: AnyMessage) -> str:
    return identity_hash(parent, env_id, message)[0]


def identity_hash(parent: str | None, env_id: str, message: AnyMessage) -> tuple[str, bool]:
    """(the node id of ``message`` under ``parent``, whether its canonical JSON is valid Unicode): the id hashes
    that text's UTF-8 bytes (a lone surrogate as ``surrogatepass`` writes it), so encoding it says at no extra cost
    whether the message's identity holds a lone surrogate."""
    text = message.canonical_json()
    try:
        data, valid = text.encode("utf-8"), True
    except UnicodeEncodeError:
        data, valid = text.encode("utf-8", "surrogatepass"), False
    h = hashlib.blake2b(digest_size=12)
    h.update((parent if parent is not None else f"env:{env_id}").encode("utf-8", "surrogatepass"))
    h.update(b"\x00")
    h.update(data)
    h.update(b"\x00")
    return h.hexdigest(), valid


def _coerce(message: AnyMessage | dict[str, Any], policy: str, call_names: dict[str, str] | None = None) -> AnyMessage:
    if isinstance(message, PartsMessage | OptionCallMessage | OptionResultMessage):
        return message
    if isinstance(message, dict):
        if "kind" in message:
            return parse_message(message)
        return from_openai_message(message, policy=policy, call_names=call_names)
    raise TypeError(f"expected a Message or an OpenAI-style dict, got {type(message).__name__}")


class MessageView(dict[str, Any]):
    """The OpenAI dict of one message of the current branch; item assignment edits the graph."""

    def __init__(self, graph: MessageGraph, index: int, data: dict[str, Any]):
        super().__init__(data)
        self._graph = graph
        self._index = index
        self._shown_name = data.get("name")

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self._commit()

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._commit()

    def _commit(self) -> None:
        # The dict shows what a provider sees; an item edit keeps what it does not show (step, policy, metadata).
        graph = self._graph
        old = graph.message(self._index)
        new = _coerce(dict(self), graph.policy, graph._call_names)
        if new.role == old.role:
            keep: dict[str, Any] = {"policy": old.policy, "step_num": old.step_num, "metadata": old.metadata}
            if self.get("name") == self._shown_name:
                keep["name"] = old.name
            new = new.model_copy(update=keep)
        graph[self._index] = new


@dataclass(frozen=True)
class Branch:
    """A root-to-leaf path."""

    nodes: tuple[Node, ...]

    @property
    def leaf(self) -> Node:
        return self.nodes[-1]

    @property
    def messages(self) -> list[AnyMessage]:
        return [n.message for n in self.nodes]

    def __len__(self) -> int:
        return len(self.nodes)


class MessageGraph:
    """A conversation as a DAG of immutable messages, used like a list of OpenAI message dicts."""

    graph_id: str
    policy: str
    metadata: dict[str, Any]
    nodes: dict[str, Node]
    children: dict[str | None, list[str]]
    edges: list[ParallelEdge]
    envs: dict[str, Env]
    generations: dict[str, Generation]
    head: list[str]
    env: Env
    # Whether every node id is ``node_id`` of its parent and content (nodes added through this class): then one id
    # stands for one path of messages anywhere, and work keyed by it may be shared between graphs. A graph loaded
    # with the ids its log holds (``graphlog``) says False.
    content_ids: bool
    # node id -> the message whose canonical JSON (hashed into that id when the node was added) is valid Unicode:
    # the fault boundary's text check (msgtrain.ingest.core.text_check) does not encode those texts a second time.
    # A node whose message is not the one recorded (loaded from a log, replaced) is checked in full.
    unicode_identities: dict[str, AnyMessage]
    _log: IO[str] | None
    _call_names: dict[str, str]

    def __init__(
        self,
        messages: Iterable[AnyMessage | dict[str, Any]] = (),
        *,
        tools: Iterable[Any] | None = None,
        template_kwargs: dict[str, Any] | None = None,
        graph_id: str | None = None,
        policy: str = DEFAULT_POLICY,
        metadata: dict[str, Any] | None = None,
        log: str | Path | None = None,
    ):
        self.graph_id = graph_id or uuid.uuid4().hex
        self.policy = policy
        self.metadata = dict(metadata or {})
        self.nodes = {}
        self.children = {}
        self.edges = []
        self.envs = {}
        self.generations = {}
        self.head = []
        self.content_ids = True
        self.unicode_identities = {}
        self.env = Env.make(tools, template_kwargs)
        self.envs[self.env.id] = self.env
        self._log = None
        self._last_logged: str | None = None
        self._call_names: dict[str, str] = {}
        if log is not None:
            self._log = open(log, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the graph
            self._write_header()
            self._write({"type": "env", "env_id": self.env.id, **_env_json(self.env)})
        for m in messages:
            self.append(m)

    # ----------------------------------------------------------------- building
    def _add(
        self,
        parent: str | None,
        message: AnyMessage,
        origin: Origin,
        env_id: str,
        generation: Generation | None = None,
    ) -> str:
        nid, valid = identity_hash(parent, env_id, message)
        if isinstance(message, OptionCallMessage):
            # Tool-result dicts often omit the tool name; resolve it from the call it answers.
            self._call_names.update({c.invocation_id: c.option_name for c in message.calls})
        existing = self.nodes.get(nid)
        if existing is None:
            depth = 0 if parent is None else self.nodes[parent].depth + 1
            node = Node(nid, parent, env_id, message, origin, depth)
            self.nodes[nid] = node
            if valid:
                self.unicode_identities[nid] = message
            self.children.setdefault(parent, []).append(nid)
            self._write_node(node)
        elif origin is Origin.SAMPLED and existing.origin is not Origin.SAMPLED:
            # Record-keeping upgrade: the same message in the same context was in fact sampled there.
            self.nodes[nid] = replace(existing, origin=Origin.SAMPLED)
            self._write_node(self.nodes[nid])
        gen = generation or message.generation
        if gen is not None and origin is Origin.SAMPLED and nid not in self.generations:
            self.generations[nid] = gen
            if self._log is not None:
                self._write({"type": "generation", "id": nid, "generation": gen.model_dump(mode="json")})
        return nid

    def add_node(
        self,
        parent: str | None,
        message: AnyMessage | dict[str, Any],
        *,
        origin: Origin | str | None = None,
        env: Env | None = None,
        generation: Generation | None = None,
    ) -> str:
        """Add a node under any parent (readers rebuilding a logged graph use this). Returns its id."""
        msg = _coerce(message, self.policy, self._call_names)
        if parent is not None and parent not in self.nodes:
            raise ValidationError(
                f"parent {parent} is not in the graph", where=f"graph {self.graph_id}", code="dangling_parent"
            )
        env = env or (self.envs[self.nodes[parent].env_id] if parent is not None else self.env)
        if env.id not in self.envs:
            self.envs[env.id] = env
            self._write({"type": "env", "env_id": env.id, **_env_json(env)})
        org = Origin(origin) if origin is not None else _default_origin(msg)
        return self._add(parent, msg, org, env.id, generation)

    def append(
        self,
        message: AnyMessage | dict[str, Any],
        *,
        origin: Origin | str | None = None,
        generation: Generation | None = None,
    ) -> str:
        """Append to the current branch. An assistant message is a policy sample unless ``origin`` says else."""
        parent = self.head[-1] if self.head else None
        env = self.envs[self.nodes[parent].env_id] if parent is not None else self.env
        nid = self.add_node(parent, message, origin=origin, env=env, generation=generation)
        self.head.append(nid)
        self._log_head_leaf()
        return nid

    def extend(self, messages: Iterable[AnyMessage | dict[str, Any]]) -> None:
        for m in messages:
            self.append(m)

    def record_edge(self, kind: EdgeKind | str, old: Sequence[str], new: Sequence[str], anchor: str | None) -> None:
        edge = ParallelEdge(EdgeKind(kind), tuple(old), tuple(new), anchor)
        self.edges.append(edge)
        self._write(
            {
                "type": "edge",
                "kind": edge.kind.value,
                "old": list(edge.old),
                "new": list(edge.new),
                "anchor": anchor,
            }
        )

    # ----------------------------------------------------------------- list interface
    def __len__(self) -> int:
        return len(self.head)

    @overload
    def __getitem__(self, index: int) -> MessageView: ...
    @overload
    def __getitem__(self, index: slice) -> list[MessageView]: ...
    def __getitem__(self, index: int | slice) -> MessageView | list[MessageView]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self.head)))]
        i = self._norm(index)
        return MessageView(self, i, to_openai_message(self.nodes[self.head[i]].message))

    def __iter__(self) -> Iterator[MessageView]:
        for i in range(len(self.head)):
            yield self[i]

    def message(self, index: int) -> AnyMessage:
        return self.nodes[self.head[self._norm(index)]].message

    def messages(self) -> list[AnyMessage]:
        return [self.nodes[n].message for n in self.head]

    def _norm(self, index: int) -> int:
        n = len(self.head)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"message index {index} out of range for a branch of {n} messages")
        return i

    def __setitem__(self, index: int | slice, value: Any) -> None:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self.head))
            if step != 1:
                raise ValueError("only contiguous slices can be replaced")
            stop = max(stop, start)
            new = [_coerce(v, self.policy, self._call_names) for v in value]
            kind = EdgeKind.COMPACTION if stop - start != len(new) or stop - start > 1 else EdgeKind.EDIT
            self._replace(start, stop, new, kind)
        else:
            i = self._norm(index)
            new_msg = _coerce(value, self.policy, self._call_names)
            if new_msg.canonical_json() == self.message(i).canonical_json():
                return  # the seed's no-op: assigning what is already there changes nothing
            self._replace(i, i + 1, [new_msg], EdgeKind.EDIT)

    def __delitem__(self, index: int | slice) -> None:
        if isinstance(index, slice):
            start, stop, _ = index.indices(len(self.head))
        else:
            start = self._norm(index)
            stop = start + 1
        self._replace(start, max(stop, start), [], EdgeKind.DELETE)

    def set_env(self, tools: Iterable[Any] | None = None, template_kwargs: dict[str, Any] | None = None) -> None:
        """Change the tools / template kwargs offered from now on. Seen history is kept: a new version."""
        env = Env.make(tools, template_kwargs)
        if env.id == self.current_env.id:
            return
        self.envs.setdefault(env.id, env)
        self._write({"type": "env", "env_id": env.id, **_env_json(env)})
        self.env = env
        self._replace(0, 0, [], EdgeKind.ENV_CHANGE, env=env)

    @property
    def current_env(self) -> Env:
        return self.envs[self.nodes[self.head[-1]].env_id] if self.head else self.env

    def _replace(
        self, start: int, stop: int, new: Sequence[AnyMessage], kind: EdgeKind, env: Env | None = None
    ) -> None:
        old = list(self.head)
        # History that was seen (a sampled turn) or recorded (named by a version edge) is never dropped.
        versioned = {n for e in self.edges for n in (*e.old, *e.new)}
        seen = any(self.nodes[n].sampled or n in versioned for n in old[start:])
        env = env or self.current_env
        prefix = old[:start] if kind is not EdgeKind.ENV_CHANGE else []
        parent = prefix[-1] if prefix else None
        new_ids: list[str] = []
        for m in new:
            origin = Origin.EDITED if m.role == "assistant" else Origin.CONTEXT
            parent = self._add(parent, m, origin, env.id)
            new_ids.append(parent)
        rest_ids: list[str] = []
        carried_from = old[stop:] if kind is not EdgeKind.ENV_CHANGE else old
        for nid in carried_from:
            node = self.nodes[nid]
            origin = Origin.CARRIED if node.origin is Origin.SAMPLED else node.origin
            parent = self._add(parent, node.message, origin, env.id)
            rest_ids.append(parent)
        new_head = prefix + new_ids + rest_ids
        if seen:
            if kind is EdgeKind.ENV_CHANGE:
                self.record_edge(kind, old, new_head, None)
            else:
                self.record_edge(kind, old[start:stop], new_ids, prefix[-1] if prefix else None)
        else:
            self.head = new_head
            self._retract(old)
        self.head = new_head
        self._log_head_leaf()

    def _log_head_leaf(self) -> None:
        """Keep the running log's last node record on the head's leaf: readers take the head from it."""
        if self._log is not None and self.head and self._last_logged != self.head[-1]:
            self._write_node(self.nodes[self.head[-1]])

    def _retract(self, old: list[str]) -> None:
        """Drop nodes of an unseen, replaced tail that no branch uses any more."""
        keep = set(self.head)
        dropped = []
        for nid in reversed(old):
            if nid in keep or self.children.get(nid):
                continue
            node = self.nodes.pop(nid)
            self.children[node.parent].remove(nid)
            self.generations.pop(nid, None)
            dropped.append(nid)
        if dropped:
            self._write({"type": "retract", "ids": dropped})

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessageGraph):
            return [m.canonical_json() for m in self.messages()] == [m.canonical_json() for m in other.messages()]
        if isinstance(other, list):
            return list(self) == [dict(o) for o in other]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable container semantics, like list

    # ----------------------------------------------------------------- structure
    def path(self, nid: str) -> list[Node]:
        """Root-to-node path (inclusive)."""
        out: list[Node] = []
        cur: str | None = nid
        while cur is not None:
            node = self.nodes[cur]
            out.append(node)
            cur = node.parent
        out.reverse()
        return out

    def leaves(self) -> list[str]:
        return [nid for nid in self.nodes if not self.children.get(nid)]

    def branches(self) -> list[Branch]:
        """Every root-to-leaf path, in creation order of their leaves."""
        return [Branch(tuple(self.path(leaf))) for leaf in self.leaves()]

    def sampled_nodes(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.sampled and n.is_assistant]

    def generation(self, nid: str) -> Generation | None:
        return self.generations.get(nid)

    def env_of(self, nid: str) -> Env:
        return self.envs[self.nodes[nid].env_id]

    def edge_into(self, nid: str) -> ParallelEdge | None:
        """The parallel edge whose new side created this node's branch point, if any (nearest ancestor)."""
        index = self._edge_index()
        for node in reversed(self.path(nid)):
            if node.id in index:
                return index[node.id]
        return None

    def _edge_index(self) -> dict[str, ParallelEdge]:
        idx: dict[str, ParallelEdge] = {}
        for e in self.edges:
            for n in e.new:
                idx.setdefault(n, e)
            if not e.new and e.old:
                # A deletion: the first node after the anchor on the new branch carries the edge.
                for child in self.children.get(e.anchor, []):
                    if child not in e.old:
                        idx.setdefault(child, e)
        return idx

    # ----------------------------------------------------------------- persistence
    def to_data(self) -> dict[str, Any]:
        """The whole graph as plain JSON data (what a sub-agent result nests)."""
        return {"records": list(self.records())}

    def records(self) -> Iterator[dict[str, Any]]:
        yield self._header()
        for env_id, env in self.envs.items():
            yield {"type": "env", "graph": self.graph_id, "env_id": env_id, **_env_json(env)}
        for node in self.nodes.values():
            yield self._node_record(node)
            gen = self.generations.get(node.id)
            if gen is not None:
                yield {
                    "type": "generation",
                    "graph": self.graph_id,
                    "id": node.id,
                    "generation": gen.model_dump(mode="json"),
                }
        for e in self.edges:
            yield {
                "type": "edge",
                "graph": self.graph_id,
                "kind": e.kind.value,
                "old": list(e.old),
                "new": list(e.new),
                "anchor": e.anchor,
            }
        yield {"type": "head", "graph": self.graph_id, "ids": list(self.head)}

    def save(self, path: str | Path, *, append: bool = False) -> None:
        """Write the graph as a native graph log (see docs/graph-log.md)."""
        with open(path, "a" if append else "w", encoding="utf-8") as f:
            for rec in self.records():
                f.write(record_json(rec) + "\n")

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _header(self) -> dict[str, Any]:
        return {
            "type": "graph",
            "format": GRAPH_LOG_FORMAT,
            "version": GRAPH_LOG_VERSION,
            "graph": self.graph_id,
            "policy": self.policy,
            "metadata": self.metadata,
        }

    def _node_record(self, node: Node) -> dict[str, Any]:
        return {
            "type": "node",
            "graph": self.graph_id,
            "id": node.id,
            "parent": node.parent,
            "env_id": node.env_id,
            "origin": node.origin.value,
            "message": compact_message_json(node.message),
        }

    def _write_header(self) -> None:
        if self._log is not None:
            self._log.write(record_json(self._header()) + "\n")

    def _write_node(self, node: Node) -> None:
        if self._log is not None:
            self._write(self._node_record(node))
            self._last_logged = node.id

    def _write(self, record: dict[str, Any]) -> None:
        if self._log is not None:
            record.setdefault("graph", self.graph_id)
            self._log.write(record_json(record) + "\n")
            self._log.flush()  # a crashed agent must leave a readable log

    # ----------------------------------------------------------------- display
    def __str__(self) -> str:
        return format_graph(self)


def compact_message_json(message: AnyMessage) -> dict[str, Any]:
    """Message JSON without empty optional fields (``kind`` tags are always kept: they discriminate)."""
    data = message.model_dump(mode="json")
    for key in ("metadata", "generation", "step_num", "name", "subgraph"):
        if data.get(key) in (None, {}):
            data.pop(key, None)
    return data


def _default_origin(message: AnyMessage) -> Origin:
    return Origin.SAMPLED if message.role == "assistant" else Origin.CONTEXT


def _env_json(env: Env) -> dict[str, Any]:
    return {"tools": list(env.tools), "template_kwargs": env.kwargs}


# --------------------------------------------------------------------- display
# The text tree ``str(graph)`` prints; :mod:`msgtrain.model.pretty` builds its rich view on these lines.
_LABEL = {"system": "System", "user": "Human", "assistant": "AI"}


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def message_line(message: AnyMessage, width: int = 100) -> str:
    if isinstance(message, OptionResultMessage):
        r = message.result
        tag = f"[Tool: {r.option_name} (call_id={r.invocation_id})]" + (" ERROR" if r.is_error else "")
        return f"{tag} {_short(result_text(r), width)}"
    label = f"[{_LABEL.get(message.role, message.role)}]"
    body = _short(message.text, width)
    if message.reasoning:
        body = f"<thinking {len(message.reasoning)} chars> " + body
    if isinstance(message, OptionCallMessage):
        calls = ", ".join(f"{c.option_name}({_short(arguments_text(c), 40)})" for c in message.calls)
        body = (body + " " if body else "") + f"-> {calls}"
    return f"{label} {body}".rstrip()


def node_line(g: MessageGraph, nid: str, width: int) -> str:
    node = g.nodes[nid]
    bits = []
    if node.message.role == "assistant":
        bits.append(node.origin.value)
    if node.message.step_num is not None:
        bits.append(f"step {node.message.step_num}")
    if node.message.policy not in ("policy", "user", "system", "runtime"):
        bits.append(f"policy={node.message.policy}")
    suffix = f"  ({', '.join(bits)})" if bits else ""
    return message_line(node.message, width) + suffix


def format_graph(g: MessageGraph, width: int = 100) -> str:
    lines = [f"MessageGraph {g.graph_id} ({len(g.nodes)} nodes, {len(g.leaves())} branches, {len(g.edges)} versions)"]
    edge_of = g._edge_index()

    def walk(nid: str, prefix: str, last: bool, depth_siblings: bool) -> None:
        connector = ("└─ " if last else "├─ ") if depth_siblings else ""
        mark = f"[{edge_of[nid].kind.value}] " if nid in edge_of else ""
        lines.append(prefix + connector + mark + node_line(g, nid, width))
        kids = g.children.get(nid, [])
        child_prefix = prefix + (("   " if last else "│  ") if depth_siblings else "")
        for i, k in enumerate(kids):
            walk(k, child_prefix, i == len(kids) - 1, len(kids) > 1)

    roots = g.children.get(None, [])
    for i, r in enumerate(roots):
        walk(r, "", i == len(roots) - 1, len(roots) > 1)
    return "\n".join(lines)
