"""Ollama's native chat API (``POST /api/chat``) as the OpenAI chat-completions bodies the call readers read.

Ollama's request is an OpenAI-like message list with its own dialect; its response holds one ``message`` (not
``choices``), streamed as JSON lines (one chunk per line, the last ``done``). What is mapped (``ollama/api/types.go``
``ChatRequest`` / ``ChatResponse`` / ``Message``):

- ``images`` (base64, no media type) → image parts before the text; ``thinking`` → ``reasoning_content``;
- ``tool_calls`` (``{"function": {"name", "arguments": {...}}}``, no id) get the id ``call_<message>_<k>``, from the
  message's position in the conversation: the same in the response and in every later request repeating it, so
  a repeated history maps onto the same nodes; a ``tool`` message answers the oldest open call (of its
  ``tool_name`` when given), as Ollama pairs them;
- streamed chunks: ``content`` and ``thinking`` concatenated, ``tool_calls`` appended, the ``done`` chunk's
  ``done_reason`` and counts kept;
- ``prompt_eval_count`` / ``eval_count`` → ``usage.prompt_tokens`` / ``completion_tokens``.
"""

from __future__ import annotations

import json
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.shapes import MessageNormaliser


def _message(raw: Any, norm: MessageNormaliser, where: str) -> list[dict[str, Any]]:
    if not isinstance(raw, dict):
        raise ValidationError("message is not an object", where=where, code="bad_message")
    data = dict(raw)
    images = data.pop("images", None)
    if images:
        parts: list[Any] = [
            {"type": "image_url", "image_url": {"url": f"data:image/*;base64,{image}"}} for image in images
        ]
        if data.get("content"):
            parts.append({"type": "text", "text": data["content"]})
        data["content"] = parts
    if data.get("role") == "assistant" and data.get("thinking"):
        data["reasoning_content"] = data.pop("thinking")
    if data.get("role") == "tool" and "tool_name" in data:
        data["name"] = data.pop("tool_name")
    return norm.normalise(data, where)


def as_openai(request: dict[str, Any], response: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(request, response) of one ``/api/chat`` call as OpenAI chat-completions bodies."""
    messages = request.get("messages")
    if not isinstance(messages, list):
        raise ValidationError("request has no messages list", where="request", code="bad_request")
    norm = MessageNormaliser()
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(messages):
        out.extend(_message(raw, norm, f"messages[{i}]"))
    openai_request = {k: v for k, v in request.items() if k not in ("messages", "options")}
    options = request.get("options")
    if isinstance(options, dict):  # sampling options, under OpenAI's names where they have one
        openai_request |= {k: options[k] for k in ("temperature", "top_p", "seed", "stop") if k in options}
    openai_request["messages"] = out
    reply = response.get("message")
    if not isinstance(reply, dict):
        raise ValidationError("response has no message", where="response", code="bad_response")
    (answer,) = _message({**reply, "role": "assistant"}, norm, f"messages[{len(messages)}]")
    body: dict[str, Any] = {
        "model": response.get("model"),
        "choices": [{"index": 0, "message": answer, "finish_reason": response.get("done_reason")}],
    }
    if isinstance(response.get("prompt_eval_count"), int):
        body["usage"] = {
            "prompt_tokens": response["prompt_eval_count"],
            "completion_tokens": response.get("eval_count"),
        }
    return openai_request, body


def response_body(body: Any) -> Any:
    """The response as one body: a streamed one (JSON lines, or a list of chunks) reassembled."""
    if isinstance(body, dict):
        return body
    if isinstance(body, str):
        try:
            chunks = [json.loads(line) for line in body.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise ValidationError(
                f"streamed response line is not JSON: {e}", where="response", code="bad_stream"
            ) from e
    elif isinstance(body, list):
        chunks = body
    else:
        return body
    merged: dict[str, Any] = {}
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    for chunk in chunks:
        if not isinstance(chunk, dict):
            raise ValidationError("streamed chunk is not an object", where="response", code="bad_stream")
        if chunk.get("error"):
            return chunk
        part = chunk.get("message") or {}
        message["content"] += str(part.get("content") or "")
        if part.get("thinking"):
            message["thinking"] = str(message.get("thinking", "")) + str(part["thinking"])
        if part.get("tool_calls"):
            message.setdefault("tool_calls", []).extend(part["tool_calls"])
        merged |= {k: v for k, v in chunk.items() if k != "message"}
    return {**merged, "message": message}
