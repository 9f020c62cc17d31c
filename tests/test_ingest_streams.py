"""Streamed and compressed provider responses (issue 15, items 1–3).

The stream fixtures here are written by hand; each expected final body is derived from the provider SDK's own
accumulation rule (openai-python ``accumulate_delta`` / ``ChatCompletionStreamState``, anthropic-sdk-python
``accumulate_event``, the Responses ``response.completed`` event, google-genai's chunk-by-chunk contents, the
AWS SDKs' Converse stream events), written out literally rather than computed. Counts on the real cassettes in
../shared are computed from the raw YAML by a small independent decoder (stdlib gzip + json, not the readers).
"""

from __future__ import annotations

import base64
import gzip
import json
import struct
import tracemalloc
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from msgtrain.errors import FormatError, ValidationError
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.common import streams
from msgtrain.ingest.core import http_bodies
from msgtrain.ingest.core.base import ReadGraph, ReadReject, ReadSkip
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.formats.api import anthropic, bedrock, calls, cassettes, openai_responses
from msgtrain.model.graph import Origin
from msgtrain.model.message import OptionCallMessage, OptionResultMessage, PartsMessage, ReasoningPart, TextPart

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
REAL = Path(__file__).resolve().parents[2] / "shared" / "real_logs"
needs_shared = pytest.mark.skipif(not REAL.is_dir(), reason="../shared not present")


def _sse(events: list[dict[str, Any]], named: bool = False) -> str:
    out = []
    for e in events:
        if named:
            out.append(f"event: {e['type']}\n")
        out.append(f"data: {json.dumps(e)}\n\n")
    return "".join(out)


def _frame(event_type: str, payload: dict[str, Any], message_type: str = "event") -> bytes:
    """One AWS event-stream message, encoded from the published layout (independent of the decoder)."""
    headers = b""
    for name, value in (
        (":event-type", event_type),
        (":content-type", "application/json"),
        (":message-type", message_type),
    ):
        headers += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(value)) + value.encode()
    body = json.dumps(payload).encode()
    prelude = struct.pack(">II", 16 + len(headers) + len(body), len(headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + headers + body
    return message + struct.pack(">I", zlib.crc32(message))


# --------------------------------------------------------------------------- OpenAI chat completions


def _chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m", "choices": choices, **extra}


CHAT_CHUNKS = [
    _chunk([{"index": 0, "delta": {"role": "assistant", "reasoning_content": "Think"}, "finish_reason": None}]),
    _chunk([{"index": 1, "delta": {"role": "assistant", "content": "B"}, "finish_reason": None}]),
    _chunk([{"index": 0, "delta": {"reasoning_content": "ing."}, "finish_reason": None}]),
    _chunk(
        [
            {
                "index": 0,
                "delta": {
                    "content": None,
                    "tool_calls": [
                        {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}},
                        {"index": 1, "id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{"}},
                    ],
                },
                "logprobs": {"content": [{"token": "x", "logprob": -1.0}]},
            }
        ]
    ),
    _chunk([{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": "}"}}]}}]),
    _chunk(
        [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]},
                "logprobs": {"content": [{"token": "y", "logprob": -2.0}]},
            }
        ]
    ),
    _chunk([{"index": 1, "delta": {"content": "ye"}, "finish_reason": "stop"}]),
    _chunk([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]),
    _chunk([], usage={"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}),
]

CHAT_EXPECTED = {
    "id": "c1",
    "model": "m",
    "created": 7,
    "object": "chat.completion",
    "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "reasoning_content": "Thinking.",
                "content": None,
                "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
                    {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
                ],
            },
            "finish_reason": "tool_calls",
            "logprobs": {"content": [{"token": "x", "logprob": -1.0}, {"token": "y", "logprob": -2.0}]},
        },
        {"index": 1, "message": {"role": "assistant", "content": "Bye"}, "finish_reason": "stop"},
    ],
}


def test_chat_chunks_accumulate_by_choice_index_and_tool_call_index_as_the_openai_sdk_does() -> None:
    assert streams.chat_completion(CHAT_CHUNKS) == CHAT_EXPECTED


def test_an_sse_chat_stream_with_done_marker_gives_the_same_body_as_its_chunk_list() -> None:
    body = _sse(CHAT_CHUNKS) + "data: [DONE]\n\n"
    assert streams.assemble("openai_chat", body) == CHAT_EXPECTED
    assert streams.assemble("openai_chat", body.encode()) == CHAT_EXPECTED


def test_identifiers_a_router_repeats_in_every_chunk_are_not_concatenated() -> None:
    call = {"index": 0, "id": "0", "type": "function", "function": {"name": "version", "arguments": ""}}
    chunks = [
        _chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}}]),
        _chunk([{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]),
        _chunk(
            [
                {
                    "index": 0,
                    "delta": {
                        "role": "assistant",
                        "tool_calls": [{**call, "function": {"name": "version", "arguments": "{}"}}],
                    },
                }
            ]
        ),
    ]
    message = streams.chat_completion(chunks)["choices"][0]["message"]
    assert message == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "0", "type": "function", "function": {"name": "version", "arguments": "{}"}}],
    }


def test_vllm_token_ids_stream_per_chunk_and_become_the_sampled_ids(tmp_path: Path) -> None:
    chunks = [
        {
            **_chunk([{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "token_ids": [5]}]),
            "prompt_token_ids": [1, 2],
        },
        _chunk([{"index": 0, "delta": {"content": "!"}, "token_ids": [6], "finish_reason": "stop"}]),
    ]
    path = tmp_path / "calls.jsonl"
    path.write_text(
        json.dumps({"request": {"messages": [{"role": "user", "content": "hey"}]}, "response": chunks}) + "\n"
    )
    assert detect_format(path).name == "calls"
    (event,) = list(calls.READER.read(path))
    assert isinstance(event, ReadGraph)
    (node,) = event.graph.sampled_nodes()
    gen = event.graph.generations[node.id]
    assert node.message.text == "Hi!" and gen.token_ids == (5, 6) and gen.prompt_token_ids == (1, 2)


# --------------------------------------------------------------------------- Anthropic Messages

ANTHROPIC_EVENTS: list[dict[str, Any]] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "c",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hm"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "m."}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "SIG"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Sure"}},
    {"type": "content_block_stop", "index": 1},
    {
        "type": "content_block_start",
        "index": 2,
        "content_block": {"type": "tool_use", "id": "tu1", "name": "t", "input": {}},
    },
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"q": '}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '"x"}'}},
    {"type": "content_block_stop", "index": 2},
    {
        "type": "content_block_start",
        "index": 3,
        "content_block": {"type": "tool_use", "id": "tu2", "name": "t", "input": {}},
    },
    {"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": ""}},
    {"type": "content_block_stop", "index": 3},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 20},
    },
    {"type": "message_stop"},
]

ANTHROPIC_EXPECTED = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "c",
    "content": [
        {"type": "thinking", "thinking": "Hmm.", "signature": "SIG"},
        {"type": "text", "text": "Sure"},
        {"type": "tool_use", "id": "tu1", "name": "t", "input": {"q": "x"}},
        {"type": "tool_use", "id": "tu2", "name": "t", "input": {}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 20},
}


def test_anthropic_events_accumulate_blocks_json_input_thinking_and_signature_as_the_sdk_does() -> None:
    assert streams.anthropic_message(ANTHROPIC_EVENTS) == ANTHROPIC_EXPECTED
    assert streams.assemble("anthropic", _sse(ANTHROPIC_EVENTS, named=True)) == ANTHROPIC_EXPECTED


def test_an_anthropic_error_event_fails_the_call_and_a_delta_without_its_block_is_a_bad_stream() -> None:
    with pytest.raises(streams.StreamFailed) as failed:
        streams.anthropic_message([*ANTHROPIC_EVENTS[:3], {"type": "error", "error": {"type": "overloaded_error"}}])
    assert failed.value.code == "error_response"
    with pytest.raises(ValidationError) as bad:
        streams.anthropic_message([ANTHROPIC_EVENTS[0], ANTHROPIC_EVENTS[3]])
    assert bad.value.code == "bad_stream"


def test_the_anthropic_pair_reader_reads_a_streamed_response_logged_as_its_event_list() -> None:
    path = SAMPLES / "anthropic/streamed_events.jsonl"
    assert detect_format(path).name == "anthropic"
    (event,) = list(anthropic.READER.read(path))
    assert isinstance(event, ReadGraph)
    (node,) = event.graph.sampled_nodes()
    message = node.message
    assert isinstance(message, OptionCallMessage)
    assert message.parts == (
        ReasoningPart(text="Use the convert tool.", signature="c2lnLXVuaXRz"),
        TextPart(text="Let me convert that."),
    )
    assert [(c.invocation_id, c.arguments) for c in message.calls] == [("toolu_m2f", {"value": 3, "unit": "m"})]
    assert event.graph.generations[node.id].finish_reason == "tool_use"


# --------------------------------------------------------------------------- OpenAI Responses

_FINAL = {
    "id": "r1",
    "object": "response",
    "status": "completed",
    "output": [
        {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "Plan."}]},
        {"type": "function_call", "id": "fc", "call_id": "call_1", "name": "f", "arguments": '{"k": 2}'},
    ],
}
RESPONSES_EVENTS: list[dict[str, Any]] = [
    {"type": "response.created", "response": {**_FINAL, "status": "in_progress", "output": []}},
    {"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs", "summary": []}},
    {
        "type": "response.reasoning_summary_part.added",
        "output_index": 0,
        "summary_index": 0,
        "part": {"type": "summary_text", "text": ""},
    },
    {"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 0, "delta": "Pl"},
    {"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 0, "delta": "an."},
    {
        "type": "response.output_item.added",
        "output_index": 1,
        "item": {"type": "function_call", "id": "fc", "call_id": "call_1", "name": "f", "arguments": ""},
    },
    {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"k": '},
    {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "2}"},
]


def test_responses_completed_event_carries_the_whole_response() -> None:
    completed = {"type": "response.completed", "response": _FINAL}
    assert streams.responses_response([*RESPONSES_EVENTS, completed]) == _FINAL


def test_responses_without_a_final_event_are_rebuilt_from_the_deltas_with_an_unknown_status() -> None:
    assert streams.responses_response(RESPONSES_EVENTS) == {**_FINAL, "status": None}


def test_a_failed_response_stream_fails_the_call() -> None:
    failed = {
        "type": "response.failed",
        "response": {"id": "r1", "status": "failed", "output": [], "error": {"code": "x"}},
    }
    with pytest.raises(streams.StreamFailed):
        streams.responses_response([RESPONSES_EVENTS[0], failed])


def test_the_responses_call_reader_reads_a_streamed_response_logged_as_its_event_list() -> None:
    path = SAMPLES / "openai_responses/streamed_events.jsonl"
    assert detect_format(path).name == "openai_responses"
    (event,) = list(openai_responses.READER.read(path))
    assert isinstance(event, ReadGraph)
    (node,) = event.graph.sampled_nodes()
    assert node.message.text == "Hi!"


# --------------------------------------------------------------------------- Gemini

GEMINI_CHUNKS: list[dict[str, Any]] = [
    {
        "candidates": [{"index": 0, "content": {"role": "model", "parts": [{"text": "Let me ", "thought": True}]}}],
        "modelVersion": "g1",
    },
    {
        "candidates": [
            {"index": 0, "content": {"role": "model", "parts": [{"text": "see.", "thought": True}, {"text": "Two "}]}}
        ]
    },
    {
        "candidates": [
            {
                "index": 0,
                "content": {
                    "role": "model",
                    "parts": [{"text": "names."}, {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "S"}],
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {"totalTokenCount": 9},
        "modelVersion": "g1",
    },
]
GEMINI_EXPECTED = {
    "modelVersion": "g1",
    "usageMetadata": {"totalTokenCount": 9},
    "candidates": [
        {
            "index": 0,
            "content": {
                "role": "model",
                "parts": [
                    {"text": "Let me see.", "thought": True},
                    {"text": "Two names."},
                    {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "S"},
                ],
            },
            "finishReason": "STOP",
        }
    ],
}


def test_gemini_chunks_concatenate_contiguous_text_of_one_kind_and_keep_calls_as_parts() -> None:
    assert streams.gemini_response(GEMINI_CHUNKS) == GEMINI_EXPECTED
    assert streams.assemble("gemini", json.dumps(GEMINI_CHUNKS, indent=1)) == GEMINI_EXPECTED
    assert streams.assemble("gemini", _sse(GEMINI_CHUNKS)) == GEMINI_EXPECTED  # alt=sse


# --------------------------------------------------------------------------- Bedrock

CONVERSE_STREAM = b"".join(
    [
        _frame("messageStart", {"role": "assistant"}),
        _frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Look "}}}),
        _frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "it up."}}}),
        _frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "SG"}}}),
        _frame("contentBlockStop", {"contentBlockIndex": 0}),
        _frame("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "On it"}, "p": "abc"}),
        _frame("contentBlockStop", {"contentBlockIndex": 1}),
        _frame(
            "contentBlockStart", {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tu", "name": "tide"}}}
        ),
        _frame("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": '{"h": "P'}}}),
        _frame("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": 'orto"}'}}}),
        _frame("contentBlockStop", {"contentBlockIndex": 2}),
        _frame("messageStop", {"stopReason": "tool_use"}),
        _frame(
            "metadata", {"usage": {"inputTokens": 4, "outputTokens": 6, "totalTokens": 10}, "metrics": {"latencyMs": 1}}
        ),
    ]
)
CONVERSE_EXPECTED = {
    "output": {
        "message": {
            "role": "assistant",
            "content": [
                {"reasoningContent": {"reasoningText": {"text": "Look it up.", "signature": "SG"}}},
                {"text": "On it"},
                {"toolUse": {"toolUseId": "tu", "name": "tide", "input": {"h": "Porto"}}},
            ],
        }
    },
    "stopReason": "tool_use",
    "usage": {"inputTokens": 4, "outputTokens": 6, "totalTokens": 10},
    "metrics": {"latencyMs": 1},
}


def test_a_converse_stream_is_decoded_from_aws_event_stream_frames_into_a_converse_response() -> None:
    assert streams.assemble("bedrock_converse", CONVERSE_STREAM) == CONVERSE_EXPECTED


def test_a_damaged_event_stream_frame_is_a_bad_stream_and_an_exception_frame_fails_the_call() -> None:
    damaged = bytearray(CONVERSE_STREAM)
    damaged[40] ^= 0xFF
    with pytest.raises(ValidationError) as bad:
        streams.assemble("bedrock_converse", bytes(damaged))
    assert bad.value.code == "bad_stream"
    with pytest.raises(ValidationError):
        streams.assemble("bedrock_converse", CONVERSE_STREAM[:-3])
    throttled = _frame("throttlingException", {"message": "slow down"}, message_type="exception")
    with pytest.raises(streams.StreamFailed):
        streams.assemble("bedrock_converse", _frame("messageStart", {"role": "assistant"}) + throttled)


def test_invoke_with_response_stream_unwraps_base64_anthropic_events() -> None:
    frames = b"".join(
        _frame("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode()}) for e in ANTHROPIC_EVENTS
    )
    assert streams.assemble("bedrock_invoke", frames) == ANTHROPIC_EXPECTED


def test_the_bedrock_sample_cassette_reads_converse_the_stream_and_an_anthropic_invoke_body() -> None:
    events = list(cassettes.READER.read(SAMPLES / "cassettes/bedrock_converse.yaml"))
    assert [e.reason for e in events if isinstance(e, ReadSkip)] == ["not_a_generation_call"]
    assert not [e for e in events if isinstance(e, ReadReject)]
    (graph,) = [e.graph for e in events if isinstance(e, ReadGraph)]
    sampled = graph.sampled_nodes()
    assert [n.message.text for n in sampled][1:] == ["Yes, the tide is high: 3.1 m.", "ruobrah"]
    first = sampled[0].message
    assert isinstance(first, OptionCallMessage)
    assert first.parts[0] == ReasoningPart(text="I should look up the tide.", signature="c2lnLXRpZGU=")
    result = next(n.message for n in graph.nodes.values() if isinstance(n.message, OptionResultMessage))
    assert result.result.result == {"height_m": 3.1, "state": "high"}
    gen = graph.generations[sampled[0].id]
    assert gen.model == "anthropic.claude-x-v1:0" and gen.sampling == {"maxTokens": 400, "temperature": 0.3}
    env = graph.envs[graph.nodes[sampled[0].id].env_id]
    assert [t["function"]["name"] for t in env.tools] == ["lookup_tide"]


def test_converse_blocks_that_carry_no_content_are_skipped_and_unknown_blocks_reject() -> None:
    request = {"messages": [{"role": "user", "content": [{"text": "hi"}, {"cachePoint": {"type": "default"}}]}]}
    response = {"output": {"message": {"role": "assistant", "content": [{"text": "yo"}]}}, "stopReason": "end_turn"}
    call = bedrock.converse_call(request, response, "m")
    assert [s.message.text for s in call.context] == ["hi"]
    bad = {"messages": [{"role": "user", "content": [{"citationsContent": {}}]}]}
    with pytest.raises(ValidationError) as e:
        bedrock.converse_call(bad, response)
    assert e.value.code == "unsupported_block"


def test_bedrock_model_ids_are_read_from_the_uri_and_only_bedrock_paths_are_bedrock_endpoints() -> None:
    assert bedrock.model_id("https://x/model/arn%3Aaws%3Abedrock%3Aus%3A1%3Afoo/converse") == "arn:aws:bedrock:us:1:foo"
    assert cassettes.endpoint_of("https://x/model/m/converse-stream") == cassettes.Endpoint("bedrock_converse", True)
    assert cassettes.endpoint_of("https://x/model/m/invoke") == cassettes.Endpoint("bedrock_invoke", False)
    assert cassettes.endpoint_of("https://x/api/invoke") is None


# --------------------------------------------------------------------------- content encodings


def _raw_deflate(body: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(body) + compressor.flush()


@pytest.mark.parametrize(
    ("coding", "encode"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("deflate", _raw_deflate), ("gzip, deflate", None)],
)
def test_gzip_and_deflate_bodies_are_decoded(coding: str, encode: Any) -> None:
    body = b'{"ok": true}'
    encoded = encode(body) if encode is not None else zlib.compress(gzip.compress(body))  # applied in header order
    assert http_bodies.decode_content(encoded, coding) == body


def test_a_body_the_recorder_already_decoded_is_kept_as_it_is() -> None:
    assert http_bodies.decode_content(b'{"a": 1}', "gzip") == b'{"a": 1}'
    assert http_bodies.decode_content(b"data: {}\n\n", "zstd") == b"data: {}\n\n"


def test_br_and_zstd_decode_with_the_optional_packages_and_reject_clearly_without_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    brotli = pytest.importorskip("brotli")
    zstandard = pytest.importorskip("zstandard")
    body = b'{"choices": []}'
    assert http_bodies.decode_content(brotli.compress(body), "br") == body
    assert http_bodies.decode_content(zstandard.ZstdCompressor().compress(body), "zstd") == body
    monkeypatch.setattr(http_bodies, "_optional", lambda *names: None)
    for coding, data in (("br", brotli.compress(body)), ("zstd", zstandard.ZstdCompressor().compress(body))):
        with pytest.raises(FormatError) as missing:
            http_bodies.decode_content(data, coding)
        assert missing.value.code == "missing_decoder" and "msgtrain[compression]" in str(missing.value)


def _bombs() -> list[tuple[str, bytes]]:
    """8 MiB of zeros under every coding (chained gzip as in the bomb of issue 30: a few KB on disk)."""
    zeros = bytes(8 * 1024 * 1024)
    bombs = [
        ("gzip, gzip", gzip.compress(gzip.compress(zeros))),
        ("deflate", zlib.compress(zeros)),
        ("deflate", _raw_deflate(zeros)),
        ("gzip", gzip.compress(zeros[:4096]) + gzip.compress(zeros)),  # a second member past the cap
    ]
    brotli = pytest.importorskip("brotli")
    zstandard = pytest.importorskip("zstandard")
    bombs.append(("br", brotli.compress(zeros)))
    bombs.append(("zstd", zstandard.ZstdCompressor().compress(zeros)))
    return bombs


def test_every_decoder_stops_at_the_output_cap_and_a_bomb_is_body_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_bodies, "MAX_BODY_BYTES", 1024 * 1024)
    for coding, data in _bombs():
        tracemalloc.start()
        try:
            with pytest.raises(ValidationError) as too_large:
                http_bodies.decode_content(data, coding, "cassette.yaml (interaction 0)")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert too_large.value.code == "body_too_large", coding
        assert "cassette.yaml" in str(too_large.value)
        # The output held is about the cap (plus the input and one step's buffer), never the 8 MiB it expands to.
        assert peak < 4 * 1024 * 1024, (coding, peak)
    # At the cap exactly, or with a larger explicit limit, the body decodes whole.
    exact = bytes(1024 * 1024)
    assert http_bodies.decode_content(gzip.compress(gzip.compress(exact)), "gzip, gzip") == exact
    assert len(http_bodies.decode_content(zlib.compress(bytes(2_000_000)), "deflate", limit=2_000_000)) == 2_000_000


def test_a_truncated_or_trailing_garbage_gzip_body_is_bad_encoding_not_a_shorter_body() -> None:
    whole = gzip.compress(b'{"ok": true}' * 100)
    for broken in (whole[:-12], whole + b"junk"):
        with pytest.raises(ValidationError) as bad:
            http_bodies.decode_content(broken, "gzip")
        assert bad.value.code == "bad_encoding"
    assert http_bodies.decode_content(gzip.compress(b"a") + gzip.compress(b"b") + b"\0\0", "gzip") == b"ab"


def test_a_compressed_bomb_in_a_cassette_rejects_that_interaction_and_the_others_convert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_bodies, "MAX_BODY_BYTES", 1024 * 1024)

    def interaction(body: bytes | str, encoding: str | None) -> dict[str, Any]:
        headers = {"Content-Type": ["application/json"]}
        if encoding:
            headers["Content-Encoding"] = [encoding]
        return {
            "request": {
                "method": "POST",
                "uri": "https://api.openai.com/v1/chat/completions",
                "body": json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
            },
            "response": {"status": {"code": 200}, "headers": headers, "body": {"string": body}},
        }

    reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]}
    bomb = gzip.compress(gzip.compress(bytes(16 * 1024 * 1024)))
    path = tmp_path / "bomb.yaml"
    path.write_text(
        yaml.safe_dump({"interactions": [interaction(bomb, "gzip, gzip"), interaction(json.dumps(reply), None)]}),
        encoding="utf-8",
    )
    events = list(read_events(cassettes.READER, path))
    rejects = [e for e in events if isinstance(e, ReadReject)]
    assert [r.error.code for r in rejects] == ["body_too_large"]
    assert [e for e in events if isinstance(e, ReadGraph)]


def test_the_streamed_and_compressed_sample_cassette_reads_every_layout_and_encoding() -> None:
    path = SAMPLES / "cassettes/streamed_and_compressed.yaml"
    events = list(cassettes.READER.read(path))
    assert not [e for e in events if isinstance(e, ReadReject | ReadSkip)]
    (graph,) = [e.graph for e in events if isinstance(e, ReadGraph)]
    texts = sorted(n.message.text for n in graph.sampled_nodes())
    assert texts == sorted(["", "It is 14:05 in Lisbon.", "Let me convert that.", "Deep teal.", "Hi!"])
    # The streamed tool call of the first call is the one the second (gzip) call continues: sampled, not carried.
    assert Counter(n.origin for n in graph.nodes.values() if n.is_assistant) == Counter({Origin.SAMPLED: 5})


def test_a_streamed_per_call_record_with_two_interleaved_choices_gives_two_sampled_siblings() -> None:
    path = SAMPLES / "calls/streamed_chunks.jsonl"
    assert detect_format(path).name == "calls"
    (event,) = list(calls.READER.read(path))
    assert isinstance(event, ReadGraph)
    nodes = event.graph.sampled_nodes()
    parts = sorted((n.message.parts for n in nodes if isinstance(n.message, PartsMessage)), key=len)
    assert parts == [(TextPart(text="Four."),), (ReasoningPart(text="Pick one."), TextPart(text="Two."))]
    gens = sorted((event.graph.generations[n.id].token_ids, event.graph.generations[n.id].logprobs) for n in nodes)
    # The ids are the demo tokenizer's ids of the text (the linearizer checks that they decode to it).
    four = ((37, 78, 84, 81, 13), (-0.5, -0.01, -0.01, -0.01, -0.1))
    two = ((47, 72, 66, 74, 220, 78, 77, 68, 13, 51, 86, 78, 13), (-0.3, *[-0.01] * 8, -0.7, -0.01, -0.01, -0.2))
    assert gens == [four, two]
    assert len({n.parent for n in nodes}) == 1


# --------------------------------------------------------------------------- the real cassettes


def _independent_body(part: dict[str, Any]) -> Any:
    body = part.get("body")
    if isinstance(body, dict):
        body = body.get("string")
    if isinstance(body, bytes) and body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    if isinstance(body, bytes):
        body = body.decode()
    try:
        return json.loads(body)
    except (TypeError, json.JSONDecodeError):
        return body


def _independent_sampled(path: Path) -> int:
    """Sampled turns counted from the raw YAML: one per 2xx generation call whose response produced content
    (any choice/candidate with a message, Anthropic content, Converse output, or a stream with a content or
    tool-call delta)."""
    count = 0
    for interaction in yaml.safe_load(path.read_text(encoding="utf-8"))["interactions"]:
        uri = interaction["request"]["uri"].split("?")[0]
        if not any(uri.endswith(s) for s in ("completions", "/responses", "/messages", "Content", "/converse")):
            continue
        body = _independent_body(interaction["response"])
        if isinstance(body, dict):
            n = len(body.get("choices") or body.get("candidates") or []) or int(
                bool(body.get("content") or body.get("output"))
            )
        elif isinstance(body, list):  # a Gemini stream
            n = len({c.get("index", 0) for chunk in body for c in chunk.get("candidates", [])})
        else:  # SSE: the distinct choice indexes that carried a delta, or one Anthropic message
            data = [
                json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:") and "[DONE]" not in line
            ]
            indexes = {c["index"] for d in data for c in d.get("choices", []) if c.get("delta")}
            n = len(indexes) or int(any(d.get("type") == "message_start" for d in data))
        count += n
    return count


REAL_CASSETTES = {
    # file: sampled turns (counted independently below, pinned here)
    "cassettes_crewai/TestAnthropicNativeToolCalling.test_anthropic_agent_with_native_tool_calling.yaml": 2,
    "cassettes_crewai/TestAzureNativeToolCalling.test_azure_agent_with_native_tool_calling.yaml": 2,
    "cassettes_crewai/TestBedrockNativeToolCalling."
    "test_bedrock_parallel_native_tool_calling_test_agent_kickoff.yaml": 2,
    "cassettes_crewai/test_handle_streaming_tool_calls.yaml": 1,
    "cassettes_simonw_llm/llm-anthropic__test_tools.yaml": 2,
    "cassettes_simonw_llm/llm-gemini__test_tools.yaml": 3,
    "cassettes_simonw_llm/llm__test_responses_round_trips_encrypted_reasoning.yaml": 3,
    "cassettes_simonw_llm/llm__test_responses_tool_use.yaml": 2,
    "cassettes_simonw_llm/llm__test_tool_use_chain_of_two_calls.yaml": 3,
    "cassettes_simonw_llm/llm__test_tools_streaming_variant_a.yaml": 2,
}


@needs_shared
@pytest.mark.parametrize("name", sorted(REAL_CASSETTES))
def test_real_streamed_compressed_and_bedrock_cassettes_convert_with_the_independently_counted_turns(name: str) -> None:
    path = REAL / name
    assert _independent_sampled(path) == REAL_CASSETTES[name]
    assert detect_format(path).name == "cassettes"
    events = list(cassettes.READER.read(path))
    assert [str(e.error) for e in events if isinstance(e, ReadReject)] == []
    assert [e for e in events if isinstance(e, ReadSkip)] == []
    (graph,) = [e.graph for e in events if isinstance(e, ReadGraph)]
    assert len(graph.sampled_nodes()) == REAL_CASSETTES[name]


@needs_shared
def test_the_real_streamed_tool_call_is_reassembled_with_its_whole_arguments() -> None:
    path = REAL / "cassettes_crewai/test_handle_streaming_tool_calls.yaml"
    (graph,) = [e.graph for e in cassettes.READER.read(path) if isinstance(e, ReadGraph)]
    (node,) = graph.sampled_nodes()
    assert isinstance(node.message, OptionCallMessage)
    (call,) = node.message.calls
    assert (call.option_name, call.arguments) == ("get_weather", {"location": "New York, NY"})


def test_list_entries_a_provider_sends_whole_without_an_index_are_appended() -> None:
    note = {"type": "url_citation", "url": "https://example.org"}
    chunks = [
        _chunk([{"index": 0, "delta": {"role": "assistant", "content": "See", "annotations": [note]}}]),
        _chunk([{"index": 0, "delta": {"content": " this.", "annotations": [{**note, "url": "https://example.com"}]}}]),
    ]
    message = streams.chat_completion(chunks)["choices"][0]["message"]
    assert message["content"] == "See this."
    assert [a["url"] for a in message["annotations"]] == ["https://example.org", "https://example.com"]


def test_a_plain_text_body_of_an_unstreamed_endpoint_is_a_bad_response_not_a_stream(tmp_path: Path) -> None:
    interaction = {
        "request": {
            "uri": "https://x/v1/chat/completions",
            "body": json.dumps({"messages": [{"role": "user", "content": "a"}]}),
        },
        "response": {"status": {"code": 200}, "body": {"string": "method=POST pathname=/v1/chat/completions"}},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"interactions": [interaction]}))
    (event,) = list(cassettes.READER.read(path))
    assert isinstance(event, ReadReject) and event.error.code == "bad_response"


def test_an_sse_stream_with_a_stray_leading_space_before_data_still_reads_every_event() -> None:
    body = " " + _sse(CHAT_CHUNKS).replace("\ndata:", "\n  data:") + "data: [DONE]\n"
    assert streams.assemble("openai_chat", body) == CHAT_EXPECTED
