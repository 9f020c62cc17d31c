"""Per-call logs of proxies, gateways and API clients no other test reads, each hand-written in the shape its writer
produces (tests/fixtures/unseen/PROVENANCE.md, "Per-call logs"): each call re-sends the whole history, under the
system prompt of its own time; each file's books against a count made by hand, the context each trained reply sits
after (the system prompt its own call sent), no reply trained twice, and the history copies neither trained nor
counted as turns lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgtrain.ingest.detect import detect_format
from msgtrain.run.parts import convert_file
from tests.unseen_books import FIXTURES, SETTINGS
from tests.unseen_books import books as _books
from tests.unseen_books import contexts as _trained
from tests.unseen_books import graphs as _graphs

HELICONE = FIXTURES / "helicone-export.jsonl"


def test_an_export_sorted_newest_first_is_one_conversation_each_reply_after_its_own_calls_system_prompt() -> None:
    # Helicone's export (request_body / response_body beside the request's metadata, sorted by created_at
    # descending): the last call, whose system prompt writes a later time, comes first. Before: three conversations,
    # one per call, each holding a copy of the history before it; after: one, each reply trained once, after the
    # system prompt its own call sent (the first two at 10:00, the third at 10:05).
    (graph,) = _graphs(HELICONE)
    assert detect_format(HELICONE).name == "structural"
    contexts = sorted(_trained(HELICONE), key=len)
    assert [c[-1] for c in contexts] == [
        ("assistant", [("lookup_order", {"order_id": "1042"})]),
        ("assistant", "Order 1042 has shipped and should arrive on August 5."),
        ("assistant", "No, a shipped order's address can no longer be changed."),
    ]
    assert ["10:00" in c[0][1] for c in contexts] == [True, True, False]
    assert "10:05" in contexts[2][0][1]
    assert [role for role, _ in contexts[2]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert [t["function"]["name"] for t in graph.env.tools] == ["lookup_order"]
    copies = [n for n in graph.nodes.values() if n.message.role == "assistant" and n.origin.value != "sampled"]
    assert [n.origin.value for n in copies] == ["carried", "carried"]
    assert _books(HELICONE) == (3, 0, 0)


ANTHROPIC = FIXTURES / "anthropic-memory-calls.jsonl"


def test_a_system_block_rewritten_between_calls_keeps_the_calls_one_conversation() -> None:
    # Anthropic Messages calls whose system is a list of blocks, the second a memory block (cache_control) the agent
    # rewrote before its third call. Before: the third call started a conversation of its own whose copies of the
    # first two replies were counted as dropped turns (3 trained, 2 dropped); after: one conversation, 3 trained,
    # the copies neither trained again nor counted.
    assert len(_graphs(ANTHROPIC)) == 1
    contexts = sorted(_trained(ANTHROPIC), key=len)
    assert [c[-1][1] for c in contexts] == [
        [("read_file", {"path": "setup.py"})],
        "It installs the package demo and its one dependency, requests.",
        "Use install_requires=['requests==2.32.*'].",
    ]
    assert ["<memory>(empty)</memory>" in c[0][1] for c in contexts] == [True, True, False]
    assert "<memory>setup.py: package demo, depends on requests</memory>" in contexts[2][0][1]
    assert _books(ANTHROPIC) == (3, 0, 0)


RESPONSES = FIXTURES / "responses-chain-instructions.jsonl"


def test_a_responses_chain_whose_instructions_change_trains_each_call_after_its_own_instructions() -> None:
    # OpenAI Responses calls chained by previous_response_id, each sending only its new items; the third sends other
    # instructions (they are not carried over by the chain). Before: 3 trained, the two copies under the new
    # instructions counted as dropped; after: 3 trained, one conversation, nothing dropped.
    assert len(_graphs(RESPONSES)) == 1
    contexts = sorted(_trained(RESPONSES), key=len)
    assert [c[0] for c in contexts] == [
        ("system", "You are a travel assistant. The user is in Paris."),
        ("system", "You are a travel assistant. The user is in Paris."),
        ("system", "You are a travel assistant. The user is in Lyon."),
    ]
    assert contexts[2][1:] == [
        ("user", "Do I need an umbrella?"),
        ("assistant", [("get_weather", {"city": "Paris"})]),
        ("tool", ("get_weather", '{"rain": true}')),
        ("assistant", "Yes, it is raining in Paris."),
        ("user", "I just arrived in Lyon. And here?"),
        ("assistant", [("get_weather", {"city": "Lyon"})]),
    ]
    assert _books(RESPONSES) == (3, 0, 0)


def _chat_call(system: str, turns: list[str], reply: str) -> dict[str, Any]:
    roles = ["user", "assistant"] * len(turns)
    messages = [{"role": "system", "content": system}] + [
        {"role": r, "content": t} for r, t in zip(roles, turns, strict=False)
    ]
    choice = {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
    return {"request": {"model": "m", "messages": messages}, "response": {"id": reply, "choices": [choice]}}


def test_calls_logged_in_any_order_join_the_conversation_that_re_sends_them(tmp_path: Path) -> None:
    # The same three calls (the last under an updated system prompt) in file order and newest first: one
    # conversation either way, each reply trained once after its own call's context, no copy counted as a turn.
    calls = [
        _chat_call("v1", ["hi"], "Hello!"),
        _chat_call("v1", ["hi", "Hello!", "2+2?"], "4."),
        _chat_call("v2", ["hi", "Hello!", "2+2?", "4.", "3+3?"], "6."),
    ]
    for name, ordered in (("oldest_first.jsonl", calls), ("newest_first.jsonl", calls[::-1])):
        path = tmp_path / name
        path.write_text("".join(json.dumps(c) + "\n" for c in ordered), encoding="utf-8")
        assert detect_format(path).name == "calls"
        assert len(_graphs(path)) == 1
        contexts = sorted(_trained(path), key=len)
        assert [(c[0][1], c[-1][1], len(c)) for c in contexts] == [
            ("v1", "Hello!", 3),
            ("v1", "4.", 5),
            ("v2", "6.", 7),
        ]
        assert _books(path) == (3, 0, 0)


def test_two_sessions_that_only_open_alike_stay_apart_whatever_their_system_prompts(tmp_path: Path) -> None:
    # The rule is a re-sent reply, never a shared opening: a second session starting with the same user message but
    # another reply is a conversation of its own, in any order.
    calls = [
        _chat_call("v1", ["hi"], "Hello!"),
        _chat_call("v2", ["hi"], "Hey there."),
        _chat_call("v2", ["hi", "Hey there.", "bye"], "Goodbye."),
    ]
    for ordered in (calls, calls[::-1]):
        path = tmp_path / "calls.jsonl"
        path.write_text("".join(json.dumps(c) + "\n" for c in ordered), encoding="utf-8")
        graphs = _graphs(path)
        assert sorted(len(g.nodes) for g in graphs) == [3, 5]
        assert _books(path) == (3, 0, 0)


PORTKEY = FIXTURES / "portkey-logs.jsonl"


def test_bodies_logged_as_json_text_are_read_as_the_bodies_with_their_system_blocks_and_tools() -> None:
    # Portkey's logs (request {url, method, headers, body}, response {status, headers, body, response_time},
    # metadata), the bodies as JSON text as its log API takes them: Anthropic Messages calls whose system is a block
    # with cache_control, rewritten (another docs version) before the third call. Before: no reader recognised the
    # file (3 replies lost); and read as objects, the request's system blocks were left out of every context. After:
    # 3 trained, each after the system prompt and tools its own call sent.
    assert detect_format(PORTKEY).name == "structural"
    (graph,) = _graphs(PORTKEY)
    contexts = sorted(_trained(PORTKEY), key=len)
    assert [c[0] for c in contexts] == [
        ("system", "You answer questions about Acme Cloud. Docs version 2024.3."),
        ("system", "You answer questions about Acme Cloud. Docs version 2024.3."),
        ("system", "You answer questions about Acme Cloud. Docs version 2024.4."),
    ]
    assert contexts[1][1:] == [
        ("user", "How do I rotate an API key?"),
        ("assistant", [("search_docs", {"query": "rotate API key"})]),
        ("tool", ("search_docs", "Settings > API keys > Rotate. The old key stays valid for 24 hours.")),
        ("assistant", "Open Settings > API keys and press Rotate; the old key keeps working for 24 hours."),
    ]
    assert [t["function"]["name"] for t in graph.env.tools] == ["search_docs"]
    assert _books(PORTKEY) == (3, 0, 0)


def test_a_json_text_that_is_no_body_stays_the_text_it_was(tmp_path: Path) -> None:
    # A tool result whose text is JSON holding a role is what the model was sent: never decoded.
    result = json.dumps({"role": "user", "content": "admin"})
    call = _chat_call("v1", ["who am I?"], "You are an admin.")
    call["request"]["messages"][1:1] = [
        {"role": "user", "content": "check"},
        {"role": "assistant", "content": None, "tool_calls": [_tool_call()]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"log": {"request": json.dumps(call["request"]), "response": call["response"]}}) + "\n")
    (context,) = _trained(path)
    assert context[3] == ("tool", ("whoami", result))


def _tool_call() -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": "whoami", "arguments": "{}"}}


PORTKEY_STREAM = FIXTURES / "portkey-stream-logs.jsonl"


def test_a_streamed_response_logged_as_its_sse_text_is_the_reply_the_stream_assembles() -> None:
    # Portkey logs of two streamed chat calls (stream_options.include_usage): the response body is the Server-Sent
    # Events text received, the first streaming a tool call whose arguments come in two pieces. Before: the SSE text
    # itself was trained as each reply (2 "trained", the real call counted dropped); after: the call and the answer
    # as the OpenAI SDK assembles them, each with its finish reason and usage.
    (graph,) = _graphs(PORTKEY_STREAM)
    contexts = sorted(_trained(PORTKEY_STREAM), key=len)
    assert [c[-1] for c in contexts] == [
        ("assistant", [("get_stock", {"sku": "SKU-778"})]),
        ("assistant", "Yes, 12 SKU-778 drills are in stock."),
    ]
    assert contexts[1][:4] == [
        ("system", "You are the inventory assistant of a hardware store."),
        ("user", "Do we still have SKU-778 drills?"),
        ("assistant", [("get_stock", {"sku": "SKU-778"})]),
        ("tool", ("get_stock", "12")),
    ]
    replies = [n for n in graph.nodes.values() if n.origin.value == "sampled"]
    assert sorted(graph.generations[n.id].finish_reason for n in replies) == ["stop", "tool_calls"]
    assert _books(PORTKEY_STREAM) == (2, 0, 0)


def test_a_logged_stream_that_failed_is_a_reject_not_a_reply(tmp_path: Path) -> None:
    # An Anthropic stream that ended in an error event produced nothing to train on: the record is rejected.
    events = [
        {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": []}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ]
    text = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    request = {"model": "claude", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"request": {"body": request}, "response": {"body": text}}) + "\n", encoding="utf-8")
    assert _trained(path) == []
    _, stats, _ = convert_file(path, SETTINGS)
    assert stats.turns_trained == 0
    assert stats.records_rejected == {"error_response": 1}


def test_a_responses_chain_logged_newest_first_is_read_as_the_calls_were_made(tmp_path: Path) -> None:
    # The Responses chain of responses-chain-instructions.jsonl, newest first: each call waits for the response it
    # continues. Before: the two later calls were rejected (their previous_response_id "not recorded earlier") and
    # their replies were not even counted lost (1 trained, 0 lost); after: as in file order, 3 trained.
    lines = RESPONSES.read_text(encoding="utf-8").splitlines()
    path = tmp_path / "newest_first.jsonl"
    path.write_text("\n".join(reversed(lines)) + "\n", encoding="utf-8")
    assert _trained(path) == _trained(RESPONSES)
    assert _books(path) == (3, 0, 0)


def test_a_responses_call_whose_previous_response_is_not_logged_counts_its_reply_lost(tmp_path: Path) -> None:
    lines = RESPONSES.read_text(encoding="utf-8").splitlines()
    path = tmp_path / "without_first.jsonl"
    path.write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
    assert _trained(path) == []
    _, stats, _ = convert_file(path, SETTINGS)
    assert stats.records_rejected == {"missing_context": 2}
    assert stats.turns_lost == 2


def _vllm_calls() -> list[dict[str, Any]]:
    """Two calls to a vLLM server (return_token_ids, logprobs), the second with n=2: request and response bodies."""
    system = {"role": "system", "content": "Answer with a number."}
    first = [system, {"role": "user", "content": "2+2?"}]
    second = [*first, {"role": "assistant", "content": "4"}, {"role": "user", "content": "3+3?"}]

    def choice(i: int, text: str, ids: list[int]) -> dict[str, Any]:
        logprobs = {"content": [{"token": f"t{t}", "logprob": -0.25 * (k + 1)} for k, t in enumerate(ids)]}
        message = {"role": "assistant", "content": text}
        return {"index": i, "message": message, "finish_reason": "stop", "token_ids": ids, "logprobs": logprobs}

    def response(prompt: list[int], *choices: dict[str, Any]) -> dict[str, Any]:
        return {"id": "cmpl", "object": "chat.completion", "model": "Qwen/Qwen3-8B", "prompt_token_ids": prompt,
                "choices": list(choices)}  # fmt: skip

    return [
        {"request": {"model": "Qwen/Qwen3-8B", "messages": first}, "response": response([1, 2], choice(0, "4", [19]))},
        {
            "request": {"model": "Qwen/Qwen3-8B", "messages": second, "n": 2},
            "response": response([1, 2, 19, 3], choice(0, "6", [21]), choice(1, "six", [22, 23])),
        },
    ]


def _samples(path: Path) -> list[tuple[Any, ...]]:
    """Each sampled reply with its parent's text and its engine facts, sorted."""
    out = []
    for graph in _graphs(path):
        for node in graph.nodes.values():
            if node.origin.value == "sampled":
                g = graph.generations[node.id]
                parent = graph.nodes[node.parent].message.text
                out.append((parent, node.message.text, g.token_ids, g.prompt_token_ids, g.logprobs, g.model))
    return sorted(out)


def test_a_proxys_vllm_log_keeps_the_engine_ids_and_n_choices_as_the_calls_reader_does(tmp_path: Path) -> None:
    # The same vLLM calls logged by a proxy under its own keys (request_body / response_body) and in the calls
    # format: the structural reading keeps the engine's ids, the prompt's ids, the logprobs and the model, and reads
    # n=2 choices as two sibling samples of one context, exactly as the calls reader does. Before: the ids were
    # dropped (the reply rendered from its text) and the n=2 call was refused (its 2 replies lost).
    calls = _vllm_calls()
    oracle = tmp_path / "calls.jsonl"
    oracle.write_text("".join(json.dumps(c) + "\n" for c in calls), encoding="utf-8")
    proxy = tmp_path / "proxy.jsonl"
    rows = [{"request_body": c["request"], "response_body": c["response"], "latency_ms": 90} for c in calls]
    proxy.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert detect_format(oracle).name == "calls" and detect_format(proxy).name == "structural"
    assert _samples(proxy) == _samples(oracle)
    assert [s[:3] for s in _samples(proxy)] == [
        ("2+2?", "4", (19,)),
        ("3+3?", "6", (21,)),
        ("3+3?", "six", (22, 23)),
    ]
    assert _samples(proxy)[2][4] == (-0.25, -0.5)
    assert _books(proxy) == _books(oracle)


HELICONE_GEMINI = FIXTURES / "helicone-gemini.jsonl"


def test_a_gateways_gemini_calls_are_read_with_their_system_instruction_and_function_declarations() -> None:
    # Helicone's export of Gemini generateContent calls (request_body: contents, systemInstruction as a Content of
    # text parts, tools as functionDeclarations; response_body: a GenerateContentResponse), the system instruction
    # writing the date of its rates, a day later for the third call. Before: every call refused (3 lost: the
    # contents were not paired with the response); after: 3 trained after their own system instruction and tools.
    (graph,) = _graphs(HELICONE_GEMINI)
    contexts = sorted(_trained(HELICONE_GEMINI), key=len)
    assert [c[0][1][-11:-1] for c in contexts] == ["2025-03-01", "2025-03-01", "2025-03-02"]
    assert contexts[2][1:] == [
        ("user", "How much is 100 USD in EUR?"),
        ("assistant", [("convert_currency", {"amount": 100, "to": "EUR"})]),
        ("tool", ("convert_currency", '{"result": 92.4}')),
        ("assistant", "100 USD is about 92.40 EUR."),
        ("user", "And tomorrow?"),
        ("assistant", "I only have today's rate; check again tomorrow."),
    ]
    assert [t["function"]["name"] for t in graph.env.tools] == ["convert_currency"]
    assert _books(HELICONE_GEMINI) == (3, 0, 0)


def test_a_gateways_responses_calls_pair_their_input_items_with_the_output(tmp_path: Path) -> None:
    # Responses calls through a gateway, each sending its whole input (store: false): the output items are the reply
    call = {"model": "gpt-4.1", "instructions": "Be brief.", "input": [{"role": "user", "content": "hi"}]}
    output = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]}]
    path = tmp_path / "gateway.jsonl"
    path.write_text(json.dumps({"request_body": call, "response_body": {"id": "r", "output": output}}) + "\n")
    assert _trained(path) == [[("system", "Be brief."), ("user", "hi"), ("assistant", "Hello!")]]


CAPTURE = FIXTURES / "devtools-capture.har"


def test_an_http_archives_exchanges_are_calls_streamed_or_base64_bodies_alike() -> None:
    # A browser's devtools export (HAR 1.2) of a web app: a script fetched, then two chat calls, the first streamed
    # (its content.text the SSE received), the second's content base64-encoded. Before: no reader recognised the
    # file (not even looked at: no log suffix); after: each exchange a record, the script a skip, the two replies
    # trained after the messages their own requests sent.
    assert detect_format(CAPTURE).name == "structural"
    assert _trained(CAPTURE) == [
        [
            ("system", "You are a concise writing assistant."),
            ("user", "Suggest a title for a post about tide pools."),
            ("assistant", "Life Between the Tides"),
        ],
        [
            ("system", "You are a concise writing assistant."),
            ("user", "Suggest a title for a post about tide pools."),
            ("assistant", "Life Between the Tides"),
            ("user", "Shorter."),
            ("assistant", "Tide Pools"),
        ],
    ]
    _, stats, _ = convert_file(CAPTURE, SETTINGS)
    assert (stats.turns_trained, stats.turns_lost, dict(stats.records_skipped)) == (2, 0, {"no_conversation": 1})


LANGFUSE = FIXTURES / "langfuse-observations.json"
LANGSMITH = FIXTURES / "langsmith-runs.jsonl"
FLIGHTS = [
    ("system", "You book flights for Acme Travel customers."),
    ("user", "Find me a flight from SFO to JFK on May 3."),
    ("assistant", [("search_flights", {"origin": "SFO", "destination": "JFK", "date": "2025-05-03"})]),
    ("tool", ("search_flights", '[{"flight": "AC 742", "departs": "08:10"}]')),
    ("assistant", "AC 742 leaves SFO at 08:10 on May 3. Shall I book it?"),
]


def test_langfuse_generations_that_sent_tools_are_calls_not_a_list_of_outputs() -> None:
    # Langfuse's observations API page ({data, meta}): a generation that sent tools logs its input as
    # {messages, tools}. Before: the page was read as one conversation of the generations' outputs, refused (2 lost);
    # after: each generation a call, trained after its own messages, with the tools it sent.
    (graph,) = _graphs(LANGFUSE)
    assert sorted(_trained(LANGFUSE), key=len) == [FLIGHTS[:3], FLIGHTS]
    assert [t["function"]["name"] for t in graph.env.tools] == ["search_flights"]
    assert _books(LANGFUSE) == (2, 0, 0)


def test_langsmith_llm_runs_carry_the_tools_they_were_invoked_with() -> None:
    # LangSmith runs (a chain run, two llm runs of lc-serialised messages): the tools bound to the chat model are in
    # extra.invocation_params. Before: trained without tools, flagged as lacking them; after: the run's tools.
    (graph,) = _graphs(LANGSMITH)
    assert sorted(_trained(LANGSMITH), key=len) == [FLIGHTS[:3], FLIGHTS]
    assert [t["function"]["name"] for t in graph.env.tools] == ["search_flights"]
    assert "context_incomplete" not in graph.metadata
    assert _books(LANGSMITH) == (2, 0, 0)


OTLP_LOGS = FIXTURES / "otlp-genai-logs.json"


def test_genai_events_exported_as_otlp_log_records_are_the_calls_they_describe() -> None:
    # An OTLP/JSON logs export (resourceLogs) of gen_ai.client.inference.operation.details events: each record the
    # system instructions, input and output messages and tool definitions of one call; the third call's
    # instructions say the customer is a member. Before: one no_conversation skip, its 3 replies silently lost;
    # after: 3 trained, each after its own instructions, with the tools.
    assert detect_format(OTLP_LOGS).name == "otel"
    (graph,) = _graphs(OTLP_LOGS)
    contexts = sorted(_trained(OTLP_LOGS), key=len)
    assert ["member" in c[0][1] for c in contexts] == [False, False, True]
    assert [c[-1][1] for c in contexts] == [
        [("lookup_policy", {"product": "headphones"})],
        "Yes, within 14 days, with a 10% restocking fee.",
        "Members pay no restocking fee.",
    ]
    assert [t["function"]["name"] for t in graph.env.tools] == ["lookup_policy"]
    assert _books(OTLP_LOGS) == (3, 0, 0)


def test_older_genai_message_events_as_log_records_are_read_as_their_spans_events(tmp_path: Path) -> None:
    # The message events of the earlier conventions (gen_ai.user.message, gen_ai.choice; the message in the body),
    # emitted as log records naming their span: one call per span.
    def event(name: str, span: str, body: dict[str, Any]) -> dict[str, Any]:
        values = [{"key": k, "value": {"stringValue": v}} for k, v in body.items()]
        return {"eventName": name, "traceId": "t1", "spanId": span, "body": {"kvlistValue": {"values": values}}}

    records = [
        event("gen_ai.system.message", "s1", {"content": "Be brief."}),
        event("gen_ai.user.message", "s1", {"content": "hi"}),
        event("gen_ai.choice", "s1", {"finish_reason": "stop"}) | {"body": {"kvlistValue": {"values": [
            {"key": "message", "value": {"kvlistValue": {"values": [
                {"key": "role", "value": {"stringValue": "assistant"}},
                {"key": "content", "value": {"stringValue": "Hello!"}},
            ]}}},
        ]}}},
    ]  # fmt: skip
    path = tmp_path / "logs.json"
    path.write_text(json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]}), encoding="utf-8")
    assert _trained(path) == [[("system", "Be brief."), ("user", "hi"), ("assistant", "Hello!")]]


def test_a_responses_call_continuing_a_previous_response_is_never_trained_after_its_new_items_alone(
    tmp_path: Path,
) -> None:
    # The chain of responses-chain-instructions.jsonl under a gateway's keys (request_body / response_body), which
    # only the openai_responses reader chains by previous_response_id. Before: the third call's reply was trained
    # after its instructions and its one new user message, a context the model never saw; after: it is kept as
    # context and counted (context_unknown), the second call (a tool output whose call is in the previous response)
    # rejected and counted, only the first call trained.
    rows = [json.loads(line) for line in RESPONSES.read_text(encoding="utf-8").splitlines()]
    path = tmp_path / "gateway.jsonl"
    lines = [json.dumps({"request_body": r["request"], "response_body": r["response"]}) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert _trained(path) == [
        [
            ("system", "You are a travel assistant. The user is in Paris."),
            ("user", "Do I need an umbrella?"),
            ("assistant", [("get_weather", {"city": "Paris"})]),
        ]
    ]
    assert _books(path) == (1, 1, 1)
