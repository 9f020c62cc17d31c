"""The prompt size a reply's API reported, read as a range where the usage does not say whether its cached tokens
are a part of the prompt count (msgtrain.model.completeness.reported_prompt_range), and the checks that compare it:
a prompt that shrank along a branch, and usage_mismatch. Usages are in the shapes their writers give them (Anthropic's
Messages API, OpenAI's chat completions, LiteLLM, Inspect's ModelUsage per provider, OpenTelemetry GenAI)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from msgtrain.ingest import boundary
from msgtrain.model.completeness import carry_replies_after_shrunk_prompt, reported_prompt_range
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.message import Generation, PartsMessage, TextPart, text_message
from msgtrain.run.parts import convert_file
from tests.unseen_books import SETTINGS


def _reply(text: str, usage: dict[str, Any]) -> PartsMessage:
    return PartsMessage(
        parts=(TextPart(text=text),),
        role_hint_for_llm="assistant",
        metadata={"usage": usage},
        generation=Generation(model="m-1"),
    )


def _loop(usages: list[dict[str, Any]]) -> MessageGraph:
    graph = MessageGraph(graph_id="g")
    graph.append(text_message("user", "Go on."))
    for i, usage in enumerate(usages):
        graph.append(_reply(f"step {i}", usage))
        graph.append(text_message("user", f"result {i}"))
    return graph


def _origins(graph: MessageGraph) -> list[str]:
    return [n.origin.value for n in graph.nodes.values() if n.is_assistant]


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        # Anthropic's Messages API: the cache is counted apart from input_tokens (its own keys say so)
        (
            {
                "input_tokens": 6,
                "cache_read_input_tokens": 3482,
                "cache_creation_input_tokens": 1158,
                "output_tokens": 40,
                "service_tier": "standard",
            },
            (4646, 4646),
        ),
        # LiteLLM's usage of an Anthropic model: prompt_tokens already holds the cache it also lists
        (
            {
                "prompt_tokens": 4646,
                "completion_tokens": 40,
                "total_tokens": 4686,
                "cache_read_input_tokens": 3482,
                "cache_creation_input_tokens": 1158,
            },
            (4646, 4646),
        ),
        # Inspect, OpenAI provider: input_tokens is the whole prompt, the cache read a part of it (total says so)
        (
            {"input_tokens": 3100, "output_tokens": 50, "total_tokens": 3150, "input_tokens_cache_read": 2944},
            (3100, 3100),
        ),
        # Inspect, Anthropic provider: the cache apart (the total counts it on top)
        (
            {"input_tokens": 10, "output_tokens": 50, "total_tokens": 3150, "input_tokens_cache_read": 3090},
            (3100, 3100),
        ),
        # OpenTelemetry GenAI usage, no total: either reading is possible
        ({"input_tokens": 3100, "output_tokens": 50, "cache_read_input_tokens": 2944}, (3100, 6044)),
        # no cache at all, or a count that is not a finite positive number
        ({"input_tokens": 812}, (812, 812)),
        ({"input_tokens": math.nan}, None),
        ({"input_tokens": math.inf}, None),
        ({"input_tokens": 0}, None),
        ({"input_tokens": 900, "cache_read_input_tokens": math.nan, "service_tier": "standard"}, (900, 900)),
    ],
)
def test_reported_prompt_range_reads_who_wrote_the_usage(usage: dict[str, Any], expected: Any) -> None:
    assert reported_prompt_range({"usage": usage}) == expected


def test_openai_cache_hits_and_misses_alternating_are_no_shrink() -> None:
    # an Inspect eval of an OpenAI model: the prompt grows 3000 -> 3300; the provider's cache hit on calls 2 and 4
    sizes, hits = [3000, 3100, 3200, 3300], [0, 2944, 0, 3200]
    with_total = [
        {"input_tokens": n, "output_tokens": 20, "total_tokens": n + 20, "input_tokens_cache_read": c}
        for n, c in zip(sizes, hits, strict=True)
    ]
    without_total = [{"input_tokens": n, "cache_read_input_tokens": c} for n, c in zip(sizes, hits, strict=True)]
    for usages in (with_total, without_total):
        graph = _loop(usages)
        assert carry_replies_after_shrunk_prompt(graph) == 0
        assert _origins(graph) == ["sampled"] * 4


def test_a_cut_after_an_anthropic_cache_hit_is_still_found() -> None:
    # Anthropic's own usage: 4646 tokens sent (mostly cached), then a request of 2000 uncached tokens: the history
    # was cut, whichever way the cache is read
    usages = [
        {"input_tokens": 1200, "output_tokens": 30, "service_tier": "standard"},
        {"input_tokens": 6, "cache_read_input_tokens": 4640, "output_tokens": 30, "service_tier": "standard"},
        {"input_tokens": 2000, "output_tokens": 30, "service_tier": "standard"},
    ]
    graph = _loop(usages)
    assert carry_replies_after_shrunk_prompt(graph) == 1
    assert _origins(graph) == ["sampled", "sampled", "carried"]
    assert all(n.origin is Origin.CARRIED for n in graph.nodes.values() if "why_not_trained" in n.message.metadata)


def test_a_shrink_is_found_only_below_the_earlier_smallest_reading() -> None:
    # an OpenTelemetry usage without a total: 6044 could be 3100; the next prompt of 3000 is within the tolerance of
    # 3100, so not a cut; 2000 is below either reading
    graph = _loop([{"input_tokens": 3100, "cache_read_input_tokens": 2944}, {"input_tokens": 3050}])
    assert carry_replies_after_shrunk_prompt(graph) == 0
    graph = _loop([{"input_tokens": 3100, "cache_read_input_tokens": 2944}, {"input_tokens": 2000}])
    assert carry_replies_after_shrunk_prompt(graph) == 1


def _inspect_like_log(tmp_path: Path, usage: str) -> Path:
    messages = [
        {"role": "user", "content": "Count to two."},
        {"role": "assistant", "content": "One.", "usage": {"prompt_tokens": 10}},
        {"role": "user", "content": "Go on."},
        {"role": "assistant", "content": "Two.", "usage": json.loads(usage)},
    ]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps({"messages": messages}).replace('"__USAGE__"', usage))
    return path


@pytest.mark.parametrize("usage", ['{"input_tokens": NaN}', '{"input_tokens": 1e999, "cache_read_input_tokens": 3}'])
def test_a_usage_count_that_is_not_finite_is_no_count(tmp_path: Path, usage: str) -> None:
    path = _inspect_like_log(tmp_path, usage)
    _, stats, rejects = convert_file(path, SETTINGS)
    assert not rejects and stats.turns_trained == 2


def test_a_failing_prompt_size_check_costs_its_graph_not_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(graph: MessageGraph) -> int:
        raise RuntimeError("check failed")

    monkeypatch.setattr(boundary, "carry_replies_after_shrunk_prompt", broken)
    path = _inspect_like_log(tmp_path, '{"prompt_tokens": 20}')
    _, stats, rejects = convert_file(path, SETTINGS)
    assert stats.turns_trained == 0
    (reject,) = [json.loads(r) for r in rejects]
    assert reject["reason"] == "reader_error" and "prompt-size check" in reject["hint"]
