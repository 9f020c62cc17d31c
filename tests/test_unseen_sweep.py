"""A sweep of projects no other test reads: real files trimmed into fixtures (tests/fixtures/unseen/PROVENANCE.md,
"Sweep" section) or, where a file's license does not allow a copy, hand-written in its shape. Each file's books
against a count made by hand, and the context each trained reply sits after."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from msgtrain.errors import MsgtrainError
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.structure.mapping import mapping_text
from msgtrain.model.message import OptionCallMessage, OptionResultMessage, PartsMessage
from msgtrain.run.parts import LinearizeSettings, convert_file
from msgtrain.tools.explain_cmd import explain_file
from tests.unseen_books import FIXTURES
from tests.unseen_books import contexts as _contexts
from tests.unseen_books import graphs as _graphs
from tests.unseen_books import said as _said

SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)


def _books(path: Path, settings: LinearizeSettings = SETTINGS) -> tuple[int, int, int, int]:
    """(turns found, trained, dropped, lost) of converting ``path``."""
    _, stats, _ = convert_file(path, settings)
    return stats.turns_found, stats.turns_trained, sum(stats.turns_dropped.values()), stats.turns_lost


def test_a_function_calling_row_trains_its_answers_as_the_calls_after_the_query() -> None:
    # Salesforce/xlam-function-calling-60k row 0: "answers" (JSON text of [{name, arguments}]) beside "tools"; one reply
    # of two parallel calls, sampled after the query with the row's tools
    path = FIXTURES / "xlam-function-calling.jsonl"
    assert detect_format(path).name == "structural"
    assert _books(path) == (1, 1, 0, 0)
    assert _contexts(path) == [
        [
            ("user", "Where can I find live giveaways for beta access and games?"),
            ("assistant", [("live_giveaways_by_type", {"type": "beta"}), ("live_giveaways_by_type", {"type": "game"})]),
        ]
    ]
    (graph,) = _graphs(path)
    assert [t["function"]["name"] for t in graph.env.tools] == ["live_giveaways_by_type"]


def test_the_explained_mapping_of_a_function_calling_row_converts_it_the_same(tmp_path: Path) -> None:
    path = FIXTURES / "xlam-function-calling.jsonl"
    map_file = tmp_path / "map.yaml"
    map_file.write_text(explain_file(path).mapping_yaml, encoding="utf-8")
    assert _books(path, replace(SETTINGS, mapping=mapping_text(map_file))) == (1, 1, 0, 0)


def test_a_completion_of_call_shaped_json_without_tools_stays_the_text_it_is(tmp_path: Path) -> None:
    # no tools beside it: nothing says the text was read as calls (a model asked to answer in JSON)
    row = {"query": "List one call.", "answers": '[{"name": "f", "arguments": {}}]'}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert _contexts(path) == [[("user", "List one call."), ("assistant", '[{"name": "f", "arguments": {}}]')]]


def test_an_agent_memory_of_records_trains_each_call_after_the_role_the_backend_saw() -> None:
    # CAMEL's ChatHistoryMemory dump (MemoryRecord.to_dict per line): the role is role_at_backend (the system
    # message's role_type says assistant), a FunctionCallingMessage with args is the call, one with result its result
    # (role_at_backend "function"). Sampled: the snapshot call and the final answer. The [CONTEXT_SUMMARY] assistant
    # message opening the memory (after the system message, before any user message, written with it at the same
    # timestamp) is a summary the agent was handed, not sampled in this context.
    path = FIXTURES / "camel-agent-memory.jsonl"
    assert detect_format(path).name == "structural"
    assert _books(path) == (2, 2, 0, 0)
    (graph,) = _graphs(path)
    (summary,) = [n for n in graph.nodes.values() if n.message.text.startswith("[CONTEXT_SUMMARY]")]
    assert summary.origin.value == "injected"


def test_an_agent_memory_of_records_reads_roles_calls_and_results_from_the_records() -> None:
    path = FIXTURES / "camel-agent-memory.jsonl"
    last = _contexts(path)[-1]
    assert [role for role, _ in last] == ["system", "assistant", "user", "assistant", "tool", "assistant"]
    assert last[0][1].startswith("You are a browser automation agent.")
    assert last[3] == ("assistant", [("browser_get_page_snapshot", {"viewport_limit": None})])
    assert last[4][1][0] == "browser_get_page_snapshot" and last[4][1][1].endswith("Page loaded.")
    assert last[5][1].endswith("##TASK_DONE##")
    (graph,) = _graphs(path)
    (call,) = [n.message for n in graph.nodes.values() if isinstance(n.message, OptionCallMessage)]
    (result,) = [n.message for n in graph.nodes.values() if isinstance(n.message, OptionResultMessage)]
    assert result.result.invocation_id == call.calls[0].invocation_id == "call_xNusg0gOL2zmDiLxabOfgPe3"


def test_an_evals_log_with_text_prompts_trains_each_sample_after_its_prompt_once(tmp_path: Path) -> None:
    # openai/evals' recorder log as a run wrote it (the log quoted in Significant-Gravitas/Auto-GPT-Benchmarks
    # README.md @ 6a621b07664769192e03965e7e89e65bb5bc4ca2, no license, so hand-written here in its shape): a spec
    # line, the final_report, then per sample a "sampling" event ({prompt: text, sampled: text} under data) and a
    # "match" event repeating what was sampled. Was unrecognised (the pair sits under "data"); 3 samples, 3 trained.
    spec = {
        "completion_fns": ["my_fn"],
        "eval_name": "test-match.s1.simple-v0",
        "run_config": {"eval_spec": {"cls": "evals.elsuite.basic.match:Match"}, "seed": 20220722},
        "run_id": "R1",
    }
    lines: list[dict[str, Any]] = [{"spec": spec}, {"final_report": {"accuracy": 0.5}}]
    for i, (prompt, sampled) in enumerate([("Say 1\nAssistant: ", "1"), ("Say 2\nAssistant: ", "2"), ("Say 3", "3")]):
        common = {"run_id": "R1", "sample_id": f"test-match.s1.{i}", "created_by": ""}
        lines.append({**common, "event_id": 2 * i, "type": "sampling", "data": {"prompt": prompt, "sampled": sampled}})
        match = {"correct": True, "expected": sampled, "picked": sampled, "sampled": sampled, "options": [sampled]}
        lines.append({**common, "event_id": 2 * i + 1, "type": "match", "data": match})
    path = tmp_path / "R1_my_fn_test-match.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert detect_format(path).name == "structural"
    assert _books(path) == (3, 3, 0, 0)
    assert _contexts(path) == [
        [("user", "Say 1\nAssistant: "), ("assistant", "1")],
        [("user", "Say 2\nAssistant: "), ("assistant", "2")],
        [("user", "Say 3"), ("assistant", "3")],
    ]


def test_a_benchmark_report_of_agent_steps_without_their_prompts_is_not_claimed_as_a_chat(tmp_path: Path) -> None:
    # AutoGPT's agbenchmark report.json (Significant-Gravitas/AutoGPT benchmark/reports/autogpt/
    # 20240418T021011_full_run/report.json @ 088da37910cd45f78c66b18cb8bae9437cc0c41f, hand-written in its shape):
    # tests.<name>.results[].steps[] of {input: "", output: the agent's rendered step}; the prompts the model was sent
    # are not in it, so no reply of it can be trained in its context, and the file stays unrecognised (a reject naming
    # its keys), not a "conversation" of an empty user message and each step's output
    steps = [
        {"input": "", "step_id": "s0", "output": "Next Command: read_file(filename='file1.csv')", "is_last": False},
        {"input": "", "step_id": "s1", "output": "`read_file` returned: ID\n\nNext Command: finish()", "is_last": True},
    ]
    report = {
        "command": "agbenchmark run -N 1 --test=CombineCsv",
        "metrics": {"run_time": "79 seconds"},
        "tests": {"CombineCsv": {"task": "Combine the csvs.", "results": [{"success": False, "steps": steps}]}},
    }
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    with pytest.raises(MsgtrainError, match="no reader recognises"):
        detect_format(path)


def test_a_system_message_keeping_its_text_under_system_prompt_heads_the_trajectory(tmp_path: Path) -> None:
    # nebius/SWE-agent-trajectories rows (dataset card: trajectory[] of {cutoff_date, mask, role, system_prompt, text},
    # roles system / user / ai; CC-BY-4.0, not on GitHub, so hand-written in its shape): the system message's text is
    # its system_prompt, its text null. It was trained after an empty system message (the prompt lost); 2 replies.
    def item(role: str, text: str | None, system_prompt: str | None = None) -> dict[str, Any]:
        return {"cutoff_date": None, "mask": role == "ai", "role": role, "system_prompt": system_prompt, "text": text}

    setting = "SETTING: You are an autonomous programmer, and you're working directly in the command line."
    row = {
        "instance_id": "astropy__astropy-12907",
        "model_name": "swe-agent-llama-70b",
        "target": False,
        "trajectory": [
            {**item("system", None, setting), "cutoff_date": "01.01.2023"},
            item("user", "ISSUE: It breaks."),
            item("ai", "```\nls\n```"),
            item("user", "a.py\n(Open file: n/a)\nbash-$"),
            item("ai", "```\nsubmit\n```"),
        ],
        "exit_status": "submitted",
        "generated_patch": "",
    }
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert _books(path) == (2, 2, 0, 0)
    first = [("system", setting), ("user", "ISSUE: It breaks."), ("assistant", "```\nls\n```")]
    assert _contexts(path) == [
        first,
        [*first, ("user", "a.py\n(Open file: n/a)\nbash-$"), ("assistant", "```\nsubmit\n```")],
    ]
    # the mapping --explain prints reads it the same
    map_file = tmp_path / "map.yaml"
    map_file.write_text(explain_file(path).mapping_yaml, encoding="utf-8")
    assert _books(path, replace(SETTINGS, mapping=mapping_text(map_file))) == (2, 2, 0, 0)


def _atif(steps: list[dict[str, Any]]) -> dict[str, Any]:
    tool = {"type": "function", "function": {"name": "finish", "parameters": {"type": "object", "properties": {}}}}
    edit = {
        "type": "function",
        "function": {"name": "str_replace_editor", "parameters": {"type": "object", "properties": {}}},
    }
    return {
        "schema_version": "ATIF-v1.5",
        "session_id": "NORMALIZED_SESSION_ID",
        "agent": {"name": "openhands", "version": "1.0.0", "tool_definitions": [edit, tool]},
        "steps": steps,
        "final_metrics": {"total_prompt_tokens": 220, "total_completion_tokens": 80},
    }


def test_an_atif_trajectory_trains_each_agent_step_after_the_steps_before_it(tmp_path: Path) -> None:
    # Harbor's Agent Trajectory Interchange Format (the OpenHands golden tests/golden/openhands/hello-world.trajectory
    # .json of laude-institute/harbor, as copied in sachiny0106/Xelron @ 23b956efda4ace995fb26adeb2018f44e07d2377;
    # hand-written here in its shape, texts cut): steps of {step_id, source, message}, an agent step's tool_calls and
    # the observation.results answering them, the tools in agent.tool_definitions. Unrecognised before; 2 agent steps,
    # each a model call (its metrics), 2 trained. (The golden file's two system steps after the user's, its recalled
    # workspace context, are left out here: see the next test.)
    steps = _openhands_steps()
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(_atif(steps)), encoding="utf-8")
    assert detect_format(path).name == "structural"
    assert _books(path) == (2, 2, 0, 0)
    (graph,) = _graphs(path)
    assert [t["function"]["name"] for t in graph.env.tools] == ["str_replace_editor", "finish"]
    last = _contexts(path)[-1]
    assert [role for role, _ in last] == ["system", "user", "assistant", "tool", "assistant"]
    assert last[0] == ("system", "You are OpenHands agent, a helpful AI assistant.")
    assert last[3] == ("tool", ("str_replace_editor", "File created successfully"))
    assert last[4] == ("assistant", [("finish", {"message": "Done"})])
    (first_call,) = [n.message for n in graph.nodes.values() if n.message.text == "I edited the file /app/hello.txt."]
    assert isinstance(first_call, OptionCallMessage) and first_call.calls[0].invocation_id == "call_fake_1"


def test_an_atif_system_step_mid_run_is_an_input_the_log_does_not_hold(tmp_path: Path) -> None:
    # The OpenHands golden trajectory's steps 3 and 4 ("Retrieving content for: ..." and "Added workspace context"):
    # system-initiated operations (ATIF RFC 0001 v1.2) whose message is the harness's account of them; the model was
    # sent OpenHands' workspace context (a user message its RecallObservation builds from templates: repository,
    # runtime, date), which the trajectory does not hold. Before: both read as user messages of those words and the
    # 2 agent steps trained after them (2 of 2, a context never seen); after: the trajectory has nothing trainable
    # before the gap, refused naming the step (2 lost). A reply before such a step is trained, the ones after it not.
    user = {"step_id": 2, "source": "user", "message": 'Create a file called hello.txt with "Hello, world!".\n'}
    recall = [
        {"step_id": 3, "source": "system", "message": "Retrieving content for: Create a file called hello.txt"},
        {"step_id": 4, "source": "system", "message": "Added workspace context"},
    ]
    system, _, first, second = _openhands_steps()
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(_atif([system, user, *recall, first, second])), encoding="utf-8")
    _, stats, rejects = convert_file(path, SETTINGS)
    assert (stats.turns_found, stats.turns_trained, stats.turns_lost) == (0, 0, 2)
    assert json.loads(rejects[0])["reason"] == "unlogged_input" and "ATIF system step 3" in rejects[0]
    path.write_text(json.dumps(_atif([system, user, first, recall[1], second])), encoding="utf-8")
    _, stats, _ = convert_file(path, SETTINGS)
    assert (stats.turns_found, stats.turns_trained, stats.turns_dropped["context_unknown"]) == (2, 1, 1)


def _openhands_steps() -> list[dict[str, Any]]:
    create = {"command": "create", "path": "/app/hello.txt", "file_text": "Hello, world!", "security_risk": "LOW"}
    return [
        {"step_id": 1, "source": "system", "message": "You are OpenHands agent, a helpful AI assistant."},
        {"step_id": 2, "source": "user", "message": 'Create a file called hello.txt with "Hello, world!".\n'},
        {
            "step_id": 5,
            "source": "agent",
            "message": "I edited the file /app/hello.txt.",
            "tool_calls": [{"tool_call_id": "call_fake_1", "function_name": "str_replace_editor", "arguments": create}],
            "observation": {"results": [{"source_call_id": "call_fake_1", "content": "File created successfully"}]},
            "metrics": {"prompt_tokens": 100, "completion_tokens": 50, "cost_usd": 0.00075},
        },
        {
            "step_id": 6,
            "source": "agent",
            "message": "All done!",
            "tool_calls": [
                {"tool_call_id": "call_fake_2", "function_name": "finish", "arguments": {"message": "Done"}}
            ],
            "metrics": {"prompt_tokens": 120, "completion_tokens": 30},
        },
    ]


def test_an_atif_result_answering_no_call_of_its_step_is_refused_not_dropped(tmp_path: Path) -> None:
    steps = [
        {"step_id": 1, "source": "user", "message": "Go."},
        {
            "step_id": 2,
            "source": "agent",
            "message": "Done.",
            "observation": {"results": [{"source_call_id": "call_x", "content": "stray"}]},
        },
    ]
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(_atif(steps)), encoding="utf-8")
    _, stats, rejects = convert_file(path, SETTINGS)
    assert stats.turns_trained == 0 and len(rejects) == 1


def test_an_atif_result_logged_without_its_call_id_answers_the_steps_call(tmp_path: Path) -> None:
    # Harbor's Terminus-2 trajectories (golden tests/golden/terminus_2/hello-world-context-summarization.trajectory
    # .json, same copy): an agent step's one bash_command call, its observation result without source_call_id
    keys = {"keystrokes": "mkdir test_dir\n", "duration": 0.1}
    steps = [
        {"step_id": 1, "source": "user", "message": "You are an AI assistant tasked with solving command-line tasks."},
        {
            "step_id": 2,
            "source": "agent",
            "model_name": "openai/gpt-4o",
            "message": "Analysis: Terminal is ready.\nPlan: Create test_dir.",
            "tool_calls": [{"tool_call_id": "call_0_1", "function_name": "bash_command", "arguments": keys}],
            "observation": {"results": [{"content": "New Terminal Output:\n\nroot@CONTAINER_ID:/app# mkdir test_dir"}]},
            "metrics": {"prompt_tokens": 682, "completion_tokens": 60},
        },
        {"step_id": 3, "source": "agent", "model_name": "openai/gpt-4o", "message": "Done.", "metrics": {}},
    ]
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(_atif(steps)), encoding="utf-8")
    assert _books(path) == (2, 2, 0, 0)
    last = _contexts(path)[-1]
    assert last[2] == ("tool", ("bash_command", "New Terminal Output:\n\nroot@CONTAINER_ID:/app# mkdir test_dir"))


def _deepseek_node(node_id: str, parent: str, children: list[str], *fragments: tuple[str, Any]) -> dict[str, Any]:
    message = {
        "files": [],
        "model": "deepseek-chat",
        "inserted_at": "2025-02-01T10:00:01.000000+08:00",
        "fragments": [{"type": kind, "content": text} for kind, text in fragments],
    }
    return {"id": node_id, "parent": parent, "children": children, "message": message}


def test_a_deepseek_export_reads_each_message_side_from_its_fragments(tmp_path: Path) -> None:
    # DeepSeek's data export (conversations.json: [{id, title, inserted_at, mapping}], each node's message holding no
    # role, only fragments typed REQUEST / THINK / RESPONSE / SEARCH ...; personal data, so hand-written in the shape
    # the open-source readers of it parse, e.g. the fixtures found by the index for "fragments": [{"type": "REQUEST").
    # Unrecognised before. Three replies: the first answer (its THINK its reasoning), the regenerated sibling, and
    # the answer to the follow-up; a reply written after a web search (SEARCH: what the model read is not in the
    # export) is a reject on its branch, lost, never trained after the question alone.
    mapping = {
        "root": {"id": "root", "parent": None, "children": ["1"], "message": None},
        "1": _deepseek_node("1", "root", ["2", "3"], ("REQUEST", "What is AI?")),
        "2": _deepseek_node("2", "1", ["4"], ("THINK", "The user asks."), ("RESPONSE", "AI is machine intelligence.")),
        "3": _deepseek_node("3", "1", ["5"], ("RESPONSE", "Artificial intelligence.")),
        "4": _deepseek_node("4", "2", ["6"], ("REQUEST", "Thanks")),
        "6": _deepseek_node("6", "4", [], ("RESPONSE", "You're welcome!")),
        "5": _deepseek_node("5", "3", ["7"], ("REQUEST", "News about it?")),
        "7": _deepseek_node("7", "5", [], ("SEARCH", None), ("RESPONSE", "Per the web, much.")),
    }
    doc = [{"id": "ds-1", "title": "AI", "inserted_at": "2025-02-01T10:00:00+08:00", "mapping": mapping}]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert detect_format(path).name == "structural"
    assert _books(path) == (3, 3, 0, 1)
    question = ("user", "What is AI?")
    assert _contexts(path) == [
        [question, ("assistant", "AI is machine intelligence.")],
        [question, ("assistant", "AI is machine intelligence."), ("user", "Thanks"), ("assistant", "You're welcome!")],
        [question, ("assistant", "Artificial intelligence.")],
    ]
    (graph,) = _graphs(path)
    first = next(n.message for n in graph.nodes.values() if n.message.text == "AI is machine intelligence.")
    assert isinstance(first, PartsMessage)
    assert [(p.kind, getattr(p, "text", None)) for p in first.parts] == [
        ("reasoning", "The user asks."),
        ("text", "AI is machine intelligence."),
    ]


SAMPLE_STRANDS = Path(__file__).parent.parent / "sample_logs" / "strands" / "session_demo"


def _strands_session(tmp_path: Path, messages: list[dict[str, Any]], **record: Any) -> Path:
    """A Strands session folder as its FileSessionManager writes it (strands-agents/sdk-python, SessionMessage
    .to_dict(): {message, message_id, redact_message, created_at, updated_at}); ``record`` sets a message's fields by
    ``<field>_<index>`` (``redact_message_1=...``), ``removed`` the window's removed_message_count."""
    session = tmp_path / "session_s1"
    agent = session / "agents" / "agent_default"
    (agent / "messages").mkdir(parents=True)
    (session / "session.json").write_text(json.dumps({"session_id": "s1", "session_type": "AGENT"}), encoding="utf-8")
    manager = {"__name__": "SlidingWindowConversationManager", "removed_message_count": record.pop("removed", 0)}
    (agent / "agent.json").write_text(
        json.dumps({"agent_id": "default", "state": {}, "conversation_manager_state": manager}), encoding="utf-8"
    )
    for i, message in enumerate(messages):
        saved = {"message": message, "message_id": i, "redact_message": record.get(f"redact_message_{i}")}
        (agent / "messages" / f"message_{i}.json").write_text(json.dumps(saved), encoding="utf-8")
    return session


def _converse(n: int) -> list[dict[str, Any]]:
    """``n`` turns of a Converse conversation: a question, a call, its result, an answer, then plain exchanges."""
    call = {"toolUse": {"toolUseId": "tooluse_1", "name": "calculator", "input": {"expression": "12*7"}}}
    result = {"toolResult": {"toolUseId": "tooluse_1", "status": "success", "content": [{"text": "84"}]}}
    head: list[dict[str, Any]] = [
        {"role": "user", "content": [{"text": "What is 12 times 7?"}]},
        {"role": "assistant", "content": [{"text": "I'll compute it."}, call]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": [{"text": "84."}]},
    ]
    for k in range(n):
        head += [
            {"role": "user", "content": [{"text": f"Again {k}?"}]},
            {"role": "assistant", "content": [{"text": f"Still 84 ({k})."}]},
        ]
    return head


def test_a_strands_session_folder_trains_each_reply_in_message_id_order(tmp_path: Path) -> None:
    # the folder was unrecognised file by file (unknown_format for each message file and agent.json); 12 message files
    # (message_10 and message_11 after message_9, not after message_1): 7 replies, each after the ones before it
    session = _strands_session(tmp_path, _converse(4))
    from msgtrain.ingest.formats.sessions.strands import READER

    assert READER.detect_directory(session)
    events = list(read_events(READER, session))
    (graph,) = [e.graph for e in events if isinstance(e, ReadGraph)]
    replies = [n for n in graph.nodes.values() if n.origin.value == "sampled"]
    assert [n.message.text for n in replies][-3:] == ["Still 84 (1).", "Still 84 (2).", "Still 84 (3)."]
    last = [_said(n.message) for n in graph.path(replies[-1].id)]
    assert last[:4] == [
        ("user", "What is 12 times 7?"),
        ("assistant", [("calculator", {"expression": "12*7"})]),
        ("tool", ("calculator", "84")),
        ("assistant", "84."),
    ]
    assert len(last) == 12
    assert graph.metadata["context_incomplete"]["missing"] == ["system_prompt", "tools"]


def test_the_sample_strands_session_converts_as_one_folder() -> None:
    _, stats, rejects = convert_file(SAMPLE_STRANDS, SETTINGS)
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (2, 2)


def test_a_redacted_reply_and_a_trimmed_window_are_not_trained(tmp_path: Path) -> None:
    redaction = {"role": "assistant", "content": [{"text": "[redacted]"}]}
    redacted = _strands_session(tmp_path / "a", _converse(0), redact_message_3=redaction)
    _, stats, _ = convert_file(redacted, SETTINGS)
    assert (stats.turns_found, stats.turns_trained) == (2, 1)
    trimmed = _strands_session(tmp_path / "b", _converse(1), removed=2)
    _, stats, _ = convert_file(trimmed, SETTINGS)
    assert stats.turns_trained == 0 and stats.turns_found == 3


def test_a_goose_run_envelope_trains_its_one_reply(tmp_path: Path) -> None:
    # `goose run --output-format json` (goose 1.28.0): {messages: [{id, role, created, content: [{type, text}],
    # metadata: {userVisible, agentVisible}}], metadata: {total_tokens, status}} (the stdout a public adapter's test
    # quotes verbatim; hand-written here in its shape): one reply, already read right
    def said_by(role: str, text: str) -> dict[str, Any]:
        return {
            "id": None if role == "user" else "b989f2c0",
            "role": role,
            "created": 1786535179,
            "content": [{"type": "text", "text": text}],
            "metadata": {"userVisible": True, "agentVisible": True},
        }

    envelope = {
        "messages": [said_by("user", "Reply with exactly: OK"), said_by("assistant", "OK")],
        "metadata": {"total_tokens": 6, "status": "completed"},
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(envelope, indent=2), encoding="utf-8")
    assert _books(path) == (1, 1, 0, 0)
    assert _contexts(path) == [[("user", "Reply with exactly: OK"), ("assistant", "OK")]]


def test_agents_sdk_generation_spans_train_each_call_once_and_no_function_span(tmp_path: Path) -> None:
    # OpenAI Agents SDK spans as Span.export() writes them ({object: "trace.span", span_data: {type: "generation",
    # input, output, model, usage}} beside agent and function spans; hand-written in the SDK's shape): two model calls
    # sharing their prefix, 2 replies; the function span's input / output (a tool's arguments and result) is no reply
    system, user = {"role": "system", "content": "You are a helpful agent."}, {"role": "user", "content": "Weather?"}
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Tokyo"}'}}
    asked = {"role": "assistant", "content": None, "tool_calls": [call]}

    def span(span_id: str, data: dict[str, Any]) -> dict[str, Any]:
        return {"object": "trace.span", "id": span_id, "trace_id": "trace_1", "parent_id": "span_a", "span_data": data}

    rows = [
        {"object": "trace", "id": "trace_1", "workflow_name": "Agent workflow"},
        span("span_a", {"type": "agent", "name": "Assistant", "tools": ["get_weather"]}),
        span("span_b", {"type": "generation", "input": [system, user], "output": [asked], "model": "gpt-4o"}),
        span("span_c", {"type": "function", "name": "get_weather", "input": '{"city":"Tokyo"}', "output": "Sunny"}),
        span(
            "span_d",
            {
                "type": "generation",
                "input": [system, user, asked, {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}],
                "output": [{"role": "assistant", "content": "It's sunny."}],
                "model": "gpt-4o",
            },
        ),
    ]
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert _books(path) == (2, 2, 0, 0)
    assert [c[-1] for c in _contexts(path)] == [
        ("assistant", [("get_weather", {"city": "Tokyo"})]),
        ("assistant", "It's sunny."),
    ]


def test_an_atif_continuation_trains_only_its_own_steps_and_reads_call_less_observations_as_inputs(
    tmp_path: Path,
) -> None:
    # Harbor's Terminus-2 linear-history continuation after a context summarization (golden tests/golden/terminus_2/
    # hello-world-context-summarization-linear-history.trajectory.cont-1.json, same copy; texts cut): steps 1-4 are
    # copied context (is_copied_context: the handoff, the previous agent's questions sampled in another trajectory,
    # the answers), then 4 agent steps whose raw JSON replies call no tool and whose observations are the terminal
    # output sent back as the next user message. Before: the copied question was trained again here and every
    # call-less observation was refused (the copy trained, the 4 own replies lost); after: the 4 own replies, the copy
    # in the books only.
    def agent(step_id: int, text: str, output: str | None, **extra: Any) -> dict[str, Any]:
        step: dict[str, Any] = {"step_id": step_id, "source": "agent", "model_name": "openai/gpt-4o", "message": text}
        if output is not None:
            step["observation"] = {"results": [{"content": output}]}
        return step | extra

    steps = [
        {"step_id": 1, "source": "user", "message": "You are an AI assistant.", "is_copied_context": True},
        {"step_id": 2, "source": "user", "message": "You are picking up work.", "is_copied_context": True},
        agent(3, "I have the following questions.", None, is_copied_context=True),
        {"step_id": 4, "source": "user", "message": "Here are the answers.", "is_copied_context": True},
        agent(5, '{"commands": [{"keystrokes": "printf"}]}', "New Terminal Output:\n# printf", metrics={}),
        agent(6, '{"commands": [{"keystrokes": "cat hello.txt"}]}', "Hello, world!"),
        agent(7, '{"commands": [], "task_complete": true}', "Are you sure you want to mark the task as complete?"),
        agent(8, '{"commands": [], "task_complete": true}', "New Terminal Output:"),
    ]
    path = tmp_path / "trajectory.cont-1.json"
    path.write_text(json.dumps(_atif(steps)), encoding="utf-8")
    _, stats, _ = convert_file(path, SETTINGS)
    # the copy is in the books, as a reply not trained (weight 0), never a turn of this trajectory
    assert (stats.turns_found, stats.turns_trained, stats.turns_lost) == (5, 4, 0)
    assert sum(stats.turns_dropped.values()) == 1
    contexts = _contexts(path)
    assert contexts[0][-1] == ("assistant", '{"commands": [{"keystrokes": "printf"}]}')
    assert [role for role, _ in contexts[1]] == ["user", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert contexts[1][5] == ("user", "New Terminal Output:\n# printf")
    (graph,) = _graphs(path)
    copied = next(n for n in graph.nodes.values() if n.message.text == "I have the following questions.")
    assert copied.origin.value != "sampled"


HERMES = FIXTURES / "hermes-function-calling.jsonl"


def _transformers(tok: Any) -> Any:
    """transformers' own tokenizer of a loaded bundle (the oracle), also when the bundle was restored from a
    snapshot."""
    return tok.hf.transformers_tokenizer() if hasattr(type(tok.hf), "transformers_tokenizer") else tok.hf


def _hermes_row(n: int) -> list[dict[str, str]]:
    """Row ``n`` of the Hermes fixture as the OpenAI messages it stands for (ShareGPT roles renamed, texts as is)."""
    row = json.loads(HERMES.read_text(encoding="utf-8").splitlines()[n])
    roles = {"system": "system", "human": "user", "gpt": "assistant", "tool": "tool"}
    return [{"role": roles[m["from"]], "content": m["value"]} for m in row["conversations"]]


def test_a_reply_writing_its_calls_as_text_is_trained_as_logged_and_the_tool_message_after_it_is_its_result() -> None:
    # NousResearch hermes-function-calling-v1 (func-calling rows: the system prompt holds the tools in <tools>, the
    # reply writes two calls as <tool_call> text, one tool message answers both in <tool_response> blocks) and a
    # hermes-agent ShareGPT trajectory (<think> before the call, the call as JSON text); hand-written in their shape.
    # Before: the tool message answered no structured call, so each row trained its first reply only and lost the
    # answer after it (2 of 4, 2 context_unknown); after: 4 of 4, each reply once, the tool text as context.
    assert detect_format(HERMES).name == "sharegpt"
    assert _books(HERMES) == (4, 4, 0, 0)
    contexts = _contexts(HERMES)
    replies = [m["content"] for n in (0, 1) for m in _hermes_row(n) if m["role"] == "assistant"]
    assert [c[-1][1] for c in contexts] == replies
    for n, context in zip((0, 1), contexts[1::2], strict=True):
        assert context == [(m["role"], m["content"]) for m in _hermes_row(n)]
    graphs = _graphs(HERMES)
    tool = next(n.message for n in graphs[0].nodes.values() if n.message.role == "tool")
    assert isinstance(tool, PartsMessage) and tool.name is None  # no call id or name invented for it
    assert graphs[0].env.tools == ()  # the tools are the system prompt's text, as the dataset wrote them


@pytest.mark.parametrize(
    ("reply", "role"),
    [
        # glaive-function-calling-v2 as ShareGPT (its "ASSISTANT: <functioncall> ..." / "FUNCTION RESPONSE:" turns)
        ('<functioncall> {"name": "get_weather", "arguments": \'{"city": "Oslo"}\'}', "function_response"),
        ('{"name": "get_weather", "arguments": {"city": "Oslo"}}', "observation"),  # a call as JSON text
        ('<function=get_weather>{"city": "Oslo"}</function>', "ipython"),  # Llama 3.1's custom tool calling
        ('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo"}}]', "tool"),  # Mistral's
    ],
)
def test_each_family_of_calls_written_as_text_is_answered_by_the_tool_message_after_it(
    tmp_path: Path, reply: str, role: str
) -> None:
    turns = [("human", "Weather in Oslo?"), ("gpt", reply), (role, '{"temp_c": 9}'), ("gpt", "It is 9 C in Oslo.")]
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"conversations": [{"from": f, "value": v} for f, v in turns]}) + "\n", "utf-8")
    assert _books(path) == (2, 2, 0, 0)
    assert _contexts(path)[-1] == [
        ("user", turns[0][1]),
        ("assistant", reply),
        ("tool", turns[2][1]),
        ("assistant", turns[3][1]),
    ]


def test_a_tool_message_after_a_reply_without_a_call_in_its_text_still_answers_nothing(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    for reply, result in [
        ("Let me check.", {"role": "tool", "content": "21 C"}),
        (
            '<tool_call>\n{"name": "w", "arguments": {}}\n</tool_call>',
            {"role": "tool", "tool_call_id": "call_9", "content": "21 C"},
        ),
    ]:
        messages = [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": reply},
            result,
            {"role": "assistant", "content": "It is 21 C."},
        ]
        path.write_text(json.dumps({"messages": messages}) + "\n", encoding="utf-8")
        _, stats, rejects = convert_file(path, SETTINGS)
        assert (stats.turns_found, stats.turns_trained, stats.turns_dropped["context_unknown"]) == (2, 1, 1)
        assert json.loads(rejects[0])["reason"] == "unpaired_result"


@pytest.mark.parametrize("row", [0, 1])
def test_a_conversation_of_calls_written_as_text_renders_as_qwen25s_template_does_from_the_logged_text(
    tmp_path: Path, row: int
) -> None:
    # Qwen2.5's template renders a tool message as <tool_response> in a user turn, whatever call it answers: the
    # rows msgtrain makes are apply_chat_template's rendering of the logged messages, each reply trained once, as
    # the tokens of its text (its <tool_call> the added token the model sampled) and the end of its turn; with the
    # control text in the prompt's content parsed as a server does (--content-special-tokens parse), the tokens
    # are the tokenizer's of the whole rendering. The OpenAI-role form of the same conversation (Qwen2.5's own
    # format) alike.
    from msgtrain.linearize import LinearizeOptions, linearize_graph
    from tests.conftest import load_named_tokenizer

    tok = load_named_tokenizer("qwen2.5")
    hf = _transformers(tok)
    encode = lambda text: hf(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    messages = _hermes_row(row)
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"messages": messages}) + "\n", encoding="utf-8")
    expected = hf.apply_chat_template(messages, tokenize=False)
    for source in (HERMES, path):
        (graph,) = [g for g in _graphs(source) if g.path(g.leaves()[0])[0].message.text == messages[0]["content"]]
        replies = [m["content"] + "<|im_end|>" for m in messages if m["role"] == "assistant"]
        for parse in ("plain", "parse"):
            result = linearize_graph(graph, tok, options=LinearizeOptions(content_special_tokens=parse))
            assert not result.drops
            (sample,) = result.samples
            ids = sample.input_ids.tolist()
            assert tok.decode(ids) == expected.rstrip("\n")
            assert [ids[a:b] for a, b in sample.turn_spans] == [encode(r) for r in replies]
            assert int(sample.loss_mask.sum()) == sum(len(encode(r)) for r in replies)
        assert ids == encode(expected.rstrip("\n"))


def _atif_with_engine_ids(tok: Any, *, prompt_of_other_context: bool = False) -> tuple[dict[str, Any], list[Any]]:
    """A Terminus-2-shaped ATIF trajectory of two agent steps whose metrics carry the engine's ids (ATIF v1.3 / v1.4:
    prompt_token_ids, completion_token_ids, logprobs), made with ``tok``: each prompt the template's rendering of the
    steps before it, each completion the reply's ids re-spelt (one token as two that decode alike: what a sampler may
    emit and a re-rendering never would), then the end of the turn. Returns the trajectory and each step's ids."""
    from tests.oracle import non_canonical

    hf = _transformers(tok)
    replies = ['{"analysis": "Empty dir.", "commands": [{"keystrokes": "ls\\n"}]}', '{"task_complete": true}']
    inputs = ["Create hello.txt holding Hello, world!", "New Terminal Output:\n\nroot@c:/app# ls"]
    steps: list[dict[str, Any]] = []
    logged = []
    messages: list[dict[str, str]] = []
    for k, (text, reply) in enumerate(zip(inputs, replies, strict=True)):
        messages.append({"role": "user", "content": text})
        shown = messages if not prompt_of_other_context else [{"role": "user", "content": "Something else entirely."}]
        rendered = hf.apply_chat_template(shown, add_generation_prompt=True, tokenize=False)
        prompt = hf(rendered, add_special_tokens=False)["input_ids"]
        completion = [*non_canonical(hf, hf(reply, add_special_tokens=False)["input_ids"]), hf.eos_token_id]
        logprobs = [round(-0.01 * (i + 1), 4) for i in range(len(completion))]
        logged.append((prompt, completion, logprobs))
        steps.append({"step_id": 2 * k + 1, "source": "user", "message": text})
        metrics = {"prompt_tokens": len(prompt), "completion_tokens": len(completion)}
        metrics |= {"prompt_token_ids": prompt, "completion_token_ids": completion, "logprobs": logprobs}
        steps.append({"step_id": 2 * k + 2, "source": "agent", "message": reply, "metrics": metrics})
        messages.append({"role": "assistant", "content": reply})
    return _atif(steps), logged


def test_an_atif_trajectory_trains_the_engines_logged_ids_and_keeps_their_logprobs(tmp_path: Path) -> None:
    # Harbor's ATIF metrics (RFC 0001, v1.3 completion_token_ids, v1.4 prompt_token_ids, logprobs "one per completion
    # token"; laude-institute/harbor docs/rfcs/0001-trajectory-format.md): the rows are the logged ids, the completion
    # trained, its logprobs kept. Before: the ids were not read, each reply re-rendered from its text (the re-spelt
    # token trained as the tokenizer spells it, no logprobs).
    from msgtrain.linearize import linearize_graph
    from tests.conftest import load_named_tokenizer

    tok = load_named_tokenizer("qwen2.5")
    trajectory, logged = _atif_with_engine_ids(tok)
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    (graph,) = _graphs(path)
    result = linearize_graph(graph, tok)
    assert not result.drops
    # the second prompt re-renders the first reply as the template spells it, not as sampled: a row per turn
    assert len(result.samples) == 2
    for sample, (prompt, completion, logprobs) in zip(result.samples, logged, strict=True):
        assert sample.input_ids.tolist() == prompt + completion
        assert sample.turn_spans == [(len(prompt), len(prompt) + len(completion))]
        assert sample.token_source == "engine" and int(sample.loss_mask.sum()) == len(completion)
        assert sample.logprobs[len(prompt) :].tolist() == pytest.approx(logprobs)


def test_atif_engine_ids_of_another_context_are_not_trained_as_this_one(tmp_path: Path) -> None:
    # the prompt ids hold no text of the step's context (the last user message): the engine-id check every reader's
    # ids get drops the turn (engine_ids_mismatch), never trains the ids as if they were this context's
    from msgtrain.linearize import linearize_graph
    from tests.conftest import load_named_tokenizer

    tok = load_named_tokenizer("qwen2.5")
    trajectory, _ = _atif_with_engine_ids(tok, prompt_of_other_context=True)
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    (graph,) = _graphs(path)
    result = linearize_graph(graph, tok)
    assert result.samples == [] and dict(result.drops) == {"engine_ids_mismatch": 2}


def test_atif_logprobs_that_do_not_align_with_the_completion_ids_are_refused(tmp_path: Path) -> None:
    metrics = {"prompt_tokens": 3, "completion_tokens": 2, "completion_token_ids": [5, 6], "logprobs": [-0.1]}
    steps = [
        {"step_id": 1, "source": "user", "message": "Go."},
        {"step_id": 2, "source": "agent", "message": "Done.", "metrics": metrics},
    ]
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(_atif(steps)), encoding="utf-8")
    _, stats, rejects = convert_file(path, SETTINGS)
    assert stats.turns_trained == 0 and stats.turns_lost == 1
    assert json.loads(rejects[0])["reason"] == "bad_engine_ids"


def test_a_step_whose_source_is_not_a_string_is_not_taken_for_an_atif_step() -> None:
    """A record with an integer step_id and a dict or list ``source`` (not an ATIF step: its source is a role name)
    is read as anything else is, never a TypeError from looking the source up among the roles."""
    from msgtrain.ingest.common.message_like import unwrapped

    for source in ({"kind": "agent"}, ["agent"]):
        record = {"step_id": 1, "source": source, "message": "hello"}
        assert unwrapped(record) == record
