"""LionAGI branch messages (seed 002): serialised ``RoledMessage`` dicts.

Reads a JSON array of messages as ``RoledMessage.to_dict()`` writes them (``id``, ``created_at``, ``role``,
``content`` dict, ``sender``, ``recipient``, ``metadata.lion_class``), JSONL with one per line, or records
``{"messages": [...]}``. The class comes from ``metadata.lion_class`` (or a top-level ``lion_class``), else
from the content keys.

Mapping:
- ``System`` → system message: ``system_message`` (plus ``System datetime: ...`` when one was recorded).
- ``Instruction`` → user message: ``plain_content`` when set, else the sections LionAGI's instruction template
  renders (``## Guidance``, ``## Instruction``, ``## Context`` as a bullet list, ``## Tool Schemas``, ``##
  Requested Fields`` as JSON); ``images`` become image references (bare base64 → a ``data:image/jpeg`` URI).
- ``AssistantResponse`` → assistant text (``assistant_response``), sampled in the context before it; the raw
  model response in ``metadata.model_response`` gives the engine facts (model, finish reason).
- ``ActionRequest`` → an option call whose invocation id is the request's own ``id``; consecutive requests
  form one (parallel) call message. ``ActionResponse`` → the result, paired through ``action_request_id``
  (the request↔response link); ``output`` is the result.
- ``sender`` / ``recipient`` / ``id`` / ``created_at`` are kept in message metadata.

Safe readings: LionAGI creates ``ActionRequest`` messages itself, from the action requests it parsed out of
the preceding ``AssistantResponse`` — the model never sampled them as separate turns, and ``chat()`` does not
even send them back to the model. They are therefore *injected* context (never trained), so the sampled
response is trained once, as the text the model wrote. The text of instructions and system messages is
rebuilt from their fields following LionAGI's templates; it is context only (never trained) and may differ
from a given LionAGI version's exact whitespace.
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
    as_text,
    base_graph_id,
    build_linear_graph,
    dict_field,
    read_conversation_file,
)
from msgtrain.ingest.formats import Marks, ReadItem, head_shape
from msgtrain.model.graph import Origin
from msgtrain.model.message import (
    DEFAULT_POLICY,
    RUNTIME_POLICY,
    Generation,
    MediaPart,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultMessage,
    OptionResultPayload,
    Part,
    PartsMessage,
    TextPart,
)

CLASSES = ("System", "Instruction", "AssistantResponse", "ActionRequest", "ActionResponse")
_CONTENT_MARKERS = {
    "system_message": "System",
    "assistant_response": "AssistantResponse",
    "action_request": "ActionRequest",
    "action_response": "ActionResponse",
    "instruction": "Instruction",
    "plain_content": "Instruction",
    "guidance": "Instruction",
}
LION_ROLES = frozenset({"system", "user", "assistant", "action", "unset"})


def lion_class(raw: dict[str, Any]) -> str | None:
    meta = dict_field(raw, "metadata")
    name = meta.get("lion_class") or raw.get("lion_class")
    if isinstance(name, str):
        short = name.rsplit(".", 1)[-1]
        if short in CLASSES:
            return short
    content = raw.get("content")
    if isinstance(content, dict):
        for key, cls in _CONTENT_MARKERS.items():
            if key in content:
                return cls
    return None


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("content"), dict) and lion_class(value) is not None


LAYOUT = ConversationLayout(is_message=_is_message, message_keys=("messages",))


def _meta(raw: dict[str, Any]) -> dict[str, Any]:
    out = {k: raw[k] for k in ("id", "created_at", "sender", "recipient") if raw.get(k) is not None}
    return {"lionagi": out} if out else {}


def _system_text(content: dict[str, Any]) -> str:
    text = as_text(content.get("system_message", content.get("system")))
    when = content.get("system_datetime")
    if isinstance(when, str) and when:
        text += f"\nSystem datetime: {when}"
    return text


def _instruction_parts(content: dict[str, Any]) -> list[Part]:
    plain = content.get("plain_content")
    if isinstance(plain, str) and plain:
        sections = [plain]
    else:
        sections = []
        if content.get("guidance"):
            sections.append(f"## Guidance\n{as_text(content['guidance'])}")
        if content.get("instruction"):
            sections.append(f"## Instruction\n{as_text(content['instruction'])}")
        context = content.get("context") or content.get("prompt_context")
        if context:
            items = context if isinstance(context, list) else [context]
            sections.append("## Context\n" + "\n".join(f"- {as_text(item)}" for item in items))
        if content.get("tool_schemas"):
            sections.append(f"## Tool Schemas\n{json.dumps(content['tool_schemas'], indent=2, ensure_ascii=False)}")
        if content.get("request_fields"):
            fields = json.dumps(content["request_fields"], indent=2, ensure_ascii=False)
            sections.append(
                f"## Requested Fields\nPlease return a JSON object with the following fields:\n```json\n{fields}\n```"
            )
    parts: list[Part] = [TextPart(text="\n\n".join(sections))] if sections else []
    for image in content.get("images") or []:
        url = as_text(image)
        if not url.startswith(("http://", "https://", "data:", "file:")):
            url = f"data:image/jpeg;base64,{url}"
        parts.append(MediaPart(modality="image", url=url))
    return parts


def _generation(raw: dict[str, Any]) -> Generation | None:
    meta = dict_field(raw, "metadata")
    response = meta.get("model_response")
    if not isinstance(response, dict):
        return None
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    created = response.get("created")
    return Generation(
        model=response.get("model"),
        finish_reason=first.get("finish_reason"),
        created=created if isinstance(created, int) else None,
    )


def lion_steps(messages: list[Any]) -> list[Step]:
    steps: list[Step] = []
    names: dict[str, str] = {}
    pending: list[tuple[int, dict[str, Any]]] = []  # consecutive ActionRequests, emitted as one call message

    def flush() -> None:
        if not pending:
            return
        calls = []
        for i, raw in pending:
            request = raw["content"].get("action_request")
            if not isinstance(request, dict) or not request.get("function") or not raw.get("id"):
                raise ValidationError(
                    "ActionRequest needs an id and action_request.function",
                    where=f"message[{i}]",
                    code="bad_tool_call",
                    hint="serialise messages with RoledMessage.to_dict()",
                )
            args = request.get("arguments")
            call = OptionCallPayload(
                invocation_id=str(raw["id"]),
                option_name=str(request["function"]),
                arguments=args if isinstance(args, dict) else ({} if args is None else {"value": args}),
            )
            names[call.invocation_id] = call.option_name
            calls.append(call)
        msg = OptionCallMessage(
            calls=tuple(calls),
            policy=DEFAULT_POLICY,
            role_hint_for_llm="assistant",
            metadata={"lionagi_requests": [_meta(raw) for _, raw in pending]},
        )
        steps.append(Step(msg, origin=Origin.INJECTED, index=pending[0][0]))
        pending.clear()

    for i, raw in enumerate(messages):
        where = f"message[{i}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("content"), dict):
            raise ValidationError(
                "message is not a RoledMessage dict",
                where=where,
                code="bad_message",
                hint="each message is RoledMessage.to_dict() output with a content object",
            )
        cls = lion_class(raw)
        if cls is None:
            raise ValidationError(
                "cannot tell which LionAGI message class this is",
                where=where,
                code="unknown_role",
                hint=f"set metadata.lion_class to one of {', '.join(CLASSES)}",
            )
        if cls == "ActionRequest":
            pending.append((i, raw))
            continue
        flush()
        content = raw["content"]
        meta = _meta(raw)
        if cls == "System":
            parts = (TextPart(text=_system_text(content)),)
            steps.append(
                Step(PartsMessage(parts=parts, role_hint_for_llm="system", policy="system", metadata=meta), index=i)
            )
        elif cls == "Instruction":
            msg = PartsMessage(
                parts=tuple(_instruction_parts(content)), role_hint_for_llm="user", policy="user", metadata=meta
            )
            steps.append(Step(msg, index=i))
        elif cls == "AssistantResponse":
            text = as_text(content.get("assistant_response"))
            msg = PartsMessage(
                parts=(TextPart(text=text),) if text else (),
                role_hint_for_llm="assistant",
                policy=DEFAULT_POLICY,
                metadata=meta,
            )
            steps.append(Step(msg, generation=_generation(raw), index=i))
        else:
            steps.append(Step(_action_response(content, names, where, meta), index=i))
    flush()
    return steps


def _action_response(
    content: dict[str, Any], names: dict[str, str], where: str, meta: dict[str, Any]
) -> OptionResultMessage:
    request_id = content.get("action_request_id")
    response = dict_field(content, "action_response")
    name = names.get(str(request_id)) if request_id else None
    if name is None:
        raise ValidationError(
            f"ActionResponse answers no earlier ActionRequest (action_request_id {request_id!r})",
            where=where,
            code="unpaired_result",
            hint="keep the ActionRequest that this response's action_request_id names",
        )
    return OptionResultMessage(
        result=OptionResultPayload(
            invocation_id=str(request_id),
            option_name=str(response.get("function") or name),
            result=response.get("output"),
        ),
        policy=RUNTIME_POLICY,
        role_hint_for_llm="tool",
        metadata=meta,
    )


class LionAGIReader:
    name = "lionagi"
    description = (
        "LionAGI RoledMessage dicts (seed 002): System, Instruction, AssistantResponse, ActionRequest/Response"
    )
    example = "sample_logs/lionagi/branch_messages.json"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=("lionagi.", '"sender"'))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        for prefix in ("", "[]", ".messages[]"):
            classes = shape.values_at(f"{prefix}.metadata.lion_class") | shape.values_at(f"{prefix}.lion_class")
            if any(c.startswith("lionagi.") for c in classes):
                return True
            keys = {k for k in _CONTENT_MARKERS if f"{prefix}.content.{k}" in shape.paths}
            if keys and shape.has(f"{prefix}.sender", f"{prefix}.recipient"):
                return True
        return False

    def read(self, path: Path) -> Iterator[ReadItem]:
        yield from read_conversation_file(path, LAYOUT, lambda conv: self.convert(path, conv))

    def convert(self, path: Path, conv: Conversation) -> Converted:
        graph = build_linear_graph(
            lion_steps(conv.messages),
            base_id=base_graph_id(path, conv.ref),
            incomplete_from=conv.incomplete_from,
            metadata={"source_format": self.name},
        )
        return Converted(graph, dict(conv.container))


READER = LionAGIReader()
