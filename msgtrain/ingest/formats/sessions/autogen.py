"""AutoGen (0.4+, ``autogen-core`` / ``autogen-agentchat``) saved conversations.

What is read (one JSON document; each conversation found in it is one record and one graph):
- **Model contexts**: lists of ``autogen_core.models`` messages, each tagged with its ``type`` — ``SystemMessage``,
  ``UserMessage`` (``content``, ``source``), ``AssistantMessage`` (``content`` a string or a list of
  ``FunctionCall`` ``{id, name, arguments}``, ``thought`` as reasoning), ``FunctionExecutionResultMessage``
  (``content``: ``{call_id, name, content, is_error}`` results). They are what the model client was sent: an
  agent's saved state holds one under ``llm_context.messages`` (``agent.save_state()``, a team's
  ``agent_states``), wherever it sits in the document. Each ``AssistantMessage`` is ``sampled`` in the messages
  before it.
- **Chat messages** (``TaskResult.messages``, ``team.run()`` results): ``TextMessage``, ``ToolCallRequestEvent``
  (calls), ``ToolCallExecutionEvent`` (results), ``ThoughtEvent`` (the reasoning of the next request); messages from
  ``source: "user"`` are the user's, the others the agent's. ``ToolCallSummaryMessage`` is the agent's summary of
  results it returns without a model call: not a turn, and not in its model context. A list in which several
  agents speak is rejected (``multi_agent``): each agent saw its own context, which the list does not hold; save
  each agent's state instead. A team's saved state holds both: its manager's ``message_thread`` beside each agent's
  model context; a chat list whose every agent turn one of the document's model contexts holds is skipped
  (``team_transcript``), those turns read from the contexts.

Context completeness: an AssistantAgent keeps its system message and tool schemas apart from its model context and
sends them with every call: a context without a ``SystemMessage`` is marked context-incomplete (``system_prompt``),
and one with function calls ``tools`` too (the saved state does not hold the schemas).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.call_log import Call, CallLogGraph, Continuations
from msgtrain.ingest.common.conversation_files import Step, base_graph_id, build_linear_graph
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadItem,
    ReadReject,
    ReadSkip,
    RecordTask,
    SourceRef,
    excerpt,
    head_shape,
    load_json_document,
    quoted,
)
from msgtrain.model.completeness import mark_context_incomplete
from msgtrain.model.graph import Origin
from msgtrain.model.message import OptionCallMessage
from msgtrain.model.openai import from_openai_messages

POLICY = "autogen"
LLM_TYPES = frozenset({"SystemMessage", "UserMessage", "AssistantMessage", "FunctionExecutionResultMessage"})
CHAT_TYPES = frozenset(
    {"TextMessage", "ToolCallRequestEvent", "ToolCallExecutionEvent", "ToolCallSummaryMessage", "ThoughtEvent"}
)
_NOT_IN_CONTEXT = frozenset({"ToolCallSummaryMessage", "ModelClientStreamingChunkEvent", "MemoryQueryEvent"})
_TURN_TYPES = frozenset({"TextMessage", "ToolCallRequestEvent"})  # a chat list's model turns: a reply, its calls


class AutogenReader:
    name = "autogen"
    description = "AutoGen 0.4+ model contexts (llm_context / LLMMessage lists) and agentchat TaskResult messages"
    example = "sample_logs/autogen/agent_state.json"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["AssistantMessage", "UserMessage", "TextMessage", "ToolCallRequestEvent"]))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        types = frozenset().union(*(vals for p, vals in shape.values.items() if p.endswith(".type")))
        return bool(types & LLM_TYPES and types & {"AssistantMessage", "UserMessage"}) or bool(
            types & {"TextMessage", "ToolCallRequestEvent"} and any(p.endswith(".source") for p in shape.paths)
        )

    def read(self, path: Path) -> Iterator[ReadItem]:
        doc = load_json_document(path)
        found = list(_conversations(doc, ""))
        if not found:
            yield ReadSkip(SourceRef(str(path), "file"), "no AutoGen message list in the document")
            return
        calls = [(where, items, reply) for where, kind, items, reply in found if reply is not None]
        if calls:  # model calls logged with their result: read as a call log (msgtrain.ingest.common.call_log)
            ref = SourceRef(str(path), "file")
            yield RecordTask(ref, partial(_call_events, path, calls), records=len(calls), raw=None)
        sampled = {_said(m) for _, kind, items, _ in found if kind == "llm" for m in items if _sampled_in(m)}
        for where, kind, items, reply in found:
            if reply is None:
                ref = SourceRef(str(path), where or "file")
                if kind == "chat" and _transcript_of(items, sampled):
                    yield ReadSkip(ref, TEAM_TRANSCRIPT)
                    continue
                yield RecordTask(ref, partial(_events, path, ref, kind, items), raw=items)


# Why a team's chat list beside its agents' model contexts is not read: a transcript of turns those contexts hold.
TEAM_TRANSCRIPT = "team_transcript: each agent's turns in it are read from that agent's own model context"


def _sampled_in(message: Any) -> bool:
    return isinstance(message, dict) and message.get("type") == "AssistantMessage"


def _said(message: dict[str, Any]) -> str:
    return json.dumps(message.get("content"), sort_keys=True, default=str)


def _transcript_of(items: list[Any], sampled: set[str]) -> bool:
    """Whether a chat list (a team manager's ``message_thread``) is a transcript of turns the model contexts of the
    same document hold: every agent turn in it (text or calls) says what one of their ``AssistantMessage`` says."""
    turns = [m for m in items if isinstance(m, dict) and m.get("source") != "user" and m.get("type") in _TURN_TYPES]
    return bool(turns) and all(_said(m) in sampled for m in turns)


def _conversations(value: Any, where: str, reply: Any = None) -> Iterator[tuple[str, str, list[Any], Any]]:
    """(JSON path, "llm" | "chat", the list, the reply logged beside it or None) for every AutoGen message list in a
    document, outermost first. A model context beside the ``response`` it got (a ``CreateResult``, or the
    ``ChatCompletion`` an ``LLMCallEvent`` logs) is a call: the reply sampled after exactly those messages."""
    if isinstance(value, list):
        types = {v.get("type") for v in value if isinstance(v, dict)}
        if value and types <= LLM_TYPES | {None} and types & {"AssistantMessage", "UserMessage"}:
            if reply is not None or "AssistantMessage" in types:
                yield where, "llm", value, reply
            return
        if value and types & {"TextMessage", "ToolCallRequestEvent"} and all(isinstance(v, dict) for v in value):
            yield where, "chat", value, None
            return
        for i, v in enumerate(value):
            yield from _conversations(v, f"{where}[{i}]")
    elif isinstance(value, dict):
        beside = value.get("response")
        beside = beside if isinstance(beside, dict) and _reply_message(beside) is not None else None
        for key, v in value.items():
            yield from _conversations(v, f"{where}.{key}" if where else key, beside if key == "messages" else None)


def _reply_message(response: dict[str, Any]) -> dict[str, Any] | None:
    """The OpenAI message of a logged reply: a ``CreateResult`` (``finish_reason``, ``content`` a string or
    ``FunctionCall`` list, ``thought``) or a ``ChatCompletion`` body (its one choice)."""
    choices = response.get("choices")
    if isinstance(choices, list):
        if len(choices) == 1 and isinstance(choices[0], dict) and isinstance(choices[0].get("message"), dict):
            return choices[0]["message"]
        return None
    if "finish_reason" in response and "content" in response:
        return _assistant(response.get("content"), response.get("thought"))
    return None


def _call_events(path: Path, calls: list[tuple[str, list[Any], Any]]) -> list[ReadEvent]:
    """The calls of a document (context, reply), one graph per conversation (a call joins the one whose messages and
    reply it re-sends, :class:`~msgtrain.ingest.common.call_log.Continuations`), a reject per call that cannot be
    read."""
    events: list[ReadEvent] = []
    logs: dict[str, CallLogGraph] = {}
    continuations = Continuations()
    for where, items, reply in calls:
        ref = SourceRef(str(path), where)
        try:
            context = from_openai_messages(_from_llm(items), policy=POLICY)
            sample = from_openai_messages([*_from_llm(items), _reply_message(reply) or {}], policy=POLICY)[-1]
            steps = [
                Step(m, origin=None if m.role == "assistant" else Origin.CONTEXT, index=i)
                for i, m in enumerate(context)
            ]
            call = Call(steps, [Step(sample, origin=Origin.SAMPLED)])
            key = continuations.conversation(call)  # the conversation whose messages and reply it re-sends
            log = logs.get(key) or CallLogGraph(
                f"{path.name}#{len(logs)}", metadata={"source_format": "autogen"}, policy=POLICY
            )
            log.add(call)
            continuations.added(call, key)
            logs.setdefault(key, log)
        except MsgtrainError as e:
            events.append(ReadReject(ref, e.located(str(ref)), excerpt(items), turns=1))
    read = len(calls) - len(events)
    for n, log in enumerate(logs.values()):
        graph = log.finish()
        _mark_incomplete(graph, [n.message for n in graph.nodes.values()])
        share = read - (len(logs) - 1) if n == 0 else 1
        events.insert(n, ReadGraph(graph, SourceRef(str(path), "file"), records=share))
    return events


def _mark_incomplete(graph: Any, messages: list[Any]) -> None:
    missing = [] if messages and messages[0].role == "system" else ["system_prompt"]
    if any(isinstance(m, OptionCallMessage) for m in messages):
        missing.append("tools")
    if missing:
        mark_context_incomplete(graph, missing, "an AutoGen agent sends its system message and tools apart")


def _events(path: Path, ref: SourceRef, kind: str, items: list[Any]) -> list[ReadEvent]:
    openai = _from_llm(items) if kind == "llm" else _from_chat(items, str(ref))
    steps = [
        Step(msg, origin=Origin.SAMPLED if msg.role == "assistant" else Origin.CONTEXT, index=i)
        for i, msg in enumerate(from_openai_messages(openai, policy=POLICY))
    ]
    if not any(s.origin is Origin.SAMPLED for s in steps):
        return [ReadSkip(ref, "AutoGen conversation without a model reply")]
    graph = build_linear_graph(steps, base_id=base_graph_id(path, ref), policy=POLICY)
    _mark_incomplete(graph, [s.message for s in steps])
    return [ReadGraph(graph, ref, records=1)]


def _from_llm(items: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in items:
        kind = m.get("type")
        if kind == "SystemMessage":
            out.append({"role": "system", "content": m.get("content")})
        elif kind == "UserMessage":
            out.append({"role": "user", "content": _text(m.get("content"))})
        elif kind == "AssistantMessage":
            out.append(_assistant(m.get("content"), m.get("thought")))
        else:
            out.extend(_results(m.get("content")))
    return out


def _from_chat(items: list[Any], where: str) -> list[dict[str, Any]]:
    speakers = {m.get("source") for m in items if m.get("source") != "user" and m.get("type") in CHAT_TYPES}
    if len(speakers) > 1:
        raise ValidationError(
            f"several agents speak in this list ({', '.join(sorted(map(str, speakers)))})",
            where=where,
            code="multi_agent",
            hint="each agent saw its own context: save each agent's state (save_state(), llm_context) instead",
        )
    out: list[dict[str, Any]] = []
    thought: str | None = None
    for m in items:
        kind = m.get("type")
        if kind in _NOT_IN_CONTEXT:
            continue
        if kind == "ThoughtEvent":
            thought = str(m.get("content") or "")
        elif kind == "ToolCallRequestEvent":
            out.append(_assistant(m.get("content"), thought))
            thought = None
        elif kind == "ToolCallExecutionEvent":
            out.extend(_results(m.get("content")))
        elif m.get("source") == "user":
            out.append({"role": "user", "content": _text(m.get("content"))})
        else:
            out.append(_assistant(m.get("content"), thought))
            thought = None
    return out


def _text(content: Any) -> Any:
    if isinstance(content, list):  # text and images: AutoGen writes images as base64 objects
        return [{"type": "text", "text": c} if isinstance(c, str) else c for c in content]
    return content


def _assistant(content: Any, thought: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant"}
    if isinstance(content, list):
        out["content"] = None
        out["tool_calls"] = [_call(c) for c in content if isinstance(c, dict)]
    else:
        out["content"] = content
    if isinstance(thought, str) and thought:
        out["reasoning_content"] = thought
    return out


def _call(call: dict[str, Any]) -> dict[str, Any]:
    """An AutoGen ``FunctionCall`` ``{id, name, arguments}`` as an OpenAI tool call (arguments kept verbatim)."""
    function = {"name": call.get("name"), "arguments": call.get("arguments")}
    return {"id": call.get("id"), "type": "function", "function": function}


def _results(content: Any) -> list[dict[str, Any]]:
    results = content if isinstance(content, list) else []
    return [
        {
            "role": "tool",
            "tool_call_id": r.get("call_id"),
            "content": r.get("content") if isinstance(r.get("content"), str) else json.dumps(r.get("content")),
        }
        for r in results
        if isinstance(r, dict)
    ]


READER = AutogenReader()
