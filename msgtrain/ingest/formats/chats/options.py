"""Seed 003's options-framework messages: msgtrain's own typed Message JSON, as a conversation list.

Reads a JSON array of messages (one conversation), a JSON array of conversations, JSONL with one message per
line (one conversation), JSONL of conversations, or records ``{"messages": [...], "tools"?,
"template_kwargs"?}``. Each message is validated exactly as :func:`msgtrain.model.message.parse_message`
reads it (``kind`` ∈ parts / option_call / option_result, ``extra="forbid"``), so a typo is a located reject,
never a dropped field.

Mapping: messages are appended as they are (ids, policies, step numbers, media references, sub-agent
``subgraph`` results). Conversation-list rule: a message the policy produced (``role_hint_for_llm`` assistant
or an option call) is sampled in the context before it; a message's own ``generation`` (token ids, logprobs,
model) becomes the node's engine facts. ``tools`` and ``template_kwargs`` of a record are the graph's
environment; other record fields are carried as extras. A result whose ``invocation_id`` no earlier call
issued rejects the record.

This is not the native graph log (``msgtrain.graph`` records with ``type``/``graph`` keys): that one keeps
origins and versions and has its own reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic

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
from msgtrain.model.message import parse_message

KINDS = frozenset({"parts", "option_call", "option_result"})
_ENV_KEYS = ("tools", "template_kwargs")


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and value.get("kind") in KINDS and "graph" not in value


LAYOUT = ConversationLayout(is_message=_is_message, message_keys=("messages",))


def option_steps(messages: list[Any]) -> list[Step]:
    steps = []
    for i, raw in enumerate(messages):
        try:
            msg = parse_message(raw)
        except pydantic.ValidationError as e:
            first = e.errors()[0] if e.errors() else None
            loc = ".".join(str(x) for x in first["loc"]) if first else ""
            detail = first["msg"] if first else str(e)
            raise ValidationError(
                f"invalid message{f' at {loc}' if loc else ''}: {detail}",
                where=f"message[{i}]",
                code="bad_message",
                hint="messages follow msgtrain's Message JSON (kind: parts | option_call | option_result)",
            ) from e
        steps.append(Step(msg, index=i))
    return steps


class OptionsReader:
    name = "options"
    description = "Options-framework messages (seed 003): msgtrain Message JSON, kind = parts/option_call/option_result"
    example = "sample_logs/options/research_agent.jsonl"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(KINDS))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        if shape.has(".format") or shape.has(".graph"):
            return False  # native graph-log records carry messages too, inside node records
        return any(shape.values_at(p) and shape.values_at(p) <= KINDS for p in (".kind", "[].kind", ".messages[].kind"))

    def read(self, path: Path) -> Iterator[ReadItem]:
        yield from read_conversation_file(path, LAYOUT, lambda conv: self.convert(path, conv))

    def convert(self, path: Path, conv: Conversation) -> Converted:
        container = conv.container
        tools = container.get("tools")
        kwargs = container.get("template_kwargs")
        if tools is not None and not isinstance(tools, list):
            raise ValidationError("tools must be a list of tool schemas", where="tools", code="bad_tools")
        graph = build_linear_graph(
            option_steps(conv.messages),
            base_id=base_graph_id(path, conv.ref),
            incomplete_from=conv.incomplete_from,
            tools=tools or (),
            template_kwargs=kwargs if isinstance(kwargs, dict) else None,
            metadata={"source_format": self.name},
        )
        return Converted(graph, {k: v for k, v in container.items() if k not in _ENV_KEYS})


READER = OptionsReader()
