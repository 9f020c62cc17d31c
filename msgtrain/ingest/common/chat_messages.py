"""OpenAI chat-completions message lists into steps: the reading API logs and harnesses share for a request's
``messages`` (cassettes, ToolBench's ``train_messages``).

- Messages go through :func:`msgtrain.model.openai.from_openai_message`: content strings or parts, ``tool_calls``
  with JSON-string (kept verbatim) or dict arguments, ``tool`` results, ``developer``, ``reasoning_content``.
- Legacy ``function_call`` / ``function`` messages get a synthetic call id (``function_call_<i>``) so they pair; a
  tool call logged without an id gets ``call_<message>_<k>``, and a result without the id of its call answers the
  oldest waiting call of its name, else the oldest waiting call.
- A ``refusal`` (field or content part) is the assistant's visible text; an assistant message of ``"weight": 0``
  (``"loss_weight": 0``, axolotl's ``"training": false``, AgentGym's ``"loss": false``) is carried context, never
  trained.
"""

from __future__ import annotations

from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.conversation_files import Step, logged_reply
from msgtrain.ingest.common.message_like import message_weight
from msgtrain.model.graph import Origin
from msgtrain.model.message import DEFAULT_POLICY, OptionCallMessage
from msgtrain.model.openai import check_reply_present, from_openai_message


def chat_steps(messages: list[Any], *, policy: str = DEFAULT_POLICY) -> list[Step]:
    """Convert an OpenAI message list to steps (origins per the module doc); raises ValidationError."""
    steps: list[Step] = []
    names: dict[str, str] = {}
    legacy_calls: dict[str, list[str]] = {}  # function name -> synthetic ids awaiting a `function` result
    for i, raw in enumerate(messages):
        if not isinstance(raw, dict):
            raise ValidationError(
                f"message is a {type(raw).__name__}, not an object",
                where=f"message[{i}]",
                code="bad_message",
                hint='each message is an object like {"role": "user", "content": "..."}',
            )
        data = _normalise(raw, i, legacy_calls)
        unweighted = message_weight(raw) == 0  # kept as context: OpenAI's weight 0, axolotl's training false, ...
        if data.get("role") == "assistant" and not unweighted:
            check_reply_present(data, f"message[{i}]")
        msg = from_openai_message(data, index=i, call_names=names, policy=policy)
        if isinstance(msg, OptionCallMessage):
            names.update({c.invocation_id: c.option_name for c in msg.calls})
        origin = Origin.CARRIED if msg.role == "assistant" and unweighted else None
        msg, generation = logged_reply(msg, raw)
        steps.append(Step(msg, origin=origin, generation=generation, index=i))
    return steps


def _normalise(raw: dict[str, Any], index: int, legacy_calls: dict[str, list[str]]) -> dict[str, Any]:
    """Rewrite the few legacy / optional shapes ``from_openai_message`` does not read into ones it does."""
    data = dict(raw)
    role = data.get("role")
    if isinstance(data.get("content"), list):
        data["content"] = [
            {"type": "text", "text": part.get("refusal", "")}
            if isinstance(part, dict) and part.get("type") == "refusal"
            else part
            for part in data["content"]
        ]
    if role == "assistant":
        if data.get("content") in (None, "") and isinstance(data.get("refusal"), str):
            data["content"] = data["refusal"]
        call = data.get("function_call")
        if isinstance(call, dict) and not data.get("tool_calls"):
            call_id = f"function_call_{index}"
            legacy_calls.setdefault(str(call.get("name")), []).append(call_id)
            data["tool_calls"] = [{"id": call_id, "type": "function", "function": call}]
        elif isinstance(data.get("tool_calls"), list):
            data["tool_calls"] = [_with_id(c, index, k, legacy_calls) for k, c in enumerate(data["tool_calls"])]
    elif role in ("function", "tool") and not data.get("tool_call_id"):
        # a result logged without the id of its call (legacy functions; TRL's tool datasets, whose calls carry no
        # ids either): the oldest waiting call of its name, else the oldest waiting call (results in call order)
        waiting = legacy_calls.get(str(data.get("name"))) or next((ids for ids in legacy_calls.values() if ids), None)
        if waiting:
            data["tool_call_id"] = waiting.pop(0)
    return data


def _with_id(call: Any, index: int, k: int, legacy_calls: dict[str, list[str]]) -> Any:
    """A tool call the log wrote without an id gets a synthetic one (``call_<message>_<k>``), awaited by name."""
    if not isinstance(call, dict) or call.get("id"):
        return call
    fn = call.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    call_id = f"call_{index}_{k}"
    legacy_calls.setdefault(str(name), []).append(call_id)
    return {**call, "id": call_id}
