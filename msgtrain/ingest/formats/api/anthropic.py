"""Anthropic Messages API conversations: plain message lists and request/response pairs.

Reads:
- plain lists: a JSON array of ``{"role", "content"}`` messages, or request bodies ``{"system", "messages",
  "tools", ...}`` (one per JSONL line, a JSON array of them, or one document). Conversation-list rule: every
  assistant message is sampled in the context before it.
- request/response pairs: records ``{"request": <Messages request body>, "response": <Message>}``. All pairs
  of a file form one graph (:mod:`msgtrain.ingest.common.call_log`): the response is sampled in its request's
  context, history assistant turns that no recorded response produced are carried context. A streamed call may
  log its response as the list of stream events (``message_start`` … ``message_stop``); it is reassembled as the
  Anthropic SDK accumulates it (:mod:`msgtrain.ingest.common.streams`).

Content blocks: ``text`` → text; ``image`` / ``document`` (``base64`` → ``data:`` URI, ``url``, ``file`` id,
plain ``text`` source → ``data:text/plain`` URI) → media references; ``thinking`` → reasoning with its
signature; ``redacted_thinking`` → redacted reasoning (payload in the signature); ``tool_use`` → a call;
``tool_result`` (``is_error``) → a result paired by ``tool_use_id``; ``compaction`` (a server-side summary) →
text, and a response that contains one is *injected* (another model wrote it), not the policy's sample. Other
block types (server tools, search results...) reject the record with ``unsupported_block`` rather than being
dropped silently.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.call_log import Call, CallLogGroups, call_chunk_keys, conversation_key, session_of
from msgtrain.ingest.common.conversation_files import (
    Conversation,
    ConversationLayout,
    Converted,
    RawRecord,
    Step,
    as_text,
    base_graph_id,
    build_linear_graph,
    conversation_chunk_key,
    iter_call_records,
    logged_reply,
    paired_result,
    read_conversation_file,
    user_turn,
    vote_layout,
)
from msgtrain.ingest.common.head_shape import HeadShape
from msgtrain.ingest.common.streams import response_body
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.core.chunks import ChunkKey, KeyFunction
from msgtrain.ingest.formats import Marks, ReadEvent, ReadItem, ReadReject, excerpt, head_shape, quoted
from msgtrain.model.completeness import mark_context_incomplete
from msgtrain.model.graph import Env, Origin
from msgtrain.model.message import (
    DEFAULT_POLICY,
    AnyMessage,
    Generation,
    MediaPart,
    Modality,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultMessage,
    Part,
    PartsMessage,
    ReasoningPart,
    TextPart,
)

ANTHROPIC_ONLY_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})
_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_tokens", "stop_sequences", "thinking")
_SUPPORTED = "text, image, document, thinking, redacted_thinking, tool_use, tool_result, compaction"
NO_SYSTEM_FIELD = (
    "a list of Anthropic messages, not a request body: the system prompt is a field of the request, which this log "
    "does not hold"
)


_REQUEST_FIELDS = ("model", "max_tokens", "tools", "tool_choice", "temperature", "stop_sequences", "thinking")


def _request_fields(container: dict[str, Any]) -> bool:
    """Whether a conversation's container holds a Messages request's fields beside the messages (its model, its
    tools...): then it is the request, and a missing ``system`` means none was sent."""
    return any(key in container for key in _REQUEST_FIELDS)


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and value.get("role") in ("user", "assistant") and "content" in value


LAYOUT = ConversationLayout(is_message=_is_message, message_keys=("messages",))


# --------------------------------------------------------------------------- blocks → messages


class AnthropicConverter:
    """Converts Anthropic messages, remembering call names so later ``tool_result`` blocks can be named."""

    def __init__(self, policy: str = DEFAULT_POLICY):
        self.policy = policy
        self.call_names: dict[str, str] = {}

    def system(self, system: Any, where: str = "system") -> PartsMessage | None:
        if system is None or system == "" or system == []:
            return None
        blocks = _blocks(system, where)
        parts: list[Part] = []
        for j, block in enumerate(blocks):
            if block.get("type") != "text":
                raise ValidationError(
                    f"system block {j} has type {block.get('type')!r}",
                    where=where,
                    code="unsupported_block",
                    hint="system prompts are a string or a list of text blocks",
                )
            parts.append(TextPart(text=str(block.get("text", ""))))
        return PartsMessage(parts=tuple(parts), role_hint_for_llm="system", policy="system")

    def message(self, data: Any, index: int) -> tuple[list[AnyMessage], bool]:
        """One Anthropic message → msgtrain messages, and whether it held a compaction summary."""
        where = f"message[{index}]"
        if not isinstance(data, dict):
            raise ValidationError("message is not an object", where=where, code="bad_message")
        role = data.get("role")
        if role not in ("user", "assistant"):
            raise ValidationError(
                f"unknown role {role!r}",
                where=where,
                code="unknown_role",
                hint="Anthropic roles are 'user' and 'assistant'; the system prompt is a separate field",
            )
        blocks = _blocks(data.get("content"), where)
        if role == "assistant":
            return self._assistant(blocks, where)
        return self._user(blocks, where), False

    def _assistant(self, blocks: list[dict[str, Any]], where: str) -> tuple[list[AnyMessage], bool]:
        parts: list[Part] = []
        calls: list[OptionCallPayload] = []
        compaction = False
        for j, block in enumerate(blocks):
            kind = block.get("type")
            if kind == "tool_use":
                call_id, name = block.get("id"), block.get("name")
                if not call_id or not name:
                    raise ValidationError(
                        f"content[{j}] tool_use needs an id and a name", where=where, code="bad_tool_call"
                    )
                raw_input = block.get("input")
                arguments = raw_input if isinstance(raw_input, dict) else {"value": raw_input}
                calls.append(OptionCallPayload(invocation_id=str(call_id), option_name=str(name), arguments=arguments))
                self.call_names[str(call_id)] = str(name)
            elif kind == "compaction":
                compaction = True
                parts.append(TextPart(text=as_text(block.get("content"))))
            else:
                parts.append(_part(block, j, where))
        metadata = {"anthropic_compaction": True} if compaction else {}
        if calls:
            msg: AnyMessage = OptionCallMessage(
                parts=tuple(parts),
                calls=tuple(calls),
                policy=self.policy,
                role_hint_for_llm="assistant",
                metadata=metadata,
            )
        else:
            msg = PartsMessage(parts=tuple(parts), role_hint_for_llm="assistant", policy=self.policy, metadata=metadata)
        return [msg], compaction

    def _user(self, blocks: list[dict[str, Any]], where: str) -> list[AnyMessage]:
        return user_turn(
            [
                self._result(block, j, where) if block.get("type") == "tool_result" else _part(block, j, where)
                for j, block in enumerate(blocks)
            ]
        )

    def _result(self, block: dict[str, Any], j: int, where: str) -> OptionResultMessage:
        value, failed = _result_value(block.get("content")), bool(block.get("is_error", False))
        return paired_result(
            self.call_names, block.get("tool_use_id"), value, failed, block=f"content[{j}] tool_result", where=where
        )

    def messages(self, messages: list[Any]) -> list[Step]:
        """A plain message list: assistants sampled, compaction summaries injected. A history its agent condensed
        without deleting (Roo Code / Kilo Code: a summary ``isSummary`` or truncation marker ``isTruncationMarker``
        among the messages, the ones it replaced tagged ``condenseParent`` / ``truncationParent`` and left in place)
        holds the summary as a message another call wrote (``injected``), and every reply after it is ``carried``:
        which of the tagged messages each later request still held is the agent's rebuild, not the list."""
        steps: list[Step] = []
        condensed: str | None = None
        for i, data in enumerate(messages):
            converted, compaction = self.message(data, i)
            marker = isinstance(data, dict) and (
                data.get("isSummary") is True or data.get("isTruncationMarker") is True
            )
            origin = Origin.INJECTED if compaction or marker else None
            for m in converted:
                m, generation = logged_reply(m, data)
                step_origin = origin if m.role == "assistant" else None
                if condensed is not None and m.role == "assistant" and step_origin is None:
                    m = m.model_copy(update={"metadata": {**m.metadata, "why_not_trained": condensed}})
                    step_origin = Origin.CARRIED
                steps.append(Step(m, origin=step_origin, generation=generation, index=i))
            if marker and condensed is None:
                kind = "a summary" if data.get("isSummary") is True else "a truncation marker"
                condensed = (
                    f"the agent condensed the history at message {i} ({kind}; the messages it replaced are kept, "
                    "tagged): which of them each later request held is not rebuilt"
                )
        return steps

    def response(self, body: Any, request: dict[str, Any], where: str = "response") -> Step | None:
        """The sampled turn of a Messages response, with engine facts; None when it holds no content."""
        if not isinstance(body, dict) or body.get("role", "assistant") != "assistant":
            raise ValidationError("response is not an assistant message", where=where, code="bad_response")
        if not body.get("content"):
            return None
        converted, compaction = self.message({"role": "assistant", "content": body["content"]}, 0)
        sampling = {k: request[k] for k in _SAMPLING_KEYS if k in request}
        generation = Generation(model=body.get("model"), finish_reason=body.get("stop_reason"), sampling=sampling)
        return Step(converted[0], origin=Origin.INJECTED if compaction else None, generation=generation)


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise ValidationError(
            "content must be a string or a list of content blocks",
            where=where,
            code="bad_content",
            hint='e.g. [{"type": "text", "text": "..."}]',
        )
    return content


def _part(block: dict[str, Any], j: int, where: str) -> Part:
    kind = block.get("type")
    if kind == "text":
        return TextPart(text=str(block.get("text", "")))
    if kind == "thinking":
        return ReasoningPart(text=str(block.get("thinking", "")), signature=block.get("signature"))
    if kind == "redacted_thinking":
        return ReasoningPart(text="", signature=block.get("data"), redacted=True)
    if kind in ("image", "document"):
        modality: Modality = "image" if kind == "image" else "document"
        return _media(block.get("source"), modality, j, where)
    raise ValidationError(
        f"content[{j}] has unsupported block type {kind!r}",
        where=where,
        code="unsupported_block",
        hint=f"supported block types: {_SUPPORTED}",
    )


def _media(source: Any, modality: Modality, j: int, where: str) -> MediaPart:
    if not isinstance(source, dict):
        raise ValidationError(f"content[{j}] {modality} block has no source", where=where, code="bad_content")
    kind = source.get("type")
    mime = source.get("media_type")
    if kind == "base64" and isinstance(source.get("data"), str):
        return MediaPart(
            modality=modality,
            url=f"data:{mime or 'application/octet-stream'};base64,{source['data']}",
            mime=mime,
        )
    if kind == "url" and isinstance(source.get("url"), str):
        return MediaPart(modality=modality, url=source["url"], mime=mime)
    if kind == "file" and isinstance(source.get("file_id"), str):
        return MediaPart(modality=modality, url=source["file_id"], mime=mime)
    if kind == "text" and isinstance(source.get("data"), str):
        encoded = base64.b64encode(source["data"].encode("utf-8")).decode("ascii")
        text_mime = mime or "text/plain"
        return MediaPart(modality=modality, url=f"data:{text_mime};base64,{encoded}", mime=text_mime)
    raise ValidationError(
        f"content[{j}] {modality} source type {kind!r} is not supported",
        where=where,
        code="unsupported_block",
        hint="media sources: base64, url, file, text",
    )


def _result_value(content: Any) -> Any:
    """Tool-result content: text stays text, all-text blocks are joined, anything else is kept as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in content):
        return "\n".join(str(b.get("text", "")) for b in content)
    return content


# --------------------------------------------------------------------------- the reader


def _request_env(request: dict[str, Any]) -> Env:
    return Env.make(openai_tools(request.get("tools"), where="request.tools"))


def request_context(request: dict[str, Any], conv: AnthropicConverter, at_least: int | None = None) -> list[Step]:
    """A request's context: its system prompt, then its messages converted in order. With ``at_least``, stop once
    that many steps exist: a prefix of the full context, since conversion is sequential (the chunk keys use it)."""
    context: list[Step] = []
    system = conv.system(request.get("system"))
    if system is not None:
        context.append(Step(system))
    for i, data in enumerate(request["messages"]):
        if at_least is not None and len(context) >= at_least:
            break
        converted, _ = conv.message(data, i)
        context.extend(Step(m, index=i) for m in converted)
    return context


def request_call(request: Any, response: Any) -> Call:
    """One request/response pair as a :class:`Call` (also used for cassettes)."""
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        raise ValidationError(
            "request has no messages list",
            where="request",
            code="bad_request",
            hint="an Anthropic request body carries 'messages'",
        )
    conv = AnthropicConverter()
    context = request_context(request, conv)
    sample = conv.response(response_body("anthropic", response), request)
    return Call(context, [sample] if sample is not None else [], _request_env(request))


class AnthropicReader:
    name = "anthropic"
    description = (
        "Anthropic Messages: message lists with system, or request/response pairs (content blocks; streamed"
        " responses as event lists)"
    )
    example = "sample_logs/anthropic/request_response.jsonl"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(ANTHROPIC_ONLY_BLOCKS | {"request", "response", "system"}))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        if shape.any_value(".response.type", {"message"}) or shape.has(".request.messages", ".response.stop_reason"):
            return True
        if shape.has(".request.messages") and shape.any_value(".response[].type", {"message_start"}):
            return True  # a streamed call logged as its list of events
        if shape.has(".messages[].messageId"):
            return False  # a saved thread numbering its messages (Amp's), not an API body: the amp reader's
        for prefix in ("", ".messages[]", ".request.messages[]"):
            if shape.any_value(f"{prefix}.content[].type", ANTHROPIC_ONLY_BLOCKS):
                return True
        return _request_body(shape)

    # A JSON array read item by item is read through iter_raw_records: it may be cut into chunks of items too.
    chunk_items = True

    def chunk_keys(self, path: Path) -> KeyFunction | None:
        """Keys for cutting a huge JSONL file (see :mod:`msgtrain.ingest.core.chunks`): request/response pairs by the
        conversation key :meth:`read` groups them by; message lists by their conversation layout."""
        layout, _ = vote_layout(path, _pairs_layout)
        if layout is None:
            return None
        if layout:
            return _pair_chunk_key
        return lambda value: conversation_chunk_key(LAYOUT, value)

    def read(self, path: Path) -> Iterator[ReadItem]:
        layout, stream = vote_layout(path, _pairs_layout)
        if layout is None:
            return
        if layout:
            yield from self._read_pairs(path, stream)
            return
        yield from read_conversation_file(path, LAYOUT, lambda conv: self.convert(path, conv), stream)

    def convert(self, path: Path, conv: Conversation) -> Converted:
        converter = AnthropicConverter()
        steps: list[Step] = []
        system = converter.system(conv.container.get("system"))
        if system is not None:
            steps.append(Step(system))
        steps.extend(converter.messages(conv.messages))
        tools = openai_tools(conv.container.get("tools"))
        graph = build_linear_graph(
            steps,
            base_id=base_graph_id(path, conv.ref),
            incomplete_from=conv.incomplete_from,
            tools=tools,
            metadata={"source_format": self.name},
        )
        if system is None and not _request_fields(conv.container):
            # Anthropic messages never hold the system prompt: only a request body (it names its model) says none was
            # sent; a saved message list (a Cline task history, a chat export) cannot
            mark_context_incomplete(graph, ["system_prompt"], NO_SYSTEM_FIELD)
        extras = {k: v for k, v in conv.container.items() if k not in ("system", "tools")}
        return Converted(graph, extras)

    def _read_pairs(self, path: Path, records: Iterator[RawRecord]) -> Iterator[ReadEvent]:
        groups = CallLogGroups(path, metadata={"source_format": self.name})
        for ref, value, raw in iter_call_records(path, records):
            if isinstance(value, MsgtrainError):
                yield ReadReject(ref, value, excerpt(raw))
                continue
            try:
                if not _is_pair(value):
                    raise ValidationError(
                        "record is not a request/response pair",
                        code="not_a_call",
                        hint='each record is {"request": {...}, "response": {...}}',
                    )
                call = request_call(value["request"], value["response"])
                groups.add(call, ref, session_of(value, value["request"]))
            except MsgtrainError as e:
                yield ReadReject(ref, e.located(str(ref)), excerpt(raw))
        yield from groups.events()


def _pairs_layout(first: Any) -> bool:
    return _is_pair(first) or (isinstance(first, list) and bool(first) and _is_pair(first[0]))


def _pair_chunk_key(value: Any) -> ChunkKey:
    """The chunk key of a pair (:func:`~msgtrain.ingest.common.call_log.call_chunk_keys`): its session, else the
    first two messages of its context and reply, converted as :func:`request_call` converts them."""
    if not _is_pair(value) or not isinstance(value["request"], dict):
        return ()  # rejected on its own
    request = value["request"]
    session = session_of(value, request)
    if session:
        return (conversation_key((), session),)
    messages = request.get("messages")
    if not isinstance(messages, list):
        return ()
    try:
        first = request_context(request, AnthropicConverter(), at_least=2)[:2]
        if len(first) >= 2:
            return (conversation_key([s.message for s in first], None),)
        call = request_call(request, value["response"])  # one message: its reply is the second of its continuations
    except (MsgtrainError, ValueError):
        return ()
    return call_chunk_keys([s.message for s in call.context], [s.message for s in call.samples], None)


def _is_pair(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("request"), dict) and "response" in value


def _request_body(shape: HeadShape) -> bool:
    """A bare Messages request body: ``messages`` next to a top-level ``system`` (OpenAI has no such key)."""
    if shape.has(".messages[].content[].text") and not shape.has(".messages[].content[].type"):
        return False  # untyped {"text"} blocks: Bedrock Converse (its fine-tuning files), not the Messages API
    return shape.has(".messages[].role", ".system") and not shape.has(".messages[].tool_calls")


READER = AnthropicReader()
