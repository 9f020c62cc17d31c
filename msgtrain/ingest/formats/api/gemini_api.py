"""Gemini API logs: ``generateContent`` request/response records, and saved ``Content[]`` histories.

What is read:
- **Call logs** (JSONL, or a JSON array, of ``{"request": GenerateContentRequest, "response":
  GenerateContentResponse}``; a streamed response logged as its list of chunks is reassembled as the SDK does,
  :mod:`msgtrain.ingest.common.streams`): each record is one call, read as a cassette's Gemini call is
  (:func:`msgtrain.ingest.formats.api.cassettes.gemini_call`: ``systemInstruction``, ``contents[].parts``, ``tools``
  ``functionDeclarations``, each candidate a sample). Calls are joined into conversations by a session id when the
  record has one, else a call joins the earlier call whose contents and reply it re-sends
  (:mod:`msgtrain.ingest.common.call_log`), so every reply is
  ``sampled`` in exactly the contents, system instruction and tools its request sent.
- **Histories**: a JSON document that is a ``Content[]`` list (``{"role": "user" | "model", "parts": [...]}``, as
  ``ChatSession.history`` / ``chat.get_history()`` serialise it), or an object holding one under ``contents``
  (a saved request, with its ``systemInstruction`` and ``tools`` when logged). Each ``model`` content is sampled
  in the contents before it; ``functionResponse`` parts answer the open ``functionCall`` of their name.
  ``usageMetadata.promptTokenCount`` beside a call is kept on the reply (``metadata["usage"]``).

Context completeness: a history that calls functions but logs no ``tools`` lacks the schemas the model was sent,
and is marked context-incomplete (``tools``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.call_log import Call, CallLogGraph, CallLogGroups, session_of
from msgtrain.ingest.common.conversation_files import (
    RawRecord,
    Step,
    base_graph_id,
    iter_call_records,
    iter_raw_records,
    seeded_acknowledgement,
)
from msgtrain.ingest.common.streams import assemble
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadItem,
    ReadReject,
    RecordTask,
    SourceRef,
    excerpt,
    head_shape,
    quoted,
)
from msgtrain.ingest.formats.api.cassettes import gemini_call
from msgtrain.model.completeness import mark_context_incomplete
from msgtrain.model.graph import Origin
from msgtrain.model.message import OptionCallMessage

POLICY = "gemini"
_ROLES = frozenset({"user", "model"})


class GeminiApiReader:
    name = "gemini_api"
    description = "Gemini API generateContent {request, response} logs and saved Content[] histories (role model)"
    example = "sample_logs/gemini_api/calls.jsonl"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["parts"]))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        if shape.has(".request.contents[].parts") and (
            shape.has(".response.candidates[].content") or shape.has(".response[].candidates[].content")
        ):
            return True
        if shape.layout == "array":
            roles = shape.values_at(".role")
            return shape.has(".role", ".parts") and roles <= _ROLES and "model" in roles
        return (
            shape.layout == "object"
            and shape.has(".contents[].parts")
            and "model" in shape.values_at(".contents[].role")
        )

    def read(self, path: Path) -> Iterator[ReadItem]:
        records = iter_raw_records(path)
        first = next(records, None)
        if first is None:
            return
        if first.ref.record == "file" and _is_history(first.value):
            ref = SourceRef(str(path), "file")
            yield RecordTask(ref, partial(_history_events, path, ref, first.value), raw=first.value)
            return
        yield from _read_calls(path, first, records)


def _is_history(value: Any) -> bool:
    items = value.get("contents") if isinstance(value, dict) and "request" not in value else value
    return isinstance(items, list) and all(isinstance(c, dict) and "parts" in c for c in items)


def _read_calls(path: Path, first: RawRecord, rest: Iterator[RawRecord]) -> Iterator[ReadEvent]:
    groups = CallLogGroups(path, metadata={"source_format": "gemini_api"})

    def chained() -> Iterator[RawRecord]:
        yield first
        yield from rest

    for ref, value, raw in iter_call_records(path, chained()):
        if isinstance(value, MsgtrainError):
            yield ReadReject(ref, value, excerpt(raw))
            continue
        try:
            call, model = _call(value)
            groups.add(call, ref, session_of(value, value["request"]), policy=model or POLICY)
        except MsgtrainError as e:
            yield ReadReject(ref, e.located(str(ref)), excerpt(raw))
    yield from groups.events()


def _call(rec: Any) -> tuple[Call, str | None]:
    if not isinstance(rec, dict) or not isinstance(rec.get("request"), dict):
        raise ValidationError(
            "record needs a 'request' object and a 'response'",
            code="bad_record",
            hint='one record per call: {"request": {"contents": [...]}, "response": {"candidates": [...]}}',
        )
    response = rec.get("response")
    if isinstance(response, list):
        response = assemble("gemini", response)
    if not isinstance(response, dict):
        raise ValidationError("response is not an object or a list of stream chunks", code="bad_record")
    if "error" in response and not response.get("candidates"):
        raise ValidationError(f"the call failed: {str(response['error'])[:200]}", code="error_response")
    call = gemini_call(rec["request"], response)
    usage = response.get("usageMetadata")
    if isinstance(usage, dict):
        call = Call(call.context, [_with_usage(s, usage) for s in call.samples], call.env)
    model = response.get("modelVersion") or rec["request"].get("model")
    return call, model if isinstance(model, str) else None


def _with_usage(step: Step, usage: dict[str, Any]) -> Step:
    msg = step.message.model_copy(update={"metadata": {**step.message.metadata, "usage": usage}})
    return Step(msg, step.origin, step.generation, step.index)


def _history_events(path: Path, ref: SourceRef, doc: Any) -> list[ReadEvent]:
    """A history as the calls that produced it: each ``model`` content is the response to a request holding the
    contents before it (with the document's ``systemInstruction`` and ``tools``), read as any Gemini call."""
    holder: dict[str, Any] = doc if isinstance(doc, dict) else {}
    contents = holder.get("contents") if holder else doc
    if not isinstance(contents, list) or not contents:
        raise ValidationError("a history needs a non-empty list of contents", code="bad_document")
    request: dict[str, Any] = {
        k: holder[k] for k in ("systemInstruction", "system_instruction", "tools") if k in holder
    }
    model = holder.get("model") if isinstance(holder.get("model"), str) else None
    log = CallLogGraph(base_graph_id(path, ref), metadata={"source_format": "gemini_api"}, policy=model or POLICY)
    calls = False
    gap: ReadReject | None = None
    last: str | None = None
    for k, content in enumerate(contents):
        if not (isinstance(content, dict) and content.get("role") == "model"):
            continue
        if gap is not None:
            last = _after_gap(log, last, content, gap)
            continue
        try:
            call = gemini_call({**request, "contents": contents[:k]}, {"candidates": [{"content": content}]})
            if seeded_acknowledgement([*call.context, *call.samples]) == len(call.context):
                # Gemini CLI's own reply to the environment context it opens every chat with: context, not a turn
                call.samples = [dataclasses.replace(s, origin=Origin.INJECTED) for s in call.samples]
            calls = calls or any(isinstance(s.message, OptionCallMessage) for s in call.samples)
            last = log.add(call)[-1]
        except MsgtrainError as e:
            if not log.calls:
                raise  # nothing readable before it: the history's reject
            # A gap: the replies before it are trained, the ones after it were sampled after a content that
            # cannot be read, so they are context only (context_unknown), never trained as if it were not there.
            note = "; the history is trained up to it, the model contents after it are context only"
            error = type(e)(e.message + note, where=e.where, hint=e.hint, code=e.code).located(f"{ref} contents")
            gap = ReadReject(ref, error, count=0, turns=0)
            last = _after_gap(log, last, content, gap)
    if not log.calls:
        raise ValidationError("the history holds no model content", code="no_model_turn")
    if calls and not openai_tools(request.get("tools"), where="tools"):
        mark_context_incomplete(log.graph, ["tools"], "the history calls functions but logs no tool declarations")
    return [ReadGraph(log.finish(), ref, records=1), *([gap] if gap is not None else [])]


def _after_gap(log: CallLogGraph, parent: str | None, content: dict[str, Any], gap: ReadReject) -> str | None:
    """A model content after a gap: kept as context the log does not hold (``carried``, counted as
    ``context_unknown``), or, when it cannot be read either, a turn lost with the gap."""
    try:
        samples = gemini_call({"contents": []}, {"candidates": [{"content": content}]}).samples
    except MsgtrainError:
        gap.turns += 1
        return parent
    why = f"after an unreadable content ({gap.error.where}): the context it was sampled in is not in the log"
    for step in samples:
        msg = step.message.model_copy(update={"metadata": {**step.message.metadata, "why_not_trained": why}})
        parent = log.graph.add_node(parent, msg, origin=Origin.CARRIED)
    return parent


READER = GeminiApiReader()
