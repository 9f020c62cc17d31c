"""OpenAI chat-completions message lists (the most common conversation format).

Reads: a JSON array of messages (one conversation); a JSON array of conversations (lists, or records holding
``messages``); JSONL of ``{"messages": [...], "tools": [...]}`` records; JSONL with one message per line (one
conversation); records with other fields around the messages, e.g. tau-bench's ``{"task_id", "reward", "info",
"traj", "trial"}`` where ``traj`` is the message list.

Mapping (see docs/formats.md, "openai_chat"):
- Messages go through :func:`msgtrain.model.openai.from_openai_message`: content strings or parts (``text``,
  ``image_url``, ``input_audio``, ``file``), ``tool_calls`` with JSON-string (kept verbatim) or dict
  arguments, ``tool`` results, ``developer`` (a system message that remembers its role),
  ``reasoning_content``.
- Legacy ``function_call`` / ``function`` messages get a synthetic call id (``function_call_<i>``) so they
  pair.
- A ``refusal`` (field or content part) is the assistant's visible text.
- Every assistant message is sampled in the context before it, except ``"weight": 0`` (OpenAI fine-tuning
  format: "do not train") which is carried context.
- ``tools`` / legacy ``functions`` become the graph's environment; ``chat_template_kwargs`` its template
  kwargs; every other field of the record (``reward``, ``task_id``, ``info``...) is carried to the samples as
  extras.
- A tool result that answers no earlier call rejects the record (``unpaired_result``); calls without a result
  are kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.content_parts import is_ui_steps
from msgtrain.ingest.common.conversation_files import (
    Conversation,
    ConversationLayout,
    Converted,
    Step,
    base_graph_id,
    build_linear_graph,
    conversation_chunk_key,
    kto_label,
    logged_reply,
    mark_last_reply,
    read_conversation_file,
)
from msgtrain.ingest.common.head_shape import HeadShape
from msgtrain.ingest.common.media_columns import MEDIA_COLUMNS, MediaColumns
from msgtrain.ingest.common.message_like import PREFERENCE_KEYS, named_agents, named_agents_error
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.core.chunks import ChunkKey, KeyFunction
from msgtrain.ingest.formats import Marks, ReadItem, head_shape, quoted
from msgtrain.model.graph import Origin
from msgtrain.model.message import DEFAULT_POLICY, OptionCallMessage
from msgtrain.model.openai import CONTENT_PART_TYPES, KNOWN_ROLES, check_reply_present, from_openai_message

MESSAGE_KEYS = ("messages", "traj")
_READ_PATHS = (".role", "[].role", ".messages[].role", ".traj[].role")  # where detection looks for roles
_TREE_PARENT_KEYS = ("parent_id", "parentId", "parent_message_id")
_NOT_EXTRAS = frozenset({"tools", "functions", "chat_template_kwargs", *MEDIA_COLUMNS})


def is_chat_message(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("role"), str) and "kind" not in value


LAYOUT = ConversationLayout(is_message=is_chat_message, message_keys=MESSAGE_KEYS)


def chat_steps(messages: list[Any], *, policy: str = DEFAULT_POLICY) -> list[Step]:
    """Convert an OpenAI message list to steps (origins per the module doc); raises ValidationError."""
    steps: list[Step] = []
    names: dict[str, str] = {}
    legacy_calls: dict[str, list[str]] = {}  # function name -> synthetic ids awaiting a `function` result
    for i, raw in enumerate(messages):
        if not isinstance(raw, dict):
            raise ValidationError(
                f"message is a {type(raw).__name__}, not an object",
                where=f"message[{i}]",
                code="bad_message",
                hint='each message is an object like {"role": "user", "content": "..."}',
            )
        data = _normalise(raw, i, legacy_calls)
        if data.get("role") == "assistant" and raw.get("weight") != 0:
            check_reply_present(data, f"message[{i}]")
        msg = from_openai_message(data, index=i, call_names=names, policy=policy)
        if isinstance(msg, OptionCallMessage):
            names.update({c.invocation_id: c.option_name for c in msg.calls})
        origin = Origin.CARRIED if msg.role == "assistant" and raw.get("weight") == 0 else None
        msg, generation = logged_reply(msg, raw)
        steps.append(Step(msg, origin=origin, generation=generation, index=i))
    return steps


def _normalise(raw: dict[str, Any], index: int, legacy_calls: dict[str, list[str]]) -> dict[str, Any]:
    """Rewrite the few legacy / optional shapes ``from_openai_message`` does not read into ones it does."""
    data = dict(raw)
    role = data.get("role")
    if isinstance(data.get("content"), list):
        data["content"] = [
            {"type": "text", "text": part.get("refusal", "")}
            if isinstance(part, dict) and part.get("type") == "refusal"
            else part
            for part in data["content"]
        ]
    if role == "assistant":
        if data.get("content") in (None, "") and isinstance(data.get("refusal"), str):
            data["content"] = data["refusal"]
        call = data.get("function_call")
        if isinstance(call, dict) and not data.get("tool_calls"):
            call_id = f"function_call_{index}"
            legacy_calls.setdefault(str(call.get("name")), []).append(call_id)
            data["tool_calls"] = [{"id": call_id, "type": "function", "function": call}]
        elif isinstance(data.get("tool_calls"), list):
            data["tool_calls"] = [_with_id(c, index, k, legacy_calls) for k, c in enumerate(data["tool_calls"])]
    elif role in ("function", "tool") and not data.get("tool_call_id"):
        # a result logged without the id of its call (legacy functions; TRL's tool datasets, whose calls carry no
        # ids either): the oldest waiting call of its name, else the oldest waiting call (results in call order)
        waiting = legacy_calls.get(str(data.get("name"))) or next((ids for ids in legacy_calls.values() if ids), None)
        if waiting:
            data["tool_call_id"] = waiting.pop(0)
    return data


def _with_id(call: Any, index: int, k: int, legacy_calls: dict[str, list[str]]) -> Any:
    """A tool call the log wrote without an id gets a synthetic one (``call_<message>_<k>``), awaited by name."""
    if not isinstance(call, dict) or call.get("id"):
        return call
    fn = call.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    call_id = f"call_{index}_{k}"
    legacy_calls.setdefault(str(name), []).append(call_id)
    return {**call, "id": call_id}


# Where messages with untyped content blocks are, relative to a record: the record itself, or its messages.
_UNTYPED_AT = ("", ".messages[]")
# A reply logged beside the messages it answers (a request and its response), not inside them.
_REPLY_BESIDE = ("response", "completion")


class OpenAIChatReader:
    name = "openai_chat"
    description = "OpenAI chat messages: JSON list(s) of messages, JSONL of {messages, tools}, tau-bench traj records"
    example = "sample_logs/openai_chat/conversations.jsonl"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["role"]))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        if any(shape.has(f"{p}.{k}") for p in ("", "[]") for k in _TREE_PARENT_KEYS):
            return False  # messages pointing at their parents form a tree, not one list (the structural reader)
        if any(
            shape.has(f"{p}.{chosen}", f"{p}.{rejected}") for p in ("", "[]") for chosen, rejected in PREFERENCE_KEYS
        ):
            return False  # a preference pair beside a copy of one side (UltraFeedback): the structural reader
        if any(shape.has(f"{p}.content[].text") and not shape.has(f"{p}.content[].type") for p in _UNTYPED_AT):
            return False  # untyped {"text"} blocks: Bedrock Converse, Haystack ChatMessage dicts (structural)
        if shape.has(".delta") and shape.any_value(".type", {"message"}):
            return False  # message fragments of a stream (Gemini CLI's stream-json), not whole messages
        if any(shape.has(f"{p}.items[].content_type") for p in _UNTYPED_AT):
            return False  # Semantic Kernel's typed items instead of content (structural)
        if any(is_ui_steps([{"type": t} for t in shape.values_at(f"{p}.parts[].type")]) for p in _UNTYPED_AT):
            return False  # AI SDK UI messages: steps, calls and results in one message (structural)
        if any(shape.has(f"{p}.messages[].{k}[].role") for p in ("", "[]") for k in ("children", "replies")):
            return False  # messages nesting their replies: a tree (structural)
        if any(shape.has(f"{p}.messages", f"{p}.{reply}") for p in ("", "[]") for reply in _REPLY_BESIDE):
            return False  # the request's messages beside the reply it got (DSPy's LM history): the structural reader
        return any(_has_chat_roles(shape, p) for p in _READ_PATHS)

    def explain(self, path: Path, head: bytes) -> str | None:
        """Why a file with OpenAI-role messages somewhere is not read (shown in the unknown_format hint)."""
        del path
        shape = head_shape(head)
        for where in sorted(p for p in shape.values if p.endswith(".role")):
            roles = shape.values_at(where)
            if not roles & {"user", "assistant"}:
                continue
            unknown = sorted(roles - set(KNOWN_ROLES))
            if where in _READ_PATHS:
                if unknown:
                    return f"roles {', '.join(map(repr, unknown))} at `{where[1:]}` are not OpenAI roles"
                continue
            place = where[1:].removesuffix(".role").removesuffix("[]")
            return f"messages are under `{place}`, not at the top or under `messages` / `traj`"
        return None

    # A JSON array read item by item is read through iter_raw_records: it may be cut into chunks of items too.
    chunk_items = True

    def chunk_keys(self, path: Path) -> KeyFunction:
        """Every record of this format is keyed alike (see :mod:`msgtrain.ingest.core.chunks`)."""
        return self._chunk_key

    def _chunk_key(self, value: Any) -> ChunkKey:
        return conversation_chunk_key(LAYOUT, value)

    def read(self, path: Path) -> Iterator[ReadItem]:
        def convert(conv: Conversation) -> Converted:
            return self.convert(path, conv)

        yield from read_conversation_file(path, LAYOUT, convert)

    def convert(self, path: Path, conv: Conversation) -> Converted:
        container = conv.container
        agents = named_agents(conv.messages)
        if agents:  # an AutoGen group chat: which speaker is the model is not in the log
            raise named_agents_error(agents, f"$.{conv.key}" if conv.key else "$")
        tools = openai_tools(container.get("tools") or container.get("functions"))
        kwargs = container.get("chat_template_kwargs")
        steps = MediaColumns(container).place(chat_steps(conv.messages))
        mark_last_reply(steps, kto_label(container))
        graph = build_linear_graph(
            steps,
            base_id=base_graph_id(path, conv.ref),
            incomplete_from=conv.incomplete_from,
            tools=tools,
            metadata={"source_format": self.name, "messages_key": conv.key},
            template_kwargs=kwargs if isinstance(kwargs, dict) else None,
        )
        extras = {k: v for k, v in container.items() if k not in _NOT_EXTRAS}
        return Converted(graph, extras)


def _has_chat_roles(shape: HeadShape, path: str) -> bool:
    """Messages at ``path`` whose roles are all OpenAI roles, whose content parts are all of types this reader
    reads (a saved history holding another dialect's blocks, Anthropic's ``tool_use`` or goose's
    ``toolRequest``, is left to the reader of those blocks), and no seed-003 ``kind`` tag next to them."""
    roles = shape.values_at(path)
    if not roles or not roles <= set(KNOWN_ROLES):
        return False
    if not shape.values_at(path.removesuffix(".role") + ".content[].type") <= CONTENT_PART_TYPES:
        return False
    return (path.rsplit(".", 1)[0] + ".kind") not in shape.paths


READER = OpenAIChatReader()
