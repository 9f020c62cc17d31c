"""Span attributes of the LLM tracing conventions other than OpenTelemetry GenAI's current one, turned into it.

The ``otel`` reader (:mod:`msgtrain.ingest.formats.traces.otel`) reads GenAI spans: ``gen_ai.operation.name``,
``gen_ai.input.messages`` / ``gen_ai.output.messages``, tool spans. Tracers write the same facts under other names,
with messages flattened into one attribute per field and index:

- **OpenInference** (Arize Phoenix, and the instrumentations of LlamaIndex, LangChain, DSPy, CrewAI, smolagents,
  OpenAI, Anthropic, Bedrock ...): ``openinference.span.kind`` (``LLM`` / ``TOOL`` / ``AGENT`` ...),
  ``llm.input_messages.<i>.message.role`` / ``.content`` / ``.contents.<k>.message_content.{type,text,image}`` /
  ``.tool_calls.<j>.tool_call.{id,function.name,function.arguments}`` / ``.tool_call_id``, the same under
  ``llm.output_messages``, ``llm.tools.<i>.tool.json_schema``, ``llm.model_name``, ``llm.invocation_parameters``,
  ``llm.token_count.prompt``; a tool span's ``tool.name``, ``output.value``.
- **MLflow** tracing: ``mlflow.spanType`` (``CHAT_MODEL`` / ``LLM``), ``mlflow.spanInputs`` (the request: its
  ``messages``, ``tools``, ``model``) and ``mlflow.spanOutputs`` (the chat completion), each attribute JSON text.
- **OpenLLMetry / Traceloop** (the GenAI convention before messages became one attribute; Langfuse and many
  collectors ingest it): ``gen_ai.prompt.<i>.{role,content,tool_call_id}``,
  ``gen_ai.prompt.<i>.tool_calls.<j>.{id,name,arguments}``, ``gen_ai.completion.<i>.{role,content,finish_reason}``
  (and its ``tool_calls``), ``llm.request.functions.<i>.{name,description,parameters}``,
  ``gen_ai.usage.prompt_tokens``, ``llm.request.type`` (``chat``).

The flattened attributes may also come nested (``{"llm": {"input_messages": [{"message": {...}}]}}``) or half
flattened (a Phoenix spans dataframe: ``attributes.llm.input_messages`` holding ``{"message.role": ...}`` rows):
both are flattened to dotted keys first, so one parser reads all three.

Invariants:
- Only facts the span holds are written; a message is rebuilt from its own index only, in index order, and a
  message index with no role is an error naming the attribute (never a guessed role).
- Attributes the GenAI convention already names are never overwritten (a span carrying both keeps its GenAI ones).
- Argument strings stay verbatim (``raw_arguments`` downstream): they are what the model emitted.
"""

from __future__ import annotations

import json
import re
from typing import Any

from msgtrain.errors import ValidationError

_OI_KINDS = {"LLM": "chat", "TOOL": "execute_tool", "AGENT": "invoke_agent"}
_INDEXED = re.compile(r"^(\d+)\.(.+)$")


def convention_of(attrs: dict[str, Any]) -> str | None:
    """``openinference`` / ``openllmetry`` / ``mlflow`` when the (flattened) attributes are written in that
    convention."""
    if "mlflow.spanType" in attrs:
        return "mlflow"
    if "openinference.span.kind" in attrs or any(k.startswith("llm.input_messages.") for k in attrs):
        return "openinference"
    if any(k.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for k in attrs):
        return "openllmetry"
    return None


def flatten_attributes(attrs: dict[str, Any]) -> dict[str, Any]:
    """Nested objects and lists of objects under an attribute become dotted keys with list indices
    (``llm.input_messages.0.message.role``); scalars and lists of scalars stay as they are. GenAI attributes whose
    value is itself a message list (``gen_ai.input.messages``) are kept whole."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if prefix.startswith("gen_ai.") and not prefix.startswith(("gen_ai.prompt", "gen_ai.completion")):
            out[prefix] = value
        elif isinstance(value, dict) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, v in enumerate(value):
                walk(f"{prefix}.{i}", v)
        else:
            out[prefix] = value

    for key, value in attrs.items():
        walk(key, value)
    return out


def as_genai(attrs: dict[str, Any]) -> dict[str, Any]:
    """``attrs`` with the GenAI attributes the ``otel`` reader reads added from the convention they are written in
    (see the module docstring); unchanged when they are in none."""
    flat = flatten_attributes(attrs)
    convention = convention_of(flat)
    if convention is None:
        whole = _whole_prompt(flat)
        return attrs if not whole else {**attrs, **{k: v for k, v in whole.items() if k not in attrs}}
    parse = {"openinference": _from_openinference, "openllmetry": _from_openllmetry, "mlflow": _from_mlflow}
    genai = parse[convention](flat)
    return {**flat, **{k: v for k, v in genai.items() if k not in attrs}}


# ------------------------------------------------------------------------------------------------ OpenInference
def _from_openinference(flat: dict[str, Any]) -> dict[str, Any]:
    kind = str(flat.get("openinference.span.kind") or ("LLM" if "llm.input_messages.0.message.role" in flat else ""))
    op = _OI_KINDS.get(kind.upper())
    out: dict[str, Any] = {}
    if op is None:
        return out
    out["gen_ai.operation.name"] = op
    if op == "execute_tool":
        _put(out, "gen_ai.tool.name", flat.get("tool.name"))
        _put(out, "gen_ai.tool.call.id", flat.get("tool_call.id", flat.get("tool.id")))
        _put(out, "gen_ai.tool.call.result", flat.get("output.value"))
        return out
    if op == "invoke_agent":
        _put(out, "gen_ai.agent.name", flat.get("agent.name"))
        return out
    inputs = _indexed(flat, "llm.input_messages")
    whole = (
        {}
        if inputs or _indexed(flat, "llm.output_messages")
        else _whole_prompt({"gen_ai.prompt": flat.get("input.value"), "gen_ai.completion": flat.get("output.value")})
    )
    if whole:  # no flattened messages: the span's input and output values hold them (as JSON text)
        out.update(whole)
    elif inputs:
        out["gen_ai.input.messages"] = [_oi_message(m, f"llm.input_messages.{i}") for i, m in inputs]
    outputs = _indexed(flat, "llm.output_messages")
    if outputs:
        out["gen_ai.output.messages"] = [_typed(_oi_message(m, f"llm.output_messages.{i}")) for i, m in outputs]
    elif whole:
        pass  # the output value was read with the input value
    elif isinstance(flat.get("output.value"), str) and flat.get("output.mime_type") != "application/json":
        out["gen_ai.output"] = flat["output.value"]  # a text completion logged only as the span's output
    tools = [json_attr(t.get("tool.json_schema")) for _, t in _indexed(flat, "llm.tools")]
    if tools and all(isinstance(t, dict) for t in tools):
        out["gen_ai.tool.definitions"] = tools
    _put(out, "gen_ai.request.model", flat.get("llm.model_name"))
    params = json_attr(flat.get("llm.invocation_parameters"))
    for key in ("temperature", "top_p", "max_tokens"):
        if isinstance(params, dict) and isinstance(params.get(key), int | float):
            out[f"gen_ai.request.{key}"] = params[key]
    _put(out, "gen_ai.usage.input_tokens", flat.get("llm.token_count.prompt"))
    _put(out, "gen_ai.usage.output_tokens", flat.get("llm.token_count.completion"))
    return out


def _oi_message(fields: dict[str, Any], where: str) -> dict[str, Any]:
    """One OpenInference message (its ``message.*`` fields) as an OpenAI chat message."""
    m = {k.removeprefix("message."): v for k, v in fields.items()}
    role = m.get("role")
    if not isinstance(role, str) or not role:
        raise ValidationError(f"{where}.message.role is missing", code="unknown_role", hint="every message has a role")
    msg: dict[str, Any] = {"role": role}
    parts: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for _, c in _indexed(m, "contents"):
        c = {k.removeprefix("message_content."): v for k, v in c.items()}
        if c.get("type") == "image":
            parts.append({"type": "image_url", "image_url": {"url": str(c.get("image.image.url") or "")}})
        elif c.get("type") == "reasoning":
            reasoning.append(str(c.get("text") or ""))
        else:
            parts.append({"type": "text", "text": str(c.get("text") or "")})
    if "content" in m:
        msg["content"] = m["content"]
    elif parts:
        msg["content"] = parts[0]["text"] if len(parts) == 1 and parts[0]["type"] == "text" else parts
    else:
        msg["content"] = None
    if reasoning:
        msg["reasoning_content"] = "".join(reasoning)
    calls = [
        {
            "id": c.get("tool_call.id"),
            "type": "function",
            "function": {"name": c.get("tool_call.function.name"), "arguments": c.get("tool_call.function.arguments")},
        }
        for _, c in _indexed(m, "tool_calls")
    ]
    if calls:
        msg["tool_calls"] = calls
    for key in ("tool_call_id", "name"):
        _put(msg, key, m.get(key))
    return msg


# ------------------------------------------------------------------------------------------------ OpenLLMetry
def _from_openllmetry(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    request_type = flat.get("llm.request.type")
    if request_type not in (None, "chat", "completion"):
        return out
    out["gen_ai.operation.name"] = "chat"
    prompts = _indexed(flat, "gen_ai.prompt")
    if prompts:
        out["gen_ai.input.messages"] = [_ollm_message(m, f"gen_ai.prompt.{i}") for i, m in prompts]
    completions = _indexed(flat, "gen_ai.completion")
    if completions:
        typed = []
        for i, m in completions:
            message = _typed(_ollm_message({"role": "assistant", **m}, f"gen_ai.completion.{i}"))
            if isinstance(m.get("finish_reason"), str):
                message["finish_reason"] = m["finish_reason"]
            typed.append(message)
        out["gen_ai.output.messages"] = typed
    functions = _indexed(flat, "llm.request.functions")
    if functions:
        out["gen_ai.tool.definitions"] = [
            {
                "type": "function",
                "function": {
                    "name": f.get("name"),
                    **({"description": f["description"]} if "description" in f else {}),
                    "parameters": json_attr(f.get("parameters")),
                },
            }
            for _, f in functions
        ]
    _put(out, "gen_ai.usage.input_tokens", flat.get("gen_ai.usage.prompt_tokens"))
    _put(out, "gen_ai.usage.output_tokens", flat.get("gen_ai.usage.completion_tokens"))
    return out


def _ollm_message(m: dict[str, Any], where: str) -> dict[str, Any]:
    role = m.get("role")
    if not isinstance(role, str) or not role:
        raise ValidationError(f"{where}.role is missing", code="unknown_role", hint="every message has a role")
    content = m.get("content")
    parsed = json_attr(content) if isinstance(content, str) and content.startswith("[") else None
    if isinstance(parsed, list) and parsed and all(isinstance(p, dict) and "type" in p for p in parsed):
        content = parsed  # content parts, which OpenLLMetry writes as JSON text
    msg: dict[str, Any] = {"role": role, "content": content}
    calls = [
        {"id": c.get("id"), "type": "function", "function": {"name": c.get("name"), "arguments": c.get("arguments")}}
        for _, c in _indexed(m, "tool_calls")
    ]
    whole = json_attr(m.get("tool_calls"))  # some tracers write the OpenAI tool_calls list as one JSON text
    if not calls and isinstance(whole, list) and all(isinstance(c, dict) for c in whole):
        calls = whole
    if calls:
        msg["tool_calls"] = calls
    _put(msg, "tool_call_id", m.get("tool_call_id"))
    return msg


# ------------------------------------------------------------------------------------------------ whole prompt
def _whole_prompt(flat: dict[str, Any]) -> dict[str, Any]:
    """The GenAI convention before ``gen_ai.input.messages`` as one attribute each, unindexed: ``gen_ai.prompt`` the
    input messages as JSON text, ``gen_ai.completion`` the reply as JSON text (a message list, one message, or
    ``{"text", "finish_reason"}``) or as plain text (Arize-ai/openinference
    ``js/packages/openinference-genai/test/__fixtures__/otel_genai_deprecated_client_span_tool_calls.json``).
    Nothing is read unless the prompt is a list of messages with roles."""
    prompt = json_attr(flat.get("gen_ai.prompt"))
    if not (isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "role" in m for m in prompt)):
        return {}
    out: dict[str, Any] = {"gen_ai.input.messages": prompt}
    raw = flat.get("gen_ai.completion")
    completion = json_attr(raw)
    if isinstance(completion, dict) and "role" in completion:
        completion = [completion]
    if isinstance(completion, list) and completion and all(isinstance(m, dict) and "role" in m for m in completion):
        out["gen_ai.output.messages"] = completion
    elif isinstance(completion, dict) and isinstance(completion.get("text"), str):
        message: dict[str, Any] = {"role": "assistant", "parts": [{"type": "text", "content": completion["text"]}]}
        _put(message, "finish_reason", completion.get("finish_reason"))
        out["gen_ai.output.messages"] = [message]
    elif isinstance(raw, str) and raw and not isinstance(completion, dict | list):
        out["gen_ai.output"] = raw  # the reply's text (text that parses as a number or a string literal too)
    return out


# ------------------------------------------------------------------------------------------------ MLflow
_MLFLOW_CHAT = {"CHAT_MODEL", "LLM"}


def _from_mlflow(flat: dict[str, Any]) -> dict[str, Any]:
    """An MLflow chat-model span: every attribute is JSON text; ``mlflow.spanInputs`` is the request (its
    ``messages`` and ``tools``), ``mlflow.spanOutputs`` the chat completion it returned (or the reply's text). Only
    an assistant choice is a reply (a wrapper span may log its caller's message as a choice)."""
    out: dict[str, Any] = {}
    if json_attr(flat.get("mlflow.spanType")) not in _MLFLOW_CHAT:
        return out
    out["gen_ai.operation.name"] = "chat"
    inputs, outputs = json_attr(flat.get("mlflow.spanInputs")), json_attr(flat.get("mlflow.spanOutputs"))
    if isinstance(inputs, dict) and isinstance(inputs.get("messages"), list):
        out["gen_ai.input.messages"] = inputs["messages"]
        if isinstance(inputs.get("tools"), list):
            out["gen_ai.tool.definitions"] = inputs["tools"]
        _put(out, "gen_ai.request.model", inputs.get("model"))
    choices = outputs.get("choices") if isinstance(outputs, dict) else None
    if isinstance(choices, list):
        typed = []
        for choice in choices:
            message = choice.get("message") if isinstance(choice, dict) else None
            if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
                typed.append({**_typed({"role": "assistant", **message}), "finish_reason": choice.get("finish_reason")})
        if typed:
            out["gen_ai.output.messages"] = typed
        usage = outputs.get("usage") if isinstance(outputs, dict) else None
        if isinstance(usage, dict):
            _put(out, "gen_ai.usage.input_tokens", usage.get("prompt_tokens"))
        _put(out, "gen_ai.response.model", outputs.get("model") if isinstance(outputs, dict) else None)
    elif isinstance(outputs, str) and outputs:
        out["gen_ai.output"] = outputs
    usage = json_attr(flat.get("mlflow.chat.tokenUsage"))  # MLflow 3's own record of the call's usage
    if "gen_ai.usage.input_tokens" not in out and isinstance(usage, dict):
        _put(out, "gen_ai.usage.input_tokens", usage.get("input_tokens"))
    return out


# ------------------------------------------------------------------------------------------------ shared
def _indexed(flat: dict[str, Any], prefix: str) -> list[tuple[int, dict[str, Any]]]:
    """The items of a flattened list ``<prefix>.<i>.<field>``: (i, {field: value}) in index order."""
    items: dict[int, dict[str, Any]] = {}
    lead = prefix + "."
    for key, value in flat.items():
        if key.startswith(lead) and (m := _INDEXED.match(key[len(lead) :])):
            items.setdefault(int(m.group(1)), {})[m.group(2)] = value
    return sorted(items.items())


def _typed(msg: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat message as a GenAI typed output message (``{role, parts}``), which the ``otel`` reader reads."""
    parts: list[dict[str, Any]] = []
    if msg.get("reasoning_content"):
        parts.append({"type": "reasoning", "content": msg["reasoning_content"]})
    content = msg.get("content")
    if isinstance(content, str) and content:
        parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        parts.extend({"type": "text", "content": str(p.get("text", ""))} for p in content if isinstance(p, dict))
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        parts.append(
            {"type": "tool_call", "id": call.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments")}
        )
    return {"role": msg.get("role", "assistant"), "parts": parts}


def json_attr(value: Any) -> Any:
    """An attribute that may hold JSON as text (tracers can only store strings): parsed when it parses, else as
    it is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None and value != "":
        out[key] = value
