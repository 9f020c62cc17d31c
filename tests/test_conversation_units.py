"""Conversations read by their units: the role table, gaps that cut a conversation, calls at any depth.

Fixtures are small and written here in the shape of third-party logs (each names the project and file its shape
follows); the real files' counts are in tests/test_unseen_projects.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain.ingest.common.message_like import SHAPED_ROLES, canonical_role
from msgtrain.ingest.common.shapes import normalise_messages
from msgtrain.run.parts import LinearizeSettings, convert_file

SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)


def _write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def _books(path: Path) -> tuple[int, dict[str, int], int, list[dict[str, Any]]]:
    """(turns trained, drops by reason, turns lost, reject lines) of converting ``path``."""
    _, stats, rejects = convert_file(path, SETTINGS)
    return stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost, [json.loads(r) for r in rejects]


@pytest.mark.parametrize(
    ("logged", "role"),
    [
        ("agent", "assistant"),
        ("Bot", "assistant"),
        ("MODEL", "assistant"),
        ("chatbot", "assistant"),
        ("AI", "assistant"),
        ("gpt", "assistant"),
        ("System", "system"),
        ("SYSTEM", "system"),
        ("observation", "tool"),
        ("ipython", "tool"),
        ("function", "tool"),
        ("ROLE_USER", "user"),
        ("narrator", None),
    ],
)
def test_the_role_table_reads_framework_vocabularies_case_insensitively(logged: str, role: str | None) -> None:
    assert canonical_role(logged) == role


def test_a_mapping_role_wins_over_the_table() -> None:
    assert canonical_role("agent", {"agent": "user"}) == "user"


def test_smolagents_tool_messages_are_read_by_their_shape() -> None:
    # smolagents' memory (huggingface/smolagents src/smolagents/memory.py, ActionStep.to_messages): a tool-call
    # message whose content is text, then the observation as a tool-response: sent as assistant and user text
    messages = [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "tool-call", "content": [{"type": "text", "text": "Calling tools:\n[{'id': 'c1'}]"}]},
        {"role": "tool-response", "content": [{"type": "text", "text": "Observation:\n4"}]},
        {"role": "assistant", "content": "4"},
    ]
    assert [m["role"] for m in normalise_messages(messages, "$")[0]] == ["user", "assistant", "user", "assistant"]
    # the same roles holding a structured call and its answer are a call and its result
    structured = [
        {"role": "user", "content": "What is 2+2?"},
        {
            "role": "tool-call",
            "content": None,
            "tool_calls": [{"id": "c1", "function": {"name": "add", "arguments": "{}"}}],
        },
        {"role": "tool-response", "tool_call_id": "c1", "content": "4"},
    ]
    assert [m["role"] for m in normalise_messages(structured, "$")[0]] == ["user", "assistant", "tool"]
    assert set(SHAPED_ROLES) >= {"tool-call", "tool-response", "api"}


# Shape of a multi-agent role-play log (customer-service simulations: agent / user turns with API lines between
# them, "role": "API" results and "api_call" requests the table does not know).
ROLE_PLAY = {
    "dialogue_id": "d1",
    "messages": [
        {"role": "system", "content": "You book hotels."},
        {"role": "user", "content": "Find a room in Paris."},
        {"role": "agent", "content": "Let me search."},
        {"role": "api_call", "content": "search_hotels(city='Paris')"},
        {"role": "API", "content": "Hilton: available"},
        {"role": "agent", "content": "A room at Hilton is available."},
        {"role": "user", "content": "Book it."},
        {"role": "agent", "content": "Booked."},
    ],
}


def test_an_unknown_role_cuts_the_conversation_and_never_stitches_it(tmp_path: Path) -> None:
    trained, drops, lost, rejects = _books(_write(tmp_path / "roleplay.json", ROLE_PLAY))
    assert trained == 1  # "Let me search." only
    assert drops == {"context_unknown": 2}  # the two replies after the API lines: their context is not in the log
    assert lost == 0
    (gap,) = rejects
    assert gap["reason"] == "unknown_role" and "$.messages[3]" in gap["where"]
    assert "trained up to it" in gap["message"]


def test_an_unreadable_first_message_still_rejects_the_conversation(tmp_path: Path) -> None:
    record = {"messages": [{"role": "narrator", "content": "Once"}, {"role": "assistant", "content": "upon"}]}
    trained, _, lost, rejects = _books(_write(tmp_path / "bad.json", record))
    assert trained == 0 and [r["reason"] for r in rejects] == ["unknown_role"] and lost == 1


# Shape of a google-genai ChatSession history (googleapis/python-genai: chat.get_history() dumped as Content[]),
# with one functionResponse whose functionCall was not logged.
GEMINI_HISTORY = [
    {"role": "user", "parts": [{"text": "hi"}]},
    {"role": "model", "parts": [{"text": "hello"}]},
    {"role": "user", "parts": [{"text": "weather in Oslo?"}]},
    {"role": "model", "parts": [{"text": "Checking."}]},
    {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"t": 3}}}]},
    {"role": "model", "parts": [{"text": "3 degrees."}]},
    {"role": "user", "parts": [{"text": "thanks"}]},
    {"role": "model", "parts": [{"text": "bye"}]},
]


def test_an_orphan_function_response_cuts_a_gemini_history_there(tmp_path: Path) -> None:
    trained, drops, lost, rejects = _books(_write(tmp_path / "history.json", GEMINI_HISTORY))
    assert trained == 2 and drops == {"context_unknown": 2} and lost == 0
    assert [r["reason"] for r in rejects] == ["unpaired_result"]


def _call_step(history: list[dict[str, Any]], reply: dict[str, Any]) -> dict[str, Any]:
    return {"input": history, "response": reply, "usage": {"prompt_tokens": 10 * len(history)}}


SYSTEM = {"role": "system", "content": "You fix bugs."}
ASK = {"role": "user", "content": "Fix the failing test."}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "test_a.py"}


def _chat_completion(message: dict[str, Any]) -> dict[str, Any]:
    return {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}


# Shape of an agent trajectory that logs each step's model call (SWE-agent-style "trajectory" steps with the
# request's messages and the provider's raw response: an OpenAI ChatCompletion, then an Anthropic Message).
TRAJECTORY = {
    "instance_id": "repo__1",
    "trajectory": [
        _call_step([SYSTEM, ASK], _chat_completion(CALL)),
        _call_step(
            [SYSTEM, ASK, CALL, RESULT],
            {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "Fixed test_a.py."}]},
        ),
        {"action": "submit", "observation": "done"},
    ],
}


def test_calls_nested_in_steps_are_trained_after_exactly_their_own_messages(tmp_path: Path) -> None:
    from msgtrain.ingest.boundary import read_events
    from msgtrain.ingest.detect import detect_format

    path = _write(tmp_path / "traj.json", TRAJECTORY)
    events = list(read_events(detect_format(path), path))
    (graph,) = [e.graph for e in events if hasattr(e, "graph")]
    # the second call re-sends the first one's history: the shared prefix is one set of nodes, not two
    assert [(n.message.role, n.origin.value) for n in graph.nodes.values()] == [
        ("system", "context"),
        ("user", "context"),
        ("assistant", "sampled"),
        ("tool", "context"),
        ("assistant", "sampled"),
    ]
    trained, drops, lost, rejects = _books(path)
    assert (trained, drops, lost, rejects) == (2, {}, 0, [])


def test_a_bad_call_among_steps_costs_that_call_only(tmp_path: Path) -> None:
    record = json.loads(json.dumps(TRAJECTORY))
    record["trajectory"][0]["input"][1]["role"] = "narrator"  # the first call's own messages cannot be read
    trained, _, _, rejects = _books(_write(tmp_path / "traj.json", record))
    assert trained == 1 and [r["reason"] for r in rejects] == ["unknown_role"]


def _autogen_record(messages: list[dict[str, Any]], reply: str) -> dict[str, Any]:
    usage = {"prompt_tokens": 9, "completion_tokens": 3}
    return {
        "messages": messages,
        "response": {"finish_reason": "stop", "content": reply, "usage": usage, "cached": False},
    }


# Shape of AutoGen 0.4 model calls saved with their results (autogen_core.models: LLMMessage lists as
# model_dump() writes them, beside the CreateResult the client returned: finish_reason, content, usage, cached).
AG_SYSTEM = {"type": "SystemMessage", "content": "You are a poet."}
AG_ASK = {"type": "UserMessage", "content": "A haiku on rain.", "source": "user"}
AG_REPLY = {"type": "AssistantMessage", "content": "Soft rain on the roof", "source": "poet"}
AG_MORE = {"type": "UserMessage", "content": "Another.", "source": "user"}
AUTOGEN_CALLS = [
    _autogen_record([AG_SYSTEM, AG_ASK], "Soft rain on the roof"),
    _autogen_record([AG_SYSTEM, AG_ASK, AG_REPLY, AG_MORE], "Puddles hold the sky"),
]


def test_autogen_calls_train_the_response_beside_their_messages(tmp_path: Path) -> None:
    from msgtrain.ingest.detect import detect_format

    path = _write(tmp_path / "session.json", AUTOGEN_CALLS)
    assert detect_format(path).name == "autogen"
    trained, drops, lost, rejects = _books(path)
    # both responses trained once each: the first is also the second call's history (the same node, not a copy)
    assert (trained, drops, lost, rejects) == (2, {}, 0, [])


# Shape of a chatbot-ui export (mckaywrigley/chatbot-ui, types/export.ts v4: {version, history: [{id, name, messages,
# model, prompt, temperature, folderId}], folders, prompts}): each conversation's system prompt is its ``prompt``.
CHATBOT_UI = {
    "version": 4,
    "history": [
        {
            "id": "c1",
            "name": "Rain",
            "messages": [{"role": "user", "content": "A haiku?"}, {"role": "assistant", "content": "Soft rain."}],
            "model": {"id": "gpt-4", "name": "GPT-4"},
            "prompt": "You are a poet.",
            "temperature": 1,
            "folderId": None,
        }
    ],
    "folders": [],
    "prompts": [],
}


def test_a_system_prompt_beside_or_above_the_messages_is_the_conversations_system_message(tmp_path: Path) -> None:
    from msgtrain.ingest.boundary import read_events
    from msgtrain.ingest.detect import detect_format

    path = _write(tmp_path / "chatbot_ui.json", CHATBOT_UI)
    (graph,) = [e.graph for e in read_events(detect_format(path), path) if hasattr(e, "graph")]
    first = next(iter(graph.nodes.values())).message
    assert first.role == "system" and first.parts[0].text == "You are a poet."
    # an ancestor's system prompt and tools reach the calls nested below it
    record = {
        "system_prompt": "You fix bugs.",
        "tools": [{"type": "function", "function": {"name": "ls", "parameters": {}}}],
    }
    record["trajectory"] = [
        {"input": [ASK], "response": _chat_completion(CALL)},
        {"input": [ASK, CALL, RESULT], "response": _chat_completion({"role": "assistant", "content": "ok"})},
    ]
    path = _write(tmp_path / "traj.json", record)
    (graph,) = [e.graph for e in read_events(detect_format(path), path) if hasattr(e, "graph")]
    first = next(iter(graph.nodes.values())).message
    assert first.role == "system" and first.parts[0].text == "You fix bugs."
    assert [t["function"]["name"] for t in graph.env.tools] == ["ls"]


# Shape of a chat UI's recursive export (LibreChat's "export as JSON, recursive": messages nesting their replies
# under ``children``; here with role / content keys): a regenerated reply is a sibling of the first one.
NESTED_TREE = {
    "conversationId": "x1",
    "title": "Rain",
    "messages": [
        {
            "messageId": "m1",
            "role": "user",
            "content": "A haiku on rain?",
            "children": [
                {"messageId": "m2", "role": "assistant", "content": "Soft rain on the roof.", "children": []},
                {
                    "messageId": "m3",
                    "role": "assistant",
                    "content": "Grey clouds, silver drops.",
                    "children": [
                        {
                            "messageId": "m4",
                            "role": "user",
                            "content": "Another?",
                            "children": [{"messageId": "m5", "role": "assistant", "content": "Puddles hold sky."}],
                        }
                    ],
                },
            ],
        }
    ],
}


def test_nested_children_are_a_tree_each_branch_a_sample(tmp_path: Path) -> None:
    from msgtrain.ingest.boundary import read_events
    from msgtrain.ingest.detect import detect_format

    path = _write(tmp_path / "librechat.json", NESTED_TREE)
    (graph,) = [e.graph for e in read_events(detect_format(path), path) if hasattr(e, "graph")]
    assert len(graph.nodes) == 5 and len(graph.leaves()) == 2
    trained, _, lost, rejects = _books(path)
    assert (trained, lost, rejects) == (3, 0, [])  # both siblings and the reply on the longer branch


# Shape of an agent-memory export that rebuilds its system message after each memory edit and keeps every version
# in the history (letta-ai/letta agent files, .af: messages with role system / user / assistant in order).
MEMORY_AGENT = {
    "name": "companion",
    "messages": [
        {"role": "system", "content": "Persona. Memory: (empty)"},
        {"role": "user", "content": "I am Ada."},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "system", "content": "Persona. Memory: the user is Ada."},
        {"role": "user", "content": "Who am I?"},
        {"role": "assistant", "content": "You are Ada."},
    ],
}


def test_each_reply_sees_only_the_latest_system_message_before_it(tmp_path: Path) -> None:
    from msgtrain.ingest.boundary import read_events
    from msgtrain.ingest.detect import detect_format

    path = _write(tmp_path / "agent.json", MEMORY_AGENT)
    (graph,) = [e.graph for e in read_events(detect_format(path), path) if hasattr(e, "graph")]
    replies = [n for n in graph.nodes.values() if n.origin.value == "sampled"]
    contexts = [[m.message.role for m in graph.path(n.id)] for n in replies]
    assert contexts == [["system", "user", "assistant"], ["system", "user", "assistant", "user", "assistant"]]
    second = graph.path(replies[1].id)[0].message
    assert second.parts[0].text == "Persona. Memory: the user is Ada."  # never both system blocks in one context
    assert "latest system message" in graph.metadata["system_messages"]
    trained, drops, lost, rejects = _books(path)
    assert drops == {}
    assert (trained, lost, rejects) == (2, 0, [])


def pasted_books(path: Path, tmp_path: Path) -> tuple[int, dict[str, int], int]:
    """(trained, drops, lost) of converting ``path`` with the mapping ``msgtrain formats --explain`` prints for it,
    pasted as is into a mapping file."""
    from dataclasses import replace

    from msgtrain.ingest.structure.mapping import mapping_text
    from msgtrain.tools.explain_cmd import explain_file

    text = explain_file(path).mapping_yaml
    assert text, f"--explain printed no mapping for {path.name}"
    map_file = tmp_path / f"{path.stem}.map.yaml"
    map_file.write_text(text, encoding="utf-8")
    _, stats, _ = convert_file(path, replace(SETTINGS, mapping=mapping_text(map_file)))
    return stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost


@pytest.mark.parametrize(
    ("name", "record"),
    [("trajectory", TRAJECTORY), ("chatbot_ui", CHATBOT_UI), ("tree", NESTED_TREE), ("roleplay", ROLE_PLAY)],
)
def test_the_mapping_explain_prints_converts_the_same_turns_when_pasted(
    name: str, record: dict[str, Any], tmp_path: Path
) -> None:
    path = _write(tmp_path / f"{name}.json", record)
    trained, drops, lost, _ = _books(path)
    assert trained > 0
    assert pasted_books(path, tmp_path) == (trained, drops, lost)


def test_a_mapping_reads_items_of_nested_lists_and_calls_in_them(tmp_path: Path) -> None:
    from dataclasses import replace

    from msgtrain.ingest.structure.mapping import mapping_text

    record = {
        "system_prompt": "You fix bugs.",
        "transitions": [
            {"actions": [{"context": [ASK], "completion": _chat_completion(CALL)}]},
            {"actions": [{"context": [ASK, CALL, RESULT], "completion": "Fixed."}]},
        ],
    }
    path = _write(tmp_path / "rollout.json", record)
    mapping = {
        "formatting": "prompt_completion",
        "columns": {
            "prompt": "transitions[].actions[].context",
            "completion": "transitions[].actions[].completion",
            "system": "system_prompt",
        },
    }
    map_file = _write(tmp_path / "map.json", mapping)
    _, stats, rejects = convert_file(path, replace(SETTINGS, mapping=mapping_text(map_file)))
    assert (stats.turns_trained, stats.turns_lost, rejects) == (2, 0, [])
    # a path into a field that is no list is named, not skipped
    mapping["columns"] = {"prompt": "system_prompt[].context", "completion": "system_prompt[].completion"}
    _, stats, rejects = convert_file(path, replace(SETTINGS, mapping=mapping_text(_write(map_file, mapping))))
    assert stats.turns_trained == 0 and json.loads(rejects[0])["reason"] == "mapping_mismatch"


def test_a_gemini_response_beside_its_contents_is_a_call_at_any_depth(tmp_path: Path) -> None:
    # Shape of google-genai calls logged per step: the request's contents and the GenerateContentResponse
    def call(contents: list[dict[str, Any]], text: str) -> dict[str, Any]:
        candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}
        return {"input": contents, "response": {"candidates": [candidate], "usageMetadata": {"promptTokenCount": 9}}}

    ask = {"role": "user", "parts": [{"text": "A haiku?"}]}
    first = {"role": "model", "parts": [{"text": "Soft rain."}]}
    more = {"role": "user", "parts": [{"text": "Another."}]}
    record = {"steps": [call([ask], "Soft rain."), call([ask, first, more], "Grey sky.")]}
    trained, drops, lost, rejects = _books(_write(tmp_path / "gemini_steps.json", record))
    assert (trained, drops, lost, rejects) == (2, {}, 0, [])


def test_a_conversation_readers_record_is_cut_at_its_bad_message_not_rejected(tmp_path: Path) -> None:
    # ShareGPT (the sharegpt reader): an agent-named reply is an assistant turn (the role table every reader shares);
    # a tag no table knows cuts the record there
    record = {
        "conversations": [
            {"from": "human", "value": "hi"},
            {"from": "agent", "value": "hello"},
            {"from": "narrator", "value": "(the lights dim)"},
            {"from": "human", "value": "bye"},
            {"from": "gpt", "value": "ciao"},
        ]
    }
    trained, drops, lost, rejects = _books(_write(tmp_path / "sharegpt.json", [record]))
    assert (trained, drops, lost) == (1, {"context_unknown": 1}, 0)
    assert [r["reason"] for r in rejects] == ["unknown_role"] and "trained up to it" in rejects[0]["message"]


def test_a_call_log_of_one_call_per_line_is_joined_where_each_call_resends_the_last(tmp_path: Path) -> None:
    # Shape of AutoGen 0.4's LLMCallEvent lines (autogen_core.logging: {"type": "LLMCall", "messages", "response",
    # "prompt_tokens", "completion_tokens", "agent_id"}): the second call re-sends the first one's history
    def line(messages: list[dict[str, Any]], text: str) -> str:
        reply = _chat_completion({"role": "assistant", "content": text})
        return json.dumps({"type": "LLMCall", "messages": messages, "response": reply, "agent_id": "planner"})

    system, rome = {"role": "system", "content": "You plan trips."}, {"role": "user", "content": "Rome?"}
    first = {"role": "assistant", "content": "Colosseum."}
    lines = [
        line([system, rome], "Colosseum."),
        line([system, rome, first, {"role": "user", "content": "Dinner?"}], "Trastevere."),
        line([system, {"role": "user", "content": "Paris?"}], "Louvre."),  # another conversation
    ]
    path = tmp_path / "llm_calls.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    trained, drops, lost, rejects = _books(path)
    assert (trained, drops, lost, rejects) == (3, {}, 0, [])  # the re-sent reply is the first call's, not a copy
    from msgtrain.ingest.boundary import read_events
    from msgtrain.ingest.detect import detect_format

    graphs = [e for e in read_events(detect_format(path), path) if hasattr(e, "graph")]
    assert sorted((e.records, len(e.graph.nodes)) for e in graphs) == [(1, 3), (2, 5)]
