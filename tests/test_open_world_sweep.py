"""Shapes met on real logs of projects no other test reads, each hand-written here in the real file's shape (no
third-party data): the books against a count made by hand, and the context each trained reply sits after.

Provenance of the shapes:
- Google ADK session dump (``Session.model_dump()``: ``events`` of ``{author, content: {role, parts}}`` beside
  ``event_logs`` of ``{model_request: {contents, config: {system_instruction, tools}}, model_response}``):
  google/adk-python ``tests/integration/fixture/context_update_test/successful_test.session.json`` and
  ``tests/integration/fixture/flow_complex_spark/sample.session.json`` @ 7c670f638bc17374ceb08740bdd057e55c9c2e12.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.detect import detect_format
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.run.parts import LinearizeSettings, convert_file

SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)


def _write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def _graphs(path: Path) -> tuple[list[MessageGraph], list[ReadReject]]:
    events = list(read_events(detect_format(path), path))
    return [e.graph for e in events if isinstance(e, ReadGraph)], [e for e in events if isinstance(e, ReadReject)]


def _sampled(graphs: list[MessageGraph]) -> list[tuple[list[tuple[str, str]], str, tuple[Any, ...]]]:
    """(context as (role, text) pairs, reply text or call names, tools) of every sampled reply."""
    out = []
    for graph in graphs:
        for node in graph.nodes.values():
            if node.origin is not Origin.SAMPLED:
                continue
            path = graph.path(node.id)[:-1]
            reply = node.message
            text = reply.text or ",".join(c.option_name for c in getattr(reply, "calls", ()) or ())
            out.append(([(n.message.role, n.message.text) for n in path], text, graph.envs[node.env_id].tools))
    return sorted(out, key=lambda s: len(s[0]))


# -------------------------------------------------------------------------------------------------- Google ADK

_ADK_SYSTEM = "You are an agent. Your name is root_agent.\nCall tools"
_ADK_TOOLS = [
    {
        "function_declarations": [
            {
                "name": "set_light",
                "description": "Switch a light.",
                "parameters": {"type": "OBJECT", "properties": {"on": {"type": "BOOLEAN"}}},
            }
        ]
    }
]


def _content(role: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "parts": list(parts)}


def _adk_session(event_logs: bool = True) -> dict[str, Any]:
    """A one-agent ADK session: hi / hello, then a request that the model answers with a call, its result, a
    reply. Each model call logged in ``event_logs`` with the request it was sent."""
    hi = _content("user", {"text": "hi"})
    hello = _content("model", {"text": "Hello! How can I help?"})
    ask = _content("user", {"text": "Turn the light on."})
    call = _content("model", {"function_call": {"name": "set_light", "args": {"on": True}}})
    result = _content("user", {"function_response": {"name": "set_light", "response": {"ok": True}}})
    done = _content("model", {"text": "The light is on."})
    events = [
        {"invocation_id": "i1", "author": "user", "content": hi, "id": "e1", "timestamp": 1.0},
        {"invocation_id": "i1", "author": "root_agent", "content": hello, "id": "e2", "timestamp": 2.0},
        {"invocation_id": "i2", "author": "user", "content": ask, "id": "e3", "timestamp": 3.0},
        {"invocation_id": "i2", "author": "root_agent", "content": call, "id": "e4", "timestamp": 4.0},
        {"invocation_id": "i2", "author": "root_agent", "content": result, "id": "e5", "timestamp": 5.0},
        {"invocation_id": "i2", "author": "root_agent", "content": done, "id": "e6", "timestamp": 6.0},
    ]
    config = {"system_instruction": _ADK_SYSTEM, "tools": _ADK_TOOLS}
    calls = [([hi], hello), ([hi, hello, ask], call), ([hi, hello, ask, call, result], done)]
    logs = [
        {
            "invocation_id": "i",
            "event_id": f"c{n}",
            "model_request": {"model": "gemini-1.5-flash", "contents": contents, "config": config},
            "model_response": {"candidates": [{"content": reply, "finish_reason": "STOP"}], "model_version": "g"},
        }
        for n, (contents, reply) in enumerate(calls)
    ]
    session = {"id": "s1", "context": {}, "events": events, "past_events": [], "pending_events": {}}
    return session | ({"event_logs": logs} if event_logs else {})


def test_adk_session_trains_each_model_call_after_the_request_it_sent(tmp_path: Path) -> None:
    """The calls (``event_logs``) are read, each reply after its own request's contents, with the request's
    system instruction and tools; the transcript beside them (``events``) is their copy, not trained again. Before:
    the transcript's Content objects under ``content`` were unreadable parts, and the calls' requests and
    responses were read as separate conversations (replies with no context at all)."""
    path = _write(tmp_path / "session.json", _adk_session())
    graphs, rejects = _graphs(path)
    assert not rejects
    sampled = _sampled(graphs)
    assert [s[1] for s in sampled] == ["Hello! How can I help?", "set_light", "The light is on."]
    for context, _, tools in sampled:
        assert context[0] == ("system", _ADK_SYSTEM)
        assert [t["function"]["name"] for t in tools] == ["set_light"]
    assert [r for r, _ in sampled[2][0]] == ["system", "user", "assistant", "user", "assistant", "tool"]
    _, stats, _ = convert_file(path, SETTINGS)
    assert (stats.turns_found, stats.turns_trained, stats.turns_lost) == (3, 3, 0)


def test_adk_events_alone_are_a_transcript_of_wrapped_messages(tmp_path: Path) -> None:
    """Without the calls, the events are the conversation: each event's ``content`` is its message (role from
    the Content, the author the speaker), the model's replies sampled after the events before them."""
    path = _write(tmp_path / "session.json", _adk_session(event_logs=False))
    graphs, rejects = _graphs(path)
    assert not rejects
    sampled = _sampled(graphs)
    assert [s[1] for s in sampled] == ["Hello! How can I help?", "set_light", "The light is on."]
    assert [r for r, _ in sampled[2][0]] == ["user", "assistant", "user", "assistant", "tool"]


def test_adk_session_of_several_agents_is_refused_not_trained_in_one_view(tmp_path: Path) -> None:
    """Each agent of a multi-agent session saw the others' replies rewritten ("For context: ..."): one view of
    all of them would be a context no call had."""
    session = _adk_session(event_logs=False)
    session["events"][5]["author"] = "summary_agent"
    path = _write(tmp_path / "session.json", session)
    graphs, rejects = _graphs(path)
    assert not graphs and [r.error.code for r in rejects] == ["ambiguous_structure"]
    assert "summary_agent" in rejects[0].error.message


def test_a_transcript_holding_a_reply_no_call_holds_is_not_dropped_as_a_copy(tmp_path: Path) -> None:
    session = _adk_session()
    session["event_logs"].pop()  # the last reply is in the transcript only
    path = _write(tmp_path / "session.json", session)
    graphs, rejects = _graphs(path)
    assert not graphs and [r.error.code for r in rejects] == ["ambiguous_structure"]


# ------------------------------------------------------------------------------------------------- Claude.ai export


# The shape of Claude.ai's data export (``conversations.json``: a list of conversations, each ``chat_messages`` of
# ``{uuid, text, content: [blocks], sender: "human" | "assistant", attachments, files}``), as importers read it
# (e.g. Polylogue's tests, ``sample_claude_file``); written here by hand.
def _claude_export() -> list[dict[str, Any]]:
    def msg(n: int, sender: str, text: str) -> dict[str, Any]:
        block = {"type": "text", "text": text, "start_timestamp": None, "stop_timestamp": None, "citations": []}
        return {"uuid": f"m{n}", "text": text, "content": [block], "sender": sender, "attachments": [], "files": []}

    messages = [msg(1, "human", "Review this?"), msg(2, "assistant", "Paste it."), msg(3, "human", "def f(): pass")]
    return [{"uuid": "c1", "name": "Review", "chat_messages": [*messages, msg(4, "assistant", "It does nothing.")]}]


def test_claude_export_sender_is_the_role(tmp_path: Path) -> None:
    """``sender`` names the side (``human`` / ``assistant``) where no role key or role flag does. Before: no reader
    recognised the export."""
    path = _write(tmp_path / "conversations.json", _claude_export())
    graphs, rejects = _graphs(path)
    assert not rejects
    sampled = _sampled(graphs)
    assert [s[1] for s in sampled] == ["Paste it.", "It does nothing."]
    assert sampled[1][0] == [("user", "Review this?"), ("assistant", "Paste it."), ("user", "def f(): pass")]


def test_a_claude_export_is_flagged_for_the_system_prompt_it_never_held(tmp_path: Path) -> None:
    """Claude.ai sent its product system prompt with every message; the export keeps the conversation shown, not
    that prompt: each sample is flagged ``context_incomplete`` (``system_prompt``), as a ChatGPT export's are. A
    LibreChat conversation that keeps its system prompt (``promptPrefix``) is not. Before: no flag."""
    path = _write(tmp_path / "conversations.json", _claude_export())
    graphs, _ = _graphs(path)
    assert [g.metadata["context_incomplete"]["missing"] for g in graphs] == [["system_prompt"]]
    _, stats, _ = convert_file(path, SETTINGS)
    assert stats.turns_trained == 2 and stats.flags["context_incomplete"] == 1  # one sample holds both
    messages = [
        {"messageId": "a", "parentMessageId": None, "isCreatedByUser": True, "text": "Hi"},
        {"messageId": "b", "parentMessageId": "a", "isCreatedByUser": False, "text": "Hello."},
    ]
    kept = {"conversationId": "c", "promptPrefix": "Be brief.", "messages": messages}
    (graph,), _ = _graphs(_write(tmp_path / "librechat.json", kept))
    assert "context_incomplete" not in graph.metadata


def test_a_sender_that_is_a_display_name_is_no_role(tmp_path: Path) -> None:
    """LibreChat's ``sender`` is the model's display name; its ``isCreatedByUser`` says the side and wins."""
    messages = [
        {"messageId": "a", "parentMessageId": None, "sender": "User", "isCreatedByUser": True, "text": "Hi"},
        {"messageId": "b", "parentMessageId": "a", "sender": "GPT-4", "isCreatedByUser": False, "text": "Hello."},
    ]
    path = _write(tmp_path / "export.json", {"conversationId": "c", "messages": messages})
    graphs, rejects = _graphs(path)
    assert not rejects and [s[1] for s in _sampled(graphs)] == ["Hello."]


# ------------------------------------------------------------------------------------ AgentGym / AgentTuning loss


# AgentGym's trajectories (``{"conversations": [{"from", "loss", "value"}]}``, as its ``ConversationMessage`` and
# ``conversation_start`` write them: WooooDyy/AgentGym ``agentenv/agentenv/envs/*.py``; AgentTuning's AgentInstruct
# the same): ``loss: false`` on the scripted turns the task opens with (an "Ok." after the instructions, few-shot
# replies), ``true`` on the replies the agent generated. Written here by hand.
def _agentgym_record(task: str, replies: list[str]) -> dict[str, Any]:
    conversation = [
        {"from": "human", "loss": None, "value": "Act like a person at a Linux shell. Reply with Act: bash or answer."},
        {"from": "gpt", "loss": False, "value": "Ok."},
        {"from": "human", "loss": None, "value": "How many files are in /etc?"},
        {"from": "gpt", "loss": False, "value": "Act: answer(220)"},
        {"from": "human", "loss": None, "value": f"Now, my problem is: {task}"},
    ]
    for n, reply in enumerate(replies):
        if n:
            conversation.append({"from": "human", "loss": None, "value": f"The output of the OS: {n}"})
        conversation.append({"from": "gpt", "loss": True, "value": reply})
    return {"item_id": task, "conversations": conversation}


def test_agentgym_scripted_turns_are_context_not_samples(tmp_path: Path) -> None:
    """``loss: false`` marks a turn the environment scripted: context (carried), never trained. Before: the "Ok."
    and the few-shot reply were trained as sampled turns of every record."""
    rows = [_agentgym_record("count .log files", ["Act: bash ls", "Act: answer(3)"]), _agentgym_record("who", ["Hi"])]
    path = tmp_path / "traj.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    graphs, rejects = _graphs(path)
    assert not rejects
    assert sorted(s[1] for s in _sampled(graphs)) == ["Act: answer(3)", "Act: bash ls", "Hi"]
    _, stats, _ = convert_file(path, SETTINGS)
    assert stats.turns_trained == 3


def test_a_message_sent_with_files_the_log_does_not_hold_is_a_gap(tmp_path: Path) -> None:
    """A Claude.ai message whose attachment's extracted text (or an uploaded file) was sent beside it: the reply
    after it saw the file, which the message does not hold. Replies before it are trained, the ones after it kept
    as context. Before: the reply was trained after the message without the file."""
    export = _claude_export()
    export[0]["chat_messages"][2]["attachments"] = [
        {"file_name": "f.py", "file_size": 14, "file_type": "text/x-python", "extracted_content": "def f(): pass\n"}
    ]
    path = _write(tmp_path / "conversations.json", export)
    graphs, rejects = _graphs(path)
    assert [s[1] for s in _sampled(graphs)] == ["Paste it."]
    assert [r.error.code for r in rejects] == ["unsupported_content"]
    _, stats, _ = convert_file(path, SETTINGS)
    assert (stats.turns_found, stats.turns_trained) == (2, 1)


# ------------------------------------------------------------------------------------------ LlamaIndex chat store


def test_a_chat_store_saved_as_a_json_string_is_read_as_the_json_it_holds(tmp_path: Path) -> None:
    """LlamaIndex's ``SimpleChatStore.persist`` writes ``json.dump`` of the store's JSON text: the file is one string
    literal holding ``{"store": {key: [messages]}, "class_name": "SimpleChatStore"}`` (kdandy1/Cocai
    ``chat_store.json`` @ 4073084dca2e0c9b8308e74c33cdf21bcaa5b971, a game master's chat: two replies, counted by
    hand; written here in its shape). Before: ``unknown_format``, its 2 replies counted as lost, none trained."""
    messages = [
        {"role": "user", "content": "I am in a dark cave. Which skills can I roll?", "additional_kwargs": {}},
        {"role": "assistant", "content": "1. **Spot Hidden** ...", "additional_kwargs": {}},
        {"role": "user", "content": "I pick the second.", "additional_kwargs": {}},
        {"role": "assistant", "content": "Archaeology it is ...", "additional_kwargs": {}},
    ]
    store = json.dumps({"store": {"user1": messages}, "class_name": "SimpleChatStore"})
    path = tmp_path / "chat_store.json"
    path.write_text(json.dumps(store), encoding="utf-8")
    graphs, rejects = _graphs(path)
    assert not rejects
    assert [s[1] for s in _sampled(graphs)] == ["1. **Spot Hidden** ...", "Archaeology it is ..."]
    _, stats, _ = convert_file(path, SETTINGS)
    assert (stats.turns_found, stats.turns_trained) == (2, 2)
