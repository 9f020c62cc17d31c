"""Session records whose message is a Gemini ``Content`` (``{"role": "user" | "model", "parts": [...]}``), seen as
the Anthropic-block records the Claude Code reader builds its graphs from.

Qwen Code (a Gemini CLI fork) writes its sessions as Claude Code does, one JSONL record per message linked by
``uuid`` / ``parentUuid`` under a ``sessionId``, but keeps each message in the Gemini API's shape
(``packages/core/src/services/chatRecordingService.ts``: record ``type`` ``user`` / ``assistant`` /
``tool_result`` / ``system``, ``message`` a ``Content``, ``model`` and ``usageMetadata`` beside it). The reader
(:mod:`msgtrain.ingest.formats.sessions.claude_code`) follows the tree; this module only changes how a message is
spelled:

- ``text`` parts → ``text`` blocks; ``thought: true`` text parts → ``thinking`` blocks (with ``thoughtSignature``);
- ``functionCall`` → ``tool_use`` (its ``id``, ``name``, ``args``); ``functionResponse`` → ``tool_result`` answering
  that id with the ``response`` object;
- ``inlineData`` → an ``image`` block with a base64 source; any other part stays as it is, so the reader rejects it
  naming its keys, never drops it;
- a ``model`` message is an ``assistant`` record whose message id is the record's ``uuid`` (one record holds the
  whole response); its ``model`` and ``usageMetadata`` (prompt size for the usage check) go on the message.

A ``system`` / ``chat_compression`` record holds the history the model was sent from then on
(``systemPayload.compressedHistory``, Contents); :func:`compressed_history` returns it seen the same way.

Invariants: nothing is invented but a call id for a ``functionCall`` logged without one (``gemini_call_<record>_<k>``,
stable), which a ``functionResponse`` without id then answers by name, the oldest open call first.
"""

from __future__ import annotations

from typing import Any

GEMINI_ROLES = {"user": "user", "model": "assistant"}
GEMINI_MARK = "_gemini_content"  # set on a record seen through this module


def is_content_record(obj: dict[str, Any]) -> bool:
    """A session record whose ``message`` is a Gemini ``Content`` (parts, role user or model)."""
    message = obj.get("message")
    return isinstance(message, dict) and isinstance(message.get("parts"), list) and message.get("role") in GEMINI_ROLES


def as_block_record(obj: dict[str, Any], open_calls: list[tuple[str, str]]) -> dict[str, Any]:
    """The record with its message as Anthropic blocks and its type by role (see the module docstring).
    ``open_calls`` ((id, name) of calls not answered yet, oldest first) is updated as calls and results pass."""
    message = obj["message"]
    key = str(obj.get("uuid") or "")
    role = GEMINI_ROLES[message["role"]]
    view: dict[str, Any] = {"role": role, "content": content_blocks(message["parts"], key, open_calls)}
    if role == "assistant":
        view["id"] = key
        if isinstance(obj.get("model"), str):
            view["model"] = obj["model"]
        if isinstance(obj.get("usageMetadata"), dict):
            view["usage"] = obj["usageMetadata"]
    return {**obj, "type": role, "message": view, GEMINI_MARK: True}


def content_record(content: dict[str, Any]) -> dict[str, Any]:
    """A bare Content (a compressed history's item) as a record :func:`as_block_record` reads."""
    role = content.get("role") if content.get("role") in GEMINI_ROLES else "user"
    return {"message": {"role": role, "parts": content.get("parts") if isinstance(content.get("parts"), list) else []}}


def content_blocks(parts: list[Any], key: str, open_calls: list[tuple[str, str]]) -> list[Any]:
    """Gemini parts → Anthropic content blocks (see the module docstring)."""
    blocks: list[Any] = []
    for k, part in enumerate(parts):
        if not isinstance(part, dict):
            blocks.append(part)
        elif isinstance(part.get("text"), str) and part.get("thought") is True:
            blocks.append({"type": "thinking", "thinking": part["text"], "signature": part.get("thoughtSignature")})
        elif isinstance(part.get("text"), str):
            blocks.append({"type": "text", "text": part["text"]})
        elif isinstance(part.get("functionCall"), dict):
            call = part["functionCall"]
            call_id = str(call.get("id") or f"gemini_call_{key}_{k}")
            open_calls.append((call_id, str(call.get("name") or "")))
            args = call.get("args")
            blocks.append({"type": "tool_use", "id": call_id, "name": call.get("name"), "input": args or {}})
        elif isinstance(part.get("functionResponse"), dict):
            answer = part["functionResponse"]
            answered = _answered(answer, open_calls)
            blocks.append({"type": "tool_result", "tool_use_id": answered, "content": answer.get("response")})
        elif isinstance(part.get("inlineData"), dict):
            data = part["inlineData"]
            source = {"type": "base64", "media_type": data.get("mimeType"), "data": data.get("data")}
            blocks.append({"type": "image", "source": source})
        else:
            blocks.append({"type": "gemini:" + ",".join(sorted(part)), **part})
    return blocks


def compressed_history(obj: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The Contents a ``chat_compression`` record says the model was sent from then on, or None."""
    payload = obj.get("systemPayload")
    history = payload.get("compressedHistory") if isinstance(payload, dict) else None
    if isinstance(history, list) and all(isinstance(c, dict) for c in history):
        return history
    return None


def _answered(answer: dict[str, Any], open_calls: list[tuple[str, str]]) -> str | None:
    """The id of the open call a ``functionResponse`` answers: its own id, else the oldest open call of its name."""
    wanted = answer.get("id")
    for pos, (call_id, name) in enumerate(open_calls):
        if (wanted and call_id == wanted) or (not wanted and name == answer.get("name")):
            del open_calls[pos]
            return call_id
    return str(wanted) if wanted else None
