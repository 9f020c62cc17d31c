"""A message's content in any dialect → the OpenAI chat pieces it stands for: text and media parts, tool calls and
tool results, reasoning text (what :class:`~msgtrain.ingest.common.shapes.MessageNormaliser` assembles messages of).

- **Content items**: OpenAI parts, Anthropic blocks (``tool_use`` / ``tool_result`` / ``thinking``; Letta's
  ``reasoning``), Gemini parts (``functionCall`` / ``functionResponse`` / ``thought``, inline and file data),
  goose's ``toolRequest`` / ``toolResponse``, the Vercel AI SDK's and Haystack's call and result parts, Semantic
  Kernel's typed items, and the AI SDK's UI tool parts (a call and its output in one part).
- **Text a chat template already rendered** (:func:`rendered_template_text`): control text around a prompt, which
  read as a message would be rendered twice.
- **JSON in a string** (:func:`parse_json_field`): the readers' one parser for fields that may hold JSON as text.

Invariants:
- Nothing is invented: argument strings are kept verbatim, logged ids and text as logged.
- An item that cannot be read is a :class:`~msgtrain.errors.ValidationError` naming ``content[j]`` at the
  message's JSON path (``where``), never dropped and never guessed.
- Functions of their input only: pairing results with calls is the normaliser's state, not kept here.
"""

from __future__ import annotations

import ast
import base64
import json
import re
from typing import Any

from msgtrain.errors import ValidationError

_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})
# Reasoning blocks, by type: Anthropic's ``thinking``, Letta's ``reasoning`` (``ReasoningContent``); their redacted
# or omitted forms hold no text that could be trained (Letta's ``redacted_reasoning`` / ``omitted_reasoning``).
REASONING_BLOCKS = frozenset({"thinking", "reasoning", "think"})  # think: Kimi's ThinkPart {"think": ...}
REDACTED_BLOCKS = frozenset({"redacted_thinking", "redacted_reasoning", "omitted_reasoning", "redactedThinking"})


# Chat-template control text that opens a conversation's first turn, or the assistant's turn at its end. A user or
# system text that starts or ends with one is a prompt some chat template already rendered (veRL and SkyRL rollout
# dumps, lm-evaluation-harness with --apply_chat_template): read as a message it would be rendered a second time,
# around its own control text, a context no model ever saw. Readers parse a whole rendered prompt back into its
# messages first (msgtrain.ingest.common.rendered_prompts); what reaches this check is markup no family reads
# unambiguously.
_RENDERED_OPENINGS = (
    "<|im_start|>",  # ChatML (Qwen, ...)
    "<|begin_of_text|>",  # Llama 3
    "<|start_header_id|>",
    "<start_of_turn>",  # Gemma
    "<s>[INST]",  # Mistral / Llama 2
    "[INST]",
    "<|system|>",  # Zephyr / Phi
    "<|user|>",
    "<｜begin▁of▁sentence｜>",  # DeepSeek
    "<|start|>",  # harmony (gpt-oss)
)
_RENDERED_ASSISTANT_OPENINGS = (
    "<|im_start|>assistant\n",
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "<start_of_turn>model\n",
    "[/INST]",
    "<|assistant|>\n",
    "<｜Assistant｜>",
    "<|start|>assistant",
)

_RENDERED_ENDINGS = (*_RENDERED_ASSISTANT_OPENINGS, *(m.strip() for m in _RENDERED_ASSISTANT_OPENINGS))


def rendered_template_text(text: str) -> str | None:
    """The chat-template control text a prompt starts or ends with (see above), or None for ordinary text. Looked
    for in place (``startswith`` / ``endswith`` of the text with its leading whitespace and trailing spaces left out),
    never in a stripped copy of a long prompt: every input message read is asked."""
    start, end = 0, len(text)
    while start < end and text[start].isspace():
        start += 1
    while end and text[end - 1] == " ":
        end -= 1
    if text.startswith(_RENDERED_OPENINGS, start):
        return next(m for m in _RENDERED_OPENINGS if text.startswith(m, start))
    if text.endswith(_RENDERED_ENDINGS, 0, end):
        return next(m for m in _RENDERED_ASSISTANT_OPENINGS if text.endswith((m, m.strip()), 0, end))
    return None


CONTENT_HINT = "content is text, or a list of text / image parts (OpenAI, Anthropic or Gemini shapes)"


_NOT_JSON = object()
_JSON_OPENING = re.compile(r"\s*[\[{]")  # matched in place: no copy of a long text to look at its first character


def _json_text(content: str) -> Any:
    """The value of text that is a JSON object or array, else ``_NOT_JSON`` (parsed only when it opens like one)."""
    if _JSON_OPENING.match(content) is None:
        return _NOT_JSON
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        return _NOT_JSON


def json_call(content: Any) -> bool:
    """Text that is the JSON of a call (``{"name", "arguments"}``, or a list of them), as ShareGPT writes one."""
    # a call names its function under "name": text without that key is never parsed (a long JSON answer, say)
    if not isinstance(content, str) or '"name"' not in content:
        return False
    value = _json_text(content)
    calls = value if isinstance(value, list) else [value]
    return bool(calls) and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls)


# Pythonic calls: the reply is a Python list of calls by keyword, ``[get_weather(city="Paris"), now()]``, as Llama 3.2's
# pythonic tool format, ToolACE and the Berkeley Function-Calling Leaderboard's prompts write them. Looked at only
# when the text opens with ``[name(`` and closes with ``)]``; the arguments must be literals.
_PYTHONIC_HEAD = re.compile(r"\[\s*[A-Za-z_][\w.]*\(")


def pythonic_calls(content: Any) -> bool:
    """Text that is nothing but a Python list of calls whose arguments are keyword literals."""
    if not isinstance(content, str):
        return False
    text = content.strip()
    if not (text.endswith(")]") and _PYTHONIC_HEAD.match(text)):
        return False
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    if not isinstance(tree, ast.List) or not tree.elts:
        return False
    for call in tree.elts:
        if not isinstance(call, ast.Call) or call.args or not isinstance(call.func, ast.Name | ast.Attribute):
            return False
        for keyword in call.keywords:
            if keyword.arg is None:
                return False
            try:
                ast.literal_eval(keyword.value)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                return False
    return True


def bare_calls(value: Any) -> list[dict[str, Any]] | None:
    """A value that is nothing but calls: a non-empty list of ``{"name", "arguments"}`` objects (no other key, the
    arguments an object), or the JSON text of one (xLAM / APIGen function-calling rows: ``answers`` beside ``tools``);
    None for any other value. The calls are the normaliser's to read (``tool_calls`` of an assistant message)."""
    items = _json_text(value) if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        return None
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or set(item) - {"name", "arguments"}:
            return None
        if not isinstance(item.get("arguments", {}), dict):
            return None
    return items


# Markup a model writes a tool call in, in its own text, where the log keeps no structured call: Hermes and Qwen2.5 /
# Qwen3 (``<tool_call>{"name", "arguments"}</tool_call>``: NousResearch hermes-function-calling-v1, hermes-agent's
# ShareGPT trajectories), glaive-function-calling (``<functioncall> {...}``), Llama 3.1 (``<function=name>{...}``,
# ``<|python_tag|>``), Mistral (``[TOOL_CALLS]``) and pythonic lists of calls (:func:`pythonic_calls`).
_TEXT_CALL_MARKUP = re.compile(r"<(?:tool_call>|function(?:call>|=[\w.-]+>)|\|python_tag\|>)")
_MISTRAL_CALLS = "[TOOL_CALLS]"
# Every reply is looked at: the markup is searched for in one pass of a pattern that opens with one fixed character
# (the regex engine skips to each ``<``; an alternation opening with several would try each at every position, seven
# times slower) and a substring search, and text is parsed as JSON only when it names a ``"name"``.


def text_calls(content: Any) -> bool:
    """Whether a reply's text writes a tool call (the markup above, text that is the JSON of calls,
    :func:`json_call`, or a pythonic list of calls, :func:`pythonic_calls`): the reply is the call the model
    sampled, written as text, and a tool message after it may answer it. Only that: the reply is trained as the
    text it is either way, and a reply that merely quotes markup (in prose, in a code block) changes nothing unless
    an id-less tool message follows it, which then answers it
    (:meth:`~msgtrain.ingest.common.shapes.MessageNormaliser.normalise`)."""
    if isinstance(content, list):
        texts = [p.get("text") if isinstance(p, dict) else p for p in content]
        content = "".join(t for t in texts if isinstance(t, str))
    if not isinstance(content, str):
        return False
    return (
        _MISTRAL_CALLS in content
        or _TEXT_CALL_MARKUP.search(content) is not None
        or json_call(content)
        or pythonic_calls(content)
    )


def first_present(obj: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in obj:
            return obj[key]
    return None


def parse_json_field(value: Any, *, what: str, where: str, code: str = "bad_json_field") -> Any:
    """A field that may hold JSON as a string (ShareGPT ``tools`` and ``function_call`` values, LLaMA-Factory
    ``tool_call`` values, verifiers' tool calls, lm-evaluation-harness chat prompts): the readers' one
    JSON-in-string parser. Anything but a string is returned as is; blank text is None; text that does not parse is
    a :class:`ValidationError` with ``code``, never a guess."""
    if not isinstance(value, str):
        return value
    if not value.strip():
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise ValidationError(
            f"{what} is not valid JSON: {e.msg} at char {e.pos}",
            where=where,
            code=code,
            hint=f"{what} must be a JSON string",
        ) from e


def split_parallel_results(value: Any, names: list[str], where: str, what: str = "tool result") -> list[Any]:
    """One result logged for N parallel calls (ShareGPT's and LLaMA-Factory's one observation): the N results,
    when ``value`` is (or its text is) a JSON list of exactly N entries, in the calls' order; an entry
    ``{"name", "content"}`` whose name is its call's (``names``, in order) gives its ``content``. Anything else is
    ``ambiguous_results``: which call each part answers the log does not say, so nothing is guessed."""
    entries = value
    if isinstance(entries, str):
        try:
            entries = json.loads(entries)
        except (ValueError, RecursionError):
            entries = None
    n = len(names)
    if not isinstance(entries, list) or len(entries) != n:
        raise ValidationError(
            f"one {what} answers {n} parallel calls and is not a JSON list of {n} results",
            where=where,
            code="ambiguous_results",
            hint=f"write one {what} per call (with the call's id), or a JSON list with one entry per call",
        )
    return [
        entry["content"]
        if isinstance(entry, dict) and "content" in entry and entry.get("name", name) == name
        else entry
        for entry, name in zip(entries, names, strict=True)
    ]


def content_value(parts: list[Any], logged: Any) -> Any:
    """Content as OpenAI writes it: the logged string as is, one text part as a string, else the parts list."""
    if isinstance(logged, str):
        return logged
    if not parts:
        return None if logged is None else ""
    if len(parts) == 1 and parts[0].get("type") == "text":
        return parts[0]["text"]
    return parts


def sdk_call(item: dict[str, Any]) -> dict[str, Any]:
    """A call part of an agent SDK's own message type → ``{"id", "name", "arguments"}``: the Vercel AI SDK's
    ``{"type": "tool-call", "toolCallId", "toolName", "input" | "args"}``, Haystack's ``{"tool_call": {"id",
    "tool_name", "arguments"}}``."""
    if item.get("type") == "tool-call":
        return {
            "id": item.get("toolCallId"),
            "name": item.get("toolName"),
            "arguments": item.get("input", item.get("args")),
        }
    call = item["tool_call"]
    return {"id": call.get("id"), "name": call.get("tool_name"), "arguments": call.get("arguments")}


def sdk_result(item: Any) -> tuple[Any, str | None, Any] | None:
    """(call id, tool name, value) of a result part of an agent SDK's own message type, or None: the Vercel AI SDK's
    ``{"type": "tool-result", "toolCallId", "toolName", "output": {"type", "value"} | "result"}``, Haystack's
    ``{"tool_call_result": {"result", "origin": {the call}, "error"}}``."""
    if not isinstance(item, dict):
        return None
    if item.get("type") == "tool-result":
        output = item.get("output", item.get("result"))
        if isinstance(output, dict) and "value" in output and output.get("type") in _SDK_OUTPUT_TYPES:
            output = output["value"]  # AI SDK 5: a typed output (text, json, error-text, error-json, content)
        name = item.get("toolName")
        return item.get("toolCallId"), name if isinstance(name, str) else None, output
    answer = item.get("tool_call_result")
    if isinstance(answer, dict) and item.get("type") is None:
        origin: dict[str, Any] = answer["origin"] if isinstance(answer.get("origin"), dict) else {}
        name = origin.get("tool_name")
        return origin.get("id"), name if isinstance(name, str) else None, answer.get("result")
    return None


_SDK_OUTPUT_TYPES = frozenset({"text", "json", "error-text", "error-json", "content"})


# UI message parts no model sampled: cited sources and app data (AI SDK ``source-url``, ``source-document``,
# ``data-<name>``); opencode's step ends (with the step's usage), file snapshots and patches, retries.
UI_ONLY_PARTS = ("source-", "data-", "step-finish", "snapshot", "patch", "retry")


NO_OUTPUT = object()


def is_ui_steps(parts: Any) -> bool:
    """An AI SDK UI message's parts (``useChat`` messages): a step boundary or a tool part (``tool-<name>``,
    ``dynamic-tool``, AI SDK 4's ``tool-invocation``, LibreChat's ``tool_call``), which hold a call and its result in
    the assistant message."""
    return isinstance(parts, list) and any(
        isinstance(p, dict)
        and isinstance(p.get("type"), str)
        and (
            (
                (
                    p["type"] in ("step-start", "dynamic-tool", "tool-invocation", "tool")
                    or p["type"].startswith("tool-")
                )
                and p["type"] not in ("tool-call", "tool-result")
            )
            or _librechat_tool(p) is not None
        )
        for p in parts
    )


def _librechat_tool(item: dict[str, Any]) -> dict[str, Any] | None:
    """LibreChat's tool call part of an agent's message (``{"type": "tool_call", "tool_call": {id, name, args,
    output, progress}}``: the call and, once run, its output), or None."""
    call = item.get("tool_call")
    return call if item.get("type") == "tool_call" and isinstance(call, dict) and "name" in call else None


def ui_tool(item: dict[str, Any]) -> tuple[Any, Any, Any, Any] | None:
    """(call id, tool name, input, output or ``NO_OUTPUT``) of a UI tool part, or None for any other part. AI SDK
    5: ``tool-<name>`` / ``dynamic-tool`` with ``toolCallId``, ``input``, ``state`` and ``output`` (``errorText``
    when the call failed); AI SDK 4: ``tool-invocation`` holding ``toolInvocation`` (``args``, ``result``);
    LibreChat's ``tool_call`` part (``args``, ``output``)."""
    kind = str(item.get("type", ""))
    librechat = _librechat_tool(item)
    if librechat is not None:  # LibreChat: the output once the call ran
        output = librechat["output"] if librechat.get("output") is not None else NO_OUTPUT
        return librechat.get("id"), librechat.get("name"), librechat.get("args"), output
    if kind == "tool" and isinstance(item.get("state"), dict):  # opencode: callID, tool, state {status, input, ...}
        state = item["state"]
        output = state.get("output") if state.get("status") == "completed" else NO_OUTPUT
        if state.get("status") == "error":
            output = state.get("error")
        return item.get("callID"), item.get("tool"), state.get("input"), output
    if kind == "tool-invocation" and isinstance(item.get("toolInvocation"), dict):
        inv = item["toolInvocation"]
        output = inv["result"] if inv.get("state") == "result" and "result" in inv else NO_OUTPUT
        return inv.get("toolCallId"), inv.get("toolName"), inv.get("args"), output
    if kind == "dynamic-tool" or (kind.startswith("tool-") and kind not in ("tool-call", "tool-result")):
        name = item.get("toolName") if kind == "dynamic-tool" else kind.removeprefix("tool-")
        state = item.get("state")
        output = item.get("output") if state == "output-available" else NO_OUTPUT
        if state == "output-error":
            output = item.get("errorText")
        return item.get("toolCallId"), name, item.get("input"), output
    return None


def kernel_items(content: Any) -> Any:
    """Semantic Kernel's items (``ChatHistory.serialize``: ``{"content_type": "text" | "function_call" |
    "function_result", ...}``) as the parts this module reads: text parts, and calls and results in the agent-SDK
    shape (:func:`sdk_call`, :func:`sdk_result`); the call's ``name`` is the ``plugin-function`` name the kernel
    sends. Any other content is returned as it is."""
    if not (
        isinstance(content, list) and content and all(isinstance(i, dict) and "content_type" in i for i in content)
    ):
        return content
    out: list[Any] = []
    for item in content:
        kind = item["content_type"]
        if kind == "text":
            out.append({"type": "text", "text": item.get("text", "")})
        elif kind == "function_call":
            out.append(
                {
                    "type": "tool-call",
                    "toolCallId": item.get("id"),
                    "toolName": item.get("name"),
                    "input": item.get("arguments"),
                }
            )
        elif kind == "function_result":
            out.append(
                {
                    "type": "tool-result",
                    "toolCallId": item.get("id"),
                    "toolName": item.get("name"),
                    "output": item.get("result"),
                }
            )
        else:
            out.append({"type": f"semantic_kernel:{kind}"})  # not read: rejected by the part reader, named
    return out


def goose_call(item: dict[str, Any], j: int, where: str) -> dict[str, Any]:
    """goose's ``toolRequest`` block: ``{"id", "toolCall": {"status", "value": {"name", "arguments"}}}`` (older
    sessions: ``toolCall`` is the call itself) → a call with its id. A call goose could not parse (``status``
    ``error``) holds no call the model's text could be rebuilt from: an error, not a guess."""
    call = item.get("toolCall")
    value = call.get("value", call) if isinstance(call, dict) else None
    if not isinstance(value, dict) or (isinstance(call, dict) and call.get("status") == "error"):
        raise ValidationError(
            f"content[{j}] is a toolRequest without a parsed call",
            where=where,
            code="bad_tool_call",
            hint=CONTENT_HINT,
        )
    return {"id": item.get("id"), **value}


def goose_result(item: dict[str, Any], j: int, where: str) -> Any:
    """goose's ``toolResponse`` block: ``{"id", "toolResult": {"status", "value" | "error"}}``, the value a list of
    content blocks or ``{"content": [...]}`` (MCP ``CallToolResult``) → the result's content."""
    result = item.get("toolResult")
    if isinstance(result, list):
        return result
    if not isinstance(result, dict):
        raise ValidationError(f"content[{j}] is a toolResponse without a result", where=where, code="bad_content")
    if result.get("status") == "error":
        return str(result.get("error", ""))
    value = result.get("value")
    return value.get("content") if isinstance(value, dict) and "content" in value else value


def reasoning_text(item: dict[str, Any], j: int, where: str) -> str:
    """The text of a reasoning block, under its own type's key (``thinking`` in Anthropic's, ``reasoning`` in
    Letta's ``ReasoningContent``) or ``text`` (``value`` in LLaMA-Factory v1's); a list of text chunks (Mistral's
    ``ThinkChunk``) is joined."""
    kind = item.get("type")
    # LLaMA-Factory v1's typed parts hold the text under "value" ({"type": "reasoning", "value": ...})
    value = item.get(kind) if isinstance(kind, str) and kind in item else item.get("text", item.get("value", ""))
    if isinstance(value, list):
        texts = [c if isinstance(c, str) else c.get("text") if isinstance(c, dict) else None for c in value]
        if all(isinstance(t, str) for t in texts):
            return "".join(str(t) for t in texts)
    if isinstance(value, str):
        return value
    raise ValidationError(
        f"content[{j}] is a reasoning block without text", where=where, code="bad_content", hint=CONTENT_HINT
    )


# LLaMA-Factory v1's media part types (src/llamafactory/v1/core/rendering/format.py) → the OpenAI part type read alike
_LF_MEDIA = {
    "image_url": "image_url",
    "image": "image_url",
    "video_url": "video_url",
    "video": "video_url",
    "audio_url": "input_audio",
    "audio": "input_audio",
}


def content_part(item: dict[str, Any], j: int, where: str) -> dict[str, Any]:
    """A content item (OpenAI part, Anthropic block or Gemini part) that is text or media → an OpenAI part."""
    kind = item.get("type")
    if kind in ("text", "input_text", "output_text") or (kind is None and isinstance(item.get("text"), str)):
        # LLaMA-Factory v1's typed parts hold the text under "value" ({"type": "text", "value": ...}); the OpenAI
        # Assistants API's messages (and the apps that save them, Jan's threads) under text.value, beside annotations
        text = item.get("text", item.get("value", ""))
        if isinstance(text, dict) and isinstance(text.get("value"), str):
            text = text["value"]
        if isinstance(text, dict | list):
            raise ValidationError(
                f"content[{j}] is a text part whose text is not text (an object with keys "
                f"{', '.join(sorted(text)[:6]) if isinstance(text, dict) else 'none: a list'})",
                where=where,
                code="bad_content",
                hint=CONTENT_HINT,
            )
        return {"type": "text", "text": str(text)}
    lf_media = _LF_MEDIA.get(str(kind))
    if lf_media is not None and isinstance(item.get("value"), str) and not isinstance(item.get(str(kind)), dict | str):
        # LLaMA-Factory v1's typed media parts hold the path under "value" ({"type": "image_url", "value": "1.jpg"})
        return {"type": lf_media, lf_media: item["value"]}
    if kind in ("image_url", "input_audio", "video_url", "file", "input_image"):
        return item
    if kind == "imageUrl" and isinstance(item.get("imageUrl"), dict):  # camelCase writers (Continue)
        return {"type": "image_url", "image_url": item["imageUrl"]}
    if kind in ("image", "document") and isinstance(item.get("source"), dict):
        source = item["source"]
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type') or 'application/octet-stream'};base64,{source.get('data', '')}"
        else:
            url = str(source.get("url") or source.get("file_id") or "")
        if url:
            return {"type": "image_url", "image_url": {"url": url}}
    inline = item.get("inlineData", item.get("inline_data"))
    if isinstance(inline, dict) and isinstance(inline.get("data"), str):
        mime = inline.get("mimeType") or inline.get("mime_type") or "application/octet-stream"
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{inline['data']}"}}
    ref = item.get("fileData", item.get("file_data"))
    if isinstance(ref, dict) and isinstance(ref.get("fileUri", ref.get("file_uri")), str):
        return {"type": "image_url", "image_url": {"url": ref.get("fileUri", ref.get("file_uri"))}}
    shown = kind if kind is not None else ", ".join(sorted(item)[:6]) or "empty"
    raise ValidationError(
        f"content[{j}] is a part msgtrain cannot read ({shown})", where=where, code="bad_content", hint=CONTENT_HINT
    )


def block_text(content: Any, where: str) -> str:
    """The text of a content that must be text: a string, or text parts / blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(b, dict) and isinstance(b.get("text"), str) for b in content):
        return "".join(b["text"] for b in content)
    raise ValidationError("reasoning that is not text", where=where, code="bad_content", hint=CONTENT_HINT)


def haystack_reasoning(item: Any) -> Any:
    """Haystack's reasoning part (``ReasoningContent`` in ``ChatMessage.to_dict``, untyped like its text and call
    parts: ``{"reasoning": {"reasoning_text", "extra"}}``) as a ``thinking`` block of its text; anything else as it
    is."""
    if not isinstance(item, dict) or "type" in item or len(item) != 1:
        return item
    value = item.get("reasoning")
    if not isinstance(value, dict) or not isinstance(value.get("reasoning_text"), str):
        return item
    return {"type": "thinking", "thinking": value["reasoning_text"]}


def converse_block(item: Any) -> Any:
    """A Bedrock Converse content block (untyped: one key naming it) as the typed block it stands for: the one reading
    of Converse blocks, by the Converse reader (:mod:`msgtrain.ingest.formats.api.bedrock`) and the normaliser alike
    (Converse messages kept outside a request: Strands Agents' sessions, AgentCore memory). As the Converse API
    defines them: ``toolUse`` (``toolUseId``, ``name``, ``input``) → a ``tool_use`` block; ``toolResult``
    (``toolUseId``, ``content`` of ``ToolResultContentBlock`` s, ``status``) → a ``tool_result`` block of its content
    (:func:`converse_result_content`), ``is_error`` when its status is ``error``; ``reasoningContent``
    (``ReasoningContentBlock``: ``reasoningText`` with its ``signature``, or ``redactedContent``, reasoning the
    provider encrypted) → a ``thinking`` block, or a ``redacted_thinking`` block holding the encrypted bytes (base64)
    as its ``data``. Anything else (text, media, cache markers) as it is."""
    if not isinstance(item, dict) or "type" in item or len(item) != 1:
        return item
    ((key, value),) = item.items()
    if not isinstance(value, dict):
        return item
    if key == "toolUse":
        return {
            "type": "tool_use",
            "id": value.get("toolUseId"),
            "name": value.get("name"),
            "input": value.get("input"),
        }
    if key == "toolResult":
        return {
            "type": "tool_result",
            "tool_use_id": value.get("toolUseId"),
            "content": converse_result_content(value.get("content")),
            "is_error": value.get("status") == "error",
        }
    if key != "reasoningContent":
        return item
    text = value.get("reasoningText")
    if isinstance(text, dict):
        thought = text.get("text")
        thinking = thought if isinstance(thought, str) else ""  # a null text is no reasoning, not the text "None"
        return {"type": "thinking", "thinking": thinking, "signature": text.get("signature")}
    redacted = value.get("redactedContent")
    if redacted is not None:
        payload = base64.b64encode(redacted).decode("ascii") if isinstance(redacted, bytes) else str(redacted)
        return {"type": "redacted_thinking", "data": payload}
    return item


def converse_result_content(blocks: Any) -> Any:
    """A Converse tool result's content (``ToolResultContentBlock`` s): one ``json`` block is its JSON value; ``text``
    and ``json`` blocks are their texts (a JSON value's compact text) joined by newlines, as results of text blocks
    are; any other (media) is kept as the list of blocks."""
    if not isinstance(blocks, list):
        return blocks
    if len(blocks) == 1 and isinstance(blocks[0], dict) and set(blocks[0]) == {"json"}:
        return blocks[0]["json"]
    texts = [
        b["text"]
        if isinstance(b, dict) and isinstance(b.get("text"), str)
        else json.dumps(b["json"], ensure_ascii=False)
        if isinstance(b, dict) and set(b) == {"json"}
        else None
        for b in blocks
    ]
    return "\n".join(t for t in texts if t is not None) if all(t is not None for t in texts) else blocks


def block_result(content: Any) -> Any:
    """A tool result's content: text stays text, all-text blocks are joined, anything else is kept as JSON."""
    if content is None:
        return ""
    if isinstance(content, list) and all(_block_text_of(b) is not None for b in content):
        return "\n".join(str(_block_text_of(b)) for b in content)
    return content


def _block_text_of(block: Any) -> str | None:
    """The text of a text block: ``text``, or ``value`` in LLaMA-Factory v1's typed parts (``{"type": "text",
    "value"}``); None for any other block."""
    if not isinstance(block, dict):
        return None
    if isinstance(block.get("text"), str):
        return str(block["text"])
    if block.get("type") == "text" and isinstance(block.get("value"), str):
        return str(block["value"])
    return None
