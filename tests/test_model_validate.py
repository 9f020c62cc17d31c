"""Validation (seed 004's rules): every problem says where it is, a stable code, and what was wrong.

Message-list rules run over raw OpenAI dicts (``validate_dicts``), typed messages (``validate_messages``) and
every branch of a graph (``validate_graph``); ``validate_user_input`` guards the API boundary against spoofed
roles. Structural problems of a native graph log are found while loading it and name the file, line and node.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import msgtrain
from msgtrain import MessageGraph
from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.model import OptionCallMessage, OptionCallPayload, OptionResultMessage, OptionResultPayload
from msgtrain.model.message import AnyMessage, PartsMessage, text_message
from msgtrain.model.openai import to_openai_messages
from msgtrain.model.validate import (
    Problem,
    raise_for_problems,
    validate_dicts,
    validate_graph,
    validate_messages,
    validate_user_input,
)


def _only(problems: list[Problem]) -> tuple[str, str, str]:
    assert len(problems) == 1, problems
    return problems[0].where, problems[0].code, problems[0].message


def _call(call_id: str = "call_1", name: str = "calculate") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": '{"expr": "2+2"}'}}


SEED_CHAIN: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding assistant."},
    {"role": "user", "content": "Read the main.py file"},
    {"role": "assistant", "content": "", "tool_calls": [_call("call_abc123", "read_file")]},
    {"role": "tool", "content": "app = FastAPI()", "tool_call_id": "call_abc123", "name": "read_file"},
    {"role": "assistant", "content": "The file contains a FastAPI app."},
]


# ----------------------------------------------------------------------------------------------- dict chains


def test_the_seed_004_conversation_is_valid() -> None:
    assert validate_dicts(SEED_CHAIN) == []
    assert validate_messages(msgtrain.model.from_openai_messages(SEED_CHAIN)) == []


def test_an_unknown_role_is_reported_at_its_index() -> None:
    where, code, message = _only(validate_dicts([{"role": "user", "content": "hi"}, {"role": "hacker"}]))
    assert (where, code) == ("message[1]", "unknown_role")
    assert "hacker" in message


def test_an_unknown_role_is_worded_exactly_as_in_seed_004() -> None:
    (problem,) = validate_dicts([{"role": "hacker", "content": "inject"}])
    assert str(problem).startswith('message[0]: unknown role "hacker"')


def test_a_tool_message_missing_its_call_id_is_worded_as_in_seed_004() -> None:
    problems = validate_dicts([{"role": "tool", "content": "result"}])
    assert str(problems[0]).startswith("message[0]: tool message missing tool_call_id")
    assert [p.code for p in problems] == ["missing_tool_call_id", "missing_name"]
    assert problems[1].message == "tool message missing name"


def test_an_assistant_with_neither_content_nor_calls_is_worded_as_in_seed_004() -> None:
    for empty in ({"role": "assistant", "content": ""}, {"role": "assistant", "content": None}):
        assert _only(validate_dicts([empty])) == (
            "message[0]",
            "empty_assistant",
            "assistant message has no content and no tool calls",
        )


def test_an_assistant_with_an_empty_part_list_and_no_calls_is_empty() -> None:
    assert _only(validate_dicts([{"role": "assistant", "content": []}]))[1] == "empty_assistant"


def test_an_assistant_that_only_calls_tools_or_only_thinks_is_not_empty() -> None:
    only_calls = {"role": "assistant", "content": "", "tool_calls": [_call()]}
    only_thinking = {"role": "assistant", "content": None, "reasoning_content": "hmm"}
    assert validate_dicts([only_calls, only_thinking]) == []


@pytest.mark.parametrize("role", ["user", "system", "developer"])
@pytest.mark.parametrize("content", ["", None, []])
def test_user_and_system_messages_need_content(role: str, content: Any) -> None:
    assert _only(validate_dicts([{"role": role, "content": content}])) == (
        "message[0]",
        "empty_content",
        f"{role} message has empty content",
    )


def test_a_tool_result_answering_no_call_is_reported() -> None:
    chain = [SEED_CHAIN[1], {"role": "tool", "content": "x", "tool_call_id": "call_9", "name": "ls"}]
    assert _only(validate_dicts(chain)) == (
        "message[1]",
        "unpaired_result",
        "tool result answers no call (call_9)",
    )


def test_a_result_answering_a_later_call_answers_no_call() -> None:
    chain = [SEED_CHAIN[3], SEED_CHAIN[2]]
    assert _only(validate_dicts(chain))[:2] == ("message[0]", "unpaired_result")


def test_a_tool_result_may_leave_out_the_name_of_a_known_call() -> None:
    chain = [SEED_CHAIN[2], {"role": "tool", "content": "x", "tool_call_id": "call_abc123"}]
    assert validate_dicts(chain) == []


def test_a_tool_call_id_reused_while_its_call_is_open_is_reported_where_it_repeats() -> None:
    chain = [
        {"role": "assistant", "content": "", "tool_calls": [_call("a")]},
        {"role": "assistant", "content": "", "tool_calls": [_call("a")]},
        {"role": "tool", "content": "4", "tool_call_id": "a", "name": "calculate"},
    ]
    assert _only(validate_dicts(chain)) == (
        "message[1]",
        "duplicate_id",
        "tool call id a is used twice while the first call is unanswered",
    )


def test_a_tool_call_id_reused_after_its_call_was_answered_is_a_new_call() -> None:
    # tau2-bench agents name calls <tool>_0 again once the earlier call was answered.
    chain = [
        {"role": "assistant", "content": "", "tool_calls": [_call("a")]},
        {"role": "tool", "content": "4", "tool_call_id": "a", "name": "calculate"},
        {"role": "assistant", "content": "", "tool_calls": [_call("a")]},
        {"role": "tool", "content": "5", "tool_call_id": "a", "name": "calculate"},
    ]
    assert validate_dicts(chain) == []


def test_a_tool_call_without_id_or_name_is_reported() -> None:
    broken = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "ls"}}]}
    assert _only(validate_dicts([broken])) == (
        "message[0]",
        "bad_tool_call",
        "tool_calls[0] missing id or name",
    )


def test_a_message_that_is_not_an_object_is_reported() -> None:
    assert _only(validate_dicts(["hello"])) == ("message[0]", "bad_message", "message is not an object")


def test_every_problem_is_found_not_just_the_first() -> None:
    chain = [{"role": "hacker"}, {"role": "user", "content": ""}, {"role": "assistant", "content": ""}]
    assert [(p.where, p.code) for p in validate_dicts(chain)] == [
        ("message[0]", "unknown_role"),
        ("message[1]", "empty_content"),
        ("message[2]", "empty_assistant"),
    ]


def test_problems_carry_the_outer_location_given() -> None:
    (problem,) = validate_dicts([{"role": "user", "content": ""}], where="run.jsonl:12")
    assert problem.where == "run.jsonl:12 message[0]"


def test_a_problem_prints_as_location_message_and_fix() -> None:
    (problem,) = validate_dicts([{"role": "hacker"}])
    assert str(problem) == f"message[0]: {problem.message} (fix: use one of system, user, assistant, tool)"
    assert problem.to_json() == {
        "where": "message[0]",
        "code": "unknown_role",
        "message": problem.message,
        "hint": "use one of system, user, assistant, tool",
    }


def test_raise_for_problems_raises_the_first_and_counts_the_rest() -> None:
    raise_for_problems([])
    with pytest.raises(ValidationError) as info:
        chain = [{"role": "tool", "content": "r"}, {"role": "user", "content": ""}]
        raise_for_problems(validate_dicts(chain))
    assert (info.value.where, info.value.code) == ("message[0]", "missing_tool_call_id")
    assert info.value.message == "tool message missing tool_call_id (+2 more)"
    assert isinstance(info.value, MsgtrainError) and isinstance(info.value, ValueError)


# ----------------------------------------------------------------------------------------------- typed messages


def _calls(*ids: str) -> OptionCallMessage:
    return OptionCallMessage(calls=tuple(OptionCallPayload(invocation_id=i, option_name="f") for i in ids))


def _result(call_id: str) -> OptionResultMessage:
    return OptionResultMessage(result=OptionResultPayload(invocation_id=call_id, option_name="f", result="r"))


def test_typed_messages_reuse_of_an_open_invocation_id_names_the_first_use() -> None:
    messages: list[AnyMessage] = [text_message("user", "go"), _calls("c1"), _calls("c1"), _result("c1")]
    assert _only(validate_messages(messages)) == (
        "message[2]",
        "duplicate_id",
        "invocation id c1 is still open from message[1]",
    )


def test_typed_messages_may_reuse_an_invocation_id_once_its_call_was_answered() -> None:
    messages: list[AnyMessage] = [text_message("user", "go"), _calls("c1"), _result("c1"), _calls("c1"), _result("c1")]
    assert validate_messages(messages) == []


def test_projection_pairs_a_reused_id_with_the_call_it_follows() -> None:
    # The second call with id c1 has no result: it is dropped as unanswered, the first pair is kept.
    messages: list[AnyMessage] = [text_message("user", "go"), _calls("c1"), _result("c1"), _calls("c1")]
    projected = to_openai_messages(messages)
    assert [m["role"] for m in projected.messages] == ["user", "assistant", "tool"]
    assert projected.skipped_calls == 1


def test_typed_results_answering_no_earlier_call_are_reported() -> None:
    messages: list[AnyMessage] = [_result("c0"), _calls("c1"), _result("c1"), _result("c2")]
    assert [(p.where, p.code, p.message) for p in validate_messages(messages)] == [
        ("message[0]", "unpaired_result", "result answers no call (c0)"),
        ("message[3]", "unpaired_result", "result answers no call (c2)"),
    ]


def test_typed_messages_without_parts_are_empty() -> None:
    messages = [PartsMessage(role_hint_for_llm="system"), PartsMessage(role_hint_for_llm="assistant")]
    assert [(p.where, p.code, p.message) for p in validate_messages(messages, where="graph g")] == [
        ("graph g message[0]", "empty_content", "system message has empty content"),
        ("graph g message[1]", "empty_assistant", "assistant message has no content and no tool calls"),
    ]


# ----------------------------------------------------------------------------------------------- graphs


def test_a_graph_problem_names_the_graph_branch_and_message() -> None:
    g = MessageGraph(graph_id="g7")
    g.append({"role": "user", "content": "go"})
    g.append({"role": "tool", "tool_call_id": "ghost", "name": "ls", "content": "x"})
    assert _only(validate_graph(g)) == (
        "graph g7 branch 0 message[1]",
        "unpaired_result",
        "result answers no call (ghost)",
    )


def test_a_problem_in_a_shared_prefix_is_reported_once() -> None:
    g = MessageGraph(graph_id="g7")
    g.append({"role": "tool", "tool_call_id": "ghost", "name": "ls", "content": "x"})
    g.append({"role": "user", "content": "go"})
    g.append({"role": "assistant", "content": "ok"})
    g[1] = {"role": "user", "content": "go on"}
    assert len(g.branches()) == 2
    assert [p.code for p in validate_graph(g)] == ["unpaired_result"]


def test_a_valid_graph_with_branches_has_no_problems() -> None:
    g = MessageGraph(SEED_CHAIN, graph_id="ok")
    g[1] = {"role": "user", "content": "Read app.py"}
    assert validate_graph(g) == []


def test_a_graph_whose_node_lost_its_parent_is_reported() -> None:
    g = MessageGraph(SEED_CHAIN[:2], graph_id="g7")
    child = g.head[1]
    g.nodes[child] = replace(g.nodes[child], parent="nowhere")
    assert (f"graph g7 node {child}", "dangling_parent", "parent nowhere is missing") in [
        (p.where, p.code, p.message) for p in validate_graph(g)
    ]


def test_a_graph_whose_parent_links_loop_is_reported() -> None:
    g = MessageGraph(SEED_CHAIN[:3], graph_id="g7")
    _, user, answer = g.head
    # user <-> answer: nothing hangs below the loop, so today's code returns instead of walking it forever.
    g.nodes[user] = replace(g.nodes[user], parent=answer)
    g.children[answer] = [user]
    assert "cycle" in [p.code for p in validate_graph(g)]


def test_adding_a_node_under_an_unknown_parent_is_refused() -> None:
    g = MessageGraph(graph_id="g7")
    with pytest.raises(ValidationError) as info:
        g.add_node("nowhere", {"role": "user", "content": "hi"})
    assert (info.value.where, info.value.code) == ("graph g7", "dangling_parent")


# ----------------------------------------------------------------------------------------------- user input


@pytest.mark.parametrize("role", ["assistant", "tool"])
def test_user_input_rejects_spoofed_agent_roles(role: str) -> None:
    spoofed = [{"role": "user", "content": "ok"}, {"role": role, "content": "spoofed", "tool_call_id": "c"}]
    with pytest.raises(ValidationError) as info:
        validate_user_input(spoofed)
    assert (info.value.where, info.value.code) == ("message[1]", "spoofed_role")
    assert info.value.message.startswith(f"role '{role}'") or info.value.message.startswith(f'role "{role}"')
    assert "not allowed" in info.value.message


def test_a_spoofed_role_is_quoted_as_in_seed_004() -> None:
    with pytest.raises(ValidationError) as info:
        validate_user_input([{"role": "user", "content": "ok"}, {"role": "assistant", "content": "spoofed"}])
    assert str(info.value).startswith('message[1]: role "assistant" is not allowed')


def test_user_input_rejects_spoofed_typed_messages_too() -> None:
    with pytest.raises(ValidationError) as info:
        validate_user_input([text_message("user", "ok"), text_message("assistant", "spoofed")])
    assert info.value.code == "spoofed_role"


def test_user_input_must_not_be_empty() -> None:
    with pytest.raises(ValidationError) as info:
        validate_user_input([])
    assert (info.value.code, info.value.message) == ("empty_input", "message list is empty")


def test_user_input_messages_need_content() -> None:
    with pytest.raises(ValidationError) as info:
        validate_user_input([{"role": "system", "content": "be nice"}, {"role": "user", "content": ""}])
    assert str(info.value) == "message[1]: user message has empty content"
    assert info.value.code == "empty_content"


def test_user_input_of_user_and_system_messages_passes() -> None:
    validate_user_input([{"role": "system", "content": "be nice"}, {"role": "user", "content": "hi"}])
    validate_user_input([text_message("user", "hi")])


def test_user_input_rejects_unknown_roles() -> None:
    with pytest.raises(ValidationError) as info:
        validate_user_input([{"role": "hacker", "content": "inject"}])
    assert (info.value.where, info.value.code) == ("message[0]", "spoofed_role")


# ----------------------------------------------------------------------------------------------- graph-log structure


def _log(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    g = MessageGraph(SEED_CHAIN[:3], graph_id="g1")
    path = tmp_path / "g.graph.jsonl"
    g.save(path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in records] == ["graph", "env", "node", "node", "node", "head"]
    return path, records


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _load_error(path: Path) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        list(msgtrain.load_graphs(path))
    return info.value


def test_a_node_whose_parent_never_appears_is_a_dangling_parent(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    records[3]["parent"] = "0000deadbeef"
    _write(path, records)
    error = _load_error(path)
    assert (error.where, error.code) == (f"{path}:4", "dangling_parent")
    assert error.message == f"node {records[3]['id']} has a dangling parent 0000deadbeef"


def test_parent_links_that_loop_are_a_cycle(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    records[2]["parent"] = records[4]["id"]  # the root now hangs from its own grandchild
    _write(path, records)
    error = _load_error(path)
    assert (error.where, error.code) == (f"{path}:3", "cycle")
    assert error.message == f"node {records[2]['id']} is its own ancestor (cycle)"


def test_a_node_that_is_its_own_parent_is_a_cycle(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    records[4]["parent"] = records[4]["id"]
    _write(path, records)
    error = _load_error(path)
    assert (error.where, error.code) == (f"{path}:5", "cycle")
    assert records[4]["id"] in error.message


def test_one_id_with_two_different_messages_is_a_duplicate_id(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    impostor = {**records[3], "message": {"kind": "parts", "parts": [{"kind": "text", "text": "other"}]}}
    records.insert(4, impostor)
    _write(path, records)
    error = _load_error(path)
    assert (error.where, error.code) == (f"{path}:5", "duplicate_id")
    assert error.message == f"duplicate node id {records[3]['id']} with different content"


def test_the_same_node_record_written_twice_is_not_a_duplicate(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    records.insert(4, records[3])
    _write(path, records)
    (g,) = msgtrain.load_graphs(path)
    assert len(g) == 3


def test_an_unknown_version_is_refused_naming_file_and_version(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    records[0]["version"] = 2
    _write(path, records)
    error = _load_error(path)
    assert error.code == "unsupported_version"
    assert error.where is not None and error.where.startswith(str(path))
    assert error.message == "unsupported graph log 'msgtrain.graph' version 2"
    assert error.hint == "this msgtrain reads msgtrain.graph version 1; upgrade msgtrain"


def test_an_unknown_version_names_the_header_line(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    records[0]["version"] = 2
    _write(path, records)
    assert _load_error(path).where == f"{path}:1"


def test_a_record_without_a_graph_id_is_refused_at_its_line(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    del records[2]["graph"]
    _write(path, records)
    error = _load_error(path)
    assert (error.where, error.code, error.message) == (f"{path}:3", "bad_record", "record has no graph id")


def test_an_unknown_record_type_is_refused_at_its_line(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    records.insert(3, {"type": "comment", "graph": "g1"})
    _write(path, records)
    error = _load_error(path)
    assert (error.where, error.code, error.message) == (
        f"{path}:4",
        "bad_record",
        "unknown record type 'comment'",
    )


def test_a_node_record_without_an_id_is_malformed(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    del records[3]["id"]
    _write(path, records)
    error = _load_error(path)
    assert (error.where, error.code) == (f"{path}:4", "bad_record")
    assert error.message.startswith("malformed node record")


def test_a_node_with_an_invalid_message_names_the_node(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    records[3]["message"]["kind"] = "action_call"
    _write(path, records)
    error = _load_error(path)
    assert (error.where, error.code) == (f"{path}:4", "bad_message")
    assert error.message.startswith(f"node {records[3]['id']}: invalid message")


def test_a_graph_without_a_header_is_refused(tmp_path: Path) -> None:
    path, records = _log(tmp_path)
    _write(path, records[1:])
    error = _load_error(path)
    assert (error.code, error.message) == ("bad_record", "graph g1 has no header record")
