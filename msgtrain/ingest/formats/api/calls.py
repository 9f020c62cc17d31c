"""Per-call API logs: one JSONL record per LLM call, ``{"request": {...}, "response": {...}}``.

The request is an OpenAI ``/v1/chat/completions`` body (``model``, ``messages``, ``tools``,
``chat_template_kwargs`` …); the response is the body returned (``choices[].message`` with content, tool_calls,
``reasoning_content``/``reasoning``; vLLM's ``prompt_token_ids``, ``choices[].token_ids``,
``choices[].logprobs.content[].logprob`` when the engine returned them). A streamed call may log its response as
the list of ``chat.completion.chunk`` objects received; it is reassembled as the OpenAI SDK accumulates it
(:mod:`msgtrain.ingest.common.streams`).

Invariants:
- Calls are rebuilt into message graphs: calls whose messages share a prefix share nodes (content addressing);
  each response choice is a ``sampled`` node under exactly its request's context (n>1 choices are siblings); an
  assistant message in a request is ``carried`` unless the same message was sampled in that same context by an
  earlier call. A later call whose history differs from what was sampled (edited, compacted, reasoning dropped,
  tool-call JSON rewritten, other tools) lands on another branch; the linearizer finds the cut.
- Records are grouped into conversations by a session id (``session_id`` / ``conversation_id`` / ``thread_id`` /
  ``trajectory_id``, top level or in ``request.metadata``) when present, else a call joins the conversation of the
  earlier call whose messages and reply its request re-sends (``ingest/common/call_log.py``, shared with the other
  request/response readers). A file's graphs stay in memory until
  the file ends (calls of one conversation may be spread over it); files are read line by line.
- Linear in what is new: a request that re-sends the previous request of its session (or, without sessions, of
  the previous record) reuses that request's parsed messages for the shared prefix; only the rest is parsed.
- A bad record is rejected with a reason; the rest of the file is still read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.call_log import Call, CallLogGroups, call_chunk_keys, conversation_key, session_of
from msgtrain.ingest.common.conversation_files import Step
from msgtrain.ingest.common.streams import is_chunk_list, response_body
from msgtrain.ingest.core.chunks import ChunkKey, KeyFunction
from msgtrain.ingest.formats import ReadEvent, ReadReject, SourceRef, excerpt, head_objects, iter_json_lines
from msgtrain.ingest.formats.api.text_completions import is_text_completion, text_completion_call
from msgtrain.model.graph import Env
from msgtrain.model.message import AnyMessage
from msgtrain.model.openai import check_reply_present, from_openai_message, generation_from_choice


@dataclass
class _Parsed:
    """A request's messages as logged and as parsed, with the tool names its calls issued."""

    raw: list[Any]
    messages: list[AnyMessage]
    names: dict[str, str]


def _parse_history(raw: list[Any], prev: _Parsed | None) -> tuple[list[AnyMessage], dict[str, str]]:
    """Parse a request's messages, reusing the parsed messages of ``prev`` for the prefix it shares (a call
    re-sends the previous call's history): the same objects, so graph building can skip them too."""
    shared = 0
    if prev is not None:
        n = len(prev.raw)
        if n <= len(raw) and raw[:n] == prev.raw:  # the usual case, compared in one C-level pass
            shared = n
        else:
            while shared < min(n, len(raw)) and raw[shared] == prev.raw[shared]:
                shared += 1
    messages: list[AnyMessage] = []
    names: dict[str, str] = {}
    if prev is not None and shared:
        messages = prev.messages[:shared]
        names = dict(prev.names) if shared == len(prev.messages) else _call_names(messages)
    for i in range(shared, len(raw)):
        msg = from_openai_message(raw[i], index=i, call_names=names)
        names.update(_call_names([msg]))
        messages.append(msg)
    return messages, names


def _call_names(messages: list[AnyMessage]) -> dict[str, str]:
    return {c.invocation_id: c.option_name for m in messages for c in getattr(m, "calls", ())}


class CallsReader:
    name = "calls"
    description = (
        "per-call API logs: JSONL of {request, response} chat-completions bodies or streamed chunk lists"
        " (vLLM token ids optional)"
    )
    example = "sample_logs/calls/agent_calls.jsonl"

    def detect(self, path: Path, head: bytes) -> bool:
        return any(
            (
                isinstance(o.get("request"), dict)
                and "messages" in o["request"]
                and (
                    (isinstance(o.get("response"), dict) and "choices" in o["response"])
                    or is_chunk_list("openai_chat", o.get("response"))
                )
            )
            or is_text_completion(o.get("request"), o.get("response"))
            for o in head_objects(head)
        )

    def read(self, path: Path) -> Iterator[ReadEvent]:
        groups = CallLogGroups(path)
        seen: dict[str | None, _Parsed] = {}  # session (None: records without one) -> its last parsed request
        for lineno, raw, obj in iter_json_lines(path):
            src = SourceRef(str(path), f"line {lineno}")
            if isinstance(obj, MsgtrainError):
                yield ReadReject(src, obj, excerpt(raw))
                continue
            try:
                call, model, extras = self._call(obj, f"{path}:{lineno}", seen)
                groups.add(call, src, session_of(obj, obj["request"]), policy=model, extras=extras)
            except MsgtrainError as e:
                error = e if e.where else e.located(f"{path}:{lineno}")
                yield ReadReject(src, error, excerpt(raw), turns=_generated(obj))
        yield from groups.events()

    def chunk_keys(self, path: Path) -> KeyFunction:
        """Every record of this format is keyed alike (see :mod:`msgtrain.ingest.core.chunks`)."""
        return self._chunk_key

    def _chunk_key(self, rec: Any) -> ChunkKey:
        """The conversation key :meth:`read` files this record under (see :mod:`msgtrain.ingest.core.chunks`); a record
        it would reject stands alone."""
        if not isinstance(rec, dict) or not isinstance(rec.get("request"), dict):
            return ()
        request = rec["request"]
        session = session_of(rec, request)
        if session:
            return (conversation_key((), session),)
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            return ()
        try:
            if len(messages) >= 2:
                first, _ = _parse_history(messages[:2], None)
                return (conversation_key(first, None),)
            call, _, _ = self._call(rec, "")  # one message: the reply is the second message of its continuations
        except (MsgtrainError, ValueError):
            return ()
        return call_chunk_keys([s.message for s in call.context], [s.message for s in call.samples], None)

    def _call(
        self, rec: Any, where: str, seen: dict[str | None, _Parsed] | None = None
    ) -> tuple[Call, str | None, dict[str, Any]]:
        """Validate one record fully before it touches any graph, so a bad record leaves no partial nodes."""
        if (
            not isinstance(rec, dict)
            or not isinstance(rec.get("request"), dict)
            or not isinstance(rec.get("response"), dict | list)
        ):
            raise ValidationError(
                "record needs 'request' and 'response' objects",
                where=where,
                code="bad_record",
                hint='one line per call: {"request": {...}, "response": {...} or [stream chunks...]}',
            )
        request = rec["request"]
        try:
            response = response_body("openai_chat", rec["response"])
        except MsgtrainError as e:
            raise e.located(where) from None
        if "error" in response and not response.get("choices"):
            raise ValidationError(
                f"the call failed: {str(response['error'])[:200]}", where=where, code="error_response"
            )
        if is_text_completion(request, response):  # /v1/completions: a prompt text a chat template rendered
            try:
                call = text_completion_call(request, response)
            except MsgtrainError as e:
                raise e.located(where) from None
            model = request.get("model") if isinstance(request.get("model"), str) else None
            return call, model, {"reward": rec["reward"]} if isinstance(rec.get("reward"), int | float) else {}
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValidationError("request.messages must be a non-empty list", where=where, code="bad_record")
        choices = response.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ValidationError("response has no choices", where=where, code="no_choices")
        tools = request.get("tools") or []
        if not isinstance(tools, list):
            raise ValidationError("request.tools must be a list", where=where, code="bad_record")
        kwargs = request.get("chat_template_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise ValidationError("request.chat_template_kwargs must be an object", where=where, code="bad_record")
        session = session_of(rec, request)
        prev = seen.get(session) if seen is not None else None
        try:
            context, names = _parse_history(messages, prev)
            samples = []
            prompt_ids = response.get("prompt_token_ids")
            for i, choice in enumerate(choices):
                if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
                    raise ValidationError(f"choices[{i}] has no message", where=where, code="bad_record")
                check_reply_present(
                    choice["message"], f"choices[{i}].message", engine_ids=choice.get("token_ids") is not None
                )
                msg = from_openai_message({**choice["message"], "role": "assistant"}, index=i, call_names=names)
                # vLLM puts prompt ids on the response; some proxies put them on each choice.
                resp = (
                    response
                    if prompt_ids is not None
                    else {**response, "prompt_token_ids": choice.get("prompt_token_ids")}
                )
                samples.append(Step(msg, generation=generation_from_choice(choice, resp, request)))
        except MsgtrainError as e:
            raise e.located(where) from None
        except ValueError as e:  # pydantic validation of a field (e.g. logprobs not aligned with ids)
            raise ValidationError(str(e).splitlines()[0], where=where, code="bad_record") from None
        call = Call(
            context=[Step(m, index=i) for i, m in enumerate(context)], samples=samples, env=Env.make(tools, kwargs)
        )
        if seen is not None:
            seen[session] = _Parsed(messages, context, names)
        model = request.get("model") if isinstance(request.get("model"), str) else None
        extras = {"reward": rec["reward"]} if isinstance(rec.get("reward"), int | float) else {}
        return call, model, extras


def _generated(record: Any) -> int:
    """The replies a rejected call record held (its response's choices), for the books."""
    response = record.get("response") if isinstance(record, dict) else None
    choices = response.get("choices") if isinstance(response, dict) else None
    return len(choices) if isinstance(choices, list) else 0


READER = CallsReader()
