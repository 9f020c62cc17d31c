"""VCR-style YAML cassettes of recorded provider HTTP calls (VCR.py, pydantic-ai, crewAI, simonw/llm...).

A cassette is ``{"interactions": [{"request": {...}, "response": {...}}, ...]}``. Bodies are ``parsed_body``
(pydantic-ai, already JSON), VCR.py's ``body: {string: ...}`` or plain ``body``, or the ``content`` field of older
httpx recorders; a body may be YAML ``!!binary`` bytes, text, or Ruby VCR's ``base64_string``, and is decoded
from its ``Content-Encoding`` (gzip, deflate; br and zstd with the optional ``compression`` extra) before it is
parsed (:mod:`msgtrain.ingest.core.http_bodies`). Each interaction whose URI is a generation endpoint is one call:
the request is the context, the response the turn(s) sampled in exactly that context. All interactions of a
cassette build ONE graph (:mod:`msgtrain.ingest.common.call_log`), so calls whose histories share a prefix share nodes,
and history turns no recorded response produced are ``carried``.

Providers (the table ``_ENDPOINTS``, by URI path, then body shape): OpenAI ``/chat/completions`` (n > 1 choices
become sibling samples), OpenAI ``/responses`` (``previous_response_id`` continues the recorded response),
Anthropic ``/messages``, Google Gemini ``:generateContent`` / ``:streamGenerateContent`` (``contents[].parts``
with ``text``, ``thought``, ``functionCall``, ``functionResponse`` — camelCase or snake_case —,
``inlineData``/``fileData``; each ``candidates[]`` entry is a sample), AWS Bedrock ``/model/{id}/converse`` and
``converse-stream`` (:mod:`msgtrain.ingest.formats.api.bedrock`), and Bedrock ``/model/{id}/invoke`` /
``invoke-with-response-stream`` whose body is an Anthropic Messages body (read as Anthropic), and Ollama's
``/api/chat`` (:mod:`msgtrain.ingest.formats.api.ollama`).

Streamed responses (SSE text, a Gemini JSON array, AWS event-stream bytes) are reassembled into the body the same
call returns without streaming, by the provider SDK's accumulation rules (:mod:`msgtrain.ingest.common.streams`).

Safe readings:
- Gemini function calls without an ``id`` get ``gemini_call_<content index>_<part index>``: the position in
  the history, which is the same in every later request that repeats it, so repeated history maps to the same
  node. A ``functionResponse`` without an id answers the oldest unanswered call of the same name.
- Gemini ``logprobsResult`` token ids are ids of Gemini's own tokenizer. They are kept in the sampled
  message's ``metadata["engine_tokens"]`` and deliberately NOT in ``Generation.token_ids``: the linearizer
  takes logged ids verbatim, and splicing another model's ids into a sample rendered with the target
  tokenizer would corrupt it.
- Interactions that are not generation calls (model lists, token counting), non-2xx responses and streams that
  report an error are skipped with a reason (nothing was sampled); an InvokeModel body of another model family is
  rejected (``unsupported_body``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from msgtrain.errors import FormatError, MsgtrainError, ParseError, ValidationError
from msgtrain.ingest.common import streams
from msgtrain.ingest.common.call_log import Call, CallLogGraph
from msgtrain.ingest.common.chat_messages import chat_steps
from msgtrain.ingest.common.conversation_files import Step
from msgtrain.ingest.common.message_like import assistant_turns_in
from msgtrain.ingest.common.streams import StreamFailed
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.core import base
from msgtrain.ingest.core.http_bodies import decode_content, header, is_sse, recorded_bytes
from msgtrain.ingest.core.yaml_documents import load_yaml_bounded
from msgtrain.ingest.formats import Marks, ReadEvent, ReadGraph, ReadReject, ReadSkip, SourceRef, excerpt
from msgtrain.ingest.formats.api import anthropic, bedrock, cohere, ollama, openai_responses
from msgtrain.model.graph import Env
from msgtrain.model.message import (
    DEFAULT_POLICY,
    RUNTIME_POLICY,
    AnyMessage,
    Generation,
    MediaPart,
    Modality,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultMessage,
    OptionResultPayload,
    Part,
    PartsMessage,
    ReasoningPart,
    TextPart,
)
from msgtrain.model.openai import from_openai_message, generation_from_choice

_CHAT_SAMPLING = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "n", "seed", "stop")


class CassettesReader:
    name = "cassettes"
    description = (
        "VCR YAML cassettes of OpenAI chat / Responses, Anthropic, Gemini and Bedrock Converse / InvokeModel calls"
        " (streamed and compressed bodies too)"
    )
    example = "sample_logs/cassettes/weather_tools.yaml"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(names=("*.yaml", "*.yml"))

    def detect(self, path: Path, head: bytes) -> bool:
        if path.suffix.lower() not in (".yaml", ".yml"):
            return False
        return any(line.rstrip() == b"interactions:" for line in head.splitlines())

    def read(self, path: Path) -> Iterator[ReadEvent]:
        interactions = _load(path)
        log = CallLogGraph(path.name, metadata={"source_format": self.name})
        by_response: dict[str, str] = {}
        for i, interaction in enumerate(interactions):
            ref = SourceRef(str(path), f"interaction {i}")
            try:
                outcome = self._call(interaction, log, by_response)
            except MsgtrainError as e:
                turns = _generated_turns(interaction) if e.code == "unsupported_api" else 0
                yield ReadReject(ref, e.located(str(ref)), excerpt(interaction), turns=turns)
                continue
            if isinstance(outcome, str):
                yield ReadSkip(ref, outcome)
                continue
            call, response_id = outcome
            try:
                added = log.add(call)
            except MsgtrainError as e:
                yield ReadReject(ref, e.located(str(ref)), excerpt(interaction))
                continue
            if response_id is not None and added:
                by_response[response_id] = added[-1]
        if log.calls:
            yield ReadGraph(log.finish(), SourceRef(str(path), "file"), records=log.calls)

    def _call(self, interaction: Any, log: CallLogGraph, by_response: dict[str, str]) -> tuple[Call, str | None] | str:
        """The call of one interaction, or the reason to skip it."""
        if not isinstance(interaction, dict):
            raise ValidationError("interaction is not a mapping", code="bad_interaction")
        request, response = interaction.get("request") or {}, interaction.get("response") or {}
        if not request and not response and assistant_turns_in(interaction):
            raise ValidationError(  # another recorder's interaction (gRPC samples): generated turns, not read
                "an interaction without request and response, holding generated turns "
                f"(keys: {', '.join(map(str, interaction))})",
                where="interaction",
                code="unsupported_api",
                hint="read: HTTP request / response pairs of OpenAI, Anthropic, Gemini, Bedrock and Cohere calls",
            )
        uri = str(request.get("uri", ""))
        endpoint = endpoint_of(uri)
        if endpoint is None:
            if _unread_generation_call(request, response):
                raise ValidationError(
                    f"a generation call to an API this reader does not read ({uri.split('?', 1)[0]})",
                    where="request",
                    code="unsupported_api",
                    hint=(
                        "read: OpenAI chat / responses, Anthropic messages, Gemini generateContent, Bedrock, "
                        "Cohere chat"
                    ),
                )
            return "not_a_generation_call"
        status = response.get("status")
        code = status.get("code") if isinstance(status, dict) else status
        if isinstance(code, int) and not 200 <= code < 300:
            return "error_response"
        req_body = _json_body(request, "request")
        if not isinstance(req_body, dict):
            raise ValidationError("request body is not a JSON object", where="request", code="bad_request")
        try:
            resp_body = _response_body(response, endpoint)
        except StreamFailed:
            return "error_response"
        if not isinstance(resp_body, dict):
            raise ValidationError("response body is not a JSON object", where="response", code="bad_response")
        if isinstance(resp_body.get("error"), dict) and not (
            resp_body.get("choices") or resp_body.get("output") or resp_body.get("content")
        ):
            return "error_response"  # a 200 that carries only an error (some proxies)
        if endpoint.kind == "openai_chat":
            return openai_chat_call(req_body, resp_body), None
        if endpoint.kind == "anthropic":
            return anthropic.request_call(req_body, resp_body), None
        if endpoint.kind == "openai_responses":
            call = openai_responses.responses_call(req_body, resp_body, log.history, by_response)
            rid = resp_body.get("id")
            return call, rid if isinstance(rid, str) else None
        if endpoint.kind == "bedrock_converse":
            return bedrock.converse_call(req_body, resp_body, bedrock.model_id(uri)), None
        if endpoint.kind == "bedrock_invoke":
            if _is_embedding(resp_body):
                return "not_a_generation_call"  # InvokeModel also serves embedding models
            return invoke_call(req_body, resp_body, bedrock.model_id(uri)), None
        if endpoint.kind == "ollama_chat":
            return openai_chat_call(*ollama.as_openai(req_body, resp_body)), None
        if endpoint.kind == "cohere_v2":
            return cohere.v2_call(req_body, resp_body), None
        if endpoint.kind == "cohere_v1":
            return cohere.v1_call(req_body, resp_body), None
        return gemini_call(req_body, resp_body), None


def _generated_turns(interaction: Any) -> int:
    """The turns an unread generation call produced, for the books: the assistant messages of its response (the
    request's are history), at least one."""
    if not isinstance(interaction, dict):
        return 1
    answers = [v for k, v in interaction.items() if "response" in str(k).lower()]
    return max(1, sum(assistant_turns_in(v) for v in answers))


def _load(path: Path) -> list[Any]:
    # A YAML document is held whole while it is parsed: bounded as JSON documents are.
    base.check_whole_file(path.stat().st_size, str(path), "cassette", "split the recording into several cassettes")
    try:
        with io.TextIOWrapper(base.open_input(path), encoding="utf-8") as f:
            data = load_yaml_bounded(f, str(path))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ParseError(f"not valid YAML: {e}", where=str(path), code="bad_yaml") from e
    if not isinstance(data, dict) or not isinstance(data.get("interactions"), list):
        raise FormatError(
            "no interactions list",
            where=str(path),
            code="unknown_format",
            hint="a cassette is a YAML mapping with an 'interactions' list of request/response pairs",
        )
    return data["interactions"]


@dataclass(frozen=True)
class Endpoint:
    """A generation endpoint: the provider ``kind`` (a :mod:`msgtrain.ingest.common.streams` kind) and whether the
    URI itself says the response is streamed (otherwise the body says: an SSE text or a JSON array)."""

    kind: str
    streamed: bool = False


# The provider table: URI path suffix → endpoint, most specific first.
_ENDPOINTS: tuple[tuple[str, Endpoint], ...] = (
    (":streamGenerateContent", Endpoint("gemini", streamed=True)),
    (":generateContent", Endpoint("gemini")),
    ("/v2/chat", Endpoint("cohere_v2")),
    ("/v1/chat", Endpoint("cohere_v1")),
    ("/chat/completions", Endpoint("openai_chat")),
    ("/responses", Endpoint("openai_responses")),
    ("/messages", Endpoint("anthropic")),
    ("/converse-stream", Endpoint("bedrock_converse", streamed=True)),
    ("/converse", Endpoint("bedrock_converse")),
    ("/invoke-with-response-stream", Endpoint("bedrock_invoke", streamed=True)),
    ("/invoke", Endpoint("bedrock_invoke")),
    ("/api/chat", Endpoint("ollama_chat")),
)


def _uri_path(uri: str) -> str:
    """A request URI without its query and fragment: a fragment is never sent to the server (recorders and tests
    use it to tell calls apart, e.g. ``/v1/chat/completions#stream``), so it names no endpoint."""
    return uri.split("#", 1)[0].split("?", 1)[0]


def endpoint_of(uri: str) -> Endpoint | None:
    path = _uri_path(uri).rstrip("/")
    for suffix, endpoint in _ENDPOINTS:
        if path.endswith(suffix):
            if endpoint.kind.startswith("cohere") and "cohere" not in path.lower():
                continue  # /v1/chat and /v2/chat are Cohere's only on Cohere's hosts
            if endpoint.kind.startswith("bedrock") and bedrock.model_id(path) is None:
                return None  # /invoke or /converse outside a Bedrock /model/{id}/ path
            return endpoint
    return None


# Endpoints that take a message-like body but generate no turn (embeddings, token counting, moderation...).
_NOT_GENERATION = ("embed", "count", "token", "moderation", "models", "files", "batches")
# Request fields that carry a conversation or prompt to generate from (OpenAI, Anthropic, Gemini, Bedrock; Cohere v1
# "message" / "chat_history"; Hugging Face text-generation "inputs").
_PROMPT_FIELDS = ("messages", "contents", "prompt", "input", "inputText", "system", "message", "chat_history", "inputs")
# Response fields that hold generated text, whatever the API (a call whose request says nothing known still
# generated if its answer looks like this).
_GENERATED_FIELDS = ("choices", "candidates", "generations", "generated_text", "completion", "output_text")


def _unread_generation_call(request: dict[str, Any], response: dict[str, Any] | None = None) -> bool:
    """True for a call that generated a turn but hits an endpoint no branch here reads (Bedrock Converse, an API
    msgtrain has no reader for...): it must be rejected as unsupported, not skipped as if it held nothing
    trainable. Told by its request (a prompt-like field) or by its response (a generated-text field)."""
    path = _uri_path(str(request.get("uri", ""))).lower()
    tail = "/".join(path.replace(":", "/").rstrip("/").split("/")[-2:])
    if any(word in tail for word in _NOT_GENERATION) or request.get("method", "POST") == "GET":
        return False
    for part, fields in ((request, _PROMPT_FIELDS), (response or {}, _GENERATED_FIELDS)):
        try:
            body = _json_body(part, "body") if part else None
        except Exception:  # an undecodable body says nothing either way
            continue
        if isinstance(body, list) and body and isinstance(body[0], dict):
            body = body[0]  # text-generation servers answer a list of {"generated_text"}
        if isinstance(body, dict) and any(k in body for k in fields):
            return True
    return False


def _raw_body(part: dict[str, Any], where: str) -> Any:
    """A recorded body as stored: ``parsed_body`` (pydantic-ai, already JSON), else the bytes of VCR.py's
    ``body.string`` / ``body`` or of the ``content`` field older httpx recorders write, decoded from its
    ``Content-Encoding``."""
    if "parsed_body" in part:
        return part["parsed_body"]
    body = part.get("body", part.get("content"))
    if isinstance(body, dict) and "string" in body:
        body = body["string"]
    raw = recorded_bytes(body, where)
    if raw is None:
        return body
    return decode_content(raw, header(part.get("headers"), "content-encoding"), where)


def _json_body(part: dict[str, Any], where: str) -> Any:
    """A body parsed as JSON; text that is not JSON (an SSE stream...) is returned as text."""
    body = _raw_body(part, where)
    if not isinstance(body, bytes):
        return body
    text = body.decode("utf-8", "replace")
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        return text


def _response_body(response: dict[str, Any], endpoint: Endpoint) -> Any:
    """The response as the non-streamed body: streamed bodies reassembled
    (:mod:`msgtrain.ingest.common.streams`)."""
    if endpoint.kind.startswith("cohere"):
        return cohere.response_body(endpoint.kind, _json_body(response, "response"))
    if endpoint.kind == "ollama_chat":
        return ollama.response_body(_json_body(response, "response"))
    if endpoint.kind.startswith("bedrock") and endpoint.streamed:
        raw = _raw_body(response, "response")
        if isinstance(raw, bytes | list):
            return streams.assemble(endpoint.kind, raw, "response")
    body = _json_body(response, "response")
    if isinstance(body, dict) and not endpoint.streamed:
        return body
    if isinstance(body, str) and not endpoint.streamed and not is_sse(body):
        return body  # not JSON and not a stream: the caller rejects it as a bad response
    if isinstance(body, str | list | dict):
        return streams.assemble(endpoint.kind, body if not isinstance(body, dict) else [body], "response")
    return body


def _is_embedding(response: dict[str, Any]) -> bool:
    """An embedding model's answer (Titan ``embedding``, Cohere ``embeddings``): vectors, nothing sampled."""
    return ("embedding" in response or "embeddings" in response) and not (
        response.get("content") or response.get("choices") or response.get("output")
    )


def invoke_call(request: dict[str, Any], response: dict[str, Any], model: str | None) -> Call:
    """Bedrock ``InvokeModel``: the body is the model provider's own; Amazon Nova's (``schemaVersion``
    ``messages-v1``, answered with ``output.message``) is Converse's shape and read as Converse; Anthropic bodies
    are read as Messages."""
    if request.get("schemaVersion") == "messages-v1" or isinstance(response.get("output"), dict):
        return bedrock.converse_call(request, response, model)
    if "anthropic_version" in request or isinstance(request.get("messages"), list):
        return anthropic.request_call(request, response)
    raise ValidationError(
        "InvokeModel body is not an Anthropic Messages body",
        where="request",
        code="unsupported_body",
        hint="InvokeModel bodies are read when they are Anthropic Messages requests; use Converse for other models",
    )


# --------------------------------------------------------------------------- OpenAI chat completions


def openai_chat_call(request: dict[str, Any], response: dict[str, Any]) -> Call:
    messages = request.get("messages")
    if not isinstance(messages, list):
        raise ValidationError("request has no messages list", where="request", code="bad_request")
    context = chat_steps(messages)
    names = {
        c.invocation_id: c.option_name
        for s in context
        if isinstance(s.message, OptionCallMessage)
        for c in s.message.calls
    }
    sampling = {k: request[k] for k in _CHAT_SAMPLING if request.get(k) is not None}
    samples: list[Step] = []
    choices = response.get("choices")
    if not isinstance(choices, list):
        raise ValidationError("response has no choices", where="response", code="bad_response")
    for choice in sorted((c for c in choices if isinstance(c, dict)), key=lambda c: c.get("index", 0)):
        data = choice.get("message")
        if not isinstance(data, dict):
            continue
        data = {**data, "role": data.get("role") or "assistant"}
        if data.get("content") in (None, "") and isinstance(data.get("refusal"), str):
            data["content"] = data["refusal"]
        msg = from_openai_message(data, call_names=names, policy=DEFAULT_POLICY)
        if isinstance(msg, OptionResultMessage) or msg.role != "assistant":
            raise ValidationError(
                "a choice's message is not an assistant message", where="response", code="bad_response"
            )
        if isinstance(msg, PartsMessage) and not msg.parts:
            continue  # nothing was sampled (e.g. a filtered choice)
        gen = generation_from_choice(choice, response) or Generation()
        if isinstance(response.get("usage"), dict):  # the prompt size the API counted, for the usage check
            msg = msg.model_copy(update={"metadata": {**msg.metadata, "usage": response["usage"]}})
        samples.append(Step(msg, generation=gen.model_copy(update={"sampling": sampling})))
    kwargs = request.get("chat_template_kwargs")
    env = Env.make(
        openai_tools(request.get("tools") or request.get("functions"), where="request.tools"),
        kwargs if isinstance(kwargs, dict) else None,
    )
    return Call(context, samples, env)


# --------------------------------------------------------------------------- Gemini generateContent


class GeminiConverter:
    """``contents[]`` → messages. Pairs ``functionResponse`` parts with earlier ``functionCall`` parts."""

    def __init__(self) -> None:
        self.open_calls: list[tuple[str, str]] = []  # (invocation id, name) not answered yet, oldest first
        self.names: dict[str, str] = {}

    def content(self, content: Any, index: int) -> list[AnyMessage]:
        where = f"contents[{index}]"
        if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
            raise ValidationError("content has no parts list", where=where, code="bad_content")
        role = content.get("role", "user")
        if role == "model":
            return [self._model(content["parts"], index, where)]
        if role not in ("user", "function", "tool"):
            raise ValidationError(
                f"unknown role {role!r}",
                where=where,
                code="unknown_role",
                hint="Gemini content roles are 'user' and 'model'",
            )
        return self._user(content["parts"], where)

    def _model(self, parts: list[Any], index: int, where: str) -> AnyMessage:
        out: list[Part] = []
        calls: list[OptionCallPayload] = []
        for k, part in enumerate(parts):
            if not isinstance(part, dict):
                raise ValidationError(f"parts[{k}] is not an object", where=where, code="bad_content")
            call = part.get("functionCall", part.get("function_call"))
            if isinstance(call, dict):
                name = call.get("name")
                if not name:
                    raise ValidationError(f"parts[{k}] functionCall has no name", where=where, code="bad_tool_call")
                call_id = str(call.get("id") or f"gemini_call_{index}_{k}")
                args = call.get("args")
                calls.append(
                    OptionCallPayload(
                        invocation_id=call_id, option_name=str(name), arguments=args if isinstance(args, dict) else {}
                    )
                )
                self.open_calls.append((call_id, str(name)))
                self.names[call_id] = str(name)
            elif part.get("thought") is True:
                out.append(ReasoningPart(text=str(part.get("text", "")), signature=part.get("thoughtSignature")))
            else:
                out.append(_gemini_part(part, k, where))
        if calls:
            return OptionCallMessage(
                parts=tuple(out), calls=tuple(calls), policy=DEFAULT_POLICY, role_hint_for_llm="assistant"
            )
        return PartsMessage(parts=tuple(out), role_hint_for_llm="assistant", policy=DEFAULT_POLICY)

    def _user(self, parts: list[Any], where: str) -> list[AnyMessage]:
        out: list[AnyMessage] = []
        pending: list[Part] = []
        for k, part in enumerate(parts):
            if not isinstance(part, dict):
                raise ValidationError(f"parts[{k}] is not an object", where=where, code="bad_content")
            answer = part.get("functionResponse", part.get("function_response"))
            if not isinstance(answer, dict):
                pending.append(_gemini_part(part, k, where))
                continue
            if pending:
                out.append(PartsMessage(parts=tuple(pending), role_hint_for_llm="user", policy="user"))
                pending = []
            call_id = self._answer(answer, k, where)
            out.append(
                OptionResultMessage(
                    result=OptionResultPayload(
                        invocation_id=call_id, option_name=self.names[call_id], result=answer.get("response")
                    ),
                    policy=RUNTIME_POLICY,
                    role_hint_for_llm="tool",
                )
            )
        if pending or not out:
            out.append(PartsMessage(parts=tuple(pending), role_hint_for_llm="user", policy="user"))
        return out

    def _answer(self, answer: dict[str, Any], k: int, where: str) -> str:
        """The call a functionResponse answers: its own id, else the oldest open call of that name."""
        wanted = answer.get("id")
        name = answer.get("name")
        for pos, (call_id, call_name) in enumerate(self.open_calls):
            if (wanted and call_id == wanted) or (not wanted and call_name == name):
                del self.open_calls[pos]
                return call_id
        raise ValidationError(
            f"parts[{k}] functionResponse {name!r} answers no earlier functionCall",
            where=where,
            code="unpaired_result",
            hint="each functionResponse must follow a model functionCall of that name",
        )


def _gemini_part(part: dict[str, Any], k: int, where: str) -> Part:
    if "text" in part:
        return TextPart(text=str(part["text"]))
    inline = part.get("inlineData") or part.get("inline_data")
    if isinstance(inline, dict) and isinstance(inline.get("data"), str):
        mime = str(inline.get("mimeType") or inline.get("mime_type") or "application/octet-stream")
        return MediaPart(modality=_modality(mime), url=f"data:{mime};base64,{inline['data']}", mime=mime)
    ref = part.get("fileData") or part.get("file_data")
    if isinstance(ref, dict) and isinstance(ref.get("fileUri") or ref.get("file_uri"), str):
        ref_mime = ref.get("mimeType") or ref.get("mime_type")
        url = str(ref.get("fileUri") or ref.get("file_uri"))
        return MediaPart(modality=_modality(str(ref_mime or "")), url=url, mime=ref_mime)
    kinds = ", ".join(sorted(k2 for k2 in part if k2 != "thoughtSignature")) or "empty"
    raise ValidationError(
        f"parts[{k}] is not supported ({kinds})",
        where=where,
        code="unsupported_part",
        hint="supported parts: text, thought, functionCall, functionResponse, inlineData, fileData",
    )


def _modality(mime: str) -> Modality:
    top = mime.split("/", 1)[0]
    if top == "image":
        return "image"
    if top == "audio":
        return "audio"
    if top == "video":
        return "video"
    return "document"


def gemini_call(request: dict[str, Any], response: dict[str, Any]) -> Call:
    contents = request.get("contents")
    if not isinstance(contents, list):
        raise ValidationError("request has no contents list", where="request", code="bad_request")
    conv = GeminiConverter()
    context: list[Step] = []
    system = request.get("systemInstruction", request.get("system_instruction"))
    if isinstance(system, dict) and isinstance(system.get("parts"), list):
        parts = tuple(_gemini_part(p, k, "systemInstruction") for k, p in enumerate(system["parts"]))
        context.append(Step(PartsMessage(parts=parts, role_hint_for_llm="system", policy="system")))
    for i, content in enumerate(contents):
        context.extend(Step(m, index=i) for m in conv.content(content, i))
    config = request.get("generationConfig", request.get("generation_config"))
    sampling = dict(config) if isinstance(config, dict) else {}
    samples: list[Step] = []
    for candidate in response.get("candidates") or []:
        content = candidate.get("content") if isinstance(candidate, dict) else None
        if not isinstance(content, dict) or not content.get("parts"):
            continue  # blocked or empty candidate: nothing was sampled
        msg = conv.content({**content, "role": "model"}, len(contents))[0]
        engine = _engine_tokens(candidate)
        if engine is not None:
            msg = msg.model_copy(update={"metadata": {**msg.metadata, "engine_tokens": engine}})
        generation = Generation(
            model=response.get("modelVersion"), finish_reason=candidate.get("finishReason"), sampling=sampling
        )
        samples.append(Step(msg, generation=generation))
    env = Env.make(openai_tools(request.get("tools"), where="request.tools"))
    return Call(context, samples, env)


def _engine_tokens(candidate: dict[str, Any]) -> dict[str, Any] | None:
    chosen = (candidate.get("logprobsResult") or {}).get("chosenCandidates")
    if not isinstance(chosen, list) or not chosen:
        return None
    if not all(isinstance(c, dict) and "tokenId" in c for c in chosen):
        return None
    return {
        "tokenizer": "gemini",
        "token_ids": [int(c["tokenId"]) for c in chosen],
        "logprobs": [float(c.get("logProbability", 0.0)) for c in chosen],
    }


READER = CassettesReader()
