"""Adapter between the message model and OpenAI chat-completions message dicts.

Invariants:
- ``from_openai_message`` accepts what real clients send: string / list / null content, ``text`` and
  ``image_url`` (and ``input_audio``/``file``) parts, ``tool_calls`` with JSON-string or dict arguments,
  ``developer`` (as system), ``reasoning_content`` / ``reasoning``. Argument strings are kept verbatim in
  ``raw_arguments`` so rendering reproduces exactly what the model emitted.
- ``to_openai_messages`` follows seed 003's adapter rule by default: only complete call + result pairs are
  projected; incomplete calls are skipped and counted in :class:`Projection`. Rendering a sampled turn for
  training uses ``complete_pairs_only=False`` (a final turn whose calls never ran was still sampled).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from msgtrain.errors import ValidationError
from msgtrain.model.message import (
    DEFAULT_POLICY,
    RUNTIME_POLICY,
    AnyMessage,
    Generation,
    MediaPart,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultMessage,
    OptionResultPayload,
    Part,
    PartsMessage,
    ReasoningPart,
    TextPart,
    assembled,
)

KNOWN_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# msgtrain's key on a tool message answering a call the reply before it wrote as text (Hermes' ``<tool_call>`` in its
# content, no structured call logged): the tool's text, a tool-role message with no call to pair it with
TEXT_CALL_RESULT = "answers_text_call"
# msgtrain's keys for what an OpenAI dict has no field for: a tool message whose result the log marks as a failure
# (Anthropic's ``is_error``, a Converse result's ``status: error``), and a reasoning part the provider keeps encrypted
# (Anthropic's ``redacted_thinking``, Converse's ``redactedContent``: no text, its payload as the part's signature)
RESULT_ERROR = "is_error"
REDACTED_REASONING = "redacted"
_MEDIA_KEYS = {"image_url": "image", "input_audio": "audio", "video_url": "video", "file": "document"}
# Every content part type this module reads (a refusal part is read as text by the chat reader).
CONTENT_PART_TYPES = frozenset(
    {"text", "input_text", "output_text", "image", "input_image", "reasoning", "thinking", "refusal", *_MEDIA_KEYS}
)


def _content_parts(content: Any, where: str) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [_text_part(content)] if content != "" else []
    if not isinstance(content, list):
        raise ValidationError(
            f"content must be a string, a list of parts or null, got {type(content).__name__}",
            where=where,
            hint="send content as a string or as [{'type': 'text', 'text': ...}]",
            code="bad_content",
        )
    parts: list[Part] = []
    for j, item in enumerate(content):
        if isinstance(item, str):
            parts.append(_text_part(item))
            continue
        if not isinstance(item, dict):
            raise ValidationError(f"content[{j}] is not an object", where=where, code="bad_content")
        kind = item.get("type")
        if kind in ("text", "input_text", "output_text"):
            parts.append(_text_part(str(item.get("text", ""))))
        elif kind in _MEDIA_KEYS or kind in ("image", "input_image"):
            modality = _MEDIA_KEYS.get(str(kind), "image")
            ref = item.get(kind) if kind in _MEDIA_KEYS else item
            url = (
                ref.get("url") or ref.get("image_url") or ref.get("file_id") or ref.get("file_data") or ref.get("data")
                if isinstance(ref, dict)
                else ref
            )
            if not isinstance(url, str) or not url:
                raise ValidationError(f"content[{j}] {kind} part has no url", where=where, code="bad_content")
            parts.append(MediaPart(modality=modality, url=url))
        elif kind in ("reasoning", "thinking") and item.get(REDACTED_REASONING) is True:
            signature = item.get("signature")
            parts.append(
                ReasoningPart(text="", signature=signature if isinstance(signature, str) else None, redacted=True)
            )
        elif kind in ("reasoning", "thinking"):
            text = _thought_text(item.get("text") or item.get("thinking") or "", j, where)
            parts.append(assembled(ReasoningPart, {"text": text}) if type(text) is str else ReasoningPart(text=text))
        else:
            raise ValidationError(
                f"content[{j}] has unknown part type {kind!r}",
                where=where,
                hint="supported part types: text, image_url, input_audio, video_url, file",
                code="bad_content",
            )
    return parts


def _thought_text(value: Any, j: int, where: str) -> str:
    """A reasoning part's text: a string, or (Mistral's ``ThinkChunk``) a list of text chunks, joined. Anything else
    is an error, never its ``str()``: a completion is trained on what the model sampled."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = [c if isinstance(c, str) else c.get("text") if isinstance(c, dict) else None for c in value]
        if all(isinstance(t, str) for t in texts):
            return "".join(t for t in texts if isinstance(t, str))
    raise ValidationError(
        f"content[{j}] reasoning part holds {type(value).__name__} that is not text",
        where=where,
        hint="a reasoning part holds a string, or a list of text chunks",
        code="bad_content",
    )


def parse_arguments(arguments: Any) -> tuple[dict[str, Any], str | None]:
    """Return (parsed arguments, verbatim argument text or None)."""
    if arguments is None:
        return {}, None
    if isinstance(arguments, dict):
        return arguments, None
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            # Malformed JSON is what the model emitted; keep it verbatim so the sampled text stays exact.
            return {}, arguments
        return (parsed if isinstance(parsed, dict) else {"value": parsed}), arguments
    return {"value": arguments}, None


def from_openai_message(
    data: dict[str, Any],
    *,
    index: int | None = None,
    call_names: dict[str, str] | None = None,
    policy: str = DEFAULT_POLICY,
) -> AnyMessage:
    """Convert one OpenAI chat message dict. ``call_names`` maps earlier call ids to names (for tool results).

    A tool message may hold its result as a JSON value under ``result`` (beside ``content``, its text): the readers'
    way to keep a result the log wrote as JSON, not text. One marked :data:`TEXT_CALL_RESULT` answers a call its reply
    wrote as text: a tool-role :class:`PartsMessage` of its content, no call id or name invented for it."""
    where = f"message[{index}]" if index is not None else "message"
    if not isinstance(data, dict):
        raise ValidationError("message is not a JSON object", where=where, code="bad_message")
    role = data.get("role")
    if role not in KNOWN_ROLES:
        raise ValidationError(
            f"unknown role {json.dumps(role, default=str)}",
            where=where,
            hint=f"use one of {', '.join(KNOWN_ROLES)}",
            code="unknown_role",
        )
    name = data.get("name") if isinstance(data.get("name"), str) else None
    parts = _content_parts(data.get("content"), where)
    if role in ("tool", "function") and data.get(TEXT_CALL_RESULT) is True:
        fields = {"parts": tuple(parts), "role_hint_for_llm": "tool", "policy": RUNTIME_POLICY, "name": name}
        return _message(PartsMessage, fields)
    if role in ("tool", "function"):
        call_id = data.get("tool_call_id") or (data.get("name") if role == "function" else None)
        if not call_id:
            raise ValidationError(
                "tool message missing tool_call_id",
                where=where,
                hint="set tool_call_id to the id of the call it answers",
                code="missing_tool_call_id",
            )
        option_name = name or (call_names or {}).get(call_id)
        if not option_name:
            raise ValidationError(
                "tool message missing name and answers no known call",
                where=where,
                hint="set name, or make sure an earlier assistant message has a tool call with this id",
                code="unpaired_result",
            )
        content = data.get("content")
        result: Any = (
            content if isinstance(content, str) else "\n".join(p.text for p in parts if isinstance(p, TextPart))
        )
        if "result" in data:  # a result logged as a JSON value (msgtrain's key, not OpenAI's): kept as the value
            result = data["result"]
        payload = OptionResultPayload(
            invocation_id=str(call_id), option_name=option_name, result=result, is_error=data.get(RESULT_ERROR) is True
        )
        return _message(
            OptionResultMessage,
            {"result": payload, "policy": RUNTIME_POLICY, "role_hint_for_llm": "tool", "name": name},
        )
    metadata: dict[str, Any] = {}
    if role == "developer":
        metadata["openai_role"] = "developer"
    reasoning = data.get("reasoning_content")
    if reasoning is None and isinstance(data.get("reasoning"), str):
        reasoning = data.get("reasoning")
    if role == "assistant" and isinstance(reasoning, str) and reasoning != "":
        parts = [
            assembled(ReasoningPart, {"text": reasoning}) if type(reasoning) is str else ReasoningPart(text=reasoning),
            *parts,
        ]
    chat_role = "system" if role == "developer" else role
    raw_calls = data.get("tool_calls") or []
    if role == "assistant" and raw_calls:
        calls = []
        for k, call in enumerate(raw_calls):
            if not isinstance(call, dict):
                raise ValidationError(f"tool_calls[{k}] is not an object", where=where, code="bad_tool_call")
            fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else call
            call_id, call_name = call.get("id"), fn.get("name")
            if not call_id or not call_name:
                raise ValidationError(
                    f"tool_calls[{k}] needs an id and a function name",
                    where=where,
                    hint="every tool call must carry 'id' and 'function.name'",
                    code="bad_tool_call",
                )
            args, raw = parse_arguments(fn.get("arguments", fn.get("args")))
            calls.append(
                OptionCallPayload(
                    invocation_id=str(call_id), option_name=str(call_name), arguments=args, raw_arguments=raw
                )
            )
        fields = {"parts": tuple(parts), "calls": tuple(calls), "policy": policy, "role_hint_for_llm": "assistant"}
        if len({c.invocation_id for c in calls}) != len(calls):  # the model's own check names them
            return OptionCallMessage(**fields, name=name, metadata=metadata)
        return _message(OptionCallMessage, {**fields, "name": name, "metadata": metadata})
    policy = policy if chat_role == "assistant" else ("user" if chat_role == "user" else "system")
    fields = {"parts": tuple(parts), "role_hint_for_llm": chat_role, "policy": policy, "name": name}
    return _message(PartsMessage, {**fields, "metadata": metadata})


_Kind = TypeVar("_Kind", PartsMessage, OptionCallMessage, OptionResultMessage)


def _text_part(text: str) -> TextPart:
    return assembled(TextPart, {"text": text}) if type(text) is str else TextPart(text=text)


def _message(cls: type[_Kind], fields: dict[str, Any]) -> _Kind:
    """A message of fields this module built (parts, payloads, a fresh metadata dict, a role of :data:`KNOWN_ROLES`):
    assembled without validating them again, but for a policy or a name that is not a ``str`` (from a caller), which
    the model validates (and refuses) as it always did."""
    if type(fields["policy"]) is str and (fields["name"] is None or type(fields["name"]) is str):
        return assembled(cls, fields)
    return cls(**fields)


def check_reply_present(data: dict[str, Any], where: str, *, engine_ids: bool = False) -> None:
    """Refuse an assistant reply that holds nothing: no ``content`` key (or null content), no tool or function call,
    no reasoning, no refusal. Trained as is it would teach a bare end-of-turn; OpenAI's fine-tuning data checks
    count a message without content as a format error. Logged engine ids (``engine_ids``) prove the policy really
    emitted nothing, and then it is a real sample."""
    if engine_ids or data.get("content") is not None:
        return
    if data.get("tool_calls") or data.get("function_call") or data.get("refusal"):
        return
    if data.get("reasoning_content") or data.get("reasoning"):
        return
    raise ValidationError(
        "assistant reply has no content, no tool call and no engine token ids",
        where=where,
        hint="log the reply's content (an empty reply is content \"\"), or the engine's token ids",
        code="empty_reply",
    )


def from_openai_messages(messages: Iterable[dict[str, Any]], *, policy: str = DEFAULT_POLICY) -> list[AnyMessage]:
    """Convert a whole OpenAI message list, resolving tool-result names from earlier calls."""
    names: dict[str, str] = {}
    out: list[AnyMessage] = []
    for i, data in enumerate(messages):
        msg = from_openai_message(data, index=i, call_names=names, policy=policy)
        if isinstance(msg, OptionCallMessage):
            names.update({c.invocation_id: c.option_name for c in msg.calls})
        out.append(msg)
    return out


# Request fields that set how an OpenAI-compatible engine samples (vLLM and SGLang also take top_k, min_p).
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "seed", "n", "max_tokens", "max_completion_tokens")


def generation_from_choice(
    choice: dict[str, Any], response: dict[str, Any] | None = None, request: dict[str, Any] | None = None
) -> Generation | None:
    """Engine facts from an OpenAI/vLLM ``choices[i]`` (+ the response body, + the request for its sampling
    parameters): ids, logprobs, model..."""
    response = response or {}
    request = request or {}
    token_ids = choice.get("token_ids")
    logprobs = None
    lp = choice.get("logprobs")
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        logprobs = tuple(float(x.get("logprob", 0.0)) for x in lp["content"] if isinstance(x, dict))
    if token_ids is not None and logprobs is not None and len(logprobs) != len(token_ids):
        logprobs = None  # cannot align them with the sampled ids; keep the ids, which are the truth
    if token_ids is None:
        logprobs = None  # logprobs without ids cannot be placed on tokens
    prompt_ids = response.get("prompt_token_ids")
    # Ids are validated as integers by the model (in pydantic's core), not converted one by one in Python.
    gen = Generation(
        token_ids=tuple(token_ids) if token_ids is not None else None,
        logprobs=logprobs,
        prompt_token_ids=tuple(prompt_ids) if prompt_ids is not None else None,
        model=response.get("model"),
        finish_reason=choice.get("finish_reason"),
        created=response.get("created") if isinstance(response.get("created"), int) else None,
        sampling={k: request[k] for k in SAMPLING_FIELDS if isinstance(request.get(k), int | float)},
    )
    return gen


@dataclass
class Projection:
    """Result of projecting messages to OpenAI dicts; counts what the pairing rule skipped."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    skipped_calls: int = 0
    skipped_results: int = 0


def arguments_text(call: OptionCallPayload) -> str:
    return call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments, ensure_ascii=False)


def template_arguments(call: OptionCallPayload) -> dict[str, Any] | str:
    """Arguments as a serving engine hands them to a chat template: a dict when the text is a JSON object."""
    if call.raw_arguments is None:
        return call.arguments
    try:
        parsed = json.loads(call.raw_arguments)
    except json.JSONDecodeError:
        return call.raw_arguments
    return parsed if isinstance(parsed, dict) else call.raw_arguments


def result_text(payload: OptionResultPayload) -> str:
    if payload.result is None and payload.is_error:
        return payload.error_message or payload.error_type or "error"
    if isinstance(payload.result, str):
        return payload.result
    return json.dumps(payload.result, ensure_ascii=False, sort_keys=False)


def _content_value(parts: Sequence[Part], *, flat: bool) -> str | list[dict[str, Any]] | None:
    visible = [p for p in parts if not isinstance(p, ReasoningPart)]
    if not visible:
        return None
    if all(isinstance(p, TextPart) for p in visible):
        # Text-only content renders as one string: what chat templates expect (vLLM joins text parts with \n).
        return "\n".join(p.text for p in visible if isinstance(p, TextPart))
    out: list[dict[str, Any]] = []
    for p in visible:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        elif isinstance(p, MediaPart):
            if p.modality == "image":
                out.append({"type": "image_url", "image_url": {"url": p.url}} if not flat else {"type": "image"})
            else:
                out.append({"type": p.modality, p.modality: {"url": p.url}})
    return out


def to_openai_message(
    message: AnyMessage, *, calls: Sequence[OptionCallPayload] | None = None, for_template: bool = False
) -> dict[str, Any]:
    """One message as an OpenAI dict. ``for_template`` adds the aliases chat templates read.

    Template aliases: ``reasoning_content`` (Qwen-family) and ``thinking`` (harmony) for reasoning, and flat
    ``name``/``arguments`` on each tool call next to ``function`` (some templates read either). Content-less
    assistant messages get ``""`` because several templates concatenate content without a null check.
    """
    out: dict[str, Any] = {"role": message.role}
    if isinstance(message, OptionResultMessage):
        out["tool_call_id"] = message.result.invocation_id
        out["name"] = message.result.option_name
        out["content"] = result_text(message.result)
        return out
    content = _content_value(message.parts, flat=False)
    if message.role == "system" and message.metadata.get("openai_role") == "developer" and not for_template:
        out["role"] = "developer"
    if content is None and (for_template or message.role != "assistant"):
        content = ""
    out["content"] = content
    reasoning = message.reasoning
    if reasoning is not None and message.role == "assistant":
        out["reasoning_content"] = reasoning
        if for_template:
            out["thinking"] = reasoning
    if message.name is not None and message.role != "assistant":
        out["name"] = message.name
    if isinstance(message, OptionCallMessage):
        chosen = message.calls if calls is None else calls
        tool_calls = []
        for c in chosen:
            tc: dict[str, Any] = {
                "id": c.invocation_id,
                "type": "function",
                "function": {"name": c.option_name, "arguments": arguments_text(c)},
            }
            if for_template:
                # Serving engines (vLLM, SGLang) parse argument JSON into a dict before applying the template, so
                # the dict is what the policy's prompt was rendered from; unparseable text stays a string.
                tc["function"]["arguments"] = template_arguments(c)
                tc["name"] = c.option_name
                tc["arguments"] = c.arguments
            tool_calls.append(tc)
        if tool_calls:
            out["tool_calls"] = tool_calls
    return out


def to_openai_messages(messages: Iterable[AnyMessage], *, complete_pairs_only: bool = True) -> Projection:
    """Project a message sequence to OpenAI dicts (seed 003's pairing rule by default)."""
    msgs = list(messages)
    proj = Projection()
    # A pair is a call and a result *after* it; a result logged before its call answers nothing. Ids are unique
    # among open calls only (an agent may reuse an id once its call was answered), so a result answers the latest
    # open call with its id.
    answered: set[tuple[int, int]] = set()  # (message index, call index)
    open_calls: dict[str, tuple[int, int]] = {}
    for i, m in enumerate(msgs):
        if isinstance(m, OptionCallMessage):
            open_calls.update({c.invocation_id: (i, k) for k, c in enumerate(m.calls)})
        elif isinstance(m, OptionResultMessage) and m.result.invocation_id in open_calls:
            answered.add(open_calls.pop(m.result.invocation_id))
    issued: set[str] = set()
    for i, m in enumerate(msgs):
        if isinstance(m, OptionCallMessage):
            issued.update(c.invocation_id for c in m.calls)
            if complete_pairs_only:
                keep = [c for k, c in enumerate(m.calls) if (i, k) in answered]
                proj.skipped_calls += len(m.calls) - len(keep)
                if not keep and _content_value(m.parts, flat=False) is None and m.reasoning is None:
                    continue
                d = to_openai_message(m, calls=keep)
                if not keep:
                    d.pop("tool_calls", None)
                proj.messages.append(d)
                continue
        if isinstance(m, OptionResultMessage) and complete_pairs_only and m.result.invocation_id not in issued:
            proj.skipped_results += 1
            continue
        proj.messages.append(to_openai_message(m))
    return proj
