"""The typed message model (seed 003: parts, option calls, option results).

Invariants:
- Every type is a frozen pydantic model; inputs are parsed with ``extra="forbid"`` so a typo in a log field is an
  error, not a silently dropped value.
- A :data:`Message` is exactly one of three kinds, discriminated by ``kind``:
  ``parts`` (text / media / reasoning), ``option_call`` (the policy chose one or more options, optionally with
  text or reasoning before the calls), ``option_result`` (the outcome of one invocation).
- One message is one provider-level chat message: an assistant reply that says something and calls two tools is a
  single ``option_call`` message carrying its preamble parts and two calls. That keeps ``MessageGraph`` indexable
  like the OpenAI message list it came from, and makes "one sampled message" the unit of training.
- ``policy`` says which policy created a message; ``"runtime"`` is reserved for executor-made results and errors.
  ``role_hint_for_llm`` is only a hint for adapters; the core never branches on it except to find what a policy
  sampled (assistant) and what is context.
- ``generation`` holds what the engine reported when it sampled the message (token ids, logprobs, model, sampling
  parameters, finish reason). It is *not* part of a message's identity: the same message re-sent by a client
  without engine facts is the same message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

RUNTIME_POLICY = "runtime"
DEFAULT_POLICY = "policy"

Role = Literal["system", "user", "assistant", "tool"]
Modality = Literal["image", "audio", "video", "document"]


# Fields a message's canonical JSON (:meth:`_MessageBase.identity`, what its node id hashes) leaves out: engine
# facts, metadata, its step and a result's sub-agent graph.
OUTSIDE_IDENTITY = ("generation", "metadata", "step_num", "subgraph")
_IDENTITY_EXCLUDED = set(OUTSIDE_IDENTITY)  # (pydantic takes a set; never changed)


# json's C encoder as ``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` builds it, built
# once: ``json.dumps`` builds an encoder on every call, which costs more than encoding a small message. Without
# circular-reference markers: it encodes what ``model_dump`` made (plain, acyclic data) and nothing else.
_CANONICAL_ENCODER: Callable[[Any, int], list[str]] | None = (
    c_make_encoder(None, json.JSONEncoder().default, encode_basestring, None, ":", ",", True, False, True)
    if c_make_encoder is not None
    else None
)


def canonical_text(data: Any) -> str:
    """``json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``, the same text, for what a
    message's ``model_dump`` makes (acyclic plain data): the text a node id hashes."""
    if _CANONICAL_ENCODER is None:
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "".join(_CANONICAL_ENCODER(data, 0))


class Frozen(BaseModel):
    """Base of every model type: immutable, strict about unknown fields."""

    # defer_build: the validators are built on first use, so commands that validate no message (--help,
    # formats) do not pay for them.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class TextPart(Frozen):
    kind: Literal["text"] = "text"
    text: str


class MediaPart(Frozen):
    """A media reference. URL-only: msgtrain never downloads media.

    ``url`` is a string rather than an HTTP URL type because real logs also carry ``data:`` URIs, provider file
    ids and local references; all are kept verbatim as references.
    """

    kind: Literal["media"] = "media"
    modality: Modality
    url: str
    mime: str | None = None
    prompt_hint: str | None = None
    id: str | None = None


class ReasoningPart(Frozen):
    """Model thinking. ``redacted``/``encrypted`` reasoning keeps its opaque payload in ``signature``."""

    kind: Literal["reasoning"] = "reasoning"
    text: str
    signature: str | None = None
    redacted: bool = False


Part = Annotated[TextPart | MediaPart | ReasoningPart, Field(discriminator="kind")]


class OptionCallPayload(Frozen):
    """One option (tool) invocation chosen by a policy.

    ``raw_arguments`` keeps the exact argument text the model emitted, when known, because re-serialising the
    parsed ``arguments`` can change whitespace or key order and thus tokens.
    """

    kind: Literal["option_call"] = "option_call"
    invocation_id: str
    option_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None


class OptionResultPayload(Frozen):
    kind: Literal["option_result"] = "option_result"
    invocation_id: str
    option_name: str
    result: Any = None
    is_error: bool = False
    error_type: str | None = None
    error_message: str | None = None
    retryable: bool | None = None


# The finish reasons engines and providers report for a generation stopped by a token limit: OpenAI / vLLM /
# Ollama ``length``, Anthropic / Bedrock / Gemini / Cohere ``max_tokens`` (``MAX_TOKENS``), OpenAI Responses
# ``incomplete_details.reason: max_output_tokens``, SGLang's / TGI's ``length`` / ``max_length``, and a context window
# filled while sampling (Anthropic ``model_context_window_exceeded``).
LIMIT_FINISH_REASONS = frozenset(
    {
        "length",
        "max_tokens",
        "max_output_tokens",
        "max_completion_tokens",
        "max_length",
        "model_context_window_exceeded",
    }
)


class Generation(Frozen):
    """What the engine reported for a sampled message. All optional.

    ``token_ids`` are the sampled ids (verbatim, the truth for training); ``logprobs`` align with them.
    ``prompt_token_ids`` are the ids of the context the engine actually saw, when it returned them.
    """

    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    model: str | None = None
    # Whose tokenizer the ids come from when it is not the trained policy's own (e.g. "gemini" for ids a
    # provider reported): such ids are kept for the record but never used as training tokens.
    tokenizer: str | None = None
    sampling: dict[str, Any] = Field(default_factory=dict)
    finish_reason: str | None = None
    created: int | None = None

    @property
    def stopped_at_limit(self) -> bool:
        """Whether the engine stopped this generation at a token limit (``finish_reason`` one of
        :data:`LIMIT_FINISH_REASONS`, any case): the model did not sample the end of its turn, so the end-of-turn
        token a template writes after the message is context for what follows, never a trained token."""
        return self.finish_reason is not None and self.finish_reason.strip().lower() in LIMIT_FINISH_REASONS

    @field_validator("finish_reason", mode="before")
    @classmethod
    def _finish_reason_as_text(cls, value: Any) -> str | None:
        """A finish reason is kept as text whatever a log wrote it as: a protocol-buffer enum number (Gemini's gRPC
        transport logs ``finishReason: 1``) is its number, as text; anything that is not a scalar is unknown."""
        if value is None or isinstance(value, str):
            return value
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    @model_validator(mode="after")
    def _logprobs_align(self) -> Generation:
        if self.token_ids is not None and self.logprobs is not None and len(self.logprobs) != len(self.token_ids):
            raise ValueError(
                f"generation has {len(self.token_ids)} token_ids but {len(self.logprobs)} logprobs; they must align"
            )
        return self


class _MessageBase(Frozen):
    policy: str = DEFAULT_POLICY
    role_hint_for_llm: Role | None = None
    step_num: int | None = None
    name: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    generation: Generation | None = None

    @property
    def role(self) -> Role:
        """The chat role adapters render this message with."""
        raise NotImplementedError

    def identity(self) -> dict[str, Any]:
        """The canonical content that defines this message: everything but :data:`OUTSIDE_IDENTITY` (engine facts,
        metadata, the step, a result's sub-agent graph). The serializer is called as ``model_dump`` calls it, without
        the wrapper's per-call argument handling (one call per message read)."""
        data: dict[str, Any] = self.__pydantic_serializer__.to_python(self, mode="json", exclude=_IDENTITY_EXCLUDED)
        return data

    def canonical_json(self) -> str:
        """``canonical_text(self.identity())``: the text a node id hashes (:func:`identity_text`)."""
        return identity_text(self)

    @property
    def text(self) -> str:
        """All text parts joined (empty for results)."""
        parts = getattr(self, "parts", ())
        return "\n".join(p.text for p in parts if isinstance(p, TextPart))

    @property
    def reasoning(self) -> str | None:
        parts = getattr(self, "parts", ())
        chunks = [p.text for p in parts if isinstance(p, ReasoningPart) and not p.redacted]
        return "\n".join(chunks) if chunks else None


class PartsMessage(_MessageBase):
    """Natural language and media: prompts, observations, answers."""

    kind: Literal["parts"] = "parts"
    parts: tuple[Part, ...] = ()

    @property
    def role(self) -> Role:
        return self.role_hint_for_llm or "user"


class OptionCallMessage(_MessageBase):
    """A policy's decision to invoke one or more options, with any text/reasoning it emitted first."""

    kind: Literal["option_call"] = "option_call"
    parts: tuple[Part, ...] = ()
    calls: tuple[OptionCallPayload, ...]

    @field_validator("calls")
    @classmethod
    def _at_least_one(cls, calls: tuple[OptionCallPayload, ...]) -> tuple[OptionCallPayload, ...]:
        if not calls:
            raise ValueError("an option_call message needs at least one call")
        ids = [c.invocation_id for c in calls]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate invocation ids in one message: {ids}")
        return calls

    @property
    def role(self) -> Role:
        return "assistant"


class OptionResultMessage(_MessageBase):
    """The outcome of one invocation. ``subgraph`` holds a sub-agent's own conversation, when there was one."""

    kind: Literal["option_result"] = "option_result"
    result: OptionResultPayload
    # Not in the identity (OUTSIDE_IDENTITY): the nested graph is provenance, not context the policy read; only the
    # result text reached it.
    subgraph: dict[str, Any] | None = None

    @property
    def role(self) -> Role:
        return "tool"


Message = Annotated[PartsMessage | OptionCallMessage | OptionResultMessage, Field(discriminator="kind")]
AnyMessage = PartsMessage | OptionCallMessage | OptionResultMessage

MESSAGE_ADAPTER: TypeAdapter[AnyMessage] = TypeAdapter(Message)


_Model = TypeVar("_Model", bound=BaseModel)
_NEW = object.__new__
_SET = object.__setattr__


def assembled(cls: type[_Model], fields: dict[str, Any]) -> _Model:
    """An instance of ``cls`` (a part or a message kind) from ``fields`` that already have their field's type: parts
    and payloads that are model instances, strings checked to be ``str``, a dict no one else holds; the fields left
    out take their defaults. The same instance validation would give (``==``, the same dump and identity), without the
    validator's pass over each field: for an adapter that builds a message out of pieces it made and checked
    (:func:`msgtrain.model.openai.from_openai_message`, once per message read), never for values read from outside.
    A kind with a validator of its own (an option call's calls) is checked by its caller first."""
    defaults, factories = _DEFAULTS[cls]
    values = defaults.copy()  # every field, in the model's order
    values.update(fields)
    for name, make in factories:
        if name not in fields:
            values[name] = make()
    obj = _NEW(cls)
    _SET(obj, "__dict__", values)
    _SET(obj, "__pydantic_fields_set__", set(fields))
    _SET(obj, "__pydantic_extra__", None)
    _SET(obj, "__pydantic_private__", None)
    return obj


def _defaults(cls: type[BaseModel]) -> tuple[dict[str, Any], list[tuple[str, Callable[[], Any]]]]:
    """The fields of ``cls`` in their order, with their defaults (None for a required one: given by the caller), and
    the fields whose default a factory makes afresh."""
    defaults: dict[str, Any] = {}
    factories: list[tuple[str, Callable[[], Any]]] = []
    for name, info in cls.model_fields.items():
        defaults[name] = None if info.is_required() or info.default_factory is not None else info.default
        if info.default_factory is not None:
            factories.append((name, info.default_factory))  # type: ignore[arg-type]
    return defaults, factories


_DEFAULTS: dict[type[BaseModel], tuple[dict[str, Any], list[tuple[str, Callable[[], Any]]]]] = {
    cls: _defaults(cls)
    for cls in (TextPart, ReasoningPart, MediaPart, PartsMessage, OptionCallMessage, OptionResultMessage)
}


def identity_text(message: _MessageBase) -> str:
    """``canonical_text(message.identity())``, the same text, written field by field for the fields whose JSON is
    known without pydantic's serializer: strings, booleans and None, the text, reasoning and media parts, a result that
    is text; a call's arguments and a result of any other value are serialized as :meth:`_MessageBase.identity` does
    (``tests/test_read_fast_paths.py`` checks the two agree over random messages and every message of the logs).
    Reading a log hashes every message once, and the serializer's generic walk was the larger part of that."""
    fields = message.__dict__
    kind = fields["kind"]
    parts = fields.get("parts", ())
    if type(message) not in _MESSAGE_KINDS or any(type(p) not in _PART_JSON for p in parts):
        return canonical_text(message.identity())  # a subclass may add fields: the general path
    name = f'"kind":"{kind}","name":{_string(fields["name"])}'
    policy = f'"policy":{_ENCODE(fields["policy"])}'
    role = f'"role_hint_for_llm":{_string(fields["role_hint_for_llm"])}'
    if kind == "option_result":
        return f'{{{name},{policy},"result":{_result_json(fields["result"])},{role}}}'
    texts = ",".join([_PART_JSON[type(p)](p.__dict__) for p in parts])
    if kind == "parts":
        return f'{{{name},"parts":[{texts}],{policy},{role}}}'
    calls = ",".join([_call_json(c) for c in fields["calls"]])
    return f'{{"calls":[{calls}],{name},"parts":[{texts}],{policy},{role}}}'


def _string(value: str | None) -> str:
    return "null" if value is None else _ENCODE(value)


def _call_json(call: OptionCallPayload) -> str:
    """A call's identity JSON: written here when its arguments are flat (each value a scalar, or a list of scalars:
    JSON writes those as pydantic's JSON mode gives them, the keys being ``str``), else by the serializer."""
    f = call.__dict__
    arguments = f["arguments"]
    text = _flat_json(arguments) if type(call) is OptionCallPayload else None
    if text is None:
        return canonical_text(call.__pydantic_serializer__.to_python(call, mode="json"))
    return (
        f'{{"arguments":{text},"invocation_id":{_ENCODE(f["invocation_id"])},"kind":"option_call",'
        f'"option_name":{_ENCODE(f["option_name"])},"raw_arguments":{_string(f["raw_arguments"])}}}'
    )


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _flat_json(arguments: dict[str, Any]) -> str | None:
    """The sorted JSON of ``arguments`` whose keys are ``str`` (the field's type) and whose values are scalars or lists
    of scalars, or None for anything else: a nested object's keys may be of any type, which pydantic writes otherwise;
    a float that is not finite (pydantic writes null), a lone surrogate in a key (pydantic replaces it)."""
    for value in arguments.values():
        kind = type(value)
        if kind not in _SCALARS and (kind is not list or any(type(v) not in _SCALARS for v in value)):
            return None
    try:
        text = "".join(_FLAT_ENCODER(arguments, 0)) if _FLAT_ENCODER is not None else None
    except ValueError:  # NaN or an infinity
        return None
    if text is None or not (text.isascii() or _is_unicode(text)):
        return None
    return text


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# the canonical encoder refusing NaN and infinities (allow_nan off), for :func:`_flat_json`
_FLAT_ENCODER: Callable[[Any, int], list[str]] | None = (
    c_make_encoder(None, json.JSONEncoder().default, encode_basestring, None, ":", ",", True, False, False)
    if c_make_encoder is not None
    else None
)


def _result_json(payload: OptionResultPayload) -> str:
    f = payload.__dict__
    if type(payload) is not OptionResultPayload or not isinstance(f["result"], str):
        return canonical_text(payload.__pydantic_serializer__.to_python(payload, mode="json"))
    retryable = f["retryable"]
    return (
        f'{{"error_message":{_string(f["error_message"])},"error_type":{_string(f["error_type"])},'
        f'"invocation_id":{_ENCODE(f["invocation_id"])},"is_error":{"true" if f["is_error"] else "false"},'
        f'"kind":"option_result","option_name":{_ENCODE(f["option_name"])},"result":{_ENCODE(f["result"])},'
        f'"retryable":{"null" if retryable is None else "true" if retryable else "false"}}}'
    )


# json's C string encoder, the one the canonical encoder writes strings with (ensure_ascii off)
_ENCODE: Callable[[str], str] = encode_basestring
_PART_JSON: dict[type, Callable[[dict[str, Any]], str]] = {
    TextPart: lambda f: f'{{"kind":"text","text":{_ENCODE(f["text"])}}}',
    ReasoningPart: lambda f: (
        f'{{"kind":"reasoning","redacted":{"true" if f["redacted"] else "false"},'
        f'"signature":{_string(f["signature"])},"text":{_ENCODE(f["text"])}}}'
    ),
    MediaPart: lambda f: (
        f'{{"id":{_string(f["id"])},"kind":"media","mime":{_string(f["mime"])},"modality":{_ENCODE(f["modality"])},'
        f'"prompt_hint":{_string(f["prompt_hint"])},"url":{_ENCODE(f["url"])}}}'
    ),
}


_MESSAGE_KINDS = frozenset({PartsMessage, OptionCallMessage, OptionResultMessage})


def identity_blind_spots(message: AnyMessage) -> list[Any]:
    """What of ``message`` its canonical JSON does not show as it is: the fields it leaves out
    (:data:`OUTSIDE_IDENTITY`), and the keys of its calls' arguments (``model_dump``'s JSON mode writes a key of a
    ``dict[str, ...]`` field with U+FFFD for a lone surrogate; strings elsewhere, and keys inside ``Any`` values, it
    keeps or refuses). Whatever judges a message's text by its canonical JSON looks at these on their own
    (``msgtrain.ingest.core.text_check``)."""
    fields = message.__dict__  # not getattr: a field the kind lacks would cost pydantic's __getattr__
    spots: list[Any] = [value for name in OUTSIDE_IDENTITY if (value := fields.get(name))]  # empty: no text
    if isinstance(message, OptionCallMessage):
        spots.extend(list(call.arguments) for call in message.calls)
    return spots


def parse_message(data: Any) -> AnyMessage:
    """Validate a JSON-like object as one of the three message kinds."""
    return MESSAGE_ADAPTER.validate_python(data)


def message_from_json(text: str | bytes) -> AnyMessage:
    return MESSAGE_ADAPTER.validate_json(text)


def message_to_json(message: AnyMessage) -> str:
    return message.model_dump_json(exclude_defaults=False)


def is_assistant(message: AnyMessage) -> bool:
    return message.role == "assistant"


def text_message(role: Role, text: str, *, policy: str = DEFAULT_POLICY, **kw: Any) -> PartsMessage:
    """Shorthand for a one-text-part message."""
    return PartsMessage(parts=(TextPart(text=text),), role_hint_for_llm=role, policy=policy, **kw)
