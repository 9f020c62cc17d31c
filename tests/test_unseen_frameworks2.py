"""A second sweep of agent frameworks' saved state, chat apps' exports and eval logs no other test reads, each
hand-written in the shape its writer produces (tests/fixtures/unseen/PROVENANCE.md, "Frameworks, second sweep"):
each file's books against a count made by hand, the context each trained reply sits after, no reply trained twice."""

from __future__ import annotations

import json
from pathlib import Path

from msgtrain.ingest.detect import detect_format
from tests.unseen_books import FIXTURES, books, contexts, graphs, said

AGENT_FRAMEWORK = FIXTURES / "agent-framework-thread.json"


def test_an_agent_framework_thread_trains_each_reply_after_the_messages_before_it() -> None:
    # Microsoft Agent Framework's serialised AgentThread: the store's messages as ChatMessage.to_dict writes them,
    # the role an enum object ({"type": "role", "value": ...}), the content a `contents` list of typed items
    # (function_call / function_result by call_id, a usage item). Before: no reader recognised the file (0 trained,
    # 1 reject); after: the call, the answer after its result, the second answer, each once.
    assert detect_format(AGENT_FRAMEWORK).name == "structural"
    assert books(AGENT_FRAMEWORK) == (3, 0, 0)
    question = ("user", "What is the weather in Oslo?")
    call = ("assistant", [("get_weather", {"city": "Oslo"})])
    result = ("tool", ("get_weather", "Cloudy, 4 C"))
    answer = ("assistant", "It is cloudy in Oslo, about 4 C.")
    assert contexts(AGENT_FRAMEWORK) == [
        [question, call],
        [question, call, result, answer],
        [question, call, result, answer, ("user", "And tomorrow?"), ("assistant", "Tomorrow looks sunny.")],
    ]
    (graph,) = graphs(AGENT_FRAMEWORK)
    # the agent's instructions and tools are the agent's, not the thread's: the log says it lacks the tools
    assert graph.metadata["context_incomplete"]["missing"] == ["tools"]
    names = {n.message.name for n in graph.nodes.values() if n.message.role == "assistant"}
    assert names == {"WeatherAgent"}  # the usage item is no text of the answer
    assert all("usage" not in str(n.message.text) for n in graph.nodes.values())


AGENTS_INPUT_LIST = FIXTURES / "openai-agents-input-list.json"


def test_an_agents_sdk_input_list_trains_each_reply_after_the_items_before_it_its_summary_untrained() -> None:
    # The OpenAI Agents SDK's RunResult.to_input_list() saved as JSON (Responses input items: easy user messages, a
    # reasoning item with a summary, a handoff call and its output, a tool call, output_text messages). A guard: read
    # right before this sweep. The summariser's summary is kept beside the call it preceded, never trained.
    assert detect_format(AGENTS_INPUT_LIST).name == "openai_responses"
    assert books(AGENTS_INPUT_LIST) == (4, 0, 0)
    ask = ("user", "Book me a table for two tonight.")
    handoff = ("assistant", [("transfer_to_booking_agent", {})])
    handed = ("tool", ("transfer_to_booking_agent", '{"assistant": "Booking Agent"}'))
    reserve = ("assistant", [("reserve_table", {"party": 2, "time": "19:00"})])
    done = ("assistant", "Done: a table for two at 19:00, booking A12.")
    assert contexts(AGENTS_INPUT_LIST) == [
        [ask, handoff],
        [ask, handoff, handed, reserve],
        [ask, handoff, handed, reserve, ("tool", ("reserve_table", "confirmed #A12")), done],
        [
            ask,
            handoff,
            handed,
            reserve,
            ("tool", ("reserve_table", "confirmed #A12")),
            done,
            ("user", "Thanks!"),
            ("assistant", "You are welcome."),
        ],
    ]
    (graph,) = graphs(AGENTS_INPUT_LIST)
    first = next(n for n in graph.nodes.values() if n.message.role == "assistant")
    (reasoning,) = first.message.parts
    assert reasoning.redacted and reasoning.text.startswith("The user wants a booking")


LOBECHAT = FIXTURES / "lobechat-export.json"


def test_a_chat_export_of_every_sessions_messages_in_one_list_gives_each_its_own_sessions_system_prompt() -> None:
    # LobeChat's export: state.messages holds the messages of every session (interleaved, each naming its
    # sessionId), state.sessions each agent's config.systemRole. Before: each conversation was trained after no
    # system prompt (the poem the model wrote under "You write four-line poems." trained as if sent bare); after:
    # each after its own session's prompt, the other session's never.
    poem = "Rain taps the glass,\nsoft and slow,\nthe gutters hum,\nthe rivers grow."
    assert contexts(LOBECHAT)[0] == [
        ("system", "You write four-line poems."),
        ("user", "A poem about rain."),
        ("assistant", poem),
    ]
    heads = sorted([said(n.message) for n in g.path(g.leaves()[0])][:2] for g in graphs(LOBECHAT))
    assert heads == [
        [("system", "You answer with sources."), ("user", "What causes tides?")],
        [("system", "You write four-line poems."), ("user", "A poem about rain.")],
    ]


def test_a_chat_exports_plugin_calls_are_the_calls_it_sent_not_an_empty_reply() -> None:
    # LobeChat keeps an assistant message's calls under `tools` ({id, identifier, apiName, arguments, type}) and
    # sends each as the function `identifier____apiName____type`. Before: the calling reply was trained as an empty
    # text and the reply after its result dropped (the result answered no call): 2 trained, 1 dropped; after: the
    # call after the question, the answer after the result, each once.
    assert books(LOBECHAT) == (3, 0, 0)
    name = "lobe-web-browsing____search____builtin"
    system, ask = ("system", "You answer with sources."), ("user", "What causes tides?")
    call = ("assistant", [(name, {"query": "cause of tides"})])
    result = ("tool", (name, '[{"title": "Tides", "content": "The Moon\'s gravity pulls the oceans."}]'))
    assert contexts(LOBECHAT)[1:] == [
        [system, ask, call],
        [system, ask, call, result, ("assistant", "Mostly the Moon's gravity, with the Sun's adding to it.")],
    ]


def test_a_chat_export_sessions_topics_are_each_a_conversation_under_the_sessions_system_prompt(tmp_path: Path) -> None:
    # a LobeChat session holds many topics, each its own conversation (its first message has no parent, every
    # message names its topicId); grouped by session alone, two topics were one list of two roots: the session was
    # rejected and both poems' replies counted lost
    export = json.loads(LOBECHAT.read_text(encoding="utf-8"))
    state = export["state"]
    state["topics"].append({"id": "tpc_c", "sessionId": "ses_poet", "title": "Sun"})
    asked = {"id": "msg_q1", "role": "user", "content": "A poem about the sun.", "sessionId": "ses_poet"}
    state["messages"] += [
        {**asked, "topicId": "tpc_c", "parentId": None},
        {
            **asked,
            "id": "msg_q2",
            "role": "assistant",
            "content": "The sun climbs high.",
            "topicId": "tpc_c",
            "parentId": "msg_q1",
        },
    ]
    path = tmp_path / "lobechat.json"
    path.write_text(json.dumps(export), encoding="utf-8")
    assert books(path) == (4, 0, 0)
    poet = ("system", "You write four-line poems.")
    trained = contexts(path)
    assert [poet, ("user", "A poem about the sun."), ("assistant", "The sun climbs high.")] in trained
    assert [c[:2] for c in trained if c[0] == poet] == [
        [poet, ("user", "A poem about rain.")],
        [poet, ("user", "A poem about the sun.")],
    ]


OPEN_WEBUI = FIXTURES / "openwebui-chat-params.json"


def test_an_open_webui_chat_trains_each_reply_after_the_system_prompt_of_its_params() -> None:
    # Open WebUI's export: a chat's own system prompt in chat.params.system (sent as the system message), the whole
    # tree in chat.history.messages (a regenerated first reply kept), the branch shown in chat.messages. Before: every
    # reply was trained after no system prompt; after: each after "Answer only in haiku.", the regenerated reply and
    # the one kept each once, the shown branch's copies not again.
    assert books(OPEN_WEBUI) == (3, 0, 0)
    system, sea = ("system", "Answer only in haiku."), ("user", "Describe the sea.")
    dunes = ("assistant", "Salt wind on the dunes")
    assert contexts(OPEN_WEBUI) == [
        [system, sea, ("assistant", "Grey waves fold and break")],
        [system, sea, dunes],
        [system, sea, dunes, ("user", "Now the mountains."), ("assistant", "Stone shoulders in snow")],
    ]


HAYSTACK = FIXTURES / "haystack-reasoning.json"


def test_haystack_messages_with_a_reasoning_part_are_read_with_their_reasoning() -> None:
    # Haystack 2.18's ChatMessage.to_dict: untyped parts {"text"}, {"tool_call"}, {"tool_call_result"} and, for a
    # reasoning model's reply, {"reasoning": {"reasoning_text", "extra"}}. Before: the whole conversation was
    # rejected for the reasoning part (0 trained, 2 lost); after: the call and the answer each once, the call's
    # reasoning kept with it.
    assert books(HAYSTACK) == (2, 0, 0)
    system, ask = ("system", "You are a math tutor."), ("user", "What is 17 * 3?")
    call = ("assistant", [("calculator", {"expression": "17*3"})])
    assert contexts(HAYSTACK) == [
        [system, ask, call],
        [system, ask, call, ("tool", ("calculator", "51")), ("assistant", "17 * 3 = 51.")],
    ]
    (graph,) = graphs(HAYSTACK)
    caller = next(n for n in graph.nodes.values() if n.message.role == "assistant")
    assert [p.text for p in caller.message.parts] == ["Use the calculator to be safe."]


AGENTS_SPANS = FIXTURES / "openai-agents-trace-spans.jsonl"


def test_agents_sdk_generation_spans_are_calls_each_reply_trained_once_after_its_own_input() -> None:
    # The OpenAI Agents SDK's spans as a tracing processor exports them (span.export(): object "trace.span",
    # span_data typed agent / generation / function). A guard: read right before this sweep. The second generation
    # re-sends the first call as history: it is trained once, in the first call's context.
    assert books(AGENTS_SPANS) == (2, 0, 0)
    system, ask = ("system", "You report the weather."), ("user", "Weather in Rome?")
    call = ("assistant", [("get_weather", {"city": "Rome"})])
    assert contexts(AGENTS_SPANS) == [
        [system, ask, call],
        [system, ask, call, ("tool", ("get_weather", "Sunny, 22 C")), ("assistant", "Sunny in Rome, 22 C.")],
    ]


DEEPEVAL = FIXTURES / "deepeval-test-run.json"


def test_a_deepeval_test_run_is_refused_and_books_each_actual_output_as_lost() -> None:
    # DeepEval's test run file: testCases each an app's actualOutput beside the input, its retrievalContext and the
    # metrics' verdicts, never the prompt the app built (its template is a hyperparameter, the context it filled in
    # a list): no context to train a reply in. Before: refused with 0 replies in the books; after: refused with
    # both actual outputs counted lost (the expected outputs are references, not replies).
    assert books(DEEPEVAL) == (0, 0, 2)


def test_message_rows_holding_lists_beside_sessions_with_prompts_are_read_not_faulted(tmp_path: Path) -> None:
    # the session join compares each message field with the sessions' ids: a field holding a list (the content
    # parts, tags) is no id. Before the guard: the comparison raised on an unhashable value.
    record = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi."}], "tags": ["a"]},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello."}], "tags": ["b"]},
        ],
        "sessions": [{"id": "s1", "config": {"systemRole": "Be brief."}}],
    }
    path = tmp_path / "export.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    assert books(path) == (1, 0, 0)
    assert contexts(path) == [[("user", "Hi."), ("assistant", "Hello.")]]


CHERRY = FIXTURES / "cherry-studio-backup.json"


def test_a_backup_keeping_message_texts_in_a_table_of_blocks_is_refused_counting_its_replies() -> None:
    # Cherry Studio's backup: indexedDB.topics[].messages name the blocks their texts are kept in
    # (indexedDB.message_blocks, by id), the assistant's prompt is inside the JSON text of the persisted store. No
    # reader joins them: refused. Before: refused with 0 replies in the books; after: its one reply counted lost.
    assert books(CHERRY) == (0, 0, 1)


LIBRECHAT_AGENT = FIXTURES / "librechat-agent-parts.json"


def test_a_librechat_agent_message_splits_into_its_calls_results_and_the_reply_after_them() -> None:
    # LibreChat's export of an agents-endpoint chat: the agent's message keeps every step in its content parts
    # ({"type": "think"}, {"type": "tool_call", "tool_call": {id, name, args, output}}, {"type": "text"}), with no
    # step boundary. Before: the tool_call part was refused and nothing trained (1 reply lost); after: the call with
    # its reasoning after the prompt, the text after the call's output (the model read it first), each once; the
    # export is marked for the agent's instructions and tools it never holds.
    assert books(LIBRECHAT_AGENT) == (2, 0, 0)
    ask, call = ("user", "Price of ACME?"), ("assistant", [("stock_quote", {"ticker": "ACME"})])
    assert contexts(LIBRECHAT_AGENT) == [
        [ask, call],
        [ask, call, ("tool", ("stock_quote", "ACME 12.40")), ("assistant", "ACME trades at 12.40.")],
    ]
    (graph,) = graphs(LIBRECHAT_AGENT)
    assert graph.metadata["context_incomplete"]["missing"] == ["system_prompt", "tools"]
    caller = next(n for n in graph.nodes.values() if n.message.role == "assistant")
    assert [p.text for p in caller.message.parts] == ["I should look the price up."]


BIG_AGI = FIXTURES / "bigagi-conversation.json"


def test_a_big_agi_conversation_reads_the_parts_of_its_fragments() -> None:
    # big-AGI's conversation (DConversation: messages of {id, role, fragments, generator, tokenCount}; each fragment
    # {ft: "content", part: {pt: "text", text}} or a reasoning annotation {pt: "ma", aType: "reasoning", aText};
    # ft "void" placeholders the UI showed). Before: the first reply was refused as empty and the conversation with
    # it (0 trained, the replies not even counted); after: both replies, each once, after the system message the
    # persona wrote.
    assert books(BIG_AGI) == (2, 0, 0)
    system, ask = ("system", "You are a careful developer."), ("user", "Regex for a 4-digit year?")
    first = ("assistant", "Use ^\\d{4}$.")
    assert contexts(BIG_AGI) == [
        [system, ask, first],
        [system, ask, first, ("user", "And for 19xx only?"), ("assistant", "Use ^19\\d{2}$.")],
    ]
    (graph,) = graphs(BIG_AGI)
    reply = next(n for n in graph.nodes.values() if n.message.role == "assistant")
    assert [p.kind for p in reply.message.parts] == ["reasoning", "text"]


def test_an_agent_framework_thread_two_agents_wrote_is_refused_not_trained_in_one_view(tmp_path: Path) -> None:
    # a group chat's thread: the assistant messages' author_name names two agents, each of which saw the other's
    # messages as it chose to; which is the policy is not in the log. Refused, its replies counted.
    thread = json.loads(AGENT_FRAMEWORK.read_text(encoding="utf-8"))
    thread["chat_message_store_state"]["messages"][5]["author_name"] = "PlannerAgent"
    path = tmp_path / "thread.json"
    path.write_text(json.dumps(thread), encoding="utf-8")
    assert books(path) == (0, 0, 3)
