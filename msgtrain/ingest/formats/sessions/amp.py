"""Amp threads (``~/.local/share/amp/threads/T-<id>.json``, and ``amp threads export``).

A thread is one JSON document ``{"v", "id": "T-...", "created", "title", "messages": [...], "agentMode",
"nextMessageId", "relationships", "env", "meta"}``; each message ``{"role", "messageId", "content": [blocks], "state",
"usage", "meta"}``, its blocks in the Anthropic Messages shape with Amp's own spelling of a tool's result:

- ``user``: ``text`` / ``image`` blocks, and ``tool_result`` blocks that name their call by ``toolUseID`` and keep
  what the tool's run ended with under ``run``: ``{"status": "done", "result": <text or JSON value>}``, or another
  status (``error`` with its ``error``, ``rejected-by-user``, ``cancelled``) whose message to the model Amp builds
  from it and does not log;
- ``assistant``: ``thinking`` / ``redacted_thinking``, ``text`` and ``tool_use`` blocks (one model response each),
  ``state.type`` ``complete`` for a finished response, ``usage.model`` the model that wrote it;
- ``info``: what Amp shows beside the conversation; a ``summary`` block is the summary the thread was compacted to; a
  ``manual_bash_invocation`` (a command the user ran, not ``hidden``) or a non-empty ``text`` is sent to the model with
  the next request, in a form Amp builds and does not log.

Mapping: each ``assistant`` message is one sampled call after the messages before it; a done run's result is the
tool result the model was sent (a text as it is, a JSON value as the JSON text ``JSON.stringify`` writes); user text
and images as they are. Safe readings: a thread logs neither the system prompt nor the tool schemas Amp sent (the
graph is marked ``context_incomplete`` for both); a result the log does not hold (a run that did not end ``done``), a
compaction summary (what the model was sent after it is not in the thread), an info message Amp sends (a command's
run, a note) and a response that did not complete (``state.type`` other than ``complete``) each end what is known of
the context: the replies from there on are kept
as ``carried`` context, never trained, each saying why. A thread forked from another repeats its messages: the run's
duplicate check trains each of them once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.conversation_files import (
    Conversation,
    ConversationLayout,
    Converted,
    Step,
    base_graph_id,
    build_linear_graph,
    read_conversation_file,
)
from msgtrain.ingest.formats import Marks, ReadItem, head_shape, quoted
from msgtrain.ingest.formats.api.anthropic import AnthropicConverter
from msgtrain.model.completeness import mark_unlogged_context
from msgtrain.model.graph import Origin

AMP_ROLES = frozenset({"user", "assistant", "info"})
UNLOGGED = "Amp threads log neither the system prompt nor the tool schemas Amp sent"
COMPACTED = "the thread was compacted to a summary here: what the model was sent after it is not in the thread"
RESULT_RENDERING = "a done run's JSON result is sent as the JSON text JSON.stringify writes"


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and value.get("role") in AMP_ROLES and isinstance(value.get("content"), list)


LAYOUT = ConversationLayout(is_message=_is_message, message_keys=("messages",))


def _result_block(block: dict[str, Any], where: str) -> tuple[dict[str, Any] | None, str | None]:
    """An Amp ``tool_result`` block as the Anthropic block the model was sent, or (None, why) when the log does not
    hold what was sent (a run that did not end ``done``)."""
    run = block.get("run")
    call_id = block.get("toolUseID", block.get("tool_use_id"))
    if not isinstance(run, dict):
        if "content" in block:  # already as the API has it
            return {
                "type": "tool_result",
                "tool_use_id": call_id,
                **{k: v for k, v in block.items() if k != "type"},
            }, None
        raise ValidationError("tool_result holds no run", where=where, code="bad_tool_result")
    status = run.get("status")
    if status != "done":
        return None, f"the result of call {call_id} ended {status!r}: what Amp sent the model for it is not logged"
    result = run.get("result")
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, separators=(",", ":"))
    return {"type": "tool_result", "tool_use_id": call_id, "content": text}, None


def amp_steps(messages: list[Any]) -> list[Step]:
    """The thread's messages as steps; from the first point the log stops holding what the model was sent, every
    reply is ``carried`` with the reason (module docstring)."""
    converter = AnthropicConverter(policy="amp")
    steps: list[Step] = []
    unknown: str | None = None  # why the context of the replies from here on is not in the log
    for i, raw in enumerate(messages):
        where = f"messages[{i}]"
        role = raw.get("role") if isinstance(raw, dict) else None
        if role not in AMP_ROLES or not isinstance(raw.get("content"), list):
            raise ValidationError(
                f"message with role {role!r} and no content blocks",
                where=where,
                code="unknown_role",
                hint="an Amp message is {role: user | assistant | info, content: [blocks]}",
            )
        blocks: list[Any] = raw["content"]
        if role == "info":
            if any(isinstance(b, dict) and b.get("type") == "summary" for b in blocks):
                unknown = (
                    unknown or "the thread was compacted to a summary here: what the model was sent after is not in it"
                )
            elif any(_sent_info(b) for b in blocks):
                unknown = unknown or (
                    f"{where} holds what Amp sends the model with the next request (a command the user ran, or a "
                    "note), in a form the log does not hold"
                )
            continue  # shown beside the conversation; what of it is sent, Amp builds and does not log
        if role == "user":
            sent: list[Any] = []
            for j, block in enumerate(blocks):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    converted, why = _result_block(block, f"{where}.content[{j}]")
                    if converted is None:
                        unknown = unknown or why
                        converted = {"type": "tool_result", "tool_use_id": block.get("toolUseID"), "content": ""}
                    sent.append(converted)
                else:
                    sent.append(block)
            blocks = sent
        converted_messages, _ = converter.message({"role": role, "content": blocks}, i)
        state = raw.get("state")
        interrupted = role == "assistant" and isinstance(state, dict) and state.get("type", "complete") != "complete"
        for message in converted_messages:
            origin = None
            if message.role == "assistant":
                model = raw.get("usage", {}).get("model") if isinstance(raw.get("usage"), dict) else None
                metadata = dict(message.metadata) | ({"model": model} if isinstance(model, str) else {})
                why = unknown or (
                    f"the response did not complete (state {state.get('type')!r})" if interrupted else None
                )
                if why is not None:
                    metadata["why_not_trained"] = why
                    origin = Origin.CARRIED
                message = message.model_copy(update={"metadata": metadata})
            steps.append(Step(message, origin, index=i))
        if interrupted:
            unknown = unknown or (
                f"the response at {where} did not complete (state {state.get('type')!r}): what the model was sent "
                "after it is not in the thread"
            )
    return steps


def _sent_info(block: Any) -> bool:
    """An info block Amp sends the model (a shell command the user ran and its output, a non-empty note), as opposed
    to one only shown beside the thread (a hidden invocation, an empty text)."""
    if not isinstance(block, dict):
        return False
    if block.get("type") == "manual_bash_invocation":
        return not block.get("hidden", False)
    return block.get("type") == "text" and bool(str(block.get("text") or "").strip())


class AmpReader:
    name = "amp"
    description = "Amp threads (T-*.json: messages of Anthropic-shaped blocks, tool_result runs keyed by toolUseID)"
    example = "sample_logs/amp/T-0e5a.json"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["messageId"]))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        if not shape.has(".messages[].messageId", ".messages[].content[].type"):
            return False
        return shape.has(".messages[].content[].toolUseID") or shape.has(".nextMessageId") or shape.has(".v", ".id")

    def read(self, path: Path) -> Iterator[ReadItem]:
        yield from read_conversation_file(path, LAYOUT, lambda conv: self.convert(path, conv))

    def convert(self, path: Path, conv: Conversation) -> Converted:
        container = conv.container
        metadata: dict[str, Any] = {"source_format": self.name, "tool_results": RESULT_RENDERING}
        for key in ("id", "title", "agentMode"):
            if isinstance(container.get(key), str):
                metadata[f"amp_{key}"] = container[key]
        graph = build_linear_graph(
            amp_steps(conv.messages),
            base_id=base_graph_id(path, conv.ref),
            incomplete_from=conv.incomplete_from,
            metadata=metadata,
            policy="amp",
        )
        mark_unlogged_context(graph, UNLOGGED)
        extras = {k: v for k, v in container.items() if k in ("id", "title", "created", "agentMode", "relationships")}
        return Converted(graph, extras)


READER = AmpReader()
