"""Spans in the OpenInference and OpenLLMetry conventions are read by the otel reader as GenAI spans are.

Shapes: OpenInference attributes as Arize-ai/openinference writes them
(js/packages/openinference-genai/test/__fixtures__/openinference_client_span_tool_calls.json @ 1fe497f1d) inside a
span as the Python SDK's ``ReadableSpan.to_json`` exports it (Phoenix's manual-instrumentation docs); a Phoenix
spans dataframe row (``attributes.llm.input_messages`` as rows of ``message.*`` fields); OpenLLMetry's indexed
``gen_ai.prompt.<i>`` / ``gen_ai.completion.<i>`` attributes (traceloop's OpenAI instrumentation, the history's
tool calls indexed or as one JSON text).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.formats.traces import otel
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.message import OptionCallMessage, OptionResultMessage
from msgtrain.run.parts import LinearizeSettings, convert_file

_TRACE = "0x6c80880dbeb609e2ed41e06a6397a0dd"


def _span(span_id: str, attributes: dict[str, Any], start: str = "2024-05-08T21:46:11.480777Z") -> dict[str, Any]:
    return {
        "name": "ChatCompletion",
        "context": {"trace_id": _TRACE, "span_id": span_id, "trace_state": "[]"},
        "kind": "SpanKind.INTERNAL",
        "parent_id": None,
        "start_time": start,
        "status": {"status_code": "OK"},
        "attributes": attributes,
        "events": [],
    }


_OI_LLM = {
    "openinference.span.kind": "LLM",
    "llm.model_name": "gpt-4-0613",
    "llm.invocation_parameters": '{"model":"gpt-4","temperature":0.5,"top_p":0.9}',
    "llm.input_messages.0.message.role": "user",
    "llm.input_messages.0.message.contents.0.message_content.type": "text",
    "llm.input_messages.0.message.contents.0.message_content.text": "Weather in Paris?",
    "llm.input_messages.1.message.role": "assistant",
    "llm.input_messages.1.message.contents.0.message_content.type": "text",
    "llm.input_messages.1.message.contents.0.message_content.text": "Absolutely! Let me check the weather for you.",
    "llm.input_messages.1.message.tool_calls.0.tool_call.id": "1234",
    "llm.input_messages.1.message.tool_calls.0.tool_call.function.name": "get_weather",
    "llm.input_messages.1.message.tool_calls.0.tool_call.function.arguments": '{"location":"Paris"}',
    "llm.input_messages.2.message.role": "tool",
    "llm.input_messages.2.message.content": "rainy, 57°F",
    "llm.input_messages.2.message.tool_call_id": "1234",
    "llm.tools.0.tool.json_schema": json.dumps(
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ),
    "llm.output_messages.0.message.role": "assistant",
    "llm.output_messages.0.message.contents.0.message_content.type": "text",
    "llm.output_messages.0.message.contents.0.message_content.text": "It is rainy in Paris, 57°F.",
    "output.value": '{"text":"It is rainy in Paris, 57°F.","finish_reason":"stop"}',
    "output.mime_type": "application/json",
    "llm.token_count.prompt": 97,
    "llm.token_count.completion": 52,
}


def _read(path: Path) -> tuple[list[MessageGraph], list[ReadReject]]:
    events = list(read_events(otel.READER, path))
    return [e.graph for e in events if isinstance(e, ReadGraph)], [e for e in events if isinstance(e, ReadReject)]


def _roles(graph: MessageGraph) -> list[str]:
    (branch,) = graph.branches()
    return [f"{n.message.role}{'*' if n.origin is Origin.SAMPLED else ''}" for n in branch.nodes]


def _check_weather_graph(graph: MessageGraph) -> None:
    assert _roles(graph) == ["user", "assistant", "tool", "assistant*"]
    call, result = graph.branches()[0].messages[1:3]
    assert isinstance(call, OptionCallMessage) and call.calls[0].raw_arguments == '{"location":"Paris"}'
    assert isinstance(result, OptionResultMessage) and result.result.invocation_id == "1234"
    reply = graph.sampled_nodes()[0]
    assert reply.message.text == "It is rainy in Paris, 57°F."
    assert reply.message.metadata["usage"]["input_tokens"] == 97  # compared with the built prompt when it can be
    assert graph.generation(reply.id).model == "gpt-4-0613"
    assert [t["function"]["name"] for t in graph.env.tools] == ["get_weather"]


def test_openinference_llm_spans_train_their_output_in_their_flattened_input_messages(tmp_path: Path) -> None:
    retriever = _span("0x03f3466720f4bfc7", {"openinference.span.kind": "RETRIEVER", "input.value": "postal"})
    path = tmp_path / "spans.json"
    path.write_text(json.dumps([_span("0xd9bdedf0df0b7208", _OI_LLM), retriever]))
    assert detect_format(path).name == "otel"
    (graph,), rejects = _read(path)
    assert not rejects
    _check_weather_graph(graph)


def test_a_phoenix_spans_dataframe_row_with_message_rows_is_read_as_the_flattened_span(tmp_path: Path) -> None:
    rows = (
        {"message.role": "user", "message.content": "Weather in Paris?"},
        {
            "message.role": "assistant",
            "message.content": "Absolutely! Let me check the weather for you.",
            "message.tool_calls": [
                {
                    "tool_call.id": "1234",
                    "tool_call.function.name": "get_weather",
                    "tool_call.function.arguments": '{"location":"Paris"}',
                }
            ],
        },
        {"message.role": "tool", "message.content": "rainy, 57°F", "message.tool_call_id": "1234"},
    )
    row = {
        "name": "ChatCompletion",
        "span_kind": "LLM",
        "context.trace_id": _TRACE,
        "context.span_id": "0xd9bdedf0df0b7208",
        "attributes.openinference.span.kind": "LLM",
        "attributes.llm.model_name": "gpt-4-0613",
        "attributes.llm.input_messages": list(rows),
        "attributes.llm.output_messages": [
            {"message.role": "assistant", "message.content": "It is rainy in Paris, 57°F."}
        ],
        "attributes.llm.tools": [{"tool.json_schema": _OI_LLM["llm.tools.0.tool.json_schema"]}],
        "attributes.llm.token_count.prompt": 97,
    }
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "context.span_id": "0xd9bdedf0df0b7209"}) + "\n")
    assert detect_format(path).name == "otel"
    (graph,), rejects = _read(path)
    assert not rejects
    _check_weather_graph(graph)  # the same call exported twice is one reply


def test_openllmetry_indexed_prompt_and_completion_attributes_are_a_chat_span(tmp_path: Path) -> None:
    attrs = {
        "llm.request.type": "chat",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4-0613",
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "Weather in Paris?",
        "gen_ai.prompt.1.role": "assistant",
        "gen_ai.prompt.1.content": "Absolutely! Let me check the weather for you.",
        "gen_ai.prompt.1.tool_calls": json.dumps(
            [
                {
                    "id": "1234",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location":"Paris"}'},
                }
            ]
        ),
        "gen_ai.prompt.2.role": "tool",
        "gen_ai.prompt.2.content": "rainy, 57°F",
        "gen_ai.prompt.2.tool_call_id": "1234",
        "llm.request.functions.0.name": "get_weather",
        "llm.request.functions.0.parameters": '{"type": "object"}',
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": "It is rainy in Paris, 57°F.",
        "gen_ai.completion.0.finish_reason": "stop",
        "gen_ai.usage.prompt_tokens": 97,
    }
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"spans": [_span("0xd9bdedf0df0b7208", attrs)]}))
    assert detect_format(path).name == "otel"
    (graph,), rejects = _read(path)
    assert not rejects
    reply = graph.sampled_nodes()[0]
    assert graph.generation(reply.id).finish_reason == "stop"
    _check_weather_graph(graph)


def test_a_flattened_message_without_a_role_rejects_its_span_naming_the_attribute(tmp_path: Path) -> None:
    attrs = {k: v for k, v in _OI_LLM.items() if k != "llm.input_messages.2.message.role"}
    path = tmp_path / "spans.json"
    path.write_text(json.dumps([_span("0xd9bdedf0df0b7208", attrs)]))
    graphs, (reject,) = _read(path)
    assert not graphs
    assert reject.error.code == "unknown_role" and "llm.input_messages.2.message.role" in str(reject.error)


def test_mlflow_chat_model_spans_train_the_completion_in_the_request_messages_of_their_json_attributes(
    tmp_path: Path,
) -> None:
    # An MLflow 3 trace as Databricks inference tables log it (spans with trace_id / span_id, every attribute JSON
    # text: mlflow.spanInputs the request, mlflow.spanOutputs the chat completion, mlflow.chat.tokenUsage); the
    # agent span around the call and a chat span whose output is its caller's message train nothing.
    def span(span_id: str, kind: str, inputs: Any, outputs: Any, **more: Any) -> dict[str, Any]:
        attributes = {
            "mlflow.traceRequestId": '"tr-35b8"',
            "mlflow.spanType": json.dumps(kind),
            "mlflow.spanInputs": json.dumps(inputs),
            "mlflow.spanOutputs": json.dumps(outputs),
            **more,
        }
        return {"trace_id": "tr-35b8", "span_id": span_id, "name": kind, "attributes": attributes}

    request = {
        "model": "gpt-4.1",
        "messages": [{"content": "You are a helpful assistant", "role": "system"}, {"content": "Pie?", "role": "user"}],
        "temperature": 0.5,
    }
    completion = {
        "choices": [{"finish_reason": "stop", "index": 0, "message": {"content": "Apple pie.", "role": "assistant"}}],
        "model": "gpt-4.1-2025-04-14",
        "object": "chat.completion",
        "usage": {"completion_tokens": 3, "prompt_tokens": 27},
    }
    echo = {"choices": [{"index": 0, "message": {"role": "user", "content": "Pie?"}, "finish_reason": "stop"}]}
    trace = {
        "info": {"trace_id": "tr-35b8", "state": "OK"},
        "data": {
            "spans": [
                span("s1", "AGENT", {"request": {"input": []}}, {"object": "response", "output": []}),
                span("s2", "CHAT_MODEL", request, completion, **{"mlflow.chat.tokenUsage": '{"input_tokens": 27}'}),
                span("s3", "CHAT_MODEL", {"messages": request["messages"][1:]}, echo),
            ]
        },
    }
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    assert detect_format(path).name == "otel"
    (graph,), rejects = _read(path)
    assert not rejects
    (reply,) = graph.sampled_nodes()
    assert [n.message.role for n in graph.path(reply.id)] == ["system", "user", "assistant"]
    assert reply.message.text == "Apple pie." and reply.message.metadata["usage"]["input_tokens"] == 27
    assert graph.generation(reply.id).model == "gpt-4.1-2025-04-14"


# A chat span's attributes alone, with no span around them, in the current GenAI convention (beside the raw request
# and response bodies) and in the one before it (``gen_ai.prompt`` / ``gen_ai.completion`` as one JSON text each):
# the shapes of Arize-ai/openinference js/packages/openinference-genai/test/__fixtures__/
# otel_genai_client_span_tool_calls.json @ 4c265a1492ea4b0ec0a434ffae5b4da275e6428e and
# otel_genai_deprecated_client_span_tool_calls.json @ ac1d62ff0b9688985ac845f7f2f4910e5a5caf55, texts changed.
# Hand count of each real file: one reply sampled (the answer after the tool result), its context a user message,
# the assistant's text + call, the call's result. Before: the first was read by the structural reader through its
# raw ``input`` / ``output`` bodies (1 trained: the request's JSON text as the user message, the response's JSON text
# as the reply); the second was unknown_format (0). After: 1 trained each, in the messages the span says it sent.
_TYPED_HISTORY = [
    {"role": "user", "parts": [{"type": "text", "content": "Rain in Oslo?"}]},
    {
        "role": "assistant",
        "parts": [
            {"type": "text", "content": "Let me look."},
            {"type": "tool_call", "id": "c9", "name": "get_weather", "arguments": {"location": "Oslo"}},
        ],
    },
    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c9", "response": "rainy, 8°C"}]},
]
_BARE = {
    "gen_ai.provider.name": "openai",
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": "gpt-4",
    "gen_ai.response.model": "gpt-4-0613",
    "gen_ai.usage.input_tokens": 61,
    "gen_ai.response.finish_reasons": ["stop"],
}
_REPLY = {"text": "Yes: rainy, 8°C.", "finish_reason": "stop"}


def test_a_chat_span_s_attributes_alone_are_one_span_trained_in_its_own_messages_once(tmp_path: Path) -> None:
    current = {
        "input": json.dumps({"model": "gpt-4", "messages": _TYPED_HISTORY}),
        "output": json.dumps(_REPLY),
        **_BARE,
        "gen_ai.input.messages": json.dumps(_TYPED_HISTORY),
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": _REPLY["text"]}], "finish_reason": "stop"}]
        ),
    }
    before = {**_BARE, "gen_ai.prompt": json.dumps(_TYPED_HISTORY), "gen_ai.completion": json.dumps(_REPLY)}
    for name, attributes in (("current.json", current), ("deprecated.json", before)):
        path = tmp_path / name
        path.write_text(json.dumps(attributes, indent=2), encoding="utf-8")
        assert detect_format(path).name == "otel", name
        (graph,), rejects = _read(path)
        assert not rejects, name
        assert _roles(graph) == ["user", "assistant", "tool", "assistant*"], name
        texts = [n.message.text for n in graph.branches()[0].nodes]
        assert texts[0] == "Rain in Oslo?" and texts[-1] == "Yes: rainy, 8°C.", name
        reply = graph.sampled_nodes()[0]
        assert graph.generation(reply.id).model == "gpt-4-0613", name
    # two spans' attributes in one list: two traces, neither continues the other
    path = tmp_path / "two.json"
    path.write_text(json.dumps([before, {**before, "gen_ai.prompt": json.dumps(_TYPED_HISTORY[:1])}]))
    graphs, rejects = _read(path)
    assert not rejects and len(graphs) == 2
    assert sorted(len(g.branches()[0].nodes) for g in graphs) == [2, 4]


def test_an_openinference_llm_span_with_only_its_input_and_output_values_reads_the_messages_they_hold(
    tmp_path: Path,
) -> None:
    """An LLM span with no flattened messages, its ``input.value`` the messages sent as JSON text and its
    ``output.value`` the reply (Arize-ai/openinference js/packages/openinference-genai/test/__fixtures__/
    openinference_client_span_input_output_only.json @ 23d0985a4e4086fe5234ec232dd6038f49026692, texts changed).
    Hand count of the real file: one reply, after a user message, the assistant's text + call and its result.
    Before: ``chat_span_without_output``, nothing trained; after: 1 trained in those messages."""
    attributes = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4-0613",
        "input.value": json.dumps(_TYPED_HISTORY),
        "input.mime_type": "application/json",
        "output.value": json.dumps(_REPLY),
        "output.mime_type": "application/json",
        "llm.token_count.prompt": 61,
    }
    path = tmp_path / "span.json"
    path.write_text(json.dumps(attributes, indent=2), encoding="utf-8")
    (graph,), rejects = _read(path)
    assert not rejects
    assert _roles(graph) == ["user", "assistant", "tool", "assistant*"]
    assert graph.sampled_nodes()[0].message.text == "Yes: rainy, 8°C."


def test_calls_a_chat_span_logs_without_ids_take_the_ids_their_tool_spans_logged(tmp_path: Path) -> None:
    """any-agent's spans log a chat span's calls as ``[{"tool.name", "tool.args"}]`` with no id, and each tool span
    with the id the call had (``gen_ai.tool.call.id``): the call takes that id, so its tool span answers it and the
    next chat span (no input messages logged: the context is rebuilt) is trained. Shape of mozilla-ai/any-agent
    ``tests/assets/AGNO_trace.json`` and ``GOOGLE_trace.json`` @ 83e2395d (arguments as JSON text or an object).
    Hand count of each real file: 3 chat spans, 3 replies (two calls, then the answer), each after the previous
    reply and its tool's result. Before: each tool span answered no call (the call's id was synthesized), so 1 of 3
    trained, 2 ``context_unknown``; after 3 of 3."""
    system = {"role": "system", "content": "Use the tools."}
    user = {"role": "user", "content": "Write the year to a file."}
    spans = [
        _span(
            "0x01",
            {
                "gen_ai.operation.name": "call_llm",
                "gen_ai.input.messages": json.dumps([system, user]),
                "gen_ai.output": json.dumps([{"tool.name": "now", "tool.args": '{"tz": "UTC"}'}]),
                "gen_ai.output.type": "json",
            },
        ),
        _span(
            "0x02",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "now",
                "gen_ai.tool.call.id": "LlAGPjfO0",
                "gen_ai.output": '{"year": 2025}',
            },
        ),
        _span(
            "0x03",
            {
                "gen_ai.operation.name": "call_llm",
                "gen_ai.output": json.dumps([{"tool.name": "write", "tool.args": {"text": "2025"}}]),
                "gen_ai.output.type": "json",
            },
        ),
        _span(
            "0x04",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "write",
                "gen_ai.tool.call.id": "wzCUjvRq4",
                "gen_ai.output": "{}",
            },
        ),
        _span("0x05", {"gen_ai.operation.name": "call_llm", "gen_ai.output": "Done: 2025 written."}),
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"spans": spans, "final_output": "Done: 2025 written."}), encoding="utf-8")
    (graph,), rejects = _read(path)
    assert not rejects
    assert _roles(graph) == ["system", "user", "assistant*", "tool", "assistant*", "tool", "assistant*"]
    first, answer, second, written = graph.branches()[0].messages[2:6]
    assert isinstance(first, OptionCallMessage) and isinstance(answer, OptionResultMessage)
    assert isinstance(second, OptionCallMessage) and isinstance(written, OptionResultMessage)
    assert [c.invocation_id for c in first.calls] == ["LlAGPjfO0"] and answer.result.invocation_id == "LlAGPjfO0"
    assert [c.invocation_id for c in second.calls] == ["wzCUjvRq4"] and written.result.result == "{}"


def test_a_call_whose_logged_arguments_disagree_with_the_tool_span_that_ran_it_is_not_trained(tmp_path: Path) -> None:
    """A chat span that logs its call with arguments unlike those its tool span ran with (any-agent's LlamaIndex
    spans log every call's arguments as ``"{}"``: mozilla-ai/any-agent ``tests/assets/LLAMA_INDEX_trace.json``
    @ 83e2395d) does not say what the model emitted: that reply is context, not trained, and the call stands in the
    later replies' context with the arguments the tool ran with. Hand count of the real file: 5 replies; 3 calls
    logged with arguments that disagree with their tool spans, 1 text reply after them, 1 structured-output call in
    a context the trace does not hold: 1 trainable. Before: 4 trained (the 3 calls as ``{}``); after 1."""
    system = {"role": "system", "content": "Use the tools."}
    user = {"role": "user", "content": "What time is it?"}
    spans = [
        _span(
            "0x01",
            {
                "gen_ai.operation.name": "call_llm",
                "gen_ai.input.messages": json.dumps([system, user]),
                "gen_ai.output": json.dumps([{"tool.name": "now", "tool.args": "{}"}]),
                "gen_ai.output.type": "json",
            },
        ),
        _span(
            "0x02",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "now",
                "gen_ai.tool.args": '{"tz": "UTC"}',
                "gen_ai.output": "12:00",
            },
        ),
        _span("0x03", {"gen_ai.operation.name": "call_llm", "gen_ai.output": "It is noon."}),
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"spans": spans}), encoding="utf-8")
    (graph,), rejects = _read(path)
    assert not rejects
    assert _roles(graph) == ["system", "user", "assistant", "tool", "assistant*"]
    call = graph.branches()[0].messages[2]
    assert isinstance(call, OptionCallMessage) and call.calls[0].arguments == {"tz": "UTC"}
    assert call.calls[0].raw_arguments is None and "why_not_trained" in call.metadata


def _phoenix_span(span_id: str, kind: str, attributes: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": kind.lower(),
        "context": {"trace_id": "fixture-trace-1", "span_id": span_id},
        "span_kind": kind,
        "parent_id": "s01",
        "start_time": f"2026-07-09T00:00:{span_id[1:]}+00:00",
        "status_code": "OK",
        "attributes": attributes,
        "events": [],
    }


def test_phoenix_span_json_keeps_the_span_kind_beside_the_attributes_and_its_tool_spans_are_read(
    tmp_path: Path,
) -> None:
    """Phoenix's span JSON puts the OpenInference kind in ``span_kind`` beside the attributes, not in them
    (Arize-ai/phoenix tests/unit/pxi/evals/online_evals/fixtures/pxi_turn_trace.json @ bdff4b58dbe0: 9 LLM spans,
    each logging its whole input, 8 TOOL spans with ``tool.id``, ``tool.name``, ``output.value``). Hand count of the
    real file: 9 replies, each after the messages its span logs (4 assistant messages of an earlier turn in them as
    context): 9 trained before and after; before, its TOOL and AGENT spans were skipped as ``non_genai_span`` (9 of
    18 records), after all read. Here a second LLM span logs no input: only the tool span read places the result it
    was sampled after (before: it was not trained)."""
    llm = {
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "How many datasets?",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "list_datasets",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{}",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call-04",
    }
    tool = {"tool.name": "list_datasets", "tool.id": "call-04", "output.value": '{"datasets": 2}'}
    answer = {
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "There are 2.",
    }
    spans = [_phoenix_span("s02", "LLM", llm), _phoenix_span("s03", "TOOL", tool), _phoenix_span("s04", "LLM", answer)]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(spans), encoding="utf-8")
    (graph,), rejects = _read(path)
    assert not rejects
    assert _roles(graph) == ["user", "assistant*", "tool", "assistant*"]
    result = graph.branches()[0].messages[2]
    assert isinstance(result, OptionResultMessage) and result.result.result == '{"datasets": 2}'


def test_a_call_logged_with_blank_argument_text_is_the_call_a_later_span_s_input_sends_back(tmp_path: Path) -> None:
    """A tracer that accumulates a streamed call's argument deltas logs ``""`` for a call of no arguments, and the
    next request's input holds the same call with ``{}`` (pxi_turn_trace.json above, call-04). Blank text is no
    text: the two are one call, trained once in one conversation. Before: ``"arguments": ""`` was trained in a
    sample of its own, beside a branch holding the call as ``{}``."""
    llm = {
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "How many datasets?",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "list_datasets",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call-04",
    }
    history = {k.replace("output_messages.0", "input_messages.1"): v for k, v in llm.items() if "output" in k}
    history["llm.input_messages.1.message.tool_calls.0.tool_call.function.arguments"] = "{}"
    later = {
        **{k: v for k, v in llm.items() if k.startswith("llm.input_messages.0")},
        **history,
        "llm.input_messages.2.message.role": "tool",
        "llm.input_messages.2.message.tool_call_id": "call-04",
        "llm.input_messages.2.message.content": '{"datasets": 2}',
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "There are 2.",
    }
    path = tmp_path / "trace.json"
    path.write_text(json.dumps([_phoenix_span("s02", "LLM", llm), _phoenix_span("s04", "LLM", later)]))
    (graph,), rejects = _read(path)
    assert not rejects
    sampled = [n.message for n in graph.sampled_nodes()]
    assert isinstance(sampled[0], OptionCallMessage) and sampled[0].calls[0].raw_arguments is None
    settings = LinearizeSettings(
        tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
    )
    samples, stats, _ = convert_file(path, settings)
    assert (len(samples), stats.turns_trained) == (1, 2)  # the call and the answer, in one conversation


def test_a_span_whose_events_hold_its_prompt_and_completion_is_a_chat_span(tmp_path: Path) -> None:
    """The GenAI convention before messages became attributes logs them as span events: ``gen_ai.content.prompt``
    (``gen_ai.prompt``: the messages, or one message, as JSON text) and ``gen_ai.content.completion``
    (``gen_ai.completion``: the reply, here an Anthropic message of content blocks), with no operation name.
    Shape of Mirascope/mirascope docs/integrations/otel.md @ 5971c07fa5737d26f915baae7cda4002768c6f41 (its example
    output span, one span object as ``ReadableSpan.to_json`` writes it; texts changed). Hand count of the real span:
    one reply, after the user message. Before: unknown_format (0); after 1 trained."""
    completion = {"content": [{"text": "Try The Name of the Wind.", "type": "text"}], "role": "assistant"}
    span = _span("0xa22a446b2076ffe4", {"gen_ai.system": "", "gen_ai.request.model": "claude-3-5-sonnet-20240620"})
    span["events"] = [
        {
            "name": "gen_ai.content.prompt",
            "attributes": {"gen_ai.prompt": json.dumps({"content": "A book?", "role": "user"})},
        },
        {"name": "gen_ai.content.completion", "attributes": {"gen_ai.completion": json.dumps(completion)}},
    ]
    path = tmp_path / "span.json"
    path.write_text(json.dumps(span, indent=4), encoding="utf-8")
    assert detect_format(path).name == "otel"
    (graph,), rejects = _read(path)
    assert not rejects
    assert _roles(graph) == ["user", "assistant*"]
    assert graph.sampled_nodes()[0].message.text == "Try The Name of the Wind."


def test_a_span_s_message_events_are_its_input_and_its_choice_events_its_output(tmp_path: Path) -> None:
    """One event per input message (``gen_ai.system.message``, ``gen_ai.user.message``, ``gen_ai.assistant.message``
    with its ``tool_calls``, ``gen_ai.tool.message`` with the call's ``id``) and one ``gen_ai.choice`` per reply
    (``message``, ``finish_reason``): the event convention of open-telemetry/semantic-conventions
    docs/gen-ai/gen-ai-events.md (v1.27 - v1.36). An agent span carrying the same events keeps its own operation
    (the agent's copy of the run is no call). Hand count: one reply, after four messages."""
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    events = [
        {"name": "gen_ai.system.message", "attributes": {"content": "Be brief."}},
        {"name": "gen_ai.user.message", "attributes": {"content": "Rain in Oslo?"}},
        {"name": "gen_ai.assistant.message", "attributes": {"tool_calls": json.dumps([call])}},
        {"name": "gen_ai.tool.message", "attributes": {"content": "rainy", "id": "c1"}},
        {
            "name": "gen_ai.choice",
            "attributes": {"index": 0, "finish_reason": "stop", "message": json.dumps({"content": "Yes, rain."})},
        },
    ]
    chat = {**_span("0x01", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}), "events": events}
    agent = {**_span("0x02", {"gen_ai.operation.name": "invoke_agent"}), "events": events}
    path = tmp_path / "spans.json"
    path.write_text(json.dumps([chat, agent]), encoding="utf-8")
    (graph,), rejects = _read(path)
    assert not rejects
    assert _roles(graph) == ["system", "user", "assistant", "tool", "assistant*"]
    reply = graph.sampled_nodes()[0]
    assert reply.message.text == "Yes, rain." and graph.generation(reply.id).finish_reason == "stop"


def test_pydantic_ai_s_events_attribute_holds_the_span_s_messages(tmp_path: Path) -> None:
    """Pydantic AI's instrumentation version 1 (``event_mode='attributes'``, as Logfire shows it) keeps a chat span's
    messages in one attribute, ``events``: JSON text of ``[{"event.name": ..., **body}]``, the reply a
    ``gen_ai.choice`` whose ``message`` holds content parts (``{"kind": "thinking" | "text", "text"}``). Shape of
    pydantic/pydantic-ai ``pydantic_ai_slim/pydantic_ai/_instrumentation.py`` ``event_to_dict`` and
    ``messages.py`` ``otel_events`` @ 61c71f01b613094f18bc1e91fdd307f78b95ef5d. Hand count: one reply (its
    reasoning, then its text) after a system, user, assistant call and tool message. Before: a chat span with no
    messages (``chat_span_without_output``), nothing trained."""
    call = {"id": "c1", "type": "function", "function": {"name": "roll", "arguments": "{}"}}
    events = [
        {"content": "Be brief.", "role": "system", "gen_ai.system": "openai", "event.name": "gen_ai.system.message"},
        {"content": "Roll a die.", "role": "user", "gen_ai.system": "openai", "event.name": "gen_ai.user.message"},
        {"role": "assistant", "tool_calls": [call], "event.name": "gen_ai.assistant.message"},
        {"role": "tool", "id": "c1", "name": "roll", "content": "4", "event.name": "gen_ai.tool.message"},
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": [{"kind": "thinking", "text": "It said 4."}, {"kind": "text", "text": "You rolled a 4."}],
            },
            "event.name": "gen_ai.choice",
        },
    ]
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", "events": json.dumps(events)}
    path = tmp_path / "spans.json"
    path.write_text(json.dumps([_span("0x01", attributes)]), encoding="utf-8")
    (graph,), rejects = _read(path)
    assert not rejects
    assert _roles(graph) == ["system", "user", "assistant", "tool", "assistant*"]
    reply = graph.sampled_nodes()[0].message
    assert reply.text == "You rolled a 4." and [p.kind for p in reply.parts] == ["reasoning", "text"]


def test_a_span_whose_operation_is_named_outside_the_convention_but_logs_a_model_s_output_is_a_call(
    tmp_path: Path,
) -> None:
    """Latitude's telemetry names its model spans' operation ``completion`` (its test fixture
    ``LATITUDE_RENDERING_SPANS`` in latitude-dev/latitude-llm, an OTLP/JSON export): a span logging
    ``gen_ai.output.messages`` under an operation the convention does not name is a model call; an agent span that
    logs the run's messages keeps its own operation. Hand count: one reply. Before: ``non_genai_span``, nothing."""

    def otlp_span(span_id: str, attributes: dict[str, str]) -> dict[str, Any]:
        values = [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()]
        return {"traceId": "ID_0", "spanId": span_id, "name": "openai / gpt-4o", "attributes": values}

    history = [{"role": "user", "parts": [{"type": "text", "content": "Weather in Barcelona?"}]}]
    reply = [{"role": "assistant", "parts": [{"type": "text", "content": "Let me check."}]}]
    call = {
        "gen_ai.operation.name": "completion",
        "gen_ai.input.messages": json.dumps(history),
        "gen_ai.output.messages": json.dumps(reply),
    }
    agent = {**call, "gen_ai.operation.name": "invoke_agent"}
    export = {"resourceSpans": [{"scopeSpans": [{"spans": [otlp_span("ID_1", call), otlp_span("ID_2", agent)]}]}]}
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export), encoding="utf-8")
    (graph,), rejects = _read(path)
    assert not rejects
    assert _roles(graph) == ["user", "assistant*"]
