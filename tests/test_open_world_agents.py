"""The open world, agent side: what agent frameworks, their tracers and coding agents save, with no reader of its own.

Each fixture is written here in the shape of a real third-party file (the data itself is not copied); its comment
says which repository, path and commit (or which published format) the shape follows. Each test failed before the
fix it comes with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.detect import detect_format
from msgtrain.model.message import OptionResultMessage


def _write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _read(path: Path) -> tuple[str, list[ReadGraph], list[ReadReject]]:
    reader = detect_format(path)
    events = list(read_events(reader, path))
    graphs = [e for e in events if isinstance(e, ReadGraph)]
    return reader.name, graphs, [e for e in events if isinstance(e, ReadReject)]


# A tool-calling turn: the user, the reply that calls, the result, the reply after it.
TOOL_TURN = [("user", "context"), ("assistant", "sampled"), ("tool", "context"), ("assistant", "sampled")]


def _said(graph: ReadGraph) -> list[tuple[str, str, str]]:
    """(role, text, origin) along the graph's one branch."""
    (branch,) = graph.graph.branches()
    return [(n.message.role, n.message.text, n.origin.value) for n in branch.nodes]


# ------------------------------------------------------------------------------------------------ DSPy
def test_dspy_lm_history_trains_the_response_in_the_messages_it_was_sent(tmp_path: Path) -> None:
    # stanfordnlp/dspy dspy/clients/base_lm.py (BaseLM.update_history): each entry of `lm.history` holds the request's
    # `messages`, the provider's whole `response` (an OpenAI chat completion) and its `outputs`, usage and model.
    entry = {
        "prompt": None,
        "messages": [
            {"role": "system", "content": "Your input fields are:\n1. `question` (str)"},
            {"role": "user", "content": "[[ ## question ## ]]\nWhat is 2+2?"},
        ],
        "kwargs": {"temperature": 0.0},
        "response": {
            "object": "chat.completion",
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "4"}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 1},
        },
        "outputs": ["4"],
        "usage": {"prompt_tokens": 50, "completion_tokens": 1},
        "cost": 0.0,
        "model": "openai/gpt-4o-mini",
        "model_type": "chat",
    }
    _name, (graph,), rejects = _read(_write(tmp_path / "history.json", [entry]))
    assert not rejects
    said = _said(graph)
    assert [(role, origin) for role, _, origin in said] == [
        ("system", "context"),
        ("user", "context"),
        ("assistant", "sampled"),
    ]
    assert said[-1][1] == "4"


# ------------------------------------------------------------------------------------------------ LangChain
def _lc(cls: str, **kwargs: Any) -> dict[str, Any]:
    """A message as LangChain's ``dumpd`` serialises it (vercel/ai packages/langchain/src/__fixtures__/langgraph.ts
    @ 65e67297: LangGraph stream values hold ``{"lc": 1, "type": "constructor", "id": [..., "HumanMessage"],
    "kwargs": {...}}``)."""
    return {"lc": 1, "type": "constructor", "id": ["langchain_core", "messages", cls], "kwargs": kwargs}


def test_a_langgraph_checkpoint_of_serialised_messages_is_a_transcript(tmp_path: Path) -> None:
    call = {"name": "add", "args": {"a": 2, "b": 2}, "id": "call_1", "type": "tool_call"}
    checkpoint = {
        "v": 1,
        "id": "1ef4f797-8335-6428-8001-8a1503f9b875",
        "channel_values": {
            "messages": [
                _lc("HumanMessage", content="What's 2+2?", additional_kwargs={}, id="m1"),
                _lc("AIMessageChunk", content=[], tool_calls=[call], response_metadata={"model_name": "gpt-5"}),
                _lc("ToolMessage", content="4", tool_call_id="call_1", name="add", id="m3"),
                _lc("AIMessage", content="It is 4.", id="m4"),
            ]
        },
    }
    name, (graph,), rejects = _read(_write(tmp_path / "checkpoint.json", checkpoint))
    assert (name, rejects) == ("structural", [])
    assert [(r, o) for r, _, o in _said(graph)] == TOOL_TURN


def test_a_langsmith_llm_run_trains_its_generation_in_the_messages_of_its_inputs(tmp_path: Path) -> None:
    # A run as langchain-ai/langsmith-sdk's Client.list_runs returns it (python/langsmith/schemas.py Run): the chat
    # model's `inputs.messages` (a batch of one prompt) and `outputs.generations` (ChatGeneration records).
    reply = _lc(
        "AIMessage",
        content="Hello!",
        type="ai",
        response_metadata={"finish_reason": "stop", "model_name": "gpt-4o-mini"},
        usage_metadata={"input_tokens": 12, "output_tokens": 3, "total_tokens": 15},
    )
    run = {
        "id": "6f3b2c1e-0a4d-4e5b-9c8a-1d2e3f4a5b6c",
        "name": "ChatOpenAI",
        "run_type": "llm",
        "inputs": {"messages": [[_lc("SystemMessage", content="Be brief."), _lc("HumanMessage", content="Hi")]]},
        "outputs": {
            "generations": [[{"text": "Hello!", "type": "ChatGeneration", "message": reply}]],
            "llm_output": {"model_name": "gpt-4o-mini"},
        },
    }
    name, (graph,), rejects = _read(_write(tmp_path / "runs.json", [run]))
    assert (name, rejects) == ("structural", [])
    assert _said(graph) == [
        ("system", "Be brief.", "context"),
        ("user", "Hi", "context"),
        ("assistant", "Hello!", "sampled"),
    ]
    (reply_node,) = graph.graph.sampled_nodes()
    assert reply_node.message.metadata["usage"]["input_tokens"] == 12  # for the usage check


# ------------------------------------------------------------------------------------------------ Vercel AI SDK
def test_vercel_ai_sdk_model_messages_pair_tool_call_and_tool_result_parts(tmp_path: Path) -> None:
    # vercel/ai packages/provider-utils/src/types/content-part.ts @ a68a53cd: ToolCallPart {type: "tool-call",
    # toolCallId, toolName, input}, ToolResultPart {type: "tool-result", toolCallId, toolName, output: {type, value}};
    # a "tool" message may answer several calls.
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in SF and NYC?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool-call", "toolCallId": "call_1", "toolName": "weather", "input": {"city": "SF"}},
                {"type": "tool-call", "toolCallId": "call_2", "toolName": "weather", "input": {"city": "NYC"}},
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "call_2",
                    "toolName": "weather",
                    "output": {"type": "text", "value": "50F"},
                },
                {
                    "type": "tool-result",
                    "toolCallId": "call_1",
                    "toolName": "weather",
                    "output": {"type": "json", "value": {"t": 60}},
                },
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "SF 60F, NYC 50F."}]},
    ]
    _name, (graph,), rejects = _read(_write(tmp_path / "messages.json", messages))
    assert not rejects
    said = _said(graph)
    assert [r for r, _, _ in said] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    results = [n.message for n in graph.graph.branches()[0].nodes[3:5]]
    assert [(r.result.invocation_id, r.result.result) for r in results] == [("call_2", "50F"), ("call_1", '{"t": 60}')]


# ------------------------------------------------------------------------------------------------ Haystack
def test_haystack_chat_messages_with_untyped_text_and_tool_call_parts_are_read(tmp_path: Path) -> None:
    # deepset-ai/haystack haystack/dataclasses/chat_message.py @ b661efdc (ChatMessage.to_dict): content is a list
    # of {"text"} / {"tool_call": {tool_name, arguments, id}} / {"tool_call_result": {result, origin, error}}; the
    # reply's model and usage are in its meta.
    call = {"tool_name": "weather", "arguments": {"city": "SF"}, "id": "call_1"}
    messages = [
        {"role": "system", "meta": {}, "name": None, "content": [{"text": "Be brief."}]},
        {"role": "user", "meta": {}, "name": None, "content": [{"text": "Weather in SF?"}]},
        {"role": "assistant", "meta": {"model": "gpt-4o-mini"}, "name": None, "content": [{"tool_call": call}]},
        {
            "role": "tool",
            "meta": {},
            "content": [{"tool_call_result": {"result": "60F", "origin": call, "error": False}}],
        },
        {
            "role": "assistant",
            "meta": {"model": "gpt-4o-mini", "usage": {"prompt_tokens": 40, "completion_tokens": 3}},
            "name": None,
            "content": [{"text": "60F"}],
        },
    ]
    name, (graph,), rejects = _read(_write(tmp_path / "messages.json", messages))
    assert (name, rejects) == ("structural", [])
    result, reply = graph.graph.branches()[0].messages[-2:]
    assert isinstance(result, OptionResultMessage) and result.result.result == "60F"
    assert reply.text == "60F"
    last = graph.graph.sampled_nodes()[-1]
    assert last.message.metadata["usage"]["prompt_tokens"] == 40


# ------------------------------------------------------------------------------------------------ Kimi CLI
def test_kimi_cli_context_keeps_its_system_prompt_and_passes_over_its_own_marker_lines(tmp_path: Path) -> None:
    # MoonshotAI/kimi-cli src/kimi_cli/soul/context.py @ 60930c68: ~/.kimi/sessions/<id>/context.jsonl holds the
    # messages sent (kosong's Message: think / text parts, OpenAI tool_calls) and lines of the CLI's own: the system
    # prompt (`_system_prompt`), checkpoints (`_checkpoint`) and the context's token count (`_usage`).
    call = {"type": "function", "id": "tool_9", "function": {"name": "Shell", "arguments": '{"command": "ls"}'}}
    lines = [
        {"role": "_system_prompt", "content": "You are Kimi CLI."},
        {"role": "_checkpoint", "id": 0},
        {"role": "user", "content": [{"type": "text", "text": "list files"}]},
        {
            "role": "assistant",
            "content": [{"type": "think", "think": "Use ls.", "encrypted": None}],
            "tool_calls": [call],
        },
        {"role": "tool", "content": [{"type": "text", "text": "a.txt"}], "tool_call_id": "tool_9"},
        {"role": "assistant", "content": [{"type": "text", "text": "One file: a.txt"}], "tool_calls": None},
        {"role": "_usage", "token_count": 10863},
        {"role": "_checkpoint", "id": 1},
    ]
    path = tmp_path / "context.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    events = list(read_events(detect_format(path), path))
    (graph,) = [e for e in events if isinstance(e, ReadGraph)]
    assert not [e for e in events if isinstance(e, ReadReject)]
    said = _said(graph)
    assert [(r, o) for r, _, o in said] == [
        ("system", "context"),
        ("user", "context"),
        ("assistant", "sampled"),
        ("tool", "context"),
        ("assistant", "sampled"),
    ]
    assert said[0][1] == "You are Kimi CLI."
    first_reply = graph.graph.branches()[0].messages[2]
    assert [p.text for p in first_reply.parts if p.kind == "reasoning"] == ["Use ls."]


# ------------------------------------------------------------------------------------------------ Semantic Kernel
def test_semantic_kernel_chat_history_items_are_text_calls_and_results(tmp_path: Path) -> None:
    # microsoft/semantic-kernel python/semantic_kernel/contents/chat_history.py (ChatHistory.serialize): messages
    # hold `items` typed by `content_type` (text, function_call with the plugin-function name the kernel sends,
    # function_result), the reply's usage in its metadata.
    def message(role: str, *items: dict[str, Any], **more: Any) -> dict[str, Any]:
        return {"metadata": {}, "content_type": "message", "role": role, "name": None, "items": list(items), **more}

    call = {
        "content_type": "function_call",
        "id": "call_1",
        "name": "weather-get_weather",
        "arguments": '{"city": "Paris"}',
    }
    history = {
        "messages": [
            message("system", {"content_type": "text", "text": "Be brief.", "encoding": None}),
            message("user", {"content_type": "text", "text": "Weather in Paris?"}),
            message(
                "assistant", {**call, "function_name": "get_weather", "plugin_name": "weather"}, ai_model_id="gpt-4o"
            ),
            message(
                "tool",
                {"content_type": "function_result", "id": "call_1", "name": "weather-get_weather", "result": "rainy"},
            ),
            message(
                "assistant",
                {"content_type": "text", "text": "It is rainy."},
                metadata={"usage": {"prompt_tokens": 55, "completion_tokens": 4}},
            ),
        ]
    }
    name, (graph,), rejects = _read(_write(tmp_path / "chat_history.json", history))
    assert (name, rejects) == ("structural", [])
    messages = graph.graph.branches()[0].messages
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2].calls[0].option_name == "weather-get_weather"
    assert messages[2].calls[0].raw_arguments == '{"city": "Paris"}'
    assert messages[4].metadata["usage"]["prompt_tokens"] == 55


# ------------------------------------------------------------------------------------------------ gateways, tracers
_TOOL = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
_CALLED = {
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 58},
}


def test_a_gateway_request_log_trains_the_response_in_its_request_with_the_tools_it_sent(tmp_path: Path) -> None:
    # Helicone's request records (HeliconeRequest: request_body, response_body, model, prompt_tokens) and W&B
    # Weave calls (wandb/weave trace_server_interface.py CallSchema: op_name, inputs, output, summary).
    helicone = {
        "request_id": "r1",
        "request_body": {"model": "gpt-4o", "messages": [{"role": "user", "content": "Weather?"}], "tools": [_TOOL]},
        "response_body": _CALLED,
        "model": "gpt-4o",
        "prompt_tokens": 58,
    }
    weave = {
        "id": "c1",
        "op_name": "weave:///e/p/op/openai.chat.completions.create:abc",
        "inputs": {"messages": [{"role": "user", "content": "Weather?"}], "model": "gpt-4o", "tools": [_TOOL]},
        "output": _CALLED,
    }
    for doc in (helicone, weave):
        name, (graph,), rejects = _read(_write(tmp_path / "log.json", [doc]))
        assert (name, rejects) == ("structural", [])
        assert [(r, o) for r, _, o in _said(graph)] == [("user", "context"), ("assistant", "sampled")]
        assert [t["function"]["name"] for t in graph.graph.env.tools] == ["weather"]


def test_vercel_ai_sdk_ui_messages_split_into_their_steps_calls_and_results(tmp_path: Path) -> None:
    # vercel/ai packages/ai/src/ui/ui-messages.ts @ dc94af03: a useChat message's parts hold every step of the
    # assistant's turn (step-start between them), each tool part its call and, once run, its output; sources and
    # data parts are the UI's. AI SDK 4 wrote tool-invocation parts and kept the text in content too.
    v5 = [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Weather in SF?"}]},
        {
            "id": "a1",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {"type": "reasoning", "text": "Need the tool."},
                {
                    "type": "tool-weather",
                    "toolCallId": "c1",
                    "state": "output-available",
                    "input": {"city": "SF"},
                    "output": {"t": 60},
                },
                {"type": "step-start"},
                {"type": "source-url", "sourceId": "s1", "url": "https://weather.example"},
                {"type": "text", "text": "It is 60F.", "state": "done"},
            ],
        },
    ]
    v4 = [
        {
            "id": "u1",
            "role": "user",
            "content": "Weather in SF?",
            "parts": [{"type": "text", "text": "Weather in SF?"}],
        },
        {
            "id": "a1",
            "role": "assistant",
            "content": "It is 60F.",
            "parts": [
                {"type": "step-start"},
                {
                    "type": "tool-invocation",
                    "toolInvocation": {
                        "state": "result",
                        "toolCallId": "c1",
                        "toolName": "weather",
                        "args": {"city": "SF"},
                        "result": {"t": 60},
                    },
                },
                {"type": "step-start"},
                {"type": "text", "text": "It is 60F."},
            ],
        },
    ]
    for messages in (v5, v4):
        name, (graph,), rejects = _read(_write(tmp_path / "chat.json", messages))
        assert (name, rejects) == ("structural", [])
        said = _said(graph)
        assert [(r, o) for r, _, o in said] == [
            ("user", "context"),
            ("assistant", "sampled"),
            ("tool", "context"),
            ("assistant", "sampled"),
        ]
        call, result, answer = graph.graph.branches()[0].messages[1:]
        assert call.calls[0].option_name == "weather" and call.calls[0].arguments == {"city": "SF"}
        assert result.result.invocation_id == "c1" and result.result.result == '{"t": 60}'
        assert answer.text == "It is 60F."
    assert [p.kind for p in _read(_write(tmp_path / "chat.json", v5))[1][0].graph.branches()[0].messages[1].parts] == [
        "reasoning"
    ]


# ------------------------------------------------------------------------------------------------ opencode
def test_an_opencode_export_reads_each_assistant_message_as_its_steps(tmp_path: Path) -> None:
    # opencode packages/opencode/src/session/message-v2.ts (MessageV2; Kilo Code's CLI is the same code): messages
    # are {info: {role, modelID, tokens}, parts}; an assistant message holds every step of its turn (step-start ...
    # step-finish with the step's tokens), a tool part its call and its output (callID, tool, state {status, input,
    # output}). `opencode export` writes {info: <session>, messages: [...]}.
    def part(kind: str, **fields: Any) -> dict[str, Any]:
        return {"id": f"prt_{kind}", "messageID": "msg_1", "sessionID": "ses_1", "type": kind, **fields}

    tokens = {"input": 10, "output": 5, "reasoning": 0, "cache": {"read": 0, "write": 0}}
    ls = {"status": "completed", "input": {"command": "ls"}, "output": "a.txt\n", "title": "ls", "metadata": {}}
    export = {
        "info": {"id": "ses_1", "title": "files", "version": "0.15.0"},
        "messages": [
            {
                "info": {"id": "msg_0", "role": "user", "time": {"created": 1}},
                "parts": [part("text", text="What is here?")],
            },
            {
                "info": {"id": "msg_1", "role": "assistant", "modelID": "claude-sonnet-4", "tokens": tokens},
                "parts": [
                    part("step-start", snapshot="abc"),
                    part("reasoning", text="List it."),
                    part("tool", callID="toolu_1", tool="bash", state=ls),
                    part("step-finish", reason="tool-calls", tokens=tokens, cost=0),
                    part("step-start", snapshot="abc"),
                    part("text", text="One file: a.txt"),
                    part("step-finish", reason="stop", tokens=tokens, cost=0),
                ],
            },
        ],
    }
    name, (graph,), rejects = _read(_write(tmp_path / "session.json", export))
    assert (name, rejects) == ("structural", [])
    assert [(r, o) for r, _, o in _said(graph)] == TOOL_TURN
    call, result = graph.graph.branches()[0].messages[1:3]
    assert call.calls[0].option_name == "bash" and result.result.result == "a.txt\n"
    assert all("usage" not in n.message.metadata for n in graph.graph.sampled_nodes())  # one usage, two replies
