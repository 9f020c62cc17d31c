"""MARSYS agent memories (seed 001): OpenAI-style messages extended for multi-agent work.

Reads a JSON array of ``Message`` dicts (``role``, ``content``, ``name``, ``message_id``, ``tool_calls``,
``tool_call_id``, ``metadata``, ``timestamp``), JSONL with one message per line, or records ``{"messages":
[...]}`` / ``{"memory": [...]}`` (one agent's memory each).

Mapping (seed 001's roles):
- ``system`` / ``user`` / ``assistant`` / ``tool``: as OpenAI chat messages; an assistant's ``name`` is the
  agent that produced it and becomes the message's policy, so multi-agent memories attribute each turn to its
  agent.
- ``agent_call`` (another agent invokes this one): user-side input. Its text is what the seed's
  ``process_for_llm`` gives the model: ``[Request from <metadata.caller>]: <content>`` (content alone when no
  caller is recorded).
- ``agent_response`` (the invoked agent's reply, received by this agent): user-side input, content verbatim.
  Safe reading: it is never trained as this memory's policy turn — whether it was sampled, and by whom,
  belongs to the other agent's memory.
- ``error``: with a ``tool_call_id`` it is the failed result of that call (``is_error``, ``error_type`` from
  ``metadata.error_type``); otherwise user-side input carrying the error text.
``message_id``, ``timestamp`` and ``metadata`` are kept in message metadata (not part of identity). Non-string
content (MARSYS allows dicts) is kept as compact JSON text. Every assistant message is sampled in the context
before it (conversation-list rule); a tool result answering no earlier call rejects the memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.conversation_files import (
    Conversation,
    ConversationLayout,
    Converted,
    Step,
    as_text,
    base_graph_id,
    build_linear_graph,
    dict_field,
    read_conversation_file,
)
from msgtrain.ingest.formats import Marks, ReadItem, head_shape, quoted
from msgtrain.model.message import (
    DEFAULT_POLICY,
    RUNTIME_POLICY,
    AnyMessage,
    OptionCallMessage,
    OptionResultMessage,
    OptionResultPayload,
    PartsMessage,
    TextPart,
)
from msgtrain.model.openai import from_openai_message

MARSYS_ROLES = frozenset({"system", "user", "assistant", "tool", "error", "agent_call", "agent_response"})
MARSYS_ONLY_ROLES = frozenset({"error", "agent_call", "agent_response"})


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and value.get("role") in MARSYS_ROLES and "kind" not in value


LAYOUT = ConversationLayout(is_message=_is_message, message_keys=("messages", "memory"))


class MarsysConverter:
    def __init__(self) -> None:
        self.call_names: dict[str, str] = {}

    def message(self, raw: Any, index: int) -> AnyMessage:
        where = f"message[{index}]"
        if not isinstance(raw, dict):
            raise ValidationError("message is not an object", where=where, code="bad_message")
        role = raw.get("role")
        if role not in MARSYS_ROLES:
            raise ValidationError(
                f"unknown role {role!r}",
                where=where,
                code="unknown_role",
                hint=f"MARSYS roles: {', '.join(sorted(MARSYS_ROLES))}",
            )
        meta = _metadata(raw)
        name = raw.get("name") if isinstance(raw.get("name"), str) and raw.get("name") else None
        content = raw.get("content")
        if role == "agent_call":
            caller = dict_field(raw, "metadata").get("caller")
            text = f"[Request from {caller}]: {as_text(content)}" if caller else as_text(content)
            return _user_side(text, name, meta, "agent_call")
        if role == "agent_response":
            return _user_side(as_text(content), name, meta, "agent_response")
        if role == "error":
            return self._error(raw, name, meta, where)
        data: dict[str, Any] = {"role": role, "content": content if _openai_content(content) else as_text(content)}
        for key in ("tool_calls", "tool_call_id", "name"):
            if raw.get(key) not in (None, "", []):
                data[key] = raw[key]
        policy = name if role == "assistant" and name else DEFAULT_POLICY
        msg = from_openai_message(data, index=index, call_names=self.call_names, policy=policy)
        if isinstance(msg, OptionCallMessage):
            self.call_names.update({c.invocation_id: c.option_name for c in msg.calls})
        return msg.model_copy(update={"metadata": {**msg.metadata, **meta}})

    def _error(self, raw: dict[str, Any], name: str | None, meta: dict[str, Any], where: str) -> AnyMessage:
        text = as_text(raw.get("content"))
        call_id = raw.get("tool_call_id")
        if not call_id:
            return _user_side(text, name, meta, "error")
        option = self.call_names.get(str(call_id)) or name
        if option is None:
            raise ValidationError(
                f"error answers no earlier tool call ({call_id!r})",
                where=where,
                code="unpaired_result",
                hint="an error with a tool_call_id must follow the assistant message that made that call",
            )
        extra = dict_field(raw, "metadata")
        payload = OptionResultPayload(
            invocation_id=str(call_id),
            option_name=option,
            result=None,
            is_error=True,
            error_type=extra.get("error_type"),
            error_message=text,
        )
        return OptionResultMessage(result=payload, policy=RUNTIME_POLICY, role_hint_for_llm="tool", metadata=meta)


def _openai_content(content: Any) -> bool:
    """Content the OpenAI adapter reads as is: a string, null, or a list of typed parts."""
    if content is None or isinstance(content, str):
        return True
    return isinstance(content, list) and all(isinstance(p, dict) and "type" in p for p in content)


def _user_side(text: str, name: str | None, meta: dict[str, Any], marsys_role: str) -> PartsMessage:
    parts = (TextPart(text=text),) if text else ()
    return PartsMessage(
        parts=parts,
        role_hint_for_llm="user",
        policy="user",
        name=name,
        metadata={**meta, "marsys_role": marsys_role},
    )


def _metadata(raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("message_id", "timestamp"):
        if raw.get(key) is not None:
            out[key] = raw[key]
    if dict_field(raw, "metadata"):
        out["marsys_metadata"] = raw["metadata"]
    return out


class MarsysReader:
    name = "marsys"
    description = "MARSYS agent memories (seed 001): roles incl. agent_call, agent_response, error; message_id"
    example = "sample_logs/marsys/orchestrator_memory.json"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(MARSYS_ONLY_ROLES | {"message_id"}))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        for prefix in ("", "[]", ".messages[]", ".memory[]"):
            roles = shape.values_at(f"{prefix}.role")
            if not roles or not roles <= MARSYS_ROLES:
                continue
            # MARSYS messages carry ``content`` (OpenAssistant rows carry message_id and role too, but ``text``).
            if (roles & MARSYS_ONLY_ROLES or shape.has(f"{prefix}.message_id")) and shape.has(f"{prefix}.content"):
                return True
        return False

    def read(self, path: Path) -> Iterator[ReadItem]:
        yield from read_conversation_file(path, LAYOUT, lambda conv: self.convert(path, conv))

    def convert(self, path: Path, conv: Conversation) -> Converted:
        converter = MarsysConverter()
        steps = [Step(converter.message(raw, i), index=i) for i, raw in enumerate(conv.messages)]
        graph = build_linear_graph(
            steps,
            base_id=base_graph_id(path, conv.ref),
            incomplete_from=conv.incomplete_from,
            metadata={"source_format": self.name},
        )
        return Converted(graph, dict(conv.container))


READER = MarsysReader()
