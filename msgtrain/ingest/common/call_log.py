"""One message graph from many recorded model calls (request = context, response = what was sampled in it).

Used by readers of request/response logs (VCR cassettes, Anthropic / Responses request-response JSONL).

Invariants:
- Every call is added under the same :class:`MessageGraph` with ``add_node``, so calls whose histories share a
  prefix share those nodes (node ids hash the parent chain and, at the root, the tool environment).
- A response is ``sampled`` in exactly its request's context; n > 1 choices are sibling samples of one
  context.
- An assistant message that appears only in a request's history is ``carried``: it is context, and it is
  trained only if some recorded response produced it in that very context (then its node is upgraded to
  ``sampled``).
- Adding a call costs what is new in it: context steps that are the very objects of the previous call's (a
  reader that reuses parsed history passes them again) map to the same nodes and are not added again.
- A call is checked before it touches the graph (a tool result must answer a call issued earlier on its path),
  so a rejected call leaves no partial nodes behind.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgtrain.ingest.common.conversation_files import Step, check_pairing, content_graph_id, dict_field
from msgtrain.ingest.core.base import ReadGraph, SourceRef
from msgtrain.model.graph import Env, MessageGraph, Origin
from msgtrain.model.message import AnyMessage


@dataclass
class Call:
    """One recorded model call: the full context it was sent, and the turn(s) sampled in it."""

    context: Sequence[Step]
    samples: Sequence[Step]
    env: Env = field(default_factory=Env)


class CallLogGraph:
    """Accumulates calls into one graph; :meth:`finish` fixes the deterministic graph id."""

    def __init__(self, base_id: str, metadata: dict[str, Any] | None = None, policy: str | None = None):
        self.base_id = base_id
        self.graph = MessageGraph(graph_id=base_id, metadata=metadata)
        if policy:
            self.graph.policy = policy
        self.calls = 0
        self.extras: dict[str, Any] = {}
        self._first_env: Env | None = None
        self._last: tuple[str, list[Step], list[str]] | None = None  # env id, context steps, their node ids

    def add(self, call: Call) -> list[str]:
        """Add one call; returns the node ids of its sampled responses, in order."""
        check_pairing(call.context)
        graph = self.graph
        env = call.env
        self._first_env = self._first_env or env
        ids = self._reusable_prefix(call)
        parent: str | None = ids[-1] if ids else None
        for step in call.context[len(ids) :]:
            origin = step.origin or (Origin.CARRIED if step.message.role == "assistant" else Origin.CONTEXT)
            parent = graph.add_node(parent, step.message, origin=origin, env=env, generation=step.generation)
            ids.append(parent)
        self._last = (env.id, list(call.context), ids)
        samples = [
            graph.add_node(
                parent,
                step.message,
                origin=step.origin or Origin.SAMPLED,
                env=env,
                generation=step.generation,
            )
            for step in call.samples
        ]
        last = samples[-1] if samples else parent
        graph.head = [n.id for n in graph.path(last)] if last is not None else []
        self.calls += 1
        return samples

    def _reusable_prefix(self, call: Call) -> list[str]:
        """Node ids of the leading context steps that are the very steps (same objects) of the previous call, in
        the same environment: adding them again would find the same nodes and change nothing."""
        if self._last is None or self._last[0] != call.env.id:
            return []
        _, steps, ids = self._last
        n = 0
        for new, old in zip(call.context, steps, strict=False):
            if new.message is not old.message or new.origin != old.origin or new.generation is not old.generation:
                break
            n += 1
        return ids[:n]

    def history(self, node_id: str) -> list[AnyMessage]:
        """The messages from the root to ``node_id`` (what a call continuing that node was given)."""
        return [node.message for node in self.graph.path(node_id)]

    def finish(self) -> MessageGraph:
        graph = self.graph
        if self._first_env is not None:
            graph.env = self._first_env
        unused = [eid for eid in graph.envs if eid != graph.env.id and not _env_used(graph, eid)]
        for eid in unused:
            del graph.envs[eid]
        graph.graph_id = content_graph_id(self.base_id, graph)
        return graph


def _env_used(graph: MessageGraph, env_id: str) -> bool:
    return any(node.env_id == env_id for node in graph.nodes.values())


class CallLogGroups:
    """Call logs holding many conversations: one :class:`CallLogGraph` per conversation.

    A call joins the conversation named by its record's session id when there is one; otherwise the
    conversation is keyed by its first two context messages (system prompt + first user turn), which every
    later call of the same conversation repeats.
    """

    def __init__(self, path: Path, metadata: dict[str, Any] | None = None):
        self.path = path
        self.metadata = metadata
        self.logs: dict[str, CallLogGraph] = {}
        self.first_ref: dict[str, SourceRef] = {}

    def add(
        self,
        call: Call,
        ref: SourceRef,
        session: str | None = None,
        *,
        policy: str | None = None,
        extras: dict[str, Any] | None = None,
    ) -> list[str]:
        """Add a call to its conversation. ``policy`` names the graph's policy when the conversation is new;
        ``extras`` (e.g. a reward logged with the call) are carried to the conversation's samples, later
        calls overriding earlier ones."""
        key = self._key(call, session)
        log = self.logs.get(key)
        if log is None:
            # Named by file and conversation key, not by line: records around it (even garbage) do not move it.
            conv = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
            base = f"{self.path.name}#{conv}"
            log = CallLogGraph(base, metadata={**(self.metadata or {}), "conversation_key": key}, policy=policy)
        added = log.add(call)  # raises before anything is registered when the call is invalid
        log.extras.update(extras or {})
        self.logs.setdefault(key, log)
        self.first_ref.setdefault(key, ref)
        return added

    def history(self, node_id: str) -> list[AnyMessage] | None:
        """The messages from a root to a recorded node (None if no conversation holds it)."""
        log = next((log for log in self.logs.values() if node_id in log.graph.nodes), None)
        return log.history(node_id) if log is not None else None

    def _key(self, call: Call, session: str | None) -> str:
        return conversation_key([step.message for step in list(call.context)[:2]], session)

    def events(self) -> Iterator[ReadGraph]:
        for key, log in self.logs.items():
            yield ReadGraph(log.finish(), self.first_ref[key], records=log.calls, extras=log.extras)


def conversation_key(first_messages: Sequence[AnyMessage], session: str | None) -> str:
    """The conversation a call belongs to: its session id, else its first two context messages. The splitter of
    huge files (``chunk_key``) uses this very function, so it never separates calls that the reader joins."""
    if session:
        return f"session:{session}"
    head = "\x00".join(m.canonical_json() for m in list(first_messages)[:2])
    return "prefix:" + hashlib.blake2b(head.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def session_of(record: dict[str, Any], request: dict[str, Any]) -> str | None:
    """A conversation id logged next to the call (never a user id: one user has many conversations)."""
    for source in (record, dict_field(request, "metadata")):
        for key in ("session_id", "conversation_id", "thread_id", "trajectory_id"):
            value = source.get(key)
            if isinstance(value, str | int) and str(value):
                return str(value)
    return None
