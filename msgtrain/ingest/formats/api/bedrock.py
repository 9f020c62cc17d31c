"""AWS Bedrock Converse request/response bodies (``/model/{id}/converse`` and ``converse-stream``).

A Converse request is ``{messages, system, toolConfig, inferenceConfig, ...}``; the response is ``{output:
{message}, stopReason, usage}`` (a ``converse-stream`` body is first reassembled by
:mod:`msgtrain.ingest.common.streams`). The request is the context, the response's message the one turn sampled in
exactly that context; :func:`converse_call` builds the :class:`Call` the call-log readers add to a graph.

Content blocks (read by :func:`~msgtrain.ingest.common.content_parts.converse_block`, the reading the structural
reader's normaliser shares): ``text`` → text; ``toolUse`` (``toolUseId``, ``name``, ``input``) → a call; ``toolResult``
(``toolUseId``, ``content`` of ``text`` / ``json`` / media blocks, ``status``) → a result paired by id (one ``json``
block its value, ``text`` and ``json`` blocks their texts joined by newlines, media kept as JSON; ``status: error`` an
error result); ``reasoningContent`` → reasoning (``reasoningText.text`` with its ``signature``; ``redactedContent`` →
redacted reasoning, its bytes as the signature, never trained); ``image`` / ``document`` / ``video`` with inline
``bytes`` → ``data:`` URIs, with an ``s3Location`` → that URI. ``cachePoint`` blocks are cache markers, not content:
skipped. ``system`` is a list of ``text`` blocks (``cachePoint`` / ``guardContent`` markers skipped);
``toolConfig.tools[].toolSpec`` (``name``, ``description``, ``inputSchema.json``) is the tool environment.
Other blocks reject the call (``unsupported_block``) rather than being dropped.

Safe readings: the model is the URI's model id (the body does not name it); ``inferenceConfig`` and
``additionalModelRequestFields`` are the sampling settings.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import unquote

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.call_log import Call
from msgtrain.ingest.common.content_parts import converse_block
from msgtrain.ingest.common.conversation_files import Step, paired_result, user_turn
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.model.graph import Env
from msgtrain.model.message import (
    DEFAULT_POLICY,
    AnyMessage,
    Generation,
    MediaPart,
    Modality,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultMessage,
    Part,
    PartsMessage,
    ReasoningPart,
    TextPart,
)

_MARKERS = frozenset({"cachePoint", "guardContent"})
_SUPPORTED = "text, toolUse, toolResult, reasoningContent, image, document, video, cachePoint"
_MEDIA: dict[str, Modality] = {"image": "image", "document": "document", "video": "video"}


def model_id(uri: str) -> str | None:
    """The model id of a Bedrock runtime URI ``…/model/{id}/converse`` (URL-decoded: ARNs arrive escaped)."""
    path = uri.split("?", 1)[0].rstrip("/")
    head, sep, _ = path.rpartition("/")
    if not sep or "/model/" not in head:
        return None
    return unquote(head.rsplit("/model/", 1)[1]) or None


class ConverseConverter:
    """Converse messages → msgtrain messages; remembers call names so results can be named."""

    def __init__(self, policy: str = DEFAULT_POLICY):
        self.policy = policy
        self.call_names: dict[str, str] = {}

    def system(self, system: Any) -> PartsMessage | None:
        if not system:
            return None
        if not isinstance(system, list):
            raise ValidationError("system must be a list of blocks", where="system", code="bad_request")
        parts: list[Part] = []
        for j, block in enumerate(system):
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(TextPart(text=block["text"]))
            elif not (isinstance(block, dict) and set(block) & _MARKERS):
                raise ValidationError(
                    f"system[{j}] is not a text block",
                    where="system",
                    code="unsupported_block",
                    hint="Converse system prompts are text blocks (cachePoint and guardContent markers are skipped)",
                )
        return PartsMessage(parts=tuple(parts), role_hint_for_llm="system", policy="system") if parts else None

    def message(self, data: Any, index: int) -> list[AnyMessage]:
        where = f"messages[{index}]"
        if not isinstance(data, dict) or not isinstance(data.get("content"), list):
            raise ValidationError("message has no content list", where=where, code="bad_message")
        role = data.get("role")
        blocks = data["content"]
        if role == "assistant":
            return [self._assistant(blocks, where)]
        if role == "user":
            return self._user(blocks, where)
        raise ValidationError(
            f"unknown role {role!r}", where=where, code="unknown_role", hint="Converse roles are 'user' and 'assistant'"
        )

    def _assistant(self, blocks: list[Any], where: str) -> AnyMessage:
        parts: list[Part] = []
        calls: list[OptionCallPayload] = []
        for j, block in enumerate(blocks):
            block = converse_block(_block(block, j, where))
            kind = block.get("type")
            if kind == "tool_use":
                call_id, name = block.get("id"), block.get("name")
                if not call_id or not name:
                    raise ValidationError(
                        f"content[{j}] toolUse needs a toolUseId and a name", where=where, code="bad_tool_call"
                    )
                raw = block.get("input")
                arguments = raw if isinstance(raw, dict) else {"value": raw}
                calls.append(OptionCallPayload(invocation_id=str(call_id), option_name=str(name), arguments=arguments))
                self.call_names[str(call_id)] = str(name)
            elif kind == "tool_result":
                raise ValidationError(
                    f"content[{j}] is a server-side tool result inside an assistant turn",
                    where=where,
                    code="unsupported_block",
                    hint="server tools (systemTool, e.g. a code interpreter) run inside the model's turn; not read",
                )
            elif not set(block) & _MARKERS:
                parts.append(_part(block, j, where))
        if calls:
            return OptionCallMessage(
                parts=tuple(parts), calls=tuple(calls), policy=self.policy, role_hint_for_llm="assistant"
            )
        return PartsMessage(parts=tuple(parts), role_hint_for_llm="assistant", policy=self.policy)

    def _user(self, blocks: list[Any], where: str) -> list[AnyMessage]:
        pieces: list[Part | OptionResultMessage] = []
        for j, block in enumerate(blocks):
            block = converse_block(_block(block, j, where))
            if block.get("type") == "tool_result":
                pieces.append(self._result(block, j, where))
            elif not set(block) & _MARKERS:
                pieces.append(_part(block, j, where))
        return user_turn(pieces)

    def _result(self, result: dict[str, Any], j: int, where: str) -> OptionResultMessage:
        value = result["content"] if result["content"] is not None else ""
        call_id, failed = result.get("tool_use_id"), result["is_error"]
        return paired_result(self.call_names, call_id, value, failed, block=f"content[{j}] toolResult", where=where)


def _block(block: Any, j: int, where: str) -> dict[str, Any]:
    if not isinstance(block, dict):
        raise ValidationError(f"content[{j}] is not an object", where=where, code="bad_content")
    return block


def _part(block: dict[str, Any], j: int, where: str) -> Part:
    """A text, reasoning or media block (reasoning as :func:`converse_block` types it)."""
    if isinstance(block.get("text"), str):
        return TextPart(text=block["text"])
    if block.get("type") == "thinking":
        return ReasoningPart(text=block["thinking"], signature=block.get("signature"))
    if block.get("type") == "redacted_thinking":
        return ReasoningPart(text="", signature=block["data"], redacted=True)
    for key, modality in _MEDIA.items():
        media = block.get(key)
        if isinstance(media, dict):
            return _media(media, modality, key, j, where)
    kinds = ", ".join(sorted(block)) or "empty"
    raise ValidationError(
        f"content[{j}] is not supported ({kinds})",
        where=where,
        code="unsupported_block",
        hint=f"supported Converse blocks: {_SUPPORTED}",
    )


def _media(media: dict[str, Any], modality: Modality, key: str, j: int, where: str) -> MediaPart:
    fmt = str(media.get("format") or "")
    mime = f"{'application' if key == 'document' else key}/{fmt}" if fmt else None
    source = media.get("source")
    if isinstance(source, dict):
        data = source.get("bytes")
        if isinstance(data, bytes):
            data = base64.b64encode(data).decode("ascii")
        if isinstance(data, str):
            return MediaPart(
                modality=modality,
                url=f"data:{mime or 'application/octet-stream'};base64,{data}",
                mime=mime,
                prompt_hint=media.get("name") if isinstance(media.get("name"), str) else None,
            )
        location = source.get("s3Location")
        if isinstance(location, dict) and isinstance(location.get("uri"), str):
            return MediaPart(modality=modality, url=location["uri"], mime=mime)
    raise ValidationError(
        f"content[{j}] {key} block has no bytes or s3Location source",
        where=where,
        code="bad_content",
    )


def converse_tools(tool_config: Any) -> list[dict[str, Any]]:
    """``toolConfig.tools[].toolSpec`` as OpenAI-style function tools (the environment's schema)."""
    if not isinstance(tool_config, dict):
        return []
    tools = []
    for i, tool in enumerate(tool_config.get("tools") or []):
        spec = tool.get("toolSpec") if isinstance(tool, dict) else None
        if not isinstance(spec, dict):
            continue  # cachePoint / systemTool entries declare no function
        schema = spec.get("inputSchema")
        params = schema.get("json") if isinstance(schema, dict) else None
        if not isinstance(spec.get("name"), str):
            raise ValidationError(f"toolConfig.tools[{i}] has no name", where="request", code="bad_request")
        function: dict[str, Any] = {"name": spec["name"], "parameters": params if isinstance(params, dict) else {}}
        if isinstance(spec.get("description"), str):
            function["description"] = spec["description"]
        tools.append({"type": "function", "function": function})
    return tools


def converse_call(request: Any, response: Any, model: str | None = None) -> Call:
    """One Converse request/response as a :class:`Call`."""
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        raise ValidationError(
            "request has no messages list",
            where="request",
            code="bad_request",
            hint="a Converse request body carries 'messages'",
        )
    if not isinstance(response, dict):
        raise ValidationError("response is not a JSON object", where="response", code="bad_response")
    conv = ConverseConverter()
    context: list[Step] = []
    system = conv.system(request.get("system"))
    if system is not None:
        context.append(Step(system))
    for i, data in enumerate(request["messages"]):
        context.extend(Step(m, index=i) for m in conv.message(data, i))
    samples: list[Step] = []
    output = response.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    if isinstance(message, dict) and message.get("content"):
        if message.get("role", "assistant") != "assistant":
            raise ValidationError("response message is not an assistant message", where="response", code="bad_response")
        (sampled,) = conv.message({**message, "role": "assistant"}, len(request["messages"]))
        sampling: dict[str, Any] = {}
        for key in ("inferenceConfig", "additionalModelRequestFields"):
            if isinstance(request.get(key), dict):
                sampling.update(request[key])
        samples.append(
            Step(
                sampled, generation=Generation(model=model, finish_reason=response.get("stopReason"), sampling=sampling)
            )
        )
    tools = openai_tools(converse_tools(request.get("toolConfig")), where="request.toolConfig")
    return Call(context, samples, Env.make(tools))
