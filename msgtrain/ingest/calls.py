"""Per-call API logs: one JSONL record per LLM call, ``{"request": {...}, "response": {...}}``.

The request is an OpenAI ``/v1/chat/completions`` body (``model``, ``messages``, ``tools``,
``chat_template_kwargs`` …); the response is the body returned (``choices[].message`` with content, tool_calls,
``reasoning_content``/``reasoning``; vLLM's ``prompt_token_ids``, ``choices[].token_ids``,
``choices[].logprobs.content[].logprob`` when the engine returned them).

Invariants:
- Calls are rebuilt into message graphs: calls whose messages share a prefix share nodes (content addressing);
  each response choice is a ``sampled`` node under exactly its request's context (n>1 choices are siblings); an
  assistant message in a request is ``carried`` unless the same message was sampled in that same context by an
  earlier call. A later call whose history differs from what was sampled (edited, compacted, reasoning dropped,
  tool-call JSON rewritten, other tools) lands on another branch; the linearizer finds the cut.
- Records are grouped into conversations by ``session_id`` (top level or ``request.metadata``/``request.user``)
  when present, else by the first two request messages. A file's graphs stay in memory until the file ends
  (calls of one conversation may be spread over it); files are read line by line.
- A bad record is rejected with a reason; the rest of the file is still read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.base import (
    ReadEvent,
    ReadGraph,
    ReadReject,
    SourceRef,
    excerpt,
    head_objects,
    iter_json_lines,
)
from msgtrain.model.graph import Env, MessageGraph, Origin, canonical
from msgtrain.model.openai import from_openai_message, from_openai_messages, generation_from_choice

_RESERVED_KWARGS = ("chat_template_kwargs",)


def _session_of(rec: dict[str, Any], request: dict[str, Any]) -> str | None:
    for holder in (rec, request.get("metadata") or {}):
        if isinstance(holder, dict):
            for key in ("session_id", "conversation_id", "trajectory_id"):
                if isinstance(holder.get(key), str | int):
                    return str(holder[key])
    return None


class CallsReader:
    name = "calls"
    description = "per-call API logs: JSONL of {request, response} chat-completions bodies (vLLM token ids optional)"
    example = "sample_logs/calls/agent_calls.jsonl"

    def detect(self, path: Path, head: bytes) -> bool:
        return any(
            isinstance(o.get("request"), dict)
            and "messages" in o["request"]
            and isinstance(o.get("response"), dict)
            and "choices" in o["response"]
            for o in head_objects(head)
        )

    def read(self, path: Path) -> Iterator[ReadEvent]:
        graphs: dict[str, MessageGraph] = {}
        counts: dict[str, int] = {}
        first_line: dict[str, int] = {}
        extras: dict[str, dict[str, Any]] = {}
        for lineno, raw, obj in iter_json_lines(path):
            src = SourceRef(str(path), f"line {lineno}")
            if isinstance(obj, MsgtrainError):
                yield ReadReject(src, obj, excerpt(raw))
                continue
            try:
                key, build = self._plan(obj, f"{path}:{lineno}")
                g = graphs.get(key)
                if g is None:
                    gid = hashlib.blake2b(f"{path.name}\0{key}".encode(), digest_size=12).hexdigest()
                    g = MessageGraph(graph_id=gid, policy=str(obj["request"].get("model") or "policy"))
                    graphs[key] = g
                    counts[key] = 0
                    first_line[key] = lineno
                build(g)
                counts[key] += 1
                if isinstance(obj.get("reward"), int | float):
                    extras.setdefault(key, {})["reward"] = obj["reward"]
            except MsgtrainError as e:
                yield ReadReject(src, e, excerpt(raw))
        for key, g in graphs.items():
            yield ReadGraph(
                g,
                SourceRef(str(path), f"line {first_line[key]}"),
                records=counts[key],
                extras=extras.get(key, {}),
            )

    def _plan(self, rec: Any, where: str) -> tuple[str, Any]:
        """Validate one record fully before touching any graph, so a bad record leaves no partial nodes."""
        if (
            not isinstance(rec, dict)
            or not isinstance(rec.get("request"), dict)
            or not isinstance(rec.get("response"), dict)
        ):
            raise ValidationError(
                "record needs 'request' and 'response' objects",
                where=where,
                code="bad_record",
                hint='one line per call: {"request": {...}, "response": {...}}',
            )
        request, response = rec["request"], rec["response"]
        if "error" in response and not response.get("choices"):
            raise ValidationError(
                f"the call failed: {str(response['error'])[:200]}", where=where, code="error_response"
            )
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
        try:
            context = from_openai_messages(messages)
            names = {c.invocation_id: c.option_name for m in context for c in getattr(m, "calls", ())}
            sampled = []
            prompt_ids = response.get("prompt_token_ids")
            for i, choice in enumerate(choices):
                if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
                    raise ValidationError(f"choices[{i}] has no message", where=where, code="bad_record")
                msg = from_openai_message({**choice["message"], "role": "assistant"}, index=i, call_names=names)
                # vLLM puts prompt ids on the response; some proxies put them on each choice.
                resp = (
                    response
                    if prompt_ids is not None
                    else {**response, "prompt_token_ids": choice.get("prompt_token_ids")}
                )
                sampled.append((msg, generation_from_choice(choice, resp)))
        except MsgtrainError as e:
            raise e.located(where) from None
        except ValueError as e:  # pydantic validation of a field (e.g. logprobs not aligned with ids)
            raise ValidationError(str(e).splitlines()[0], where=where, code="bad_record") from None
        env = Env.make(tools, kwargs)
        session = _session_of(rec, request)
        key = session if session is not None else canonical([m.canonical_json() for m in context[:2]])

        def build(g: MessageGraph) -> None:
            parent = None
            for m in context:
                parent = g.add_node(
                    parent, m, env=env, origin=Origin.CARRIED if m.role == "assistant" else Origin.CONTEXT
                )
            for msg, gen in sampled:
                g.add_node(parent, msg, env=env, origin=Origin.SAMPLED, generation=gen)
            g.head = [n.id for n in g.path(parent)] if parent else []

        return key, build


READER = CallsReader()
