"""Readers added in the second round: tau2-bench, mini-SWE-agent, ToolBench, Gemini CLI JSONL, GitHub Copilot CLI,
OpenHands V1 conversation folders.

The golden structures below were reviewed by hand against the files in sample_logs/ (branch codes: S U A T for
system/user/assistant/tool; * sampled, ~ carried, ! injected). On the real third-party logs in ../shared the number
of trained turns is recounted from the raw JSON with a few lines per format, independently of the readers.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from msgtrain.errors import MsgtrainError
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadEvent, ReadGraph, ReadReject, ReadSkip, read_head
from msgtrain.ingest.detect import detect_format, specific_readers
from msgtrain.ingest.registry import REGISTRY, directory_reader, unit_directories
from msgtrain.model.completeness import missing_context
from msgtrain.model.graph import MessageGraph
from msgtrain.model.validate import validate_graph
from msgtrain.run.parts import LinearizeSettings, convert_file
from msgtrain.run.plan import discover_inputs
from msgtrain.run.storage import file_digest
from tests.conftest import shared_path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
_CODE = {"system": "S", "user": "U", "assistant": "A", "tool": "T"}
_MARK = {"sampled": "*", "carried": "~", "injected": "!", "context": "", "edited": "e", "prefill": "p"}
SETTINGS = LinearizeSettings(None, None, (), None, None)


def read_all(path: Path) -> tuple[list[ReadGraph], list[ReadReject], Counter[str]]:
    events: list[ReadEvent] = list(read_events(detect_format(path), path))
    graphs = [e for e in events if isinstance(e, ReadGraph)]
    rejects = [e for e in events if isinstance(e, ReadReject)]
    skips: Counter[str] = Counter()
    for e in events:
        if isinstance(e, ReadSkip):
            skips[e.reason] += e.count
    return graphs, rejects, skips


def branch_codes(graph: MessageGraph) -> list[str]:
    return [" ".join(_CODE[n.message.role] + _MARK[n.origin.value] for n in b.nodes) for b in graph.branches()]


def trained_turns(path: Path) -> int:
    samples, stats, rejects = convert_file(path, SETTINGS)
    assert not rejects, rejects
    assert samples
    return stats.turns_trained


# ------------------------------------------------------------------------------------------------ samples
# sample -> (format, [(policy, branch codes) per graph], {skip reason: count}, records read)
GOLDEN: dict[str, tuple[str, list[tuple[str, list[str]]], dict[str, int], int]] = {
    "tau2_bench/results.json": (
        "tau2_bench",
        [
            ("tau2-agent", ["S A! U A* T A* T A* T A* U"]),
            # The user simulator's own tool call and result are not part of the agent's conversation.
            ("tau2-agent", ["S A! U A*"]),
        ],
        {},
        2,
    ),
    "mini_swe_agent/run.traj.json": (
        "mini_swe_agent",
        [("mini-swe-agent", ["S U A* U A*"])],
        {"exit_record": 1},
        6,
    ),
    "toolbench/answer_DFS.json": (
        "toolbench",
        [
            (
                "toolbench",
                [
                    # The first try, then the search gave up on it and restarted (a sampled Finish).
                    "S U A* T A*",
                    # The final chain, with the diversity prompt it was sampled after (from train_messages).
                    "S U A* T U A* T A*",
                    # The same retry as the tree holds it: without that prompt, so carried, and so is what follows.
                    "S U A* T A~ T A~",
                ],
            )
        ],
        {},
        1,
    ),
    "gemini_cli/session.jsonl": (
        "gemini_cli",
        # g1 is logged twice (its tool call finishing); the last copy, with the result, is the message. The
        # rewound question and answer stay as a branch: the answer was sampled there.
        [("gemini-cli", ["U A* T A* U A*", "U A* T A* U A*"])],
        {"metadata_update": 1, "non_message_record:info": 1},
        12,
    ),
    "copilot_cli/session.jsonl": (
        "copilot_cli",
        [("copilot-cli", ["S U A* T A* U A* T A*"])],
        {
            "non_message_record:session.model_change": 1,
            "non_message_record:assistant.turn_start": 3,
            "non_message_record:tool.execution_start": 2,
            "non_message_record:assistant.turn_end": 3,
            "repeated_system_message": 1,
            "non_message_record:session.shutdown": 1,
        },
        21,
    ),
    "openhands_v1/conv0001": (
        "openhands_v1",
        # Two actions of one response (same llm_response_id) are one message with parallel calls.
        [("openhands", ["S U A* T T A*"])],
        {"non_message_record:ConversationStateUpdateEvent": 1},
        9,
    ),
}


@pytest.mark.parametrize("sample", sorted(GOLDEN))
def test_each_new_sample_reads_into_its_reviewed_graphs_and_accounts_every_record(sample: str) -> None:
    name, expected, skips_expected, records = GOLDEN[sample]
    path = SAMPLES / sample
    assert detect_format(path).name == name
    graphs, rejects, skips = read_all(path)
    assert not rejects, [str(r.error) for r in rejects]
    assert sorted((g.graph.policy, sorted(branch_codes(g.graph))) for g in graphs) == sorted(
        (p, sorted(b)) for p, b in expected
    )
    assert dict(skips) == skips_expected
    assert sum(g.records for g in graphs) + len(rejects) + sum(skips.values()) == records
    for g in graphs:
        assert validate_graph(g.graph) == []


@pytest.mark.parametrize("sample", sorted(s for s in GOLDEN if (SAMPLES / s).is_file()))
def test_each_new_sample_is_claimed_by_its_own_reader_and_no_other(sample: str) -> None:
    detect_format(SAMPLES / sample)  # imports the registry
    path = SAMPLES / sample
    head = read_head(path)
    assert [r.name for r in specific_readers() if r.detect(path, head)] == [GOLDEN[sample][0]]
    assert directory_reader(path.parent) is None


def test_a_conversation_folder_is_one_input_and_its_event_files_are_claimed_by_no_reader(tmp_path: Path) -> None:
    folder = SAMPLES / "openhands_v1/conv0001"
    assert directory_reader(folder) is not None and directory_reader(folder).name == "openhands_v1"  # type: ignore[union-attr]
    for event in sorted((folder / "events").iterdir()):
        assert [r.name for r in REGISTRY.values() if r.detect(event, read_head(event))] == []
    # Discovery hands the folder over once, from any directory above it, next to ordinary log files.
    files, ignored = discover_inputs([str(SAMPLES / "openhands_v1")])
    assert (files, ignored) == ([folder], [])
    files, _ = discover_inputs([str(SAMPLES)])
    assert folder in files
    assert not [f for f in files if folder in f.parents]
    assert SAMPLES / "copilot_cli/session.jsonl" in files
    # A folder no reader takes is not a log.
    with pytest.raises(MsgtrainError, match="no reader takes this directory"):
        detect_format(SAMPLES / "copilot_cli")


def test_a_conversation_folder_digest_changes_with_any_event_file(tmp_path: Path) -> None:
    folder = tmp_path / "conv"
    shutil.copytree(SAMPLES / "openhands_v1/conv0001", folder)
    before = file_digest(folder)
    last = sorted((folder / "events").iterdir())[-1]
    last.write_text(last.read_text().replace("timed out", "failed"))
    assert file_digest(folder) != before


def test_convert_validate_and_inspect_take_a_conversation_folder(tmp_path: Path) -> None:
    from msgtrain.cli import main

    out = tmp_path / "out"
    assert main(["convert", str(SAMPLES / "openhands_v1"), "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["records"]["read"] == 9 and report["turns"]["trained"] == 2
    assert main(["validate", str(SAMPLES / "openhands_v1")]) == 0
    assert main(["inspect", str(SAMPLES / "openhands_v1/conv0001")]) == 0


def test_a_bad_event_file_is_one_reject_and_taints_what_follows(tmp_path: Path) -> None:
    folder = tmp_path / "conv"
    shutil.copytree(SAMPLES / "openhands_v1/conv0001", folder)
    bad = sorted((folder / "events").iterdir())[4]  # the first observation
    bad.write_text("{not json")
    graphs, rejects, skips = read_all(folder)
    assert [r.error.code for r in rejects] == ["bad_json"]
    assert branch_codes(graphs[0].graph) == ["S U A* T A~"]
    assert sum(g.records for g in graphs) + len(rejects) + sum(skips.values()) == 9


def test_gemini_jsonl_keeps_the_last_copy_of_a_message_in_the_place_of_the_first() -> None:
    (g,), _, _ = read_all(SAMPLES / "gemini_cli/session.jsonl")
    branch = max(g.graph.branches(), key=lambda b: len(b.nodes))
    tool = branch.messages[2]
    assert tool.role == "tool" and tool.result.result == "3 notes.txt"  # type: ignore[union-attr]
    assert g.graph.graph_id == "gemini-cli:demo-jsonl-1"


def test_gemini_jsonl_set_messages_replaces_the_list_and_keeps_the_old_one_as_a_compacted_branch(
    tmp_path: Path,
) -> None:
    lines = [
        {"sessionId": "s", "projectHash": "p", "startTime": "t"},
        {"id": "u1", "type": "user", "content": "first question"},
        {"id": "g1", "type": "gemini", "content": "first answer", "model": "m"},
        # Compression: the model's context becomes a summary plus the last answer, re-sent as history.
        {
            "$set": {
                "messages": [
                    {"id": "s1", "type": "user", "content": "Summary: asked a question, got an answer."},
                    {"id": "g1", "type": "gemini", "content": "first answer", "model": "m"},
                ]
            }
        },
        {"id": "u2", "type": "user", "content": "second question"},
        {"id": "g2", "type": "gemini", "content": "second answer", "model": "m"},
    ]
    path = tmp_path / "session-x.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    (g,), rejects, skips = read_all(path)
    assert not rejects and not skips and g.records == 6
    assert sorted(branch_codes(g.graph)) == ["U A*", "U A~ U A*"]
    assert [e.kind.value for e in g.graph.edges] == ["compaction"]


def test_copilot_reads_transformed_user_content_reasoning_and_error_results() -> None:
    (g,), _, _ = read_all(SAMPLES / "copilot_cli/session.jsonl")
    (branch,) = g.graph.branches()
    user, first = branch.messages[1], branch.messages[2]
    assert user.text.startswith("<current_datetime>")
    assert first.reasoning == "I should run ls."  # type: ignore[union-attr]
    assert branch.messages[-2].result.is_error  # type: ignore[union-attr]
    assert g.graph.graph_id == "copilot-cli:demo-copilot-1"
    gen = g.graph.generations[branch.nodes[2].id]
    assert gen.model == "demo-model" and gen.sampling == {"reasoning_effort": "medium"}


def test_a_copilot_tool_execution_nobody_requested_makes_later_turns_carried(tmp_path: Path) -> None:
    lines = (SAMPLES / "copilot_cli/session.jsonl").read_text().splitlines()
    stray = {
        "type": "tool.execution_complete",
        "data": {"toolCallId": "unrequested", "success": True, "result": {"content": "x"}},
        "id": "stray",
        "timestamp": "2026-01-03T09:00:09.500Z",
        "parentId": "e08",
    }
    lines.insert(9, json.dumps(stray))
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(lines) + "\n")
    (g,), _, skips = read_all(path)
    assert skips["tool_execution_without_request"] == 1
    assert branch_codes(g.graph) == ["S U A* T A~ U A~ T A~"]


def test_tau2_results_carry_reward_task_and_trial_and_pair_a_reused_call_id_with_its_own_call() -> None:
    graphs, _, _ = read_all(SAMPLES / "tau2_bench/results.json")
    first = graphs[0]
    assert first.extras["reward"] == 1.0 and first.extras["task_id"] == "t1" and first.extras["trial"] == 0
    assert graphs[1].extras["reward"] == 0.0
    assert first.graph.metadata["domain"] == "library"
    assert graphs[1].graph.metadata["user_tool_messages"] == 2
    (branch,) = first.graph.branches()
    ids = [
        (m.role, getattr(m, "calls", None) and m.calls[0].invocation_id, getattr(m, "result", None))
        for m in branch.messages
    ]
    # get_loan_0 is called, answered, then called again after an answer: two calls, two results, no problem.
    assert [i for r, i, _ in ids if r == "assistant" and i] == ["get_loan_0", "renew_0", "get_loan_0"]
    assert validate_graph(first.graph) == []


def test_a_tau2_simulation_that_cannot_be_read_is_one_reject_and_the_others_convert(tmp_path: Path) -> None:
    doc = json.loads((SAMPLES / "tau2_bench/results.json").read_text())
    doc["simulations"][0]["messages"][2]["tool_calls"] = [{"name": "no id"}]
    doc["simulations"].append({"id": "broken", "messages": "not a list"})
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    graphs, rejects, _ = read_all(path)
    assert [g.extras["simulation_id"] for g in graphs] == ["sim-2"]
    assert [(str(r.source).split("(")[-1], r.error.code) for r in rejects] == [
        ("simulations[0])", "bad_tool_call"),
        ("simulations[2])", "bad_record"),
    ]


def test_a_mini_swe_agent_run_without_model_calls_is_injected_not_sampled(tmp_path: Path) -> None:
    doc = json.loads((SAMPLES / "mini_swe_agent/run.traj.json").read_text())
    doc["info"]["model_stats"] = {"instance_cost": 0.0, "api_calls": 0}
    path = tmp_path / "replay.traj.json"
    path.write_text(json.dumps(doc))
    (g,), _, _ = read_all(path)
    assert branch_codes(g.graph) == ["S U A! U A!"]


def test_mini_swe_agent_info_goes_to_the_graph_metadata() -> None:
    (g,), _, _ = read_all(SAMPLES / "mini_swe_agent/run.traj.json")
    meta = g.graph.metadata
    assert meta["exit_status"] == "Submitted" and meta["submission"].startswith("diff --git")
    assert meta["model_stats"] == {"instance_cost": 0.01, "api_calls": 2}
    assert meta["instance_id"] == "demo__x-1"


def test_a_toolbench_thought_without_an_action_is_a_text_answer_and_the_steps_after_it_hang_below(
    tmp_path: Path,
) -> None:
    doc = json.loads((SAMPLES / "toolbench/answer_DFS.json").read_text())
    give_up = doc["tree"]["tree"]["children"][0]["children"][0]["children"][0]  # Finish under the first try
    then = {"node_type": "Thought", "description": "I give up.", "children": [give_up]}
    text = {"node_type": "Thought", "description": "Let me think about the city name.", "children": [then]}
    doc["tree"]["tree"]["children"][0]["children"][0]["children"][0] = text
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(doc))
    (g,), _, _ = read_all(path)
    assert "S U A* T A* A*" in branch_codes(g.graph)


def test_a_toolbench_run_marked_invalid_without_messages_is_skipped_not_rejected(tmp_path: Path) -> None:
    doc = json.loads((SAMPLES / "toolbench/answer_DFS.json").read_text())
    doc["answer_generation"].update(valid_data=False, train_messages=[])
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(doc))
    graphs, rejects, skips = read_all(path)
    assert (graphs, rejects, dict(skips)) == ([], [], {"no_valid_data": 1})


def test_toolbench_reward_is_the_win_flag_and_functions_are_the_environment() -> None:
    (g,), _, _ = read_all(SAMPLES / "toolbench/answer_DFS.json")
    assert g.extras == {"reward": 1.0}
    assert [t["function"]["name"] for t in g.graph.env.tools] == ["weather_for_demo", "Finish"]


# ------------------------------------------------------------------------------------------------ real logs
def _tau2_count(doc: dict[str, Any]) -> int:
    # The agent's messages after the orchestrator's opening greeting.
    return sum(1 for s in doc["simulations"] for i, m in enumerate(s["messages"]) if m["role"] == "assistant" and i > 0)


def _mini_count(doc: dict[str, Any]) -> int:
    return sum(1 for m in doc["messages"] if m["role"] == "assistant")


def _toolbench_count(doc: dict[str, Any]) -> int:
    # Every train_messages list ends in one step of the final chain; the tree adds the steps reached by first
    # children only (later children were sampled after a diversity prompt the tree does not hold), minus those that
    # are also train steps (the shared start of the final chain, before its first diversity prompt).
    lists = doc["answer_generation"]["train_messages"]
    final = lists[-1]
    train_chain = []
    for m in final[2:]:
        if m["role"] == "user":
            break
        if m["role"] == "assistant":
            train_chain.append((m["function_call"]["name"], m["function_call"]["arguments"]))
    first_chain = []
    action = ""
    node = doc["tree"]["tree"]
    while node.get("children"):
        node = node["children"][0]
        if node["node_type"] == "Action Input":
            first_chain.append((action, node["description"]))
        elif node["node_type"] == "Action":
            action = node["description"]
    shared = 0
    while shared < min(len(first_chain), len(train_chain)) and first_chain[shared] == train_chain[shared]:
        shared += 1
    return len(lists) + len(first_chain) - shared


def _gemini_jsonl_count(path: Path) -> int:
    # Message lines fold by id (the last copy wins); no $rewindTo or $set.messages in this log.
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert not any("$rewindTo" in x or "messages" in x.get("$set", {}) for x in lines)
    return len({x["id"] for x in lines if x.get("type") == "gemini"})


def _copilot_count(path: Path) -> int:
    # Model responses up to the first tool execution no response requested (after it the context is unknown).
    requested: set[str] = set()
    count = 0
    for line in path.read_text().splitlines():
        event = json.loads(line)
        if event["type"] == "assistant.message":
            count += 1
            requested.update(r["toolCallId"] for r in event["data"]["toolRequests"])
        elif event["type"] == "tool.execution_complete" and event["data"]["toolCallId"] not in requested:
            return count
    return count


def _openhands_v1_count(path: Path) -> int:
    # One turn per model response: actions grouped by llm_response_id, plus the agent's plain messages.
    events = [json.loads(p.read_text()) for p in sorted((path / "events").glob("event-*.json"))]
    responses = {e["llm_response_id"] for e in events if e["kind"] == "ActionEvent"}
    replies = [e for e in events if e["kind"] == "MessageEvent" and e["source"] == "agent"]
    return len(responses) + len(replies)


REAL_NEW: dict[str, tuple[str, Any, int]] = {
    "tau2_bench/airline_run1.first10.json": ("tau2_bench", _tau2_count, 100),
    "mini_swe_agent/pvlib__pvlib-python-1072.traj.json": ("mini_swe_agent", _mini_count, 74),
    "toolbench_dfs/G1_answer_10_ChatGPT_DFS_woFilter_w2.json": ("toolbench", _toolbench_count, 3),
    "toolbench_dfs/G2_answer_127_ChatGPT_DFS_woFilter_w2.json": ("toolbench", _toolbench_count, 5),
    "gemini_cli_jsonl_vct/gemini.jsonl": ("gemini_cli", _gemini_jsonl_count, 6),
    "copilot_cli_vct/copilot.jsonl": ("copilot_cli", _copilot_count, 3),
    "openhands_v1_sdk/cd94562403b9487ebdd4018e3f531dfd": ("openhands_v1", _openhands_v1_count, 3),
}


@pytest.mark.parametrize("rel", sorted(REAL_NEW))
def test_real_new_format_logs_train_the_independently_counted_number_of_turns(rel: str) -> None:
    name, count, pinned = REAL_NEW[rel]
    path = shared_path("real_logs", *rel.split("/"))
    assert detect_format(path).name == name
    graphs, rejects, _ = read_all(path)
    assert not rejects, [str(r.error) for r in rejects]
    for g in graphs:
        assert validate_graph(g.graph) == []
    doc = path if path.is_dir() or path.suffix == ".jsonl" else json.loads(path.read_text())
    assert count(doc) == pinned
    assert trained_turns(path) == pinned


# Folder of ../shared/real_logs -> the format of every log file in it (None: not a log, e.g. a manifest).
EXPECTED_FOLDER_FORMAT: dict[str, str] = {
    "api_cassettes_pydantic_ai": "cassettes",
    "cassettes_crewai": "cassettes",
    "cassettes_simonw_llm": "cassettes",
    "claude_code_simonw": "claude_code",
    "claude_code_spotter": "claude_code",
    "codex_codemie": "codex",
    "codex_localpush_redacted": "codex",
    "gemini_cli_codemie": "gemini_cli",
    "gemini_cli_jsonl_vct": "gemini_cli",
    "copilot_cli_vct": "copilot_cli",
    "mini_swe_agent": "mini_swe_agent",
    "openhands": "openhands",
    "otel_genai_any_agent": "otel",
    "sharegpt_llamafactory": "sharegpt",
    "swe_agent": "swe_agent",
    "tau2_bench": "tau2_bench",
    "tau_bench": "openai_chat",
    "toolbench_dfs": "toolbench",
}
NEW_READERS = {"tau2_bench", "mini_swe_agent", "toolbench", "copilot_cli", "openhands_v1"}
_NOT_LOGS = {"LICENSE", "LICENSE.md", "README.md", "manifest.json", "PROVENANCE.md"}


def test_every_real_log_file_is_detected_as_exactly_its_folders_format() -> None:
    real = shared_path("real_logs")
    detect_format(SAMPLES / "tau2_bench/results.json")  # imports the registry
    wrong = []
    for folder, expected in EXPECTED_FOLDER_FORMAT.items():
        for path in sorted((real / folder).rglob("*")):
            if not path.is_file() or path.name in _NOT_LOGS or path.name.startswith("."):
                continue
            head = read_head(path)
            claimed = [r.name for r in specific_readers() if r.detect(path, head)]
            mine = [n for n in claimed if n in NEW_READERS]
            # The generic conversation readers come last in detection order; what matters is the first claim, and
            # that no reader of this round claims another format's file.
            if not claimed or claimed[0] != expected or mine not in ([], [expected]):
                wrong.append(f"{path.relative_to(real)}: {claimed}")
    assert not wrong, wrong


def test_the_real_openhands_v1_folder_is_one_input_and_nothing_else_under_real_logs_is_a_folder_log() -> None:
    real = shared_path("real_logs")
    folder = real / "openhands_v1_sdk/cd94562403b9487ebdd4018e3f531dfd"
    assert unit_directories(real) == [folder]
    files, _ = discover_inputs([str(real)])
    assert folder in files and not [f for f in files if folder in f.parents]


def test_tau2_llm_agent_samples_start_with_the_system_prompt_built_from_the_policy_and_carry_the_tools() -> None:
    graphs, _, _ = read_all(SAMPLES / "tau2_bench/results.json")
    (branch,) = graphs[0].graph.branches()
    system = branch.messages[0]
    assert system.role == "system" and system.text.startswith("<instructions>\nYou are a customer service agent")
    assert system.text.endswith("<policy>\n# Library policy\nRenew a loan only once.\n</policy>")
    assert [t["function"]["name"] for t in graphs[0].graph.env.tools] == ["get_loan", "renew"]
    assert missing_context(graphs[0].graph) == []


def test_tau2_agent_whose_prompt_or_tools_the_file_lacks_is_marked_context_incomplete(tmp_path: Path) -> None:
    doc = json.loads((SAMPLES / "tau2_bench/results.json").read_text())
    doc["info"]["agent_info"]["implementation"] = "my_custom_agent"
    doc["info"]["environment_info"]["tool_defs"] = None
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    graphs, _, _ = read_all(path)
    assert all(branch_codes(g.graph)[0].startswith("A!") for g in graphs)  # no prompt invented
    assert all(missing_context(g.graph) == ["system_prompt", "tools"] for g in graphs)


def test_copilot_replies_kept_as_carried_context_are_in_the_turn_books_and_validate_agrees(tmp_path: Path) -> None:
    from msgtrain.cli import main

    path = shared_path("real_logs", "copilot_cli_vct", "copilot.jsonl")
    out = tmp_path / "out"
    code = main(["convert", str(path), "-o", str(out), "-q"])
    report = json.loads((out / "report.json").read_text())
    # Six assistant.message events: three after a tool execution no reply requested are carried, not trained.
    turns = report["turns"]
    assert (turns["found"], turns["trained"], turns["dropped"]) == (6, 3, 3)
    assert turns["dropped_by_reason"] == {"context_unknown": 3}
    assert code == 0 and main(["validate", str(path)]) == 0


def test_convert_exits_like_validate_when_turns_are_dropped_for_a_failure(tmp_path: Path) -> None:
    from msgtrain.cli import main

    logs = shared_path("real_logs", "toolbench_dfs")
    # gpt-oss's template cannot render ToolBench's legacy function messages: every turn is a render_error drop.
    tokenizer = str(shared_path("tokenizers", "gpt-oss"))
    convert = main(["convert", str(logs), "-o", str(tmp_path / "out"), "--tokenizer", tokenizer, "-q"])
    validate = main(["validate", str(logs), "--tokenizer", tokenizer])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["turns"]["dropped_by_reason"]["render_error"] == 8
    assert convert == validate == 3
