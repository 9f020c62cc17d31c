"""A sweep of agent frameworks' own logs no other test reads, each hand-written in the shape its writer produces
(tests/fixtures/unseen/PROVENANCE.md, "Runs" section): each file's books against a count made by hand, the context
each trained reply sits after (its system prompt the one of its own run), and no reply trained twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.detect import detect_format
from msgtrain.run.parts import convert_file
from tests.unseen_books import FIXTURES, SETTINGS
from tests.unseen_books import books as _books
from tests.unseen_books import contexts as _contexts
from tests.unseen_books import graphs as _graphs

AGNO = FIXTURES / "agno-sessions.json"


def test_a_run_that_stored_its_history_trains_only_its_own_replies_after_its_own_system_prompt() -> None:
    # Agno's sessions (store_history_messages, the default before 2.5): each run stores every message it sent,
    # the earlier runs' copied in with from_history: true after the run's own system prompt (which writes the current
    # time, so it differs run to run). Before: run 1's call and answer were trained again in run 2, after run 2's
    # system prompt (5 of 3 replies); after: each reply once, in the run that sampled it.
    contexts = _contexts(AGNO)
    weather = [c for c in contexts if c[0][1].startswith("You are a weather assistant.")]
    assert [c[-1] for c in weather] == [
        ("assistant", [("get_weather", {"city": "Paris"})]),
        ("assistant", "It is 18 C and cloudy in Paris."),
        ("assistant", "Tomorrow Paris will be sunny, 21 C."),
    ]
    assert "10:00:00" in weather[0][0][1] and "10:00:00" in weather[1][0][1]
    tomorrow = weather[2]
    assert "10:05:00" in tomorrow[0][1]  # the run's own system prompt, not the first run's
    assert [role for role, _ in tomorrow] == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
    (run2,) = [g for g in _graphs(AGNO) if "runs[1]" in g.graph_id]
    copies = [n for n in run2.nodes.values() if n.message.role == "assistant" and n.origin.value != "sampled"]
    assert [n.origin.value for n in copies] == ["carried", "carried"]


def test_a_runs_record_of_its_tool_calls_is_not_taken_for_the_tools_it_was_sent() -> None:
    # RunOutput.tools lists the calls the run made (tool_call_id, tool_name, tool_args, result), not schemas: the
    # run's graph holds no tools and says the log lacks them, instead of a "tool" that is a call record
    for graph in _graphs(AGNO):
        assert graph.env.tools == ()
    (run1,) = [g for g in _graphs(AGNO) if g.graph_id.startswith("agno-sessions.json#0 $.runs[0]")]
    assert run1.metadata["context_incomplete"]["missing"] == ["tools"]


def test_each_team_member_run_is_a_conversation_of_its_own_after_its_own_system_prompt() -> None:
    # A team run keeps its members' runs under member_responses, each with its own messages (the member's system
    # prompt, the task the leader delegated). Before: refused as replies beside the conversation (3 lost); after:
    # the leader's call and answer after the leader's prompt, the member's answer after its own.
    contexts = _contexts(AGNO)
    team = [c for c in contexts if c[0][1].startswith(("You coordinate a team.", "You are the News Agent."))]
    assert [c[-1] for c in team] == [
        ("assistant", [("delegate_task_to_member", {"member_id": "news", "task": "Find fusion news."})]),
        ("assistant", "Fusion: a new record at JET."),
        ("assistant", "JET set a fusion energy record."),
    ]
    assert team[2] == [
        ("system", "You are the News Agent. Find news."),
        ("user", "Find fusion news."),
        ("assistant", "JET set a fusion energy record."),
    ]
    assert team[1][3] == ("tool", ("delegate_task_to_member", "JET set a fusion energy record."))


def test_the_agno_sessions_books_count_each_reply_once_and_the_copies_as_not_trained() -> None:
    assert detect_format(AGNO).name == "structural"
    # 6 replies sampled (3 weather, 2 leader, 1 member); the 2 copies re-sent as history are in the books, untrained
    assert _books(AGNO) == (6, 2, 0)


CONTINUE = FIXTURES / "continue-session.json"


def test_a_prompt_sent_with_its_context_items_is_a_gap_not_the_typed_text_alone() -> None:
    # Continue's session file (history[] of {message, contextItems, promptLogs, toolCallStates}): a prompt's
    # contextItems (an @-mentioned file) were rendered into the message it sent, which holds the typed text only.
    # Before: the answer after the second prompt was trained after "what does a.py hold?" alone (4 of 4); after: the
    # three replies before it are trained, the one after it is kept as context and counted (3 trained, 1 dropped).
    contexts = _contexts(CONTINUE)
    assert [c[-1] for c in contexts] == [
        ("assistant", [("edit_existing_file", {"filepath": "a.py"})]),
        ("assistant", [("run_terminal_command", {"command": "ls"})]),
        ("assistant", "Done: a.py only."),
    ]
    assert [role for role, _ in contexts[2]] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert contexts[2][4] == ("tool", ("run_terminal_command", "a.py"))
    assert _books(CONTINUE) == (3, 1, 0)
    # the session keeps neither the system message nor the tools Continue sent with each request
    (graph,) = _graphs(CONTINUE)
    assert graph.metadata["context_incomplete"]["missing"] == ["system_prompt", "tools"]


def test_context_items_without_content_leave_the_prompt_as_it_was_sent(tmp_path: Path) -> None:
    session = json.loads(CONTINUE.read_text(encoding="utf-8"))
    for item in session["history"]:
        for context in item["contextItems"]:
            context["content"] = ""
    path = tmp_path / "session.json"
    path.write_text(json.dumps(session), encoding="utf-8")
    assert _books(path) == (4, 0, 0)
    assert _contexts(path)[-1][-2:] == [("user", "what does a.py hold?"), ("assistant", "It sets bar to 1.")]


BRAINTRUST = FIXTURES / "braintrust-spans.jsonl"


def test_llm_spans_that_log_their_tools_in_metadata_train_each_call_once_with_those_tools() -> None:
    # Braintrust's logs export (a wrapped OpenAI client: each llm span's input the messages, output the choices,
    # metadata the model, provider and tools; a task span over them, a tool span beside them). Before: 3 of 3 trained
    # but with no tools (they were in metadata; the graph flagged as missing them); after: the calls' tools.
    contexts = _contexts(BRAINTRUST)
    assert [c[-1] for c in contexts] == [
        ("assistant", [("reset_password", {"user": "bob"})]),
        ("assistant", "Done, check your email."),
        ("assistant", "You're welcome."),
    ]
    assert contexts[-1][0] == ("system", "You are a support bot.")
    assert [role for role, _ in contexts[-1]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    (graph,) = _graphs(BRAINTRUST)
    assert [t["function"]["name"] for t in graph.env.tools] == ["reset_password"]
    assert "context_incomplete" not in graph.metadata
    assert _books(BRAINTRUST) == (3, 0, 0)


@pytest.mark.parametrize(
    "listed",
    [
        [{"name": "calculator", "invocations": 0}],
        [{"name": "search", "enabled": False}],
        [{"name": "retries", "type": "counter"}],
    ],
)
def test_a_metadata_list_of_named_objects_that_are_not_schemas_is_not_the_tools_sent(
    tmp_path: Path, listed: list[dict[str, Any]]
) -> None:
    # metadata is a bag of anything: a list of {name, invocations} counts uses, {name, enabled} is a toggle. Before:
    # taken for the tools the model was sent and rendered into every context as a schema.
    row = {
        "input": [{"role": "user", "content": "2+2?"}],
        "output": [{"role": "assistant", "content": "4"}],
        "metadata": {"model": "m", "tools": listed},
    }
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    (graph,) = _graphs(path)
    assert graph.env.tools == ()


RLLM = FIXTURES / "rllm-steps.jsonl"


def test_steps_that_each_log_the_whole_conversation_so_far_train_each_reply_once() -> None:
    # rLLM's trajectory steps (Step: chat_completions, the agent's whole message list after the step's reply, beside
    # model_response, observation, reward, mc_return): step 2's list re-sends step 1's. Before: step 1's reply was
    # trained again in step 2's row (3 of 2; each row has its reward, so the run's duplicate check does not judge
    # it); after: each reply once, in its own step's row, the copy context there.
    contexts = _contexts(RLLM)
    assert [c[-1] for c in contexts] == [("assistant", "<think>divide</think>\nx=3"), ("assistant", "x=2")]
    assert contexts[1] == [
        ("system", "Solve step by step."),
        ("user", "Find x: 2x=4"),
        ("assistant", "<think>divide</think>\nx=3"),
        ("user", "Your answer is wrong. Try again."),
        ("assistant", "x=2"),
    ]
    step2 = next(g for g in _graphs(RLLM) if "steps[1]" in g.graph_id)
    copy = next(n for n in step2.nodes.values() if n.message.text == "<think>divide</think>\nx=3")
    assert copy.origin.value == "carried"
    assert _books(RLLM) == (2, 0, 0)


def test_conversations_of_a_list_that_do_not_re_send_each_other_are_each_trained(tmp_path: Path) -> None:
    row = json.loads(RLLM.read_text(encoding="utf-8"))
    row["steps"][1]["chat_completions"][2] = {"role": "assistant", "content": "x=5"}  # not step 1's reply
    path = tmp_path / "steps.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert [c[-1][1] for c in _contexts(path)] == ["<think>divide</think>\nx=3", "x=5", "x=2"]


AMP = Path(__file__).parent.parent / "sample_logs" / "amp" / "T-0e5a.json"


def test_an_amp_thread_trains_each_response_after_the_runs_it_was_sent_and_stops_at_a_rejected_run() -> None:
    # Amp's thread file (Anthropic blocks; tool_result blocks keyed by toolUseID holding the tool's run). Before: read
    # by the anthropic reader, the first run's result answered no call (unpaired_result): 1 of 5 trained; the
    # structural reader, forced, trains all 5, the last after a run the user rejected (what Amp sent for it is not
    # logged). After: 4 trained, each after the results before it; the fifth carried, saying why.
    assert detect_format(AMP).name == "amp"
    contexts = _contexts(AMP)
    assert [c[-1] for c in contexts] == [
        ("assistant", [("Bash", {"cmd": "ls tests | wc -l"})]),
        ("assistant", [("Read", {"path": "tests/test_a.py"})]),
        ("assistant", "tests/ holds 3 files; test_a.py alone has 2 tests."),
        ("assistant", [("Bash", {"cmd": "rm -rf build"})]),
    ]
    assert contexts[2][2] == ("tool", ("Bash", '{"output":"3\\n","exitCode":0}'))
    assert contexts[2][4] == ("tool", ("Read", "def test_one(): pass\ndef test_two(): pass"))
    (graph,) = _graphs(AMP)
    assert graph.metadata["context_incomplete"]["missing"] == ["system_prompt", "tools"]
    (last,) = [n for n in graph.nodes.values() if n.message.text == "Understood, I left the build folder alone."]
    assert last.origin.value == "carried"
    assert "rejected-by-user" in last.message.metadata["why_not_trained"]
    assert _books(AMP) == (4, 1, 0)


def test_an_amp_compaction_ends_what_the_thread_holds_of_the_context(tmp_path: Path) -> None:
    thread = json.loads(AMP.read_text(encoding="utf-8"))
    summary = {"type": "summary", "summary": {"type": "message", "summary": "Counted the tests."}}
    thread["messages"][6:6] = [{"role": "info", "messageId": 99, "content": [summary]}]
    path = tmp_path / "T-1.json"
    path.write_text(json.dumps(thread), encoding="utf-8")
    assert _books(path) == (3, 2, 0)
    assert [c[-1][1] for c in _contexts(path)][-1] == "tests/ holds 3 files; test_a.py alone has 2 tests."


@pytest.mark.parametrize(
    ("info", "ends"),
    [
        ({"type": "manual_bash_invocation", "args": {"cmd": "git status"}, "hidden": False}, True),
        ({"type": "text", "text": "Always answer in French."}, True),
        ({"type": "manual_bash_invocation", "args": {"cmd": "git status"}, "hidden": True}, False),
        ({"type": "text", "text": "  "}, False),
    ],
)
def test_an_amp_info_message_the_model_is_sent_ends_what_the_thread_holds(
    tmp_path: Path, info: dict[str, Any], ends: bool
) -> None:
    # A command the user ran (manual_bash_invocation) or a note is sent with the next request in a form Amp builds
    # and does not log. Before: dropped, and the replies after it trained in a context without it.
    thread = json.loads(AMP.read_text(encoding="utf-8"))
    thread["messages"][6:6] = [{"role": "info", "messageId": 99, "content": [info]}]
    path = tmp_path / "T-1.json"
    path.write_text(json.dumps(thread), encoding="utf-8")
    assert _books(path) == ((3, 2, 0) if ends else (4, 1, 0))


def test_an_unfinished_amp_response_ends_what_the_thread_holds(tmp_path: Path) -> None:
    # The module's promise: a response that did not complete ends the known context. Before: only that reply was
    # carried, and the ones after it were trained after the partial response.
    thread = json.loads(AMP.read_text(encoding="utf-8"))
    thread["messages"][5]["state"] = {"type": "cancelled"}
    path = tmp_path / "T-1.json"
    path.write_text(json.dumps(thread), encoding="utf-8")
    assert _books(path) == (2, 3, 0)


LITELLM_SPEND = FIXTURES / "litellm-spend-logs.json"


def test_spend_log_rows_train_the_response_their_json_text_holds_and_skip_rows_without_prompts() -> None:
    # LiteLLM's proxy spend logs (LiteLLM_SpendLogs rows: messages and response as the JSON text of the request's
    # messages and of the ChatCompletion; "{}" for both where the proxy does not store prompts). Before: each reply
    # trained was the response's whole JSON text, and the third row trained "{}" after a user message "{}" (3 of
    # 2, none right); after: the call and the answer, each after its own messages, and the third row skipped.
    contexts = _contexts(LITELLM_SPEND)
    assert [c[-1] for c in contexts] == [
        ("assistant", [("get_time", {"city": "Tokyo"})]),
        ("assistant", "It is 21:04 in Tokyo."),
    ]
    assert contexts[1][0] == ("system", "You answer with the time.")
    assert contexts[1][3] == ("tool", ("get_time", "21:04"))
    assert _books(LITELLM_SPEND) == (2, 0, 0)


def test_a_completion_that_is_json_text_of_something_else_stays_the_reply_it_is(tmp_path: Path) -> None:
    row = {"messages": [{"role": "user", "content": "Answer in JSON."}], "response": '{"answer": 4}'}
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([row]), encoding="utf-8")
    assert _contexts(path) == [[("user", "Answer in JSON."), ("assistant", '{"answer": 4}')]]


@pytest.mark.parametrize("answer", ["[]", "{}", "null"])
def test_a_sampled_answer_that_is_the_json_of_an_empty_value_is_trained(tmp_path: Path, answer: str) -> None:
    # "[]" is what a model answers when no entity / no tool fits (JSON extraction rows, xLAM-style answers); only an
    # empty-JSON *prompt* is a column left empty. Before the fix such a reply vanished from the books (not trained,
    # not counted).
    row = {"prompt": "List the people named in: 'The sky is blue.' Answer as a JSON array.", "completion": answer}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert _contexts(path) == [[("user", row["prompt"]), ("assistant", answer)]]
    assert _books(path) == (1, 0, 0)


LLAMA_INDEX = FIXTURES / "llamaindex-chat-store.json"


def test_a_chat_store_trains_each_chat_after_its_blocks_and_the_calls_kept_in_additional_kwargs() -> None:
    # LlamaIndex's SimpleChatStore as persist() writes it (one JSON string holding the store's JSON text; store keyed
    # by chat; ChatMessage {role, additional_kwargs, blocks}, the OpenAI tool calls and the answered call's id in
    # additional_kwargs). Before: unrecognised (no content key); after: each chat a conversation of its own, the call
    # and the answer after the tool's result.
    contexts = _contexts(LLAMA_INDEX)
    assert [c[-1] for c in contexts] == [
        ("assistant", [("multiply", {"a": 2, "b": 21})]),
        ("assistant", "2*21 = 42."),
        ("assistant", "Hi!"),
    ]
    assert contexts[1] == [
        ("system", "You are a math agent."),
        ("user", "What is 2*21?"),
        ("assistant", [("multiply", {"a": 2, "b": 21})]),
        ("tool", ("multiply", "42")),
        ("assistant", "2*21 = 42."),
    ]
    assert contexts[2] == [("user", "Say hi."), ("assistant", "Hi!")]
    assert _books(LLAMA_INDEX) == (3, 0, 0)


def _li(role: str, text: str, kind: str = "text") -> dict[str, Any]:
    block = {"block_type": kind, ("content" if kind == "thinking" else "text"): text}
    return {"role": role, "additional_kwargs": {}, "blocks": [block]}


def test_chats_of_a_store_alike_in_roles_are_each_trained_not_taken_for_one_chats_prefix(tmp_path: Path) -> None:
    # Before: contents under ``blocks`` compared as "nothing", so a chat whose roles open another's was dropped as
    # its prefix, neither trained nor counted (2 of 4 replies).
    store = {
        "chatA": [_li("user", "hi"), _li("assistant", "Hello!"), _li("user", "A joke?"), _li("assistant", "Why...")],
        "chatB": [_li("user", "hello"), _li("assistant", "Hi there!")],
    }
    path = tmp_path / "chat_store.json"
    path.write_text(json.dumps({"store": store, "class_name": "SimpleChatStore"}), encoding="utf-8")
    assert sorted(c[-1][1] for c in _contexts(path)) == ["Hello!", "Hi there!", "Why..."]
    assert _books(path) == (3, 0, 0)


def test_a_chat_message_of_before_blocks_keeps_its_calls_in_additional_kwargs_too(tmp_path: Path) -> None:
    # ChatMessage before LlamaIndex 0.12: {role, content, additional_kwargs}. Before: the reply read as an empty text
    # and the tool message answering no call, the file refused (2 lost); after: as the blocks form.
    store = json.loads(json.loads(LLAMA_INDEX.read_text(encoding="utf-8")))
    chat = [
        {
            "role": m["role"],
            "content": "".join(b["text"] for b in m["blocks"]) or None,
            "additional_kwargs": m["additional_kwargs"],
        }
        for m in store["store"]["user1"]
    ]
    path = tmp_path / "chat_store.json"
    path.write_text(json.dumps({"store": {"chat_history": chat}, "class_name": "SimpleChatStore"}), encoding="utf-8")
    assert _contexts(path) == _contexts(LLAMA_INDEX)[:2]


MASTRA = FIXTURES / "mastra-messages.json"


def test_stored_messages_keeping_ui_parts_under_content_train_each_step_after_its_results() -> None:
    # Mastra's memory messages (MastraMessageV2: content {format: 2, parts: AI SDK 4 UI parts, content,
    # toolInvocations}): the assistant's parts hold a tool-invocation (its call and result) then the text. Before:
    # the file refused (content an object), 0 of 3 trained; after: the call, the answer after its result, the next one.
    contexts = _contexts(MASTRA)
    assert [c[-1] for c in contexts] == [
        ("assistant", [("weatherTool", {"city": "Oslo"})]),
        ("assistant", "It is 3 C in Oslo."),
        ("assistant", "I only know today's weather."),
    ]
    assert contexts[1][2] == ("tool", ("weatherTool", '{"temp": 3}'))
    assert [role for role, _ in contexts[2]] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert _books(MASTRA) == (3, 0, 0)


def test_a_stored_message_with_attachments_is_a_gap_like_an_attached_file(tmp_path: Path) -> None:
    # AI SDK 4 keeps the files sent with a message in content.experimental_attachments, not in its parts. Before:
    # dropped, and the replies about the picture trained without it; after: the reply after it kept as context and
    # counted, the one before trained.
    messages = json.loads(MASTRA.read_text(encoding="utf-8"))
    attachment = {"name": "sky.png", "contentType": "image/png", "url": "https://example.com/sky.png"}
    messages[2]["content"]["experimental_attachments"] = [attachment]
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    assert [c[-1][1] for c in _contexts(path)] == [[("weatherTool", {"city": "Oslo"})], "It is 3 C in Oslo."]
    assert _books(path)[0] == 2 and sum(_books(path)) == 3


ZED = FIXTURES / "zed-thread.json"
ZED_V02 = FIXTURES / "zed-thread-v02.json"


def test_a_thread_of_tagged_messages_trains_each_agent_call_after_its_results() -> None:
    # Zed's agent thread (DbThread 0.3.0, the JSON of threads.data: messages as Rust enum variants {"User": ...} /
    # {"Agent": ...}, parts {"Text"} / {"Thinking"} / {"ToolUse"} / {"Mention"}, each Agent message one model call
    # with its calls' results under tool_results). Before: unrecognised; after: the call and the answer after its
    # result, the thread marked for the system prompt and tools Zed builds per request. The second prompt mentions a
    # file whose content Zed sent beside the text: the reply after it is counted, never trained without it.
    contexts = _contexts(ZED)
    assert [c[-1] for c in contexts] == [
        ("assistant", [("terminal", {"command": "pytest -q"})]),
        ("assistant", "All 3 tests pass."),
    ]
    assert contexts[1][:3] == [
        ("user", "run the tests in [@README.md](file:///srv/proj/README.md)"),
        ("assistant", [("terminal", {"command": "pytest -q"})]),
        ("tool", ("terminal", "3 passed")),
    ]
    (graph,) = _graphs(ZED)
    assert graph.metadata["context_incomplete"]["missing"] == ["system_prompt", "tools"]
    assert _books(ZED) == (2, 1, 0)


def test_a_thread_of_segmented_messages_sends_each_prompt_after_the_context_loaded_for_it() -> None:
    # Zed's threads before 0.3 (SerializedMessage: role, segments, tool_uses beside tool_results, context). Before:
    # read as a chat list whose first reply held nothing (empty_reply), the file refused (0 of 3); after: 3 of 3,
    # the last after the prompt with the context Zed loaded for it first.
    contexts = _contexts(ZED_V02)
    assert [c[-1] for c in contexts] == [
        ("assistant", [("terminal", {"command": "pytest -q"})]),
        ("assistant", "All 3 tests pass."),
        ("assistant", "It sets x to 1."),
    ]
    (graph,) = _graphs(ZED_V02)
    prompt = next(n.message for n in graph.nodes.values() if "what is in a.py?" in n.message.text)
    assert [p.text for p in prompt.parts] == [
        "<context>\n<files>\n```a.py\nx = 1\n```\n</files>\n</context>",
        "what is in a.py?",
    ]
    assert graph.metadata["context_incomplete"]["missing"] == ["system_prompt", "tools"]
    assert _books(ZED_V02) == (3, 0, 0)


LANGFUSE = FIXTURES / "langfuse-trace.json"


def test_a_trace_of_generations_trains_each_call_once_whatever_the_trace_logs_as_its_own_input() -> None:
    # A Langfuse trace as its API returns it (TraceWithFullDetails: the traced function's args and return value as
    # the trace's input / output, its OpenAI calls as GENERATION observations of input messages and output message).
    # Before: the observations' outputs were taken for a list of wrapped messages without their inputs, the file
    # refused (no_prompt, 2 lost); after: the two calls, the second after the first's history.
    contexts = _contexts(LANGFUSE)
    assert [c[-1] for c in contexts] == [
        ("assistant", "November, for the autumn leaves."),
        ("assistant", "Early April."),
    ]
    assert contexts[1][0] == ("system", "You are a concise travel assistant.")
    assert _books(LANGFUSE) == (2, 0, 0)


def test_a_trace_whose_output_is_its_last_calls_text_is_that_calls_summary(tmp_path: Path) -> None:
    # the trace's input a prompt text and its output the text of the last call's message, a span of the agent beside
    # the calls: the trace's pair is a summary of the calls below (before: compared with the message itself, it was
    # not, and the file was refused for replies beside its pair, 2 lost)
    trace = json.loads(LANGFUSE.read_text(encoding="utf-8"))
    trace["input"] = "And for cherry blossoms?"
    span = {"id": "obs-s", "traceId": "trace-1", "type": "SPAN", "name": "agent", "input": {"q": 1}, "output": {"a": 2}}
    trace["observations"].insert(0, span)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    assert [c[-1][1] for c in _contexts(path)] == ["November, for the autumn leaves.", "Early April."]
    assert _books(path) == (2, 0, 0)


AUTOGEN_TEAM = FIXTURES / "autogen-team-state.json"


def test_a_team_state_reads_each_agent_from_its_own_context_and_skips_the_managers_transcript() -> None:
    # AutoGen 0.4 team.save_state(): the group chat manager's message_thread (every agent's turns, one list) beside
    # each AssistantAgent's llm_context. Before: both agents trained from their contexts, and the thread refused as
    # multi_agent (its 2 turns counted lost a second time, the reject telling to save the agents' states, which the
    # file holds); after: the same 2 turns trained, the thread skipped as their transcript.
    contexts = _contexts(AUTOGEN_TEAM)
    assert sorted(contexts) == sorted(
        [
            [
                ("system", "You are a poet. Write haikus."),
                ("user", "Write a haiku about rain."),
                ("assistant", "Soft rain on the roof"),
            ],
            [("user", "Write a haiku about rain."), ("user", "Soft rain on the roof"), ("assistant", "APPROVE")],
        ]
    )
    _, stats, _ = convert_file(AUTOGEN_TEAM, SETTINGS)
    assert (stats.turns_trained, stats.turns_lost) == (2, 0)
    events = list(read_events(detect_format(AUTOGEN_TEAM), AUTOGEN_TEAM))
    assert [e.reason for e in events if type(e).__name__ == "ReadSkip"] == [
        "team_transcript: each agent's turns in it are read from that agent's own model context"
    ]


def test_a_chat_list_with_a_turn_no_context_holds_is_still_refused(tmp_path: Path) -> None:
    state = json.loads(AUTOGEN_TEAM.read_text(encoding="utf-8"))
    thread = state["agent_states"]["RoundRobinGroupChatManager_8f3c"]["message_thread"]
    thread.append(
        {"source": "poet", "models_usage": None, "metadata": {}, "content": "A second haiku", "type": "TextMessage"}
    )
    path = tmp_path / "team_state.json"
    path.write_text(json.dumps(state), encoding="utf-8")
    codes = [e.error.code for e in read_events(detect_format(path), path) if type(e).__name__ == "ReadReject"]
    assert codes == ["multi_agent"]


def test_cumulative_lists_beside_a_scores_list_train_each_reply_once(tmp_path: Path) -> None:
    # A scores list beside message lists that each re-send the one before it: the scored group's shared history (none
    # here: the rollouts part after the prompt) no longer overwrites the replies the earlier list already held.
    # Before: A1 trained in both rows (3 of 2).
    s, u, a1 = (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "A1"},
    )
    u2, a2 = {"role": "user", "content": "More"}, {"role": "assistant", "content": "A2"}
    row = {"id": "t", "messages": [[s, u, a1], [s, u, a1, u2, a2]], "scores": [0.0, 1.0]}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert sorted(c[-1][1] for c in _contexts(path)) == ["A1", "A2"]


def test_a_follow_up_kept_beside_the_messages_is_not_read_as_a_run_of_its_own(tmp_path: Path) -> None:
    # A list beside the messages whose items neither name their run or agent nor open with their own system prompt
    # (a continuation: its list opens at the next user turn) was sampled after a history it does not hold. Before:
    # its reply trained after "Make it cheaper." alone, with no system prompt; after: not trained, counted.
    record = {
        "messages": [
            {"role": "system", "content": "You are a travel agent."},
            {"role": "user", "content": "A trip to Rome?"},
            {"role": "assistant", "content": "Three days in Rome: 900 EUR."},
        ],
        "continuations": [
            {
                "id": "c1",
                "messages": [
                    {"role": "user", "content": "Make it cheaper."},
                    {"role": "assistant", "content": "Two days: 600 EUR."},
                ],
            }
        ],
    }
    path = tmp_path / "followup.json"
    path.write_text(json.dumps({"data": [record]}), encoding="utf-8")
    assert "Two days: 600 EUR." not in [c[-1][1] for c in _contexts(path)]
    trained, _, lost = _books(path)
    assert trained + lost >= 2  # every reply in the books


JSON_TEXT_COLUMNS = FIXTURES / "json-text-columns.jsonl"


def test_a_row_keeping_its_messages_and_tools_as_json_text_trains_the_conversation_they_hold() -> None:
    # A dataset row whose messages and tools columns are JSON text (Parquet datasets of agent trajectories keep them
    # so, e.g. Agent-Ark/Toucan-1.5M's messages / tools strings beside question and subset_name). Before:
    # unrecognised (no message list in the row); after: the call and the answer after its result, with the tools.
    contexts = _contexts(JSON_TEXT_COLUMNS)
    assert [c[-1] for c in contexts] == [
        ("assistant", [("weather", {"city": "Rome"})]),
        ("assistant", "20 C in Rome."),
    ]
    assert contexts[1][0] == ("system", "You can call tools.")
    (graph,) = _graphs(JSON_TEXT_COLUMNS)
    assert [t["function"]["name"] for t in graph.env.tools] == ["weather"]
    assert _books(JSON_TEXT_COLUMNS) == (2, 0, 0)


def test_a_text_field_that_merely_opens_like_a_list_stays_text(tmp_path: Path) -> None:
    row = {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        "note": "[x] done",
    }
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert _contexts(path) == [[("user", "hi"), ("assistant", "hello")]]


SPLIT_CALLS = FIXTURES / "split-call-events.jsonl"


def test_a_call_logged_as_a_request_record_then_a_response_record_is_one_call() -> None:
    # An agent's own JSONL event log (llm_request with messages and tools, llm_response with the ChatCompletion,
    # sharing request_id; tool_result events between). Before: the responses refused (no_prompt: no messages in
    # their record), the call trained only as history of the second request, the answer lost (1 of 2); after: each
    # response joined to its request, 2 of 2, the answer after the call's result, with the tools.
    contexts = _contexts(SPLIT_CALLS)
    assert [c[-1] for c in contexts] == [
        ("assistant", [("sh", {"cmd": "ls"})]),
        ("assistant", "One file: a.txt."),
    ]
    assert contexts[1][3] == ("tool", ("sh", "a.txt"))
    (graph,) = _graphs(SPLIT_CALLS)
    assert [t["function"]["name"] for t in graph.env.tools] == ["sh"]
    assert _books(SPLIT_CALLS) == (2, 0, 0)


def test_interleaved_halves_are_joined_by_the_id_they_share(tmp_path: Path) -> None:
    # two calls in flight: each response joins the request whose request_id it names, not the one just before it
    lines = [json.loads(line) for line in SPLIT_CALLS.read_text(encoding="utf-8").splitlines()]
    request1, response1, result, request2, response2 = lines
    other = {**request1, "request_id": "r9", "messages": [{"role": "user", "content": "Unrelated?"}]}
    yes = {"index": 0, "message": {"role": "assistant", "content": "Yes."}, "finish_reason": "stop"}
    reply9 = {"event": "llm_response", "request_id": "r9", "response": {**response1["response"], "choices": [yes]}}
    path = tmp_path / "events.jsonl"
    order = [request1, other, reply9, response1, result, request2, response2]
    path.write_text("".join(json.dumps(x) + "\n" for x in order), encoding="utf-8")
    assert detect_format(path).name == "structural"
    replies = [c for c in _contexts(path) if c[-1][1] in ("Yes.", "One file: a.txt.")]
    assert sorted(c[-2:] for c in replies) == sorted(
        [
            [("user", "Unrelated?"), ("assistant", "Yes.")],
            [("tool", ("sh", "a.txt")), ("assistant", "One file: a.txt.")],
        ]
    )
    assert _books(path) == (3, 0, 0)


def test_a_file_of_conversations_that_shows_no_halves_is_not_held_back() -> None:
    # An ordinary file of message rows (each request-like, none answered by a response record): before, 65 records
    # were read before the first was passed on (up to 64 parsed records held); now a bounded few.
    from msgtrain.ingest.core.events import SourceRef
    from msgtrain.ingest.structure.structural_calls import paired_halves

    consumed = 0

    def rows() -> Any:
        nonlocal consumed
        for i in range(200):
            consumed += 1
            row = {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
            yield SourceRef("rows.jsonl", f"line {i + 1}"), row, b""

    out = paired_halves(rows())
    next(out)
    assert consumed <= 17
    assert len(list(out)) == 199


def test_a_completion_whose_text_is_a_whole_dialogue_is_the_text_the_model_sampled(tmp_path: Path) -> None:
    # Asked to write a sample chat as JSON, the model sampled the JSON text. Before: decoded, and the last assistant
    # message inside it trained after a user message the model never saw.
    dialogue = [
        {"role": "user", "content": "Hi, I need a refund."},
        {"role": "assistant", "content": "Sure, what is your order number?"},
    ]
    row = {"prompt": "Write a two-turn support chat as a JSON list of messages.", "completion": json.dumps(dialogue)}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert _contexts(path) == [[("user", row["prompt"]), ("assistant", row["completion"])]]


def test_a_conversational_completion_kept_as_json_text_is_read_as_the_messages_it_holds(tmp_path: Path) -> None:
    # TRL's conversational prompt-completion rows with both columns kept as JSON text: the completion holds the
    # model's own message, read as that message.
    row = {
        "prompt": json.dumps([{"role": "user", "content": "2+2?"}]),
        "completion": json.dumps([{"role": "assistant", "content": "4"}]),
    }
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert _contexts(path) == [[("user", "2+2?"), ("assistant", "4")]]


def test_a_resume_in_a_tagged_thread_is_a_gap_not_an_unreadable_item(tmp_path: Path) -> None:
    # serde writes Zed's unit variant Message::Resume as the bare string "Resume" (the user asked the agent to go on;
    # Zed sends a message for it the thread does not hold). Before: the thread unreadable, 0 of 3 trained; after:
    # the replies before it trained, the ones after it kept as context and counted.
    thread = json.loads(ZED.read_text(encoding="utf-8"))
    thread["messages"].insert(2, "Resume")  # after the first reply, before the second
    path = tmp_path / "thread.json"
    path.write_text(json.dumps(thread), encoding="utf-8")
    assert [c[-1] for c in _contexts(path)] == [("assistant", [("terminal", {"command": "pytest -q"})])]
    assert _books(path) == (1, 2, 0)


REPLY_BESIDE = FIXTURES / "reply-beside-messages.jsonl"


def test_a_reply_kept_beside_its_messages_under_any_reply_name_is_trained_after_them() -> None:
    # One call a line, the reply beside the messages under keys no list of known pairs holds (context / reply beside
    # a reference "gold", chat_history / response, messages / model_output). Before: 1 of 3 (the first row's reply
    # never read: its context a conversation with nothing to train, only a warning; the third refused); after: each
    # reply after its own messages, the second call continuing the first, the reference never trained.
    contexts = _contexts(REPLY_BESIDE)
    assert sorted(c[-1][1] for c in contexts) == [
        "Order 1234 ships tomorrow.",
        "Sorry! Can you share the order number?",
        "Yes, within 30 days.",
    ]
    answer = next(c for c in contexts if c[-1][1] == "Order 1234 ships tomorrow.")
    assert [role for role, _ in answer] == ["system", "user", "assistant", "user", "assistant"]
    assert _books(REPLY_BESIDE) == (3, 0, 0)


def test_a_reference_or_an_unnamed_text_beside_the_messages_is_never_taken_for_the_reply(tmp_path: Path) -> None:
    rows = [
        {"messages": [{"role": "user", "content": "2+2?"}], "expected_answer": "4"},
        {"messages": [{"role": "user", "content": "3+3?"}], "note": "6"},
        {"messages": [{"role": "user", "content": "4+4?"}], "reply": "8", "generation": "8"},  # two: which one?
    ]
    lost = []
    for i, row in enumerate(rows):
        path = tmp_path / f"row{i}.jsonl"
        path.write_text(json.dumps(row) + "\n", encoding="utf-8")
        assert _contexts(path) == []
        lost.append(convert_file(path, SETTINGS)[1].turns_lost)
    assert lost == [0, 0, 1]  # two replies under reply names: refused and counted, never one picked


@pytest.mark.parametrize(
    "completion",
    [
        json.dumps({"conversation": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello!"}]}),
        json.dumps({"messages": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello!"}]}),
        'data: {"msg": "hello"}\n\ndata: [DONE]\n\n',
    ],
)
def test_a_completion_whose_text_is_json_or_sse_of_no_response_body_is_the_text_sampled(
    tmp_path: Path, completion: str
) -> None:
    # Before: an object holding a dialogue was decoded and its last reply trained after a user message the model
    # never saw (the prompt lost); an SSE-looking text of no provider's stream became a list of events and the row
    # vanished from the books.
    row = {"prompt": "Write it as asked.", "completion": completion}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert _contexts(path) == [[("user", "Write it as asked."), ("assistant", completion)]]


INTERLEAVED_SESSIONS = FIXTURES / "interleaved-session-lines.jsonl"


def test_message_lines_of_interleaved_sessions_are_one_conversation_per_session() -> None:
    # one message a line, each naming its session_id, two sessions interleaved as a server logs them. Before: one
    # conversation of all lines, session A's reply trained after session B's system prompt and prompt too, B's after
    # A's reply; after: each reply after its own session's messages only.
    assert _contexts(INTERLEAVED_SESSIONS) == [
        [("system", "Sys A"), ("user", "Hi A"), ("assistant", "Hello A")],
        [("system", "Sys B"), ("user", "Hi B"), ("assistant", "Hello B")],
    ]
    assert _books(INTERLEAVED_SESSIONS) == (2, 0, 0)


@pytest.mark.parametrize(
    "row",
    [
        {
            "prompt": [
                {"role": "system", "content": "Think step by step, then give the answer in \\boxed{}."},
                {"role": "user", "content": "Natalia sold 48 clips in April and half as many in May. How many in all?"},
            ],
            "answer": "72",
            "task": "gsm8k",
        },
        {"messages": [{"role": "user", "content": "What is 2+2?"}], "answer": "4", "source": "eval-set"},
    ],
)
def test_a_prompt_datasets_reference_answer_is_not_trained_as_a_reply(tmp_path: Path, row: dict[str, Any]) -> None:
    # GRPO / verifiers prompt rows keep the reference beside the prompt; no model sampled it. Before: trained.
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert _contexts(path) == []


def test_an_answer_beside_a_prompt_in_a_logged_call_is_its_reply(tmp_path: Path) -> None:
    row = {"messages": [{"role": "user", "content": "What is 2+2?"}], "answer": "4", "model": "m", "usage": {}}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert _contexts(path) == [[("user", "What is 2+2?"), ("assistant", "4")]]
