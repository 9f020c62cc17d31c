"""Cohere chat calls, API v1 (``/v1/chat``) and v2 (``/v2/chat``), as recorded in HTTP cassettes: one call each.

v2 (``messages`` in the OpenAI shape, plus Cohere's own fields):
- ``system`` / ``user`` / ``assistant`` / ``tool`` messages; ``content`` a string or a list of ``text`` (and
  ``image_url``) parts; an assistant message's ``tool_plan`` is the text the model wrote before its ``tool_calls``
  (Cohere returns it in place of ``content`` when it calls tools), ``thinking`` parts are its reasoning; a tool
  message's ``document`` parts are the JSON of their ``data``, one per line.
- The response's ``message`` is the sampled reply; ``finish_reason`` and ``usage.tokens`` (the prompt size Cohere
  counted, its own tokenizer) are kept.
- Streamed responses (SSE ``message-start``, ``content-delta``, ``tool-plan-delta``, ``tool-call-start`` /
  ``-delta`` / ``-end``, ``message-end``) are reassembled into that body, as Cohere's SDK does.

v1 (``message``, ``chat_history``, ``preamble``, ``tools``, ``tool_results``):
- ``preamble`` is the system message; ``chat_history`` roles ``SYSTEM`` / ``USER`` / ``CHATBOT`` / ``TOOL``;
  ``message`` is the new user message (empty when the call only returns ``tool_results``).
- v1 tool calls ``{name, parameters}`` carry no id: each gets ``cohere_call_<position>_<k>`` from the position of
  its message in the conversation, so the same call has the same id when a later call re-sends it. A tool result
  ``{call, outputs}`` answers the open call equal to its ``call`` (else the next open one of that name); its
  content is the JSON of ``outputs``. ``parameter_definitions`` tools become JSON-schema function tools.
- The response's ``text`` and ``tool_calls`` are the sampled reply; streamed v1 responses (JSON lines,
  ``stream-start`` ... ``stream-end`` whose ``response`` is the whole body) are read from ``stream-end``, else
  rebuilt from ``text-generation`` and ``tool-calls-generation`` events.
- ``raw_prompting: true`` sends a prompt already rendered with Cohere's template as ``message``: that is not a
  chat, and the call is rejected (``not_a_chat``).
"""

from __future__ import annotations

import json
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.call_log import Call
from msgtrain.ingest.common.conversation_files import Step
from msgtrain.ingest.common.message_like import canonical_role
from msgtrain.ingest.common.streams import StreamFailed, stream_events
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.model.graph import Env
from msgtrain.model.message import DEFAULT_POLICY, Generation, OptionCallMessage
from msgtrain.model.openai import from_openai_message

_SAMPLING = ("temperature", "p", "k", "max_tokens", "seed", "frequency_penalty", "presence_penalty")
_V1_ROLES = {"SYSTEM": "system", "USER": "user", "CHATBOT": "assistant", "TOOL": "tool"}


def response_body(kind: str, body: Any) -> Any:
    """A Cohere response as its non-streamed body (streams reassembled); other values are returned as they are."""
    if isinstance(body, dict) and ("message" in body or "text" in body or "response_id" in body):
        return body
    if isinstance(body, str | bytes | list):
        events = [e for e in stream_events(body) if isinstance(e, dict)]
        return _v2_stream(events) if kind == "cohere_v2" else _v1_stream(events)
    return body


# ------------------------------------------------------------------------------------------------------------ v2


def v2_call(request: dict[str, Any], response: dict[str, Any]) -> Call:
    messages = request.get("messages")
    if not isinstance(messages, list):
        raise ValidationError("request has no messages list", where="request", code="bad_request")
    names: dict[str, str] = {}
    context = []
    for i, m in enumerate(messages):
        msg = from_openai_message(_v2_message(m, f"messages[{i}]"), index=i, call_names=names)
        if isinstance(msg, OptionCallMessage):
            names.update({c.invocation_id: c.option_name for c in msg.calls})
        context.append(Step(msg, index=i))
    reply = response.get("message")
    if not isinstance(reply, dict):
        raise ValidationError("response has no message", where="response", code="bad_response")
    msg = from_openai_message({**_v2_message(reply, "response.message"), "role": "assistant"}, call_names=names)
    usage = response.get("usage")
    tokens = usage.get("tokens") if isinstance(usage, dict) else None
    generation = Generation(
        model=request.get("model") if isinstance(request.get("model"), str) else None,
        finish_reason=response.get("finish_reason") if isinstance(response.get("finish_reason"), str) else None,
        sampling={k: request[k] for k in _SAMPLING if request.get(k) is not None},
    )
    if isinstance(tokens, dict):
        msg = msg.model_copy(update={"metadata": {**msg.metadata, "usage": tokens}})
    env = Env.make(openai_tools(request.get("tools"), where="request.tools"))
    return Call(context, [Step(msg, generation=generation)], env)


def _v2_message(m: Any, where: str) -> dict[str, Any]:
    """A v2 message as an OpenAI message dict (see the module docstring)."""
    if not isinstance(m, dict):
        raise ValidationError("a message is not an object", where=where, code="bad_message")
    out = {k: v for k, v in m.items() if k in ("role", "tool_calls", "tool_call_id", "name")}
    text, reasoning, media = _v2_content(m.get("content"), where)
    if m.get("role") == "assistant" and not text and isinstance(m.get("tool_plan"), str):
        text = m["tool_plan"]
    out["content"] = [{"type": "text", "text": text}, *media] if media else text
    if reasoning:
        out["reasoning_content"] = reasoning
    if not out.get("tool_calls"):
        out.pop("tool_calls", None)
    return out


def _v2_content(content: Any, where: str) -> tuple[str, str, list[dict[str, Any]]]:
    if content is None or isinstance(content, str):
        return content or "", "", []
    if not isinstance(content, list):
        raise ValidationError("content is not a string or a list", where=where, code="bad_content")
    texts: list[str] = []
    thinking: list[str] = []
    media: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(str(part.get("text", "")))
        elif kind == "thinking":
            thinking.append(str(part.get("thinking", "")))
        elif kind == "document":
            doc = part.get("document") if isinstance(part.get("document"), dict) else {}
            data = doc.get("data")
            texts.append(data if isinstance(data, str) else json.dumps(data, ensure_ascii=False))
        elif kind == "image_url":
            media.append(part)
        else:
            raise ValidationError(
                f"content[{j}] has a part type msgtrain does not read ({kind!r})",
                where=where,
                code="bad_content",
                hint="Cohere parts read: text, thinking, document, image_url",
            )
    return "\n".join(texts), "".join(thinking), media


def _v2_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A v2 stream as its body, accumulated as cohere-python's ``chat_stream`` events describe the message."""
    message: dict[str, Any] = {"role": "assistant", "content": [], "tool_plan": "", "tool_calls": []}
    body: dict[str, Any] = {"message": message}
    text: dict[int, dict[str, Any]] = {}
    for e in events:
        kind = e.get("type")
        outer = e["delta"] if isinstance(e.get("delta"), dict) else {}
        delta: dict[str, Any] = outer["message"] if isinstance(outer.get("message"), dict) else {}
        if kind == "message-start":
            body["id"] = e.get("id")
        elif kind == "content-start":
            start: dict[str, Any] = delta["content"] if isinstance(delta.get("content"), dict) else {}
            kind_of = str(start.get("type", "text"))
            text[int(e.get("index") or 0)] = {"type": kind_of, kind_of: ""}
        elif kind == "content-delta":
            part: dict[str, Any] = delta["content"] if isinstance(delta.get("content"), dict) else {}
            slot = text.setdefault(int(e.get("index") or 0), {"type": "text", "text": ""})
            for key in ("text", "thinking"):
                if isinstance(part.get(key), str):
                    slot[key] = slot.get(key, "") + part[key]
        elif kind == "tool-plan-delta":
            message["tool_plan"] += str(delta.get("tool_plan") or "")
        elif kind == "tool-call-start":
            call = dict(delta.get("tool_calls") or {})
            call["function"] = dict(call.get("function") or {})
            call["function"]["arguments"] = call["function"].get("arguments") or ""
            message["tool_calls"].append(call)
        elif kind == "tool-call-delta" and message["tool_calls"]:
            piece = ((delta.get("tool_calls") or {}).get("function") or {}).get("arguments") or ""
            message["tool_calls"][-1]["function"]["arguments"] += piece
        elif kind == "message-end":
            end = outer
            body["finish_reason"] = end.get("finish_reason")
            body["usage"] = end.get("usage")
            if end.get("error"):
                raise StreamFailed(f"the stream reported an error: {end['error']}", where="response")
    message["content"] = [text[i] for i in sorted(text)]
    return body


# ------------------------------------------------------------------------------------------------------------ v1


def v1_call(request: dict[str, Any], response: dict[str, Any]) -> Call:
    if request.get("raw_prompting"):
        raise ValidationError(
            "a raw_prompting call sends a prompt already rendered with Cohere's template: not a chat",
            where="request",
            code="not_a_chat",
            hint="log the chat itself (chat_history and message), not the rendered prompt",
        )
    convo: list[dict[str, Any]] = []
    if isinstance(request.get("preamble"), str) and request["preamble"]:
        convo.append({"role": "system", "content": request["preamble"]})
    history = request.get("chat_history") or []
    if not isinstance(history, list):
        raise ValidationError("chat_history is not a list", where="request", code="bad_request")
    open_calls: list[dict[str, Any]] = []
    for i, turn in enumerate(history):
        _v1_turn(turn, f"chat_history[{i}]", convo, open_calls)
    results = request.get("tool_results")
    if isinstance(results, list) and results:
        _v1_results(results, "tool_results", convo, open_calls)
    if isinstance(request.get("message"), str) and request["message"]:
        convo.append({"role": "user", "content": request["message"]})
    reply = _v1_reply(response, len(convo))
    names: dict[str, str] = {}
    context = []
    for i, data in enumerate(convo):
        msg = from_openai_message(data, index=i, call_names=names)
        if isinstance(msg, OptionCallMessage):
            names.update({c.invocation_id: c.option_name for c in msg.calls})
        context.append(Step(msg, index=i))
    msg = from_openai_message(reply, call_names=names, policy=DEFAULT_POLICY)
    meta = response.get("meta")
    tokens = meta.get("tokens") if isinstance(meta, dict) else None
    if isinstance(tokens, dict):
        msg = msg.model_copy(update={"metadata": {**msg.metadata, "usage": tokens}})
    generation = Generation(
        model=request.get("model") if isinstance(request.get("model"), str) else None,
        finish_reason=response.get("finish_reason") if isinstance(response.get("finish_reason"), str) else None,
        sampling={k: request[k] for k in _SAMPLING if request.get(k) is not None},
    )
    env = Env.make(openai_tools([_v1_tool(t) for t in request.get("tools") or [] if isinstance(t, dict)]))
    return Call(context, [Step(msg, generation=generation)], env)


def _v1_calls(calls: Any, position: int) -> list[dict[str, Any]]:
    out = []
    for k, call in enumerate(calls if isinstance(calls, list) else []):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ValidationError(f"tool_calls[{k}] has no name", where=f"message {position}", code="bad_tool_call")
        args = call.get("parameters") if call.get("parameters") is not None else {}
        function = {"name": call["name"], "arguments": args}
        out.append({"id": f"cohere_call_{position}_{k}", "type": "function", "function": function})
    return out


def _v1_turn(turn: Any, where: str, convo: list[dict[str, Any]], open_calls: list[dict[str, Any]]) -> None:
    logged = turn.get("role") if isinstance(turn, dict) else None
    # the role table, case-insensitively (``System`` and ``Chatbot`` are written as often as ``SYSTEM``)
    role = canonical_role(logged) if isinstance(logged, str) else None
    if not isinstance(turn, dict) or role not in _V1_ROLES.values():
        raise ValidationError(
            f"unknown v1 role {logged!r}",
            where=where,
            code="unknown_role",
            hint="Cohere v1 roles: SYSTEM, USER, CHATBOT, TOOL",
        )
    if role == "tool":
        _v1_results(turn.get("tool_results") or [], where, convo, open_calls)
        return
    data: dict[str, Any] = {"role": role, "content": turn.get("message") or ""}
    if role == "assistant" and turn.get("tool_calls"):
        data["tool_calls"] = _v1_calls(turn["tool_calls"], len(convo))
        open_calls[:] = [
            {"id": c["id"], "name": c["function"]["name"], "args": c["function"]["arguments"]}
            for c in data["tool_calls"]
        ]
    convo.append(data)


def _v1_results(results: Any, where: str, convo: list[dict[str, Any]], open_calls: list[dict[str, Any]]) -> None:
    for k, result in enumerate(results if isinstance(results, list) else []):
        call = result.get("call") if isinstance(result, dict) else None
        if not isinstance(call, dict):
            raise ValidationError(f"tool_results[{k}] has no call", where=where, code="bad_tool_result")
        same_name = [c for c in open_calls if c["name"] == call.get("name")]
        match = next((c for c in same_name if c["args"] == call.get("parameters")), same_name[0] if same_name else None)
        if match is None:
            raise ValidationError(
                f"tool_results[{k}] answers no open call of {call.get('name')!r}",
                where=where,
                code="unpaired_result",
                hint="a v1 tool result must follow the CHATBOT turn whose tool_calls it answers",
            )
        open_calls.remove(match)
        outputs = result.get("outputs")
        convo.append({"role": "tool", "tool_call_id": match["id"], "content": json.dumps(outputs, ensure_ascii=False)})


def _v1_reply(response: dict[str, Any], position: int) -> dict[str, Any]:
    text = response.get("text")
    calls = _v1_calls(response.get("tool_calls"), position)
    if not isinstance(text, str) and not calls:
        raise ValidationError("response has no text and no tool_calls", where="response", code="bad_response")
    reply: dict[str, Any] = {"role": "assistant", "content": text or ""}
    if calls:
        reply["tool_calls"] = calls
    return reply


def _v1_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A v1 ``{name, description, parameter_definitions}`` tool as a JSON-schema function tool."""
    params: dict[str, Any] = (
        tool["parameter_definitions"] if isinstance(tool.get("parameter_definitions"), dict) else {}
    )
    properties = {
        name: {k: spec[k] for k in ("type", "description") if spec.get(k) is not None}
        for name, spec in params.items()
        if isinstance(spec, dict)
    }
    required = [name for name, spec in params.items() if isinstance(spec, dict) and spec.get("required")]
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return {"name": tool.get("name"), "description": tool.get("description", ""), "parameters": schema}


def _v1_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    for e in events:
        if e.get("event_type") == "stream-end" and isinstance(e.get("response"), dict):
            return e["response"]
    text = "".join(str(e.get("text", "")) for e in events if e.get("event_type") == "text-generation")
    body: dict[str, Any] = {"text": text}
    for e in events:
        if e.get("event_type") == "tool-calls-generation" and isinstance(e.get("tool_calls"), list):
            body["tool_calls"] = e["tool_calls"]
        if e.get("event_type") == "stream-end":
            body["finish_reason"] = e.get("finish_reason")
    return body
