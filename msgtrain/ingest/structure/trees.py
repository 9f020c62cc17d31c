"""Message trees: nested ``children`` arrays, ``parent``-linked messages, and files of one message per line.

Every branch from a root is a sample; siblings are versions sampled in one context (a regenerated reply, an edited
prompt, a UI's swipes).

Invariants:
- A tree is one record of the books, whatever its number of roots (one graph per root, the first counting it).
- A message whose parent is not in the conversation is rejected (``orphan_message``) with the branch below it: their
  context is unknown. The books count every reply of that branch; the branches rooted in the conversation are read
  as usual (a conversation with no such root is the reject).
- Links that only pair each reply with its prompt (several roots, no message but replies naming a parent) say
  nothing of the conversation's order: the record is refused (``ambiguous_structure``), never read as separate
  one-prompt conversations that drop the history each reply was sent.
- A message that cannot be read is a gap on its branch (the tree's root excepted: nothing before it, the tree's
  reject): the messages above it and the branches beside it are read as usual, the replies below it kept as context
  the log does not hold, never trained, and the books say so.
- Tool-call pairing is carried down each branch separately (a forked normaliser per child).
- In a log that marks the replies its UI generated, an unmarked assistant message is context (scripted), not a turn;
  a message the UI hides from the model is left out; a writer's own marker lines are skipped, never read as messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.conversation_files import base_graph_id, content_graph_id
from msgtrain.ingest.common.message_like import (
    canonical_role,
    is_message_like,
    is_message_list,
    message_like_count,
    role_of,
)
from msgtrain.ingest.common.shapes import MessageNormaliser
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.core.base import (
    ReadEvent,
    ReadGraph,
    ReadItem,
    ReadReject,
    ReadSkip,
    RecordTask,
    SourceRef,
    excerpt,
)
from msgtrain.ingest.structure.context import inherited_tools, mark_ui_export, under_system
from msgtrain.ingest.structure.found import Found, Lines, assistant_like, link_keys, versions_tree
from msgtrain.ingest.structure.mapping import Mapping
from msgtrain.ingest.structure.steps import (
    Gap,
    StepBuilder,
    check_speakers,
    forked,
    gap_reject,
    hang_below_gap,
    need_list,
    row_extras,
    scripted_opening,
    scripted_openings,
)
from msgtrain.model.completeness import UNLOGGED_TOOLS, mark_calls_without_tools
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.message import PartsMessage, ReasoningPart, TextPart

# A parent id that names no message: the root's (LibreChat writes the nil UUID).
_NO_PARENT = frozenset({"00000000-0000-0000-0000-000000000000", "root", ""})


def tree_events(path: Path, ref: SourceRef, found: Found) -> list[ReadEvent]:
    """Nested messages (``children`` of each message, at any depth) as a message tree: each root a graph, each path
    from it a branch, siblings sampled from the same context (a regenerated reply, an edited prompt)."""
    m = found.mapping
    if "parent" in m.columns:
        return _linked_tree_events(path, ref, found)
    key = m.columns["children"]
    roots = m.field_of(found.holder, "messages")
    if isinstance(roots, dict) and is_message_like(roots):  # the tree's one root message (OpenAssistant's prompt)
        roots = [roots]
    versioned = versions_tree(roots, key)
    if versioned is not None:  # each message's versions (LM Studio): siblings, the one shown continued below
        roots = versioned
    need_list(roots, f"{found.path}.{m.columns['messages']}")
    children: dict[str | None, Lines] = {}
    stack: list[tuple[Any, str | None, str]] = [
        (node, None, f"{found.path}[{i}]") for i, node in reversed(list(enumerate(roots)))
    ]
    count = 0
    while stack:
        node, parent, where = stack.pop()
        if not isinstance(node, dict):
            raise ValidationError(f"{where} is not a message", code="bad_message")
        node_id = str(count)
        count += 1
        flat = {k: v for k, v in node.items() if k != key} | {"_tree_id": node_id}
        children.setdefault(parent, []).append((SourceRef(ref.file, f"{ref.record} {where}"), flat))
        kids = node.get(key)
        if isinstance(kids, list):
            stack.extend((kid, node_id, f"{where}.{key}[{j}]") for j, kid in reversed(list(enumerate(kids))))
    return _tree_roots(path, ref, found, children, "_tree_id")


def _tree_roots(
    path: Path, ref: SourceRef, found: Found, children: dict[str | None, Lines], id_key: str
) -> list[ReadEvent]:
    """One graph per root of a message tree, with the system prompt and tools of the record around it."""
    m = found.mapping
    system = m.field_of(found.holder, "system")
    if system is None and "system" in found.inherited:
        system = found.inherited["system"][1]
    logged = m.field_of(found.holder, "tools")
    if logged is None and "tools" in found.inherited:
        logged = inherited_tools(found)[1]
    tools = openai_tools(logged, where=f"{found.path}.tools") if logged else []
    out: list[ReadEvent] = []
    for n, (root_ref, root) in enumerate(children.get(None, [])):
        event, *gaps = _tree_graph(path, root_ref if n else ref, root, children, id_key, m, tools)
        assert isinstance(event, ReadGraph)
        event.records = 1 if n == 0 else 0  # the tree is one record of the books
        if isinstance(system, str) and system.strip():
            event.graph = under_system(event.graph, system)
        scripted_openings(event.graph)
        mark_ui_export(event.graph, (v for lines in children.values() for _, v in lines))
        event.extras = row_extras(found.holder, m)
        out.append(event)
        out.extend(gaps)
    return out


def _linked_tree_events(path: Path, ref: SourceRef, found: Found) -> list[ReadEvent]:
    """Messages that name their parent (``parentMessageId``) as a message tree (see :func:`tree_events`)."""
    m = found.mapping
    id_key, parent_key = m.columns["id"], m.columns["parent"]
    messages = m.field_of(found.holder, "messages")
    if isinstance(messages, dict):  # keyed by id: the ids are in the messages too
        messages = list(messages.values())
    need_list(messages, f"{found.path}.{m.columns['messages']}")
    known = {str(v.get(id_key)) for v in messages if isinstance(v, dict)}
    children: dict[str | None, Lines] = {}
    orphans: list[tuple[str, str, ValidationError]] = []  # (where, the orphan's id, why)
    for i, value in enumerate(messages):
        where = f"{found.path}.{m.columns['messages']}[{i}]"
        if not isinstance(value, dict) or id_key not in value:
            raise ValidationError(f"{where} has no {id_key!r}", code="bad_message")
        parent = value.get(parent_key)
        parent = None if parent is None or str(parent) in _NO_PARENT else str(parent)
        if parent is not None and parent not in known:
            error = ValidationError(
                f"{where}: its parent {parent!r} is not in the conversation: the context it was written in is unknown",
                code="orphan_message",
            )
            orphans.append((where, str(value[id_key]), error))
            continue
        children.setdefault(parent, []).append((SourceRef(ref.file, f"{ref.record} {where}"), value))
    if not children.get(None):
        if orphans:
            raise orphans[0][2]
        return _tree_roots(path, ref, found, children, id_key)
    _check_links_order_the_thread(children, found.path)
    events = _tree_roots(path, ref, found, children, id_key)
    for where, orphan_id, error in orphans:  # each orphan's branch: its replies in the books, none trained
        below = _subtree(orphan_id, children, id_key)
        turns = sum(1 for _, v in below if assistant_like(v)) + int(assistant_like(_by_id(messages, id_key, orphan_id)))
        note = f"; its branch ({len(below) + 1} messages, {turns} replies) is not trained"
        located = ValidationError(error.message + note, where=f"{ref} {where}", code=error.code)
        events.append(ReadReject(ref, located, "", count=0, turns=turns))
    return events


def _by_id(messages: list[Any], id_key: str, node_id: str) -> Any:
    return next(v for v in messages if isinstance(v, dict) and str(v.get(id_key)) == node_id)


def _subtree(node_id: str, children: dict[str | None, Lines], id_key: str) -> Lines:
    """The messages below ``node_id`` (not itself), at any depth."""
    out: Lines = []
    stack = [node_id]
    while stack:
        kids = children.pop(stack.pop(), [])
        out.extend(kids)
        stack.extend(str(v[id_key]) for _, v in kids)
    return out


def _check_links_order_the_thread(children: dict[str | None, Lines], at: str) -> None:
    """Refuse links that only pair replies with their prompts (see the module docstring): several roots, and every
    message that names a parent a reply."""
    roots = children.get(None, [])
    linked = [v for parent, lines in children.items() if parent is not None for _, v in lines]
    if len(roots) > 1 and linked and all(assistant_like(v) for v in linked):
        raise ValidationError(
            f"{at}: {len(roots)} messages name no parent and only replies name one: the links pair each reply with its "
            "prompt, not the messages with the ones before them, so what each reply was sent is not in them",
            code="ambiguous_structure",
            hint="map the messages as one list in their order (--map, without id / parent columns)",
        )


def _writer_marker(value: Any) -> str | None:
    """The role of a line the log's writer keeps for itself among the messages, or None: a role outside the
    vocabulary that starts with ``_`` (Kimi CLI's ``_checkpoint`` and ``_usage`` lines), never sent to the model."""
    hit = role_of(value) if isinstance(value, dict) else None
    if hit is None or not isinstance(hit[1], str) or canonical_role(hit[1]) is not None:
        return None
    return hit[1] if hit[1].startswith("_") else None


def lone_message(value: Any) -> bool:
    """A record that is one message (message-per-line JSONL), not a record holding conversations."""
    return isinstance(value, dict) and is_message_like(value) and not any(is_message_list(v) for v in value.values())


def message_lines(path: Path, stream: Iterator[tuple[SourceRef, Any, Any]]) -> Iterator[ReadItem]:
    """Message-per-line JSONL: one conversation of all lines, or, when the lines carry parent ids, one graph per
    root of the tree they form (each path a branch, siblings sampled from the same context)."""
    lines: Lines = []
    cut: int | None = None  # lines read before the first line that could not be: the replies after it are context
    for ref, value, raw in stream:
        marker = _writer_marker(value)
        if isinstance(value, MsgtrainError):
            yield ReadReject(ref, value, excerpt(raw) if isinstance(raw, bytes) else "")
            cut = len(lines) if cut is None else cut
        elif marker is not None:
            yield ReadSkip(ref, f"writer_marker:{marker}")
        elif not lone_message(value):
            err = ValidationError("not a message, in a file of one message per line", code="ambiguous_structure")
            yield ReadReject(ref, err.located(str(ref)), excerpt(raw), turns=message_like_count(value)[1])
            cut = len(lines) if cut is None else cut
        else:
            lines.append((ref, value))
    if not lines:
        return
    keys = link_keys(lines)
    if keys is None:
        yield from session_runs(path, lines, cut)
        return
    known = {str(v[keys[0]]) for _, v in lines}
    children: dict[str | None, Lines] = {}
    orphans: Lines = []
    for ref, v in lines:
        parent = v.get(keys[1])
        parent_key = str(parent) if parent is not None else None
        if parent_key is not None and parent_key not in known:
            orphans.append((ref, v))
            continue
        children.setdefault(parent_key, []).append((ref, v))
    for ref, v in orphans:  # the orphan and the lines below it: records of the books, their replies lost
        below = _subtree(str(v[keys[0]]), children, keys[0])
        turns = sum(message_like_count(b)[1] for _, b in [(ref, v), *below])
        err = ValidationError(
            f"its parent {str(v[keys[1]])!r} is not in the file: the context it was written in is unknown"
            + (f"; the {len(below)} lines below it are not trained either" if below else ""),
            code="orphan_message",
        )
        yield ReadReject(ref, err.located(str(ref)), excerpt(v), count=1 + len(below), turns=turns)
    for root_ref, root in children.get(None, []):
        size = _subtree_size(str(root[keys[0]]), children, keys[0])
        yield RecordTask(
            root_ref, partial(_tree_graph, path, root_ref, root, children, keys[0]), records=size, raw=root
        )


def _subtree_size(node_id: str, children: dict[str | None, Lines], id_key: str) -> int:
    size, stack = 0, [node_id]
    while stack:
        size += 1
        stack.extend(str(v[id_key]) for _, v in children.get(stack.pop(), []))
    return size


# Keys a chat UI writes on the replies it generated (SillyTavern: ``gen_started``); in a log that writes them, an
# assistant message without one was not sampled (a character card's scripted greeting): context, never a turn.
GENERATION_MARKS = ("gen_started",)
# A message the UI keeps in the log but never sends to the model (SillyTavern's hidden ``is_system`` notes).
HIDDEN_FLAGS = ("is_system",)
# Alternative replies kept with the one shown (SillyTavern's ``swipes``): each was sampled in the same context.
SWIPE_KEYS = ("swipes",)


# Keys by which each line of a message-per-line log names the conversation it belongs to (a server logging all its
# sessions' messages to one file, interleaved as they came).
SESSION_KEYS = (
    "session_id",
    "sessionId",
    "conversation_id",
    "conversationId",
    "thread_id",
    "threadId",
    "chat_id",
    "chatId",
    "dialog_id",
)


def session_runs(path: Path, lines: Lines, cut: int | None) -> Iterator[RecordTask]:
    """Records that are each one message, one conversation per session their lines name (:data:`SESSION_KEYS`: every
    line names one, and not all the same one), in the order each first appears, each line's place in its session as
    in the file; else one conversation of them all (:func:`message_run`). ``cut`` (the lines read before the first
    one that could not be) holds in each session for the lines after it."""
    key = next((k for k in SESSION_KEYS if all(isinstance(v.get(k), str | int) for _, v in lines)), None)
    sessions: dict[Any, list[int]] = {}
    for i, (_, v) in enumerate(lines):
        sessions.setdefault(v[key] if key is not None else None, []).append(i)
    if key is None or len(sessions) < 2:
        yield message_run(path, lines, cut)
        return
    for indexes in sessions.values():
        after = next((j for j, i in enumerate(indexes) if cut is not None and i >= cut), None)
        yield message_run(path, [lines[i] for i in indexes], after)


def message_run(path: Path, lines: Lines, cut: int | None) -> RecordTask:
    """Records that are each one message, read as one conversation (:func:`_linear_lines`; ``cut``: the lines read
    before the first one that could not be)."""
    return RecordTask(lines[0][0], partial(_linear_lines, path, lines, cut), records=len(lines), raw=lines[0][1])


def _linear_lines(path: Path, lines: Lines, cut: int | None = None) -> list[ReadEvent]:
    """One message per line, one conversation: cut at a line that cannot be read (a gap, :class:`Gap`; a line that
    did not parse, before the ``cut``-th line read, too: the replies after it were sampled in a context the file no
    longer holds whole, so they are ``carried``, never trained); lines the UI hides from the model left out;
    alternative replies (swipes) added as siblings of the one shown; in a log that marks generated replies, an
    unmarked assistant message is context (scripted), not a turn."""
    after_cut = {id(v) for _, v in lines[cut:]} if cut is not None else set()
    shown = [(ref, v) for ref, v in lines if not any(v.get(k) is True for k in HIDDEN_FLAGS)]
    marked = any(any(k in v for k in GENERATION_MARKS) for _, v in shown)
    builder = StepBuilder(MessageNormaliser())
    gap = builder.add_until_gap([v for _, v in shown], "$", places=[f"{ref} $" for ref, _ in shown])
    check_speakers(builder.norm, "$")
    graph = MessageGraph(graph_id=base_graph_id(path, lines[0][0]), metadata={"source_format": "structural"})
    for step, (_, raw) in zip(scripted_opening(builder.steps), shown, strict=False):
        origin = step.origin
        if (
            marked
            and step.message.role == "assistant"
            and origin is None
            and not any(k in raw for k in GENERATION_MARKS)
        ):
            origin = Origin.INJECTED
        if id(raw) in after_cut and step.message.role == "assistant" and origin in (None, Origin.SAMPLED):
            origin = Origin.CARRIED
        parent = graph.head[-1] if graph.head else None
        node = graph.append(step.message, origin=origin)
        if origin is None and step.message.role == "assistant":
            _add_swipes(graph, parent, node, raw)
    mark_calls_without_tools(graph, UNLOGGED_TOOLS)
    mark_ui_export(graph, (v for _, v in shown))
    graph.graph_id = content_graph_id(graph.graph_id, graph)
    events: list[ReadEvent] = [ReadGraph(graph, lines[0][0], records=len(lines))]
    return events + ([gap_reject(lines[0][0], gap)] if gap is not None else [])


# Per-swipe details kept beside the swipes, in their order (SillyTavern's ``swipe_info``: each swipe's ``extra``).
SWIPE_INFO_KEYS = ("swipe_info",)


def _add_swipes(graph: MessageGraph, parent: str | None, shown: str, raw: dict[str, Any]) -> None:
    """The alternative replies a line keeps beside the one shown, each a sibling sampled in the same context, with
    the reasoning its own details keep (``swipe_info[i].extra.reasoning``)."""
    text = graph.nodes[shown].message
    current = "".join(p.text for p in getattr(text, "parts", ()) if isinstance(p, TextPart))
    info: list[Any] = next((raw[k] for k in SWIPE_INFO_KEYS if isinstance(raw.get(k), list)), [])
    for key in SWIPE_KEYS:
        swipes = raw.get(key)
        if not (isinstance(swipes, list) and all(isinstance(t, str) for t in swipes)):
            continue
        seen = {current}
        for i, alternative in enumerate(swipes):
            if alternative in seen or not alternative.strip():
                continue
            seen.add(alternative)
            details = info[i] if i < len(info) and isinstance(info[i], dict) else {}
            extra = details["extra"] if isinstance(details.get("extra"), dict) else {}
            thought = extra.get("reasoning")
            parts = ((ReasoningPart(text=thought),) if isinstance(thought, str) and thought else ()) + (
                TextPart(text=alternative),
            )
            graph.add_node(parent, PartsMessage(parts=parts, role_hint_for_llm="assistant"), origin=Origin.SAMPLED)


def _tree_graph(
    path: Path,
    root_ref: SourceRef,
    root: dict[str, Any],
    children: dict[str | None, Lines],
    id_key: str,
    mapping: Mapping | None = None,
    tools: Any = (),
) -> list[ReadEvent]:
    """One root's tree: each message added under its parent, tool pairing carried down each branch."""
    base = base_graph_id(path, root_ref)
    graph = MessageGraph(graph_id=base, metadata={"source_format": "structural", "layout": "tree"}, tools=tools)
    names: set[str] = set()
    m = mapping or Mapping()
    norm = MessageNormaliser(roles=m.roles or None, role_key=m.role_key, content_key=m.content_key)
    stack: list[tuple[SourceRef, dict[str, Any], str | None, MessageNormaliser, dict[str, str]]] = [
        (root_ref, root, None, norm, {})
    ]
    size = 0
    gaps: list[Gap] = []
    while stack:
        ref, value, parent, norm, call_names = stack.pop()
        size += 1
        builder = StepBuilder(norm, call_names=call_names)
        kids = children.get(str(value[id_key]), [])
        try:
            # what follows the message: its one child, nothing, or (several children) not one message
            builder.add(value, f"{ref} $", then=kids[0][1] if len(kids) == 1 else (None if kids else {}))
        except ValidationError as e:
            if parent is None:
                raise  # nothing before it: the tree's reject, as a conversation's first message is
            size += _cut_below(graph, parent, builder, e, ref, value, children, id_key, gaps)
            continue
        names |= norm.names
        node = parent
        for step in builder.steps:
            node = graph.add_node(node, step.message, origin=step.origin)
        for child_ref, child in reversed(kids):
            stack.append((child_ref, child, node, forked(norm), dict(builder.call_names)))
    check_speakers(MessageNormaliser(names=names), "$")
    mark_calls_without_tools(graph, UNLOGGED_TOOLS)
    graph.graph_id = content_graph_id(base, graph)
    return [ReadGraph(graph, root_ref, records=size), *(gap_reject(root_ref, gap) for gap in gaps)]


def _cut_below(
    graph: MessageGraph,
    parent: str,
    builder: StepBuilder,
    error: ValidationError,
    ref: SourceRef,
    value: dict[str, Any],
    children: dict[str | None, Lines],
    id_key: str,
    gaps: list[Gap],
) -> int:
    """A message of a tree that cannot be read is a gap on its branch (:class:`~.steps.Gap`): the branches beside
    it and the messages above it are read as usual; the replies below it are kept as context the log does not hold
    (:func:`~.steps.hang_below_gap`). Returns how many messages below it were passed over."""
    gap = Gap(f"{ref} $", error, message_like_count(value)[1] or int(assistant_like(value)))

    def below() -> Iterator[tuple[Any, str]]:
        stack = list(reversed(children.get(str(value[id_key]), [])))
        while stack:
            child_ref, child = stack.pop()
            yield child, f"{child_ref} $"
            stack.extend(reversed(children.get(str(child[id_key]), [])))

    gaps.append(gap)
    return hang_below_gap(graph, parent, gap, below(), builder)
