"""The Go agent's saved ``AgentState`` JSON (seed 004).

Reads ``{"thread_id", "messages": [...], "todos"?, "files"?}`` states (one document, a JSON array of them, or
JSONL), and bare ``[]Message`` lists. A message is ``{"role", "content", "tool_calls"?: [{"id", "name",
"args"}], "tool_call_id"?, "name"?}``: content is always a string (``""`` when the assistant only calls
tools); ``args`` is a JSON object (the raw argument text is not saved by the agent).

Mapping: the four roles map one to one; tool calls become one option-call message (parallel calls stay in one
message), ``tool`` messages results paired by ``tool_call_id``. Each state must pass the agent's own
``Validate()`` rules (seed 004, :func:`msgtrain.model.validate.validate_dicts`): unknown role, tool message
without ``tool_call_id``, assistant with neither content nor calls, empty user/system content, a result
answering no call — any of them rejects that state with the rule's code. ``thread_id`` and ``todos`` are
carried as extras; ``files`` (workspace contents, possibly large) are not, only their names.

Safe reading: the loop's ``ModifyRequest`` hooks inject memory and skills into a *copy* of the messages per
request and that copy is not saved, so the saved system message can be shorter than what the model saw. The
conversation-list rule still applies (each assistant message is sampled after the saved context); the metadata
flag ``hook_injections_not_logged`` records the caveat on every graph.
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
    base_graph_id,
    build_linear_graph,
    read_conversation_file,
)
from msgtrain.ingest.formats import Marks, ReadItem, head_shape, quoted
from msgtrain.model.message import OptionCallMessage
from msgtrain.model.openai import from_openai_message
from msgtrain.model.validate import validate_dicts

GO_ROLES = frozenset({"system", "user", "assistant", "tool"})


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("role"), str) and "kind" not in value


LAYOUT = ConversationLayout(is_message=_is_message, message_keys=("messages",))


def go_steps(messages: list[Any]) -> list[Step]:
    for i, raw in enumerate(messages):
        role = raw.get("role") if isinstance(raw, dict) else None
        if role not in GO_ROLES:
            raise ValidationError(
                f"unknown role {role!r}",
                where=f"message[{i}]",
                code="unknown_role",
                hint="the Go agent's roles are system, user, assistant and tool",
            )
    problems = validate_dicts(messages)
    if problems:
        first = problems[0]
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ValidationError(first.message + more, where=first.where, hint=first.hint or None, code=first.code)
    steps: list[Step] = []
    names: dict[str, str] = {}
    for i, raw in enumerate(messages):
        msg = from_openai_message(raw, index=i, call_names=names)
        if isinstance(msg, OptionCallMessage):
            names.update({c.invocation_id: c.option_name for c in msg.calls})
        steps.append(Step(msg, index=i))
    return steps


class GoAgentReader:
    name = "go_agent"
    description = "Go agent AgentState JSON (seed 004): messages with tool_calls[{id, name, args}], tool_call_id"
    example = "sample_logs/go_agent/thread_state.json"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["thread_id", "args"]))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        if shape.has(".thread_id", ".messages[].role"):
            return True
        # A flat {id, name, args} tool call (no OpenAI "function" wrapper) is the Go struct's JSON shape.
        for prefix in ("", ".messages[]", "[]"):
            if shape.has(f"{prefix}.tool_calls[].args") and not shape.has(f"{prefix}.tool_calls[].function"):
                return True
        return False

    def read(self, path: Path) -> Iterator[ReadItem]:
        yield from read_conversation_file(path, LAYOUT, lambda conv: self.convert(path, conv))

    def convert(self, path: Path, conv: Conversation) -> Converted:
        container = conv.container
        thread_id = container.get("thread_id")
        metadata: dict[str, Any] = {"source_format": self.name, "hook_injections_not_logged": True}
        if thread_id is not None:
            metadata["thread_id"] = thread_id
        graph = build_linear_graph(
            go_steps(conv.messages),
            base_id=base_graph_id(path, conv.ref),
            incomplete_from=conv.incomplete_from,
            metadata=metadata,
        )
        extras: dict[str, Any] = {k: v for k, v in container.items() if k != "files"}
        files = container.get("files")
        if isinstance(files, dict):
            extras["file_names"] = sorted(files)
        return Converted(graph, extras)


READER = GoAgentReader()
