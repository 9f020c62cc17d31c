"""A reply the engine stopped at its token limit never trains the end-of-turn token it did not sample.

Engines report why a generation stopped: OpenAI / vLLM ``finish_reason: "length"``, Anthropic ``stop_reason:
"max_tokens"``, the Responses API's ``incomplete_details.reason: "max_output_tokens"``... A template closes every
assistant message with its end-of-turn token (ChatML's ``<|im_end|>``), so a rendered completion always ends with one;
for a reply cut at the limit the model never sampled it, and training it teaches the model to stop where it did not.
The rule (``Plan._limit_stop``): the token stays in the sequence (the next call was sent the message closed by it) but
its loss mask is 0, the turn's span ends before it, and the sample is flagged ``stopped_at_token_limit``. A reply that
stopped on its own trains its end token as before (the control case of each test).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from msgtrain.linearize.loading import load_tokenizer
from msgtrain.model.message import Generation
from msgtrain.run.config import ConvertConfig
from msgtrain.run.pipeline import convert

END = "<|im_end|>"


def _rows(inputs: Path, out: Path) -> list[dict[str, Any]]:
    convert(ConvertConfig(inputs=(inputs,), output=out))
    rows: list[dict[str, Any]] = []
    for f in sorted((out / "data").glob("*.parquet")):
        rows += pq.read_table(f, columns=["input_ids", "loss_mask", "turn_spans", "flags"]).to_pylist()
    return rows


def _trained_pieces(rows: list[dict[str, Any]]) -> list[tuple[str, bool, list[str]]]:
    """(trained text of each turn, whether the end token right after that text is trained, the sample's flags)."""
    tok = load_tokenizer(None).base
    end_id = tok.convert_tokens_to_ids(END)
    out = []
    for row in rows:
        ids, mask = row["input_ids"], row["loss_mask"]
        for span in row["turn_spans"]:
            a, b = span["start"], span["end"]
            assert all(mask[a:b]), "a turn's span is trained whole"
            end = b if b < len(ids) and ids[b] == end_id else b - 1
            assert ids[end] == end_id, "the turn's end token is right after (or at the end of) its span"
            out.append((tok.decode(ids[a:end]), bool(mask[end]), sorted(row["flags"])))
    return out


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _chat_call(messages: list[dict[str, Any]], reply: str, finish: str) -> dict[str, Any]:
    return {
        "request": {"model": "m", "messages": messages},
        "response": {
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": finish}],
        },
    }


@pytest.mark.parametrize("finish", ["length", "stop"])
def test_per_call_log_reply_cut_at_the_limit_trains_its_text_not_the_end_token(tmp_path: Path, finish: str) -> None:
    first = [{"role": "user", "content": "Write a long poem about the sea."}]
    second = [*first, {"role": "assistant", "content": "The sea is wide, the sea is"}]
    second.append({"role": "user", "content": "Go on."})
    log = _jsonl(
        tmp_path / "in" / "calls.jsonl",
        [_chat_call(first, "The sea is wide, the sea is", finish), _chat_call(second, "deep and grey.", "stop")],
    )
    pieces = _trained_pieces(_rows(log, tmp_path / "out"))
    assert [(text, end) for text, end, _ in pieces] == [
        ("The sea is wide, the sea is", finish == "stop"),  # the cut reply's <|im_end|> is context only
        ("deep and grey.", True),
    ]
    assert ("stopped_at_token_limit" in pieces[0][2]) is (finish == "length")


@pytest.mark.parametrize("finish", ["max_tokens", "end_turn"])
def test_anthropic_max_tokens_is_a_limit_stop(tmp_path: Path, finish: str) -> None:
    record = {
        "request": {"model": "claude", "max_tokens": 8, "messages": [{"role": "user", "content": "Count to ten."}]},
        "response": {
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": [{"type": "text", "text": "One, two, three, four"}],
            "stop_reason": finish,
        },
    }
    pieces = _trained_pieces(_rows(_jsonl(tmp_path / "in" / "a.jsonl", [record]), tmp_path / "out"))
    assert [(text, end) for text, end, _ in pieces] == [("One, two, three, four", finish == "end_turn")]


@pytest.mark.parametrize("finish", ["length", "stop"])
def test_structural_reader_keeps_the_finish_reason_of_a_response_beside_its_prompt(tmp_path: Path, finish: str) -> None:
    """A record no reader owns, pairing the messages sent with the chat completion they got (an eval harness's
    prediction): the choice's finish reason reaches the linearizer."""
    records = [
        {
            "sample_id": f"q{i}",
            "input": [{"role": "user", "content": f"Question {i}?"}],
            "response": {
                "id": f"c{i}",
                "object": "chat.completion",
                "model": "m",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": f"Answer {i} is"}, "finish_reason": finish}
                ],
            },
            "score": 1,
        }
        for i in range(2)
    ]
    pieces = _trained_pieces(_rows(_jsonl(tmp_path / "in" / "eval.jsonl", records), tmp_path / "out"))
    assert sorted((text, end) for text, end, _ in pieces) == [
        ("Answer 0 is", finish == "stop"),
        ("Answer 1 is", finish == "stop"),
    ]


@pytest.mark.parametrize(
    ("reason", "limit"),
    [
        ("length", True),
        ("MAX_TOKENS", True),  # Gemini, Cohere
        ("max_output_tokens", True),  # OpenAI Responses incomplete_details.reason
        ("model_context_window_exceeded", True),
        ("stop", False),
        ("end_turn", False),
        ("tool_calls", False),
        ("STOP", False),
        (None, False),
    ],
)
def test_limit_finish_reasons(reason: str | None, limit: bool) -> None:
    assert Generation(finish_reason=reason).stopped_at_limit is limit
