"""The typed message model (seed 003): JSON round-trips, immutability, strict parsing, builders, OpenAI adapter.

Round-trips are property-based: hypothesis draws every variant of the discriminated unions (parts, the three
message kinds) with arbitrary JSON payloads, and each must come back equal from both JSON forms.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msgtrain.errors import ValidationError
from msgtrain.model import (
    Generation,
    MediaPart,
    MessageBuilder,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultBuilder,
    OptionResultMessage,
    OptionResultPayload,
    PartsMessage,
    ReasoningPart,
    TextPart,
    from_openai_messages,
    parse_message,
    to_openai_messages,
)
from msgtrain.model.message import (
    MESSAGE_ADAPTER,
    RUNTIME_POLICY,
    AnyMessage,
    Part,
    message_from_json,
    message_to_json,
    text_message,
)
from msgtrain.model.openai import from_openai_message, to_openai_message

PART_ADAPTER: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Part)

# ----------------------------------------------------------------------------------------------- strategies

short_text = st.text(max_size=12)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | short_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short_text, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(short_text, json_values, max_size=3)
optional_text = st.none() | short_text
roles = st.sampled_from(["system", "user", "assistant", "tool"])

text_parts = st.builds(TextPart, text=short_text)
media_parts = st.builds(
    MediaPart,
    modality=st.sampled_from(["image", "audio", "video", "document"]),
    url=st.sampled_from(["https://example.com/a.png", "data:image/png;base64,iVBORw0K", "file-abc123"]),
    mime=optional_text,
    prompt_hint=optional_text,
    id=optional_text,
)
reasoning_parts = st.builds(ReasoningPart, text=short_text, signature=optional_text, redacted=st.booleans())
parts = text_parts | media_parts | reasoning_parts
part_tuples = st.lists(parts, max_size=4).map(tuple)

call_payloads = st.builds(
    OptionCallPayload,
    invocation_id=st.text(min_size=1, max_size=8),
    option_name=st.text(min_size=1, max_size=8),
    arguments=json_objects,
    raw_arguments=optional_text,
)
result_payloads = st.builds(
    OptionResultPayload,
    invocation_id=st.text(min_size=1, max_size=8),
    option_name=st.text(min_size=1, max_size=8),
    result=json_values,
    is_error=st.booleans(),
    error_type=optional_text,
    error_message=optional_text,
    retryable=st.none() | st.booleans(),
)


@st.composite
def generations(draw: st.DrawFn) -> Generation:
    n = draw(st.integers(min_value=0, max_value=6))
    token_ids = draw(st.none() | st.lists(st.integers(0, 200_000), min_size=n, max_size=n).map(tuple))
    logprobs = None
    if token_ids is not None:
        logprobs = draw(st.none() | st.lists(st.floats(-50, 0), min_size=n, max_size=n).map(tuple))
    return Generation(
        token_ids=token_ids,
        logprobs=logprobs,
        prompt_token_ids=draw(st.none() | st.lists(st.integers(0, 200_000), max_size=6).map(tuple)),
        model=draw(optional_text),
        sampling=draw(st.dictionaries(st.sampled_from(["temperature", "top_p", "seed"]), json_scalars)),
        finish_reason=draw(st.none() | st.sampled_from(["stop", "length", "tool_calls"])),
        created=draw(st.none() | st.integers(0, 2**40)),
    )


common_fields = {
    "policy": short_text,
    "role_hint_for_llm": st.none() | roles,
    "step_num": st.none() | st.integers(-5, 10_000),
    "name": optional_text,
    "metadata": json_objects,
    "generation": st.none() | generations(),
}
parts_messages = st.builds(PartsMessage, parts=part_tuples, **common_fields)
option_call_messages = st.builds(
    OptionCallMessage,
    parts=part_tuples,
    calls=st.lists(call_payloads, min_size=1, max_size=3, unique_by=lambda c: c.invocation_id).map(tuple),
    **common_fields,
)
option_result_messages = st.builds(
    OptionResultMessage, result=result_payloads, subgraph=st.none() | json_objects, **common_fields
)
messages = parts_messages | option_call_messages | option_result_messages


# ----------------------------------------------------------------------------------------------- round trips


@settings(max_examples=60, deadline=None)
@given(parts)
def test_every_part_kind_round_trips_through_json_by_its_kind_tag(part: Any) -> None:
    assert PART_ADAPTER.validate_python(part.model_dump(mode="json")) == part
    assert PART_ADAPTER.validate_json(part.model_dump_json()) == part


@settings(max_examples=100, deadline=None)
@given(messages)
def test_every_message_kind_round_trips_through_json(message: AnyMessage) -> None:
    as_data = json.loads(message.model_dump_json())
    assert parse_message(as_data) == message
    assert MESSAGE_ADAPTER.validate_json(message.model_dump_json()) == message
    assert message_from_json(message_to_json(message)) == message
    assert type(parse_message(as_data)) is type(message)


@settings(max_examples=30, deadline=None)
@given(call_payloads)
def test_option_call_payloads_round_trip_through_json(payload: OptionCallPayload) -> None:
    assert OptionCallPayload.model_validate_json(payload.model_dump_json()) == payload


@settings(max_examples=30, deadline=None)
@given(result_payloads)
def test_option_result_payloads_round_trip_through_json(payload: OptionResultPayload) -> None:
    assert OptionResultPayload.model_validate_json(payload.model_dump_json()) == payload


@settings(max_examples=30, deadline=None)
@given(generations())
def test_generations_round_trip_through_json(generation: Generation) -> None:
    assert Generation.model_validate_json(generation.model_dump_json()) == generation


@settings(max_examples=30, deadline=None)
@given(messages, st.none() | generations(), json_objects, st.none() | st.integers(0, 99))
def test_identity_ignores_engine_facts_metadata_and_step(
    message: AnyMessage, generation: Generation | None, metadata: dict[str, Any], step: int | None
) -> None:
    changed = message.model_copy(update={"generation": generation, "metadata": metadata, "step_num": step})
    assert changed.canonical_json() == message.canonical_json()


@settings(max_examples=30, deadline=None)
@given(parts_messages, short_text)
def test_identity_changes_with_the_words(message: PartsMessage, extra: str) -> None:
    longer = message.model_copy(update={"parts": (*message.parts, TextPart(text=extra))})
    assert longer.canonical_json() != message.canonical_json()


# ----------------------------------------------------------------------------------------------- strictness

SAMPLE_CALL = OptionCallPayload(invocation_id="call_1", option_name="search", arguments={"q": "hobbit"})
SAMPLE_RESULT = OptionResultPayload(invocation_id="call_1", option_name="search", result="3 hits")
FROZEN_INSTANCES = {
    "text part": (TextPart(text="hi"), "text", "bye"),
    "media part": (MediaPart(modality="image", url="https://x/a.png"), "url", "https://x/b.png"),
    "reasoning part": (ReasoningPart(text="hmm"), "redacted", True),
    "call payload": (SAMPLE_CALL, "option_name", "other"),
    "result payload": (SAMPLE_RESULT, "is_error", True),
    "generation": (Generation(token_ids=(1, 2)), "model", "m"),
    "parts message": (text_message("user", "hi"), "policy", "someone"),
    "option_call message": (OptionCallMessage(calls=(SAMPLE_CALL,)), "calls", ()),
    "option_result message": (OptionResultMessage(result=SAMPLE_RESULT), "step_num", 3),
}
FROZEN_IDS = list(FROZEN_INSTANCES)


@pytest.mark.parametrize(("instance", "field", "value"), FROZEN_INSTANCES.values(), ids=FROZEN_IDS)
def test_assigning_to_any_model_field_raises(instance: Any, field: str, value: Any) -> None:
    before = instance.model_dump()
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        setattr(instance, field, value)
    assert instance.model_dump() == before


VALID_DATA = {
    "text part": (TextPart, {"kind": "text", "text": "hi"}),
    "media part": (MediaPart, {"kind": "media", "modality": "image", "url": "https://x/a.png"}),
    "reasoning part": (ReasoningPart, {"kind": "reasoning", "text": "hmm"}),
    "call payload": (OptionCallPayload, {"invocation_id": "c", "option_name": "f", "arguments": {}}),
    "result payload": (OptionResultPayload, {"invocation_id": "c", "option_name": "f", "result": 1}),
    "generation": (Generation, {"token_ids": [1], "logprobs": [-0.5]}),
    "parts message": (MESSAGE_ADAPTER, {"kind": "parts", "parts": [{"kind": "text", "text": "hi"}]}),
    "option_call message": (
        MESSAGE_ADAPTER,
        {"kind": "option_call", "calls": [{"invocation_id": "c", "option_name": "f"}]},
    ),
    "option_result message": (
        MESSAGE_ADAPTER,
        {"kind": "option_result", "result": {"invocation_id": "c", "option_name": "f"}},
    ),
}


def _validate(target: Any, data: dict[str, Any]) -> Any:
    if isinstance(target, pydantic.TypeAdapter):
        return target.validate_python(data)
    return target.model_validate(data)


@pytest.mark.parametrize(("target", "data"), VALID_DATA.values(), ids=VALID_DATA.keys())
def test_an_unknown_field_is_an_error_not_silently_dropped(target: Any, data: dict[str, Any]) -> None:
    _validate(target, data)  # the data without the typo is valid
    with pytest.raises(pydantic.ValidationError) as info:
        _validate(target, {**data, "contnet": "typo"})
    assert [e["type"] for e in info.value.errors()] == ["extra_forbidden"]


def test_an_unknown_field_inside_a_nested_part_is_an_error() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        parse_message({"kind": "parts", "parts": [{"kind": "text", "text": "hi", "bold": True}]})
    assert info.value.errors()[0]["type"] == "extra_forbidden"
    assert info.value.errors()[0]["loc"] == ("parts", "parts", 0, "text", "bold")


def test_an_unknown_message_kind_is_a_discriminator_error() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        parse_message({"kind": "action_call", "calls": []})
    error = info.value.errors()[0]
    assert error["type"] == "union_tag_invalid"
    assert "'parts', 'option_call', 'option_result'" in error["msg"]


def test_a_message_without_a_kind_is_a_discriminator_error() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        parse_message({"parts": [{"kind": "text", "text": "hi"}]})
    assert info.value.errors()[0]["type"] == "union_tag_not_found"


def test_an_unknown_part_kind_is_a_discriminator_error_located_at_the_part() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        parse_message({"kind": "parts", "parts": [{"kind": "text", "text": "a"}, {"kind": "html"}]})
    error = info.value.errors()[0]
    assert error["type"] == "union_tag_invalid"
    assert error["loc"] == ("parts", "parts", 1)


def test_media_modality_must_be_one_of_the_four() -> None:
    for modality in ("image", "audio", "video", "document"):
        assert MediaPart(modality=modality, url="https://x/m").modality == modality
    with pytest.raises(pydantic.ValidationError):
        MediaPart.model_validate({"modality": "hologram", "url": "https://x/m"})


def test_an_option_call_message_needs_at_least_one_call() -> None:
    with pytest.raises(pydantic.ValidationError, match="at least one call"):
        OptionCallMessage(calls=())


def test_an_option_call_message_refuses_two_calls_with_one_invocation_id() -> None:
    with pytest.raises(pydantic.ValidationError, match="duplicate invocation ids"):
        OptionCallMessage(calls=(SAMPLE_CALL, SAMPLE_CALL.model_copy(update={"option_name": "other"})))


def test_generation_rejects_logprobs_misaligned_with_token_ids() -> None:
    with pytest.raises(pydantic.ValidationError, match="3 token_ids but 2 logprobs"):
        Generation(token_ids=(1, 2, 3), logprobs=(-0.1, -0.2))
    with pytest.raises(pydantic.ValidationError, match="must align"):
        Generation.model_validate_json('{"token_ids": [1], "logprobs": [-0.1, -0.2]}')


def test_generation_accepts_aligned_logprobs_and_all_fields_optional() -> None:
    assert Generation(token_ids=(1, 2), logprobs=(-0.1, -0.2)).logprobs == (-0.1, -0.2)
    assert Generation() == Generation.model_validate({})


def test_message_roles_follow_kind_and_hint() -> None:
    assert text_message("system", "s").role == "system"
    assert PartsMessage(parts=()).role == "user"  # a prompt unless hinted otherwise
    assert OptionCallMessage(calls=(SAMPLE_CALL,), role_hint_for_llm="user").role == "assistant"
    assert OptionResultMessage(result=SAMPLE_RESULT).role == "tool"


def test_text_and_reasoning_accessors_join_parts_and_skip_redacted_thinking() -> None:
    message = PartsMessage(
        parts=(
            ReasoningPart(text="first"),
            ReasoningPart(text="secret", redacted=True),
            TextPart(text="a"),
            MediaPart(modality="image", url="https://x/a.png"),
            TextPart(text="b"),
        )
    )
    assert message.text == "a\nb"
    assert message.reasoning == "first"
    assert PartsMessage(parts=(TextPart(text="x"),)).reasoning is None


# ----------------------------------------------------------------------------------------------- builders


def test_next_step_advances_the_step_of_a_message_or_number() -> None:
    assert MessageBuilder.next_step().step_num == 0
    assert MessageBuilder.next_step(4).step_num == 5
    assert MessageBuilder.next_step(text_message("user", "q", step_num=7)).step_num == 8
    assert MessageBuilder.next_step(text_message("user", "q")).step_num == 0


def test_continue_step_keeps_the_step_of_a_message_or_number() -> None:
    assert MessageBuilder.continue_step().step_num == 0
    assert MessageBuilder.continue_step(4).step_num == 4
    assert MessageBuilder.continue_step(text_message("user", "q", step_num=7)).step_num == 7
    built = MessageBuilder.continue_step(3).add_text("x").to_message()
    assert built.step_num == 3


def test_builder_keeps_text_and_every_media_modality_in_order() -> None:
    builder = MessageBuilder.next_step(0, role="user", policy="user")
    builder.add_image("girl wearing a hat", "https://x/1.png")
    builder.add_audio("a song", "https://x/2.mp3", mime="audio/mpeg")
    builder.add_video(None, "https://x/3.mp4")
    builder.add_document("the contract", "https://x/4.pdf")
    builder.add_reasoning("thinking")
    builder.add_text("apply the dress")
    message = builder.to_message()
    assert isinstance(message, PartsMessage)
    assert message.role == "user"
    assert message.step_num == 1
    media = [p for p in message.parts if isinstance(p, MediaPart)]
    assert [(p.modality, p.url, p.prompt_hint) for p in media] == [
        ("image", "https://x/1.png", "girl wearing a hat"),
        ("audio", "https://x/2.mp3", "a song"),
        ("video", "https://x/3.mp4", None),
        ("document", "https://x/4.pdf", "the contract"),
    ]
    assert media[1].mime == "audio/mpeg"
    assert [p.id for p in media] == ["media_1", "media_2", "media_3", "media_4"]
    assert [p.kind for p in message.parts] == ["media"] * 4 + ["reasoning", "text"]
    assert message.text == "apply the dress"


def test_builder_without_calls_makes_a_parts_message_with_a_predictable_role() -> None:
    assert MessageBuilder.next_step().add_text("hi").to_message().role == "assistant"
    runtime = MessageBuilder.next_step(policy=RUNTIME_POLICY).add_text("oops").to_message()
    assert runtime.role == "tool"
    assert runtime.kind == "parts"


def test_builder_with_calls_makes_one_option_call_message_with_its_preamble() -> None:
    builder = MessageBuilder.continue_step(2, policy="planner")
    builder.add_text("Let me look.")
    first = builder.add_option_call("search_web", {"query": "hobbit movie"})
    second = builder.add_option_call("open_url")
    message = builder.to_message()
    assert isinstance(message, OptionCallMessage)
    assert message.kind == "option_call"
    assert message.calls == (first, second)
    assert second.arguments == {}
    assert message.text == "Let me look."
    assert (message.policy, message.step_num, message.role) == ("planner", 2, "assistant")


def test_add_option_call_gives_every_call_a_unique_invocation_id() -> None:
    ids = []
    for _ in range(20):
        builder = MessageBuilder.next_step()
        ids += [builder.add_option_call("f", {"i": i}).invocation_id for i in range(25)]
    assert len(set(ids)) == len(ids) == 500


def test_last_option_call_is_the_most_recent_call_as_its_own_message() -> None:
    builder = MessageBuilder.next_step(1)
    with pytest.raises(ValidationError) as info:
        _ = builder.last_option_call
    assert info.value.code == "no_call"
    builder.add_option_call("a")
    second = builder.add_option_call("b")
    assert builder.last_option_call.calls == (second,)
    assert builder.last_option_call.step_num == 2


def test_the_seed_example_builds_a_result_and_a_multimodal_message() -> None:
    builder = MessageBuilder.continue_step(text_message("user", "dress her", step_num=4))
    builder.add_option_call("search_web", {"query": "hobbit movie"})
    result = OptionResultBuilder.response_to(builder.last_option_call).success(["hit 1", "hit 2"])
    builder.add_image("girl wearing a hat", "https://x/1.png")
    builder.add_image("fancy dress", "https://x/2.png")
    builder.add_text("Take the dress from the second image and apply it to the person in the first image")
    message = builder.to_message()
    assert isinstance(message, OptionCallMessage)
    assert result.result.invocation_id == message.calls[0].invocation_id
    assert result.step_num == message.step_num == 4
    assert [p.kind for p in message.parts] == ["media", "media", "text"]


def test_result_builder_success_copies_id_name_and_step_from_the_call() -> None:
    builder = MessageBuilder.next_step(5).add_text("x")
    payload = builder.add_option_call("search", {"q": "x"})
    call = builder.to_message()
    assert isinstance(call, OptionCallMessage)
    result = OptionResultBuilder.response_to(call).success({"hits": 3})
    assert result.kind == "option_result"
    assert result.result == OptionResultPayload(
        invocation_id=payload.invocation_id, option_name="search", result={"hits": 3}
    )
    assert result.step_num == 6
    assert result.policy == "search"  # the invoked option is the policy that produced the result
    assert result.role == "tool"


def test_result_builder_error_is_a_structured_runtime_error() -> None:
    builder = MessageBuilder.next_step(0)
    builder.add_option_call("fetch", {"url": "x"})
    call = builder.to_message()
    assert isinstance(call, OptionCallMessage)
    error = OptionResultBuilder.response_to(call).error("Timeout", "took longer than 30 s")
    assert error.result.is_error
    assert (error.result.error_type, error.result.error_message, error.result.retryable) == (
        "Timeout",
        "took longer than 30 s",
        False,
    )
    assert error.result.invocation_id == builder.last_option_call.calls[0].invocation_id
    assert error.result.option_name == "fetch"
    assert error.step_num == 1
    assert error.policy == RUNTIME_POLICY
    retry = OptionResultBuilder.response_to(call).error("Busy", "try again", retryable=True)
    assert retry.result.retryable is True


def test_result_builder_answers_a_bare_call_payload() -> None:
    result = OptionResultBuilder.response_to(SAMPLE_CALL).success("ok")
    assert (result.result.invocation_id, result.result.option_name) == ("call_1", "search")


def test_result_builder_refuses_a_mismatched_invocation_id() -> None:
    message = OptionCallMessage(calls=(SAMPLE_CALL,))
    for call in (message, SAMPLE_CALL):
        with pytest.raises(ValidationError) as info:
            OptionResultBuilder.response_to(call, invocation_id="call_2")
        assert info.value.code == "mismatched_id"
        assert "'call_2' does not match" in str(info.value)


def test_result_builder_refuses_a_mismatched_option_name() -> None:
    with pytest.raises(ValidationError) as info:
        OptionResultBuilder.response_to(OptionCallMessage(calls=(SAMPLE_CALL,)), option_name="drop_db")
    assert info.value.code == "mismatched_name"
    assert "option name 'drop_db' does not match the call's 'search'" in str(info.value)


def test_result_builder_needs_the_invocation_id_when_a_message_made_several_calls() -> None:
    other = OptionCallPayload(invocation_id="call_2", option_name="open", arguments={})
    message = OptionCallMessage(calls=(SAMPLE_CALL, other), step_num=3)
    with pytest.raises(ValidationError) as info:
        OptionResultBuilder.response_to(message)
    assert info.value.code == "ambiguous_call"
    builder = OptionResultBuilder.response_to(message, invocation_id="call_2", option_name="open")
    chosen = builder.success("page")
    assert (chosen.result.invocation_id, chosen.result.option_name, chosen.step_num) == ("call_2", "open", 3)


# ----------------------------------------------------------------------------------------------- OpenAI adapter

IMAGE_URL = "https://example.com/cat.png"


def test_openai_system_user_and_developer_become_parts_messages_with_their_role() -> None:
    system, developer, user = from_openai_messages(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": "Never guess."},
            {"role": "user", "content": "Hi", "name": "ana"},
        ]
    )
    assert isinstance(system, PartsMessage)
    assert (system.role, system.text, system.policy) == ("system", "Be brief.", "system")
    assert (developer.role, developer.text, developer.metadata) == (
        "system",
        "Never guess.",
        {"openai_role": "developer"},
    )
    assert (user.role, user.text, user.name, user.policy) == ("user", "Hi", "ana", "user")
    assert to_openai_message(developer) == {"role": "developer", "content": "Never guess."}
    assert to_openai_message(developer, for_template=True)["role"] == "system"


def test_openai_content_parts_with_image_url_become_media_parts_and_back() -> None:
    data = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": IMAGE_URL}},
        ],
    }
    (message,) = from_openai_messages([data])
    assert isinstance(message, PartsMessage)
    assert message.parts == (TextPart(text="What is this?"), MediaPart(modality="image", url=IMAGE_URL))
    assert to_openai_message(message) == data


def test_openai_audio_and_file_parts_keep_their_modality() -> None:
    (message,) = from_openai_messages(
        [
            {
                "role": "user",
                "content": [
                    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                    {"type": "file", "file": {"file_id": "file-123"}},
                ],
            }
        ]
    )
    assert isinstance(message, PartsMessage)
    assert [(p.modality, p.url) for p in message.parts if isinstance(p, MediaPart)] == [
        ("audio", "UklGRg=="),
        ("document", "file-123"),
    ]


def test_openai_tool_calls_with_string_and_dict_arguments_become_one_option_call_message() -> None:
    (message,) = from_openai_messages(
        [
            {
                "role": "assistant",
                "content": "Checking.",
                "reasoning_content": "The user wants the weather.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "time", "arguments": {"tz": "CET"}},
                    },
                ],
            }
        ]
    )
    assert isinstance(message, OptionCallMessage)
    assert message.reasoning == "The user wants the weather."
    assert message.text == "Checking."
    first, second = message.calls
    assert (first.invocation_id, first.option_name, first.arguments) == ("c1", "weather", {"city": "Oslo"})
    assert first.raw_arguments == '{"city": "Oslo"}'  # the model's exact text, for exact tokens
    assert (second.invocation_id, second.option_name, second.arguments) == ("c2", "time", {"tz": "CET"})
    assert second.raw_arguments is None
    projected = to_openai_message(message)
    assert projected["reasoning_content"] == "The user wants the weather."
    assert [tc["function"]["arguments"] for tc in projected["tool_calls"]] == [
        '{"city": "Oslo"}',
        '{"tz": "CET"}',
    ]


def test_openai_malformed_argument_text_is_kept_verbatim() -> None:
    (message,) = from_openai_messages(
        [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"a": 1'}}],
            }
        ]
    )
    assert isinstance(message, OptionCallMessage)
    assert (message.calls[0].arguments, message.calls[0].raw_arguments) == ({}, '{"a": 1')


def test_openai_reasoning_field_alias_is_read_as_reasoning() -> None:
    (message,) = from_openai_messages([{"role": "assistant", "content": "4", "reasoning": "2+2"}])
    assert isinstance(message, PartsMessage)
    assert message.parts == (ReasoningPart(text="2+2"), TextPart(text="4"))


def test_openai_tool_results_take_their_name_from_the_call_they_answer() -> None:
    _, result, named = from_openai_messages(
        [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "ls"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
            {"role": "tool", "tool_call_id": "c9", "name": "cat", "content": "x"},
        ]
    )
    assert isinstance(result, OptionResultMessage)
    assert result.result == OptionResultPayload(invocation_id="c1", option_name="ls", result="a.py")
    assert (result.policy, result.role) == (RUNTIME_POLICY, "tool")
    assert isinstance(named, OptionResultMessage)
    assert named.result.option_name == "cat"
    assert to_openai_message(result) == {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "ls",
        "content": "a.py",
    }


def test_structured_and_error_results_project_to_text() -> None:
    structured = OptionResultMessage(result=SAMPLE_RESULT.model_copy(update={"result": {"hits": [1, 2]}}))
    assert to_openai_message(structured)["content"] == '{"hits": [1, 2]}'
    error = OptionResultMessage(
        result=OptionResultPayload(invocation_id="c", option_name="f", is_error=True, error_message="boom")
    )
    assert to_openai_message(error)["content"] == "boom"


def test_openai_unknown_role_names_the_message_index() -> None:
    with pytest.raises(ValidationError) as info:
        from_openai_messages([{"role": "user", "content": "hi"}, {"role": "hacker", "content": "inject"}])
    assert (info.value.where, info.value.code) == ("message[1]", "unknown_role")


def test_openai_tool_message_without_call_id_is_refused_as_in_seed_004() -> None:
    with pytest.raises(ValidationError) as info:
        from_openai_message({"role": "tool", "content": "result"}, index=0)
    assert info.value.code == "missing_tool_call_id"
    assert str(info.value).startswith("message[0]: tool message missing tool_call_id")


# A canonical OpenAI conversation: what to_openai_messages emits, so from → to must reproduce it exactly.
@st.composite
def canonical_openai_conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    words = st.text(min_size=1, max_size=10)
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({"role": draw(st.sampled_from(["system", "developer"])), "content": draw(words)})
    next_call = 0
    for _ in range(draw(st.integers(1, 4))):
        user: dict[str, Any] = {"role": "user", "content": draw(words)}
        if draw(st.booleans()):
            user["content"] = [
                {"type": "text", "text": draw(words)},
                {"type": "image_url", "image_url": {"url": IMAGE_URL}},
            ]
        out.append(user)
        n_calls = draw(st.integers(0, 2))
        assistant: dict[str, Any] = {
            "role": "assistant",
            "content": draw(words) if not n_calls else draw(st.none() | words),
        }
        if draw(st.booleans()):
            assistant["reasoning_content"] = draw(words)
        calls: list[dict[str, Any]] = []
        for _ in range(n_calls):
            next_call += 1
            args = json.dumps(draw(json_objects), ensure_ascii=draw(st.booleans()))
            name = draw(st.sampled_from(["search", "read_file", "run"]))
            function = {"name": name, "arguments": args}
            calls.append({"id": f"call_{next_call}", "type": "function", "function": function})
        if calls:
            assistant["tool_calls"] = calls
        out.append(assistant)
        for call in calls:
            content = draw(short_text)
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "name": call["function"]["name"],
                    "content": content,
                }
            )
    return out


@settings(max_examples=60, deadline=None)
@given(canonical_openai_conversations())
def test_openai_conversations_round_trip_through_the_message_model(
    conversation: list[dict[str, Any]],
) -> None:
    messages = from_openai_messages(conversation)
    projection = to_openai_messages(messages)
    assert projection.messages == conversation
    assert (projection.skipped_calls, projection.skipped_results) == (0, 0)
    assert from_openai_messages(projection.messages) == messages


def _call(*ids: str, text: str = "") -> OptionCallMessage:
    payloads = tuple(OptionCallPayload(invocation_id=i, option_name="f", arguments={}) for i in ids)
    return OptionCallMessage(parts=(TextPart(text=text),) if text else (), calls=payloads)


def _result(call_id: str) -> OptionResultMessage:
    return OptionResultMessage(result=OptionResultPayload(invocation_id=call_id, option_name="f", result="r"))


def test_projection_keeps_only_answered_calls_and_counts_the_rest() -> None:
    projection = to_openai_messages([text_message("user", "go"), _call("a", "b"), _result("a")])
    assert [m["role"] for m in projection.messages] == ["user", "assistant", "tool"]
    assert [tc["id"] for tc in projection.messages[1]["tool_calls"]] == ["a"]
    assert (projection.skipped_calls, projection.skipped_results) == (1, 0)


def test_projection_drops_an_assistant_turn_made_only_of_unanswered_calls() -> None:
    projection = to_openai_messages([text_message("user", "go"), _call("a")])
    assert projection.messages == [{"role": "user", "content": "go"}]
    assert projection.skipped_calls == 1


def test_projection_keeps_the_words_of_an_assistant_turn_whose_calls_were_not_answered() -> None:
    projection = to_openai_messages([_call("a", text="Let me check.")])
    assert projection.messages == [{"role": "assistant", "content": "Let me check."}]
    assert projection.skipped_calls == 1


def test_projection_skips_orphan_results_and_counts_them() -> None:
    projection = to_openai_messages([text_message("user", "go"), _result("ghost")])
    assert projection.messages == [{"role": "user", "content": "go"}]
    assert (projection.skipped_calls, projection.skipped_results) == (0, 1)


def test_projection_without_the_pairing_rule_keeps_everything() -> None:
    projection = to_openai_messages([_call("a", "b"), _result("ghost")], complete_pairs_only=False)
    assert [len(projection.messages[0]["tool_calls"]), projection.messages[1]["tool_call_id"]] == [2, "ghost"]
    assert (projection.skipped_calls, projection.skipped_results) == (0, 0)


@st.composite
def call_result_sequences(draw: st.DrawFn) -> list[AnyMessage]:
    """Calls with unique ids; results answer an earlier call (maybe twice) or an id nobody called.

    (A result logged before its own call is the separate, currently failing case below.)
    """
    ids = iter(f"c{i}" for i in range(100))
    issued = ["ghost"]
    out: list[AnyMessage] = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["call", "result", "user"]))
        if kind == "call":
            chosen = [next(ids) for _ in range(draw(st.integers(1, 2)))]
            issued += chosen
            out.append(_call(*chosen, text=draw(st.sampled_from(["", "hm"]))))
        elif kind == "result":
            out.append(_result(draw(st.sampled_from(issued))))
        else:
            out.append(text_message("user", "u"))
    return out


@settings(max_examples=150, deadline=None)
@given(call_result_sequences())
def test_projection_only_ever_emits_complete_call_result_pairs(messages: list[AnyMessage]) -> None:
    projection = to_openai_messages(messages)
    issued: set[str] = set()
    for i, m in enumerate(projection.messages):
        if m["role"] == "tool":
            assert m["tool_call_id"] in issued, "a projected result answers an earlier projected call"
        for tc in m.get("tool_calls", []):
            issued.add(tc["id"])
            later = [x.get("tool_call_id") for x in projection.messages[i + 1 :]]
            assert tc["id"] in later, "a projected call is answered by a later projected result"
    calls = sum(len(m.calls) for m in messages if isinstance(m, OptionCallMessage))
    results = sum(isinstance(m, OptionResultMessage) for m in messages)
    projected_calls = sum(len(m.get("tool_calls", [])) for m in projection.messages)
    projected_results = sum(m["role"] == "tool" for m in projection.messages)
    assert projected_calls + projection.skipped_calls == calls
    assert projected_results + projection.skipped_results == results


def test_a_result_logged_before_its_call_is_not_a_pair() -> None:
    projection = to_openai_messages([text_message("user", "go"), _result("a"), _call("a")])
    assert projection.messages == [{"role": "user", "content": "go"}]
    assert (projection.skipped_calls, projection.skipped_results) == (1, 1)


@pytest.mark.parametrize(
    "message",
    [
        text_message("user", "hi"),
        OptionCallMessage(calls=(OptionCallPayload(invocation_id="c", option_name="f"),)),
        OptionResultMessage(result=OptionResultPayload(invocation_id="c", option_name="f")),
    ],
    ids=lambda m: m.kind,
)
def test_every_field_of_a_message_is_in_its_canonical_json_or_named_as_left_out(message: Any) -> None:
    """The text check trusts a message's canonical JSON (hashed into its node id) for every field it holds, and looks
    at ``OUTSIDE_IDENTITY`` on its own: a new field must be in one or the other, and the JSON text is the one
    ``json.dumps`` writes with sorted keys."""
    from msgtrain.model.message import OUTSIDE_IDENTITY

    identity = message.identity()
    assert set(type(message).model_fields) == set(identity) | (set(OUTSIDE_IDENTITY) & set(type(message).model_fields))
    assert not set(identity) & set(OUTSIDE_IDENTITY)
    assert message.canonical_json() == json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
