"""OpenTelemetry GenAI spans: exported traces whose spans carry the GenAI semantic-convention attributes.

Accepted layouts: a JSON document ``{"spans": [...]}`` (any-agent's ``AgentTrace``, SDK ``ReadableSpan.to_json``
span objects), a JSON list of such spans, an OTLP/JSON export ``{"resourceSpans": [{"scopeSpans": [{"spans":
[...]}]}]}`` (attributes as ``[{key, value}]``), JSONL with one span or one OTLP export per line, one span object, or
spans' attribute maps alone; and an OTLP/JSON logs export (``resourceLogs``) of GenAI events, read as the spans they
describe (:func:`_log_spans`). Messages the older conventions log as span events (``gen_ai.content.prompt`` /
``gen_ai.content.completion``, ``gen_ai.{system,user,assistant,tool}.message`` and ``gen_ai.choice``) are read as
the span's input and output messages; a span's own attributes win over its events.

What is read (one span = one record; all spans of a trace become one graph ``otel:<trace id>``):
- Chat spans (``gen_ai.operation.name`` ``chat`` / ``call_llm`` / ``text_completion`` / ``generate_content``): the
  output (``gen_ai.output.messages`` with typed parts, or any-agent's ``gen_ai.output`` text / tool-call list) is a
  response sampled in exactly the span's input context (``gen_ai.system_instructions`` + ``gen_ai.input.messages``,
  typed ``parts`` or OpenAI-style messages). Contexts are added with ``add_node`` from the root, so spans that share
  a history share nodes and a span whose input differs from the previous history starts a branch. Several output
  messages (n > 1) are sibling samples. Model, finish reasons and usage go to ``Generation`` / metadata;
  ``gen_ai.tool.definitions`` is the environment's tool list.
- Tool spans (``execute_tool``): the tool's result (``gen_ai.tool.call.result``, or any-agent's ``gen_ai.output``)
  answers the call with ``gen_ai.tool.call.id``, else the oldest unanswered call of that tool name. A call a chat
  span logs without an id (any-agent's ``[{"tool.name", "tool.args"}]``) takes the id the first tool span of that
  name after it logged (before the next chat span): the id the call had. When that tool span logs arguments
  (``gen_ai.tool.args``) unlike the call's, what the model emitted is unknown: the reply is context, not trained
  (``why_not_trained``), and its call carries the arguments the tool ran with into the later context.
- Agent spans (``invoke_agent`` / ``create_agent``) name the policy (``gen_ai.agent.name``); other spans carry no
  conversation and are skipped (``non_genai_span``).

Safe readings:
- Instrumentations may record the input messages only on the first chat span of a trace (any-agent does). A chat
  span without input messages is then read as a conversation list is: its context is the previous span's context,
  that span's output and the tool results recorded since (tool-call ids synthesized deterministically from the span
  when the output does not carry them). A chat span with no recorded input and nothing before it has an unknown
  context: its output is kept as context (``carried``), not trained. The same holds when nothing was recorded
  between the previous response and this span (the caller sent something the trace does not hold, e.g. a
  structured-output follow-up).
- A tool span that answers no call in the graph is skipped (``tool_span_without_call``) and taints the branch (the
  next response saw a result the graph does not place).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.session_common import SkipTally, as_dict, as_list, graph_id_for, has_any, synthetic_call_id
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.core.base import HEAD_BYTES, first_json_value, open_input
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadReject,
    SourceRef,
    excerpt,
    head_shape,
    iter_json_lines,
    load_json_document,
)
from msgtrain.ingest.formats.traces.span_conventions import as_genai, json_attr
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.message import (
    RUNTIME_POLICY,
    AnyMessage,
    Generation,
    MediaPart,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultMessage,
    OptionResultPayload,
    Part,
    PartsMessage,
    ReasoningPart,
    TextPart,
)
from msgtrain.model.openai import from_openai_message, parse_arguments

CHAT_OPERATIONS = {"chat", "call_llm", "text_completion", "generate_content"}
TOOL_OPERATIONS = {"execute_tool"}
AGENT_OPERATIONS = {"invoke_agent", "create_agent"}
DEFAULT_POLICY_NAME = "otel"
# Bytes a span file's head holds in one of the conventions read here (GenAI, OpenInference, OpenLLMetry).
_CONVENTION_MARKS = (
    b"gen_ai.",
    b"openinference.span.kind",
    b"llm.input_messages",
    b'"input_messages"',
    b"mlflow.spanType",
)


@dataclass
class _Span:
    ref: str
    raw: str
    trace_id: str
    span_id: str
    start: float
    attributes: dict[str, Any]
    status_error: bool = False
    order: int = 0


@dataclass
class _Trace:
    spans: list[_Span] = field(default_factory=list)


# Attributes that say an object is a span's attribute map (the operation it traced), read as a span without ids.
_SPAN_KIND_ATTRIBUTES = ("gen_ai.operation.name", "openinference.span.kind", "mlflow.spanType")


def bare_attributes(value: Any) -> bool:
    """Whether ``value`` is a span's attributes alone: their operation named at its top, no span around them."""
    return isinstance(value, dict) and any(isinstance(value.get(k), str) for k in _SPAN_KIND_ATTRIBUTES)


class OtelGenAiReader:
    name = "otel"
    description = "OpenTelemetry GenAI spans (gen_ai.input/output.messages, tool spans; JSON, OTLP/JSON or JSONL)"
    example = "sample_logs/otel/trace.json"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=tuple(m.decode() for m in _CONVENTION_MARKS))

    def detect(self, path: Path, head: bytes) -> bool:
        if not any(mark in head for mark in _CONVENTION_MARKS):
            return False
        shape = head_shape(head)
        if not shape.has(".attributes") and has_any(shape, *(f".{k}" for k in _SPAN_KIND_ATTRIBUTES)):
            return True  # spans' attributes alone, with no span around them
        if shape.layout == "object":
            one_span = shape.has(".attributes") and has_any(shape, ".context.trace_id", ".traceId", ".trace_id")
            return one_span or has_any(
                shape,
                ".spans[].attributes",
                ".resourceSpans[].scopeSpans",
                ".data.spans[].attributes",
                ".resourceLogs[].scopeLogs",
            )
        if shape.layout in ("array", "jsonl"):
            return has_any(shape, ".attributes", ".attributes.openinference.span.kind") and has_any(
                shape, ".context", ".traceId", ".trace_id", ".span_id", ".context.trace_id"
            )
        return False

    def read(self, path: Path) -> Iterator[ReadEvent]:
        traces: dict[str, _Trace] = {}
        skips = SkipTally(path)
        order = 0
        for item in _iter_spans(path):
            if isinstance(item, ReadReject):
                yield item
                continue
            item.order = order
            order += 1
            traces.setdefault(item.trace_id, _Trace()).spans.append(item)
        for trace_id, trace in traces.items():
            yield from _TraceBuild(path, trace_id, trace, skips).events()
        yield from skips.events()


def _iter_spans(path: Path) -> Iterator[_Span | ReadReject]:
    with open_input(path) as f:
        head = f.read(HEAD_BYTES)
    first = first_json_value(head)
    is_jsonl = isinstance(first, dict) and head_shape(head).layout == "jsonl"
    if is_jsonl:
        for lineno, raw, obj in iter_json_lines(path):
            ref = f"line {lineno}"
            if isinstance(obj, MsgtrainError):
                yield ReadReject(SourceRef(str(path), ref), obj, excerpt(raw))
                continue
            yield from _spans_of(obj, ref, path)
        return
    yield from _spans_of(load_json_document(path), "file", path)


def _spans_of(doc: Any, ref: str, path: Path) -> Iterator[_Span | ReadReject]:
    if isinstance(doc, dict) and isinstance(doc.get("resourceLogs"), list):
        for k, span in enumerate(_log_spans(doc["resourceLogs"])):
            yield _span_or_reject(span, f"{ref} log {k}", path)
        return
    if isinstance(doc, dict) and isinstance(doc.get("resourceSpans"), list):
        k = 0
        for rs in doc["resourceSpans"]:
            for ss in (rs or {}).get("scopeSpans") or []:
                for span in (ss or {}).get("spans") or []:
                    yield _span_or_reject(span, f"{ref} span {k}", path)
                    k += 1
        return
    if isinstance(doc, dict) and isinstance(doc.get("data"), dict) and isinstance(doc["data"].get("spans"), list):
        doc = doc["data"]  # an MLflow trace: {"info": ..., "data": {"spans": [...]}}
    if isinstance(doc, dict) and isinstance(doc.get("spans"), list):
        items = doc["spans"]
    elif isinstance(doc, list):
        items = doc
    elif isinstance(doc, dict):
        items = [doc]
    else:
        err = ValidationError("not a span, a list of spans or an OTLP export", code="bad_record")
        yield ReadReject(SourceRef(str(path), ref), err.located(f"{path} ({ref})"), excerpt(str(doc)))
        return
    for k, span in enumerate(items):
        yield _span_or_reject(span, ref if len(items) == 1 and ref != "file" else f"span {k}", path)


def _log_spans(resource_logs: list[Any]) -> list[dict[str, Any]]:
    """The spans an OTLP/JSON logs export stands for (GenAI events emitted as log records, in file order): a record
    holding a call's messages as attributes (``gen_ai.client.inference.operation.details``) is a span of its own; the
    message events of the older conventions (``gen_ai.user.message``, ``gen_ai.choice``, ...: the body the message)
    are the events of the span they name (trace and span id), read as a span's events are; any other record is a
    span of its own, which holds no conversation (skipped as such)."""
    spans: dict[tuple[Any, Any], dict[str, Any]] = {}
    for resource in resource_logs:
        for scope in as_dict(resource).get("scopeLogs") or []:
            for k, record in enumerate(as_dict(scope).get("logRecords") or []):
                record = as_dict(record)
                attrs: list[Any] = record["attributes"] if isinstance(record.get("attributes"), list) else []
                names = {a.get("key"): _otlp_value(a.get("value")) for a in attrs if isinstance(a, dict)}
                name = record.get("eventName") or names.get("event.name")
                trace, span = record.get("traceId"), record.get("spanId")
                if (name in _MESSAGE_EVENTS or name == "gen_ai.choice") and trace and span:
                    owner = spans.setdefault((trace, span), {"traceId": trace, "spanId": span, "events": []})
                    owner.setdefault("startTimeUnixNano", record.get("timeUnixNano", 0))
                    owner["events"].append({"name": name, "attributes": attrs, "body": _otlp_value(record.get("body"))})
                    continue
                key = (
                    (trace, span) if trace and span and (trace, span) not in spans else (trace, f"log-{len(spans)}-{k}")
                )
                spans[key] = {
                    "traceId": trace or "log-records",
                    "spanId": key[1] or f"log-{len(spans)}",
                    "attributes": attrs,
                    "startTimeUnixNano": record.get("timeUnixNano", 0),
                }
    return list(spans.values())


def _span_or_reject(span: Any, ref: str, path: Path) -> _Span | ReadReject:
    try:
        return _normalize(span, ref)
    except MsgtrainError as e:
        return ReadReject(SourceRef(str(path), ref), e.located(f"{path} ({ref})"), excerpt(str(span)))


# Span events of the GenAI conventions before messages became attributes: one event per input message, one per
# choice (``gen_ai.{system,user,assistant,tool}.message``, ``gen_ai.choice``), or the whole prompt and completion
# (``gen_ai.content.prompt`` / ``gen_ai.content.completion`` with ``gen_ai.prompt`` / ``gen_ai.completion``).
_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def _event_messages(events: Any) -> dict[str, Any]:
    """The input and output messages a span's events hold, as the attributes that name them now
    (``gen_ai.input.messages`` / ``gen_ai.output.messages``, chat messages), and ``gen_ai.operation.name`` ``chat``
    when both are there; nothing when the events hold no message. An event's message is its ``gen_ai.event.content``
    (Azure's), its ``message`` or ``content`` attribute (JSON text or text), or its body."""
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    for event in events if isinstance(events, list) else []:
        if not isinstance(event, dict):
            continue
        name = event.get("name")
        attrs = event.get("attributes")
        if isinstance(attrs, list):  # OTLP
            attrs = {a.get("key"): _otlp_value(a.get("value")) for a in attrs if isinstance(a, dict)}
        attrs = attrs if isinstance(attrs, dict) else {}
        if name == "gen_ai.content.prompt":
            inputs.extend(_messages_of(_json_object(attrs.get("gen_ai.prompt")), "user"))
        elif name == "gen_ai.content.completion":
            outputs.extend(_messages_of(_json_object(attrs.get("gen_ai.completion")), "assistant"))
        elif name in _MESSAGE_EVENTS:
            body = _event_body(attrs, event)
            if "tool_calls" in attrs and not (isinstance(body, dict) and "tool_calls" in body):
                body = {"content": body if isinstance(body, str | list) else None, "tool_calls": attrs["tool_calls"]}
                body["tool_calls"] = json_attr(body["tool_calls"])
            inputs.extend(_messages_of(body, _MESSAGE_EVENTS[name], attrs))
        elif name == "gen_ai.choice":
            body = _event_body(attrs, event)
            message = body.get("message") if isinstance(body, dict) and "message" in body else body
            reason = (body.get("finish_reason") if isinstance(body, dict) else None) or attrs.get("finish_reason")
            for m in _messages_of(_json_object(message), "assistant"):
                outputs.append({**m, **({"finish_reason": reason} if isinstance(reason, str) else {})})
    if not outputs:
        return {}
    out: dict[str, Any] = {"gen_ai.output.messages": outputs, "gen_ai.operation.name": "chat"}
    if inputs:
        out["gen_ai.input.messages"] = inputs
    return out


def _events_attribute(attrs: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The events a span keeps as one attribute, ``events``: JSON text of ``[{"event.name": ..., **body}]``
    (Pydantic AI's instrumentation version 1 with ``event_mode='attributes'``, Logfire's default:
    pydantic/pydantic-ai ``pydantic_ai_slim/pydantic_ai/_instrumentation.py`` ``event_to_dict`` @ 61c71f01), as
    span events; an assistant message's content parts (``{"kind": "text" | "thinking", "text"}``) as chat parts."""
    value = json_attr(attrs.get("events"))
    if not (isinstance(value, list) and value and all(isinstance(e, dict) and "event.name" in e for e in value)):
        return None
    out = []
    for e in value:
        body = {k: _kind_parts(v) if k in ("content", "message") else v for k, v in e.items() if k != "event.name"}
        out.append({"name": e["event.name"], "attributes": body})
    return out


def _kind_parts(value: Any) -> Any:
    """Pydantic AI's content parts as chat API parts (a message's ``content``, a choice's ``message``)."""
    if isinstance(value, dict):
        return {k: _kind_parts(v) if k == "content" else v for k, v in value.items()}
    if not (isinstance(value, list) and value and all(isinstance(p, dict) and "kind" in p for p in value)):
        return value
    kinds = {"text": "text", "thinking": "thinking"}
    return [{"type": kinds.get(str(p["kind"]), str(p["kind"])), "text": p.get("text")} for p in value]


def _event_body(attrs: dict[str, Any], event: dict[str, Any]) -> Any:
    for key in ("gen_ai.event.content", "message", "content"):
        if key in attrs:
            return _json_object(attrs[key])
    return event.get("body")


def _json_object(value: Any) -> Any:
    """JSON text holding an object or a list, parsed; any other value (text that parses as a number) as it is."""
    parsed = json_attr(value)
    return parsed if isinstance(parsed, dict | list) else value


def _messages_of(value: Any, role: str, attrs: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Chat messages from an event's value: a list of messages, one message, or text (a message of ``role``)."""
    if isinstance(value, list) and value and all(isinstance(m, dict) and "role" in m for m in value):
        return list(value)
    if isinstance(value, dict) and ("content" in value or "tool_calls" in value):
        message = {"role": role, **value}
        if role == "tool" and "tool_call_id" not in message and isinstance((attrs or {}).get("id"), str):
            message["tool_call_id"] = (attrs or {})["id"]
        return [message]
    if isinstance(value, str | list):
        message = {"role": role, "content": value}
        if role == "tool" and isinstance((attrs or {}).get("id"), str):
            message["tool_call_id"] = (attrs or {})["id"]
        return [message]
    return []


def _id_hex(value: Any, width: int) -> str | None:
    if isinstance(value, int):
        return format(value, f"0{width}x")
    if isinstance(value, str) and value:
        return value.removeprefix("0x").lower()
    return None


def _otlp_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_otlp_value(v) for v in (value["arrayValue"] or {}).get("values") or []]
    if "kvlistValue" in value:  # a log record's body: {"values": [{key, value}]}
        pairs = (value["kvlistValue"] or {}).get("values") or []
        return {a.get("key"): _otlp_value(a.get("value")) for a in pairs if isinstance(a, dict)}
    return None


def _normalize(span: Any, ref: str) -> _Span:
    if not isinstance(span, dict):
        raise ValidationError("span is not an object", code="bad_record")
    context = as_dict(span.get("context"))
    trace_id = _id_hex(
        span.get("traceId") or context.get("trace_id") or span.get("trace_id") or span.get("context.trace_id"), 32
    )
    span_id = _id_hex(
        span.get("spanId") or context.get("span_id") or span.get("span_id") or span.get("context.span_id"), 16
    )
    if trace_id is None and span_id is None and span.get("attributes") is None and bare_attributes(span):
        # a span's attributes with no span around them (what a test fixture or an attribute dump keeps): one span of
        # a trace of its own, its context only what its own attributes hold
        trace_id, span_id, span = f"span-{ref}", f"span-{ref}", {"attributes": span}
    if trace_id is None or span_id is None:
        raise ValidationError(
            "span has no trace id or span id",
            code="bad_record",
            hint="spans need context.trace_id/span_id (SDK JSON) or traceId/spanId (OTLP)",
        )
    attrs = span.get("attributes")
    if attrs is None:  # a spans dataframe's rows (Phoenix): one column per attribute, "attributes.<name>"
        attrs = {k.removeprefix("attributes."): v for k, v in span.items() if k.startswith("attributes.")}
    if isinstance(attrs, list):  # OTLP: [{"key": ..., "value": {"stringValue": ...}}]
        attrs = {a.get("key"): _otlp_value(a.get("value")) for a in attrs if isinstance(a, dict)}
    kind = span.get("span_kind")
    if isinstance(attrs, dict) and isinstance(kind, str) and "openinference.span.kind" not in attrs:
        # Phoenix's span JSON keeps the OpenInference kind beside the attributes, not among them
        attrs = {**attrs, "openinference.span.kind": kind}
    if isinstance(attrs, dict):
        attrs = {**_event_messages(span.get("events")), **_event_messages(_events_attribute(attrs)), **attrs}
    attrs = as_genai(attrs) if isinstance(attrs, dict) else {}
    op = attrs.get("gen_ai.operation.name")
    if op not in CHAT_OPERATIONS | TOOL_OPERATIONS | AGENT_OPERATIONS and "gen_ai.output.messages" in attrs:
        # an operation named outside the convention (Latitude's ``completion``) whose span logs the messages a
        # model returned: a model call
        attrs = {**attrs, "gen_ai.operation.name": "chat", "gen_ai.operation.logged": op}
    start = span.get("start_time", span.get("startTimeUnixNano", 0))
    try:
        start_key = float(start) if isinstance(start, str | int | float) else 0.0
    except ValueError:
        start_key = 0.0  # ISO timestamps: keep file order (the sort below is stable)
    status = as_dict(span.get("status"))
    code = str(status.get("status_code") or status.get("code") or "").lower()
    return _Span(
        ref,
        json.dumps(span, ensure_ascii=False, default=str)[:4096],
        trace_id,
        span_id,
        start_key,
        attrs,
        status_error=code in ("error", "2", "status_code_error"),
    )


@dataclass(frozen=True)
class _Ran:
    """A tool span as its chat span's call is checked against it: the tool, the call id, the arguments it ran with."""

    name: str
    call_id: str | None
    arguments: Any


def _tool_spans_after(spans: list[_Span]) -> dict[str, list[_Ran]]:
    """For each chat span, the tool spans after it and before the next chat span, in order: the calls its output
    made as the tools that ran them logged them (any-agent logs a chat span's calls with names and arguments only,
    each tool span with ``gen_ai.tool.call.id`` and ``gen_ai.tool.args``)."""
    out: dict[str, list[_Ran]] = {}
    current: list[_Ran] | None = None
    for span in spans:
        op = span.attributes.get("gen_ai.operation.name")
        if op in CHAT_OPERATIONS:
            current = out.setdefault(span.span_id, [])
        elif op in TOOL_OPERATIONS and current is not None:
            name, call_id = span.attributes.get("gen_ai.tool.name"), span.attributes.get("gen_ai.tool.call.id")
            if isinstance(name, str):
                args = json_attr(span.attributes.get("gen_ai.tool.args"))
                current.append(_Ran(name, call_id if isinstance(call_id, str) and call_id else None, args))
    return out


def _take(ran: list[_Ran], name: Any) -> _Ran | None:
    """The first tool span of ``name`` not taken yet (taken: removed from ``ran``), or None."""
    hit = next((i for i, r in enumerate(ran) if r.name == name), None)
    return ran.pop(hit) if hit is not None else None


ARGUMENTS_DISAGREE = (
    "the chat span logs this call's arguments unlike the tool span that ran it: what the model emitted is not "
    "known (kept as context, with the arguments the tool ran with)"
)


def _arguments(value: Any) -> tuple[dict[str, Any], str | None]:
    """A logged call's arguments (parsed, verbatim text). Blank text is no text: a tracer that accumulates a
    streamed call's argument deltas logs ``""`` when none came (a call of no arguments: OpenInference's Anthropic
    spans, whose next request sends the same call with ``{}``), never what the model wrote."""
    return parse_arguments(None if isinstance(value, str) and not value.strip() else value)


class _TraceBuild:
    def __init__(self, path: Path, trace_id: str, trace: _Trace, skips: SkipTally):
        self.path = path
        self.trace_id = trace_id
        self.spans = sorted(trace.spans, key=lambda s: (s.start, s.order))
        self.skips = skips
        agent = next(
            (
                s.attributes.get("gen_ai.agent.name")
                for s in self.spans
                if s.attributes.get("gen_ai.operation.name") in AGENT_OPERATIONS
                and isinstance(s.attributes.get("gen_ai.agent.name"), str)
            ),
            None,
        )
        tools = next(
            (
                json_attr(s.attributes["gen_ai.tool.definitions"])
                for s in self.spans
                if "gen_ai.tool.definitions" in s.attributes
            ),
            None,
        )
        self.graph = MessageGraph(
            # as chat templates read them: the conventions' flat {type, name, parameters} as OpenAI function tools
            tools=openai_tools(tools, where="gen_ai.tool.definitions") if isinstance(tools, list) else None,
            graph_id=graph_id_for("otel", trace_id, path),
            policy=agent or DEFAULT_POLICY_NAME,
            metadata={"format": "otel", "trace_id": trace_id, **({"agent": agent} if agent else {})},
        )
        self.running: list[str] = []  # the reconstructed current conversation, as node ids
        self.pending: list[OptionCallPayload] = []
        self.call_names: dict[str, str] = {}
        self.tainted = False
        self.records = 0
        self.ran = _tool_spans_after(self.spans)

    def events(self) -> Iterator[ReadEvent]:
        rejects: list[ReadReject] = []
        for span in self.spans:
            op = span.attributes.get("gen_ai.operation.name")
            try:
                if op in CHAT_OPERATIONS:
                    self._chat(span)
                elif op in TOOL_OPERATIONS:
                    self._tool(span)
                elif op in AGENT_OPERATIONS:
                    self.records += 1
                else:
                    self.skips.add("non_genai_span", span.ref)
            except MsgtrainError as e:
                self.tainted = True
                rejects.append(
                    ReadReject(
                        SourceRef(str(self.path), span.ref), e.located(f"{self.path} ({span.ref})"), excerpt(span.raw)
                    )
                )
        yield from rejects
        if self.graph.nodes:
            yield ReadGraph(self.graph, SourceRef(str(self.path), self.spans[0].ref), records=self.records)
        elif self.records:
            self.skips.add("trace_without_messages", self.spans[0].ref, self.records)

    def _chat(self, span: _Span) -> None:
        attrs = span.attributes
        context = self._input(attrs)
        outputs = self._outputs(span)
        if not outputs:
            self.skips.add("chat_span_without_output", span.ref)
            return
        known_context = True
        if context is not None:
            parent: str | None = None
            ids: list[str] = []
            for msg in context:
                origin = Origin.CARRIED if msg.role == "assistant" else Origin.CONTEXT
                parent = self.graph.add_node(parent, msg, origin=origin)
                ids.append(parent)
            self.tainted = False
        else:
            ids = list(self.running)
            # Nothing recorded since the previous response (no tool result, no user turn): the caller must have
            # sent something this trace does not hold (e.g. a structured-output follow-up call), so the context
            # cannot be reconstructed.
            known_context = bool(ids) and self.graph.nodes[ids[-1]].message.role != "assistant"
        model = attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model")
        finish = json_attr(attrs.get("gen_ai.response.finish_reasons"))
        sampling = {
            k.removeprefix("gen_ai.request."): v
            for k, v in attrs.items()
            if k in ("gen_ai.request.temperature", "gen_ai.request.top_p", "gen_ai.request.max_tokens")
        }
        usage = {k.removeprefix("gen_ai.usage."): v for k, v in attrs.items() if k.startswith("gen_ai.usage.")}
        first_id: str | None = None
        for k, out in enumerate(outputs):
            reason = out.metadata.get("finish_reason") or (
                finish[k] if isinstance(finish, list) and k < len(finish) else None
            )
            meta = {**out.metadata, "span_id": span.span_id, **({"usage": usage} if usage else {})}
            if context is None:
                meta["context_reconstructed"] = True
            out = out.model_copy(update={"metadata": meta})
            trusted = known_context and not self.tainted and "why_not_trained" not in out.metadata
            origin = Origin.SAMPLED if trusted else Origin.CARRIED
            gen = Generation(
                model=model if isinstance(model, str) else None,
                sampling=sampling,
                finish_reason=reason if isinstance(reason, str) else None,
            )
            nid = self.graph.add_node(ids[-1] if ids else None, out, origin=origin, generation=gen)
            if first_id is None:
                first_id = nid
                self.pending = list(out.calls) if isinstance(out, OptionCallMessage) else []
                self.call_names.update({c.invocation_id: c.option_name for c in self.pending})
        assert first_id is not None
        self.running = [*ids, first_id]
        self.records += 1

    def _tool(self, span: _Span) -> None:
        attrs = span.attributes
        name = attrs.get("gen_ai.tool.name")
        call_id = attrs.get("gen_ai.tool.call.id")
        call = next((c for c in self.pending if c.invocation_id == call_id), None) if call_id else None
        if call is None and not call_id:
            call = next((c for c in self.pending if c.option_name == name), None)
        if call is None or not self.running:
            self.skips.add("tool_span_without_call", span.ref)
            self.tainted = True  # the next response saw a result the graph cannot place
            return
        self.pending.remove(call)
        value = attrs.get("gen_ai.tool.call.result", attrs.get("gen_ai.output"))
        result = OptionResultMessage(
            result=OptionResultPayload(
                invocation_id=call.invocation_id,
                option_name=call.option_name,
                result=value if value is not None else "",
                is_error=span.status_error,
            ),
            policy=RUNTIME_POLICY,
            role_hint_for_llm="tool",
            metadata={"span_id": span.span_id},
        )
        self.running.append(self.graph.add_node(self.running[-1], result, origin=Origin.CONTEXT))
        self.records += 1

    # ------------------------------------------------------------------ parsing
    def _input(self, attrs: dict[str, Any]) -> list[AnyMessage] | None:
        raw = attrs.get("gen_ai.input.messages")
        if raw is None:
            return None
        messages = json_attr(raw)
        if not isinstance(messages, list):
            raise ValidationError("gen_ai.input.messages is not a list of messages", code="bad_content")
        out: list[AnyMessage] = []
        system = json_attr(attrs.get("gen_ai.system_instructions"))
        if isinstance(system, list) and system:
            out.append(PartsMessage(parts=tuple(_parts(system)), role_hint_for_llm="system", policy="system"))
        elif isinstance(system, str) and system:
            out.append(PartsMessage(parts=(TextPart(text=system),), role_hint_for_llm="system", policy="system"))
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise ValidationError(f"gen_ai.input.messages[{i}] is not an object", code="bad_message")
            if "parts" in m:
                out.extend(self._typed_message(m, f"gen_ai.input.messages[{i}]"))
            else:
                msg = from_openai_message(m, index=i, call_names=self.call_names, policy=self.graph.policy)
                if isinstance(msg, OptionCallMessage):
                    self.call_names.update({c.invocation_id: c.option_name for c in msg.calls})
                out.append(msg)
        return out

    def _outputs(self, span: _Span) -> list[AnyMessage]:
        attrs = span.attributes
        typed = json_attr(attrs.get("gen_ai.output.messages"))
        if isinstance(typed, list):
            out: list[AnyMessage] = []
            for i, m in enumerate(typed):
                if not isinstance(m, dict):
                    raise ValidationError(f"gen_ai.output.messages[{i}] is not an object", code="bad_message")
                where = f"gen_ai.output.messages[{i}]"
                if "parts" in m:
                    msgs = self._typed_message({**m, "role": m.get("role", "assistant")}, where)
                else:  # a chat API's own message (OpenAI, Anthropic content blocks), as older conventions log it
                    data = {k: v for k, v in m.items() if k != "finish_reason"}
                    msgs = [from_openai_message({**data, "role": m.get("role", "assistant")}, policy=self.graph.policy)]
                for msg in msgs:
                    meta = {"finish_reason": m["finish_reason"]} if isinstance(m.get("finish_reason"), str) else {}
                    out.append(msg.model_copy(update={"metadata": {**msg.metadata, **meta}}))
            return out
        raw = attrs.get("gen_ai.output")
        if raw is None:
            return []
        value = json_attr(raw) if attrs.get("gen_ai.output.type") == "json" else raw
        if isinstance(value, list) and value and all(isinstance(v, dict) and "tool.name" in v for v in value):
            calls = []
            ran = list(self.ran.get(span.span_id, ()))
            disagree = False
            for k, v in enumerate(value):
                args, raw_args = _arguments(v.get("tool.args"))
                tool = _take(ran, v["tool.name"])
                if tool is not None and isinstance(tool.arguments, dict) and tool.arguments != args:
                    args, raw_args, disagree = tool.arguments, None, True  # the arguments the model's call had
                call_id = v.get("tool.call.id") or (tool.call_id if tool is not None else None)
                call_id = call_id or synthetic_call_id(self.trace_id, span.span_id, k)
                calls.append(
                    OptionCallPayload(
                        invocation_id=str(call_id),
                        option_name=str(v["tool.name"]),
                        arguments=args,
                        raw_arguments=raw_args,
                    )
                )
            meta = {"why_not_trained": ARGUMENTS_DISAGREE} if disagree else {}
            return [
                OptionCallMessage(
                    calls=tuple(calls), policy=self.graph.policy, role_hint_for_llm="assistant", metadata=meta
                )
            ]
        text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
        return [PartsMessage(parts=(TextPart(text=text),), policy=self.graph.policy, role_hint_for_llm="assistant")]

    def _typed_message(self, m: dict[str, Any], where: str) -> list[AnyMessage]:
        """A semantic-convention message ``{role, parts: [...]}`` (one message, or one result per response)."""
        role = m.get("role")
        items = as_list(m.get("parts"))
        parts: list[Part] = []
        calls: list[OptionCallPayload] = []
        results: list[AnyMessage] = []
        for k, p in enumerate(items):
            ptype = p.get("type") if isinstance(p, dict) else None
            if ptype == "tool_call":
                args, raw = _arguments(p.get("arguments"))
                call_id = p.get("id") or synthetic_call_id(self.trace_id, where, k)
                calls.append(
                    OptionCallPayload(
                        invocation_id=str(call_id),
                        option_name=str(p.get("name") or ""),
                        arguments=args,
                        raw_arguments=raw,
                    )
                )
                self.call_names[str(call_id)] = str(p.get("name") or "")
            elif ptype == "tool_call_response":
                call_id = str(p.get("id"))
                results.append(
                    OptionResultMessage(
                        result=OptionResultPayload(
                            invocation_id=call_id,
                            option_name=self.call_names.get(call_id, ""),
                            result=p.get("response", p.get("result")),
                        ),
                        policy=RUNTIME_POLICY,
                        role_hint_for_llm="tool",
                    )
                )
            else:
                parts.extend(_parts([p], where))
        if results:
            if not all(r.result.option_name for r in results if isinstance(r, OptionResultMessage)):
                raise ValidationError(
                    "tool_call_response answers no earlier tool_call",
                    where=where,
                    code="unpaired_result",
                    hint="the tool_call part must come first",
                )
            return results
        if role == "assistant" and calls:
            return [
                OptionCallMessage(
                    parts=tuple(parts), calls=tuple(calls), policy=self.graph.policy, role_hint_for_llm="assistant"
                )
            ]
        if role not in ("system", "user", "assistant"):
            raise ValidationError(f"unknown role {role!r}", where=where, code="unknown_role")
        policy = self.graph.policy if role == "assistant" else role
        return [PartsMessage(parts=tuple(parts), role_hint_for_llm=role, policy=policy)]


def _parts(items: list[Any], where: str = "gen_ai.system_instructions") -> list[Part]:
    parts: list[Part] = []
    for k, p in enumerate(items):
        ptype = p.get("type") if isinstance(p, dict) else None
        if isinstance(p, str):
            parts.append(TextPart(text=p))
        elif ptype == "text" and isinstance(p, dict):
            parts.append(TextPart(text=str(p.get("content", p.get("text", "")))))
        elif ptype in ("reasoning", "thinking") and isinstance(p, dict):
            parts.append(ReasoningPart(text=str(p.get("content", ""))))
        elif ptype in ("uri", "blob", "file") and isinstance(p, dict):
            modality = p.get("modality") if p.get("modality") in ("image", "audio", "video") else "document"
            mime = p.get("mime_type")
            url = p.get("uri") or p.get("file_id")
            if ptype == "blob":
                url = f"data:{mime or 'application/octet-stream'};base64,{p.get('content', '')}"
            if not isinstance(url, str) or not url:
                raise ValidationError(f"parts[{k}] {ptype} part has no reference", where=where, code="bad_content")
            parts.append(MediaPart(modality=modality, url=url, mime=mime if isinstance(mime, str) else None))
        else:
            raise ValidationError(
                f"parts[{k}] has unknown type {ptype!r}",
                where=where,
                code="bad_content",
                hint="supported: text, reasoning, tool_call, tool_call_response, uri, blob, file",
            )
    return parts


READER = OtelGenAiReader()
