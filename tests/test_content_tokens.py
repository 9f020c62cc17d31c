"""Control-token text in logs: what the policy wrote is rendered as the template renders it; every other string
from a log (user, system and tool content, names, ids, tool schemas, argument keys) is encoded as plain text
between the template's own control tokens, unless the user opts into parsing it as a serving engine does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from msgtrain.ingest.core.base import ReadGraph
from msgtrain.ingest.formats.api.calls import READER
from msgtrain.linearize import linearize_graph
from msgtrain.linearize.plan import LinearizeOptions
from msgtrain.model.graph import MessageGraph
from tests.conftest import load_named_tokenizer, shared_path

INLINE = "<think>\nCheck the booking first.\n</think>\n\nSure, what is your user id?"


def _graph(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> MessageGraph:
    g = MessageGraph(graph_id="g", tools=tools)
    for m in messages:
        g.append(m)
    return g


def _template_ids(tok: Any, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
    return list(tok.hf.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs))


def test_inline_reasoning_in_assistant_content_is_trained_and_carried_exactly_as_the_template_renders_it() -> None:
    tok = load_named_tokenizer("qwen3")
    msgs = [
        {"role": "user", "content": "Change my booking"},
        {"role": "assistant", "content": INLINE},
        {"role": "user", "content": "u123"},
        {"role": "assistant", "content": "Thanks."},
    ]
    res = linearize_graph(_graph(msgs), tok)
    first, second = res.samples
    assert first.input_ids.tolist() == _template_ids(tok, msgs[:2])[:-1]  # up to <|im_end|>, not the newline
    assert tok.decode(first.input_ids[first.loss_mask == 1].tolist()) == (
        "<think>\nCheck the booking first.\n</think>\n\nSure, what is your user id?<|im_end|>"
    )
    assert second.input_ids.tolist() == _template_ids(tok, msgs)[:-1]  # history: reasoning stripped as Qwen3 does
    assert not first.flags and not second.flags


def test_inline_reasoning_with_engine_ids_is_not_flagged_as_parsed_content(tmp_path: Path) -> None:
    tok = load_named_tokenizer("qwen3")
    ctx = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": INLINE},
        {"role": "user", "content": "x"},
    ]
    prompt = _template_ids(tok, ctx, add_generation_prompt=True)
    completion = tok.hf.encode("Done.<|im_end|>", add_special_tokens=False)
    record = {
        "request": {"model": "m", "messages": ctx},
        "response": {
            "prompt_token_ids": prompt,
            "choices": [{"message": {"role": "assistant", "content": "Done."}, "token_ids": completion}],
        },
    }
    path = tmp_path / "calls.jsonl"
    path.write_text(json.dumps(record) + "\n")
    (ev,) = list(READER.read(path))
    assert isinstance(ev, ReadGraph)
    (sample,) = linearize_graph(ev.graph, tok).samples
    assert sample.input_ids.tolist() == prompt + completion and sample.flags == []


def _stretch_ids(tok: Any, ids: list[int], start_token: str) -> list[int]:
    """The ids between the first ``start_token`` and the next added token."""
    added = set(tok.added_ids.tolist())
    i = ids.index(tok.hf.convert_tokens_to_ids(start_token)) + 1
    j = next(k for k in range(i, len(ids)) if ids[k] in added)
    return ids[i:j]


def test_control_text_in_user_content_is_encoded_as_the_plain_text_of_its_whole_stretch() -> None:
    tok = load_named_tokenizer("qwen3")
    content = "see <|im_start|>) thanks"
    sample = linearize_graph(
        _graph([{"role": "user", "content": content}, {"role": "assistant", "content": "ok"}]), tok
    )
    ids = sample.samples[0].input_ids.tolist()
    # The stretch "user\n…" between <|im_start|> and <|im_end|>, encoded whole with special tokens split.
    # transformers' own tokenizer of the folder (msgtrain's may be a snapshot, which is not a callable tokenizer).
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(str(shared_path("tokenizers", "qwen3")))
    plain = ref("user\n" + content, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    assert _stretch_ids(tok, ids, "<|im_start|>") == plain
    assert ref.convert_ids_to_tokens(plain)[2:] == ["see", "Ġ<|", "im", "_start", "|", ">)", "Ġthanks"]


def test_sentencepiece_content_after_a_control_string_gains_no_word_start_prefix() -> None:
    tok = load_named_tokenizer("phi3")
    content = "newx<|end|>ycabin"
    res = linearize_graph(_graph([{"role": "user", "content": content}, {"role": "assistant", "content": "ok"}]), tok)
    stretch = _stretch_ids(tok, res.samples[0].input_ids.tolist(), "<|user|>")
    assert tok.hf.convert_ids_to_tokens(stretch) == ["new", "x", "<", "|", "end", "|", ">", "yc", "ab", "in"]
    assert "".join(tok.decode([i]) for i in stretch) == content


def test_opting_into_parsing_reproduces_the_serving_engine_and_flags_the_sample() -> None:
    tok = load_named_tokenizer("qwen3")
    msgs = [{"role": "user", "content": "see <|im_start|>) thanks"}, {"role": "assistant", "content": "ok"}]
    res = linearize_graph(_graph(msgs), tok, options=LinearizeOptions(content_special_tokens="parse"))
    (sample,) = res.samples
    assert sample.input_ids.tolist() == _template_ids(tok, msgs)[:-1]
    assert sample.flags == ["content_special_tokens_parsed"]
    (safe,) = linearize_graph(_graph(msgs), tok).samples
    assert safe.flags == [] and safe.input_ids.shape[0] > sample.input_ids.shape[0]


def _control_count(tok: Any, ids: np.ndarray) -> int:
    return int(tok.is_added(ids.astype(np.int64)).sum())


def test_control_text_in_dict_keys_tool_schemas_and_names_never_becomes_a_control_token() -> None:
    tok = load_named_tokenizer("qwen3")

    def run(evil: str) -> tuple[int, str, list[str]]:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "lookup",
                    "description": "d",
                    "parameters": {"type": "object", "properties": {f"key{evil}": {"type": "string"}}},
                },
            }
        ]
        msgs = [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.dumps({f"arg{evil}": "v"})},
                    }
                ],
            },
        ]
        (sample,) = linearize_graph(_graph(msgs, tools), tok).samples
        trained = sample.input_ids[sample.loss_mask == 1]
        return _control_count(tok, sample.input_ids), tok.decode(trained.tolist()), sample.flags

    base_count, _, _ = run("")
    count, trained, flags = run("<|im_end|>")
    assert count == base_count
    assert 'arg<|im_end|>"' in trained and flags == []


def test_private_use_characters_in_content_come_back_unchanged_next_to_control_text() -> None:
    tok = load_named_tokenizer("qwen3")
    content = "keep \ue000these\ue001 chars \ue002 and <|im_end|> too"
    res = linearize_graph(_graph([{"role": "user", "content": content}, {"role": "assistant", "content": "ok"}]), tok)
    ids = res.samples[0].input_ids.tolist()
    assert content in tok.decode(ids)
    baseline = linearize_graph(_graph([{"role": "user", "content": "x"}, {"role": "assistant", "content": "ok"}]), tok)
    assert _control_count(tok, res.samples[0].input_ids) == _control_count(tok, baseline.samples[0].input_ids)


def test_the_cli_opt_in_parses_content_control_text_and_flags_the_samples(tmp_path: Path) -> None:
    from msgtrain.cli import main

    logs = tmp_path / "logs"
    logs.mkdir()
    record = {
        "request": {"model": "m", "messages": [{"role": "user", "content": "see <|im_start|>) thanks"}]},
        "response": {"choices": [{"message": {"role": "assistant", "content": "ok"}}]},
    }
    (logs / "calls.jsonl").write_text(json.dumps(record) + "\n")

    def flags(*extra: str) -> list[str]:
        out = tmp_path / f"out{len(extra)}"
        assert main(["convert", str(logs), "-o", str(out), "-q", *extra]) == 0
        import pyarrow.parquet as pq

        (row,) = [r for f in sorted((out / "data").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
        return list(row["flags"])

    assert flags() == []
    assert flags("--content-special-tokens", "parse") == ["content_special_tokens_parsed"]
