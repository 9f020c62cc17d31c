"""Gemini CLI's headless stream (``gemini -p ... --output-format stream-json``): one JSON event per line.

Events (google-gemini/gemini-cli ``docs/cli/headless.md``, "Streaming JSON output"): ``init`` (session id, model),
``message`` (``role`` user | assistant, ``content``; assistant text arrives as ``delta: true`` fragments),
``tool_use`` (``tool_name``, ``tool_id``, ``parameters``: the function call the model made), ``tool_result``
(``tool_id``, ``status``, ``output``), ``error`` and the closing ``result`` (session totals).

How it is read (one graph per file, linear):
- user messages are context; an assistant turn is everything the model produced between two inputs: its text
  fragments joined in order, then its calls (``tool_use`` in order, parallel calls in one turn); it is sampled in
  the context before it. Results follow it, paired by ``tool_id``.
- ``init`` and ``result`` hold no message (skipped by type); an ``error`` event or an event of an unknown type means
  the turn it interrupts, and what follows, were not seen whole: those replies are ``carried``.
- The system prompt and tool schemas are not in the stream: ``context_incomplete``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError
from msgtrain.ingest.common.session_common import Chain, SkipTally, graph_id_for
from msgtrain.ingest.formats import ReadEvent, ReadGraph, ReadReject, SourceRef, excerpt, head_shape, iter_json_lines
from msgtrain.model.completeness import mark_unlogged_context
from msgtrain.model.graph import MessageGraph
from msgtrain.model.message import (
    RUNTIME_POLICY,
    Generation,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultMessage,
    OptionResultPayload,
    PartsMessage,
    TextPart,
)

EVENT_TYPES = frozenset({"init", "message", "tool_use", "tool_result", "error", "result"})
POLICY = "gemini-cli"
_UNLOGGED = "Gemini CLI's stream logs neither the system prompt nor the tool schemas"


def is_stream_head(head: bytes) -> bool:
    """A Gemini CLI stream: JSONL whose first event is ``init`` with a session id and whose events are all of the
    stream's types."""
    shape = head_shape(head)
    types = shape.values_at(".type")
    return shape.layout == "jsonl" and "init" in types and types <= EVENT_TYPES and shape.has(".session_id")


class _Turn:
    """What the model produced since the last input: text fragments, calls, and the lines they came from."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: list[OptionCallPayload] = []
        self.refs: list[str] = []


def read_stream(path: Path) -> Iterator[ReadEvent]:
    skips = SkipTally(path)
    graph: MessageGraph | None = None
    chain: Chain | None = None
    model: str | None = None
    turns = [_Turn()]
    names: dict[str, str] = {}
    records = 0
    first_ref = "line 1"

    def flush() -> None:
        nonlocal records
        turn = turns[-1]
        if chain is None or not (turn.text or turn.calls):
            return
        parts = (TextPart(text="".join(turn.text)),) if turn.text else ()
        message: Any = (
            OptionCallMessage(parts=parts, calls=tuple(turn.calls), policy=POLICY, role_hint_for_llm="assistant")
            if turn.calls
            else PartsMessage(parts=parts, policy=POLICY, role_hint_for_llm="assistant")
        )
        chain.append(message, generation=Generation(model=model) if model else None)
        records += len(turn.refs)
        turns.append(_Turn())

    for lineno, raw, obj in iter_json_lines(path):
        ref = f"line {lineno}"
        if isinstance(obj, MsgtrainError) or not isinstance(obj, dict):
            if chain is not None:
                chain.taint = chain.taint or f"unreadable {ref}"
            err = obj if isinstance(obj, MsgtrainError) else None
            if err is not None:
                yield ReadReject(SourceRef(str(path), ref), err, excerpt(raw))
            continue
        kind = obj.get("type")
        if kind == "init":
            model = obj.get("model") if isinstance(obj.get("model"), str) else None
            sid = obj.get("session_id") if isinstance(obj.get("session_id"), str) else None
            graph = MessageGraph(
                graph_id=graph_id_for("gemini-cli", sid, path),
                policy=POLICY,
                metadata={"format": "gemini_cli_stream", **({"session_id": sid} if sid else {})},
            )
            chain, first_ref = Chain(graph), ref
            skips.add("non_message_record:init", ref)
        elif chain is None or kind not in EVENT_TYPES or kind == "error":
            if chain is not None:
                chain.taint = chain.taint or f"{kind} event at {ref}"
            skips.add(f"non_message_record:{kind}", ref)
        elif kind == "result":
            flush()
            skips.add("non_message_record:result", ref)
        elif kind == "message" and obj.get("role") == "assistant":
            turns[-1].text.append(str(obj.get("content") or ""))
            turns[-1].refs.append(ref)
        elif kind == "tool_use":
            call_id, name = str(obj.get("tool_id") or ref), str(obj.get("tool_name") or "")
            args = obj.get("parameters")
            turns[-1].calls.append(
                OptionCallPayload(
                    invocation_id=call_id, option_name=name, arguments=args if isinstance(args, dict) else {}
                )
            )
            names[call_id] = name
            turns[-1].refs.append(ref)
        elif kind == "tool_result":
            flush()
            call_id = str(obj.get("tool_id") or "")
            result = OptionResultMessage(
                result=OptionResultPayload(
                    invocation_id=call_id,
                    option_name=names.get(call_id, ""),
                    result=obj.get("output", obj.get("error", "")),
                    is_error=obj.get("status") == "error",
                ),
                policy=RUNTIME_POLICY,
                role_hint_for_llm="tool",
            )
            chain.append(result)
            records += 1
        else:  # a user message
            flush()
            text = TextPart(text=str(obj.get("content") or ""))
            chain.append(PartsMessage(parts=(text,), role_hint_for_llm="user", policy="user"))
            records += 1
    flush()
    if graph is not None and graph.nodes:
        mark_unlogged_context(graph, _UNLOGGED)
        yield ReadGraph(graph, SourceRef(str(path), first_ref), records=records)
    yield from skips.events()
