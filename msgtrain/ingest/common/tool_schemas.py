"""Tool schemas from any provider, as the OpenAI function-tool dicts chat templates are written for.

Chat templates receive ``tools`` verbatim and most read ``tool.function.name`` / ``.parameters`` (the shape
``transformers`` documents), so every reader normalises what its format logged to that one shape:

- OpenAI chat ``{"type": "function", "function": {...}}``: kept as is.
- OpenAI Responses ``{"type": "function", "name", "description", "parameters", "strict"}``: wrapped.
- Anthropic ``{"name", "description", "input_schema"}``: wrapped, ``input_schema`` becomes ``parameters``.
- Gemini ``{"functionDeclarations" | "function_declarations": [...]}``: one function per declaration
  (``parameters`` or ``parametersJsonSchema``).
- Bare ``{"name", "description", "parameters"}`` (ShareGPT / Glaive, LLaMA-Factory): wrapped.
- A tool record holding its schema under ``json_schema`` (Letta's agent files): that schema.

Invariant: a schema is never invented or dropped. Provider built-in tools that are not functions (Anthropic
``web_search_*``, Responses ``web_search``...) are kept verbatim; key order inside a function is preserved.
"""

from __future__ import annotations

import json
import re
from typing import Any

from msgtrain.errors import ValidationError

_FUNCTION_KEYS = ("name", "description", "parameters")


# What a tool's schema holds and a record of one call of it does not; and what a record of a call holds.
_SCHEMA_KEYS = frozenset(
    {"parameters", "input_schema", "inputSchema", "function", "json_schema", "functionDeclarations", "description"}
) | {"function_declarations"}
_CALL_RECORD_KEYS = frozenset({"tool_call_id", "call_id", "tool_args", "result", "output"})


def calls_not_schemas(raw: Any) -> bool:
    """Whether a logged ``tools`` list records the calls a run made (Agno's ``RunOutput.tools``: ``tool_call_id``,
    ``tool_name``, ``tool_args``, ``result``), not the schemas the model was sent: no tools for the context."""
    return (
        isinstance(raw, list)
        and bool(raw)
        and all(isinstance(t, dict) and t.keys() & _CALL_RECORD_KEYS and not t.keys() & _SCHEMA_KEYS for t in raw)
    )


def schemas_as_such(raw: Any) -> bool:
    """Whether every item of a non-empty list is a tool schema by its own keys (a function's parameters, input schema,
    declarations, description, or a provider tool's ``type``), not merely a dict with a name: the test for a
    ``tools`` list found in a bag of anything, such as a trace's ``metadata`` (``{"name", "invocations"}`` counts
    uses; ``{"name", "enabled"}`` is a toggle)."""
    return (
        isinstance(raw, list)
        and bool(raw)
        and all(
            isinstance(t, dict)
            and bool(t.keys() & _SCHEMA_KEYS or _provider_tool_type(t.get("type")))
            and not t.keys() & _CALL_RECORD_KEYS
            for t in raw
        )
    )


# Tool types providers define without a schema of the caller's (OpenAI's hosted tools; Anthropic's versioned ones,
# ``web_search_20250305``, ``bash_20250124``...)
_HOSTED_TOOL_TYPES = frozenset(
    {"function", "custom", "web_search", "web_search_preview", "file_search", "code_interpreter", "image_generation"}
    | {"computer_use_preview", "mcp", "local_shell", "google_search", "code_execution", "url_context"}
)


def _provider_tool_type(kind: Any) -> bool:
    return isinstance(kind, str) and (kind in _HOSTED_TOOL_TYPES or re.fullmatch(r"[a-z_]+_\d{8}", kind) is not None)


def openai_tools(raw: Any, *, where: str = "tools") -> list[Any]:
    """Normalise a logged ``tools`` field (a list, one dict, or a JSON string of either)."""
    if raw is None or raw == "" or raw == []:
        return []
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValidationError(
                f"tools is not valid JSON: {e.msg}",
                where=where,
                code="bad_tools",
                hint="tools must be a list of tool schemas or a JSON string of one",
            ) from e
        if raw is None:
            return []
    items = raw if isinstance(raw, list) else [raw]
    out: list[Any] = []
    for i, tool in enumerate(items):
        if not isinstance(tool, dict):
            raise ValidationError(
                f"tools[{i}] is not an object",
                where=where,
                code="bad_tools",
                hint="each tool is a JSON object with a name and a parameter schema",
            )
        out.extend(_one_tool(tool))
    return out


def _one_tool(tool: dict[str, Any]) -> list[Any]:
    schema = tool.get("json_schema")
    if isinstance(schema, dict) and isinstance(schema.get("name"), str):
        return _one_tool(schema)  # a tool record holding the schema it sends (Letta's agent files, tool registries)
    declarations = tool.get("functionDeclarations", tool.get("function_declarations"))
    if isinstance(declarations, list):
        return [_wrap(_gemini_declaration(d)) for d in declarations if isinstance(d, dict)]
    kind = tool.get("type")
    if kind == "function" and isinstance(tool.get("function"), dict):
        return [tool]
    if kind not in (None, "function", "custom"):
        return [tool]  # a provider built-in tool (web search, code execution...): nothing to normalise
    if "input_schema" in tool:
        fn: dict[str, Any] = {k: tool[k] for k in ("name", "description") if k in tool}
        fn["parameters"] = tool["input_schema"]
        return [_wrap(fn)]
    if "name" in tool:
        bare: dict[str, Any] = {k: tool[k] for k in _FUNCTION_KEYS if k in tool}
        if "strict" in tool:
            bare["strict"] = tool["strict"]
        return [_wrap(bare)]
    return [tool]


def _gemini_declaration(decl: dict[str, Any]) -> dict[str, Any]:
    fn: dict[str, Any] = {k: decl[k] for k in ("name", "description") if k in decl}
    params = decl.get("parameters", decl.get("parametersJsonSchema"))
    if params is not None:
        fn["parameters"] = params
    return fn


def _wrap(fn: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": fn}
