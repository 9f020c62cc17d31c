"""Readers added in the second round: tau2-bench, mini-SWE-agent, ToolBench, Gemini CLI JSONL, GitHub Copilot CLI,
OpenHands V1 conversation folders.

The golden structures below were reviewed by hand against the files in sample_logs/ (branch codes: S U A T for
system/user/assistant/tool; * sampled, ~ carried, ! injected). On the real third-party logs in ../shared the number
of trained turns is recounted from the raw JSON with a few lines per format, independently of the readers.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from msgtrain.ingest.base import REGISTRY, ReadEvent, ReadGraph, ReadReject, ReadSkip, detect_format, read_head
from msgtrain.model.graph import MessageGraph
from msgtrain.model.validate import validate_graph
from msgtrain.run.parts import LinearizeSettings, convert_file
from tests.conftest import shared_path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
_CODE = {"system": "S", "user": "U", "assistant": "A", "tool": "T"}
_MARK = {"sampled": "*", "carried": "~", "injected": "!", "context": "", "edited": "e", "prefill": "p"}
SETTINGS = LinearizeSettings(None, None, (), None, None)


def read_all(path: Path) -> tuple[list[ReadGraph], list[ReadReject], Counter[str]]:
    events: list[ReadEvent] = list(detect_format(path).read(path))
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
            ("tau2-agent", ["A! U A* T A* T A* T A* U"]),
            # The user simulator's own tool call and result are not part of the agent's conversation.
            ("tau2-agent", ["A! U A*"]),
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


@pytest.mark.parametrize("sample", sorted(GOLDEN))
def test_each_new_sample_is_claimed_by_its_own_reader_and_no_other(sample: str) -> None:
    detect_format(SAMPLES / sample)  # imports the registry
    path = SAMPLES / sample
    head = read_head(path)
    assert [r.name for r in REGISTRY.values() if r.detect(path, head)] == [GOLDEN[sample][0]]


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


REAL_NEW: dict[str, tuple[str, Any, int]] = {
    "tau2_bench/airline_run1.first10.json": ("tau2_bench", _tau2_count, 100),
    "mini_swe_agent/pvlib__pvlib-python-1072.traj.json": ("mini_swe_agent", _mini_count, 74),
    "toolbench_dfs/G1_answer_10_ChatGPT_DFS_woFilter_w2.json": ("toolbench", _toolbench_count, 3),
    "toolbench_dfs/G2_answer_127_ChatGPT_DFS_woFilter_w2.json": ("toolbench", _toolbench_count, 5),
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
    assert count(json.loads(path.read_text())) == pinned
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
            claimed = [r.name for r in REGISTRY.values() if r.detect(path, head)]
            mine = [n for n in claimed if n in NEW_READERS]
            # The generic conversation readers come last in detection order; what matters is the first claim, and
            # that no reader of this round claims another format's file.
            if not claimed or claimed[0] != expected or mine not in ([], [expected]):
                wrong.append(f"{path.relative_to(real)}: {claimed}")
    assert not wrong, wrong
