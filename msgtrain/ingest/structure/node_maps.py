"""Node maps: conversations stored as a map of node id → ``{message, parent, children}``, read as message trees.

Chat UIs keep every version of a conversation this way: an edited prompt or a regenerated reply is a sibling of the
node it replaced, and the path to ``current_node`` is what the UI shows. The ChatGPT data export
(``conversations.json``: a list of ``{title, mapping, current_node, ...}``) is the best-known case. The structural
reader (:mod:`msgtrain.ingest.structure.structural`) finds a node map anywhere in a record by its shape and reads it
here: each path from a root is a branch, siblings are versions sampled from the same context.

Typed content (``{"content_type": ..., ...}``, ChatGPT's message content) is read type by type; a type not listed
here is a message that cannot be read (never silently dropped):

- ``text``, ``multimodal_text`` (text, ``image_asset_pointer`` kept as an image reference, audio transcriptions
  as text), ``code``: the message's content. An assistant message addressed to a tool (``recipient`` other than
  ``all``: ``python``, ``web.run``, ...) is a call of that tool, its text the call's arguments (kept verbatim).
- ``execution_output``, ``tether_browsing_display``, ``tether_quote``, ``system_error`` and any content of a
  ``tool`` message: a tool result, answering the open call of the tool named by its author.
- ``thoughts`` (the UI's *summary* of the model's hidden reasoning, written by another model, not the tokens the
  model sampled), ``reasoning_recap`` ("Thought for 8s"), an empty hidden system message and a node without a
  message are UI records, not messages: passed through, counted in the rows' metadata (``node_map.passed``). A
  reply is trained as the text it shows; the reasoning the model sampled before it is not in the export;
- ``user_editable_context`` / ``model_editable_context`` (custom instructions, memory): what the hidden system
  prompt was built from, not the prompt itself: passed through and counted; the graph is marked
  ``context_incomplete`` for its system prompt, as every ChatGPT conversation is (the export never holds it).

A tool result the export holds empty (a ``web.run`` result: the pages the model read are kept only as citations in
the metadata) is not what the model read: the replies after it on its branch are kept as context (``carried``), in
the books as ``context_unknown``, never trained in a context the export does not hold; they are counted
(``node_map.withheld_results``).

An assistant message of ``weight`` 0 (OpenAI's mark for a reply not to train on) is context (``carried``). So is a
reply the user stopped before it ended (``metadata.finish_details.type`` ``interrupted``, or ``status``
``in_progress``): cut short, it is in the books as ``interrupted``, never a positive example.

A tool result answers the oldest open call of its tool on its branch. One that answers no call (a file-search
result the service added on upload) cannot be read (``unpaired_result``): a template cannot render a result without
its call, and how the service showed it to the model is not in the export.

Invariants:
- A node that cannot be read is a gap on its branch, as in every tree the structural reader reads
  (:mod:`~msgtrain.ingest.structure.trees`, :func:`~msgtrain.ingest.structure.steps.hang_below_gap`): the replies
  above it are trained, the branches beside it read as usual, the replies below it kept as context the export does
  not hold (``context_unknown`` in the books), never stitched to what came before it; the node is a reject naming it
  (its turns lost, no record of its own). Only the conversation's first message, with nothing before it, rejects
  the conversation, and so does a map whose structure is broken (an orphan node, a cycle).
- The conversation is one record of the books; every assistant node is trained, in the books as dropped with its
  reason, or lost with a reject.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.conversation_files import base_graph_id, content_graph_id
from msgtrain.ingest.common.message_like import canonical_role, is_message_like, role_of
from msgtrain.ingest.common.shapes import MessageNormaliser
from msgtrain.ingest.core.base import ReadEvent, ReadGraph, SourceRef
from msgtrain.ingest.structure.steps import Gap, StepBuilder, gap_reject, hang_below_gap
from msgtrain.model.completeness import UNLOGGED_TOOLS, mark_calls_without_tools, mark_context_incomplete
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.openai import check_reply_present, from_openai_message

# Content types that are a tool's output (read as its text) → the key holding the text.
_RESULT_TEXT = {
    "execution_output": "text",
    "tether_browsing_display": "result",
    "tether_quote": "text",
    "system_error": "text",
}
# Records of the UI, not messages the model wrote or read.
_PASSED = ("reasoning_recap", "thoughts")
# What the hidden system prompt was built from: the prompt itself is not in the export.
_PROMPT_SOURCES = ("user_editable_context", "model_editable_context")
_MEDIA_POINTERS = ("image_asset_pointer",)
_TRANSCRIPTS = ("audio_transcription",)
_INTERRUPTED_WHY = "the user stopped this reply before it ended"
_HINT = "export the conversation without it, or write a mapping (--map) for a plain message list"


def is_node_map(value: Any) -> bool:
    """Whether ``value`` is a node map: an object of node objects, each with ``parent`` and ``message`` (null, or
    message-like), at least one of which holds a message."""
    if not isinstance(value, dict) or not value:
        return False
    held = 0
    for node in value.values():
        if not isinstance(node, dict) or "parent" not in node or "message" not in node:
            return False
        message = node["message"]
        if message is not None:
            if not _is_node_message(message):
                return False
            held += 1
    return held > 0


def _is_node_message(message: Any) -> bool:
    return isinstance(message, dict) and (
        is_message_like(message)
        or (isinstance(message.get("author"), dict) and isinstance(message.get("content"), dict))
    )


def node_map_key(record: dict[str, Any]) -> str | None:
    """The key of the node map a record holds (``mapping`` in a ChatGPT export), if it holds one."""
    return next((k for k, v in record.items() if is_node_map(v)), None)


def assistant_nodes(nodes: dict[str, Any]) -> int:
    return sum(
        1
        for n in nodes.values()
        if isinstance(n, dict)
        and isinstance(n.get("message"), dict)
        and _role(n["message"]) == "assistant"
        and _content_type(n["message"]) not in _PASSED
    )


@dataclass
class _Branch:
    """What a branch carries down to each child: where it hangs, its open calls, whether a tool result on it was
    withheld (the replies after it were sampled in a context the export does not hold)."""

    parent: str | None = None
    norm: MessageNormaliser = field(default_factory=MessageNormaliser)
    call_names: dict[str, str] = field(default_factory=dict)
    withheld: bool = False

    def fork(self, parent: str | None) -> _Branch:
        norm = self.norm.fork()
        return _Branch(parent, norm, dict(self.call_names), self.withheld)


def node_map_graph(path: Path, ref: SourceRef, holder: dict[str, Any], key: str, at: str) -> list[ReadEvent]:
    """The graph of the node map ``holder[key]`` (found at JSON path ``at``), and a reject for each node that cannot
    be read below the first message (a gap on its branch: :mod:`~msgtrain.ingest.structure.steps`); raises
    :class:`ValidationError` naming the node when the map's structure, or its first message, cannot be read."""
    nodes: dict[str, Any] = holder[key]
    where = f"{at}.{key}"
    children: dict[str | None, list[str]] = {}
    for node_id, node in nodes.items():
        parent = node.get("parent")
        if parent is not None and str(parent) not in nodes:
            raise ValidationError(
                f"node {node_id!r}: its parent {parent!r} is not in the map: the context it was written in is unknown",
                where=where,
                code="orphan_message",
            )
        children.setdefault(str(parent) if parent is not None else None, []).append(str(node_id))
    for parent, kids in children.items():  # the UI's own order of versions where the node lists it
        listed = nodes[parent].get("children") if parent is not None else None
        if isinstance(listed, list):
            order = {str(c): i for i, c in enumerate(listed)}
            kids.sort(key=lambda c: order.get(c, len(order)))
    base = base_graph_id(path, ref) + ("" if at == "$" else f"@{at[2:]}")
    graph = MessageGraph(graph_id=base, metadata={"source_format": "structural", "layout": "node_map"})
    passed: dict[str, int] = {}
    withheld = 0
    stack: list[tuple[str, _Branch]] = [(root, _Branch()) for root in reversed(children.get(None, []))]
    gaps: list[Gap] = []
    seen = 0
    while stack:
        node_id, branch = stack.pop()
        seen += 1
        message = nodes[node_id].get("message")
        node_where = f"{where}.{node_id}.message"
        kind = _passed_kind(message)
        if kind is not None:
            passed[kind] = passed.get(kind, 0) + 1
        else:
            try:
                read = _node_messages(message, branch, node_where)
            except ValidationError as e:
                if branch.parent is None:
                    raise  # nothing before it: the conversation's reject, as a list's first message is
                gap = Gap(node_where, e, int(_role(message) == "assistant"))
                below = _below(nodes, children, node_id, where)
                seen += hang_below_gap(graph, branch.parent, gap, below, StepBuilder(MessageNormaliser()), _read_after)
                gaps.append(gap)
                continue
            for msg, origin, withheld_result in read:
                branch.parent = graph.add_node(branch.parent, msg, origin=origin)
                if withheld_result:
                    branch.withheld = True
                    withheld += 1
        stack.extend((child, branch.fork(branch.parent)) for child in reversed(children.get(node_id, [])))
    if seen < len(nodes):  # nodes whose parents form a cycle hang from no root: never dropped without a word
        raise ValidationError(
            f"{len(nodes) - seen} of {len(nodes)} nodes hang from no root (their parents form a cycle)",
            where=where,
            code="bad_structure",
        )
    mark_context_incomplete(graph, ["system_prompt"], "a chat UI export holds the conversation, not its system prompt")
    mark_calls_without_tools(graph, UNLOGGED_TOOLS)
    graph.graph_id = content_graph_id(base, graph)
    extras: dict[str, Any] = {
        k: holder[k] for k in ("title", "id", "conversation_id", "current_node") if isinstance(holder.get(k), str)
    }
    if passed or withheld:
        extras["node_map"] = {"passed": dict(sorted(passed.items()))}
        if withheld:
            extras["node_map"]["withheld_results"] = withheld
    return [ReadGraph(graph, ref, records=1, extras=extras), *(gap_reject(ref, gap) for gap in gaps)]


def _node_messages(message: dict[str, Any], branch: _Branch, where: str) -> list[tuple[Any, Origin | None, bool]]:
    """One node's message as graph messages (message, origin, whether it is a tool result the export withheld),
    read whole before any is added, so a node that cannot be read adds nothing (it is a gap on its branch)."""
    # weight 0 marks a reply not to train on, as in OpenAI's fine-tuning files: kept as context.
    unweighted = message.get("weight") == 0
    cut_short = _interrupted(message)
    out: list[tuple[Any, Origin | None, bool]] = []
    call_names = dict(branch.call_names)
    for data in _messages(message, branch, where):
        data.pop("weight", None)
        if data["role"] == "assistant":
            check_reply_present(data, where)
        msg = from_openai_message(data, call_names=call_names)
        call_names.update({c.invocation_id: c.option_name for c in getattr(msg, "calls", ())})
        # After a result the export withheld, a reply's context is not the one the model saw.
        origin = Origin.CARRIED if (branch.withheld or unweighted) and msg.role == "assistant" else None
        if cut_short and msg.role == "assistant":
            metadata = {**msg.metadata, "interrupted": True, "why_not_trained": _INTERRUPTED_WHY}
            msg, origin = msg.model_copy(update={"metadata": metadata}), Origin.CARRIED
        out.append((msg, origin, data["role"] == "tool" and not str(data.get("content") or "").strip()))
    branch.call_names = call_names
    return out


def _below(
    nodes: dict[str, Any], children: dict[str | None, list[str]], node_id: str, where: str
) -> Iterator[tuple[Any, str]]:
    """The messages of the subtree under ``node_id`` (itself excepted), each with its JSON path."""
    stack = list(reversed(children.get(node_id, [])))
    while stack:
        below = stack.pop()
        yield nodes[below].get("message"), f"{where}.{below}.message"
        stack.extend(reversed(children.get(below, [])))


def _read_after(message: Any, where: str) -> list[dict[str, Any]]:
    """A message below a gap read as chat dicts (a UI record, not a message, is none)."""
    return [] if _passed_kind(message) is not None else list(_messages(message, _Branch(), where))


def _interrupted(message: dict[str, Any]) -> bool:
    """Whether the user stopped this reply before it ended (the UI keeps what was written so far)."""
    details = (message.get("metadata") or {}).get("finish_details")
    return message.get("status") == "in_progress" or (
        isinstance(details, dict) and details.get("type") == "interrupted"
    )


def _passed_kind(message: Any) -> str | None:
    """Why a node is passed through (not a message), or None for a message."""
    if message is None:
        return "no_message"
    kind = _content_type(message)
    if kind in _PASSED or kind in _PROMPT_SOURCES:
        return kind
    if _role(message) == "system" and not _plain_text(message).strip():
        return "empty_system_message"
    return None


def _messages(message: dict[str, Any], branch: _Branch, where: str) -> Iterator[dict[str, Any]]:
    """One node's message as OpenAI chat dicts (through the shared normaliser: call pairing, roles)."""
    content = message.get("content")
    if not isinstance(content, dict) or "content_type" not in content:
        yield from branch.norm.normalise(message, where)  # an untyped message-like object
        return
    role = _role(message)
    kind = content["content_type"]
    recipient = message.get("recipient")
    if role == "tool" or kind in _RESULT_TEXT:
        name = (message.get("author") or {}).get("name")
        text = _result_text(content, kind, where)
        yield from branch.norm.normalise({"role": "tool", "name": name, "content": text}, where)
        return
    if role == "assistant" and isinstance(recipient, str) and recipient not in ("all", ""):
        call: dict[str, Any] = {"name": recipient, "arguments": _plain_text(message)}
        if isinstance(message.get("id"), str):  # the node's own id names the call (the export gives calls none)
            call["id"] = message["id"]
        data = {"role": "assistant", "content": None, "tool_calls": [call]}
    else:
        data = {"role": role, "content": _parts(content, kind, where)}
    yield from branch.norm.normalise(data, where)


def _role(message: Any) -> Any:
    author = message.get("author") if isinstance(message, dict) else None
    if isinstance(author, dict):
        return author.get("role")
    hit = role_of(message)  # a role key, or the side a message's typed fragments name (DeepSeek's export)
    return (canonical_role(hit[1]) or hit[1]) if hit is not None else None


def _content_type(message: Any) -> Any:
    content = message.get("content") if isinstance(message, dict) else None
    return content.get("content_type") if isinstance(content, dict) else None


def _plain_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if not isinstance(content, dict):
        return content if isinstance(content, str) else ""
    if isinstance(content.get("text"), str):
        return content["text"]
    return "".join(p for p in content.get("parts") or [] if isinstance(p, str))


def _parts(content: dict[str, Any], kind: str, where: str) -> Any:
    if kind == "code":
        return str(content.get("text", ""))
    if kind not in ("text", "multimodal_text"):
        raise ValidationError(
            f"content_type {kind!r} is not one msgtrain reads", where=where, code="unsupported_content", hint=_HINT
        )
    out: list[dict[str, Any]] = []
    for j, part in enumerate(content.get("parts") or []):
        if isinstance(part, str):
            out.append({"type": "text", "text": part})
            continue
        part_kind = part.get("content_type") if isinstance(part, dict) else None
        if part_kind in _MEDIA_POINTERS and isinstance(part.get("asset_pointer"), str):
            out.append({"type": "image_url", "image_url": {"url": part["asset_pointer"]}})
        elif part_kind in _TRANSCRIPTS and isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"]})
        else:
            raise ValidationError(
                f"parts[{j}] is a {part_kind or type(part).__name__!s} part msgtrain does not read",
                where=where,
                code="unsupported_content",
                hint=_HINT,
            )
    if len(out) == 1 and out[0]["type"] == "text":
        return out[0]["text"]
    return out


def _result_text(content: dict[str, Any], kind: str, where: str) -> str:
    key = _RESULT_TEXT.get(kind)
    if key is not None:
        value = content.get(key)
        return value if isinstance(value, str) else ""
    parts = content.get("parts")
    if kind in ("text", "code") or (kind == "multimodal_text" and all(isinstance(p, str) for p in parts or [])):
        return str(content["text"]) if isinstance(content.get("text"), str) else "".join(parts or [])
    raise ValidationError(
        f"a tool result of content_type {kind!r} (an image or file the tool made) is not text msgtrain can put in "
        "a context",
        where=where,
        code="unsupported_content",
        hint=_HINT,
    )
