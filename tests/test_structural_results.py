"""The structural reader pairs tool results as the log says, and carries only what the log holds (issue #36).

Fixtures are hand-written in the shapes named beside each; no third-party data is copied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.registry import get_reader
from msgtrain.ingest.structure.structural import StructuralReader
from msgtrain.model.message import OptionCallMessage, OptionResultMessage


def _read(path: Path, reader: Any = None) -> list[Any]:
    return list(read_events(reader or StructuralReader(), path, forced=True))


def _graph(events: list[Any]) -> Any:
    (graph,) = [e.graph for e in events if isinstance(e, ReadGraph)]
    return graph


def _messages(graph: Any) -> list[Any]:
    return [n.message for n in graph.nodes.values()]


def _sharegpt(tmp_path: Path, conversations: list[dict[str, str]]) -> Path:
    path = tmp_path / "chats.json"
    path.write_text(json.dumps([{"conversations": conversations}]), encoding="utf-8")
    return path


# ShareGPT's parallel calls as LLaMA-Factory writes them (hiyouga/LLaMA-Factory data/README.md, "function_call" /
# "observation"; its glaive_toolcall demo): one function_call turn holding a JSON list of calls, one observation
# holding a JSON list of their results, in call order.
PARALLEL = [
    {"from": "human", "value": "Prices of AAPL and MSFT?"},
    {
        "from": "function_call",
        "value": json.dumps(
            [{"name": "price", "arguments": {"s": "AAPL"}}, {"name": "price", "arguments": {"s": "MSFT"}}]
        ),
    },
    {"from": "observation", "value": json.dumps([{"name": "price", "content": {"p": 227.5}}, "431.2"])},
    {"from": "gpt", "value": "AAPL 227.50, MSFT 431.20."},
]


def test_one_observation_holding_a_list_answers_each_parallel_call_in_order(tmp_path: Path) -> None:
    events = _read(_sharegpt(tmp_path, PARALLEL))
    assert not [e for e in events if isinstance(e, ReadReject)]
    messages = _messages(_graph(events))
    (calls,) = [m for m in messages if isinstance(m, OptionCallMessage)]
    results = [m.result for m in messages if isinstance(m, OptionResultMessage)]
    # each call answered by its own entry (an entry {"name", "content"} gives its content), none left unanswered
    assert [r.invocation_id for r in results] == [c.invocation_id for c in calls.calls] == ["call_1_0", "call_1_1"]
    assert [r.result for r in results] == [{"p": 227.5}, "431.2"]
    # the same reading as the sharegpt reader's
    own = _graph(_read(tmp_path / "chats.json", get_reader("sharegpt")))
    assert [m.model_dump() for m in _messages(own)] == [m.model_dump() for m in messages]


def test_results_in_their_own_messages_pair_in_order_even_when_a_result_is_a_list(tmp_path: Path) -> None:
    two = [*PARALLEL[:2], {"from": "observation", "value": "[1, 2]"}, {"from": "observation", "value": "[3, 4]"}]
    messages = _messages(_graph(_read(_sharegpt(tmp_path, [*two, PARALLEL[3]]))))
    results = [m.result for m in messages if isinstance(m, OptionResultMessage)]
    assert [(r.invocation_id, r.result) for r in results] == [("call_1_0", "[1, 2]"), ("call_1_1", "[3, 4]")]


def test_one_result_for_parallel_calls_that_is_not_a_list_of_them_cuts_the_conversation(tmp_path: Path) -> None:
    first = [
        {"from": "human", "value": "Hi"},
        {"from": "gpt", "value": "Hello."},
    ]
    bad = [*first, *PARALLEL[:2], {"from": "observation", "value": "[1, 2, 3]"}, PARALLEL[3]]
    events = _read(_sharegpt(tmp_path, bad))
    (reject,) = [e for e in events if isinstance(e, ReadReject)]
    assert reject.error.code == "ambiguous_results"
    graph = _graph(events)
    # trained up to the ambiguous result; the reply after it is context the log cannot give, never trained
    origins = [(n.message.role, n.origin.value) for n in graph.nodes.values()]
    # the calls are trained (sampled before the gap); the reply after the result is context only, never trained
    assert origins == [
        ("user", "context"),
        ("assistant", "sampled"),
        ("user", "context"),
        ("assistant", "sampled"),
        ("assistant", "carried"),
    ]
    assert not any(isinstance(m, OptionResultMessage) for m in _messages(graph))


# OpenAI chat messages (platform.openai.com/docs/api-reference/chat/create, "tool" messages: role, content,
# tool_call_id; "name" is optional), with calls logged without ids as TRL's tool-calling datasets write them
# (huggingface/trl docs/source/dataset_formats.md, "Tool calling"), and the legacy function_call / function pair.
OPENAI = {
    "id": 1,
    "messages": [
        {"role": "user", "content": "Weather in Oslo and Lisbon?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
                {
                    "id": "call_L",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Lisbon"}'},
                },
            ],
        },
        {"role": "tool", "content": "6 C"},
        {"role": "tool", "tool_call_id": "call_L", "name": "weather", "content": "21 C"},
        {"role": "assistant", "content": "Oslo 6 C, Lisbon 21 C. Time there?"},
        {"role": "user", "content": "Yes"},
        {"role": "assistant", "content": None, "function_call": {"name": "clock", "arguments": "{}"}},
        {"role": "function", "name": "clock", "content": "14:05"},
        {"role": "assistant", "content": "14:05."},
    ],
}


def test_results_carry_only_the_name_the_log_gave_and_made_up_ids_are_the_readers_ids(tmp_path: Path) -> None:
    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps(OPENAI) + "\n", encoding="utf-8")
    found = _graph(_read(path))
    results = [m for m in _messages(found) if isinstance(m, OptionResultMessage)]
    # the first result names no tool in the log: no name is made up for it (a template rendering a result's name
    # would show one the model never saw); the call's name is still known, from the call
    assert [(r.name, r.result.option_name) for r in results] == [
        (None, "weather"),
        ("weather", "weather"),
        ("clock", "clock"),
    ]
    # a call without an id: call_<message>_<k>; the legacy function_call: function_call_<message>
    assert [r.result.invocation_id for r in results] == ["call_1_0", "call_L", "function_call_6"]
    # what the shipped openai_chat mapping (the reader it replaced: tests/test_shipped_mappings.py) reads of the same
    # file, ids and graph id included
    own = _graph(_read(path, get_reader("openai_chat")))
    assert [m.model_dump() for m in _messages(own)] == [m.model_dump() for m in _messages(found)]
    assert own.graph_id == found.graph_id


# tau2-bench's telecom domain (sierra-research/tau2-bench src/tau2/data_model/message.py: UserMessage.tool_calls,
# ToolMessage.requestor "user"): the user simulator calls its own tools, in a user message, and gets their results.
TAU2_USER_TOOLS = {
    "simulation_id": "s1",
    "messages": [
        {"role": "assistant", "content": "Hi! How can I help?"},
        {"role": "user", "content": "My phone has no signal."},
        {"role": "assistant", "content": "Please check the status bar."},
        {
            "role": "user",
            "content": None,
            "tool_calls": [
                {"id": "check_status_bar", "name": "check_status_bar", "arguments": {}, "requestor": "user"}
            ],
        },
        {"role": "tool", "id": "check_status_bar", "content": "No bars", "requestor": "user"},
        {
            "role": "user",
            "content": "It shows no bars.",
            "tool_calls": [{"id": "t2", "name": "toggle_airplane_mode", "arguments": {}}],
        },
        {"role": "tool", "id": "t2", "content": "Airplane mode off", "requestor": "user"},
        {
            "role": "assistant",
            "content": "Let me look up your line.",
            "tool_calls": [{"id": "get_line_0", "name": "get_line", "arguments": {}}],
        },
        {"role": "tool", "id": "get_line_0", "content": "active"},
        {"role": "assistant", "content": "Your line is active."},
    ],
}


def test_a_result_of_a_call_the_user_side_made_is_paired_and_left_out_of_the_policys_context(tmp_path: Path) -> None:
    path = tmp_path / "sims.jsonl"
    path.write_text(json.dumps(TAU2_USER_TOOLS) + "\n", encoding="utf-8")
    events = _read(path)
    assert not [e for e in events if isinstance(e, ReadReject)]  # was: unpaired_result, the rest cut
    graph = _graph(events)
    texts = [(m.role, m.text if not isinstance(m, OptionResultMessage) else m.result.result) for m in _messages(graph)]
    # the agent sees the user's text, never the user's own calls nor their results; its own call is answered
    assert texts == [
        ("assistant", "Hi! How can I help?"),
        ("user", "My phone has no signal."),
        ("assistant", "Please check the status bar."),
        ("user", "It shows no bars."),
        ("assistant", "Let me look up your line."),
        ("tool", "active"),
        ("assistant", "Your line is active."),
    ]
    assert graph.metadata["user_tool_messages"] == 3
