"""Gemini CLI chat sessions: ``~/.gemini/tmp/<project hash>/chats/session-*.json``, one JSON document
``{"sessionId", "projectHash", "startTime", "lastUpdated", "messages": [...]}``.

What is read:
- ``messages[]`` in order, one record each: ``user`` messages are context; each ``gemini`` message is one model
  response, sampled in the context of the messages before it (text ``content`` first, then its ``toolCalls``).
  A tool call carries its own outcome (``result[].functionResponse``), which becomes the result message paired by
  the call's ``id`` right after the response, in call order (parallel calls stay parallel). ``model`` and
  ``tokens`` go to the response's ``Generation`` / metadata.
- ``info``, ``error`` and ``warning`` messages are UI notices the model never saw: skipped
  (``non_message_record:<type>``).
- ``logs.json`` (a list of ``{sessionId, messageId, type: "user", message}``) is Gemini CLI's prompt log: it holds
  the user's prompts but no model output, so every entry is skipped (``prompt_log_without_responses``).

Safe readings:
- ``thoughts`` are the CLI's display form of thought *summaries* (subject + description) and are not sent back
  to the model; they are kept as metadata, never as reasoning text.
- The system instruction, tool declarations and the environment preamble the CLI adds are not in the file; the
  graph has what the file has.
- A tool call without ``result`` (cancelled before it ran) is a dangling call.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.base import ReadEvent, ReadGraph, ReadReject, SourceRef, excerpt, load_json_document
from msgtrain.ingest.head_shape import head_shape
from msgtrain.ingest.session_common import Chain, SkipTally, graph_id_for
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.message import (
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
    TextPart,
)
from msgtrain.model.openai import parse_arguments

POLICY = "gemini-cli"
_UI_TYPES = {"info", "error", "warning"}


class GeminiCliReader:
    name = "gemini_cli"
    description = "Gemini CLI chat sessions (session-*.json with messages[] of user/gemini; logs.json skipped)"
    example = "sample_logs/gemini_cli/session.json"

    def detect(self, path: Path, head: bytes) -> bool:
        shape = head_shape(head)
        if shape.layout == "object":
            return shape.has(".sessionId", ".messages[].type") and shape.any_value(
                ".messages[].type", {"user", "gemini"}
            )
        if shape.layout == "array":
            return shape.has(".sessionId", ".messageId", ".type", ".message")
        return False

    def read(self, path: Path) -> Iterator[ReadEvent]:
        doc = load_json_document(path)
        skips = SkipTally(path)
        if isinstance(doc, list):
            # logs.json: the prompt log. It has no model output, so nothing in it can be trained or used as context.
            if doc:
                skips.add("prompt_log_without_responses", "item 0", len(doc))
            yield from skips.events()
            return
        messages = doc.get("messages") if isinstance(doc, dict) else None
        if not isinstance(messages, list):
            raise ValidationError(
                "a Gemini CLI session needs a 'messages' list",
                where=str(path),
                code="bad_document",
                hint="pass a chats/session-*.json file",
            )
        sid = doc.get("sessionId") if isinstance(doc.get("sessionId"), str) else None
        meta = {
            "format": "gemini_cli",
            "session_id": sid,
            "project_hash": doc.get("projectHash"),
            "start_time": doc.get("startTime"),
        }
        graph = MessageGraph(
            graph_id=graph_id_for("gemini-cli", sid, path),
            policy=POLICY,
            metadata={k: v for k, v in meta.items() if v is not None},
        )
        chain = Chain(graph)
        records = 0
        for i, item in enumerate(messages):
            ref = f"item {i}"
            mtype = item.get("type") if isinstance(item, dict) else None
            if mtype in _UI_TYPES:
                skips.add(f"non_message_record:{mtype}", ref)
                continue
            try:
                built = _message(item, ref)
            except MsgtrainError as e:
                chain.taint = chain.taint or f"rejected {ref}"
                yield ReadReject(SourceRef(str(path), ref), e.located(f"{path} ({ref})"), excerpt(str(item)))
                continue
            for message, origin, generation in built:
                chain.append(message, origin, generation)
            records += 1
        if graph.nodes:
            yield ReadGraph(graph, SourceRef(str(path), "file"), records=records)
        yield from skips.events()


def _message(item: Any, ref: str) -> list[tuple[AnyMessage, Origin, Generation | None]]:
    if not isinstance(item, dict):
        raise ValidationError("message is not an object", code="bad_record")
    mtype = item.get("type")
    if mtype == "user":
        parts = _parts(item.get("content"))
        if not parts:
            raise ValidationError("user message has no content", code="empty_content")
        return [(PartsMessage(parts=tuple(parts), role_hint_for_llm="user", policy="user"), Origin.CONTEXT, None)]
    if mtype != "gemini":
        raise ValidationError(
            f"unknown message type {mtype!r}",
            code="bad_record",
            hint="Gemini CLI messages are user, gemini, info, error or warning",
        )
    parts = _parts(item.get("content"))
    calls: list[OptionCallPayload] = []
    results: list[tuple[AnyMessage, Origin, Generation | None]] = []
    for k, tc in enumerate(item.get("toolCalls") or []):
        if not isinstance(tc, dict) or not isinstance(tc.get("id"), str) or not isinstance(tc.get("name"), str):
            raise ValidationError(f"toolCalls[{k}] needs an id and a name", code="bad_tool_call")
        args, raw = parse_arguments(tc.get("args"))
        calls.append(
            OptionCallPayload(invocation_id=tc["id"], option_name=tc["name"], arguments=args, raw_arguments=raw)
        )
        for r in tc.get("result") or []:
            response = r.get("functionResponse") if isinstance(r, dict) else None
            if not isinstance(response, dict):
                continue  # inline data parts next to the response are display-only
            results.append((_result(tc, response), Origin.CONTEXT, None))
    meta: dict[str, Any] = {"id": item.get("id")} if item.get("id") else {}
    if item.get("thoughts"):
        meta["thoughts"] = item["thoughts"]
    if item.get("tokens"):
        meta["usage"] = item["tokens"]
    model = item.get("model") if isinstance(item.get("model"), str) else None
    generation = Generation(model=model) if model else None
    message: AnyMessage
    if calls:
        message = OptionCallMessage(
            parts=tuple(parts), calls=tuple(calls), policy=POLICY, role_hint_for_llm="assistant", metadata=meta
        )
    else:
        if not parts:
            raise ValidationError("gemini message has no content and no tool calls", code="empty_assistant")
        message = PartsMessage(parts=tuple(parts), policy=POLICY, role_hint_for_llm="assistant", metadata=meta)
    return [(message, Origin.SAMPLED, generation), *results]


def _result(call: dict[str, Any], response: dict[str, Any]) -> OptionResultMessage:
    body = response.get("response")
    is_error = isinstance(body, dict) and "error" in body and "output" not in body
    value: Any = body
    if isinstance(body, dict) and set(body) == {"output"}:
        value = body["output"]
    elif is_error and isinstance(body, dict) and len(body) == 1:
        value = body["error"]
    return OptionResultMessage(
        result=OptionResultPayload(
            invocation_id=str(response.get("id") or call["id"]),
            option_name=call["name"],
            result=value,
            is_error=is_error or call.get("status") == "error",
        ),
        policy=RUNTIME_POLICY,
        role_hint_for_llm="tool",
    )


def _parts(content: Any) -> list[Part]:
    """Gemini ``PartListUnion``: a string, a part, or a list of parts (text, inlineData, fileData)."""
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [TextPart(text=content)]
    items = content if isinstance(content, list) else [content]
    parts: list[Part] = []
    for k, p in enumerate(items):
        if isinstance(p, str):
            parts.append(TextPart(text=p))
        elif isinstance(p, dict) and isinstance(p.get("text"), str):
            if not p.get("thought"):
                parts.append(TextPart(text=p["text"]))
        elif isinstance(p, dict) and isinstance(p.get("inlineData"), dict):
            blob = p["inlineData"]
            mime = str(blob.get("mimeType") or "application/octet-stream")
            parts.append(
                MediaPart(modality=_modality(mime), url=f"data:{mime};base64,{blob.get('data', '')}", mime=mime)
            )
        elif isinstance(p, dict) and isinstance(p.get("fileData"), dict):
            ref = p["fileData"]
            mime = str(ref.get("mimeType") or "")
            parts.append(MediaPart(modality=_modality(mime), url=str(ref.get("fileUri")), mime=mime or None))
        else:
            raise ValidationError(f"content[{k}] is not a text, inlineData or fileData part", code="bad_content")
    return parts


def _modality(mime: str) -> Any:
    head = mime.split("/", 1)[0]
    return head if head in ("image", "audio", "video") else "document"


READER = GeminiCliReader()
