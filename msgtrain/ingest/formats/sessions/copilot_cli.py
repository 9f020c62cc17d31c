"""GitHub Copilot CLI sessions (``~/.copilot/session-state/<session id>.jsonl``): one event per line,
``{"type", "data", "id", "timestamp", "parentId"}``, the events of one session chained by ``parentId``.

What is read (one graph per file, ``copilot-cli:<sessionId>``, policy ``copilot-cli``):
- ``session.start``: the session id, Copilot version and repository context (metadata).
- ``system.message``: the system prompt (context). Copilot records it again before each user message; a copy equal
  to the current one is the same prompt and is skipped (``repeated_system_message``).
- ``user.message``: a user message; its text is ``transformedContent`` (what the model was sent: the prompt with
  the date and any expansion Copilot adds), else ``content``.
- ``assistant.message``: one model response: ``reasoningText`` as reasoning (``reasoningOpaque``, the provider's
  encrypted reasoning, as its signature), ``content`` as text, ``toolRequests`` ``{toolCallId, name, arguments}`` as
  parallel calls. The model is the message's ``model`` when logged, else the session's current one
  (``session.model_change``), with the reasoning effort.
- ``tool.execution_complete``: the result of the call with that ``toolCallId``: ``result.content`` (the text Copilot
  returns to the model; ``detailedContent`` is the terminal's display form; older builds log the text itself as
  ``result``), an error (``error.message``) when ``success`` is false.
- ``session.shutdown``: per-model request counts and token usage (metadata).

Skipped (no conversation content): ``assistant.turn_start`` / ``turn_end``, ``tool.execution_start`` (the call is in
the assistant message), ``session.info`` / ``mode_changed`` / ``model_change`` / ``task_complete`` / ``shutdown``,
other ``session.*`` events and streaming/ephemeral events (``assistant.reasoning``, deltas, ``permission.*``):
``non_message_record:<type>``.

What the log cannot tell, and the safe readings chosen:
- ``session.compaction_complete`` (unless it failed), ``session.truncation`` and ``session.snapshot_rewind``: the
  history Copilot sends from there on is not the one its events logged (a summary for the turns a compaction
  removed, a history cut to the window, a rewind): the branch is tainted and later responses are ``carried``.
- The tool definitions sent with each request are not in the file (only their token count): the graph has none,
  as for the other agent logs.
- Whether ``result.content`` is exactly what reached the model (Copilot may truncate long outputs): it is the
  LLM-facing field of the result, so it is used as is.
- A tool execution whose ``toolCallId`` no assistant message requested cannot be placed in the model's context
  (``tool_execution_without_request``): the branch is tainted and later responses are ``carried``.
- A changed system prompt mid-session: the earlier history is kept, the new prompt appended, and later responses
  are ``carried`` (the model saw the new prompt at the start of its context, which the graph cannot hold on this
  branch).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.session_common import Chain, SkipTally, as_dict, as_list, graph_id_for
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadReject,
    SourceRef,
    excerpt,
    head_shape,
    iter_json_lines,
    quoted,
)
from msgtrain.model.completeness import mark_unlogged_context
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.message import (
    RUNTIME_POLICY,
    Generation,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultMessage,
    OptionResultPayload,
    Part,
    PartsMessage,
    ReasoningPart,
    TextPart,
)
from msgtrain.model.openai import parse_arguments

POLICY = "copilot-cli"


# The event types detection looks for (one of them in the head).
_DETECTED_TYPES = frozenset({"session.start", "user.message", "assistant.message", "tool.execution_complete"})


class CopilotCliReader:
    name = "copilot_cli"
    description = "GitHub Copilot CLI sessions (JSONL events: session.start, user/assistant.message, tool.execution_*)"
    example = "sample_logs/copilot_cli/session.jsonl"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(_DETECTED_TYPES))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        types = shape.values_at(".type")
        return shape.layout in ("jsonl", "object") and shape.has(".type", ".data") and bool(types & _DETECTED_TYPES)

    def read(self, path: Path) -> Iterator[ReadEvent]:
        build = _Build(path)
        for lineno, raw, value in iter_json_lines(path):
            ref = f"line {lineno}"
            if isinstance(value, MsgtrainError):
                build.chain.taint = build.chain.taint or f"rejected {ref}"
                yield ReadReject(SourceRef(str(path), ref), value, excerpt(raw))
                continue
            try:
                build.event(value, ref)
            except MsgtrainError as e:
                build.chain.taint = build.chain.taint or f"rejected {ref}"
                yield ReadReject(SourceRef(str(path), ref), e.located(f"{path}:{lineno}"), excerpt(raw))
        yield from build.finish()


# Events after which the history Copilot sends is not the one its events logged: a compaction (its summary replaces
# the turns it removed), a truncation to the context window, a rewind to an earlier snapshot.
_HISTORY_CHANGES = {"session.compaction_complete", "session.truncation", "session.snapshot_rewind"}


class _Build:
    def __init__(self, path: Path):
        self.path = path
        self.meta: dict[str, Any] = {"format": "copilot_cli"}
        self.graph = MessageGraph(graph_id=graph_id_for("copilot-cli", None, path), policy=POLICY)
        self.chain = Chain(self.graph)
        self.skips = SkipTally(path)
        self.records = 0
        self.system: str | None = None
        self.model: str | None = None
        self.effort: str | None = None
        self.calls: dict[str, str] = {}  # requested call id -> tool name

    def event(self, value: Any, ref: str) -> None:
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            raise ValidationError("event is not an object with a 'type'", code="bad_record")
        etype, data = value["type"], as_dict(value.get("data"))
        if etype == "session.start":
            self.records += 1
            sid = data.get("sessionId")
            if isinstance(sid, str):
                self.graph.graph_id = graph_id_for("copilot-cli", sid, self.path)
                self.meta["session_id"] = sid
            for key in ("copilotVersion", "producer", "context", "startTime"):
                if data.get(key) is not None:
                    self.meta[key] = data[key]
            return
        if etype == "session.model_change":
            self.model = data.get("newModel") if isinstance(data.get("newModel"), str) else self.model
            self.effort = data.get("reasoningEffort") if isinstance(data.get("reasoningEffort"), str) else self.effort
        elif etype == "session.shutdown":
            for key in ("modelMetrics", "currentModel", "totalPremiumRequests", "codeChanges"):
                if data.get(key) is not None:
                    self.meta[key] = data[key]
        if etype in _HISTORY_CHANGES and data.get("success") is not False:
            # Copilot rewrote the history it sends (a summary for the turns it dropped, a truncated or rewound
            # history) in a form the log does not hold: what follows was sampled in a context the graph lacks.
            self.chain.taint = self.chain.taint or f"{etype} at {ref}"
            self.skips.add(f"non_message_record:{etype}", ref)
        elif etype == "system.message":
            self._system(data, ref)
        elif etype == "user.message":
            self._user(data)
        elif etype == "assistant.message":
            self._assistant(data)
        elif etype == "tool.execution_complete":
            self._result(data, ref)
        else:
            self.skips.add(f"non_message_record:{etype}", ref)

    def _system(self, data: dict[str, Any], ref: str) -> None:
        text = data.get("content")
        if not isinstance(text, str):
            raise ValidationError("system.message has no text content", code="empty_content")
        if text == self.system:
            self.skips.add("repeated_system_message", ref)
            return
        if self.system is not None:
            self.chain.taint = self.chain.taint or "system prompt changed"
        self.system = text
        self.records += 1
        self.chain.append(PartsMessage(parts=(TextPart(text=text),), role_hint_for_llm="system", policy="system"))

    def _user(self, data: dict[str, Any]) -> None:
        text = data.get("transformedContent")
        if not isinstance(text, str) or not text:
            text = data.get("content")
        if not isinstance(text, str) or not text:
            raise ValidationError("user.message has no content", code="empty_content")
        meta = {"attachments": data["attachments"]} if data.get("attachments") else {}
        self.records += 1
        self.chain.append(
            PartsMessage(parts=(TextPart(text=text),), role_hint_for_llm="user", policy="user", metadata=meta)
        )

    def _assistant(self, data: dict[str, Any]) -> None:
        parts: list[Part] = []
        if isinstance(data.get("reasoningText"), str) and data["reasoningText"]:
            opaque = data.get("reasoningOpaque") if isinstance(data.get("reasoningOpaque"), str) else None
            parts.append(ReasoningPart(text=data["reasoningText"], signature=opaque))
        if isinstance(data.get("content"), str) and data["content"]:
            parts.append(TextPart(text=data["content"]))
        calls = []
        for k, req in enumerate(as_list(data.get("toolRequests"))):
            req = as_dict(req)
            if not isinstance(req.get("toolCallId"), str) or not isinstance(req.get("name"), str):
                raise ValidationError(f"toolRequests[{k}] needs a toolCallId and a name", code="bad_tool_call")
            args, raw = parse_arguments(req.get("arguments"))
            calls.append(
                OptionCallPayload(
                    invocation_id=req["toolCallId"], option_name=req["name"], arguments=args, raw_arguments=raw
                )
            )
        meta = {k: data[k] for k in ("messageId", "outputTokens", "requestId") if data.get(k) is not None}
        if calls:
            self.calls.update({c.invocation_id: c.option_name for c in calls})
            message: OptionCallMessage | PartsMessage = OptionCallMessage(
                parts=tuple(parts), calls=tuple(calls), policy=POLICY, role_hint_for_llm="assistant", metadata=meta
            )
        elif parts:
            message = PartsMessage(parts=tuple(parts), policy=POLICY, role_hint_for_llm="assistant", metadata=meta)
        else:
            raise ValidationError("assistant.message has no content and no tool requests", code="empty_assistant")
        self.records += 1
        sampling = {"reasoning_effort": self.effort} if self.effort else {}
        model = data.get("model") if isinstance(data.get("model"), str) else self.model
        generation = Generation(model=model, sampling=sampling) if model else None
        self.chain.append(message, Origin.SAMPLED, generation)

    def _result(self, data: dict[str, Any], ref: str) -> None:
        call_id = data.get("toolCallId")
        if not isinstance(call_id, str) or call_id not in self.calls:
            # The model never asked for it: where (or whether) its output reached the model is unknown.
            self.skips.add("tool_execution_without_request", ref)
            self.chain.taint = self.chain.taint or "tool execution without request"
            return
        raw_result = data.get("result")
        # Older builds log the result text itself; newer ones {content, detailedContent}.
        content = raw_result if isinstance(raw_result, str) else as_dict(raw_result).get("content")
        ok = data.get("success") is not False
        error = as_dict(data.get("error"))
        text = content if content is not None else (error.get("message") or "")
        self.records += 1
        self.chain.append(
            OptionResultMessage(
                result=OptionResultPayload(
                    invocation_id=call_id, option_name=self.calls[call_id], result=text, is_error=not ok
                ),
                policy=RUNTIME_POLICY,
                role_hint_for_llm="tool",
            ),
            Origin.CONTEXT,
        )

    def finish(self) -> Iterator[ReadEvent]:
        self.graph.metadata.update(self.meta)
        if self.graph.nodes:
            mark_unlogged_context(self.graph, "Copilot CLI sessions log no tool schemas")
            yield ReadGraph(self.graph, SourceRef(str(self.path), "line 1"), records=self.records)
        elif self.records:
            self.skips.add("session_without_messages", "line 1", self.records)
        yield from self.skips.events()


READER = CopilotCliReader()
