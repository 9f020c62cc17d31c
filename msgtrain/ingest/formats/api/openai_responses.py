"""OpenAI Responses API conversations: item lists and request/response records.

Reads:
- item lists (conversation-list rule: each assistant turn is sampled in the context before it): a JSON array
  of items, JSONL with one item per line (one conversation), or records ``{"items": [...]}``;
- call records (one graph per file, :mod:`msgtrain.ingest.common.call_log`): ``{"request": {...}, "response":
  {...}}`` or ``{"input": ..., "output": [...]}``. The request's ``instructions`` and ``input`` are the
  context, the response's ``output`` is the one sampled turn; ``previous_response_id`` continues from that
  response's node. A streamed call may log its response as the list of stream events; the
  ``response.completed`` event's response is used, else it is rebuilt from the deltas
  (:mod:`msgtrain.ingest.common.streams`).

Items: ``message`` (``input_text`` / ``output_text`` / ``refusal`` text, ``input_image`` / ``input_file`` /
``input_audio`` media references), ``function_call`` and ``custom_tool_call`` (paired by ``call_id``,
argument text kept verbatim), ``function_call_output`` / ``custom_tool_call_output``, ``reasoning``.
Consecutive assistant-side items (reasoning, assistant messages, calls) form ONE assistant turn, as one
response emits them; a message after a call begins the next model call (a response writes its text before its
calls; reasoning may come on either side of a call).

Safe readings: a ``reasoning`` item's ``summary`` is written by a summariser, not sampled by the policy, so
it is kept as *redacted* reasoning (with ``encrypted_content`` as its signature) and never trained; only
``reasoning_text`` content (open-weight models) is the policy's own reasoning. Output-text logprobs carry no
token ids and cannot be placed on tokens, so they are not kept. Hosted-tool items (web search, file search,
computer use...) reject the record (``unsupported_item``) rather than silently losing context.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.call_log import Call, CallLogGroups, call_chunk_keys, session_of
from msgtrain.ingest.common.conversation_files import (
    Conversation,
    ConversationLayout,
    Converted,
    RawRecord,
    Step,
    base_graph_id,
    build_linear_graph,
    conversation_chunk_key,
    iter_call_records,
    paired_result,
    read_conversation_file,
    vote_layout,
)
from msgtrain.ingest.common.streams import is_chunk_list, response_body
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.core.chunks import ChunkKey, KeyFunction
from msgtrain.ingest.formats import Marks, ReadEvent, ReadItem, ReadReject, SourceRef, excerpt, head_shape, quoted
from msgtrain.model.graph import Env
from msgtrain.model.message import (
    DEFAULT_POLICY,
    AnyMessage,
    Generation,
    MediaPart,
    OptionCallMessage,
    OptionCallPayload,
    Part,
    PartsMessage,
    ReasoningPart,
    TextPart,
)
from msgtrain.model.openai import parse_arguments

ASSISTANT_ITEMS = frozenset({"function_call", "custom_tool_call", "reasoning"})
RESULT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})
ITEM_TYPES = ASSISTANT_ITEMS | RESULT_ITEMS | {"message"}
_CONTENT_TYPES = frozenset({"input_text", "output_text", "input_image", "input_file", "input_audio", "refusal"})
# Marks the messages that came from a request's ``instructions`` (the API does not carry them across
# ``previous_response_id``, so a continuing call must find and replace them).
_INSTRUCTIONS = {"openai_field": "instructions"}
_SAMPLING_KEYS = ("temperature", "top_p", "max_output_tokens", "reasoning", "text", "tool_choice")


def is_item(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    if kind is None:
        return isinstance(value.get("role"), str) and "content" in value and "kind" not in value
    return kind in ITEM_TYPES or (isinstance(kind, str) and kind.endswith("_call"))


LAYOUT = ConversationLayout(is_message=is_item, message_keys=("items",))


class ResponsesConverter:
    """Turns item lists into messages, grouping each run of assistant-side items into one turn."""

    def __init__(self, policy: str = DEFAULT_POLICY):
        self.policy = policy
        self.call_names: dict[str, str] = {}

    def steps(self, items: Any, *, where: str = "input", cut: bool = False) -> list[Step]:
        """The items as steps, each run of assistant-side items one turn. With ``cut``, an input item that cannot
        be read (a result answering no call) is a gap instead of an error: it and the input items after it are
        left out, the turns after it kept (``self.gap``: its index and error), for the caller to keep as context
        the log does not hold."""
        self.gap: tuple[int, ValidationError] | None = None
        if isinstance(items, str):
            return [Step(PartsMessage(parts=(TextPart(text=items),), role_hint_for_llm="user", policy="user"))]
        if not isinstance(items, list):
            raise ValidationError(f"{where} must be a string or a list of items", where=where, code="bad_items")
        steps: list[Step] = []
        group: list[tuple[int, dict[str, Any]]] = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise ValidationError("item is not an object", where=f"{where}[{i}]", code="bad_item")
            if _is_assistant_side(item):
                if group and _starts_next_call(group, item):
                    steps.append(self._assistant_turn(group, where))
                    group = []
                group.append((i, item))
                continue
            if group:
                steps.append(self._assistant_turn(group, where))
                group = []
            if self.gap is not None:
                continue  # after a gap only the replies are kept
            try:
                steps.append(Step(self._input_item(item, f"{where}[{i}]"), index=i))
            except ValidationError as e:
                if not cut:
                    raise
                self.gap = (i, e)
        if group:
            steps.append(self._assistant_turn(group, where))
        return steps

    def _input_item(self, item: dict[str, Any], where: str) -> AnyMessage:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer"):
                raise ValidationError(
                    f"unknown message role {role!r}",
                    where=where,
                    code="unknown_role",
                    hint="Responses message roles: user, system, developer, assistant",
                )
            parts = _content_parts(item.get("content"), where)
            metadata = {"openai_role": "developer"} if role == "developer" else {}
            chat_role = "user" if role == "user" else "system"
            return PartsMessage(parts=tuple(parts), role_hint_for_llm=chat_role, policy=chat_role, metadata=metadata)
        if kind in RESULT_ITEMS:
            value = _output_value(item.get("output"))
            return paired_result(self.call_names, item.get("call_id"), value, False, block=str(kind), where=where)
        raise _unsupported(kind, where)

    def _assistant_turn(self, group: list[tuple[int, dict[str, Any]]], where: str) -> Step:
        parts: list[Part] = []
        calls: list[OptionCallPayload] = []
        for i, item in group:
            loc = f"{where}[{i}]"
            kind = item.get("type", "message")
            if kind == "message":
                parts.extend(_content_parts(item.get("content"), loc))
            elif kind == "reasoning":
                parts.append(_reasoning(item))
            elif kind in ("function_call", "custom_tool_call"):
                call_id, name = item.get("call_id"), item.get("name")
                if not call_id or not name:
                    raise ValidationError(f"{kind} needs a call_id and a name", where=loc, code="bad_tool_call")
                raw = item.get("arguments") if kind == "function_call" else item.get("input")
                arguments, verbatim = parse_arguments(raw)
                calls.append(
                    OptionCallPayload(
                        invocation_id=str(call_id),
                        option_name=str(name),
                        arguments=arguments,
                        raw_arguments=verbatim,
                    )
                )
                self.call_names[str(call_id)] = str(name)
            else:
                raise _unsupported(kind, loc)
        if calls:
            msg: AnyMessage = OptionCallMessage(
                parts=tuple(parts), calls=tuple(calls), policy=self.policy, role_hint_for_llm="assistant"
            )
        else:
            msg = PartsMessage(parts=tuple(parts), role_hint_for_llm="assistant", policy=self.policy)
        return Step(msg, index=group[0][0])

    def request_context(self, request: dict[str, Any]) -> list[Step]:
        steps: list[Step] = []
        instructions = request.get("instructions")
        if isinstance(instructions, str) and instructions:
            steps.append(
                Step(
                    PartsMessage(
                        parts=(TextPart(text=instructions),),
                        role_hint_for_llm="system",
                        policy="system",
                        metadata=dict(_INSTRUCTIONS),
                    )
                )
            )
        elif isinstance(instructions, list):
            for step in self.steps(instructions, where="instructions"):
                tagged = step.message.model_copy(update={"metadata": {**step.message.metadata, **_INSTRUCTIONS}})
                steps.append(Step(tagged, index=step.index))
        if "input" in request:
            steps.extend(self.steps(request["input"], where="input"))
        return steps

    def response_sample(self, response: dict[str, Any], request: dict[str, Any]) -> Step | None:
        output = response.get("output")
        if not output:
            return None
        steps = self.steps(output, where="output")
        if len(steps) != 1 or steps[0].message.role != "assistant":
            raise ValidationError(
                "response output is not one assistant turn",
                where="output",
                code="bad_response",
                hint="a response's output holds reasoning, assistant messages and calls only",
            )
        details = response.get("incomplete_details")
        finish = details.get("reason") if isinstance(details, dict) else response.get("status")
        sampling = {k: request[k] for k in _SAMPLING_KEYS if request.get(k) is not None}
        created = response.get("created_at")
        generation = Generation(
            model=response.get("model"),
            finish_reason=finish,
            sampling=sampling,
            created=created if isinstance(created, int) else None,
        )
        return Step(steps[0].message, generation=generation)


def _from_instructions(message: AnyMessage) -> bool:
    return message.metadata.get("openai_field") == _INSTRUCTIONS["openai_field"]


def _starts_next_call(group: list[tuple[int, dict[str, Any]]], item: dict[str, Any]) -> bool:
    """Whether an assistant-side ``item`` begins the next model call rather than continuing the turn ``group``: a
    response writes its text before its calls, so a message after a call is a new call (whose results in between
    the log did not keep). Reasoning is not: converters write a call's reasoning before or after it (NeMo Gym's
    writes it after the call, before the call's output)."""
    called = any(i.get("type", "message") not in ("message", "reasoning") for _, i in group)
    return called and item.get("type", "message") == "message"


def _is_assistant_side(item: dict[str, Any]) -> bool:
    kind = item.get("type", "message")
    if kind == "message":
        return item.get("role") == "assistant"
    return kind in ASSISTANT_ITEMS or (kind not in RESULT_ITEMS and str(kind).endswith("_call"))


def _unsupported(kind: Any, where: str) -> ValidationError:
    return ValidationError(
        f"item type {kind!r} is not supported",
        where=where,
        code="unsupported_item",
        hint="supported items: message, function_call(_output), custom_tool_call(_output), reasoning",
    )


def _content_parts(content: Any, where: str) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(text=content)] if content else []
    if not isinstance(content, list):
        raise ValidationError("content must be a string or a list of parts", where=where, code="bad_content")
    parts: list[Part] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part, dict) or kind not in _CONTENT_TYPES:
            raise ValidationError(
                f"content[{j}] has unsupported type {kind!r}",
                where=where,
                code="bad_content",
                hint=f"content part types: {', '.join(sorted(_CONTENT_TYPES))}",
            )
        if kind in ("input_text", "output_text"):
            parts.append(TextPart(text=str(part.get("text", ""))))
        elif kind == "refusal":
            parts.append(TextPart(text=str(part.get("refusal", ""))))
        elif kind == "input_image":
            url = part.get("image_url") or part.get("file_id")
            parts.append(_media_part("image", url, j, where, None))
        elif kind == "input_file":
            url = part.get("file_url") or part.get("file_id") or part.get("file_data")
            parts.append(_media_part("document", url, j, where, part.get("filename")))
        else:
            raw_audio = part.get("input_audio")
            audio: dict[str, Any] = raw_audio if isinstance(raw_audio, dict) else {}
            fmt = audio.get("format", "wav")
            data = audio.get("data")
            url = f"data:audio/{fmt};base64,{data}" if isinstance(data, str) else None
            parts.append(_media_part("audio", url, j, where, None))
    return parts


def _media_part(modality: Any, url: Any, j: int, where: str, hint: Any) -> MediaPart:
    if not isinstance(url, str) or not url:
        raise ValidationError(
            f"content[{j}] {modality} part has no url, file id or data", where=where, code="bad_content"
        )
    return MediaPart(modality=modality, url=url, prompt_hint=hint if isinstance(hint, str) else None)


def _reasoning(item: dict[str, Any]) -> ReasoningPart:
    own = [c.get("text", "") for c in item.get("content") or [] if isinstance(c, dict)]
    encrypted = item.get("encrypted_content")
    if own:
        return ReasoningPart(text="\n".join(str(t) for t in own), signature=encrypted)
    summary = [s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict)]
    return ReasoningPart(text="\n".join(str(t) for t in summary), signature=encrypted, redacted=True)


def _output_value(output: Any) -> Any:
    if isinstance(output, list) and all(
        isinstance(p, dict) and p.get("type") in ("input_text", "output_text") for p in output
    ):
        return "\n".join(str(p.get("text", "")) for p in output)
    return "" if output is None else output


def _call_parts(record: dict[str, Any]) -> tuple[dict[str, Any], Any] | None:
    """(request, response) of a call record, or None if the record is not one. The response is a body, or the
    list of stream events of a streamed call."""
    request, response = record.get("request"), record.get("response")
    if isinstance(request, dict) and (isinstance(response, dict) or is_chunk_list("openai_responses", response)):
        return request, response
    if "output" in record and "input" in record:
        return record, record
    return None


class OpenAIResponsesReader:
    name = "openai_responses"
    description = (
        "OpenAI Responses API items (message, function_call, reasoning...) or request/response records"
        " (streamed responses as event lists)"
    )
    example = "sample_logs/openai_responses/items.jsonl"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(
        texts=quoted(ASSISTANT_ITEMS | RESULT_ITEMS | (_CONTENT_TYPES - {"refusal"}) | {"request", "response"})
    )

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        if shape.has(".responses_create_params"):
            return False  # a NeMo Gym rollout (a whole trajectory with its reward): the nemo_gym reader's
        if shape.any_value(".object", {"response"}) or shape.any_value(".response.object", {"response"}):
            return True
        if shape.any_value(".output[].type", RESULT_ITEMS) or shape.any_value(".response.output[].type", RESULT_ITEMS):
            return False  # no response's output holds a call's output: an agent run's items (the structural reader's)
        if shape.has(".request.input") and shape.any_value(".response[].type", {"response.created"}):
            return True  # a streamed call logged as its list of events
        for prefix in ("", ".items[]", ".input[]", ".output[]", ".request.input[]", ".response.output[]"):
            if shape.any_value(f"{prefix}.type", ASSISTANT_ITEMS | RESULT_ITEMS):
                return True
            if shape.any_value(f"{prefix}.content[].type", _CONTENT_TYPES - {"refusal"}):
                return True
        return False

    # A JSON array read item by item is read through iter_raw_records: it may be cut into chunks of items too.
    chunk_items = True

    def chunk_keys(self, path: Path) -> KeyFunction | None:
        """Keys for cutting a huge JSONL file (see :mod:`msgtrain.ingest.core.chunks`): call records by the conversation
        key :meth:`read` groups them by plus their ``previous_response_id`` links; item lists by their layout."""
        layout, _ = vote_layout(path, _calls_layout)
        if layout is None:
            return None
        if layout:
            return _ChainKeys()
        return lambda value: conversation_chunk_key(LAYOUT, value)

    def read(self, path: Path) -> Iterator[ReadItem]:
        layout, stream = vote_layout(path, _calls_layout)
        if layout is None:
            return
        if layout:
            yield from self._read_calls(path, stream)
            return
        yield from read_conversation_file(path, LAYOUT, lambda conv: self.convert(path, conv), stream)

    def convert(self, path: Path, conv: Conversation) -> Converted:
        steps = ResponsesConverter().steps(conv.messages, where="items")
        graph = build_linear_graph(
            steps,
            base_id=base_graph_id(path, conv.ref),
            incomplete_from=conv.incomplete_from,
            tools=openai_tools(conv.container.get("tools")),
            metadata={"source_format": self.name},
        )
        return Converted(graph, {k: v for k, v in conv.container.items() if k != "tools"})

    def _read_calls(self, path: Path, records: Iterator[RawRecord]) -> Iterator[ReadEvent]:
        """Calls in file order; a call continuing a response the file logs further down (an export sorted newest
        first) waits for it, and is read once that response is; a call whose response never comes is a
        ``missing_context`` reject, its reply counted lost."""
        groups = CallLogGroups(path, metadata={"source_format": self.name})
        by_response: dict[str, str] = {}
        waiting: dict[str, list[tuple[SourceRef, Any, Any]]] = {}  # previous_response_id -> calls continuing it
        for ref, value, raw in iter_call_records(path, records):
            if isinstance(value, MsgtrainError):
                yield ReadReject(ref, value, excerpt(raw))
                continue
            queue = [(ref, value, raw)]
            while queue:
                ref, value, raw = queue.pop(0)
                previous = _previous_response(value)
                if previous is not None and previous not in by_response:
                    waiting.setdefault(previous, []).append((ref, value, raw))
                    continue
                try:
                    parts = _call_parts(value) if isinstance(value, dict) else None
                    if parts is None:
                        raise ValidationError(
                            "record is not a request/response pair",
                            code="not_a_call",
                            hint='each record is {"request": {...}, "response": {...}}',
                        )
                    request, response = parts[0], response_body("openai_responses", parts[1])
                    call = responses_call(request, response, groups.history, by_response)
                    added = groups.add(call, ref, session_of(value, request))
                except MsgtrainError as e:
                    yield ReadReject(ref, e.located(str(ref)), excerpt(raw), turns=_replies(value))
                    continue
                if isinstance(response.get("id"), str) and added:
                    by_response[response["id"]] = added[-1]
                    queue.extend(waiting.pop(response["id"], []))
        for previous, calls in waiting.items():
            for ref, value, raw in calls:
                error = ValidationError(
                    f"previous_response_id {previous!r} is not a response recorded in this file",
                    where=str(ref),
                    code="missing_context",
                    hint="the context of this call lives in a response that was not logged; log the whole chain",
                )
                yield ReadReject(ref, error, excerpt(raw), turns=_replies(value))
        yield from groups.events()


def _previous_response(record: Any) -> str | None:
    """The response a logged call continues (its request's ``previous_response_id``), if any."""
    parts = _call_parts(record) if isinstance(record, dict) else None
    previous = parts[0].get("previous_response_id") if parts is not None else None
    return str(previous) if previous else None


def _replies(record: Any) -> int:
    """The replies a rejected call record held (1 when its response has output items), for the books."""
    parts = _call_parts(record) if isinstance(record, dict) else None
    response = parts[1] if parts is not None else None
    if isinstance(response, list):  # a stream's events: one response
        return 1 if response else 0
    return 1 if isinstance(response, dict) and response.get("output") else 0


def _calls_layout(first: Any) -> bool:
    head = first[0] if isinstance(first, list) and first else first
    return isinstance(head, dict) and _call_parts(head) is not None


class _ChainKeys:
    """Chunk keys of a Responses call log, computed as :meth:`OpenAIResponsesReader._read_calls` groups calls.

    A call is filed under :func:`call_chunk_keys` (the first two messages of its context and reply), and a call
    continuing a ``previous_response_id`` takes its history from that response, wherever it was filed. So each call
    carries its conversation key (computed from the chain: the first two non-instruction messages of a recorded
    response's path are remembered by response id) and links to its own and its previous response id. Records are
    fed in file order, as the reader reads them.
    """

    def __init__(self) -> None:
        self.heads: dict[str, list[AnyMessage]] = {}  # response id -> first two non-instruction path messages

    def __call__(self, value: Any) -> ChunkKey:
        parts = _call_parts(value) if isinstance(value, dict) else None
        if parts is None:
            return ()  # rejected on its own
        request = parts[0]
        try:
            response = response_body("openai_responses", parts[1])
        except (MsgtrainError, ValueError):
            return ()  # rejected on its own
        previous = request.get("previous_response_id")
        own = response.get("id") if isinstance(response.get("id"), str) else None
        # Links first: whatever else happens, a call stays with the response it continues.
        links = [f"response:{x}" for x in (previous, own) if x]
        history: list[AnyMessage] = []
        if previous:
            found = self.heads.get(str(previous))
            if found is None:
                return tuple(links)  # the reader rejects it: its context is not in the file
            history = found
        try:
            instructions, new_input, sample = _call_pieces(history, request, response)
        except (MsgtrainError, ValueError):
            return tuple(links)
        path = [*history, *(s.message for s in new_input)]
        if own is not None and sample is not None:
            self.heads[own] = [*path, sample.message][:2]
        context = [*(s.message for s in instructions), *path]
        samples = [sample.message] if sample is not None else []
        return (*call_chunk_keys(context, samples, session_of(value, request)), *links)


def _call_pieces(
    history: list[AnyMessage], request: dict[str, Any], response: dict[str, Any]
) -> tuple[list[Step], list[Step], Step | None]:
    """(instruction steps, new input steps, sampled step) of a call continuing ``history`` (its earlier path with
    instructions dropped). The one conversion both :func:`responses_call` and the chunk keys use."""
    converter = ResponsesConverter()
    for m in history:  # tool outputs in the new input are named by the calls of the history
        if isinstance(m, OptionCallMessage):
            converter.call_names.update({c.invocation_id: c.option_name for c in m.calls})
    steps = converter.request_context(request)
    instructions = [s for s in steps if _from_instructions(s.message)]
    return instructions, steps[len(instructions) :], converter.response_sample(response, request)


def responses_call(
    request: dict[str, Any],
    response: dict[str, Any],
    history_of: Callable[[str], list[AnyMessage] | None],
    by_response: dict[str, str],
) -> Call:
    """A Responses request/response as a :class:`Call` with its full context.

    With ``previous_response_id`` the context is the recorded response's own context and output (found through
    ``by_response`` → node → ``history_of``) followed by the new input. The API does not carry the earlier
    ``instructions`` over, so they are dropped from that history and this request's instructions lead the
    context; when they are unchanged the path is the same one and the nodes are shared.
    """
    history: list[AnyMessage] = []
    previous = request.get("previous_response_id")
    if previous:
        node = by_response.get(str(previous))
        found = history_of(node) if node is not None else None
        if found is None:
            raise ValidationError(
                f"previous_response_id {previous!r} is not a response recorded in this file",
                where="request",
                code="missing_context",
                hint="the context of this call lives in a response that was not logged; log the whole chain",
            )
        history = [m for m in found if not _from_instructions(m)]
    instructions, new_input, sample = _call_pieces(history, request, response)
    context = [*instructions, *(Step(m) for m in history), *new_input]
    env = Env.make(openai_tools(request.get("tools") or response.get("tools"), where="request.tools"))
    return Call(context, [sample] if sample is not None else [], env)


READER = OpenAIResponsesReader()
