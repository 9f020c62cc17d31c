"""ShareGPT conversations and LLaMA-Factory's typed ``messages`` format.

Reads (a JSON array of records, JSONL, or one record):
- ShareGPT: ``{"conversations": [{"from", "value"}], "system"?, "tools"?, "images"?, "videos"?, "audios"?}``
  with ``from`` ∈ human/user, gpt/assistant, system, ``function_call`` (the value is JSON ``{"name",
  "arguments"}`` or a list of them: parallel calls) and ``observation`` / ``tool`` (the result);
- LLaMA-Factory v1: ``{"messages": [{"role", "content": [{"type": "text" | "reasoning" | "tool_call",
  "value"}], "loss_weight"?}], "tools"?}``.

Mapping: every assistant turn is sampled in the context before it, except a turn with ``loss_weight`` (or
axolotl's ``weight``) 0, or AgentGym / AgentTuning's ``"loss": false`` (a scripted turn), which the dataset says
not to train: it is carried context. ``tools`` (a JSON
string) is normalised to OpenAI function schemas. ``<image>`` / ``<video>`` / ``<audio>`` placeholders in a
turn's text are replaced, in order, by media references to the record's ``images`` / ``videos`` / ``audios``
paths (never opened); a count mismatch rejects the record, as LLaMA-Factory does.

Safe readings (calls here carry no ids):
- Calls get deterministic ids ``call_<turn>_<k>``; results pair with the calls of the assistant turn before
  them, in order. One observation answering N > 1 parallel calls is split when its text is a JSON list of
  exactly N entries (the shape both formats write; an entry ``{"name", "content"}`` contributes its
  ``content``), otherwise the record is rejected (``ambiguous_results``) instead of guessing; more results
  than calls, or a result after a turn without calls, is ``unpaired_result``.
- A ``function_call`` value that is not valid JSON rejects the record (LLaMA-Factory would drop the turn,
  which silently changes the context of every later turn).
- Preference records (``chosen`` / ``rejected``) are not conversations of one policy; they are rejected with
  ``unsupported_record``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.content_parts import parse_json_field, split_parallel_results
from msgtrain.ingest.common.conversation_files import (
    Conversation,
    ConversationLayout,
    Converted,
    Step,
    as_text,
    base_graph_id,
    build_linear_graph,
    conversation_chunk_key,
    kto_label,
    mark_last_reply,
    read_conversation_file,
)
from msgtrain.ingest.common.media_columns import MEDIA_COLUMNS, MediaColumns
from msgtrain.ingest.common.message_like import canonical_role, loss_flag_weight
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.core.chunks import ChunkKey, KeyFunction
from msgtrain.ingest.formats import Marks, ReadGraph, ReadItem, head_shape, quoted
from msgtrain.model.graph import Origin
from msgtrain.model.message import (
    DEFAULT_POLICY,
    RUNTIME_POLICY,
    AnyMessage,
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

USER_TAGS = frozenset({"human", "user"})
ASSISTANT_TAGS = frozenset({"gpt", "assistant", "model", "chatgpt", "bard", "bing"})
CALL_TAGS = frozenset({"function_call"})
RESULT_TAGS = frozenset({"observation", "tool", "function", "ipython"})
SYSTEM_TAGS = frozenset({"system"})
LF_CONTENT_TYPES = frozenset({"text", "reasoning", "tool_call", "image", "video", "audio"})
# LLaMA-Factory v1's renderer (src/llamafactory/v1/core/rendering/format.py) names media parts image_url / video_url
# / audio_url, with the path under "value" as for the other types (data/v1_multimodal_demo.jsonl).
_LF_MEDIA_TYPES = {"image_url": "image", "video_url": "video", "audio_url": "audio"}


def _is_turn(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    if "from" in value and "value" in value:
        return True
    content = value.get("content")
    return (
        isinstance(value.get("role"), str)
        and isinstance(content, list)
        and all(isinstance(c, dict) and "value" in c for c in content)
    )


LAYOUT = ConversationLayout(is_message=_is_turn, message_keys=("conversations", "messages"))


class _Turn:
    """One turn in a neutral shape: role ∈ user/assistant/system/call/result, plus its typed pieces."""

    def __init__(self, role: str, pieces: list[tuple[str, Any]], index: int, weight: Any = None):
        self.role = role
        self.pieces = pieces  # (type, value) with type ∈ text, reasoning, tool_call, image, video, audio
        self.index = index
        self.weight = weight


def _sharegpt_turn(raw: Any, index: int) -> _Turn:
    where = f"message[{index}]"
    if not isinstance(raw, dict) or "from" not in raw:
        raise ValidationError(
            "turn has no 'from'",
            where=where,
            code="bad_message",
            hint='ShareGPT turns are {"from": "human" | "gpt" | ..., "value": "..."}',
        )
    tag = str(raw["from"]).lower()
    value = raw.get("value")
    weight = raw.get("weight", raw.get("loss_weight", loss_flag_weight(raw)))
    if tag in CALL_TAGS:
        calls = parse_json_field(value, what="function_call value", where=where)
        items = calls if isinstance(calls, list) else [calls]
        return _Turn("call", [("tool_call", c) for c in items], index, weight)
    for tags, role in (
        (USER_TAGS, "user"),
        (ASSISTANT_TAGS, "assistant"),
        (SYSTEM_TAGS, "system"),
        (RESULT_TAGS, "result"),
    ):
        if tag in tags:
            return _Turn(role, [("text", as_text(value))], index, weight)
    # beyond ShareGPT's own tags, the role table every reader shares (agent, bot, chatbot, ...)
    role = {"tool": "result"}.get(str(canonical_role(tag)), str(canonical_role(tag)))
    if role in ("user", "assistant", "system", "result"):
        return _Turn(role, [("text", as_text(value))], index, weight)
    raise ValidationError(
        f"unknown turn tag {raw['from']!r}",
        where=where,
        code="unknown_role",
        hint="ShareGPT tags: human, gpt, system, function_call, observation",
    )


def _llamafactory_turn(raw: Any, index: int) -> _Turn:
    where = f"message[{index}]"
    if not isinstance(raw, dict):
        raise ValidationError("message is not an object", where=where, code="bad_message")
    role = raw.get("role")
    content = raw.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "value": content}]
    if not isinstance(content, list):
        raise ValidationError("content must be a list of {type, value} parts", where=where, code="bad_content")
    pieces: list[tuple[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        kind = _LF_MEDIA_TYPES.get(kind, kind) if isinstance(kind, str) else kind
        if kind not in LF_CONTENT_TYPES:
            raise ValidationError(
                f"content[{j}] has unsupported type {kind!r}",
                where=where,
                code="bad_content",
                hint=f"LLaMA-Factory content types: {', '.join(sorted(LF_CONTENT_TYPES))}",
            )
        value = part["value"]
        if kind == "tool_call":
            value = parse_json_field(value, what=f"content[{j}] tool_call value", where=where)
        pieces.append((kind, value))
    weight = raw.get("loss_weight", raw.get("weight", loss_flag_weight(raw)))
    if role == "tool":
        return _Turn("result", pieces, index, weight)
    if role == "assistant" and any(k == "tool_call" for k, _ in pieces):
        return _Turn("call", pieces, index, weight)
    if role in ("user", "assistant", "system"):
        return _Turn(str(role), pieces, index, weight)
    raise ValidationError(
        f"unknown role {role!r}",
        where=where,
        code="unknown_role",
        hint="LLaMA-Factory roles: system, user, assistant, tool",
    )


class _Builder:
    """Turns → steps, with synthetic call ids and positional result pairing (see the module doc)."""

    def __init__(self, media: MediaColumns):
        self.media = media
        self.steps: list[Step] = []
        self.open_calls: list[OptionCallPayload] = []

    def run(self, turns: list[_Turn]) -> list[Step]:
        i = 0
        while i < len(turns):
            turn = turns[i]
            if turn.role == "result":
                j = i
                while j < len(turns) and turns[j].role == "result":
                    j += 1
                self._results(turns[i:j])
                i = j
                continue
            self._turn(turn)
            i += 1
        return self.steps

    def _turn(self, turn: _Turn) -> None:
        where = f"message[{turn.index}]"
        parts: list[Part] = []
        calls: list[OptionCallPayload] = []
        for kind, value in turn.pieces:
            if kind == "text":
                parts.extend(self.media.split(as_text(value), where))
            elif kind == "reasoning":
                parts.append(ReasoningPart(text=as_text(value)))
            elif kind == "tool_call":
                calls.append(_call(value, f"call_{turn.index}_{len(calls)}", where))
            else:
                parts.append(MediaPart(modality=MEDIA_COLUMNS[kind + "s"], url=as_text(value)))
        if turn.role in ("call", "assistant"):
            self.open_calls = list(calls)
            msg: AnyMessage = (
                OptionCallMessage(
                    parts=tuple(parts), calls=tuple(calls), policy=DEFAULT_POLICY, role_hint_for_llm="assistant"
                )
                if calls
                else PartsMessage(parts=tuple(parts), role_hint_for_llm="assistant", policy=DEFAULT_POLICY)
            )
            origin = Origin.CARRIED if turn.weight in (0, 0.0) else None
            self.steps.append(Step(msg, origin=origin, index=turn.index))
            return
        role = "system" if turn.role == "system" else "user"
        self.steps.append(Step(PartsMessage(parts=tuple(parts), role_hint_for_llm=role, policy=role), index=turn.index))

    def _results(self, turns: list[_Turn]) -> None:
        calls, self.open_calls = self.open_calls, []
        texts = ["".join(as_text(v) for k, v in t.pieces if k == "text") for t in turns]
        first = turns[0]
        if not calls:
            raise ValidationError(
                "tool result follows a turn that made no call",
                where=f"message[{first.index}]",
                code="unpaired_result",
                hint="an observation must follow a function_call turn",
            )
        if len(turns) > len(calls):
            raise ValidationError(
                f"{len(turns)} results answer {len(calls)} calls",
                where=f"message[{turns[len(calls)].index}]",
                code="unpaired_result",
                hint="give one observation per call",
            )
        pairs: list[tuple[int, OptionCallPayload, Any]]
        if len(turns) == 1 and len(calls) > 1:
            names = [c.option_name for c in calls]
            values = split_parallel_results(texts[0], names, f"message[{first.index}]", "observation")
            pairs = [(first.index, call, value) for call, value in zip(calls, values, strict=True)]
        else:
            # Fewer results than calls: the calls left over stay dangling (kept, counted downstream).
            pairs = [(t.index, call, text) for t, call, text in zip(turns, calls, texts, strict=False)]
        for index, call, value in pairs:
            result = OptionResultPayload(invocation_id=call.invocation_id, option_name=call.option_name, result=value)
            message = OptionResultMessage(result=result, policy=RUNTIME_POLICY, role_hint_for_llm="tool")
            self.steps.append(Step(message, index=index))


def _call(value: Any, call_id: str, where: str) -> OptionCallPayload:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ValidationError(
            "a tool call must be a JSON object with a name",
            where=where,
            code="bad_tool_call",
            hint='write calls as {"name": "...", "arguments": {...}}',
        )
    args = value.get("arguments", value.get("parameters"))
    raw: str | None = None
    if isinstance(args, str):
        raw = args
        try:
            parsed = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            parsed = {}
        args = parsed if isinstance(parsed, dict) else {"value": parsed}
    elif args is None:
        args = {}
    elif not isinstance(args, dict):
        args = {"value": args}
    return OptionCallPayload(invocation_id=call_id, option_name=value["name"], arguments=args, raw_arguments=raw)


def _preference(path: Path, conv: Conversation) -> Converted:
    """A LLaMA-Factory ranking record (``conversations`` + ``chosen`` / ``rejected`` replies): read as the
    structural reader reads preference pairs (one graph, the prompt then two sibling replies)."""
    from msgtrain.ingest.structure.convert import convert_found
    from msgtrain.ingest.structure.found import Found
    from msgtrain.ingest.structure.locate import record_layout

    record = {**conv.container, (conv.key or "conversations"): conv.messages}
    found = record_layout(record, "$")
    if not isinstance(found, Found) or found.mapping.layout != "preference":
        raise ValidationError(
            "chosen / rejected are not both replies (a string, a message or a message list)",
            where="record",
            code="bad_preference",
            hint='write "chosen": {"from": "gpt", "value": ...} and the same for "rejected"',
        )
    read = convert_found(path, conv.ref, found)[0]
    assert isinstance(read, ReadGraph)  # a preference layout has no gap
    return Converted(read.graph, read.extras)


class ShareGPTReader:
    name = "sharegpt"
    description = (
        "ShareGPT conversations[{from, value}] (function_call / observation, tools) and LLaMA-Factory messages"
    )
    example = "sample_logs/sharegpt/glaive_style.json"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["from", "value"]))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        if shape.has(".conversations[].from", ".conversations[].value") or shape.has(".from", ".value"):
            return True
        types = shape.values_at(".messages[].content[].type") | shape.values_at(".content[].type")
        lf_parts = shape.has(".messages[].content[].value") or shape.has(".content[].value")
        return lf_parts and bool(types) and types <= LF_CONTENT_TYPES | set(_LF_MEDIA_TYPES)

    # A JSON array read item by item is read through iter_raw_records: it may be cut into chunks of items too.
    chunk_items = True

    def chunk_keys(self, path: Path) -> KeyFunction:
        """Every record of this format is keyed alike (see :mod:`msgtrain.ingest.core.chunks`)."""
        return self._chunk_key

    def _chunk_key(self, value: Any) -> ChunkKey:
        return conversation_chunk_key(LAYOUT, value)

    def read(self, path: Path) -> Iterator[ReadItem]:
        yield from read_conversation_file(path, LAYOUT, lambda conv: self.convert(path, conv))

    def convert(self, path: Path, conv: Conversation) -> Converted:
        container = conv.container
        if "chosen" in container or "rejected" in container:
            return _preference(path, conv)
        sharegpt = any(isinstance(t, dict) and "from" in t for t in conv.messages)
        to_turn = _sharegpt_turn if sharegpt else _llamafactory_turn
        turns = [to_turn(raw, i) for i, raw in enumerate(conv.messages)]
        media = MediaColumns(container)
        steps: list[Step] = []
        system = container.get("system")
        if isinstance(system, str) and system:
            steps.append(
                Step(PartsMessage(parts=(TextPart(text=system),), role_hint_for_llm="system", policy="system"))
            )
        steps.extend(_Builder(media).run(turns))
        media.check_consumed()
        mark_last_reply(steps, kto_label(container))
        graph = build_linear_graph(
            steps,
            base_id=base_graph_id(path, conv.ref),
            incomplete_from=conv.incomplete_from,
            tools=openai_tools(container.get("tools")),
            metadata={"source_format": self.name, "dialect": "sharegpt" if sharegpt else "llamafactory"},
        )
        extras = {k: v for k, v in container.items() if k not in ("tools", "system", *MEDIA_COLUMNS)}
        return Converted(graph, extras)


READER = ShareGPTReader()
