"""pydantic-ai's message history (``ModelMessagesTypeAdapter`` JSON, ``result.all_messages_json()``) as OpenAI chat
message dicts, for :class:`msgtrain.ingest.common.shapes.MessageNormaliser`.

A pydantic-ai ``ModelMessage`` is a ``{"kind": "request" | "response", "parts": [...]}`` object whose parts carry
a ``part_kind``. A request holds several messages (its ``system-prompt``, ``user-prompt``, ``tool-return`` and
``retry-prompt`` parts), a response is one assistant message (``text``, ``tool-call``, ``thinking`` parts), with
its ``usage`` and ``model_name`` beside it.

Invariants (each follows pydantic-ai's own rendering, ``pydantic_ai/messages.py`` and its model classes):
- A request's ``instructions`` are the system prompt, sent before its ``system-prompt`` parts; they are marked so
  that the normaliser keeps them once per conversation and refuses a conversation whose instructions change
  (each reply was sampled after other instructions: which system prompt trains it is ambiguous).
- A tool return is the text the model got: a string as is, anything else as compact JSON, a failed outcome
  wrapped as ``{"error": ...}`` (``ToolReturnPart.model_response_str``).
- A retry prompt is the text the model got (``RetryPromptPart.model_response``): a tool result when it names a
  tool, else a user message.
- A part outside this list (built-in tools, files, compactions) is an error naming it, never dropped.
"""

from __future__ import annotations

import json
from typing import Any

from msgtrain.errors import ValidationError

INSTRUCTIONS_MARK = "_pydantic_ai_instructions"
_REQUEST_PARTS = frozenset({"system-prompt", "user-prompt", "tool-return", "retry-prompt"})
_RESPONSE_PARTS = frozenset({"text", "tool-call", "thinking"})


def is_pydantic_ai_message(obj: Any) -> bool:
    """A ``ModelRequest`` / ``ModelResponse`` object: ``kind`` and a list of parts that each carry ``part_kind``."""
    if not isinstance(obj, dict) or obj.get("kind") not in ("request", "response"):
        return False
    parts = obj.get("parts")
    return isinstance(parts, list) and all(isinstance(p, dict) and isinstance(p.get("part_kind"), str) for p in parts)


def pydantic_ai_role(obj: dict[str, Any]) -> str:
    """The role a request or response stands for (a request may hold system prompts and tool results too)."""
    return "assistant" if obj.get("kind") == "response" else "user"


def pydantic_ai_messages(obj: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """One ``ModelMessage`` → OpenAI chat message dicts (see the module docstring)."""
    if obj["kind"] == "response":
        return [_response(obj, where)]
    out: list[dict[str, Any]] = []
    instructions = obj.get("instructions")
    if isinstance(instructions, str) and instructions:
        out.append({"role": "system", "content": instructions, INSTRUCTIONS_MARK: True})
    for j, part in enumerate(obj["parts"]):
        kind = part["part_kind"]
        content = part.get("content")
        if kind not in _REQUEST_PARTS:
            raise _unsupported(kind, j, where)
        if kind == "system-prompt":
            out.append({"role": "system", "content": content})
        elif kind == "user-prompt":
            out.append({"role": "user", "content": _user_content(content, j, where)})
        elif kind == "tool-return":
            out.append(_tool(part, _tool_return_text(part), where, j))
        elif part.get("tool_name"):
            out.append(_tool(part, _retry_text(part), where, j))
        else:
            out.append({"role": "user", "content": _retry_text(part)})
    return out


def _response(obj: dict[str, Any], where: str) -> dict[str, Any]:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, part in enumerate(obj["parts"]):
        kind = part["part_kind"]
        if kind not in _RESPONSE_PARTS:
            raise _unsupported(kind, j, where)
        if kind == "text":
            texts.append(str(part.get("content") or ""))
        elif kind == "thinking":
            thoughts.append(str(part.get("content") or ""))
        else:
            args = part.get("args")
            call = {"name": part.get("tool_name"), "arguments": args if isinstance(args, str | dict) else {}}
            calls.append({"id": part.get("tool_call_id"), "type": "function", "function": call})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if thoughts:
        message["reasoning_content"] = "\n".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    for key in ("usage", "model_name"):  # what the call reported, for the usage check
        if obj.get(key) is not None:
            message[key] = obj[key]
    return message


def _tool(part: dict[str, Any], text: str, where: str, j: int) -> dict[str, Any]:
    call_id = part.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ValidationError(
            f"parts[{j}] answers a tool call without its tool_call_id", where=where, code="bad_content"
        )
    return {"role": "tool", "tool_call_id": call_id, "name": part.get("tool_name"), "content": text}


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _tool_return_text(part: dict[str, Any]) -> str:
    content = part.get("content")
    text = "" if content is None else content if isinstance(content, str) else _compact(content)
    return _compact({"error": text}) if part.get("outcome") == "failed" else text


def _retry_text(part: dict[str, Any]) -> str:
    content = part.get("content")
    named = bool(part.get("tool_name"))
    if isinstance(content, str):
        description = content if named else f"Validation feedback:\n{content}"
    else:
        errors = content if isinstance(content, list) else [content]
        shown = []
        for e in errors:
            drop = {"ctx"} if named or not isinstance(e, dict) or len(e.get("loc") or ()) > 1 else {"ctx", "input"}
            shown.append({k: v for k, v in e.items() if k not in drop} if isinstance(e, dict) else e)
        plural = len(errors) != 1
        body = json.dumps(shown, ensure_ascii=False, indent=2)
        description = f"{len(errors)} validation error{'s' if plural else ''}:\n```json\n{body}\n```"
    return f"{description}\n\nFix the errors and try again."


def _user_content(content: Any, j: int, where: str) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValidationError(f"parts[{j}] user prompt is not text or a list", where=where, code="bad_content")
    parts: list[dict[str, Any]] = []
    for item in content:
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif isinstance(item, dict) and item.get("kind") == "image-url" and isinstance(item.get("url"), str):
            parts.append({"type": "image_url", "image_url": {"url": item["url"]}})
        elif isinstance(item, dict) and item.get("kind") == "binary" and isinstance(item.get("data"), str):
            url = f"data:{item.get('media_type') or 'application/octet-stream'};base64,{item['data']}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            kind = item.get("kind") if isinstance(item, dict) else type(item).__name__
            raise ValidationError(
                f"parts[{j}] user prompt holds {kind!r} content msgtrain does not read", where=where, code="bad_content"
            )
    return parts


def _unsupported(kind: str, j: int, where: str) -> ValidationError:
    return ValidationError(
        f"parts[{j}] is a pydantic-ai {kind!r} part msgtrain does not read",
        where=where,
        code="unsupported_block",
        hint="read: system-prompt, user-prompt, tool-return, retry-prompt, text, tool-call, thinking parts",
    )
