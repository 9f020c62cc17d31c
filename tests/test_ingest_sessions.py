"""Readers of agent sessions and traces: Claude Code, Codex CLI, Gemini CLI, SWE-agent, OpenHands, OTel GenAI.

The golden structures below were reviewed by hand against the sample files in sample_logs/ (branch codes: S U A T
for system/user/assistant/tool; * sampled, ~ carried, ! injected). Counts on the real third-party logs in
../shared are pinned, and also recomputed here from the raw JSON with a few lines per format, independently of
the readers.
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import Reader, ReadEvent, ReadGraph, ReadReject, ReadSkip, read_head
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.formats.sessions import claude_code, codex, gemini_cli, openhands, swe_agent
from msgtrain.ingest.formats.traces import otel
from msgtrain.ingest.registry import REGISTRY
from msgtrain.model.graph import EdgeKind, MessageGraph, Origin
from msgtrain.model.message import MediaPart, OptionCallMessage, OptionResultMessage, PartsMessage, ReasoningPart

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
SHARED = Path(__file__).resolve().parents[2] / "shared"
REAL = SHARED / "real_logs"
needs_shared = pytest.mark.skipif(not REAL.is_dir(), reason="../shared not present")

READERS: dict[str, Reader] = {
    r.name: r
    for r in (claude_code.READER, codex.READER, gemini_cli.READER, swe_agent.READER, openhands.READER, otel.READER)
}
_CODE = {"system": "S", "user": "U", "assistant": "A", "tool": "T"}
_MARK = {"sampled": "*", "carried": "~", "injected": "!", "context": "", "edited": "e", "prefill": "p"}


def read_all(reader: Reader, path: Path) -> tuple[list[ReadGraph], list[ReadReject], Counter[str]]:
    events: list[ReadEvent] = list(read_events(reader, path))
    graphs = [e for e in events if isinstance(e, ReadGraph)]
    rejects = [e for e in events if isinstance(e, ReadReject)]
    skips: Counter[str] = Counter()
    for e in events:
        if isinstance(e, ReadSkip):
            skips[e.reason] += e.count
    return graphs, rejects, skips


def accounted(graphs: list[ReadGraph], rejects: list[ReadReject], skips: Counter[str]) -> int:
    return sum(g.records for g in graphs) + len(rejects) + sum(skips.values())


def branch_codes(graph: MessageGraph) -> list[str]:
    return [" ".join(_CODE[n.message.role] + _MARK[n.origin.value] for n in b.nodes) for b in graph.branches()]


def sampled_count(graph: MessageGraph) -> int:
    return len(graph.sampled_nodes())


# ----------------------------------------------------------------------------------------------- golden samples
# sample file -> (reader, [(policy, branches)] per graph, edge kinds per graph, records accounted)
GOLDEN: dict[str, tuple[str, list[tuple[str, list[str]]], list[list[str]], int]] = {
    "claude_code/session.jsonl": (
        "claude_code",
        [
            (
                "claude-code",
                [
                    "U A* T T A* T A* U A*",
                    "U A* T T A* T A* U A* T A*",
                    "U! U A*",
                ],
            )
        ],
        [["rewind", "compaction"]],
        28,
    ),
    "claude_code/session/subagents/agent-a7c41d2.jsonl": (
        "claude_code",
        [("subagent:Explore", ["U A* T A*"])],
        [[]],
        5,
    ),
    "codex/rollout.jsonl": (
        "codex",
        [
            (
                "codex",
                [
                    "S S U U A* T T A* T A* U A~ U A*",
                    "S S U U A* T T A* T A* U A~ U A*",
                    "S U A~ U U! U A* T A*",
                ],
            )
        ],
        [["rewind", "compaction"]],
        54,
    ),
    "gemini_cli/session.json": ("gemini_cli", [("gemini-cli", ["U A* T T A* U A* T A*"])], [[]], 7),
    "gemini_cli/logs.json": ("gemini_cli", [], [], 2),
    "swe_agent/run.traj": ("swe_agent", [("swe-agent", ["S U A! T U A* T A* T A* T A* T"])], [[]], 13),
    "swe_agent/run_with_queries.traj": (
        "swe_agent",
        [("swe-agent", ["S U A* T A* T A~ T", "S U A* T A~ T A*"])],
        [[]],
        8,
    ),
    "openhands/events.json": (
        "openhands",
        [("openhands", ["S U A* T T A* T", "S U U! A~ T A* T A* U A*"])],
        [["compaction"]],
        17,
    ),
    "otel/trace.json": (
        "otel",
        [("weather-bot", ["S U A* T A*", "S U A* T A*"]), ("calendar-agent", ["S U A* T A*"])],
        [[], []],
        9,
    ),
    "otel/otlp.jsonl": ("otel", [("otel", ["U A*"])], [[]], 1),
}


def _records_in(path: Path) -> int:
    """How many input records a sample holds, counted from the raw file."""
    if path.suffix == ".jsonl":
        return sum(1 for line in path.read_text().splitlines() if line.strip())
    doc = json.loads(path.read_text())
    if isinstance(doc, list):
        return len(doc)
    if "messages" in doc:
        return len(doc["messages"])
    if "history" in doc:
        return len(doc["history"])
    return len(doc["spans"])


@pytest.mark.parametrize("sample", sorted(GOLDEN))
def test_each_sample_reads_into_its_reviewed_graph_and_accounts_every_record(sample: str) -> None:
    name, expected, edges, records = GOLDEN[sample]
    path = SAMPLES / sample
    graphs, rejects, skips = read_all(READERS[name], path)
    assert not rejects, [str(r.error) for r in rejects]
    assert [(g.graph.policy, branch_codes(g.graph)) for g in graphs] == expected
    assert [[e.kind.value for e in g.graph.edges] for g in graphs] == edges
    assert accounted(graphs, rejects, skips) == records
    if path.suffix != ".jsonl" or path.parent.name != "otel":
        assert records == _records_in(path)


@pytest.mark.parametrize("sample", sorted(GOLDEN))
def test_each_sample_is_detected_by_its_own_reader_and_by_no_other_registered_reader(sample: str) -> None:
    from msgtrain.ingest import registry  # noqa: F401 - registers every reader

    name = GOLDEN[sample][0]
    path = SAMPLES / sample
    head = read_head(path)
    # Fallback readers (the structural one) detect any conversation shape; they are offered only unclaimed files.
    claimed = [r.name for r in REGISTRY.values() if not getattr(r, "fallback", False) and r.detect(path, head)]
    assert claimed == [name]


def test_every_reader_names_an_example_that_exists_and_that_it_detects() -> None:
    for reader in READERS.values():
        example = ROOT / reader.example
        assert example.is_file(), reader.example
        assert reader.detect(example, read_head(example)), reader.name


# ----------------------------------------------------------------------------------------------- Claude Code
def _cc_graphs(path: Path) -> list[MessageGraph]:
    graphs, rejects, _ = read_all(claude_code.READER, path)
    assert not rejects
    return [g.graph for g in graphs]


def test_claude_code_merges_a_streamed_response_and_the_results_written_between_its_blocks() -> None:
    (g,) = _cc_graphs(SAMPLES / "claude_code/session.jsonl")
    first = g.branches()[0].messages
    response = first[1]
    assert isinstance(response, OptionCallMessage)
    assert [p.kind for p in response.parts] == ["reasoning", "text"]
    assert isinstance(response.parts[0], ReasoningPart) and response.parts[0].signature
    assert [c.option_name for c in response.calls] == ["Read", "Bash"]
    results = first[2:4]
    assert all(isinstance(r, OptionResultMessage) for r in results)
    assert [r.result.invocation_id for r in results if isinstance(r, OptionResultMessage)] == [
        "toolu_01ReadConfig",
        "toolu_01RunTests",
    ]
    bash = results[1]
    assert isinstance(bash, OptionResultMessage) and bash.result.is_error
    edit = first[5]
    assert isinstance(edit, OptionResultMessage) and edit.result.result.endswith("Lines 4-7 changed.")
    node = g.branches()[0].nodes[1]
    gen = g.generation(node.id)
    assert gen is not None and gen.model == "claude-opus-4-6"
    assert node.message.metadata["usage"]["output_tokens"] == 148


def test_claude_code_compaction_replaces_the_branch_before_the_boundary_with_the_injected_summary() -> None:
    (g,) = _cc_graphs(SAMPLES / "claude_code/session.jsonl")
    edge = next(e for e in g.edges if e.kind is EdgeKind.COMPACTION)
    summary = g.nodes[edge.new[0]]
    assert summary.parent is None and summary.origin is Origin.INJECTED
    assert summary.message.metadata.get("compact_summary") is True
    last_before = g.nodes[edge.old[-1]]
    assert "Two callers" in last_before.message.text  # logicalParentUuid names the last answer before compaction
    after = next(n for n in g.sampled_nodes() if "catch it in cfgtool/cli.py" in n.message.text)
    assert g.edge_into(after.id) is edge
    image = g.path(after.id)[1].message
    assert isinstance(image, PartsMessage) and isinstance(image.parts[1], MediaPart)
    assert image.parts[1].url.startswith("data:image/png;base64,")


def test_claude_code_rewind_is_a_branch_with_a_rewind_edge_from_the_answer_it_went_back_to() -> None:
    (g,) = _cc_graphs(SAMPLES / "claude_code/session.jsonl")
    edge = next(e for e in g.edges if e.kind is EdgeKind.REWIND)
    anchor = g.nodes[edge.anchor] if edge.anchor else None
    assert anchor is not None and anchor.message.text.startswith("parse_config() now raises ValueError")
    assert g.nodes[edge.old[0]].message.text == "Also reject negative timeouts."
    assert g.nodes[edge.new[0]].message.text.startswith("Actually, first find every caller")


def test_claude_code_sub_agent_graph_takes_its_type_from_the_task_call_in_the_parent_session() -> None:
    (g,) = _cc_graphs(SAMPLES / "claude_code/session/subagents/agent-a7c41d2.jsonl")
    assert g.policy == "subagent:Explore"
    assert g.graph_id == "claude-code:5f0c8f5e-2b7a-4e7d-9a51-0c3d7e9b1a42:agent-a7c41d2"
    assert {n.message.policy for n in g.sampled_nodes()} == {"subagent:Explore"}


def test_claude_code_sub_agent_without_its_parent_session_falls_back_to_the_agent_id(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "subagents" / "agent-a7c41d2.jsonl"
    target.parent.mkdir(parents=True)
    shutil.copy(SAMPLES / "claude_code/session/subagents/agent-a7c41d2.jsonl", target)
    (g,) = _cc_graphs(target)
    assert g.policy == "subagent:a7c41d2"


def test_claude_code_bad_line_is_rejected_and_the_turns_below_it_are_not_trained(tmp_path: Path) -> None:
    lines = (SAMPLES / "claude_code/session.jsonl").read_text().splitlines()
    # Break the assistant line of the second response (its text block) with an unknown block type.
    idx = next(i for i, line in enumerate(lines) if "One test expects a ValueError" in line)
    rec = json.loads(lines[idx])
    rec["message"]["content"] = [{"type": "hologram", "data": "?"}]
    lines[idx] = json.dumps(rec)
    lines.insert(0, "{truncated")  # a broken first line must not make the file look like a JSON export
    bad = tmp_path / "session.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    graphs, rejects, skips = read_all(claude_code.READER, bad)
    assert {r.error.code for r in rejects} == {"bad_json", "bad_content"}
    assert accounted(graphs, rejects, skips) == len(lines)
    (g,) = [x.graph for x in graphs]
    # The first response is still trained; the broken response and the result answering it are rejected, and
    # what followed lost part of its context.
    assert branch_codes(g)[0] == "U A* T T A~ U A~"
    assert branch_codes(g)[2] == "U! U A*"  # the compaction gives a complete new context


def test_claude_code_context_from_outside_the_file_keeps_the_compaction_agents_turn_untrained(tmp_path: Path) -> None:
    rec = {
        "parentUuid": "not-in-this-file",
        "isSidechain": True,
        "agentId": "acompact-1a2b3c",
        "sessionId": "s1",
        "type": "user",
        "uuid": "u1",
        "message": {"role": "user", "content": "Summarize the conversation."},
    }
    answer = {
        "parentUuid": "u1",
        "isSidechain": True,
        "agentId": "acompact-1a2b3c",
        "sessionId": "s1",
        "type": "assistant",
        "uuid": "u2",
        "message": {
            "id": "msg_1",
            "role": "assistant",
            "model": "m",
            "content": [{"type": "text", "text": "Summary."}],
        },
    }
    path = tmp_path / "agent-acompact-1a2b3c.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps(answer) + "\n")
    (g,) = _cc_graphs(path)
    assert g.policy == "subagent:compact"
    assert branch_codes(g) == ["U A~"]


# ----------------------------------------------------------------------------------------------- Codex
def _codex_graph(path: Path) -> MessageGraph:
    graphs, rejects, _ = read_all(codex.READER, path)
    assert not rejects
    (g,) = graphs
    return g.graph


def test_codex_response_keeps_encrypted_reasoning_as_redacted_and_summaries_as_metadata() -> None:
    g = _codex_graph(SAMPLES / "codex/rollout.jsonl")
    root = g.branches()[0].nodes[0]
    assert root.message.role == "system" and root.message.text.startswith("You are Codex")
    first = next(n for n in g.sampled_nodes() if isinstance(n.message, OptionCallMessage))
    reasoning = first.message.parts[0]
    assert isinstance(reasoning, ReasoningPart) and reasoning.redacted and reasoning.text == ""
    assert reasoning.signature == "gAAAAABsampleEncryptedReasoning01"
    assert first.message.metadata["reasoning_summary"] == ["**Inspecting the loader**"]
    assert first.message.metadata["usage"]["input_tokens"] == 4210
    assert [c.invocation_id for c in first.message.calls] == ["call_sample_read", "call_sample_repro"]
    gen = g.generation(first.id)
    assert gen is not None and gen.model == "gpt-5.3-codex" and gen.sampling == {"reasoning_effort": "medium"}
    developer = g.branches()[0].nodes[1].message
    assert developer.role == "system" and developer.metadata == {"openai_role": "developer"}


def test_codex_custom_tool_input_is_kept_verbatim_and_hosted_search_responses_are_not_trained() -> None:
    g = _codex_graph(SAMPLES / "codex/rollout.jsonl")
    patch = next(
        c
        for n in g.nodes.values()
        if isinstance(n.message, OptionCallMessage)
        for c in n.message.calls
        if c.option_name == "apply_patch"
    )
    assert patch.raw_arguments is not None and patch.raw_arguments.startswith("*** Begin Patch\n")
    search = next(n for n in g.nodes.values() if n.message.metadata.get("hosted_tools"))
    assert search.origin is Origin.CARRIED and g.generation(search.id) is None


def test_codex_rollback_and_compaction_become_rewind_and_compaction_edges() -> None:
    g = _codex_graph(SAMPLES / "codex/rollout.jsonl")
    rewind, compaction = g.edges
    assert rewind.kind is EdgeKind.REWIND
    assert [g.nodes[n].message.text for n in rewind.old] == [
        "Use exit code 78 in the CLI.",
        "Done: `cfgtool check` exits with 78 on config errors.",
    ]
    assert compaction.kind is EdgeKind.COMPACTION
    assert g.nodes[compaction.anchor or ""].message.role == "system"  # the base instructions are kept
    new = [g.nodes[n] for n in compaction.new]
    assert [n.origin for n in new] == [Origin.CONTEXT, Origin.CARRIED, Origin.CONTEXT, Origin.INJECTED]
    opaque = new[-1].message
    assert isinstance(opaque, PartsMessage) and opaque.metadata == {"codex_item": "compaction"}
    after = [n for n in g.sampled_nodes() if g.edge_into(n.id) is compaction]
    assert len(after) == 2


def test_codex_truncated_last_line_is_rejected_and_an_unknown_item_taints_the_rest(tmp_path: Path) -> None:
    lines = (SAMPLES / "codex/rollout.jsonl").read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if "Is there a standard exit code" in line)
    odd = json.dumps({"timestamp": "t", "type": "response_item", "payload": {"type": "future_item", "x": 1}})
    text = "\n".join([*lines[:cut], odd, *lines[cut:]]) + '\n{"timestamp":"t","type":"resp'
    path = tmp_path / "rollout.jsonl"
    path.write_text(text)
    graphs, rejects, skips = read_all(codex.READER, path)
    assert [r.error.code for r in rejects] == ["truncated_line"]
    assert skips["unsupported_response_item:future_item"] == 1
    assert accounted(graphs, rejects, skips) == len(lines) + 2
    g = graphs[0].graph
    # Trained before the unknown item; not trained after it until the compaction restores a complete context.
    assert branch_codes(g)[0] == "S S U U A* T T A* T A* U A~ U A~"
    assert branch_codes(g)[2].endswith("U A* T A*")


# ----------------------------------------------------------------------------------------------- Gemini CLI
def test_gemini_tool_outcomes_follow_the_response_and_thoughts_stay_metadata() -> None:
    graphs, _, skips = read_all(gemini_cli.READER, SAMPLES / "gemini_cli/session.json")
    g = graphs[0].graph
    msgs = g.branches()[0].messages
    call = msgs[1]
    assert isinstance(call, OptionCallMessage) and call.text == "I'll search for the old logger import."
    assert not any(isinstance(p, ReasoningPart) for p in call.parts)
    assert call.metadata["thoughts"][0]["subject"] == "Locating the old logger"
    found, missing = msgs[2], msgs[3]
    assert isinstance(found, OptionResultMessage) and found.result.result.startswith("Found 2 matches")
    assert isinstance(missing, OptionResultMessage) and missing.result.is_error
    assert missing.result.result == "File not found: src/legacy_log.py"
    assert skips == Counter({"non_message_record:info": 1})


def test_gemini_prompt_log_is_skipped_whole_because_it_holds_no_model_output() -> None:
    graphs, rejects, skips = read_all(gemini_cli.READER, SAMPLES / "gemini_cli/logs.json")
    assert not graphs and not rejects and skips == Counter({"prompt_log_without_responses": 2})


# ----------------------------------------------------------------------------------------------- SWE-agent
def test_swe_agent_demonstration_turns_are_injected_and_real_turns_carry_the_model() -> None:
    graphs, _, _ = read_all(swe_agent.READER, SAMPLES / "swe_agent/run.traj")
    g = graphs[0].graph
    demo = next(n for n in g.nodes.values() if n.message.metadata.get("is_demo") and n.is_assistant)
    assert demo.origin is Origin.INJECTED
    gen = g.generation(g.sampled_nodes()[0].id)
    assert gen is not None and gen.model == "claude-sonnet-4-20250514" and gen.sampling["temperature"] == 0.0
    assert g.metadata["model_stats"]["api_calls"] == 4


def test_swe_agent_trajectory_without_model_tokens_is_a_replay_and_trains_nothing(tmp_path: Path) -> None:
    doc = json.loads((SAMPLES / "swe_agent/run.traj").read_text())
    doc["info"]["model_stats"] = {"instance_cost": 0, "tokens_sent": 0, "tokens_received": 0, "api_calls": 4}
    path = tmp_path / "replay.traj"
    path.write_text(json.dumps(doc))
    graphs, _, _ = read_all(swe_agent.READER, path)
    assert sampled_count(graphs[0].graph) == 0
    assert {n.origin for n in graphs[0].graph.nodes.values() if n.is_assistant} == {Origin.INJECTED}


def test_swe_agent_eliding_history_processor_without_queries_trains_nothing(tmp_path: Path) -> None:
    doc = json.loads((SAMPLES / "swe_agent/run_with_queries.traj").read_text())
    for step in doc["trajectory"]:
        del step["query"]
    path = tmp_path / "elided.traj"
    path.write_text(json.dumps(doc))
    graphs, _, _ = read_all(swe_agent.READER, path)
    assert branch_codes(graphs[0].graph) == ["S U A~ T A~ T A~ T"]


def test_swe_agent_queries_place_each_response_under_the_context_actually_sent() -> None:
    graphs, _, _ = read_all(swe_agent.READER, SAMPLES / "swe_agent/run_with_queries.traj")
    g = graphs[0].graph
    last = next(n for n in g.sampled_nodes() if n.message.text == "Submitting.")
    observation = g.path(last.id)[3].message
    assert isinstance(observation, OptionResultMessage)
    assert observation.result.result == "Old environment output: (5 lines omitted)"


# ----------------------------------------------------------------------------------------------- OpenHands
def test_openhands_parallel_actions_of_one_model_response_are_one_assistant_message() -> None:
    graphs, _, skips = read_all(openhands.READER, SAMPLES / "openhands/events.json")
    g = graphs[0].graph
    first = g.branches()[0].messages[2]
    assert isinstance(first, OptionCallMessage)
    assert [c.option_name for c in first.calls] == ["execute_bash", "str_replace_editor"]
    assert first.calls[0].raw_arguments == '{"command": "pytest -q tests/test_math.py"}'
    result = g.branches()[0].messages[3]
    assert isinstance(result, OptionResultMessage)
    assert result.result.result.endswith("\n[The command completed with exit code 1.]")
    assert [t["function"]["name"] for t in g.env.tools] == ["execute_bash", "str_replace_editor", "finish"]
    assert skips == Counter({"non_message_record:agent_state_changed": 2, "non_message_record:null": 1})


def test_openhands_condensation_forgets_events_and_inserts_the_summary_as_injected_context() -> None:
    graphs, _, _ = read_all(openhands.READER, SAMPLES / "openhands/events.json")
    g = graphs[0].graph
    (edge,) = g.edges
    assert edge.kind is EdgeKind.COMPACTION
    summary = g.nodes[edge.new[0]]
    assert summary.origin is Origin.INJECTED and summary.message.text.startswith("The test failed because add()")
    rerun = next(
        n
        for n in g.sampled_nodes()
        if isinstance(n.message, OptionCallMessage) and n.message.calls[0].invocation_id == "toolu_01Rerun"
    )
    assert g.edge_into(rerun.id) is edge


def test_openhands_recall_observation_taints_later_responses(tmp_path: Path) -> None:
    events = json.loads((SAMPLES / "openhands/events.json").read_text())
    events.insert(
        2,
        {
            "id": 100,
            "source": "environment",
            "observation": "recall",
            "content": "Added workspace context",
            "cause": 1,
            "extras": {"recall_type": "workspace_context", "repo_instructions": "..."},
        },
    )
    events[2]["source"] = "user"
    path = tmp_path / "events.json"
    path.write_text(json.dumps(events))
    graphs, _, skips = read_all(openhands.READER, path)
    assert skips["observation_without_call:recall"] == 1
    assert sampled_count(graphs[0].graph) == 0


# ----------------------------------------------------------------------------------------------- OpenTelemetry
def test_otel_n_outputs_are_sibling_samples_and_tool_definitions_are_the_environment() -> None:
    graphs, _, skips = read_all(otel.READER, SAMPLES / "otel/trace.json")
    weather = graphs[0].graph
    assert weather.graph_id == "otel:5b8efff798038103d269b633813fc60c"
    # the conventions' flat {type, name, parameters} as the OpenAI function tool the request sent (what templates read)
    assert weather.env.tools[0]["function"]["parameters"]["properties"] == {"city": {"type": "string"}}
    assert [t["function"]["name"] for t in weather.env.tools] == ["get_weather"]
    leaves = [weather.nodes[n] for n in weather.leaves()]
    assert {n.parent for n in leaves} == {leaves[0].parent}
    gen = weather.generation(leaves[0].id)
    assert gen is not None and gen.model == "gpt-4o-mini-2024-07-18" and gen.finish_reason == "stop"
    assert gen.sampling == {"temperature": 0.2}
    assert skips == Counter({"non_genai_span": 1})


def test_otel_span_without_recorded_input_continues_the_previous_context() -> None:
    graphs, _, _ = read_all(otel.READER, SAMPLES / "otel/trace.json")
    calendar = graphs[1].graph
    last = next(n for n in calendar.sampled_nodes() if n.message.text.startswith("There are 9 days"))
    assert last.message.metadata["context_reconstructed"] is True
    tool = calendar.path(last.id)[-2].message
    assert isinstance(tool, OptionResultMessage) and tool.result.result == "9"
    call = calendar.path(last.id)[-3].message
    assert isinstance(call, OptionCallMessage) and call.calls[0].invocation_id.startswith("call_")


def test_otel_consecutive_chat_spans_with_nothing_between_do_not_train_the_second(tmp_path: Path) -> None:
    doc = json.loads((SAMPLES / "otel/trace.json").read_text())
    extra = json.loads(json.dumps(doc["spans"][7]))
    extra["start_time"] += 1
    extra["attributes"]["gen_ai.output"] = '{"days": 9}'
    doc["spans"].append(extra)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    graphs, _, _ = read_all(otel.READER, path)
    assert branch_codes(graphs[1].graph) == ["S U A* T A* A~"]


# ----------------------------------------------------------------------------------------------- end to end
def test_convert_trains_every_sampled_session_turn_and_reports_both_compactions(tmp_path: Path) -> None:
    from msgtrain.cli import main

    out = tmp_path / "out"
    assert main(["convert", str(SAMPLES / "claude_code"), str(SAMPLES / "codex"), "-o", str(out), "-q"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["records"]["read"] == 28 + 5 + 54 and report["records"]["rejected"] == 0
    assert report["turns"]["trained"] == 7 + 2 + 7
    # Codex's reply kept only as history after the compaction (its context is the opaque summary) is in the books.
    assert report["turns"]["found"] == 17 and report["turns"]["dropped_by_reason"] == {"context_unknown": 1}
    assert report["cuts_by_reason"].get("compaction") == 2


# ----------------------------------------------------------------------------------------------- real logs
# Independent counts from the raw files: (graphs, branches per graph, sampled turns per graph).
def _cc_count(path: Path) -> tuple[int, list[int], list[int]]:
    if path.suffix == ".json":
        lines = json.loads(path.read_text())["loglines"]
        asst = sum(1 for r in lines if r["type"] == "assistant")
        return 1, [1 + sum(1 for r in lines if r.get("isCompactSummary"))], [asst]
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    msgs = [r for r in recs if r.get("type") in ("user", "assistant") and "message" in r]
    if not any("parentUuid" in r for r in msgs):  # hand-written linear export
        return 1, [1], [len({r["uuid"] for r in msgs if r["type"] == "assistant"})]
    by_uuid = {r["uuid"]: r for r in recs if "uuid" in r}
    owner = {
        b["id"]: r["message"]["id"]
        for r in msgs
        if r["type"] == "assistant"
        for b in r["message"]["content"]
        if b.get("type") == "tool_use"
    }

    def unit(r: dict[str, Any]) -> str:
        c = r["message"]["content"]
        if r["type"] == "assistant":
            return str(r["message"]["id"])
        if isinstance(c, list) and c and all(b.get("type") == "tool_result" for b in c):
            return owner[c[0]["tool_use_id"]]
        return str(r["uuid"])

    def message_parent(p: str | None) -> str | None:
        while p in by_uuid and by_uuid[p].get("type") not in ("user", "assistant"):
            p = by_uuid[p].get("parentUuid")
        return p if p in by_uuid else None

    def complete(r: dict[str, Any]) -> bool:  # the root of its chain is in this file
        p = r.get("parentUuid")
        while p is not None:
            if p not in by_uuid:
                return False
            p = by_uuid[p].get("parentUuid")
        return True

    units = {unit(r) for r in msgs}
    with_child = {
        unit(by_uuid[p]) for r in msgs if (p := message_parent(r.get("parentUuid"))) and unit(by_uuid[p]) != unit(r)
    }
    sampled = {unit(r) for r in msgs if r["type"] == "assistant" and complete(r)}
    return 1, [len(units - with_child)], [len(sampled)]


def _codex_count(path: Path) -> tuple[int, list[int], list[int]]:
    responses: list[list[str]] = []  # item types of each model response
    open_response = False
    branches = 1
    # prompts the UI logged (user_message events) and the user items the model was sent, since the last response;
    # once a prompt is logged only as the event, no later response is in a context the rollout holds
    events = items = 0
    unlogged = False
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        p = rec["payload"]
        model_item = rec["type"] == "response_item" and (
            p["type"] in ("reasoning", "function_call", "custom_tool_call", "web_search_call")
            or (p["type"] == "message" and p["role"] == "assistant")
        )
        if model_item:
            if not open_response:
                unlogged = unlogged or events > items
                events = items = 0
                responses.append(["unlogged"] if unlogged else [])
            responses[-1].append(p["type"])
            open_response = True
        elif (
            rec["type"] != "event_msg"
            or (p["type"] == "token_count" and p.get("info"))
            or p["type"] in ("task_started", "task_complete", "turn_aborted", "user_message")
        ):
            open_response = False
        if rec["type"] == "event_msg" and p["type"] == "user_message":
            events += 1
        text = str((p.get("content") or [{}])[0].get("text", "")) if p.get("type") == "message" else ""
        items += p.get("role") == "user" and not text.startswith(("<environment_context>", "# AGENTS.md", "<user_"))
        branches += rec["type"] == "compacted"
        unlogged = unlogged and rec["type"] != "compacted"
    trained = [r for r in responses if "web_search_call" not in r and "unlogged" not in r]
    return 1, [branches], [len(trained)]


def _gemini_count(path: Path) -> tuple[int, list[int], list[int]]:
    doc = json.loads(path.read_text())
    if isinstance(doc, list):
        return 0, [], []
    return 1, [1], [sum(1 for m in doc["messages"] if m["type"] == "gemini")]


def _swe_count(path: Path) -> tuple[int, list[int], list[int]]:
    doc = json.loads(path.read_text())
    stats = (doc.get("info") or {}).get("model_stats") or {}
    ran = stats.get("tokens_sent", 0) > 0 or stats.get("tokens_received", 0) > 0
    turns = sum(1 for m in doc["history"] if m["role"] == "assistant" and not m.get("is_demo"))
    return 1, [1], [turns if ran else 0]


def _openhands_count(path: Path) -> tuple[int, list[int], list[int]]:
    events = json.loads(path.read_text())
    responses = {
        e["tool_call_metadata"]["model_response"]["id"] for e in events if "action" in e and "tool_call_metadata" in e
    }
    plain = sum(
        1 for e in events if e.get("action") == "message" and e["source"] == "agent" and "tool_call_metadata" not in e
    )
    return 1, [1], [len(responses) + plain]


def _otel_count(path: Path) -> tuple[int, list[int], list[int]]:
    spans = json.loads(path.read_text())["spans"]
    spans.sort(key=lambda s: s["start_time"])
    sampled, previous = 0, None
    for s in spans:
        op = s["attributes"].get("gen_ai.operation.name")
        if op == "call_llm" and previous != "call_llm":
            sampled += 1
        if op in ("call_llm", "execute_tool"):
            previous = op
    return 1, [1], [sampled]


REAL_FILES: dict[str, tuple[str, Any, tuple[int, list[int], list[int]]]] = {
    "claude_code_spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl": ("claude_code", _cc_count, (1, [2], [139])),
    "claude_code_spotter/4d5611e5-241a-462a-8d15-5122611a9569/subagents/agent-a2898e3.jsonl": (
        "claude_code",
        _cc_count,
        (1, [1], [12]),
    ),
    "claude_code_spotter/4d5611e5-241a-462a-8d15-5122611a9569/subagents/agent-acompact-e1f845.jsonl": (
        "claude_code",
        _cc_count,
        (1, [3], [0]),
    ),
    "claude_code_spotter/short.jsonl": ("claude_code", _cc_count, (1, [1], [1])),
    "claude_code_spotter/tool_heavy.jsonl": ("claude_code", _cc_count, (1, [1], [4])),
    "claude_code_spotter/subagent.jsonl": ("claude_code", _cc_count, (1, [1], [12])),
    "claude_code_simonw/sample_session.jsonl": ("claude_code", _cc_count, (1, [1], [3])),
    "claude_code_simonw/sample_session.json": ("claude_code", _cc_count, (1, [2], [15])),
    "codex_codemie/rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl": (
        "codex",
        _codex_count,
        (1, [1], [63]),
    ),
    "codex_codemie/rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl": (
        "codex",
        _codex_count,
        # its prompts are logged only as user_message events: not one reply is in a context the file holds
        (1, [1], [0]),
    ),
    "codex_codemie/turn-1.jsonl": ("codex", _codex_count, (1, [1], [1])),
    "codex_codemie/turn-2.jsonl": ("codex", _codex_count, (1, [1], [2])),
    "codex_localpush_redacted/rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl": (
        "codex",
        _codex_count,
        (1, [2], [280]),
    ),
    "codex_localpush_redacted/rollout-2026-02-23T13-19-38-019c8a70-dda7-7f33-98ea-f30553347322.jsonl": (
        "codex",
        _codex_count,
        (1, [1], [1]),
    ),
    "gemini_cli_codemie/session-2025-12-01T21-45-5b959dae.json": ("gemini_cli", _gemini_count, (1, [1], [11])),
    "gemini_cli_codemie/session-2026-01-16T11-01-file-ops-37b7abef.json": ("gemini_cli", _gemini_count, (1, [1], [9])),
    "gemini_cli_codemie/logs.json": ("gemini_cli", _gemini_count, (0, [], [])),
    "swe_agent/function_calling_simple.traj": ("swe_agent", _swe_count, (1, [1], [0])),
    "swe_agent/marshmallow-1867.function_calling_replace.traj": ("swe_agent", _swe_count, (1, [1], [0])),
    "swe_agent/pydicom__pydicom-1458.gpt4.traj": ("swe_agent", _swe_count, (1, [1], [12])),
    "openhands/basic.json": ("openhands", _openhands_count, (1, [1], [2])),
    "openhands/basic_gui_mode.json": ("openhands", _openhands_count, (1, [1], [5])),
    "openhands/basic_interactions.json": ("openhands", _openhands_count, (1, [1], [3])),
    "otel_genai_any_agent/OPENAI_trace.json": ("otel", _otel_count, (1, [1], [3])),
    "otel_genai_any_agent/LANGCHAIN_trace.json": ("otel", _otel_count, (1, [1], [3])),
    "otel_genai_any_agent/SMOLAGENTS_trace.json": ("otel", _otel_count, (1, [1], [3])),
}


def _raw_records(path: Path) -> int:
    if path.suffix == ".jsonl":
        return sum(1 for line in path.read_text().splitlines() if line.strip())
    doc = json.loads(path.read_text())
    if isinstance(doc, list):
        return len(doc)
    for key in ("loglines", "messages", "history", "spans"):
        if key in doc:
            return len(doc[key])
    raise AssertionError(path)


@needs_shared
@pytest.mark.parametrize("rel", sorted(REAL_FILES))
def test_real_log_counts_match_the_pinned_and_the_independently_counted_numbers(rel: str) -> None:
    name, count, pinned = REAL_FILES[rel]
    path = REAL / rel
    graphs, rejects, skips = read_all(READERS[name], path)
    assert not rejects, [str(r.error) for r in rejects]
    got = (len(graphs), [len(g.graph.leaves()) for g in graphs], [sampled_count(g.graph) for g in graphs])
    assert got == pinned
    assert count(path) == pinned
    assert accounted(graphs, rejects, skips) == _raw_records(path)
    head = read_head(path)
    assert READERS[name].detect(path, head)


@needs_shared
def test_the_spotter_session_compaction_is_a_compaction_cut_and_its_sub_agents_are_own_policy_graphs() -> None:
    from msgtrain.linearize import linearize_graph, load_tokenizer

    session = REAL / "claude_code_spotter/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    (g,) = _cc_graphs(session)
    (edge,) = g.edges
    assert edge.kind is EdgeKind.COMPACTION and len(edge.old) > 100
    summary = g.nodes[edge.new[0]]
    assert summary.origin is Origin.INJECTED and summary.message.text.startswith("This session is being continued")
    result = linearize_graph(g, load_tokenizer(None))
    assert result.cuts["compaction"] == 1
    policies = {
        p.name: _cc_graphs(p)[0].policy for p in sorted((session.parent / session.stem / "subagents").glob("*.jsonl"))
    }
    assert policies == {"agent-a2898e3.jsonl": "subagent:Explore", "agent-acompact-e1f845.jsonl": "subagent:compact"}


# ------------------------------------------------------------------------------------------ context completeness
@pytest.mark.parametrize(
    ("sample", "missing"),
    [
        ("claude_code/session.jsonl", ["system_prompt", "tools"]),
        ("codex/rollout.jsonl", ["tools"]),  # the base instructions are logged: they are the system message
        ("gemini_cli/session.json", ["system_prompt", "tools"]),
        ("copilot_cli/session.jsonl", ["tools"]),  # system.message is logged
    ],
)
def test_session_logs_that_do_not_hold_the_agents_request_mark_what_they_lack(sample: str, missing: list[str]) -> None:
    from msgtrain.model.completeness import missing_context

    path = SAMPLES / sample
    reader = REGISTRY[sample.split("/")[0]]
    graphs = [e.graph for e in read_events(reader, path) if isinstance(e, ReadGraph)]
    assert graphs and all(missing_context(g) == missing for g in graphs)


# ----------------------------------------------------------------------------------------------- Claude stream-json
# The shape of `claude -p --verbose --output-format stream-json` (the Claude Agent SDK's message stream), as recorded
# from Claude Code 2.1.276 in jonasthim/styr internal/harness/claude/testdata/02_tool_read.jsonl @ 6401e7e4: hook and
# init system lines, a replayed prompt (`--replay-user-messages`), one assistant line per content block sharing the
# message id, partial-message `stream_event` lines, the tool result as a user line, a rate-limit line and the closing
# `result`. Sub-agent lines carry the `parent_tool_use_id` of the Task call that started them.
_SID = "180be86c-2552-4676-a118-3ebfe8122940"
_UUIDS = itertools.count()


def _stream_line(kind: str, parent: str | None = None, **fields: Any) -> dict[str, Any]:
    uuid = f"u-{next(_UUIDS)}"
    return {"type": kind, **fields, "parent_tool_use_id": parent, "session_id": _SID, "uuid": uuid}


def _stream_reply(mid: str, block: dict[str, Any], parent: str | None = None) -> dict[str, Any]:
    usage = {"input_tokens": 2, "cache_creation_input_tokens": 18090, "cache_read_input_tokens": 15119}
    message = {"model": "claude-fable-5-1", "id": mid, "type": "message", "role": "assistant", "content": [block]}
    return _stream_line("assistant", parent, message={**message, "stop_reason": None, "usage": usage})


def _stream_result(call_id: str, text: str, parent: str | None = None) -> dict[str, Any]:
    content = [{"tool_use_id": call_id, "type": "tool_result", "content": text}]
    return _stream_line("user", parent, message={"role": "user", "content": content})


def _stream_session(tmp_path: Path, *, replay_prompt: bool) -> Path:
    task = {"description": "find the note", "prompt": "Find note.txt", "subagent_type": "Explore"}
    lines = [
        {"type": "system", "subtype": "hook_started", "hook_name": "SessionStart:startup", "session_id": _SID},
        {"type": "system", "subtype": "init", "cwd": "/tmp/ws", "session_id": _SID, "tools": ["Task", "Read"]},
        *([_stream_line("user", message={"role": "user", "content": "Read note.txt."}, isReplay=True)] * replay_prompt),
        {"type": "stream_event", "event": {"type": "message_start"}, "session_id": _SID, "parent_tool_use_id": None},
        _stream_reply("msg_1", {"type": "thinking", "thinking": "", "signature": "CAQS"}),
        _stream_reply("msg_1", {"type": "tool_use", "id": "toolu_task", "name": "Task", "input": task}),
        _stream_line("user", "toolu_task", message={"role": "user", "content": [{"type": "text", "text": "Find it"}]}),
        _stream_reply("msg_s1", {"type": "tool_use", "id": "toolu_ls", "name": "Bash", "input": {}}, "toolu_task"),
        _stream_result("toolu_ls", "note.txt", "toolu_task"),
        _stream_reply("msg_s2", {"type": "text", "text": "It is ./note.txt"}, "toolu_task"),
        _stream_result("toolu_task", "It is ./note.txt"),
        _stream_reply("msg_2", {"type": "tool_use", "id": "toolu_read", "name": "Read", "input": {"file_path": "n"}}),
        _stream_result("toolu_read", "1\thello"),
        {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}, "session_id": _SID},
        _stream_reply("msg_3", {"type": "text", "text": "hello"}),
        {"type": "result", "subtype": "success", "result": "hello", "session_id": _SID, "total_cost_usd": 0.46},
    ]
    path = tmp_path / "stream.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_claude_stream_json_is_read_as_a_session_with_its_sub_agent_as_a_graph_of_its_own(tmp_path: Path) -> None:
    path = _stream_session(tmp_path, replay_prompt=True)
    assert detect_format(path).name == "claude_code"
    graphs, rejects, skips = read_all(claude_code.READER, path)
    assert not rejects
    assert accounted(graphs, rejects, skips) == len(path.read_text().splitlines())
    main, sub = (g.graph for g in graphs)
    assert branch_codes(main) == ["U A* T A* T A*"]
    assert [c.option_name for c in main.branches()[0].messages[1].calls] == ["Task"]  # thinking and call: one reply
    assert main.graph_id.startswith(f"claude-code:{_SID}")
    assert sub.policy == "subagent:Explore"  # from the Task call's input
    assert branch_codes(sub) == ["U A* T A*"]
    assert set(skips) == {f"non_message_record:{t}" for t in ("system", "stream_event", "rate_limit_event", "result")}


def test_a_claude_stream_whose_init_line_has_no_session_id_is_still_a_stream(tmp_path: Path) -> None:
    # Streams trimmed to their shape, as parsers' tests keep them: {"type":"system","subtype":"init","cwd":"/tmp"}.
    lines = [{"type": "system", "subtype": "init", "cwd": "/tmp", "tools": ["Read"]}]
    lines.append({"type": "user", "message": {"role": "user", "content": "hi"}})
    lines.append(
        {
            "type": "assistant",
            "message": {"id": "m1", "role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        }
    )
    path = tmp_path / "stream.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert detect_format(path).name == "claude_code"
    graphs, rejects, _ = read_all(claude_code.READER, path)
    assert not rejects and branch_codes(graphs[0].graph) == ["U A*"]


def test_a_cursor_cli_stream_is_not_read_as_a_claude_stream(tmp_path: Path) -> None:
    # `cursor-agent --print --output-format stream-json` copies Claude's init, user and assistant lines, but writes
    # text fragments without a message id and tool calls as tool_call events (shape from Cursor's CLI docs, as
    # parsers of it record it): read as a Claude stream, fragments would be replies and the calls would be lost.
    sid = "c6b62c6f-7ead-4fd6-9922-e952131177ff"
    lines = [
        {
            "type": "system",
            "subtype": "init",
            "apiKeySource": "login",
            "cwd": "/p",
            "session_id": sid,
            "model": "Claude 4 Sonnet",
        },
        {
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": "Read README.md"}]},
            "session_id": sid,
        },
        {
            "type": "assistant",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "I'll read "}]},
            "session_id": sid,
        },
        {
            "type": "tool_call",
            "subtype": "started",
            "call_id": "toolu_1",
            "tool_call": {"readToolCall": {"args": {"path": "README.md"}}},
            "session_id": sid,
        },
        {
            "type": "assistant",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
            "session_id": sid,
        },
    ]
    path = tmp_path / "cursor.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert not claude_code.READER.detect(path, read_head(path))


def test_replies_after_a_stream_line_of_an_unknown_type_are_not_trained(tmp_path: Path) -> None:
    path = _stream_session(tmp_path, replay_prompt=True)
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"msg_2"' in line)
    lines.insert(at, json.dumps({"type": "tool_call", "subtype": "completed", "call_id": "c9", "session_id": _SID}))
    path.write_text("\n".join(lines) + "\n")
    graphs, rejects, _ = read_all(claude_code.READER, path)
    assert not rejects
    assert branch_codes(graphs[0].graph) == ["U A* T A~ T A~"]  # the event may have been part of their context


def test_claude_stream_json_without_the_prompt_trains_nothing_whose_context_the_stream_lacks(tmp_path: Path) -> None:
    # `claude -p "prompt" --output-format stream-json` does not echo the prompt: every reply followed it.
    graphs, rejects, _ = read_all(claude_code.READER, _stream_session(tmp_path, replay_prompt=False))
    assert not rejects
    main, sub = (g.graph for g in graphs)
    assert branch_codes(main) == ["A~ T A~ T A~"]
    assert branch_codes(sub) == ["U A* T A*"]  # the sub-agent's own prompt is logged


# ----------------------------------------------------------------------------------------------- Qwen Code
# QwenLM/qwen-code packages/core/src/services/chatRecordingService.ts @ 015346f1 (ChatRecord): Claude Code's tree of
# uuid / parentUuid records under a sessionId, each message a Gemini Content (role user | model, parts), model and
# usageMetadata beside it, tool results as `tool_result` records, a `system` / `chat_compression` record holding the
# compressed history the model is sent from then on (systemPayload.compressedHistory).
def _qwen(uuid: str, parent: str | None, kind: str, **fields: Any) -> dict[str, Any]:
    base = {"uuid": uuid, "parentUuid": parent, "sessionId": "q1", "timestamp": "2025-11-20T10:00:00.000Z"}
    return {**base, "type": kind, "cwd": "/w", "version": "0.2.1", **fields}


def _content(role: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "parts": list(parts)}


def test_qwen_code_sessions_read_their_gemini_messages_and_resume_from_the_compressed_history(tmp_path: Path) -> None:
    call = {"functionCall": {"id": "call_1", "name": "list_directory", "args": {"path": "/w"}}}
    answer = {"functionResponse": {"id": "call_1", "name": "list_directory", "response": {"output": "a.txt"}}}
    usage = {"promptTokenCount": 11000, "candidatesTokenCount": 20}
    summary = _content("user", {"text": "<state_snapshot>listed /w: a.txt</state_snapshot>"})
    ack = _content("model", {"text": "Got it. Thanks for the additional context!"})
    records = [
        _qwen("u1", None, "user", message=_content("user", {"text": "List the files."})),
        _qwen("u2", "u1", "assistant", model="qwen3-coder-plus", message=_content("model", {"text": "Listing."}, call)),
        _qwen("u3", "u2", "tool_result", message=_content("user", answer), toolCallResult={"callId": "call_1"}),
        _qwen(
            "u4",
            "u3",
            "assistant",
            model="qwen3-coder-plus",
            message=_content("model", {"text": "a.txt"}),
            usageMetadata=usage,
        ),
        _qwen("u5", "u4", "system", subtype="ui_telemetry", systemPayload={"uiEvent": {}}),
        _qwen(
            "u6",
            "u5",
            "system",
            subtype="chat_compression",
            systemPayload={"info": {}, "compressedHistory": [summary, ack]},
        ),
        _qwen("u7", "u6", "user", message=_content("user", {"text": "And now?"})),
        _qwen(
            "u8",
            "u7",
            "assistant",
            model="qwen3-coder-plus",
            message=_content("model", {"thought": True, "text": "Hm."}, {"text": "Still a.txt"}),
        ),
    ]
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert detect_format(path).name == "claude_code"
    graphs, rejects, skips = read_all(claude_code.READER, path)
    assert not rejects and accounted(graphs, rejects, skips) == len(records)
    (g,) = (x.graph for x in graphs)
    assert g.policy == "qwen-code"
    assert sorted(branch_codes(g)) == ["U A* T A*", "U! A! U A*"]  # after compression: its history, then the turn
    last = next(n for n in g.sampled_nodes() if n.message.text == "Still a.txt")
    assert [p.kind for p in last.message.parts] == ["reasoning", "text"]
    assert any(e.kind is EdgeKind.COMPACTION for e in g.edges)
    first_answer = next(n for n in g.sampled_nodes() if n.message.text == "a.txt")
    assert first_answer.message.metadata["usage"]["promptTokenCount"] == 11000


def test_a_gemini_cli_stream_joins_text_fragments_into_one_reply_before_its_calls(tmp_path: Path) -> None:
    # google-gemini/gemini-cli docs/cli/headless.md @ 38950546 ("Streaming JSON output"): init, message (assistant
    # text as delta fragments), tool_use (tool_name, tool_id, parameters), tool_result, result.
    t = "2025-11-20T10:00:00.000Z"
    lines = [
        {"type": "init", "timestamp": t, "session_id": "s1", "model": "gemini-2.5-pro"},
        {"type": "message", "role": "user", "content": "List files", "timestamp": t},
        {"type": "message", "role": "assistant", "content": "I'll list ", "delta": True, "timestamp": t},
        {"type": "message", "role": "assistant", "content": "them.", "delta": True, "timestamp": t},
        {"type": "tool_use", "tool_name": "run_shell_command", "tool_id": "sh-1", "parameters": {"command": "ls"}},
        {"type": "tool_result", "tool_id": "sh-1", "status": "success", "output": "a.txt", "timestamp": t},
        {"type": "message", "role": "assistant", "content": "One file.", "delta": True, "timestamp": t},
        {"type": "result", "status": "success", "stats": {"total_tokens": 250, "input_tokens": 200}, "timestamp": t},
    ]
    path = tmp_path / "stream.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert detect_format(path).name == "gemini_cli"
    graphs, rejects, skips = read_all(gemini_cli.READER, path)
    assert not rejects and accounted(graphs, rejects, skips) == len(lines)
    (g,) = (x.graph for x in graphs)
    assert branch_codes(g) == ["U A* T A*"]
    call = g.branches()[0].messages[1]
    assert isinstance(call, OptionCallMessage) and call.text == "I'll list them."
    assert call.calls[0].arguments == {"command": "ls"}


def test_a_codex_exec_json_stream_is_rejected_naming_its_rollout_and_counting_its_replies(tmp_path: Path) -> None:
    # openai/codex docs/exec.md @ 6171a7ff ("JSON output mode"): thread / turn / item events; items are the CLI's
    # account (agent_message, reasoning, command_execution with its output), not the model's calls.
    thread = "0199a213-81c0-7800-8aa1-bbab2a035a53"
    lines = [
        {"type": "thread.started", "thread_id": thread},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "**Listing files**"}},
        {
            "type": "item.completed",
            "item": {
                "id": "item_1",
                "type": "command_execution",
                "command": "bash -lc ls",
                "aggregated_output": "a.txt\n",
                "exit_code": 0,
                "status": "completed",
            },
        },
        {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message", "text": "One file: a.txt"}},
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 24763, "cached_input_tokens": 24448, "output_tokens": 122},
        },
    ]
    path = tmp_path / "exec.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert detect_format(path).name == "codex"
    graphs, (reject,), _ = read_all(codex.READER, path)
    assert not graphs
    assert reject.error.code == "unsupported_log" and reject.turns == 1 and reject.count == len(lines)
    assert thread in (reject.error.hint or "")
