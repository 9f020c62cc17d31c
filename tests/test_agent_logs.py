"""Logs of agent frameworks, tracing tools and coding agents that no reader is named after, read by the mechanism
(detection vote, structural reader, shapes vocabulary, context completeness) as serious users write them.

The fixtures are written here in the shape of real third-party files (never the data itself); each says which
repository, path and commit its shape follows.
"""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path
from typing import Any

import yaml

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.detect import detect_format
from msgtrain.model.message import PartsMessage
from tests.test_ingest_harnesses import convert


def _write(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2), encoding="utf-8")
    return path


# Shape of Cline's saved API history (gmfstu/Online-Card-Architecture
# exported_conversation_1769053680585/api_conversation_history.json, commit 2e6753c4ce6476e69eb686167a737c80a1107734):
# a top-level array of Anthropic MessageParams, text-block user turns first, then thinking / text / tool_use replies
# with Cline's own `metrics` beside them, and tool_result blocks in user turns. No system prompt, no tool schemas.
CLINE_HISTORY = [
    {"role": "user", "content": [{"type": "text", "text": "<task>\nAdd a DiscardCard action.\n</task>"}]},
    {"role": "user", "content": [{"type": "text", "text": "<environment_details>ACT</environment_details>"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Read the action system first.", "signature": "c2ln"},
            {"type": "text", "text": "Let me read ActionSystem.cs."},
            {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {"path": "ActionSystem.cs"}},
        ],
        "modelInfo": {"modelId": "claude-sonnet-4-5", "providerId": "cline", "mode": "act"},
        "metrics": {"tokens": {"prompt": 15093, "completion": 388, "cached": 0}},
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "public class ActionSystem {}"},
            {"type": "text", "text": "<environment_details># Current Mode\nACT</environment_details>"},
        ],
    },
    {
        "role": "assistant",
        "content": [{"type": "text", "text": "ActionSystem is empty; I will add the action there."}],
        "modelInfo": {"modelId": "claude-sonnet-4-5", "providerId": "cline", "mode": "act"},
        "metrics": {"tokens": {"prompt": 15561, "completion": 20, "cached": 15093}},
    },
    {"role": "user", "content": [{"type": "text", "text": "Thanks."}]},
]


def test_a_saved_message_list_is_one_conversation_and_its_blocks_choose_the_reader(tmp_path: Path) -> None:
    # Voted message by message, OpenAI chat (which takes any user / assistant message) outvoted the reader of the
    # Anthropic blocks a few messages hold, and the whole file was rejected at its first tool_use.
    # (the Cline reader takes a Cline history: the Anthropic blocks, with Cline's own rules; any other saved list of
    # Anthropic messages is the Anthropic reader's)
    path = _write(tmp_path / "logs" / "api_conversation_history.json", CLINE_HISTORY)
    assert detect_format(path).name == "cline_task"
    plain = json.loads(json.dumps(CLINE_HISTORY).replace("environment_details", "workspace"))
    assert detect_format(_write(tmp_path / "saved" / "history.json", plain)).name == "anthropic"
    code, _, report = convert(tmp_path, path)
    assert code == 0 and report["records"]["rejected"] == 0
    assert report["turns"]["found"] == report["turns"]["trained"] == 2


def test_a_transcript_that_calls_tools_without_their_schemas_is_flagged_context_incomplete(tmp_path: Path) -> None:
    path = _write(tmp_path / "logs" / "api_conversation_history.json", CLINE_HISTORY)
    code, rows, report = convert(tmp_path, path)
    assert code == 0 and rows and all("context_incomplete" in r["flags"] for r in rows)
    assert report["flags"]["context_incomplete"] == len(rows)


def test_a_transcript_whose_tool_schemas_are_logged_is_not_flagged(tmp_path: Path) -> None:
    tools = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]
    path = _write(tmp_path / "logs" / "history.json", {"tools": tools, "messages": CLINE_HISTORY})
    code, rows, _ = convert(tmp_path, path)
    assert code == 0 and rows and not any("context_incomplete" in r["flags"] for r in rows)


def _cassette(path: Path, interactions: list[tuple[str, dict[str, Any], str]]) -> Path:
    """A VCR cassette of (uri, request body, response body text) interactions."""
    doc = {
        "interactions": [
            {
                "request": {"method": "POST", "uri": uri, "body": json.dumps(body)},
                "response": {"status": {"code": 200, "message": "OK"}, "body": {"string": text}},
            }
            for uri, body, text in interactions
        ],
        "version": 1,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _sse(chunks: list[dict[str, Any]]) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def _reply_parts(path: Path) -> list[list[tuple[str, str]]]:
    reader = detect_format(path)
    replies = []
    for event in read_events(reader, path):
        assert not isinstance(event, ReadReject), event.error
        if isinstance(event, ReadGraph):
            for node in event.graph.nodes.values():
                if node.is_assistant and isinstance(node.message, PartsMessage):
                    replies.append([(p.kind, getattr(p, "text", "")) for p in node.message.parts])
    return replies


# Shapes of pydantic/pydantic-ai tests/models/cassettes/test_mistral/test_mistral_model_thinking_part.yaml and
# test_mistral_model_thinking_part_iter.yaml (commit 4fda38988f2939fa6ea9cdefcf120693e10ef491): Mistral's reasoning
# model answers a list content whose `thinking` chunk holds a list of text chunks; streamed, the thought arrives as
# such lists and the answer as strings; the recorder names the streamed call `.../chat/completions#stream`.
MISTRAL_REQUEST = {"model": "magistral-medium-latest", "messages": [{"role": "user", "content": "Cross the street?"}]}
MISTRAL_THOUGHT = [{"type": "text", "text": "Okay, the user"}, {"type": "text", "text": " asks how."}]


def test_a_thought_logged_as_a_list_of_text_chunks_is_trained_as_its_text(tmp_path: Path) -> None:
    body = {
        "id": "c1",
        "object": "chat.completion",
        "model": "magistral-medium-latest",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "thinking", "thinking": MISTRAL_THOUGHT}, {"type": "text", "text": "Look."}],
                },
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18},
    }
    uri = "https://api.mistral.ai/v1/chat/completions"
    path = _cassette(tmp_path / "mistral.yaml", [(uri, MISTRAL_REQUEST, json.dumps(body))])
    assert _reply_parts(path) == [[("reasoning", "Okay, the user asks how."), ("text", "Look.")]]


def test_a_streamed_call_named_with_a_uri_fragment_keeps_its_thought_and_its_answer(tmp_path: Path) -> None:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {"id": "c2", "object": "chat.completion.chunk", "model": "magistral-medium-latest", "choices": [choice]}

    stream = _sse(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": [{"type": "thinking", "thinking": MISTRAL_THOUGHT[:1]}]}),
            chunk({"content": [{"type": "thinking", "thinking": MISTRAL_THOUGHT[1:]}]}),
            chunk({"content": "Look "}),
            chunk({"content": "both ways."}, "stop"),
        ]
    )
    uri = "https://api.mistral.ai/v1/chat/completions#stream"
    path = _cassette(tmp_path / "mistral_stream.yaml", [(uri, {**MISTRAL_REQUEST, "stream": True}, stream)])
    assert _reply_parts(path) == [[("reasoning", "Okay, the user asks how."), ("text", "Look both ways.")]]


# Shape of pydantic/pydantic-ai tests/models/cassettes/test_openrouter/test_openrouter_file_annotation.yaml (commit
# 4fda38988f2939fa6ea9cdefcf120693e10ef491): an OpenAI chat `file` part carries its document inline as `file_data`.
def test_an_openai_file_part_with_inline_data_is_read(tmp_path: Path) -> None:
    request = {
        "model": "openai/gpt-4.1-mini",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this document?"},
                    {
                        "type": "file",
                        "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"},
                    },
                ],
            }
        ],
    }
    body = {
        "id": "gen-1",
        "object": "chat.completion",
        "model": "openai/gpt-4.1-mini",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "A dummy PDF."}}],
    }
    uri = "https://openrouter.ai/api/v1/chat/completions"
    path = _cassette(tmp_path / "openrouter.yaml", [(uri, request, json.dumps(body))])
    assert _reply_parts(path) == [[("text", "A dummy PDF.")]]


# Shape of a Letta agent file (letta-ai/agent-file agents/@letta-ai/lettabot-builder/lettabot-builder.af, commit
# 78212eb571e59e10b35b924375a997319b89c280): a `.af` JSON document whose agents hold `system` (the template) and
# `messages` (the in-context window: the compiled system message, then Letta messages whose content lists hold
# `reasoning` blocks, with OpenAI `tool_calls` and `tool` results), the tool schemas at the top of the file.
LETTA_AGENT_FILE = {
    "agents": [
        {
            "name": "builder",
            "system": "<base_instructions>You are a builder.</base_instructions>",
            "messages": [
                {
                    "type": "message",
                    "role": "system",
                    "content": [
                        {
                            "type": "text",
                            "text": "<base_instructions>You are a builder.</base_instructions>\n<memory_blocks>\n"
                            "<persona>Helpful.</persona>\n</memory_blocks>",
                        }
                    ],
                },
                {"type": "message", "role": "user", "content": [{"type": "text", "text": "Fix the config loader."}]},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [
                        {"type": "reasoning", "is_native": True, "reasoning": "Read it first.", "signature": "RXI="},
                        {"type": "text", "text": "Reading the loader."},
                    ],
                    "tool_calls": [
                        {
                            "id": "toolu_01",
                            "type": "function",
                            "function": {"name": "Read", "arguments": '{"path": "config.ts"}'},
                        }
                    ],
                    "model": "claude-sonnet-4-5-20250929",
                },
                {
                    "type": "message",
                    "role": "tool",
                    "content": [{"type": "text", "text": "export const port = 8080;"}],
                    "name": "Read",
                    "tool_call_id": "toolu_01",
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "text", "text": "The port is hard-coded."}],
                    "model": "claude-sonnet-4-5-20250929",
                },
            ],
        }
    ],
    "tools": [{"name": "Read", "json_schema": {"name": "Read", "parameters": {"type": "object"}}}],
}


def test_a_letta_agent_file_is_read_with_its_reasoning_and_its_compiled_system_message(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    _write(logs / "builder.af", LETTA_AGENT_FILE)
    _write(logs / "notebook.ipynb", {"cells": [{"cell_type": "code", "source": ["print(1)"]}], "nbformat": 4})
    code, _, report = convert(tmp_path, logs)
    assert code == 0 and report["records"]["rejected"] == 0
    assert report["turns"]["found"] == report["turns"]["trained"] == 2
    assert report["files"]["ignored"] == [{"path": str(logs / "notebook.ipynb"), "reason": "not a log file suffix"}]
    graph = _graphs_of(logs / "builder.af")[0]
    system, _, first, *_ = graph.nodes.values()
    assert "<persona>Helpful.</persona>" in system.message.parts[0].text  # the system message sent, not the template
    assert [p.kind for p in first.message.parts] == ["reasoning", "text"]


def _graphs_of(path: Path) -> list[Any]:
    return [e.graph for e in read_events(detect_format(path), path) if isinstance(e, ReadGraph)]


# Shape of goose's session JSONL (jedarden/AgentScribe tests/fixtures/goose/sample_session.jsonl, commit
# b38aff052e7fd4ceb25cc45fd2b819467e9498f9, which follows goose's legacy session writer): a header line (working_dir,
# token counts), then one message per line whose content blocks are goose's own: `toolRequest` (`toolCall.value`
# holds name and arguments) and `toolResponse` (`toolResult.value`: content blocks, or an MCP result holding them).
GOOSE_SESSION = [
    {"working_dir": "/home/coding/my-app", "description": "Debug a leak", "message_count": 5, "input_tokens": 980},
    {"role": "user", "created": 1747178328, "content": [{"type": "text", "text": "Find the leaking worker."}]},
    {
        "role": "assistant",
        "created": 1747178334,
        "content": [
            {"type": "text", "text": "Checking the processes."},
            {
                "type": "toolRequest",
                "id": "toolu_bdrk_01",
                "toolCall": {
                    "status": "success",
                    "value": {"name": "developer__shell", "arguments": {"command": "ps"}},
                },
            },
        ],
    },
    {
        "role": "user",
        "created": 1747178334,
        "content": [
            {
                "type": "toolResponse",
                "id": "toolu_bdrk_01",
                "toolResult": {"status": "success", "value": {"content": [{"type": "text", "text": "node worker.js"}]}},
            }
        ],
    },
    {"role": "assistant", "created": 1747178340, "content": [{"type": "text", "text": "worker.js is the one."}]},
]


def test_a_goose_session_is_read_with_its_header_skipped_and_its_tool_blocks_paired(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "20250514_101848.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in GOOSE_SESSION), encoding="utf-8")
    assert detect_format(path).name == "structural"  # not OpenAI chat: it cannot read toolRequest blocks
    code, _, report = convert(tmp_path, path)
    assert code == 0 and report["records"]["rejected"] == 0
    assert report["records"]["skipped_by_reason"] == {"session_header": 1}
    assert report["turns"]["found"] == report["turns"]["trained"] == 2
    graph = _graphs_of(path)[0]
    kinds = [(n.message.role, n.message.kind) for n in graph.nodes.values()]
    assert kinds == [("user", "parts"), ("assistant", "option_call"), ("tool", "option_result"), ("assistant", "parts")]


# Shape of a Continue session file (`~/.continue/sessions/<id>.json`, typed in continuedev/continue core/index.d.ts
# `Session` / `ChatHistoryItem` / `ChatMessage`, commit 275e116d9c2f028f3c812d2b5b935f7be9ac27df): each history item
# wraps its message under `message` beside `contextItems`; camelCase `toolCalls` / `toolCallId` and `imageUrl`
# parts; a model's reasoning is a `thinking` message of its own before the assistant message.
CONTINUE_SESSION = {
    "sessionId": "0f9a",
    "title": "Refactor tail loop",
    "workspaceDirectory": "file:///home/dan/tail",
    "history": [
        {
            "message": {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Why does tail_file re-read the file?"},
                    {"type": "imageUrl", "imageUrl": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                ],
                "id": "u1",
            },
            "contextItems": [],
        },
        {"message": {"role": "thinking", "content": "Read the loop first.", "id": "t1"}, "contextItems": []},
        {
            "message": {
                "id": "a1",
                "role": "assistant",
                "content": "Let me read it.",
                "toolCalls": [
                    {
                        "id": "toolu_01",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"filepath": "src/tail.rs"}'},
                    }
                ],
            },
            "contextItems": [],
            "toolCallState": {"toolCallId": "toolu_01", "status": "done"},
        },
        {"message": {"role": "tool", "content": "loop { reopen(); }", "toolCallId": "toolu_01"}, "contextItems": []},
        {"message": {"role": "assistant", "content": "It re-opens on every tick."}, "contextItems": []},
    ],
    "mode": "agent",
    "chatModelTitle": "Claude Sonnet 4",
}


def test_a_continue_session_reads_messages_wrapped_in_history_items(tmp_path: Path) -> None:
    path = _write(tmp_path / "logs" / "0f9a.json", CONTINUE_SESSION)
    assert detect_format(path).name == "structural"
    _, _, report = convert(tmp_path, path)  # the demo template renders no image: both turns are found, not trained
    assert report["records"]["rejected"] == 0 and report["turns"]["found"] == 2
    user, call, result, _ = _graphs_of(path)[0].nodes.values()
    assert [p.kind for p in user.message.parts] == ["text", "media"]
    assert [p.kind for p in call.message.parts] == ["reasoning", "text"]
    assert call.message.calls[0].invocation_id == result.message.result.invocation_id == "toolu_01"


def test_a_transcript_whose_logged_usage_contradicts_the_context_built_is_flagged(tmp_path: Path) -> None:
    # Cline logs each reply's prompt size (`metrics.tokens.prompt`) and model (`modelInfo.modelId`); the demo
    # tokenizer's name stands in for the model, so the tokenizer is the model's own and the sizes are compared.
    demo = "msgtrain-demo-bytes-chatml"
    history = json.loads(json.dumps(CLINE_HISTORY))
    replies = [m for m in history if m["role"] == "assistant"]
    for m in replies:
        m["modelInfo"]["modelId"] = demo
        m["metrics"]["tokens"]["prompt"] = 5000
    path = _write(tmp_path / "logs" / "api_conversation_history.json", history)
    code, rows, report = convert(tmp_path, path)
    assert code == 0 and rows and all("usage_mismatch" in r["flags"] for r in rows)
    assert report["flags"]["usage_mismatch"] == len(rows)
    # The sizes the built contexts really have: no contradiction, no flag.
    starts = [span["start"] for r in rows for span in r["turn_spans"]]
    for m, start in zip(replies, starts, strict=True):
        m["metrics"]["tokens"]["prompt"] = start
    _write(path, history)
    code, rows, report = convert(tmp_path / "again", path)
    assert code == 0 and not any("usage_mismatch" in r["flags"] for r in rows)


# Shape of pydantic-ai's saved message history (`ModelMessagesTypeAdapter` JSON, `result.all_messages_json()`;
# pydantic/pydantic-ai pydantic_ai_slim/pydantic_ai/messages.py, commit 4fda38988f2939fa6ea9cdefcf120693e10ef491):
# requests and responses whose parts carry a `part_kind`, each request repeating the agent's `instructions`, each
# response its `usage` and `model_name`.
def _request(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"parts": list(parts), "instructions": "Be brief.", "kind": "request", "run_id": "r1", "metadata": None}


PYDANTIC_AI_HISTORY = [
    _request({"content": "Weather in Paris?", "timestamp": "2026-08-12T02:09:27Z", "part_kind": "user-prompt"}),
    {
        "parts": [
            {"content": "Checking.", "part_kind": "text"},
            {"tool_name": "weather", "args": '{"city": "Paris"}', "tool_call_id": "call_1", "part_kind": "tool-call"},
        ],
        "usage": {"input_tokens": 52, "output_tokens": 20},
        "model_name": "gpt-4o-mini-2024-07-18",
        "kind": "response",
        "finish_reason": "tool_call",
    },
    _request(
        {
            "tool_name": "weather",
            "content": {"temp_c": 18, "sky": "clear"},
            "tool_call_id": "call_1",
            "part_kind": "tool-return",
        }
    ),
    {
        "parts": [
            {"tool_name": "weather", "args": {"city": "Pariss"}, "tool_call_id": "call_2", "part_kind": "tool-call"}
        ],
        "kind": "response",
    },
    _request(
        {"tool_name": "weather", "content": "Unknown city.", "tool_call_id": "call_2", "part_kind": "retry-prompt"}
    ),
    {"parts": [{"content": "18°C and clear.", "part_kind": "text"}], "kind": "response", "model_name": "gpt-4o-mini"},
]


def test_a_pydantic_ai_message_history_is_read_as_its_model_was_sent_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "logs" / "history.json", PYDANTIC_AI_HISTORY)
    assert detect_format(path).name == "structural"
    code, _, report = convert(tmp_path, path)
    assert code == 0 and report["records"]["rejected"] == 0
    assert report["turns"]["found"] == report["turns"]["trained"] == 3
    nodes = list(_graphs_of(path)[0].nodes.values())
    assert [n.message.role for n in nodes] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert nodes[0].message.parts[0].text == "Be brief."  # the instructions, once
    assert nodes[2].message.metadata["usage"] == {"input_tokens": 52, "output_tokens": 20}
    assert nodes[3].message.result.result == '{"temp_c":18,"sky":"clear"}'  # compact, as pydantic-ai sends it
    assert nodes[5].message.result.result == "Unknown city.\n\nFix the errors and try again."


def test_a_pydantic_ai_history_whose_instructions_change_is_cut_there(tmp_path: Path) -> None:
    history = json.loads(json.dumps(PYDANTIC_AI_HISTORY))
    history[2]["instructions"] = "Be verbose."
    path = _write(tmp_path / "logs" / "history.json", history)
    events = list(read_events(detect_format(path), path))
    rejects = [e for e in events if isinstance(e, ReadReject)]
    assert [r.error.code for r in rejects] == ["ambiguous_structure"] and "instructions" in rejects[0].error.message
    assert rejects[0].count == 0  # a gap inside the conversation, not a record of its own
    (graph,) = [e.graph for e in events if isinstance(e, ReadGraph)]
    # the reply before the changed instructions is trained; none after them is (their system prompt is unknown)
    origins = [n.origin.value for n in graph.nodes.values() if n.message.role == "assistant"]
    assert origins[0] == "sampled" and set(origins[1:]) <= {"carried"} and len(origins) > 1


# Shape of pydantic/pydantic-ai tests/models/cassettes/test_xai/test_xai_builtin_code_execution_tool.xai.yaml (commit
# 4fda38988f2939fa6ea9cdefcf120693e10ef491): a gRPC recorder's interactions, `request_sample` / `response_sample`
# JSON with protocol-buffer role names, beside an ordinary HTTP interaction.
def test_generated_turns_of_an_api_recorded_in_another_shape_are_rejects_with_their_turns(tmp_path: Path) -> None:
    grpc = {
        "request_sample": {
            "json": {
                "messages": [
                    {"content": [{"text": "2+2?"}], "role": "ROLE_USER"},
                    {"content": "4", "role": "ROLE_ASSISTANT"},
                    {"content": [{"text": "Again?"}], "role": "ROLE_USER"},
                ],
                "model": "grok-4",
            }
        },
        "response_sample": {
            "json": {
                "outputs": [{"finish_reason": "REASON_STOP", "message": {"role": "ROLE_ASSISTANT", "content": "4"}}]
            }
        },
    }
    body = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "4"}}]}
    path = _cassette(
        tmp_path / "logs" / "grpc.yaml", [("https://api.x.ai/v1/chat/completions", MISTRAL_REQUEST, json.dumps(body))]
    )
    doc = yaml.safe_load(path.read_text())
    doc["interactions"].append(grpc)
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    code, _, report = convert(tmp_path, path)
    assert code == 3 and report["records"]["rejected_by_reason"] == {"unsupported_api": 1}
    assert report["turns"]["in_rejected_records"] == 1 and report["turns"]["trained"] == 1  # the response's turn


# Shape of Arize-ai/openinference python/instrumentation/openinference-instrumentation-langchain/tests/cassettes/
# test_instrumentor/test_gemini_token_counts.yaml (commit 1fe497f1d9f45a07eee55d97fe185e020560f9c7): Vertex AI called
# with `enum-encoding=int`, so the finish reason is a protocol-buffer enum number.
def test_a_finish_reason_logged_as_an_enum_number_is_kept_as_text_not_a_fault(tmp_path: Path) -> None:
    request = {"contents": [{"role": "user", "parts": [{"text": "Tell me a one-liner."}]}]}
    body = {
        "candidates": [{"content": {"role": "model", "parts": [{"text": "I see food, I eat it."}]}, "finishReason": 1}],
        "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 17},
        "modelVersion": "gemini-2.5-flash",
    }
    uri = (
        "https://us-central1-aiplatform.googleapis.com/v1beta1/projects/p/locations/us-central1/publishers/google/"
        "models/gemini-2.5-flash:generateContent?%24alt=json%3Benum-encoding%3Dint"
    )
    path = _cassette(tmp_path / "logs" / "gemini.yaml", [(uri, request, json.dumps(body))])
    code, _, report = convert(tmp_path, path)
    assert code == 0 and report["turns"]["found"] == report["turns"]["trained"] == 1


# Shapes of Arize-ai/openinference python/instrumentation/openinference-instrumentation-ollama/tests/openinference/
# instrumentation/ollama/cassettes/test_instrumentor/test_chat_with_tool_call.yaml and test_chat_stream.yaml (commit
# 1fe497f1d9f45a07eee55d97fe185e020560f9c7): Ollama's /api/chat, one `message` per response (thinking, tool calls
# with dict arguments), streamed as JSON lines, the prompt size as `prompt_eval_count`.
OLLAMA = "http://127.0.0.1:11434/api/chat"
OLLAMA_TOOLS = [{"type": "function", "function": {"name": "get_current_weather", "parameters": {"type": "object"}}}]


def test_ollama_chat_calls_are_read_streamed_or_not_with_their_tool_calls_paired(tmp_path: Path) -> None:
    ask = {"role": "user", "content": "Weather in Paris? Use the tool."}
    call = {
        "id": "call_gsiiy8py",
        "function": {"index": 0, "name": "get_current_weather", "arguments": {"city": "Paris"}},
    }
    first = {"model": "qwen3.6:latest", "stream": False, "messages": [ask], "tools": OLLAMA_TOOLS}
    answer = {
        "model": "qwen3.6:latest",
        "message": {"role": "assistant", "content": "", "thinking": "Use the tool.", "tool_calls": [call]},
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 40,
        "eval_count": 30,
    }
    history = [ask, {"role": "assistant", "content": "", "thinking": "Use the tool.", "tool_calls": [call]}]
    history.append({"role": "tool", "content": "18C, clear", "tool_name": "get_current_weather"})
    second = {"model": "qwen3.6:latest", "stream": True, "messages": history, "tools": OLLAMA_TOOLS}
    chunks = [
        {
            "model": "qwen3.6:latest",
            "message": {"role": "assistant", "content": "", "thinking": "It is"},
            "done": False,
        },
        {
            "model": "qwen3.6:latest",
            "message": {"role": "assistant", "content": "", "thinking": " mild."},
            "done": False,
        },
        {"model": "qwen3.6:latest", "message": {"role": "assistant", "content": "18C and clear."}, "done": False},
        {
            "model": "qwen3.6:latest",
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
        },
    ]
    stream = "".join(json.dumps(c) + "\n" for c in chunks)
    path = _cassette(tmp_path / "logs" / "ollama.yaml", [(OLLAMA, first, json.dumps(answer)), (OLLAMA, second, stream)])
    code, _, report = convert(tmp_path, path)
    assert code == 0 and report["turns"]["found"] == report["turns"]["trained"] == 2
    graph = _graphs_of(path)[0]
    roles = [(n.message.role, n.origin.value) for n in graph.nodes.values()]
    assert roles == [("user", "context"), ("assistant", "sampled"), ("tool", "context"), ("assistant", "sampled")]
    reply = list(graph.nodes.values())[-1].message
    assert [(p.kind, p.text) for p in reply.parts] == [("reasoning", "It is mild."), ("text", "18C and clear.")]


def _aws_event(payload: dict[str, Any]) -> bytes:
    """One AWS event-stream message (application/vnd.amazon.eventstream) of an InvokeModel ``chunk`` event."""
    headers = b""
    for name, value in ((":event-type", "chunk"), (":content-type", "application/json"), (":message-type", "event")):
        headers += bytes([len(name)]) + name.encode() + b"\x07" + len(value).to_bytes(2, "big") + value.encode()
    body = json.dumps({"bytes": base64.b64encode(json.dumps(payload).encode()).decode()}).encode()
    total = 12 + len(headers) + len(body) + 4
    prelude = total.to_bytes(4, "big") + len(headers).to_bytes(4, "big")
    prelude += zlib.crc32(prelude).to_bytes(4, "big")
    message = prelude + headers + body
    return message + zlib.crc32(message).to_bytes(4, "big")


# Shapes of Arize-ai/openinference python/instrumentation/openinference-instrumentation-bedrock/tests/openinference/
# instrumentation/bedrock/cassettes/TestNovaInvokeModel.test_nova_lite_with_system.yaml and
# TestNovaInvokeModelWithResponseStream.test_nova_micro_streaming.yaml
# (commit 1fe497f1d9f45a07eee55d97fe185e020560f9c7):
# Amazon Nova's InvokeModel bodies are Converse's shape (`schemaVersion: messages-v1`, `output.message`), and its
# response stream carries Converse events in its chunks.
NOVA_REQUEST = {
    "schemaVersion": "messages-v1",
    "system": [{"text": "Keep responses brief."}],
    "messages": [{"role": "user", "content": [{"text": "Who are you?"}]}],
    "inferenceConfig": {"maxTokens": 128, "temperature": 0.5},
}


def test_amazon_nova_invoke_model_calls_are_read_as_converse_streamed_or_not(tmp_path: Path) -> None:
    answer = {
        "output": {"message": {"content": [{"text": "An AI assistant."}], "role": "assistant"}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 16, "outputTokens": 5},
    }
    base = "https://bedrock-runtime.us-east-1.amazonaws.com/model/amazon.nova-lite-v1%3A0"
    path = _cassette(tmp_path / "logs" / "nova.yaml", [(f"{base}/invoke", NOVA_REQUEST, json.dumps(answer))])
    events = [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"delta": {"text": "An AI "}, "contentBlockIndex": 0}},
        {"contentBlockDelta": {"delta": {"text": "assistant."}, "contentBlockIndex": 0}},
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"messageStop": {"stopReason": "end_turn"}},
        {"metadata": {"usage": {"inputTokens": 16}}, "amazon-bedrock-invocationMetrics": {"inputTokenCount": 16}},
    ]
    doc = yaml.safe_load(path.read_text())
    streamed = json.loads(json.dumps(doc["interactions"][0]))
    streamed["request"]["uri"] = f"{base}/invoke-with-response-stream"
    streamed["response"]["body"]["string"] = b"".join(_aws_event(e) for e in events)
    streamed["response"]["headers"] = {"Content-Type": ["application/vnd.amazon.eventstream"]}
    doc["interactions"].append(streamed)
    path.write_text(yaml.dump(doc), encoding="utf-8")
    code, _, report = convert(tmp_path, path)
    assert code == 0 and report["records"]["rejected"] == 0
    replies = [n.message for g in _graphs_of(path) for n in g.nodes.values() if n.is_assistant]
    assert {p.text for m in replies for p in m.parts} == {"An AI assistant."}
