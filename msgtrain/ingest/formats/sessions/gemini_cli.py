"""Gemini CLI chat sessions: ``~/.gemini/tmp/<project hash>/chats/session-*.json``, one JSON document
``{"sessionId", "projectHash", "startTime", "lastUpdated", "messages": [...]}``, or the newer append-only
``session-*.jsonl`` log (a header line, message lines re-appended as they change, ``$set`` / ``$rewindTo`` lines),
folded as Gemini CLI folds it (see :func:`_read_jsonl`); its messages are then read as below.

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
from msgtrain.ingest.common.session_common import Chain, SkipTally, as_dict, as_list, graph_id_for, has_any
from msgtrain.ingest.core.base import is_json_lines
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadReject,
    SourceRef,
    excerpt,
    head_shape,
    iter_json_lines,
    load_json_document,
    quoted,
    read_head,
)
from msgtrain.ingest.formats.sessions.gemini_cli_stream import is_stream_head, read_stream
from msgtrain.model.completeness import mark_unlogged_context
from msgtrain.model.graph import EdgeKind, MessageGraph, Origin
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

_UNLOGGED = "Gemini CLI sessions log neither the system prompt nor the tool schemas"
POLICY = "gemini-cli"
_UI_TYPES = {"info", "error", "warning"}


class GeminiCliReader:
    name = "gemini_cli"
    description = (
        "Gemini CLI chat sessions (session-*.json with messages[] of user/gemini, or the append-only JSONL layout;"
        " logs.json skipped)"
    )
    example = "sample_logs/gemini_cli/session.json"
    document_records = "messages"  # a JSON document's records (see msgtrain.ingest.core.base)

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["session_id", "sessionId", "$set", "toolCalls", "thoughts"]))

    def detect(self, path: Path, head: bytes) -> bool:
        if is_stream_head(head):
            return True  # gemini -p --output-format stream-json (ingest/formats/sessions/gemini_cli_stream.py)
        shape = head_shape(head)
        if shape.layout == "object":
            return shape.has(".sessionId", ".messages[].type") and shape.any_value(
                ".messages[].type", {"user", "gemini"}
            )
        if shape.layout == "array":
            return shape.has(".sessionId", ".messageId", ".type", ".message")
        if shape.layout == "jsonl":
            # The header line names the session; message lines are typed user/gemini with their own ids.
            header = shape.has(".sessionId", ".projectHash", ".startTime")
            messages = shape.has(".id", ".type") and shape.any_value(".type", {"user", "gemini"})
            return messages and (header or shape.has(".$set") or has_any(shape, ".toolCalls", ".thoughts"))
        return False

    def read(self, path: Path) -> Iterator[ReadEvent]:
        if is_stream_head(read_head(path)):
            yield from read_stream(path)
            return
        if _is_jsonl(path):
            yield from _read_jsonl(path)
            return
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
            mark_unlogged_context(graph, _UNLOGGED)
            yield ReadGraph(graph, SourceRef(str(path), "file"), records=records)
        yield from skips.events()


def _is_jsonl(path: Path) -> bool:
    """A session log of JSON lines (a pretty-printed session document's first line is a lone ``{``)."""
    return is_json_lines(path)


def _read_jsonl(path: Path) -> Iterator[ReadEvent]:
    """The JSONL layout: an append-only log folded the way Gemini CLI folds it when it resumes a session.

    Lines: a header ``{sessionId, projectHash, startTime, ...}``; message records ``{id, type, ...}``, where a
    message is re-appended in full each time it changes (its tool calls finish, its tokens arrive) and the last copy
    wins, keeping the place of the first; ``{"$rewindTo": id}``, which drops that message and everything after it;
    ``{"$set": {...}}`` metadata patches, where ``$set.messages`` replaces the whole message list (session start,
    compression, a rolled-back turn). What a rewind or a replacement drops was still sampled where it stood: each
    state of the list before such a cut is kept as a branch, with a ``rewind`` / ``compaction`` edge to the next.
    """
    skips = SkipTally(path)
    meta: dict[str, Any] = {"format": "gemini_cli", "layout": "jsonl"}
    latest: dict[str, tuple[Any, str]] = {}  # message id -> (last copy, ref of its first line)
    order: list[str] = []
    states: list[tuple[list[tuple[Any, str]], EdgeKind | None]] = []  # list states before each cut, and the cut
    records = 0
    bad_before: str | None = None  # a rejected line: what was built after it lacks part of its context
    taint_from: dict[int, str] = {}  # state index -> why its later turns are carried

    def snapshot(kind: EdgeKind | None) -> None:
        states.append(([latest[i] for i in order], kind))

    for lineno, raw, value in iter_json_lines(path):
        ref = f"line {lineno}"
        if isinstance(value, MsgtrainError):
            bad_before = bad_before or ref
            taint_from.setdefault(len(states), ref)
            yield ReadReject(SourceRef(str(path), ref), value, excerpt(raw))
            continue
        if not isinstance(value, dict):
            yield ReadReject(
                SourceRef(str(path), ref),
                ValidationError("line is not a JSON object", where=f"{path}:{lineno}", code="bad_record"),
                excerpt(raw),
            )
            taint_from.setdefault(len(states), ref)
            continue
        if isinstance(value.get("$rewindTo"), str):
            target = value["$rewindTo"]
            records += 1
            snapshot(EdgeKind.REWIND)
            cut = order.index(target) if target in order else 0
            for mid in order[cut:]:
                latest.pop(mid, None)
            del order[cut:]
            continue
        if "$set" in value:
            patch = as_dict(value.get("$set"))
            if isinstance(patch.get("messages"), list):
                records += 1
                snapshot(EdgeKind.COMPACTION)
                order.clear()
                latest.clear()
                for k, item in enumerate(patch["messages"]):
                    given = item.get("id") if isinstance(item, dict) else None
                    key = given if isinstance(given, str) else f"{ref}#{k}"
                    if key not in latest:
                        order.append(key)
                    latest[key] = (item, f"{ref} $set.messages[{k}]")
            else:
                skips.add("metadata_update", ref)
            continue
        mtype = value.get("type")
        if "type" not in value and isinstance(value.get("sessionId"), str):
            records += 1
            for key, name in (
                ("sessionId", "session_id"),
                ("projectHash", "project_hash"),
                ("startTime", "start_time"),
            ):
                if value.get(key) is not None:
                    meta[name] = value[key]
            # A header may carry the messages it starts with (a resumed session).
            for k, item in enumerate(as_list(value.get("messages"))):
                given = item.get("id") if isinstance(item, dict) else None
                key = given if isinstance(given, str) else f"{ref}#{k}"
                if key not in latest:
                    order.append(key)
                latest[key] = (item, f"{ref} messages[{k}]")
            continue
        if mtype in _UI_TYPES:
            skips.add(f"non_message_record:{mtype}", ref)
            continue
        message_id = value.get("id")
        if not isinstance(message_id, str):
            yield ReadReject(
                SourceRef(str(path), ref),
                ValidationError("message line has no id", where=f"{path}:{lineno}", code="bad_record"),
                excerpt(raw),
            )
            taint_from.setdefault(len(states), ref)
            continue
        records += 1
        if message_id not in latest:
            order.append(message_id)
            latest[message_id] = (value, ref)
        else:
            latest[message_id] = (value, latest[message_id][1])  # the last copy wins; the message keeps its first place
    snapshot(None)
    sid = meta.get("session_id")
    graph = MessageGraph(
        graph_id=graph_id_for("gemini-cli", sid if isinstance(sid, str) else None, path), policy=POLICY, metadata=meta
    )
    converted: dict[str, list[tuple[AnyMessage, Origin, Generation | None]] | None] = {}
    previous: list[str] | None = None
    for k, (items, _) in enumerate(states):
        chain = Chain(graph)
        for item, ref in items:
            if k in taint_from or any(i < k for i in taint_from):
                chain.taint = chain.taint or "rejected line"
            key = f"{ref}:{id(item)}"
            if key not in converted:
                try:
                    converted[key] = _message(item, ref)
                except MsgtrainError as e:
                    converted[key] = None
                    yield ReadReject(SourceRef(str(path), ref), e.located(f"{path} ({ref})"), excerpt(str(item)))
            built = converted[key]
            if built is None:
                chain.taint = chain.taint or f"rejected {ref}"
                continue
            # A list given whole (``$set.messages``, a header's messages) is history re-sent as context: its model
            # messages were sampled elsewhere (where they are the same node, that node stays sampled).
            given_whole = "messages[" in ref
            for message, origin, generation in built:
                if given_whole and origin is Origin.SAMPLED:
                    chain.append(message, Origin.CARRIED)
                else:
                    chain.append(message, origin, generation)
        if previous is not None:
            kind = states[k - 1][1] or EdgeKind.REWIND
            same = 0
            while same < min(len(previous), len(chain.path)) and previous[same] == chain.path[same]:
                same += 1
            if previous[same:]:
                graph.record_edge(kind, previous[same:], chain.path[same:], previous[same - 1] if same else None)
        previous = chain.path
    if graph.nodes:
        mark_unlogged_context(graph, _UNLOGGED)
        yield ReadGraph(graph, SourceRef(str(path), "line 1"), records=records)
    elif records:
        skips.add("session_without_messages", "line 1", records)
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
