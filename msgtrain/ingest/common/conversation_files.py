"""Shared plumbing for readers of conversation-list formats: file layouts, record accounting, linear graphs.

Conversation-list formats (OpenAI chat, ShareGPT, the seed frameworks...) all come in the same few layouts:

- one JSON document holding one conversation (a list of messages, or an object with a message-list key);
- one JSON document holding a list of conversations (each a list of messages or a record around one);
- JSONL with one conversation record per line, or one *message* per line (then the lines form one
  conversation).

Invariants:
- Every record of the file is accounted for exactly once: a conversation's ``records`` counts the lines or
  items it was built from; a record that is not a conversation, or cannot be converted, is one
  :class:`ReadReject`; an empty one is a :class:`ReadSkip` with a reason.
- JSONL is streamed line by line; a JSON document is loaded whole (it is bounded by its file), except an array
  larger than ``--max-record-mb``: its items are the records, streamed one at a time (``item i``), and a list of
  messages read so is one conversation as a message-per-line JSONL file is.
- A conversion error never stops the file: it becomes a reject located at ``file:line`` / ``file (item i)``.
  In a message-per-line JSONL conversation a rejected line leaves the later turns without their full context:
  those assistant turns are kept as ``carried`` context, never trained.
- Graph ids are deterministic: ``<file name>#<record>:<hash of the graph's leaf ids>``. Node ids are content
  hashes of the whole path, so the suffix distinguishes same-named files with different content.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic

from msgtrain.errors import MsgtrainError, ParseError, ValidationError
from msgtrain.ingest.common.message_like import assistant_turns_in
from msgtrain.ingest.core import base
from msgtrain.ingest.core.base import (
    LongLine,
    ReadEvent,
    ReadGraph,
    ReadReject,
    ReadSkip,
    RecordTask,
    SourceRef,
    excerpt,
    first_two_lines,
    is_json_lines,
    iter_json_lines,
    load_json_document,
    too_deep_error,
)
from msgtrain.ingest.core.chunks import ChunkKey, active_chunk, whole_file
from msgtrain.ingest.core.json_stream import is_array_document, iter_array_items
from msgtrain.model.completeness import UNLOGGED_TOOLS, logged_call_facts, mark_calls_without_tools
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.message import (
    DEFAULT_POLICY,
    RUNTIME_POLICY,
    AnyMessage,
    Generation,
    OptionCallMessage,
    OptionResultMessage,
    OptionResultPayload,
    Part,
    PartsMessage,
    TextPart,
)


@dataclass
class RawRecord:
    """One record of a file: a JSONL line or the whole JSON document. ``value`` is the parse error if bad."""

    ref: SourceRef
    value: Any
    raw: bytes | None = None


def iter_raw_records(path: Path) -> Iterator[RawRecord]:
    """Records of a JSON or JSONL file.

    The layout is decided by :func:`msgtrain.ingest.core.base.is_json_lines`: if the first line is a complete JSON value
    and more follow, the file is JSONL and is streamed; corrupt first lines followed by complete JSON objects or
    arrays are still JSONL (each bad line is one reject). Otherwise the file is one JSON document. A single line
    that does not parse is one bad record (a truncated one-record JSONL), not an unreadable file.
    """
    chunk = active_chunk(path)
    if chunk is not None and chunk.items:
        # Whole items of an array read item by item (msgtrain.ingest.core.chunks), named as a whole read names them.
        for run in chunk.runs:
            for i, value, _ in iter_array_items(path, str(path), span=run):
                yield RawRecord(SourceRef(str(path), f"item {i}"), value)
        return
    if chunk is not None:
        # Any other chunk is only ever cut from a file already found to be JSONL (see msgtrain.ingest.core.chunks).
        for lineno, raw, obj in iter_json_lines(path):
            yield RawRecord(SourceRef(str(path), f"line {lineno}"), obj, raw)
        return
    first, second = first_two_lines(path)
    if not first:
        return
    parsed = _parse(first)
    if second and is_json_lines(path):
        for lineno, raw, obj in iter_json_lines(path):
            yield RawRecord(SourceRef(str(path), f"line {lineno}"), obj, raw)
        return
    if parsed is _TOO_DEEP and not second:
        yield RawRecord(SourceRef(str(path), "line 1"), too_deep_error(f"{path}:1"), first)
        return
    if parsed is _UNPARSED and not second and not isinstance(first, LongLine) and not first.lstrip().startswith(b"["):
        # (a one-line document longer than a record is not held by the line reader, and an array is read item by
        # item: both are loaded as documents)
        err = ParseError("invalid or truncated JSON", where=f"{path}:1", code="bad_json")
        yield RawRecord(SourceRef(str(path), "line 1"), err, first)
        return
    if parsed is _UNPARSED and path.stat().st_size > base.MAX_RECORD_BYTES and is_array_document(path):
        # An array larger than a record (a dataset or an export saved as one document): its items are the records,
        # read one at a time (msgtrain.ingest.core.json_stream); the file is never held whole. (The same rule as
        # msgtrain.ingest.core.json_stream.read_item_by_item, by which such a file is cut into chunks of items.)
        for i, value, _ in iter_array_items(path, str(path)):
            yield RawRecord(SourceRef(str(path), f"item {i}"), value)
        return
    document = parsed if parsed is not _UNPARSED else load_json_document(path)
    yield RawRecord(SourceRef(str(path), "file"), document)


_UNPARSED = object()
_TOO_DEEP = object()


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return _UNPARSED
    except RecursionError:
        return _TOO_DEEP


@dataclass
class Conversation:
    """One conversation found in a file, before format-specific conversion.

    ``messages`` are the format's raw message objects; ``container`` is the record around them (other fields
    such as ``tools``, ``reward``, ``system``), empty when the record was a bare list; ``key`` is the field
    the messages came from (``None`` for a bare list). ``incomplete_from`` is the index of the first message
    whose context lost a rejected line (message-per-line JSONL only).
    """

    ref: SourceRef
    records: int
    messages: list[Any]
    container: dict[str, Any]
    key: str | None
    source: Any = None
    raw: bytes | None = None
    incomplete_from: int | None = None
    # Message-per-line JSONL: where each message came from, so that one bad message costs its own line.
    refs: list[SourceRef] | None = None

    def excerpt(self) -> str:
        if self.raw is not None:
            return excerpt(self.raw)
        return excerpt(_short_json(self.source if self.source is not None else self.messages))


def _short_json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)[: 4 * 2048]
    except (TypeError, ValueError, RecursionError):
        return repr(value)[: 4 * 2048]


@dataclass
class ConversationLayout:
    """How a format marks conversations: the record keys holding the message list, and what a message is."""

    is_message: Callable[[Any], bool]
    message_keys: Sequence[str]

    def messages_of(self, record: dict[str, Any]) -> tuple[str, list[Any]] | None:
        for key in self.message_keys:
            value = record.get(key)
            if isinstance(value, list):
                return key, value
        return None


def iter_conversations(
    path: Path, layout: ConversationLayout, records: Iterable[RawRecord] | None = None
) -> Iterator[Conversation | ReadReject | ReadSkip]:
    """Split a file into conversations (see the module docstring for the layouts).

    ``records`` lets a reader that already started :func:`iter_raw_records` (to look at the first record) hand
    the same stream on instead of reading the file twice.
    """
    pending: list[Any] = []  # message-per-line JSONL: messages waiting to form one conversation
    pending_ref: SourceRef | None = None
    pending_refs: list[SourceRef] = []
    # Where a rejected line cut the message-per-line run: from that message on, the context is incomplete.
    gap: int | None = None
    gap_before_run = False
    for rec in records if records is not None else iter_raw_records(path):
        value = rec.value
        if not isinstance(value, MsgtrainError) and rec.ref.record == "file":
            yield from _document_conversations(path, value, layout)
            return
        if isinstance(value, dict) and layout.is_message(value):
            if not pending and gap_before_run:
                gap = 0
            pending_ref = pending_ref or rec.ref
            pending.append(value)
            pending_refs.append(rec.ref)
            continue
        found = None if isinstance(value, MsgtrainError) else _conversation_in(value, layout)
        if found is None:
            err = value if isinstance(value, MsgtrainError) else _not_a_conversation(rec.ref, layout)
            shown = rec.raw if rec.raw is not None or isinstance(value, MsgtrainError) else _short_json(value)
            yield ReadReject(rec.ref, err, excerpt(shown or b""), turns=assistant_turns_in(value))
            if pending:
                gap = len(pending) if gap is None else gap
            else:
                gap_before_run = True
            continue
        if pending and pending_ref is not None:
            yield Conversation(pending_ref, len(pending), pending, {}, None, incomplete_from=gap, refs=pending_refs)
            pending, pending_ref, pending_refs = [], None, []
        gap, gap_before_run = None, False
        key, messages, container = found
        if not messages:
            yield ReadSkip(rec.ref, "empty_conversation")
            continue
        yield Conversation(rec.ref, 1, messages, container, key, raw=rec.raw, source=value if rec.raw is None else None)
    if pending and pending_ref is not None:
        yield Conversation(pending_ref, len(pending), pending, {}, None, incomplete_from=gap, refs=pending_refs)


def _document_conversations(
    path: Path, value: Any, layout: ConversationLayout
) -> Iterator[Conversation | ReadReject | ReadSkip]:
    file_ref = SourceRef(str(path), "file")
    if isinstance(value, list):
        if not value:
            yield ReadSkip(file_ref, "empty_file")
            return
        # The first element decides: a list of messages is one conversation (a malformed message inside it is
        # that conversation's problem, not a record of its own); otherwise every element is a record.
        if layout.is_message(value[0]):
            yield Conversation(file_ref, 1, value, {}, None, source=value)
            return
        for i, item in enumerate(value):
            ref = SourceRef(str(path), f"item {i}")
            if isinstance(item, MsgtrainError):  # an item of a damaged document (msgtrain.ingest.core.tolerant_json)
                yield ReadReject(ref, item, "")
                continue
            found = _conversation_in(item, layout)
            if found is None:
                turns = assistant_turns_in(item)
                yield ReadReject(ref, _not_a_conversation(ref, layout), excerpt(_short_json(item)), turns=turns)
                continue
            key, messages, container = found
            if not messages:
                yield ReadSkip(ref, "empty_conversation")
                continue
            yield Conversation(ref, 1, messages, container, key, source=item)
        return
    found = _conversation_in(value, layout)
    if found is None and isinstance(value, dict) and layout.is_message(value):
        found = (None, [value], {})
    if found is None:
        turns = assistant_turns_in(value)
        yield ReadReject(file_ref, _not_a_conversation(file_ref, layout), excerpt(_short_json(value)), turns=turns)
        return
    key, messages, container = found
    if not messages:
        yield ReadSkip(file_ref, "empty_conversation")
        return
    yield Conversation(file_ref, 1, messages, container, key, source=value)


def _conversation_in(value: Any, layout: ConversationLayout) -> tuple[str | None, list[Any], dict[str, Any]] | None:
    if isinstance(value, list):
        if not value or layout.is_message(value[0]):
            return None, value, {}
        return None
    if isinstance(value, dict):
        hit = layout.messages_of(value)
        if hit is not None:
            key, messages = hit
            return key, messages, {k: v for k, v in value.items() if k != key}
    return None


def conversation_chunk_key(layout: ConversationLayout, value: Any) -> ChunkKey:
    """Splitting key of a conversation-file record: a whole conversation on one line stands alone; a message line
    (part of a message-per-line run) or a line that is not a conversation (it marks a gap in such a run) stays
    with the line before it, as :func:`iter_conversations` reads them together."""
    if isinstance(value, dict) and layout.is_message(value):
        return None
    if not isinstance(value, MsgtrainError) and _conversation_in(value, layout) is not None:
        return ()
    return None


def _not_a_conversation(ref: SourceRef, layout: ConversationLayout) -> ValidationError:
    keys = " or ".join(f'"{k}"' for k in layout.message_keys)
    return ValidationError(
        "record is not a conversation",
        where=str(ref),
        hint=f"expected a list of messages or an object with a {keys} list",
        code="not_a_conversation",
    )


# --------------------------------------------------------------------------- building graphs


@dataclass
class Step:
    """One message of a linear conversation with how it came to be there.

    ``origin`` None means the graph's default (assistant = sampled, everything else = context). ``index`` is
    the message's position in the source list, used to locate errors.
    """

    message: AnyMessage
    origin: Origin | None = None
    generation: Generation | None = None
    index: int | None = None


def check_pairing(steps: Sequence[Step]) -> None:
    """Refuse a tool result that answers no earlier call (dangling *calls* are fine: they are kept)."""
    seen: set[str] = set()
    for pos, step in enumerate(steps):
        msg = step.message
        if isinstance(msg, OptionCallMessage):
            seen.update(c.invocation_id for c in msg.calls)
        elif isinstance(msg, OptionResultMessage) and msg.result.invocation_id not in seen:
            where = f"message[{step.index if step.index is not None else pos}]"
            raise ValidationError(
                f"tool result answers no call (id {msg.result.invocation_id!r})",
                where=where,
                hint="every tool result must follow an assistant message that issued a call with the same id",
                code="unpaired_result",
            )


def user_turn(pieces: Sequence[Part | OptionResultMessage]) -> list[AnyMessage]:
    """A user turn logged as one block list holding tool results (Anthropic's ``tool_result``, Bedrock's
    ``toolResult``): each result its own message, the parts between them a user message, in the blocks' order (text
    written before a result stays before it). A turn with no block at all is one empty user message."""
    out: list[AnyMessage] = []
    parts: list[Part] = []
    for piece in pieces:
        if not isinstance(piece, OptionResultMessage):
            parts.append(piece)
            continue
        if parts:
            out.append(PartsMessage(parts=tuple(parts), role_hint_for_llm="user", policy="user"))
            parts = []
        out.append(piece)
    if parts or not out:
        out.append(PartsMessage(parts=tuple(parts), role_hint_for_llm="user", policy="user"))
    return out


def paired_result(
    call_names: dict[str, str], call_id: Any, value: Any, is_error: bool, *, block: str, where: str
) -> OptionResultMessage:
    """A tool result answering the earlier call ``call_id`` (its name from ``call_names``, the calls seen so far);
    ``unpaired_result`` when no earlier call has that id. ``block`` names the result as the log does
    (``content[2] tool_result``)."""
    name = call_names.get(str(call_id)) if call_id else None
    if not call_id or name is None:
        raise ValidationError(
            f"{block} answers no earlier tool call (id {call_id!r})",
            where=where,
            code="unpaired_result",
            hint="a tool result's id must match a tool call of an earlier assistant turn",
        )
    return OptionResultMessage(
        result=OptionResultPayload(invocation_id=str(call_id), option_name=name, result=value, is_error=is_error),
        policy=RUNTIME_POLICY,
        role_hint_for_llm="tool",
    )


# The reply a client writes itself into the history it seeds every chat with, after a context message of its own and
# before the user's first prompt: Gemini CLI (and Qwen Code, its fork, and their sub-agents) opens each chat with its
# environment context as a user content and this as the model's. Its saved histories (`/chat save` checkpoints, the
# client history of a tool checkpoint) hold the pair.
SEEDED_ACKNOWLEDGEMENTS = frozenset({"Got it. Thanks for the context!"})


def seeded_acknowledgement(steps: Sequence[Step]) -> int | None:
    """The index of the acknowledgement a client seeded the conversation with (:data:`SEEDED_ACKNOWLEDGEMENTS`,
    right after the first input, a user message, behind any system message), or None: context, never a turn."""
    i = 0
    while i < len(steps) and steps[i].message.role == "system":
        i += 1
    if i + 1 >= len(steps) or steps[i].message.role != "user" or steps[i + 1].message.role != "assistant":
        return None
    reply = steps[i + 1].message
    if isinstance(reply, OptionCallMessage) or not isinstance(reply, PartsMessage):
        return None
    texts = [p.text for p in reply.parts if isinstance(p, TextPart)]
    return i + 1 if len(texts) == len(reply.parts) and "".join(texts).strip() in SEEDED_ACKNOWLEDGEMENTS else None


def logged_reply(message: AnyMessage, raw: Any, wrapper: Any = None) -> tuple[AnyMessage, Generation | None]:
    """An assistant message with what its transcript logged beside it (:func:`logged_call_facts`): the usage in
    its metadata, where the linearizer compares it with the prompt it builds (``usage_mismatch``), and the model
    and the finish reason (:func:`logged_finish`, on the message or on the ``wrapper`` that held it: an OpenAI
    choice) in a :class:`Generation`, which tell whether the tokenizer is the model's own and whether the model
    sampled the end of its turn."""
    if message.role != "assistant":
        return message, None
    usage, model = logged_call_facts(raw)
    if usage is not None:
        message = message.model_copy(update={"metadata": {**message.metadata, "usage": usage}})
    finish = logged_finish(raw) or logged_finish(wrapper)
    engine = logged_engine_ids(raw)
    if model is None and finish is None and not engine:
        return message, None
    return message, Generation(model=model, finish_reason=finish, **engine)


# The engine's ids logged beside a reply, by the names logs write them under (ATIF's step metrics, vLLM's
# prompt_token_ids): Generation's field each fills.
_ENGINE_ID_KEYS = {"prompt_token_ids": "prompt_token_ids", "completion_token_ids": "token_ids", "logprobs": "logprobs"}


def logged_engine_ids(raw: Any) -> dict[str, tuple[Any, ...]]:
    """The token ids (prompt and completion) and the completion's logprobs an engine logged beside a reply (see
    :data:`_ENGINE_ID_KEYS`), as :class:`Generation` fields; the linearizer prefers them to a rendering, after
    checking them against the logged text (:mod:`msgtrain.linearize.engine_ids`). Ids that are not a list of
    integers, logprobs that are not numbers or not one per completion id, are an error naming the key, never read
    as something else. Empty for a reply logged without them."""
    if not isinstance(raw, dict):
        return {}
    out: dict[str, tuple[Any, ...]] = {}
    for key, name in _ENGINE_ID_KEYS.items():
        value = raw.get(key)
        if value is None or (name == "logprobs" and isinstance(value, dict)):
            continue  # a logprobs object (OpenAI's {"content": [...]}) is another shape, not read here
        number = float if name == "logprobs" else int
        if not isinstance(value, list) or not all(
            isinstance(v, number | int) and not isinstance(v, bool) for v in value
        ):
            raise ValidationError(
                f"{key} is not a list of {'numbers' if number is float else 'integer token ids'}",
                code="bad_engine_ids",
                hint=f"log {key} as a JSON array, or leave it out (the reply is then rendered from its text)",
            )
        out[name] = tuple(number(v) for v in value)
    logprobs, ids = out.get("logprobs"), out.get("token_ids")
    if logprobs is not None and (ids is None or len(ids) != len(logprobs)):
        raise ValidationError(
            f"logprobs holds {len(logprobs)} values for {len(ids) if ids is not None else 'no'} completion ids",
            code="bad_engine_ids",
            hint="logprobs are one per completion token id (completion_token_ids), in order",
        )
    return out


_FINISH_KEYS = ("finish_reason", "stop_reason", "finishReason", "stopReason", "done_reason")


def logged_finish(raw: Any) -> str | None:
    """Why the engine stopped a reply, as logged beside it (OpenAI's ``finish_reason``, Anthropic's ``stop_reason``,
    Gemini's ``finishReason``, Bedrock's ``stopReason``, Ollama's ``done_reason``; LangChain keeps them in
    ``response_metadata``), or None."""
    if not isinstance(raw, dict):
        return None
    meta = raw.get("response_metadata")
    for where in (raw, meta if isinstance(meta, dict) else {}):
        for key in _FINISH_KEYS:
            value = where.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def build_linear_graph(
    steps: Sequence[Step],
    *,
    base_id: str,
    tools: Sequence[Any] = (),
    metadata: dict[str, Any] | None = None,
    policy: str = DEFAULT_POLICY,
    template_kwargs: dict[str, Any] | None = None,
    incomplete_from: int | None = None,
) -> MessageGraph:
    """A one-branch graph from ``steps`` (pairing checked first), with a deterministic id (see module doc).

    Assistant turns at or after source index ``incomplete_from`` were sampled in a context the file no longer
    holds completely (a line of it was rejected), so they are kept as ``carried`` context, never trained.
    A conversation that calls tools without their schemas is marked ``context_incomplete`` (the files these readers
    take are transcripts, not the requests sent).
    """
    check_pairing(steps)
    graph = MessageGraph(
        graph_id=base_id, tools=tools, metadata=metadata, policy=policy, template_kwargs=template_kwargs
    )
    marked = []
    for step in steps:
        origin = step.origin
        after_gap = incomplete_from is not None and step.index is not None and step.index >= incomplete_from
        if after_gap and step.message.role == "assistant" and origin in (None, Origin.SAMPLED):
            origin = Origin.CARRIED
        marked.append(Step(step.message, origin, step.generation, step.index))
    append_steps(graph, marked)
    mark_calls_without_tools(graph, UNLOGGED_TOOLS)
    graph.graph_id = content_graph_id(base_id, graph)
    return graph


# How a reply's system prompt is chosen when a history interleaves several: the latest one before it. A guess where
# the log does not say which one each call was sent; graphs built by it say so in their metadata (system_messages).
LATEST_SYSTEM = (
    "latest system message before each reply (the log interleaves several; which one each call saw is inferred)"
)


def interleaved_systems(steps: Sequence[Step]) -> bool:
    """Several system messages, one of them after the conversation began (an agent that rebuilds its system prompt
    as its memory changes: Letta / MemGPT keep each version in the history)."""
    seen_other = later = False
    systems = 0
    for step in steps:
        if step.message.role == "system":
            systems += 1
            later = later or seen_other
        else:
            seen_other = True
    return systems > 1 and later


def append_steps(graph: MessageGraph, steps: Sequence[Step]) -> list[str]:
    """Append a conversation's steps to ``graph``, returning their node ids. A history that interleaves several
    system messages (:func:`interleaved_systems`) is read as the calls it stands for: each reply after the other
    messages before it and only the latest system message before it (:data:`LATEST_SYSTEM`), never after several
    system blocks no call was sent; the calls share their prefixes. The ids returned are then the last call's."""
    if not interleaved_systems(steps):
        return [graph.append(s.message, origin=s.origin, generation=s.generation) for s in steps]
    graph.metadata["system_messages"] = LATEST_SYSTEM
    system: Step | None = None
    before: list[Step] = []
    ids: list[str] = []
    for step in steps:
        if step.message.role == "system":
            system = step
            continue
        if step.message.role == "assistant":
            parent: str | None = None
            ids = []
            for s in [*([system] if system is not None else []), *before]:
                origin = s.origin or (Origin.CARRIED if s.message.role == "assistant" else Origin.CONTEXT)
                if s.message.role == "assistant" and s.origin in (None, Origin.SAMPLED):
                    origin = Origin.CARRIED  # sampled in its own call, added there; here it is history
                parent = graph.add_node(parent, s.message, origin=origin)
                ids.append(parent)
            parent = graph.add_node(parent, step.message, origin=step.origin, generation=step.generation)
            ids.append(parent)
        before.append(step)
    graph.head = list(ids)
    return ids


def kto_label(container: dict[str, Any]) -> bool | None:
    """A conversation's KTO desirability mark: a boolean ``label`` (TRL) or ``kto_tag`` (LLaMA-Factory), else None."""
    for key in ("label", "kto_tag"):
        if isinstance(container.get(key), bool):
            return bool(container[key])
    return None


def mark_last_reply(steps: Sequence[Step], label: bool | None) -> None:
    """A conversation-level label judges its last reply (LLaMA-Factory's ``kto_tag``, TRL's unpaired preference
    data): that assistant message carries ``label`` in its metadata, which the linearizer honours (a reply marked
    bad is not trained unless asked for; a trained one is flagged)."""
    if label is None:
        return
    for step in reversed(steps):
        if step.message.role == "assistant":
            step.message = step.message.model_copy(update={"metadata": {**step.message.metadata, "label": label}})
            return


def chain_records(first: RawRecord, rest: Iterator[RawRecord]) -> Iterator[RawRecord]:
    """Put a record taken off the front of a stream back in front of it."""
    yield first
    yield from rest


LAYOUT_VOTES = 32  # records (or a document's items) that vote on a file's layout


def vote_layout(path: Path, test: Callable[[Any], bool]) -> tuple[bool | None, Iterator[RawRecord]]:
    """(whether the file is in the layout ``test`` recognises, the records to read) for readers with two layouts
    (request/response call records, or conversations); ``None`` for a file without records.

    The layout is the majority of the file's first :data:`LAYOUT_VOTES` records that parse (ties go to ``test``'s
    layout), not its first record: one broken or foreign record — the first one included — is rejected on its own
    instead of making every other record unreadable. A one-document file's items vote (its record list). Reading a
    chunk (:mod:`msgtrain.ingest.core.chunks`), the vote is still the whole file's, so every chunk reads alike.

    Cost: a JSONL file's first records are parsed once more (one at a time, nothing held but the verdicts); a
    document is parsed once and handed back as the stream's record.
    """
    votes: list[bool] = []
    with whole_file(path):
        records = iter_raw_records(path)
        first = next(records, None)
        if first is None:
            return None, iter(())
        if first.ref.record == "file":  # one document: its items vote; the parsed document is not read twice
            items = first.value if isinstance(first.value, list) else [first.value]
            verdict = _majority([test(item) for item in items[:LAYOUT_VOTES]], test(first.value))
            chained = active_chunk(path) is None
            return verdict, (chain_records(first, records) if chained else iter_raw_records(path))
        for rec in chain_records(first, records):
            if not isinstance(rec.value, MsgtrainError):
                votes.append(test(rec.value))
                if len(votes) >= LAYOUT_VOTES:
                    break
    return _majority(votes, False), iter_raw_records(path)


def _majority(votes: list[bool], default: bool) -> bool:
    """At least half of ``votes`` (``default`` when nobody voted)."""
    return default if not votes else 2 * sum(votes) >= len(votes)


def iter_call_records(path: Path, records: Iterable[RawRecord]) -> Iterator[tuple[SourceRef, Any, bytes | str]]:
    """(ref, value, raw text for excerpts) per call record: JSONL lines, or a JSON array's items."""
    for rec in records:
        if rec.ref.record == "file" and isinstance(rec.value, list):
            for i, item in enumerate(rec.value):
                yield SourceRef(str(path), f"item {i}"), item, _short_json(item)
        else:
            yield rec.ref, rec.value, rec.raw if rec.raw is not None else _short_json(rec.value)


def content_graph_id(base_id: str, graph: MessageGraph) -> str:
    digest = hashlib.blake2b(digest_size=4)
    for leaf in sorted(graph.leaves()):
        digest.update(leaf.encode())
    return f"{base_id}:{digest.hexdigest()}"


def base_graph_id(path: Path, ref: SourceRef) -> str:
    record = ref.record
    if record == "file":
        return path.name
    return f"{path.name}#{record.split(' ', 1)[-1]}"


# --------------------------------------------------------------------------- the reader driver


@dataclass
class Converted:
    graph: MessageGraph
    extras: dict[str, Any] = field(default_factory=dict)


def read_conversation_file(
    path: Path,
    layout: ConversationLayout,
    convert: Callable[[Conversation], Converted],
    records: Iterable[RawRecord] | None = None,
) -> Iterator[ReadEvent | RecordTask]:
    """Split ``path`` into conversations; each is converted by a :class:`RecordTask`, so the fault boundary
    (:func:`msgtrain.ingest.core.base.read_events`) turns whatever a conversion raises into that record's reject."""
    for item in iter_conversations(path, layout, records):
        if not isinstance(item, Conversation):
            yield item
            continue
        yield RecordTask(item.ref, _conversion(item, convert), records=item.records, raw=_task_raw(item))


def _task_raw(conv: Conversation) -> Any:
    return conv.raw if conv.raw is not None else (conv.source if conv.source is not None else conv.messages)


def _conversion(conv: Conversation, convert: Callable[[Conversation], Converted]) -> Callable[[], list[ReadEvent]]:
    def parse() -> list[ReadEvent]:
        dropped: list[ReadEvent] = []
        current = conv
        while True:
            try:
                return [*dropped, *_convert_once(current, convert)]
            except _MessageRejected as bad:
                # One bad message of a message-per-line run costs its own line: it is rejected where it is, and
                # the rest converts with every later turn marked as sampled in a context that lost it.
                dropped.append(bad.reject)
                current = bad.rest

    return parse


class _MessageRejected(Exception):
    def __init__(self, reject: ReadReject, rest: Conversation) -> None:
        self.reject, self.rest = reject, rest


_MESSAGE_INDEX = re.compile(r"\[(\d+)\]")


def _without_message(conv: Conversation, e: MsgtrainError) -> _MessageRejected | None:
    """The bad message a conversion error names, split off the conversation (None when it names none).

    In a message-per-line run the message is its own line: that line is rejected. In a conversation that is one
    record, it is a gap (docs/formats.md, rule 3): the record is converted up to it, the replies after it kept as
    context only, and the gap is a line of the rejects that counts no record; a record with no reply before its first
    bad message is rejected whole, as it always was."""
    if len(conv.messages) < 2:
        return None
    found = _MESSAGE_INDEX.search(e.where or "")
    index = int(found.group(1)) if found else -1
    if not 0 <= index < len(conv.messages):
        return None
    if conv.refs is None:
        if not assistant_turns_in(conv.messages[:index]):
            return None
        note = "; the conversation is trained up to it, the replies after it kept as context only"
        error = type(e)(e.message + note, where=e.where, hint=e.hint, code=e.code).located(str(conv.ref))
        reject = ReadReject(conv.ref, error, _short_json(conv.messages[index]), count=0)
        reject.turns = assistant_turns_in([conv.messages[index]])
        gap = index if conv.incomplete_from is None else min(index, conv.incomplete_from)
        rest = dataclasses.replace(
            conv, messages=conv.messages[:index] + conv.messages[index + 1 :], incomplete_from=gap
        )
        return _MessageRejected(reject, rest)
    messages = conv.messages[:index] + conv.messages[index + 1 :]
    refs = conv.refs[:index] + conv.refs[index + 1 :]
    reject = ReadReject(
        conv.refs[index],
        e.located(str(conv.refs[index])),
        _short_json(conv.messages[index]),
        turns=assistant_turns_in([conv.messages[index]]),
    )
    gap = index if conv.incomplete_from is None else min(index, conv.incomplete_from)
    rest = dataclasses.replace(
        conv, ref=refs[0], records=len(messages), messages=messages, refs=refs, incomplete_from=gap
    )
    return _MessageRejected(reject, rest)


def _convert_once(conv: Conversation, convert: Callable[[Conversation], Converted]) -> list[ReadEvent]:
    try:
        converted = convert(conv)
    except MsgtrainError as e:
        split = _without_message(conv, e)
        if split is not None:
            raise split from e
        turns = assistant_turns_in(conv.messages)
        return [ReadReject(conv.ref, e.located(str(conv.ref)), conv.excerpt(), count=conv.records, turns=turns)]
    except pydantic.ValidationError as e:
        err = ValidationError(_pydantic_message(e), where=str(conv.ref), code="bad_message")
        turns = assistant_turns_in(conv.messages)
        return [ReadReject(conv.ref, err, conv.excerpt(), count=conv.records, turns=turns)]
    return [ReadGraph(converted.graph, conv.ref, records=conv.records, extras=converted.extras)]


def _pydantic_message(e: pydantic.ValidationError) -> str:
    errors = e.errors()
    if not errors:
        return f"invalid message: {e}"
    loc = ".".join(str(x) for x in errors[0]["loc"])
    return f"invalid message{f' at {loc}' if loc else ''}: {errors[0]['msg']}"


# --------------------------------------------------------------------------- small shared helpers


def as_text(value: Any) -> str:
    """A field that should be text: strings verbatim, anything else as compact JSON (never ``repr``)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def dict_field(record: dict[str, Any], key: str) -> dict[str, Any]:
    """``record[key]`` when it is an object, else an empty dict (optional nested objects in logs)."""
    value = record.get(key)
    return value if isinstance(value, dict) else {}
