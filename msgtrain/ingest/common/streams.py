"""Streamed responses reassembled into the body the same call returns without streaming.

One accumulator per provider stream, each following the rules of that provider's own SDK, so a streamed call
becomes the very response body the readers already understand (``choices[].message``, a Responses ``response``,
an Anthropic ``Message``, a Gemini ``GenerateContentResponse``, a Bedrock Converse response). Every reader that
meets a stream (VCR cassettes, per-call ``{request, response}`` logs whose response is a list of chunks) goes
through :func:`assemble`; nothing else in msgtrain accumulates deltas.

Rules, per stream:
- OpenAI chat completions (openai-python ``ChatCompletionStreamState``): choices are kept by ``index`` (n > 1
  streams interleave them); each ``delta`` is merged into the choice's message with ``accumulate_delta``'s
  rules: strings concatenate, objects merge, lists of objects merge entry by entry by their ``index``
  (``tool_calls``; entries without an index, which some providers send whole, are appended), ``index``/``type``
  are replaced. Per-chunk ``logprobs.content`` (and ``refusal``) lists are
  appended, ``finish_reason`` is the last one sent, ``usage`` comes from the chunk that carries it (the last,
  choice-less chunk with ``stream_options.include_usage``), vLLM's per-chunk ``token_ids`` are appended and its
  ``prompt_token_ids`` kept. A ``content`` streamed as chunk lists (Mistral's reasoning models send
  ``[{"type": "thinking", "thinking": [{"type": "text", ...}]}]`` deltas, then text as strings) is kept as a list
  of parts: a string delta is a text part, and a part extends the last one when both are of the same type (the
  model emitted one contiguous thought or text). One deliberate difference: identifier fields (``role``, ``id``,
  ``name``) are set once, not concatenated. The SDK concatenates every repeated string, and OpenAI sends these only in a
  call's first chunk; but OpenAI-compatible providers behind routers repeat them in every chunk, and
  concatenating would turn ``role`` into ``assistantassistant`` and ``llm_version`` into
  ``llm_versionllm_version``. A repeated identifier is the same identifier.
- OpenAI Responses (openai-python ``ResponseStreamState``): ``response.completed`` (or ``.incomplete`` /
  ``.failed``) carries the whole response, and wins. Without it the response is rebuilt from
  ``response.created``, ``output_item.added`` / ``.done`` (a done item replaces the partial one),
  ``content_part.added``, and the ``output_text`` / ``refusal`` / ``function_call_arguments`` /
  ``reasoning_text`` / ``reasoning_summary_text`` deltas, each by ``output_index`` and part index; its status
  (the finish reason) is then unknown, not ``in_progress``.
- Anthropic Messages (anthropic-sdk-python ``accumulate_event``): ``message_start`` gives the message;
  ``content_block_start`` appends a block; ``content_block_delta`` extends the block at ``index`` (``text_delta``
  → text, ``input_json_delta`` → the tool input's JSON text, parsed at the end, the start block's input kept when
  no JSON came; ``thinking_delta`` → thinking; ``signature_delta`` sets the signature; ``citations_delta``
  appends); ``message_delta`` sets ``stop_reason`` / ``stop_sequence`` and updates usage. An ``error`` event is a
  failed call.
- Gemini ``streamGenerateContent`` (a JSON array, or SSE with ``alt=sse``): each chunk is a
  ``GenerateContentResponse`` holding the next parts of each candidate (by ``index``). Parts are concatenated in
  order; a text part directly following a text part of the same kind (thought or not) extends it, since the
  model emitted one contiguous text (a ``thoughtSignature`` on either is kept); function calls and media parts
  stay parts of their own. ``finishReason``, ``usageMetadata`` and ``modelVersion`` come from the last chunk
  that has them, ``logprobsResult`` candidates are appended.
- Bedrock ``converse-stream`` (AWS event stream; the AWS SDKs' event shapes): ``messageStart`` gives the role,
  ``contentBlockStart`` opens a ``toolUse`` block, ``contentBlockDelta`` extends the block at
  ``contentBlockIndex`` (``text``, ``toolUse.input`` JSON text, ``reasoningContent`` text / signature /
  redacted bytes), ``messageStop`` gives ``stopReason``, ``metadata`` the usage. Bedrock
  ``invoke-with-response-stream`` wraps provider events as ``chunk`` messages whose ``bytes`` are base64 JSON:
  those are unwrapped and read by the provider's own accumulator (Anthropic).

A stream that reports an error (Anthropic ``error`` event, Responses ``response.failed`` without output,
event-stream exceptions) raises :class:`StreamFailed` (code ``error_response``): the call produced nothing to
train on.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from collections.abc import Iterable
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.core.http_bodies import (
    event_stream_messages,
    is_event_stream,
    is_sse,
    sse_events,
)

STREAM_KINDS = ("openai_chat", "openai_responses", "anthropic", "gemini", "bedrock_converse", "bedrock_invoke")
# Set once, never concatenated (see the module docstring).
_IDENTIFIERS = frozenset({"role", "id", "name", "index", "type"})


class StreamFailed(ValidationError):
    """The stream itself reports that the call failed: nothing was sampled."""

    code = "error_response"


def _bad(message: str, where: str) -> ValidationError:
    return ValidationError(
        message,
        where=where,
        code="bad_stream",
        hint="a streamed response must hold the provider's stream events in order, as they were received",
    )


# --------------------------------------------------------------------------- from bodies to events


def stream_events(body: Any, where: str = "response") -> list[Any]:
    """The JSON events of a streamed body: a list of already-parsed chunks as it is, SSE ``data:`` payloads
    (``[DONE]`` dropped), a JSON array (Gemini), or JSON lines."""
    if isinstance(body, list):
        return body
    if isinstance(body, bytes | bytearray):
        body = bytes(body).decode("utf-8", "replace")
    if not isinstance(body, str):
        raise _bad("streamed response is neither text nor a list of chunks", where)
    text = body.strip()
    if not text:
        return []
    if is_sse(text):
        out: list[Any] = []
        for event in sse_events(text):
            data = event.data.strip()
            if not data or data == "[DONE]":
                continue
            try:
                value = json.loads(data)
            except json.JSONDecodeError as e:
                raise _bad(f"SSE event {event.event or 'data'!r} is not JSON: {e}", where) from e
            if isinstance(value, dict) and event.event and "type" not in value:
                value = {**value, "type": event.event}
            out.append(value)
        return out
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, list):
        return whole
    if isinstance(whole, dict):
        return [whole]
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise _bad(f"streamed body is not SSE, a JSON array or JSON lines: {e}", where) from e


def aws_events(body: bytes, where: str = "response") -> list[tuple[str, Any]]:
    """(event type, JSON payload) of each AWS event-stream message; an exception message fails the call."""
    out: list[tuple[str, Any]] = []
    for message in event_stream_messages(body, where):
        kind = str(message.headers.get(":message-type", "event"))
        name = str(message.headers.get(":event-type") or message.headers.get(":exception-type") or "")
        try:
            payload = json.loads(message.payload.decode("utf-8")) if message.payload else {}
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise _bad(f"event {name!r} payload is not JSON: {e}", where) from e
        if kind in ("exception", "error"):
            detail = payload.get("message") if isinstance(payload, dict) else None
            raise StreamFailed(f"the stream reported {name or kind}: {detail or payload}", where=where)
        out.append((name, payload))
    return out


def assemble(kind: str, body: Any, where: str = "response") -> dict[str, Any]:
    """The non-streamed response body equivalent to a streamed ``body`` of provider ``kind``."""
    if kind in ("bedrock_converse", "bedrock_invoke"):
        if isinstance(body, list):
            events = [_typed_event(e) for e in body]
        elif isinstance(body, bytes | bytearray) and is_event_stream(bytes(body)):
            events = aws_events(bytes(body), where)
        else:
            raise _bad("a Bedrock stream is an AWS event stream (application/vnd.amazon.eventstream)", where)
        if kind == "bedrock_converse":
            return converse_response(events, where)
        chunks = _invoke_chunks(events, where)
        if chunks and all(isinstance(c, dict) and _CONVERSE_EVENTS & c.keys() for c in chunks):
            # Amazon Nova's InvokeModel streams Converse events ({"messageStart": {...}}) in its chunks (the last
            # one with Bedrock's invocation metrics beside them).
            return converse_response([(k, v) for c in chunks for k, v in c.items() if k in _CONVERSE_EVENTS], where)
        return anthropic_message(chunks, where)
    events_list = stream_events(body, where)
    if kind == "openai_chat":
        return chat_completion(events_list, where)
    if kind == "openai_responses":
        return responses_response(events_list, where)
    if kind == "anthropic":
        return anthropic_message(events_list, where)
    if kind == "gemini":
        return gemini_response(events_list, where)
    raise ValueError(f"unknown stream kind {kind!r}; expected one of {STREAM_KINDS}")


def _typed_event(event: Any) -> tuple[str, Any]:
    """A logged Bedrock event as (type, payload): ``{"contentBlockDelta": {...}}`` (the SDKs' shape)."""
    if isinstance(event, dict) and len(event) == 1:
        ((name, payload),) = event.items()
        return str(name), payload
    return "", event


def _objects(events: Iterable[Any], where: str) -> list[dict[str, Any]]:
    out = []
    for i, event in enumerate(events):
        if not isinstance(event, dict):
            raise _bad(f"stream event {i} is not an object", where)
        out.append(event)
    return out


# --------------------------------------------------------------------------- OpenAI chat completions


def accumulate_delta(acc: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """Merge one ``delta`` into ``acc`` (in place) by openai-python's rules, identifiers set once."""
    for key, value in delta.items():
        if key not in acc or acc[key] is None:
            acc[key] = copy.deepcopy(value)
            continue
        if value is None:
            continue
        current = acc[key]
        if key == "content" and (isinstance(current, list) or isinstance(value, list)):
            acc[key] = _merge_content(current, value)
            continue
        if key in _IDENTIFIERS:
            if value != "" or key in ("index", "type"):
                acc[key] = value if key in ("index", "type") or current in ("", None) else current
            continue
        if isinstance(current, str) and isinstance(value, str):
            acc[key] = current + value
        elif isinstance(current, dict) and isinstance(value, dict):
            accumulate_delta(current, value)
        elif isinstance(current, list) and isinstance(value, list):
            if all(not isinstance(x, dict) for x in current) and all(not isinstance(x, dict) for x in value):
                current.extend(value)
                continue
            for entry in value:
                index = entry.get("index") if isinstance(entry, dict) else None
                if not isinstance(index, int):
                    # Whole entries (OpenRouter annotations, Groq executed tools) arrive once, without an index:
                    # appended. openai-python raises here; the entries are complete, so nothing is guessed.
                    current.append(copy.deepcopy(entry))
                    continue
                found = next((x for x in current if isinstance(x, dict) and x.get("index") == index), None)
                if found is None:
                    current.append(copy.deepcopy(entry))
                else:
                    accumulate_delta(found, entry)
        else:
            acc[key] = value  # numbers and mismatched kinds: the latest value
    return acc


def _merge_content(current: Any, value: Any) -> list[Any]:
    """Chat ``content`` deltas of which one at least is a list of parts, as one list (see the module doc)."""

    def parts(content: Any) -> list[Any]:
        if isinstance(content, str):
            return [{"type": "text", "text": content}] if content else []
        return copy.deepcopy(content) if isinstance(content, list) else []

    merged = parts(current)
    for part in parts(value):
        last = merged[-1] if merged else None
        kind = part.get("type") if isinstance(part, dict) else None
        if isinstance(last, dict) and kind in ("text", "thinking") and last.get("type") == kind:
            field = "text" if kind == "text" else "thinking"
            old, new = last.get(field), part.get(field)
            if isinstance(old, str) and isinstance(new, str):
                last[field] = old + new
                continue
            if isinstance(old, list) and isinstance(new, list):  # Mistral: a thought is a list of text chunks
                last[field] = _merge_content(old, new)
                continue
        merged.append(part)
    return merged


def chat_completion(chunks: Iterable[Any], where: str = "response") -> dict[str, Any]:
    """``chat.completion.chunk`` events → one ``chat.completion`` body."""
    out: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    for chunk in _objects(chunks, where):
        if chunk.get("error") and not chunk.get("choices"):
            raise StreamFailed(f"the stream reported an error: {str(chunk['error'])[:200]}", where=where)
        for key in ("id", "model", "created", "system_fingerprint", "service_tier", "prompt_token_ids"):
            if chunk.get(key) not in (None, "") and out.get(key) in (None, ""):
                out[key] = chunk[key]
        if chunk.get("usage"):
            out["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                raise _bad("a chunk's choice is not an object", where)
            index = choice.get("index", 0)
            snap = choices.setdefault(index, {"index": index, "message": {}, "finish_reason": None})
            delta = choice.get("delta") or choice.get("message") or {}
            if not isinstance(delta, dict):
                raise _bad(f"choice {index}'s delta is not an object", where)
            accumulate_delta(snap["message"], delta)
            if choice.get("finish_reason") is not None:
                snap["finish_reason"] = choice["finish_reason"]
            _extend_logprobs(snap, choice.get("logprobs"))
            if isinstance(choice.get("token_ids"), list):
                snap.setdefault("token_ids", []).extend(choice["token_ids"])
            if choice.get("prompt_token_ids") is not None and "prompt_token_ids" not in snap:
                snap["prompt_token_ids"] = choice["prompt_token_ids"]
    for snap in choices.values():
        snap["message"].setdefault("role", "assistant")
        for call in snap["message"].get("tool_calls") or []:
            if isinstance(call, dict):
                call.pop("index", None)  # a position in the stream, not part of the message
    out["object"] = "chat.completion"
    out["choices"] = [choices[i] for i in sorted(choices)]
    return out


def _extend_logprobs(snap: dict[str, Any], logprobs: Any) -> None:
    if not isinstance(logprobs, dict):
        return
    acc = snap.setdefault("logprobs", {})
    for key in ("content", "refusal"):
        if isinstance(logprobs.get(key), list):
            acc.setdefault(key, []).extend(logprobs[key])


# --------------------------------------------------------------------------- OpenAI Responses

_FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


def responses_response(events: Iterable[Any], where: str = "response") -> dict[str, Any]:
    """Responses stream events → the final ``response`` object."""
    snapshot: dict[str, Any] = {}
    items: dict[int, dict[str, Any]] = {}
    for event in _objects(events, where):
        kind = str(event.get("type", ""))
        if kind in _FINAL_EVENTS and isinstance(event.get("response"), dict):
            final = event["response"]
            if kind == "response.failed" and not final.get("output"):
                raise StreamFailed(f"the response failed: {str(final.get('error'))[:200]}", where=where)
            if final.get("output") or not items:
                return final
            snapshot = {**final}  # a final event without its output (some proxies strip it): keep what streamed
            break
        if kind in ("response.created", "response.in_progress") and isinstance(event.get("response"), dict):
            snapshot = {**event["response"]}
        elif kind == "error":
            raise StreamFailed(f"the stream reported an error: {event.get('message') or event}", where=where)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = event.get("item")
            if isinstance(item, dict):
                items[int(event.get("output_index", len(items)))] = copy.deepcopy(item)
        elif kind == "response.content_part.added":
            item = items.get(int(event.get("output_index", -1)))
            if item is not None and isinstance(event.get("part"), dict):
                _slot(item, "content", event.get("content_index"), copy.deepcopy(event["part"]))
        elif kind == "response.reasoning_summary_part.added":
            item = items.get(int(event.get("output_index", -1)))
            if item is not None and isinstance(event.get("part"), dict):
                _slot(item, "summary", event.get("summary_index"), copy.deepcopy(event["part"]))
        elif kind.endswith(".delta"):
            _responses_delta(items, kind, event)
    if not snapshot and not items:
        raise _bad("the Responses stream holds no response events", where)
    snapshot["output"] = [items[i] for i in sorted(items)]
    snapshot.setdefault("object", "response")
    if snapshot.get("status") in ("in_progress", "queued"):
        snapshot["status"] = None  # the stream ended without saying how the response finished

    return snapshot


def _slot(item: dict[str, Any], key: str, index: Any, value: dict[str, Any]) -> None:
    parts = item.setdefault(key, [])
    i = index if isinstance(index, int) else len(parts)
    while len(parts) <= i:
        parts.append({})
    parts[i] = value


def _responses_delta(items: dict[int, dict[str, Any]], kind: str, event: dict[str, Any]) -> None:
    item = items.get(int(event.get("output_index", -1)))
    delta = event.get("delta")
    if item is None or not isinstance(delta, str):
        return
    if kind == "response.function_call_arguments.delta":
        item["arguments"] = str(item.get("arguments") or "") + delta
    elif kind == "response.custom_tool_call_input.delta":
        item["input"] = str(item.get("input") or "") + delta
    elif kind in ("response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta"):
        field = "refusal" if kind == "response.refusal.delta" else "text"
        default = {"response.output_text.delta": "output_text", "response.reasoning_text.delta": "reasoning_text"}
        parts = item.setdefault("content", [])
        i = event.get("content_index", 0)
        while len(parts) <= i:
            parts.append({"type": default.get(kind, "refusal"), field: ""})
        parts[i][field] = str(parts[i].get(field) or "") + delta
    elif kind == "response.reasoning_summary_text.delta":
        parts = item.setdefault("summary", [])
        i = event.get("summary_index", 0)
        while len(parts) <= i:
            parts.append({"type": "summary_text", "text": ""})
        parts[i]["text"] = str(parts[i].get("text") or "") + delta


# --------------------------------------------------------------------------- Anthropic Messages


def anthropic_message(events: Iterable[Any], where: str = "response") -> dict[str, Any]:
    """Messages stream events → the final ``Message``."""
    message: dict[str, Any] | None = None
    json_text: dict[int, str] = {}
    for event in _objects(events, where):
        kind = event.get("type")
        if kind == "message_start":
            message = copy.deepcopy(event.get("message") or {})
            message["content"] = list(message.get("content") or [])
            continue
        if kind == "error":
            raise StreamFailed(f"the stream reported an error: {str(event.get('error'))[:200]}", where=where)
        if kind in ("ping", "message_stop", "content_block_stop") or message is None:
            if kind not in ("ping", "message_stop", "content_block_stop"):
                raise _bad(f"event {kind!r} before message_start", where)
            continue
        content: list[dict[str, Any]] = message["content"]
        if kind == "content_block_start":
            block = copy.deepcopy(event.get("content_block") or {})
            index = event.get("index", len(content))
            while len(content) <= index:
                content.append({})
            content[index] = block
        elif kind == "content_block_delta":
            index = event.get("index")
            if not isinstance(index, int) or not 0 <= index < len(content):
                raise _bad(f"content_block_delta for block {index!r} that was never started", where)
            _anthropic_delta(content[index], index, event.get("delta") or {}, json_text)
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            for key in ("stop_reason", "stop_sequence"):
                if key in delta:
                    message[key] = delta[key]
            usage = event.get("usage")
            if isinstance(usage, dict):
                message.setdefault("usage", {}).update({k: v for k, v in usage.items() if v is not None})
    if message is None:
        raise _bad("the Messages stream has no message_start event", where)
    for index, text in json_text.items():
        block = message["content"][index]
        try:
            block["input"] = json.loads(text) if text.strip() else block.get("input", {})
        except json.JSONDecodeError:
            block["input"] = text  # a cut-off stream: the argument text as the model emitted it
    return message


def _anthropic_delta(block: dict[str, Any], index: int, delta: dict[str, Any], json_text: dict[int, str]) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = str(block.get("text") or "") + str(delta.get("text", ""))
    elif kind == "input_json_delta":
        json_text[index] = json_text.get(index, "") + str(delta.get("partial_json", ""))
    elif kind == "thinking_delta":
        block["thinking"] = str(block.get("thinking") or "") + str(delta.get("thinking", ""))
    elif kind == "signature_delta":
        block["signature"] = delta.get("signature")
    elif kind == "citations_delta":
        block.setdefault("citations", []).append(delta.get("citation"))


# --------------------------------------------------------------------------- Gemini streamGenerateContent


def gemini_response(chunks: Iterable[Any], where: str = "response") -> dict[str, Any]:
    """``streamGenerateContent`` chunks → one ``GenerateContentResponse``."""
    out: dict[str, Any] = {}
    candidates: dict[int, dict[str, Any]] = {}
    for chunk in _objects(chunks, where):
        if chunk.get("error"):
            raise StreamFailed(f"the stream reported an error: {str(chunk['error'])[:200]}", where=where)
        for key in ("modelVersion", "responseId", "usageMetadata", "promptFeedback", "createTime"):
            if chunk.get(key) is not None:
                out[key] = chunk[key]
        for candidate in chunk.get("candidates") or []:
            if not isinstance(candidate, dict):
                raise _bad("a chunk's candidate is not an object", where)
            index = candidate.get("index", 0)
            snap = candidates.setdefault(index, {"index": index, "content": {"role": "model", "parts": []}})
            content = candidate.get("content")
            if isinstance(content, dict):
                if content.get("role"):
                    snap["content"]["role"] = content["role"]
                for part in content.get("parts") or []:
                    _gemini_part(snap["content"]["parts"], part)
            for key, value in candidate.items():
                if key in ("content", "index", "logprobsResult") or value is None:
                    continue
                snap[key] = value
            chosen = (candidate.get("logprobsResult") or {}).get("chosenCandidates")
            if isinstance(chosen, list):
                result = snap.setdefault("logprobsResult", {"chosenCandidates": [], "topCandidates": []})
                result["chosenCandidates"].extend(chosen)
                result["topCandidates"].extend(candidate["logprobsResult"].get("topCandidates") or [])
    out["candidates"] = [candidates[i] for i in sorted(candidates)]
    return out


def _gemini_part(parts: list[dict[str, Any]], part: Any) -> None:
    if not isinstance(part, dict):
        parts.append(part)
        return
    last = parts[-1] if parts else None
    text_only = set(part) <= {"text", "thought", "thoughtSignature"} and "text" in part
    if (
        text_only
        and isinstance(last, dict)
        and set(last) <= {"text", "thought", "thoughtSignature"}
        and "text" in last
        and bool(last.get("thought")) == bool(part.get("thought"))
    ):
        last["text"] = str(last["text"]) + str(part["text"])
        if part.get("thoughtSignature"):
            last["thoughtSignature"] = part["thoughtSignature"]
        return
    parts.append(copy.deepcopy(part))


# --------------------------------------------------------------------------- Bedrock


def converse_response(events: Iterable[tuple[str, Any]], where: str = "response") -> dict[str, Any]:
    """``converse-stream`` events → a Converse response ``{output: {message}, stopReason, usage}``."""
    role = "assistant"
    blocks: dict[int, dict[str, Any]] = {}
    tool_json: dict[int, str] = {}
    out: dict[str, Any] = {}
    for name, payload in events:
        if not isinstance(payload, dict):
            raise _bad(f"event {name!r} payload is not an object", where)
        if name == "messageStart":
            role = str(payload.get("role") or role)
        elif name == "contentBlockStart":
            start = payload.get("start") or {}
            index = int(payload.get("contentBlockIndex", len(blocks)))
            if isinstance(start.get("toolUse"), dict):
                blocks[index] = {"toolUse": {**start["toolUse"], "input": {}}}
        elif name == "contentBlockDelta":
            index = int(payload.get("contentBlockIndex", 0))
            _converse_delta(blocks, tool_json, index, payload.get("delta") or {})
        elif name == "messageStop":
            out["stopReason"] = payload.get("stopReason")
            if payload.get("additionalModelResponseFields") is not None:
                out["additionalModelResponseFields"] = payload["additionalModelResponseFields"]
        elif name == "metadata":
            out.update({k: v for k, v in payload.items() if k in ("usage", "metrics", "trace")})
        elif name.endswith("Exception"):
            raise StreamFailed(f"the stream reported {name}: {payload.get('message')}", where=where)
    for index, text in tool_json.items():
        use = blocks[index]["toolUse"]
        try:
            use["input"] = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            use["input"] = text
    out["output"] = {"message": {"role": role, "content": [blocks[i] for i in sorted(blocks)]}}
    return out


def _converse_delta(blocks: dict[int, dict[str, Any]], tool_json: dict[int, str], index: int, delta: Any) -> None:
    if not isinstance(delta, dict):
        return
    if "text" in delta:
        block = blocks.setdefault(index, {"text": ""})
        block["text"] = str(block.get("text", "")) + str(delta["text"])
    elif isinstance(delta.get("toolUse"), dict):
        blocks.setdefault(index, {"toolUse": {"input": {}}})
        tool_json[index] = tool_json.get(index, "") + str(delta["toolUse"].get("input", ""))
    elif isinstance(delta.get("reasoningContent"), dict):
        reasoning = delta["reasoningContent"]
        block = blocks.setdefault(index, {"reasoningContent": {}})["reasoningContent"]
        if "redactedContent" in reasoning:
            block["redactedContent"] = reasoning["redactedContent"]
            return
        text = block.setdefault("reasoningText", {"text": ""})
        if "text" in reasoning:
            text["text"] = str(text.get("text", "")) + str(reasoning["text"])
        if reasoning.get("signature"):
            text["signature"] = reasoning["signature"]


_CONVERSE_EVENTS = frozenset(
    {"messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"}
)


def _invoke_chunks(events: list[tuple[str, Any]], where: str) -> list[Any]:
    """``invoke-with-response-stream`` ``chunk`` events → the provider's own events (base64 JSON in ``bytes``)."""
    out: list[Any] = []
    for name, payload in events:
        if name != "chunk" and not (isinstance(payload, dict) and "bytes" in payload):
            continue
        raw = payload.get("bytes") if isinstance(payload, dict) else None
        if not isinstance(raw, str):
            raise _bad("a Bedrock chunk event has no bytes", where)
        try:
            out.append(json.loads(base64.b64decode(raw)))
        except (binascii.Error, ValueError) as e:
            raise _bad(f"a Bedrock chunk's bytes are not base64 JSON: {e}", where) from e
    return out


def response_body(kind: str, response: Any, where: str = "response") -> Any:
    """A logged response as its final body: a list of stream chunks/events is reassembled, anything else is
    returned as it is (the per-call log readers call this on every ``response``)."""
    if isinstance(response, list):
        return assemble(kind, response, where)
    return response


def is_chunk_list(kind: str, value: Any) -> bool:
    """Whether a logged ``response`` is a list of stream events of provider ``kind`` (for detection)."""
    if not isinstance(value, list) or not value or not isinstance(value[0], dict):
        return False
    first = value[0]
    if kind == "openai_chat":
        choices = first.get("choices")
        return first.get("object") == "chat.completion.chunk" or (
            isinstance(choices, list) and any(isinstance(c, dict) and "delta" in c for c in choices)
        )
    if kind == "anthropic":
        return first.get("type") == "message_start"
    if kind == "openai_responses":
        return str(first.get("type", "")).startswith("response.")
    return False
