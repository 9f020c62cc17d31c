"""Readers of conversation-list formats and the seed frameworks (issue 4).

Golden structures below were reviewed by hand against the sample files in sample_logs/. Counts on the real
third-party logs in ../shared are computed here from the raw JSON/YAML, independently of the readers.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.common.head_shape import head_shape
from msgtrain.ingest.core.base import ReadEvent, ReadGraph, ReadReject, ReadSkip, read_head
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.formats.api import anthropic, cassettes, openai_responses
from msgtrain.ingest.formats.chats import options
from msgtrain.ingest.formats.sessions import go_agent, lionagi, marsys
from msgtrain.ingest.registry import REGISTRY, unit_directories
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.graphlog import load_graphs, subgraphs
from msgtrain.model.message import MediaPart, OptionCallMessage, OptionResultMessage, PartsMessage, ReasoningPart
from msgtrain.model.validate import validate_graph

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
SHARED = Path(__file__).resolve().parents[2] / "shared"
REAL = SHARED / "real_logs"
needs_shared = pytest.mark.skipif(not REAL.is_dir(), reason="../shared not present")

MY_READERS = {
    r.name: r
    for r in (
        REGISTRY["openai_chat"],  # a shipped mapping (msgtrain/ingest/mappings/openai_chat.json)
        openai_responses.READER,
        anthropic.READER,
        cassettes.READER,
        REGISTRY["sharegpt"],  # a shipped mapping (msgtrain/ingest/mappings/sharegpt.json)
        options.READER,
        go_agent.READER,
        marsys.READER,
        lionagi.READER,
    )
}
SPECIFIC = [name for name in MY_READERS if name != "openai_chat"]

_CODE = {"system": "S", "user": "U", "assistant": "A", "tool": "T"}
_MARK = {"sampled": "*", "carried": "~", "injected": "!", "context": "", "edited": "e", "prefill": "p"}

# file → reader, and per produced graph its branches as role+origin codes (* sampled, ~ carried, ! injected).
GOLDEN: dict[str, tuple[str, list[list[str]]]] = {
    "openai_chat/conversations.jsonl": (
        "openai_chat",
        [["S U A* T T A* U A* T A*"], ["S U A*"], ["S U A* T A*"], ["U A~ U A* T A*"]],
    ),
    "openai_responses/items.jsonl": ("openai_responses", [["S U A* T T A* U A*"]]),
    "openai_responses/calls.jsonl": ("openai_responses", [["S U A* T A*"], ["U A*"]]),
    "anthropic/messages.json": ("anthropic", [["S U A* U A*"], ["S U A* T A*"]]),
    "anthropic/request_response.jsonl": ("anthropic", [["S U A* T T A* T A*"], ["U A*"]]),
    "cassettes/weather_tools.yaml": (
        "cassettes",
        [["S U A*", "S U A* T A*", "S U A* T A*", "S U A*", "S U A*"]],
    ),
    # Streamed, compressed and Bedrock calls (issue 15): reassembled, each response sampled in its request.
    "cassettes/streamed_and_compressed.yaml": ("cassettes", [["S U A* T A*", "S U A*", "U A*", "S U A*"]]),
    "cassettes/bedrock_converse.yaml": ("cassettes", [["S U A* T A*", "U A*"]]),
    "anthropic/streamed_events.jsonl": ("anthropic", [["S U A*"]]),
    "openai_responses/streamed_events.jsonl": ("openai_responses", [["S U A*"]]),
    "sharegpt/glaive_style.json": ("sharegpt", [["S U A* T A* U A* T T A*"], ["U A* U A*"], ["U A*"]]),
    "sharegpt/llamafactory_messages.jsonl": ("sharegpt", [["S U A* T T A*"], ["U A~ U A*"]]),
    "options/research_agent.jsonl": ("options", [["S U A* T A* T T A*"], ["U A*"]]),
    "go_agent/thread_state.json": ("go_agent", [["S U A* T A* U A* T T A*"], ["S U A* T A*"]]),
    "marsys/orchestrator_memory.json": ("marsys", [["S U A* T U U A* T A*"], ["S U A* U"]]),
    "lionagi/branch_messages.json": ("lionagi", [["S U A* A! T T U A*"]]),
}


def _events(reader_name: str, path: Path) -> list[ReadEvent]:
    return list(read_events(MY_READERS[reader_name], path))


def _graphs(events: list[ReadEvent]) -> list[MessageGraph]:
    return [e.graph for e in events if isinstance(e, ReadGraph)]


def _shape(graph: MessageGraph) -> list[str]:
    return [" ".join(_CODE[n.message.role] + _MARK[n.origin.value] for n in b.nodes) for b in graph.branches()]


def _read_sample(rel: str) -> tuple[list[ReadEvent], list[MessageGraph]]:
    name, _ = GOLDEN[rel]
    events = _events(name, SAMPLES / rel)
    return events, _graphs(events)


# --------------------------------------------------------------------------- samples: golden structure


@pytest.mark.parametrize("rel", sorted(GOLDEN))
def test_sample_converts_to_the_reviewed_graph_structure(rel: str) -> None:
    _, expected = GOLDEN[rel]
    events, graphs = _read_sample(rel)
    assert not [e for e in events if isinstance(e, ReadReject)], "a hand-made sample must not be rejected"
    assert [_shape(g) for g in graphs] == expected


@pytest.mark.parametrize("rel", sorted(GOLDEN))
def test_sample_graphs_survive_a_native_graph_log_round_trip(rel: str, tmp_path: Path) -> None:
    _, graphs = _read_sample(rel)
    out = tmp_path / "graphs.jsonl"
    for g in graphs:
        g.save(out, append=True)
    loaded = list(load_graphs(out))
    assert [g.graph_id for g in loaded] == [g.graph_id for g in graphs]
    for before, after in zip(graphs, loaded, strict=True):
        assert set(after.nodes) == set(before.nodes)
        assert {n: after.nodes[n].origin for n in after.nodes} == {n: before.nodes[n].origin for n in before.nodes}
        assert after.generations == before.generations


@pytest.mark.parametrize("rel", sorted(GOLDEN))
def test_sample_graphs_break_no_pairing_rule(rel: str) -> None:
    _, graphs = _read_sample(rel)
    for g in graphs:
        problems = [p for p in validate_graph(g) if p.code in ("unpaired_result", "duplicate_id", "dangling_parent")]
        assert problems == []


@pytest.mark.parametrize("rel", sorted(GOLDEN))
def test_reading_a_sample_twice_gives_the_same_graph_ids(rel: str) -> None:
    _, first = _read_sample(rel)
    _, second = _read_sample(rel)
    assert [g.graph_id for g in first] == [g.graph_id for g in second]
    assert all("#" in g.graph_id or ":" in g.graph_id for g in first)


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize("rel", sorted(GOLDEN))
def test_each_sample_is_detected_as_its_own_format(rel: str) -> None:
    assert detect_format(SAMPLES / rel).name == GOLDEN[rel][0]


def _all_sample_files() -> list[Path]:
    """Every sample file an input can be: not the files of a folder a directory reader reads whole (a storage folder's
    message files are records of it, never handed to a detector)."""
    units = unit_directories(SAMPLES)
    return sorted(p for p in SAMPLES.rglob("*") if p.is_file() and not any(u in p.parents for u in units))


@pytest.mark.parametrize("name", SPECIFIC)
def test_a_specific_detector_claims_no_sample_of_another_format(name: str) -> None:
    reader = MY_READERS[name]
    claimed = []
    for path in _all_sample_files():
        own = GOLDEN.get(str(path.relative_to(SAMPLES)), ("", []))[0]
        if own != name and reader.detect(path, read_head(path)):
            claimed.append(str(path.relative_to(SAMPLES)))
    assert claimed == []


def test_the_generic_openai_detector_claims_no_agent_session_or_call_log_sample() -> None:
    # It may claim other message-list samples (Anthropic, Responses items, LLaMA-Factory): the registry puts
    # their specific readers first, which test_each_sample_is_detected_as_its_own_format checks.
    claimed = {
        str(p.relative_to(SAMPLES)) for p in _all_sample_files() if REGISTRY["openai_chat"].detect(p, read_head(p))
    }
    assert claimed <= set(GOLDEN), claimed - set(GOLDEN)
    assert "openai_chat/conversations.jsonl" in claimed


def test_my_specific_readers_come_before_the_per_call_logs_and_generic_lists_come_last() -> None:
    detect_format(SAMPLES / "openai_chat/conversations.jsonl")  # imports the registry
    order = list(REGISTRY)
    for name in ("options", "cassettes", "lionagi", "marsys", "go_agent", "anthropic", "openai_responses"):
        assert order.index(name) < order.index("calls")
    assert order[-3:] == ["sharegpt", "openai_chat", "structural"]  # the shape fallback after every format


def test_head_shape_reads_paths_from_a_truncated_pretty_printed_array() -> None:
    doc = json.dumps([{"traj": [{"role": "user", "content": "x" * 50}, {"role": "assistant"}]}] * 50, indent=2)
    shape = head_shape(doc[: len(doc) // 3].encode())
    assert shape.layout == "array"
    assert shape.values_at(".traj[].role") == {"user", "assistant"}


def test_head_shape_of_non_json_bytes_is_other_and_has_no_paths() -> None:
    shape = head_shape(b"interactions:\n- request: {}\n")
    assert shape.layout == "other" and not shape.paths


# --------------------------------------------------------------------------- mapping details on the samples


def test_openai_chat_keeps_argument_text_verbatim_and_dict_arguments_as_dicts() -> None:
    _, graphs = _read_sample("openai_chat/conversations.jsonl")
    call = next(m for m in graphs[0].messages() if isinstance(m, OptionCallMessage))
    by_id = {c.invocation_id: c for c in call.calls}
    assert by_id["call_w1"].raw_arguments == '{"city": "Lisbon", "unit": "c"}'
    assert by_id["call_t1"].raw_arguments is None and by_id["call_t1"].arguments == {"city": "Lisbon"}
    assert call.text == "Let me check both for Lisbon."
    null_content = [m for m in graphs[0].messages() if isinstance(m, OptionCallMessage)][1]
    assert null_content.parts == ()


def test_openai_chat_maps_developer_images_and_reasoning_and_template_kwargs() -> None:
    _, graphs = _read_sample("openai_chat/conversations.jsonl")
    g = graphs[1]
    system, user, answer = g.messages()
    assert system.role == "system" and system.metadata["openai_role"] == "developer"
    media = [p for p in user.parts if isinstance(p, MediaPart)] if isinstance(user, PartsMessage) else []
    assert [p.url[:22] for p in media] == ["https://example.com/re", "data:image/png;base64,"]
    assert answer.reasoning == "Receipt A totals 18.40, receipt B totals 23.10, so B is higher."
    assert g.env.kwargs == {"enable_thinking": True}


def test_openai_chat_carries_record_fields_as_extras_and_weight_zero_turns_as_carried() -> None:
    events, graphs = _read_sample("openai_chat/conversations.jsonl")
    extras = [e.extras for e in events if isinstance(e, ReadGraph)]
    assert extras[0] == {"task_id": "weather-001", "reward": 1.0}
    assert extras[2]["reward"] == 0.0 and extras[2]["info"]["task"]["user_id"] == "ana_silva_1"
    legacy = graphs[3]
    call = next(m for m in legacy.messages() if isinstance(m, OptionCallMessage))
    result = next(m for m in legacy.messages() if isinstance(m, OptionResultMessage))
    assert result.result.invocation_id == call.calls[0].invocation_id == "function_call_3"
    assert legacy.env.tools[0]["function"]["name"] == "lookup_order"


def test_responses_summaries_are_redacted_reasoning_and_parallel_calls_form_one_turn() -> None:
    _, graphs = _read_sample("openai_responses/items.jsonl")
    turn = next(m for m in graphs[0].messages() if isinstance(m, OptionCallMessage))
    assert [c.invocation_id for c in turn.calls] == ["call_jpy", "call_usd"]
    reasoning = next(p for p in turn.parts if isinstance(p, ReasoningPart))
    assert reasoning.redacted and reasoning.signature == "gAAAAABexampleEncryptedReasoningPayload=="
    assert turn.reasoning is None  # a summary is never rendered as the policy's own reasoning


def test_responses_previous_response_id_continues_the_recorded_context() -> None:
    _, graphs = _read_sample("openai_responses/calls.jsonl")
    (branch,) = graphs[0].branches()
    assert branch.nodes[0].message.text == "You are a flight-status bot."
    assert [n.origin for n in branch.nodes].count(Origin.SAMPLED) == 2
    gens = [graphs[0].generation(n.id) for n in branch.nodes if n.sampled]
    assert [g.created for g in gens if g] == [1764000000, 1764000004]


def test_anthropic_blocks_map_to_reasoning_errors_media_and_openai_tool_schemas() -> None:
    _, graphs = _read_sample("anthropic/request_response.jsonl")
    msgs = graphs[0].messages()
    first = msgs[2]
    assert isinstance(first, OptionCallMessage) and len(first.calls) == 2
    assert first.parts[0] == ReasoningPart(
        text="I need the row count from orders for last week and the doc page for the shipping table. Both can "
        "run in parallel.",
        signature="EuYBCkQYAiJAsig-example-signature-1",
    )
    results = [m for m in msgs if isinstance(m, OptionResultMessage)]
    assert [r.result.is_error for r in results] == [True, False, False]
    assert results[1].result.result.startswith("docs/warehouse/shipping.md")
    assert graphs[0].env.tools[0] == {
        "type": "function",
        "function": {
            "name": "search_docs",
            "description": "Search the internal documentation.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
    image_turn, answer = graphs[1].messages()
    assert [p.url[:15] for p in image_turn.parts if isinstance(p, MediaPart)] == [
        "data:image/png;",
        "https://example",
    ]
    assert isinstance(answer, PartsMessage) and answer.parts[0] == ReasoningPart(
        text="", signature=answer.parts[0].signature, redacted=True
    )


def test_cassette_skips_non_generation_and_error_calls_and_builds_one_graph() -> None:
    events = _events("cassettes", SAMPLES / "cassettes/weather_tools.yaml")
    skips = [(e.source.record, e.reason) for e in events if isinstance(e, ReadSkip)]
    assert skips == [("interaction 0", "not_a_generation_call"), ("interaction 3", "error_response")]
    (graph_event,) = [e for e in events if isinstance(e, ReadGraph)]
    assert graph_event.records == 6
    g = graph_event.graph
    openai_root = [n for n in g.nodes.values() if n.parent is None and n.message.text == "You are a weather assistant."]
    (root,) = openai_root
    first_user = g.children[root.id]
    assert len(g.children[first_user[0]]) == 2  # n=2 choices are two sampled siblings of one context


def test_cassette_gemini_ids_are_positional_and_engine_token_ids_stay_out_of_generation() -> None:
    events = _events("cassettes", SAMPLES / "cassettes/weather_tools.yaml")
    g = _graphs(events)[0]
    calls = [n for n in g.nodes.values() if isinstance(n.message, OptionCallMessage)]
    gemini = [n for n in calls if n.message.calls[0].invocation_id.startswith("gemini_call_")]
    assert [n.message.calls[0].invocation_id for n in gemini] == ["gemini_call_1_0"]
    assert gemini[0].origin is Origin.SAMPLED  # repeated in the next request's history: still one node
    final = next(n for n in g.nodes.values() if n.message.text.startswith("Yes — about 12 mm"))
    assert final.message.reasoning == "12 mm of rain is forecast, so yes."
    assert final.message.metadata["engine_tokens"]["token_ids"] == [8438, 2345]
    generation = g.generation(final.id)
    assert generation is not None and generation.token_ids is None and generation.model == "gemini-2.5-flash"


def test_sharegpt_splits_one_observation_over_parallel_calls_and_places_media() -> None:
    _, graphs = _read_sample("sharegpt/glaive_style.json")
    results = [m for m in graphs[0].messages() if isinstance(m, OptionResultMessage)]
    assert [(r.result.invocation_id, r.result.result) for r in results] == [
        ("call_1_0", '{"rate": 0.92}'),
        ("call_5_0", {"price": 227.5}),
        ("call_5_1", {"price": 431.2}),
    ]
    assert graphs[0].env.tools[1]["function"]["name"] == "get_stock_price"
    user_turns = [m for m in graphs[1].messages() if m.role == "user"]
    kinds = [[type(p).__name__ for p in m.parts] for m in user_turns if isinstance(m, PartsMessage)]
    assert kinds == [["MediaPart", "TextPart"], ["TextPart", "MediaPart"]]
    assert [p.url for m in user_turns for p in m.parts if isinstance(p, MediaPart)] == [
        "images/dog_1.jpg",
        "images/dog_2.jpg",
    ]


def test_llamafactory_reasoning_and_tool_call_parts_map_to_one_assistant_message() -> None:
    _, graphs = _read_sample("sharegpt/llamafactory_messages.jsonl")
    turn = graphs[0].messages()[2]
    assert isinstance(turn, OptionCallMessage)
    assert turn.reasoning == "Two independent conversions; call the tool twice in parallel."
    assert [c.arguments for c in turn.calls] == [
        {"value": 5, "from": "mi", "to": "km"},
        {"value": 10, "from": "lb", "to": "kg"},
    ]


def test_options_messages_keep_policies_generation_and_nested_subgraphs() -> None:
    _, graphs = _read_sample("options/research_agent.jsonl")
    g = graphs[0]
    assert {n.message.policy for n in g.sampled_nodes()} == {"researcher"}
    assert [s.graph_id for s in subgraphs(g)] == ["summarizer-sub-1"]
    (gen,) = g.generations.values()
    assert gen.model == "qwen3-8b" and gen.finish_reason == "tool_calls"
    error = next(m for m in g.messages() if isinstance(m, OptionResultMessage) and m.result.is_error)
    assert error.result.error_type == "HTTPError"


def test_marsys_agent_call_is_rendered_as_a_request_and_errors_answer_their_call() -> None:
    _, graphs = _read_sample("marsys/orchestrator_memory.json")
    msgs = graphs[0].messages()
    agent_call = next(m for m in msgs if m.metadata.get("marsys_role") == "agent_call")
    assert agent_call.text == "[Request from orchestrator_agent]: Research quantum computing basics"
    error = next(m for m in msgs if isinstance(m, OptionResultMessage) and m.result.is_error)
    assert (error.result.invocation_id, error.result.error_type) == ("call_2", "TimeoutError")
    assert {n.message.policy for n in graphs[0].sampled_nodes()} == {"orchestrator_agent"}


def test_lionagi_action_requests_are_injected_and_paired_through_their_ids() -> None:
    _, graphs = _read_sample("lionagi/branch_messages.json")
    g = graphs[0]
    requests = [n for n in g.nodes.values() if isinstance(n.message, OptionCallMessage)]
    assert len(requests) == 1 and requests[0].origin is Origin.INJECTED
    ids = [c.invocation_id for c in requests[0].message.calls]
    results = [m.result for m in g.messages() if isinstance(m, OptionResultMessage)]
    assert [r.invocation_id for r in results] == ids and [r.result for r in results] == [7.2, 55.2]
    instruction = g.messages()[1]
    assert instruction.text.startswith("## Guidance\nUse the calculator action.\n\n## Instruction\n")
    sampled = g.sampled_nodes()
    assert g.generation(sampled[0].id) is not None and g.generation(sampled[0].id).model == "gpt-4o-2024-08-06"


def test_go_agent_state_keeps_thread_id_and_file_names_but_not_file_contents() -> None:
    events, graphs = _read_sample("go_agent/thread_state.json")
    extras = next(e.extras for e in events if isinstance(e, ReadGraph))
    assert extras["thread_id"] == "th_7f3a" and extras["file_names"] == ["/workspace/notes.md"]
    assert "files" not in extras
    assert graphs[0].metadata["hook_injections_not_logged"] is True


# --------------------------------------------------------------------------- rejects and accounting


def _account(events: list[ReadEvent]) -> int:
    total = 0
    for e in events:
        # a reject counts the records it stands for: a gap inside a converted record counts none
        total += e.records if isinstance(e, ReadGraph) else e.count
    return total


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_malformed_mixed_openai_file_rejects_each_bad_record_and_accounts_for_every_line(tmp_path: Path) -> None:
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    lines = [
        json.dumps(good),
        '{"messages": [{"role": "user", "content": "unterminated"}',
        json.dumps({"messages": [{"role": "wizard", "content": "x"}]}),
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "tool", "tool_call_id": "nope", "name": "f", "content": "r"},
                ]
            }
        ),
        "",
        json.dumps({"messages": []}),
        "42",
        json.dumps(good),
    ]
    path = _write_lines(tmp_path / "mixed.jsonl", lines)
    path.write_bytes(path.read_bytes() + b'{"messages": [{"role": "user"')  # a truncated last line
    events = list(read_events(REGISTRY["openai_chat"], path))
    codes = [(e.source.record, e.error.code) for e in events if isinstance(e, ReadReject)]
    assert codes == [
        ("line 2", "bad_json"),
        ("line 3", "unknown_role"),
        ("line 4", "unpaired_result"),
        ("line 7", "not_a_conversation"),
        ("line 9", "truncated_line"),
    ]
    assert [(e.source.record, e.reason) for e in events if isinstance(e, ReadSkip)] == [
        ("line 6", "empty_conversation")
    ]
    assert [e.source.record for e in events if isinstance(e, ReadGraph)] == ["line 1", "line 8"]
    assert _account(events) == 8  # nine lines, one blank
    reject = next(e for e in events if isinstance(e, ReadReject) and e.error.code == "unpaired_result")
    assert str(reject.error).startswith(f"{path}:4 $.messages[1]: tool result (id 'nope') answers no open tool call")
    assert reject.excerpt.startswith('{"messages"')


def test_sharegpt_rejects_ambiguous_results_media_mismatches_and_broken_preference_pairs(tmp_path: Path) -> None:
    calls = json.dumps([{"name": "f", "arguments": {}}, {"name": "f", "arguments": {"x": 1}}])
    records = [
        {
            "conversations": [
                {"from": "human", "value": "q"},
                {"from": "function_call", "value": calls},
                {"from": "observation", "value": "both done"},
            ]
        },
        {
            "conversations": [{"from": "human", "value": "<image><image>?"}, {"from": "gpt", "value": "a"}],
            "images": ["one.png"],
        },
        {
            "conversations": [{"from": "human", "value": "q"}],
            "chosen": {"from": "gpt", "value": "a"},
            "rejected": 3,  # a preference pair whose rejected side is no reply
        },
        {"conversations": [{"from": "human", "value": "q"}, {"from": "observation", "value": "orphan"}]},
        {"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": "{not json"}]},
        {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "fine"}]},
    ]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    events = list(read_events(REGISTRY["sharegpt"], path))
    assert [(e.source.record, e.error.code) for e in events if isinstance(e, ReadReject)] == [
        ("item 0", "ambiguous_results"),
        ("item 1", "media_mismatch"),
        ("item 2", "bad_preference"),
        ("item 3", "unpaired_result"),
        ("item 4", "bad_json_field"),
    ]
    assert _account(events) == len(records)


def test_a_cassette_interaction_with_an_unpaired_result_is_rejected_and_the_rest_still_builds(tmp_path: Path) -> None:
    def chat(messages: list[dict[str, Any]], answer: str) -> dict[str, Any]:
        return {
            "request": {
                "method": "POST",
                "uri": "https://api.openai.com/v1/chat/completions",
                "parsed_body": {"model": "m", "messages": messages},
            },
            "response": {
                "status": {"code": 200},
                "parsed_body": {
                    "model": "m",
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer}}
                    ],
                },
            },
        }

    user = {"role": "user", "content": "hi"}
    orphan = {"role": "tool", "tool_call_id": "ghost", "name": "f", "content": "x"}
    data = {"interactions": [chat([user], "hello"), chat([user, orphan], "?"), chat([user], "hello")]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    events = list(read_events(cassettes.READER, path))
    rejects = [e for e in events if isinstance(e, ReadReject)]
    assert [(e.source.record, e.error.code) for e in rejects] == [("interaction 1", "unpaired_result")]
    (graph_event,) = [e for e in events if isinstance(e, ReadGraph)]
    assert graph_event.records == 2 and len(graph_event.graph.sampled_nodes()) == 1  # the repeat is one node


def test_a_responses_call_whose_previous_response_was_not_logged_is_rejected(tmp_path: Path) -> None:
    record = {
        "request": {"previous_response_id": "resp_missing", "input": [{"role": "user", "content": "and then?"}]},
        "response": {
            "id": "resp_2",
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
        },
    }
    path = _write_lines(tmp_path / "calls.jsonl", [json.dumps(record)])
    (event,) = list(read_events(openai_responses.READER, path))
    assert isinstance(event, ReadReject) and event.error.code == "missing_context"


def test_anthropic_and_options_and_go_rejects_name_the_rule_that_failed(tmp_path: Path) -> None:
    orphan = {
        "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "x"}]}],
        "system": "s",
    }
    server_tool = {
        "messages": [{"role": "assistant", "content": [{"type": "server_tool_use", "id": "s", "name": "w"}]}],
        "system": "s",
    }
    a = _write_lines(tmp_path / "a.jsonl", [json.dumps(orphan), json.dumps(server_tool)])
    assert [e.error.code for e in read_events(anthropic.READER, a) if isinstance(e, ReadReject)] == [
        "unpaired_result",
        "unsupported_block",
    ]
    typo = {"messages": [{"kind": "parts", "parts": [{"kind": "text", "txt": "hi"}]}]}
    o = _write_lines(tmp_path / "o.jsonl", [json.dumps(typo), json.dumps(typo)])
    assert {e.error.code for e in read_events(options.READER, o) if isinstance(e, ReadReject)} == {"bad_message"}
    state = {"thread_id": "t", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": ""}]}
    g = _write_lines(tmp_path / "g.json", [json.dumps(state)])
    (event,) = list(read_events(go_agent.READER, g))
    assert isinstance(event, ReadReject) and event.error.code == "empty_assistant"


def test_message_per_line_jsonl_is_one_conversation_counting_every_line(tmp_path: Path) -> None:
    lines = [
        json.dumps({"role": "user", "content": "a"}),
        json.dumps({"role": "assistant", "content": "b"}),
        json.dumps({"role": "user", "content": "c"}),
        json.dumps({"role": "assistant", "content": "d"}),
    ]
    events = list(read_events(REGISTRY["openai_chat"], _write_lines(tmp_path / "m.jsonl", lines)))
    (event,) = events
    assert isinstance(event, ReadGraph) and event.records == 4 and len(event.graph.sampled_nodes()) == 2


def test_a_rejected_line_inside_a_message_per_line_run_keeps_later_assistant_turns_untrained(tmp_path: Path) -> None:
    lines = [
        json.dumps({"role": "user", "content": "a"}),
        json.dumps({"role": "assistant", "content": "b"}),
        '{"role": "user", "content": "lost',
        json.dumps({"role": "assistant", "content": "d"}),
    ]
    events = list(read_events(REGISTRY["openai_chat"], _write_lines(tmp_path / "gap.jsonl", lines)))
    assert [type(e).__name__ for e in events] == ["ReadReject", "ReadGraph"]
    graph_event = events[1]
    assert isinstance(graph_event, ReadGraph) and graph_event.records == 3
    assert _shape(graph_event.graph) == ["U A* A~"]


_RECORD = st.one_of(
    st.builds(
        lambda t: json.dumps({"messages": [{"role": "user", "content": t}, {"role": "assistant", "content": t}]}),
        st.text(max_size=8),
    ),
    st.just(json.dumps({"messages": [{"role": "tool", "tool_call_id": "x", "name": "f", "content": "r"}]})),
    st.just(json.dumps({"messages": []})),
    st.just('{"messages": ['),
    st.just("[1, 2]"),
    st.just(""),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_RECORD, min_size=1, max_size=12))
def test_every_non_blank_line_of_a_jsonl_file_is_accounted_for_exactly_once(tmp_path: Path, lines: list[str]) -> None:
    first = json.dumps({"messages": [{"role": "user", "content": "start"}]})
    path = _write_lines(tmp_path / "h.jsonl", [first, *lines])
    events = list(read_events(REGISTRY["openai_chat"], path))
    assert _account(events) == 1 + sum(1 for line in lines if line.strip())


def test_a_corrupt_first_jsonl_line_is_one_reject_and_the_rest_is_still_read(tmp_path: Path) -> None:
    good = json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})
    events = list(
        read_events(REGISTRY["openai_chat"], _write_lines(tmp_path / "c.jsonl", ['{"messages": [', good, good]))
    )
    assert [type(e).__name__ for e in events] == ["ReadReject", "ReadGraph", "ReadGraph"]


def test_a_pretty_printed_document_is_read_whole_not_line_by_line(tmp_path: Path) -> None:
    doc = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    path = tmp_path / "one.json"
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    (event,) = list(read_events(REGISTRY["openai_chat"], path))
    assert isinstance(event, ReadGraph) and event.source.record == "file" and event.records == 1


# --------------------------------------------------------------------------- real third-party logs


@needs_shared
def test_tau_bench_trajectories_give_one_graph_each_with_reward_and_every_assistant_turn_sampled() -> None:
    path = REAL / "tau_bench/gpt-4o-airline.first20.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    expected_sampled = sum(1 for r in raw for m in r["traj"] if m["role"] == "assistant")
    assert (len(raw), expected_sampled) == (20, 285)  # pinned: a changed file must fail loudly
    assert detect_format(path).name == "openai_chat"
    events = list(read_events(REGISTRY["openai_chat"], path))
    graphs = _graphs(events)
    assert len(graphs) == 20 and _account(events) == 20
    assert sum(len(g.branches()) for g in graphs) == 20
    assert sum(len(g.sampled_nodes()) for g in graphs) == expected_sampled
    rewards = [e.extras["reward"] for e in events if isinstance(e, ReadGraph)]
    assert rewards == [r["reward"] for r in raw]
    assert all(set(e.extras) == {"task_id", "reward", "info", "trial"} for e in events if isinstance(e, ReadGraph))


@needs_shared
def test_glaive_sharegpt_demo_gives_one_graph_per_record_with_every_gpt_and_call_turn_sampled() -> None:
    path = REAL / "sharegpt_llamafactory/glaive_toolcall_en_demo.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    expected_sampled = sum(1 for r in raw for t in r["conversations"] if t["from"] in ("gpt", "function_call"))
    results = sum(1 for r in raw for t in r["conversations"] if t["from"] == "observation")
    assert (len(raw), expected_sampled, results) == (300, 957, 211)
    events = list(read_events(REGISTRY["sharegpt"], path))
    graphs = _graphs(events)
    assert len(graphs) == 300 and not [e for e in events if isinstance(e, ReadReject)]
    assert sum(len(g.branches()) for g in graphs) == 300
    assert sum(len(g.sampled_nodes()) for g in graphs) == expected_sampled
    paired = sum(1 for g in graphs for m in g.messages() if isinstance(m, OptionResultMessage))
    assert paired == results
    with_tools = sum(1 for r in raw if json.loads(r["tools"] or "[]"))
    assert sum(1 for g in graphs if g.env.tools) == with_tools


@needs_shared
def test_llamafactory_reasoning_demo_splits_parallel_observations_onto_their_calls() -> None:
    path = REAL / "sharegpt_llamafactory/reason_tool_use_demo_50.jsonl"
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    expected_sampled = sum(1 for r in raw for m in r["messages"] if m["role"] == "assistant")
    expected_results = 0
    for r in raw:
        msgs = r["messages"]
        for i, m in enumerate(msgs):
            if m["role"] == "tool":
                expected_results += sum(1 for p in msgs[i - 1]["content"] if p["type"] == "tool_call")
    assert (len(raw), expected_sampled) == (50, 112)
    events = list(read_events(REGISTRY["sharegpt"], path))
    graphs = _graphs(events)
    assert len(graphs) == 50 and sum(len(g.branches()) for g in graphs) == 50
    assert sum(len(g.sampled_nodes()) for g in graphs) == expected_sampled
    assert sum(1 for g in graphs for m in g.messages() if isinstance(m, OptionResultMessage)) == expected_results
    reasoning_turns = sum(1 for r in raw for m in r["messages"] if any(p["type"] == "reasoning" for p in m["content"]))
    assert sum(1 for g in graphs for m in g.messages() if m.reasoning) == reasoning_turns


def _strip(value: Any) -> Any:
    """Drop what providers echo differently between a response and a later request (nulls, empty lists)."""
    if isinstance(value, dict):
        return {
            k: _strip(v) for k, v in value.items() if v not in (None, [], "") and k not in ("refusal", "annotations")
        }
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _cassette_sequences(interaction: dict[str, Any]) -> tuple[str, list[list[str]]] | None:
    """Independent of the reader: (tools key, message-fingerprint sequences ending in each sampled response)."""
    req, resp = interaction["request"], interaction["response"]
    if not 200 <= resp["status"]["code"] < 300:
        return None
    body, out = req["parsed_body"], resp["parsed_body"]
    uri = req["uri"]
    if "/chat/completions" in uri:
        fp = [json.dumps(_strip(m), sort_keys=True) for m in body["messages"]]
        answers = [json.dumps(_strip(c["message"]), sort_keys=True) for c in out["choices"]]
    elif uri.split("?")[0].endswith("/messages"):
        system = [json.dumps(body["system"])] if body.get("system") else []
        fp = system + [json.dumps(_strip(m["content"]), sort_keys=True) for m in body["messages"]]
        answers = [json.dumps(_strip(out["content"]), sort_keys=True)]
    elif ":generateContent" in uri:
        system = [json.dumps(body["systemInstruction"])] if body.get("systemInstruction") else []
        fp = system + [json.dumps(_strip(c["parts"]), sort_keys=True) for c in body["contents"]]
        answers = [json.dumps(_strip(c["content"]["parts"]), sort_keys=True) for c in out["candidates"]]
    else:  # /responses
        fp = [json.dumps(body.get("instructions")), *(json.dumps(_strip(i), sort_keys=True) for i in body["input"])]
        answers = [json.dumps(_strip(out["output"]), sort_keys=True)]
    return json.dumps(body.get("tools"), sort_keys=True), [[*fp, a] for a in answers]


def _cassette_counts(path: Path) -> tuple[int, int]:
    """(branches, sampled turns): distinct response sequences, and those that are no prefix of another."""
    seqs: set[tuple[str, tuple[str, ...]]] = set()
    for interaction in yaml.safe_load(path.read_text(encoding="utf-8"))["interactions"]:
        found = _cassette_sequences(interaction)
        if found is not None:
            tools, sequences = found
            seqs.update((tools, tuple(s)) for s in sequences)
    leaves = [
        s for s in seqs if not any(o[0] == s[0] and len(o[1]) > len(s[1]) and o[1][: len(s[1])] == s[1] for o in seqs)
    ]
    return len(leaves), len(seqs)


CASSETTES = {
    # file: (interactions, branches, sampled turns) — pinned
    "test_anthropic_compaction_round_trip.yaml": (1, 1, 1),
    "test_anthropic_multiple_parallel_tool_calls.yaml": (2, 1, 2),
    "test_anthropic_tool_with_thinking.yaml": (2, 1, 2),
    "test_google_vertex_logprobs.yaml": (1, 1, 1),
    "test_multiple_agent_tool_calls.yaml": (4, 2, 4),
    "test_openai_instructions_with_responses_logprobs.yaml": (1, 1, 1),
}


@needs_shared
@pytest.mark.parametrize("name", sorted(CASSETTES))
def test_real_cassette_builds_one_graph_with_the_independently_counted_branches_and_samples(name: str) -> None:
    path = REAL / "api_cassettes_pydantic_ai" / name
    interactions, branches, sampled = CASSETTES[name]
    assert len(yaml.safe_load(path.read_text(encoding="utf-8"))["interactions"]) == interactions
    assert _cassette_counts(path) == (branches, sampled)
    assert detect_format(path).name == "cassettes"
    events = list(read_events(cassettes.READER, path))
    (graph,) = _graphs(events)
    assert not [e for e in events if not isinstance(e, ReadGraph)] and _account(events) == interactions
    assert len(graph.branches()) == branches
    assert len(graph.sampled_nodes()) == sampled


@needs_shared
def test_real_compaction_cassette_keeps_the_unrecorded_history_turn_as_carried_context() -> None:
    path = REAL / "api_cassettes_pydantic_ai/test_anthropic_compaction_round_trip.yaml"
    (graph,) = _graphs(list(read_events(cassettes.READER, path)))
    (branch,) = graph.branches()
    history = [n for n in branch.nodes if n.is_assistant and not n.sampled]
    assert [n.origin for n in history] == [Origin.CARRIED]
    assert history[0].message.metadata == {"anthropic_compaction": True}
    assert history[0].message.text.startswith("Summary: user said hello.")


@needs_shared
def test_real_mixed_provider_cassette_shares_repeated_history_and_separates_providers() -> None:
    path = REAL / "api_cassettes_pydantic_ai/test_multiple_agent_tool_calls.yaml"
    (graph,) = _graphs(list(read_events(cassettes.READER, path)))
    roots = [n for n in graph.nodes.values() if n.parent is None]
    assert len(roots) == 2 and len({n.env_id for n in roots}) == 2  # Gemini and OpenAI tool schemas differ
    origins = Counter(n.origin for n in graph.nodes.values() if n.is_assistant)
    # The OpenAI history re-sends the two Gemini-era turns: not produced by an OpenAI response here → carried.
    assert origins == Counter({Origin.SAMPLED: 4, Origin.CARRIED: 2})


@needs_shared
def test_no_specific_detector_of_mine_claims_a_real_agent_session_or_trace_file() -> None:
    mine = {"tau_bench", "sharegpt_llamafactory", "api_cassettes_pydantic_ai"}
    others = [
        p
        for p in sorted(REAL.rglob("*"))
        if p.is_file() and p.relative_to(REAL).parts[0] not in mine and p.suffix in (".json", ".jsonl", ".traj")
    ]
    assert others, "expected third-party agent-session files in ../shared"
    claimed = [
        f"{name}: {p.relative_to(REAL)}"
        for p in others
        for name in SPECIFIC
        if MY_READERS[name].detect(p, read_head(p))
    ]
    assert claimed == []


@needs_shared
def test_every_real_conversation_list_file_is_read_without_a_reject() -> None:
    files = [
        REAL / "tau_bench/gpt-4o-airline.first20.json",
        REAL / "sharegpt_llamafactory/glaive_toolcall_en_demo.json",
        REAL / "sharegpt_llamafactory/reason_tool_use_demo_50.jsonl",
        *sorted((REAL / "api_cassettes_pydantic_ai").glob("*.yaml")),
    ]
    for path in files:
        reader = detect_format(path)
        assert reader.name in MY_READERS
        bad = [str(e.error) for e in read_events(reader, path) if isinstance(e, ReadReject)]
        assert bad == [], path.name
