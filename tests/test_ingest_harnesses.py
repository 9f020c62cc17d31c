"""Readers for the logs eval and RL harnesses write: Inspect AI, PrimeIntellect verifiers, smolagents, AutoGen / AG2.

The fixtures are written here, in exactly the shape of the real logs (never the third-party data itself):
- Inspect AI: ``sample_logs/inspect_ai/popularity.json`` follows UKGovernmentBEIS/inspect_ai
  ``tests/analysis/test_logs/2025-05-12T20-28-26-04-00_security-guide.json`` (log format v2: model events with
  ``attachment://`` inputs, a grader call under a ``scorers`` span); the ``.eval`` archive built below follows
  ``tests/log/test_eval_log/log_message_deduplication.eval`` (``header.json``, ``samples/<id>_epoch_<n>.json``,
  ``message_pool`` + ``input_refs``), both at commit 499e6152e7b8fc8cbd8ac5283536572aa6e4ab17.
- verifiers: ``sample_logs/verifiers/results.jsonl`` follows PrimeIntellect-ai/verifiers
  ``environments/math_python/outputs/evals/math-python--gpt-5-mini/0953dadd/results.jsonl`` at f31bd080 (tool calls
  as JSON strings, tool messages without ``tool_call_id``, the RLM harness restating the prompt),
  ``environments/gsm8k/outputs/evals/gsm8k--gpt-4.1-mini/d497acc3/results.jsonl`` at 0404fcbc (single turn, empty
  completions) and ``verifiers/legacy/utils/save_utils.py`` ``state_to_output`` at a60a606e (``tool_defs``,
  ``metrics``, ``token_usage``).
- smolagents: ``sample_logs/smolagents/steps.json`` follows ``AgentMemory.get_full_steps()`` / ``ActionStep.dict()``
  in huggingface/smolagents ``src/smolagents/memory.py`` at e3a5b8994b301983b91c0325546e9dc82eab8cf0 (roles
  ``tool-call`` / ``tool-response``; the model classes' ``get_clean_message_list`` in ``models.py``).
- AutoGen: ``sample_logs/autogen/agent_state.json`` follows the ``TeamState`` / ``AssistantAgentState``
  (``llm_context.messages``) that microsoft/autogen's agentchat state tutorial prints
  (``python/docs/src/user-guide/agentchat-user-guide/tutorial/state.ipynb``); the chat messages below follow
  ``TaskResult.messages`` (``autogen_agentchat.messages``: ``TextMessage``, ``ToolCallRequestEvent``,
  ``ToolCallExecutionEvent``, ``ToolCallSummaryMessage``).
"""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from msgtrain.cli import main
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject, ReadSkip
from msgtrain.ingest.detect import detect_format
from msgtrain.model.completeness import missing_context
from msgtrain.model.graph import MessageGraph
from msgtrain.model.message import OptionCallMessage, OptionResultMessage

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
_CODE = {"system": "S", "user": "U", "assistant": "A", "tool": "T"}
_MARK = {"sampled": "*", "carried": "~", "injected": "!", "context": "", "edited": "e", "prefill": "p"}


def read_all(path: Path) -> tuple[str, list[ReadGraph], list[ReadReject], Counter[str]]:
    reader = detect_format(path)
    events = list(read_events(reader, path))
    skips: Counter[str] = Counter()
    for e in events:
        if isinstance(e, ReadSkip):
            skips[e.reason] += e.count
    graphs = [e for e in events if isinstance(e, ReadGraph)]
    return reader.name, graphs, [e for e in events if isinstance(e, ReadReject)], skips


def branch_codes(graph: MessageGraph) -> list[str]:
    return [" ".join(_CODE[n.message.role] + _MARK[n.origin.value] for n in b.nodes) for b in graph.branches()]


def convert(tmp_path: Path, *inputs: Path) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    out = tmp_path / "out"  # inputs are under tmp_path / "logs": an output never lies inside an input folder
    code = main(["convert", *map(str, inputs), "-o", str(out)])
    rows: list[dict[str, Any]] = []
    for f in sorted((out / "data").glob("*.parquet")):
        rows.extend(pq.read_table(f).to_pylist())
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    return code, rows, report


# ------------------------------------------------------------------------------------------------- Inspect AI


def test_inspect_json_log_trains_each_reply_in_the_context_its_model_event_logged() -> None:
    name, graphs, rejects, skips = read_all(SAMPLES / "inspect_ai/popularity.json")
    assert name == "inspect_ai" and not rejects and not skips
    agent, plain = graphs
    # The system prompt came from an attachment; the grader's call (a scorers span) is not a turn.
    assert branch_codes(agent.graph) == ["S U A* T A*"]
    system = agent.graph.path(agent.graph.head[-1])[0].message
    assert system.text == "You are a careful assistant. Use the tools you are given."
    assert [t["function"]["name"] for t in agent.graph.env.tools] == ["lookup"]
    last = agent.graph.nodes[agent.graph.head[-1]].message
    assert last.reasoning == "The tool says Paris." and last.text == "Yes"
    # The primary scorer (first in the eval spec) is the reward; every scorer's value is kept.
    assert agent.extras["reward"] == 1.0 and agent.extras["scores"] == {"match": "C", "model_graded_fact": "I"}
    assert agent.extras["grader_calls"] == 1
    assert plain.extras["reward"] == 0.0 and branch_codes(plain.graph) == ["U A*"]


def _eval_archive(tmp_path: Path, samples: list[dict[str, Any]], name: str = "run.eval") -> Path:
    """An .eval archive in the layout of inspect_ai tests/log/test_eval_log/log_message_deduplication.eval."""
    (tmp_path / "logs").mkdir(parents=True, exist_ok=True)
    path = tmp_path / "logs" / name
    header = {"version": 3, "status": "success", "eval": {"task": "guess", "model": "vllm/demo", "scorers": []}}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("_journal/start.json", json.dumps({"version": 3, "eval": header["eval"]}))
        for s in samples:
            z.writestr(f"samples/{s['id']}_epoch_{s['epoch']}.json", json.dumps(s))
        z.writestr("header.json", json.dumps(header))
    return path


def _pooled_sample(sample_id: int, epoch: int, answer: str, score: Any) -> dict[str, Any]:
    pool = [
        {"id": "p0", "content": "Guess the number", "source": "input", "role": "user"},
        {
            "id": "p1",
            "content": "",
            "role": "assistant",
            "tool_calls": [{"id": "c0", "function": "bash", "arguments": {"cmd": "ls"}, "type": "function"}],
        },
        {"id": "p2", "content": "bin\netc\n", "role": "tool", "tool_call_id": "c0", "function": "bash"},
    ]
    tools = [{"name": "bash", "description": "Run a command.", "parameters": {"type": "object", "properties": {}}}]

    def model_event(refs: list[list[int]], message: dict[str, Any]) -> dict[str, Any]:
        output = {"model": "demo", "choices": [{"message": message, "stop_reason": "stop"}]}
        return {
            "event": "model",
            "model": "vllm/demo",
            "input": [],
            "input_refs": refs,
            "tools": tools,
            "output": output,
        }

    final = {"id": "p3", "content": answer, "role": "assistant", "source": "generate"}
    return {
        "id": sample_id,
        "epoch": epoch,
        "messages": [*pool, final],
        "scores": {"closeness": {"value": score}},
        "message_pool": pool,
        "events": [model_event([[0, 1]], pool[1]), model_event([[0, 3]], final)],
        "attachments": {},
    }


def test_inspect_eval_archive_reads_every_epoch_as_its_own_graph_from_pooled_inputs(tmp_path: Path) -> None:
    path = _eval_archive(tmp_path, [_pooled_sample(1, 1, "42", 1), _pooled_sample(1, 2, "41", 0.5)])
    name, graphs, rejects, _ = read_all(path)
    assert name == "inspect_ai" and not rejects
    assert [g.extras["epoch"] for g in graphs] == [1, 2]
    assert [g.extras["reward"] for g in graphs] == [1.0, 0.5]
    assert all(branch_codes(g.graph) == ["U A* T A*"] for g in graphs)
    assert graphs[0].graph.graph_id != graphs[1].graph.graph_id
    code, rows, report = convert(tmp_path, path.parent)  # a folder holding the archive: .eval is a log suffix
    assert code == 0 and len(rows) == 2
    assert report["turns"]["found"] == report["turns"]["trained"] == 4


def test_inspect_attachment_missing_from_the_sample_rejects_that_sample_only(tmp_path: Path) -> None:
    broken = _pooled_sample(2, 1, "7", 0)
    broken["message_pool"][0]["content"] = "attachment://feedfacefeedfacefeedfacefeedface"
    path = _eval_archive(tmp_path, [_pooled_sample(1, 1, "42", 1), broken])
    _, graphs, rejects, _ = read_all(path)
    assert len(graphs) == 1 and [r.error.code for r in rejects] == ["missing_attachment"]
    assert rejects[0].source.record == "samples/2_epoch_1.json"


def test_inspect_sample_without_model_events_is_read_from_its_messages_and_flagged_without_tools(
    tmp_path: Path,
) -> None:
    sample = _pooled_sample(1, 1, "42", 1)
    del sample["events"], sample["message_pool"]
    path = _eval_archive(tmp_path, [sample])
    _, graphs, rejects, _ = read_all(path)
    assert not rejects and branch_codes(graphs[0].graph) == ["U A* T A*"]
    assert missing_context(graphs[0].graph) == ["tools"]
    code, rows, report = convert(tmp_path, path)
    assert code == 0 and all("context_incomplete" in r["flags"] for r in rows)
    assert report["flags"]["context_incomplete"] == len(rows)


def test_inspect_log_without_samples_is_one_skipped_record_with_its_reason(tmp_path: Path) -> None:
    doc = json.loads((SAMPLES / "inspect_ai/popularity.json").read_text())
    del doc["samples"]
    path = tmp_path / "no-samples.json"
    path.write_text(json.dumps(doc))
    _, graphs, rejects, skips = read_all(path)
    assert not graphs and not rejects
    assert skips == Counter({"inspect log without samples (log_samples off or none run)": 1})


def test_inspect_tool_result_with_an_error_reads_as_inspect_sends_it() -> None:
    _, graphs, _, _ = read_all(SAMPLES / "inspect_ai/popularity.json")
    results = [n.message for n in graphs[0].graph.nodes.values() if isinstance(n.message, OptionResultMessage)]
    calls = [n.message for n in graphs[0].graph.nodes.values() if isinstance(n.message, OptionCallMessage)]
    assert results[0].result.result == "Paris" and calls[0].calls[0].arguments == {"query": "capital of France"}


# -------------------------------------------------------------------------------------------------- verifiers


def test_verifiers_rollouts_train_every_completion_turn_with_reward_and_metrics() -> None:
    name, graphs, rejects, skips = read_all(SAMPLES / "verifiers/results.jsonl")
    assert name == "verifiers" and not rejects
    assert skips == Counter(
        {"rollout with an empty completion (failed generation: ModelError: context length exceeded)": 1}
    )
    rlm, weather, single = graphs
    # The restated prompt is read once; the tool message without tool_call_id answers the call before it.
    assert branch_codes(rlm.graph) == ["U A* T A*"]
    assert branch_codes(weather.graph) == ["S U A* T A*"] and branch_codes(single.graph) == ["S U A*"]
    assert [g.extras["reward"] for g in graphs] == [1.0, 0.5, 1.0]
    assert weather.extras["metrics"] == {"tool_use": 1.0, "accuracy": 0.0}
    assert rlm.extras["metrics"]["correct_answer_rlm"] == 1.0 and "total_ms" not in rlm.extras["metrics"]
    assert [t["function"]["name"] for t in weather.graph.env.tools] == ["get_weather"]


def test_verifiers_context_is_incomplete_where_the_harness_prompt_or_the_tool_schemas_are_not_logged() -> None:
    _, graphs, _, _ = read_all(SAMPLES / "verifiers/results.jsonl")
    rlm, weather, single = graphs
    assert missing_context(rlm.graph) == ["system_prompt", "tools"]
    assert missing_context(weather.graph) == [] and missing_context(single.graph) == []


def test_verifiers_completion_style_rollout_is_rejected_as_not_a_chat(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    row = {"example_id": 0, "prompt": "2 + 2 =", "completion": " 4", "reward": 1.0, "task": "default"}
    path.write_text(json.dumps(row) + "\n" + (SAMPLES / "verifiers/results.jsonl").read_text())
    _, graphs, rejects, _ = read_all(path)
    assert len(graphs) == 3 and [r.error.code for r in rejects] == ["not_a_chat"]


# ------------------------------------------------------------------------------------------ reported prompt sizes


def test_a_context_the_logged_usage_contradicts_is_flagged_when_the_tokenizer_is_the_models(tmp_path: Path) -> None:
    demo = "msgtrain-demo-bytes-chatml"  # the embedded demo tokenizer's name: the "policy" of this log
    sample = _pooled_sample(1, 1, "42", 1)
    path = _eval_archive(tmp_path, [sample])
    code, rows, _ = convert(tmp_path, path)
    assert code == 0 and not any("usage_mismatch" in r["flags"] for r in rows)  # no usage logged: no check
    built = [s["start"] for s in rows[0]["turn_spans"]]  # each turn's prompt, as msgtrain built it

    # The logged size agrees (within the tolerance): no flag.
    for event, size in zip(sample["events"], built, strict=True):
        event["model"] = event["output"]["model"] = demo
        event["output"]["usage"] = {"input_tokens": size + 3, "output_tokens": 3}
    ok_path = _eval_archive(tmp_path / "ok", [sample])
    _, rows, report = convert(tmp_path / "ok", ok_path)
    assert not any("usage_mismatch" in r["flags"] for r in rows) and "usage_mismatch" not in report["flags"]
    # The logged size is far from the context built here (a prompt the log does not hold): flagged and counted.
    for event in sample["events"]:
        event["output"]["usage"]["input_tokens"] = 5000
    bad_path = _eval_archive(tmp_path / "bad", [sample])
    _, rows, report = convert(tmp_path / "bad", bad_path)
    assert all("usage_mismatch" in r["flags"] for r in rows) and report["flags"]["usage_mismatch"] == len(rows)
    # Another model's tokenizer counts other tokens: no comparison is made.
    for event in sample["events"]:
        event["model"] = event["output"]["model"] = "openai/gpt-4o"
    other_path = _eval_archive(tmp_path / "other", [sample])
    _, rows, _ = convert(tmp_path / "other", other_path)
    assert not any("usage_mismatch" in r["flags"] for r in rows)


# ------------------------------------------------------------------------------------------------- smolagents


def test_smolagents_steps_train_each_output_in_its_cleaned_model_input() -> None:
    name, graphs, rejects, skips = read_all(SAMPLES / "smolagents/steps.json")
    assert name == "smolagents" and not rejects and skips == Counter({"non_model_step": 1})
    (graph,) = graphs
    # tool-call becomes assistant and merges with the output before it; tool-response becomes user.
    assert sorted(branch_codes(graph.graph)) == ["S U A U A*", "S U A*"]
    second = graph.graph.path(graph.graph.head[-1])
    merged = second[2].message.text
    assert merged.endswith("<end_code>\nCalling tools:\n" + merged.split("Calling tools:\n", 1)[1])
    assert second[3].message.role == "user" and second[3].message.text.startswith("Observation:")
    assert missing_context(graph.graph) == []


def test_smolagents_tool_calling_agent_without_logged_schemas_is_context_incomplete(tmp_path: Path) -> None:
    steps = json.loads((SAMPLES / "smolagents/steps.json").read_text())
    call = {"id": "call_9", "type": "function", "function": {"name": "final_answer", "arguments": {"answer": "391"}}}
    steps[2]["model_output_message"] = {"role": "assistant", "content": None, "tool_calls": [call]}
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(steps))
    _, (graph,), rejects, _ = read_all(path)
    assert not rejects and missing_context(graph.graph) == ["tools"]


# ---------------------------------------------------------------------------------------------------- AutoGen


def test_autogen_saved_model_context_trains_each_assistant_message_and_lacks_the_agents_prompt() -> None:
    name, (graph,), rejects, _ = read_all(SAMPLES / "autogen/agent_state.json")
    assert name == "autogen" and not rejects
    assert graph.source.record == "agent_states.weather_agent.agent_state.llm_context.messages"
    assert branch_codes(graph.graph) == ["U A* T A*"]
    call = graph.graph.path(graph.graph.head[-1])[1].message
    assert isinstance(call, OptionCallMessage) and call.calls[0].raw_arguments == '{"city": "Oslo"}'
    assert call.reasoning == "I should look the weather up."
    assert missing_context(graph.graph) == ["system_prompt", "tools"]


def _task_result(*sources: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "arguments": '{"q": "x"}', "name": "search"}
    result = {"content": "found", "name": "search", "call_id": "c1", "is_error": False}
    messages: list[dict[str, Any]] = [{"source": "user", "type": "TextMessage", "content": "Find x."}]
    for source in sources:
        messages += [
            {"source": source, "type": "ToolCallRequestEvent", "content": [call], "models_usage": None},
            {"source": source, "type": "ToolCallExecutionEvent", "content": [result]},
            {"source": source, "type": "ToolCallSummaryMessage", "content": "found"},
            {"source": source, "type": "TextMessage", "content": "x is found."},
        ]
    return messages


def test_autogen_task_result_messages_leave_out_the_tool_summary_and_refuse_several_speakers(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"messages": _task_result("assistant"), "stop_reason": None}))
    name, (graph,), rejects, _ = read_all(path)
    assert name == "autogen" and not rejects and branch_codes(graph.graph) == ["U A* T A*"]
    path.write_text(json.dumps({"messages": _task_result("writer", "critic")}))
    _, graphs, rejects, _ = read_all(path)
    assert not graphs and [r.error.code for r in rejects] == ["multi_agent"]
