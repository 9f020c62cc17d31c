"""Cohere chat calls (API v1 and v2) in VCR cassettes.

The cassettes are built here in exactly the shape langchain-ai/langchain-cohere records them
(``libs/cohere/tests/integration_tests/cassettes/test_langgraph_react_agent.yaml`` for v2 tool calls with
``tool_plan`` and ``document`` results, ``test_streaming_tool_call.yaml`` for the v2 SSE stream,
``react_multi_hop/cassettes/test_invoke_multihop_agent.yaml`` for v1 ``raw_prompting`` and its JSON-lines stream,
at commit 6833d1746886f3cb0fdbc4c1b4a18095264c512a); the v1 ``chat_history`` / ``tool_results`` fields follow
cohere-ai/cohere-python's v1 ``chat`` signature.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject, ReadSkip
from msgtrain.ingest.detect import detect_format
from msgtrain.model.message import OptionCallMessage, OptionResultMessage

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "web_search",
            "description": "Search the web.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
]
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "How old is the tallest tree?"}
CALL = {
    "id": "web_search_1",
    "type": "function",
    "function": {"name": "web_search", "arguments": '{"query":"tallest tree age"}'},
}
PLAN = "I will search for the tallest tree's age."


def _interaction(uri: str, request: dict[str, Any], body: str, content_type: str) -> dict[str, Any]:
    return {
        "request": {"method": "POST", "uri": uri, "headers": {}, "body": json.dumps(request)},
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"content-type": [content_type]},
            "body": {"string": body},
        },
    }


def _cassette(path: Path, interactions: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"interactions": interactions, "version": 1}), encoding="utf-8")
    return path


def _read(path: Path) -> tuple[list[ReadGraph], list[ReadReject], list[ReadSkip]]:
    events = list(read_events(detect_format(path), path))
    return (
        [e for e in events if isinstance(e, ReadGraph)],
        [e for e in events if isinstance(e, ReadReject)],
        [e for e in events if isinstance(e, ReadSkip)],
    )


def _v2_agent(tmp_path: Path) -> Path:
    first = {"model": "command-a-03-2025", "messages": [SYSTEM, USER], "tools": TOOLS, "stream": False}
    reply1 = {
        "id": "r1",
        "message": {"role": "assistant", "tool_plan": PLAN, "tool_calls": [CALL]},
        "finish_reason": "TOOL_CALL",
        "usage": {"tokens": {"input_tokens": 900, "output_tokens": 40}},
    }
    result = {
        "role": "tool",
        "tool_call_id": "web_search_1",
        "content": [{"type": "document", "document": {"data": {"output": "4,800 years"}}}],
    }
    second = {
        **first,
        "messages": [SYSTEM, USER, {"role": "assistant", "tool_plan": PLAN, "tool_calls": [CALL]}, result],
    }
    reply2 = {
        "id": "r2",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "About 4,800 years."}]},
        "finish_reason": "COMPLETE",
    }
    uri = "https://api.cohere.com/v2/chat"
    return _cassette(
        tmp_path / "v2.yaml",
        [
            _interaction(uri, first, json.dumps(reply1), "application/json"),
            _interaction(uri, second, json.dumps(reply2), "application/json"),
        ],
    )


def test_cohere_v2_tool_calling_agent_trains_both_replies_in_their_exact_contexts(tmp_path: Path) -> None:
    (graph,), rejects, _ = _read(_v2_agent(tmp_path))
    assert not rejects
    (branch,) = graph.graph.branches()
    roles = [(n.message.role, n.origin.value) for n in branch.nodes]
    assert roles == [
        ("system", "context"),
        ("user", "context"),
        ("assistant", "sampled"),
        ("tool", "context"),
        ("assistant", "sampled"),
    ]
    call, result = branch.nodes[2].message, branch.nodes[3].message
    assert isinstance(call, OptionCallMessage) and call.text == PLAN  # tool_plan is the text before the calls
    assert isinstance(result, OptionResultMessage) and result.result.result == '{"output": "4,800 years"}'
    assert call.metadata["usage"] == {"input_tokens": 900, "output_tokens": 40}
    assert [t["function"]["name"] for t in graph.graph.env.tools] == ["web_search"]


def test_cohere_v2_streamed_reply_is_reassembled_from_its_sse_events(tmp_path: Path) -> None:
    events = [
        (
            "message-start",
            {
                "id": "s1",
                "type": "message-start",
                "delta": {"message": {"role": "assistant", "content": [], "tool_plan": "", "tool_calls": []}},
            },
        ),
        ("tool-plan-delta", {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": "I will "}}}),
        ("tool-plan-delta", {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": "search."}}}),
        (
            "tool-call-start",
            {
                "type": "tool-call-start",
                "index": 0,
                "delta": {
                    "message": {
                        "tool_calls": {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "web_search", "arguments": ""},
                        }
                    }
                },
            },
        ),
        (
            "tool-call-delta",
            {
                "type": "tool-call-delta",
                "index": 0,
                "delta": {"message": {"tool_calls": {"function": {"arguments": '{"query":'}}}},
            },
        ),
        (
            "tool-call-delta",
            {
                "type": "tool-call-delta",
                "index": 0,
                "delta": {"message": {"tool_calls": {"function": {"arguments": ' "trees"}'}}}},
            },
        ),
        ("tool-call-end", {"type": "tool-call-end", "index": 0}),
        (
            "message-end",
            {
                "type": "message-end",
                "delta": {"finish_reason": "TOOL_CALL", "usage": {"tokens": {"input_tokens": 10, "output_tokens": 5}}},
            },
        ),
    ]
    body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
    request = {"model": "command-r", "messages": [USER], "tools": TOOLS, "stream": True}
    path = _cassette(
        tmp_path / "s.yaml", [_interaction("https://api.cohere.com/v2/chat", request, body, "text/event-stream")]
    )
    (graph,), rejects, _ = _read(path)
    reply = graph.graph.nodes[graph.graph.head[-1]].message
    assert not rejects and isinstance(reply, OptionCallMessage)
    assert reply.text == "I will search." and reply.calls[0].raw_arguments == '{"query": "trees"}'


def test_cohere_v1_history_tool_results_and_streamed_reply_are_one_conversation(tmp_path: Path) -> None:
    v1_tools = [
        {
            "name": "web_search",
            "description": "Search.",
            "parameter_definitions": {"query": {"type": "str", "description": "q", "required": True}},
        }
    ]
    first = {
        "message": "How old is the tallest tree?",
        "preamble": "Be brief.",
        "tools": v1_tools,
        "model": "command-r",
    }
    reply1 = {
        "response_id": "a",
        "text": "",
        "generation_id": "g1",
        "tool_calls": [{"name": "web_search", "parameters": {"query": "tallest tree"}}],
        "finish_reason": "COMPLETE",
    }
    history = [
        {"role": "USER", "message": "How old is the tallest tree?"},
        {
            "role": "CHATBOT",
            "message": "",
            "tool_calls": [{"name": "web_search", "parameters": {"query": "tallest tree"}}],
        },
    ]
    results = [
        {"call": {"name": "web_search", "parameters": {"query": "tallest tree"}}, "outputs": [{"age": "4,800 years"}]}
    ]
    second = {
        "message": "",
        "preamble": "Be brief.",
        "tools": v1_tools,
        "chat_history": history,
        "tool_results": results,
        "stream": True,
    }
    stream = [
        {"is_finished": False, "event_type": "stream-start", "generation_id": "g2"},
        {"is_finished": False, "event_type": "text-generation", "text": "About "},
        {"is_finished": False, "event_type": "text-generation", "text": "4,800 years."},
        {
            "is_finished": True,
            "event_type": "stream-end",
            "finish_reason": "COMPLETE",
            "response": {"text": "About 4,800 years.", "generation_id": "g2"},
        },
    ]
    uri = "https://api.cohere.com/v1/chat"
    path = _cassette(
        tmp_path / "v1.yaml",
        [
            _interaction(uri, first, json.dumps(reply1), "application/json"),
            _interaction(uri, second, "\n".join(json.dumps(e) for e in stream), "application/stream+json"),
        ],
    )
    (graph,), rejects, _ = _read(path)
    assert not rejects
    (branch,) = graph.graph.branches()
    assert [(n.message.role, n.origin.value) for n in branch.nodes] == [
        ("system", "context"),
        ("user", "context"),
        ("assistant", "sampled"),
        ("tool", "context"),
        ("assistant", "sampled"),
    ]
    assert branch.nodes[-1].message.text == "About 4,800 years."
    assert graph.graph.env.tools[0]["function"]["parameters"]["required"] == ["query"]


def test_cohere_v1_raw_prompting_call_is_rejected_as_not_a_chat(tmp_path: Path) -> None:
    request = {
        "message": "<BOS_TOKEN><|START_OF_TURN_TOKEN|><|USER_TOKEN|>hi",
        "raw_prompting": True,
        "chat_history": [],
    }
    reply = {"text": "hello", "generation_id": "g"}
    path = _cassette(
        tmp_path / "raw.yaml",
        [_interaction("https://api.cohere.com/v1/chat", request, json.dumps(reply), "application/json")],
    )
    graphs, rejects, skips = _read(path)
    assert not graphs and not skips and [r.error.code for r in rejects] == ["not_a_chat"]


def test_cohere_v1_roles_are_read_whatever_their_case(tmp_path: Path) -> None:
    # Cohere's SDK sends any case (chat_history roles written "System" / "User" / "Chatbot" by many callers)
    history = [
        {"role": "System", "message": "Be brief."},
        {"role": "User", "message": "Hi"},
        {"role": "Chatbot", "message": "Hello."},
    ]
    request = {"message": "Bye", "chat_history": history, "model": "command-r"}
    reply = {"response_id": "r", "text": "Bye!", "generation_id": "g", "finish_reason": "COMPLETE"}
    path = _cassette(
        tmp_path / "v1.yaml",
        [_interaction("https://api.cohere.com/v1/chat", request, json.dumps(reply), "application/json")],
    )
    (graph,), rejects, _ = _read(path)
    assert not rejects
    (branch,) = graph.graph.branches()
    assert [n.message.role for n in branch.nodes] == ["system", "user", "assistant", "user", "assistant"]
