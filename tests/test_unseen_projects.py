"""Exports of projects msgtrain has no reader for, read by the structural reader: each file's trained turns against a
count made by hand from its JSON (tests/fixtures/unseen/PROVENANCE.md says where each file comes from), and the
mapping ``msgtrain formats --explain`` prints for it, pasted as is, converting the same turns."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from msgtrain.errors import MsgtrainError
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.structure.mapping import mapping_text
from msgtrain.run.parts import LinearizeSettings, convert_file
from msgtrain.tools.explain_cmd import explain_file

FIXTURES = Path(__file__).parent / "fixtures" / "unseen"
SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)

# (file, replies a careful reader counts in it, how they were counted)
HAND_COUNTS = [
    # the tree's five assistant messages: the first reply, the two regenerated "You're welcome!" siblings, the reply
    # on the edited branch ("lol") and the one under the second sibling ("does coding make you happy")
    ("librechat-tree.json", 5),
    ("vestai-linear.json", 1),  # one reply, linked to its prompt by parentMessageId
    ("chatbotui-export.json", 3),  # two conversations: two replies, then one
    ("openwebui-export.json", 1),  # sa2, the reply to sa1
    # two model calls: each assistant thought and the tool-call text after it are one message as smolagents sends it
    ("smolagents-benchmark.jsonl", 2),
    ("letta-memory-agent.json", 2),  # the memory edit call (message-2) and the greeting (message-5)
    # two agents: the builder's one reply ("\n\n"), the sleeptime agent's two memory-tool calls
    ("lettabot-builder.af", 3),
    ("swe-search-tree.json", 3),  # three expanded nodes, each holding the call that made it
    ("autogen-llm-calls.json", 2),  # two calls, the second re-sending the first one's reply as history
    # the reply shown on line 4 and its other swipe, and line 7; the card's scripted greeting (no gen_started) and
    # the hidden is_system note are not sampled turns
    ("sillytavern-chat.jsonl", 3),
    # LM Studio keeps each message's versions: the two regenerated answers to the first prompt (the second shown),
    # then the edited follow-up's one answer; the first draft of the follow-up was never answered
    ("lmstudio-conversation.json", 3),
    # an LM Studio reply that called a tool is one message of steps holding two model calls (text + toolCallRequest,
    # then the text after the toolCallResult step): two replies, twice
    ("lmstudio-tool-steps.json", 4),
    # a Jan thread: two replies, each text under content[].text.value (never the text part's object as text)
    ("jan-thread-messages.jsonl", 2),
    # text-generation-webui: three [user, reply] rows; the first is the character's greeting (no user spoke:
    # scripted, context only), then two replies, the first regenerated once (metadata.assistant_1.versions: the
    # reply shown and the one before it); visible repeats them as the page showed them
    ("textgen-webui-chat.json", 3),
    ("chatbox-session.json", 2),  # a Chatbox session: two replies, their text in contentParts
    # the same session with forks (messageForksHash): the two replies shown, the saved branch after the first prompt
    # (its reply, a follow-up, its reply) and the other reply saved after the second prompt
    ("chatbox-forks.json", 5),
    # a Chatbox session with two older threads beside its messages (each a topic closed for a new one): the current
    # thread's reply, the first thread's two, the second thread's reply and the other reply saved after its prompt
    # (a fork of a thread message, kept in the session's messageForksHash); the whole session refused before
    ("chatbox-threads.json", 5),
    # {"text": ...} records, each one whole conversation a chat template rendered (mlx-lm / TRL text datasets): 1 + 2
    # ChatML replies, 2 Llama 2 [INST] replies; the fourth record is a prompt with no reply (refused, 0 replies)
    ("text-rendered-records.jsonl", 5),
    # a Cline task history whose tool results Cline wrote as user text ("[read_file for 'x'] Result:", its fallback
    # when it finds no id for a tool_result block): three replies, the results user turns, as Cline sent them
    ("cline-text-results.json", 3),
    # two message trees under "replies": the first prompt's three ranked answers; in the second, the two answers to
    # the prompt and the two answers to each of their follow-up questions
    ("oasst-trees.jsonl", 9),
    ("litellm-standard-logging-payload.json", 1),  # the messages sent and the response beside them: one call
    # LiteLLM's Langfuse batch: the trace and its generation each log the same call's input.messages and output
    ("litellm-langfuse-batch.json", 1),
    # a ChatGPT export's six assistant messages: the regenerated joke is its sibling's text after the same prompt
    # (one reply), and the story the user stopped (finish_details "interrupted") is in the books, not trained
    ("chatgpt-tree.json", 5),
    # an AgentScope session: memory of [message, marks] pairs, three model calls (each text + tool_use), their
    # tool_result blocks logged as role system, and a last user message no reply answers
    ("agentscope-session.json", 3),
    # OpenAI Swarm eval results: four prompts, five samples each; two prompts' samples are five distinct texts, the
    # two others' are "None" five times (the agent called a function instead: the sample's text is not in the log),
    # one reply each after its prompt, kept as context and in the books, not trained
    ("swarm-triage-evals.json", 12),
    # a Letta agent file whose only messages are the system prompt, the boot-up send_message call Letta writes when it
    # creates the agent (no user turn before it: no model call made it) and that call's result: nothing sampled
    ("letta-loop.af", 0),
    # an AReaL tau2 rollout: tau2's fixed opener "Hi! How can I help you today?" (written before any user turn, no
    # model call) is context; the two tool calls and the two texts after the user's turns are the replies
    ("areal-tau2-rollout.json", 4),
]
# replies of a file kept out of training, each with a reason in the books
NOT_TRAINED = {"chatgpt-tree.json": 1, "swarm-triage-evals.json": 2}


def _books(path: Path, settings: LinearizeSettings = SETTINGS) -> tuple[int, int, int, int]:
    """(turns found, trained, dropped, lost) of converting ``path``."""
    _, stats, _ = convert_file(path, settings)
    return stats.turns_found, stats.turns_trained, sum(stats.turns_dropped.values()), stats.turns_lost


@pytest.mark.parametrize(("name", "replies"), HAND_COUNTS)
def test_every_reply_of_an_unseen_projects_export_is_trained_once(name: str, replies: int) -> None:
    path = FIXTURES / name
    owners = {"autogen": "autogen", "jan": "openai_chat", "areal": "openai_chat", "cline": "cline_task"}
    owner = owners.get(name.split("-")[0], "structural")
    assert detect_format(path).name == owner
    dropped = NOT_TRAINED.get(name, 0)
    assert _books(path) == (replies, replies - dropped, dropped, 0)


# AutoGen's file is its own reader's (Jan's thread the OpenAI chat reader's, Cline's the Anthropic one's); a file of
# one message per line, a node map (ChatGPT's mapping), branches kept by the message they fork after (Chatbox's forks)
# and texts a chat template rendered have no --map form (a mapping reads each record as a conversation; the others are
# read by their shape alone), and --explain prints none for them
@pytest.mark.parametrize(
    ("name", "replies"),
    [
        c
        for c in HAND_COUNTS
        if not c[0].startswith(
            ("autogen", "sillytavern", "chatgpt", "jan", "chatbox-forks", "chatbox-threads", "text-rendered", "cline")
        )
    ],
)
def test_the_mapping_explain_prints_for_an_unseen_export_converts_it_the_same(
    name: str, replies: int, tmp_path: Path
) -> None:
    path = FIXTURES / name
    text = explain_file(path).mapping_yaml
    assert text
    map_file = tmp_path / "map.yaml"
    map_file.write_text(text, encoding="utf-8")
    dropped = NOT_TRAINED.get(name, 0)
    assert _books(path, replace(SETTINGS, mapping=mapping_text(map_file))) == (replies, replies - dropped, dropped, 0)


def _graphs(name: str) -> list:
    path = FIXTURES / name
    return [e.graph for e in read_events(detect_format(path), path) if hasattr(e, "graph")]


def test_a_conversation_level_system_prompt_heads_every_branch() -> None:
    (tree,) = _graphs("librechat-tree.json")  # LibreChat keeps it in options.promptPrefix
    roots = [n for n in tree.nodes.values() if n.parent is None]
    assert [r.message.parts[0].text for r in roots] == ["You are an expert software engineer."]
    for name in ("chatbotui-export.json", "swe-search-tree.json"):  # a sibling prompt; an ancestor's system_prompt
        for graph in _graphs(name):
            assert {n.message.role for n in graph.nodes.values() if n.parent is None} == {"system"}


def test_the_memory_agent_reply_sees_only_the_system_message_rebuilt_before_it() -> None:
    (graph,) = _graphs("letta-memory-agent.json")
    last = [n for n in graph.nodes.values() if n.origin.value == "sampled"][-1]
    systems = [n.message.parts[0].text for n in graph.path(last.id) if n.message.role == "system"]
    assert systems == ["You are Sam.\n<human>\nFirst name: Chad\n</human>"]
    # the agent file's tools, each holding the schema it sends under json_schema, are the calls' tools
    (tool,) = graph.envs[last.env_id].tools
    assert tool["function"]["name"] == "core_memory_replace" and "new_content" in str(tool["function"]["parameters"])


def test_each_agent_of_an_agent_file_is_sent_only_the_tools_it_names() -> None:
    tools = {tuple(t["function"]["name"] for t in g.env.tools) for g in _graphs("lettabot-builder.af")}
    assert tools == {
        ("web_search", "conversation_search", "fetch_webpage", "memory_rethink"),  # tool_ids tool-0, -1, -2, -3
        ("memory_finish_edits", "memory_replace", "memory_insert", "memory_rethink"),  # tool-4, -5, -6, -3
    }


def _contexts(name: str) -> list[list[tuple[str, str]]]:
    """(role, text) of every message on the path to each sampled reply, the reply last, in file order (text None for
    a message without text parts: a tool call or result)."""
    return [
        [
            (n.message.role, n.message.parts[0].text if getattr(n.message, "parts", None) else None)
            for n in graph.path(node.id)
        ]
        for graph in _graphs(name)
        for node in graph.nodes.values()
        if node.origin.value == "sampled"
    ]


def test_a_reply_in_a_message_tree_sees_only_its_own_branch() -> None:
    contexts = _contexts("oasst-trees.jsonl")
    # the three ranked answers are siblings: each sees the prompt alone, none sees another
    assert [len(c) for c in contexts[:3]] == [2, 2, 2]
    # the answer to the second follow-up question sees the answer it followed, not the first branch
    assert contexts[-1] == [
        (
            "user",
            "How to protect my eyes when I have to stare at my computer screen for longer than 10 hours every day?",
        ),
        (
            "assistant",
            "You should rest your eyes by either closing it or looking away from the screen for 30 seconds every 30"
            " minutes.",
        ),
        ("user", "Thanks! It was really helpful. Are there more ways to protect my eyes?"),
        ("assistant", "Looking at a screen for 10 hours a day will always be bad for your eyes."),
    ]


def test_each_version_of_a_message_is_a_sibling_and_the_one_shown_is_continued() -> None:
    system = ("system", "You are a terse travel agent.")
    first = ("user", "Where should I go in May?")
    # the regenerated answers each follow the same prompt; the edited follow-up is answered after the answer shown,
    # never after the first draft of it (no answer logged) nor after the answer not shown
    assert _contexts("lmstudio-conversation.json") == [
        [system, first, ("assistant", "Portugal.")],
        [system, first, ("assistant", "Japan, for the weather.")],
        [
            system,
            first,
            ("assistant", "Japan, for the weather."),
            ("user", "Something cheaper?"),
            ("assistant", "Vietnam."),
        ],
    ]
    (graph,) = _graphs("lmstudio-conversation.json")
    drafts = [n for n in graph.nodes.values() if n.message.role == "user" and n.message.parts[0].text == "Cheaper?"]
    assert len(drafts) == 1 and not [n for n in graph.nodes.values() if n.parent == drafts[0].id]


def test_a_history_of_user_reply_pairs_trains_the_replies_after_the_text_the_model_was_sent() -> None:
    greeting = ("assistant", "How can I help you today?")
    first = [greeting, ("user", "What is 2+2?"), ("assistant", "2+2 is 4.")]
    # internal (what the model was sent), not visible's HTML rendering; the greeting is context, not a reply; the
    # regenerated version is a sibling after the same prompt, the rows after it continue the version shown
    assert _contexts("textgen-webui-chat.json") == [
        first,
        [*first, ("user", "And times 3 &amp; 1?"), ("assistant", "That makes 12.")],
        [*first[:2], ("assistant", "Four.")],
    ]
    (graph,) = _graphs("textgen-webui-chat.json")
    assert next(n.origin.value for n in graph.nodes.values() if n.message.role == "assistant") == "injected"


def test_each_swipe_of_a_role_play_reply_keeps_its_own_reasoning_and_is_trained_once(tmp_path: Path) -> None:
    # SillyTavern's line for a reply with two swipes, as its saveChat writes them (the shown one's reasoning in
    # extra, each swipe's in swipe_info[i].extra; hand-made, the project's chats are AGPL-3.0)
    lines = [
        {"user_name": "You", "character_name": "Sera", "create_date": "2025-01-01@10h00m00s", "chat_metadata": {}},
        {"name": "Sera", "is_user": False, "is_system": False, "mes": "Greetings.", "extra": {}},
        {"name": "You", "is_user": True, "is_system": False, "mes": "Who are you?", "extra": {}},
        {
            "name": "Sera",
            "is_user": False,
            "is_system": False,
            "mes": "A guardian.",
            "gen_started": "2025-01-01T10:00:15.000Z",
            "swipe_id": 0,
            "swipes": ["A guardian.", "Just a wanderer."],
            "swipe_info": [{"extra": {"reasoning": "They ask my name."}}, {"extra": {"reasoning": "Be coy."}}],
            "extra": {"reasoning": "They ask my name.", "model": "qwq-32b"},
        },
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    (graph,) = [e.graph for e in read_events(detect_format(path), path) if hasattr(e, "graph")]
    replies = [n for n in graph.nodes.values() if n.origin.value == "sampled"]
    assert [[(p.kind, p.text) for p in n.message.parts] for n in replies] == [
        [("reasoning", "They ask my name."), ("text", "A guardian.")],
        [("reasoning", "Be coy."), ("text", "Just a wanderer.")],
    ]
    assert len({n.parent for n in replies}) == 1  # siblings after the same prompt
    assert _books(path) == (2, 2, 0, 0)


def test_a_text_part_holding_its_text_under_value_is_trained_as_that_text() -> None:
    first = [("user", "Name a prime."), ("assistant", "7.")]
    assert _contexts("jan-thread-messages.jsonl") == [first, [*first, ("user", "Another?"), ("assistant", "11.")]]


@pytest.mark.parametrize("name", ["litellm-standard-logging-payload.json", "litellm-langfuse-batch.json"])
def test_a_gateway_logs_reply_is_trained_after_exactly_the_messages_logged_beside_it(name: str) -> None:
    expected = {
        "litellm-standard-logging-payload.json": [("user", "Hello, world!"), ("assistant", "hi")],
        "litellm-langfuse-batch.json": [("user", "Hello!"), ("assistant", "Hello! How can I assist you today?")],
    }
    assert _contexts(name) == [expected[name]]  # one reply, no system prompt the log does not hold, no second copy


def test_a_reply_the_user_stopped_is_in_the_books_and_its_regenerated_sibling_is_one_reply() -> None:
    _, stats, _ = convert_file(FIXTURES / "chatgpt-tree.json", SETTINGS)
    assert stats.turns_dropped == {"interrupted": 1}
    (tree,) = _graphs("chatgpt-tree.json")
    stopped = [n for n in tree.nodes.values() if n.message.metadata.get("interrupted")]
    assert [n.message.parts[0].text[-7:] for n in stopped] == ["rolling"]
    contexts = _contexts("chatgpt-tree.json")
    # the joke, after the "hi again" branch only; the export's empty hidden system message is not a message
    assert [role for role, _ in contexts[-1]] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert [text for _, text in contexts[-1][:5]] == [
        "hi there",
        "Hello! How can I assist you today?",
        "hi again",
        "Hey! Welcome back. What's on your mind?",
        "tell me a joke",
    ]


def test_an_agent_memory_of_message_and_marks_pairs_trains_each_call_after_its_results() -> None:
    contexts = _contexts("agentscope-session.json")
    # each call sees the user's request, the earlier calls and their results (the tool_result blocks AgentScope logs
    # with role system are tool results, not system prompts), and nothing of the later ones
    assert [[role for role, _ in c] for c in contexts] == [
        ["user", "assistant"],
        ["user", "assistant", "tool", "assistant"],
        ["user", "assistant", "tool", "assistant", "tool", "assistant"],
    ]
    (graph,) = _graphs("agentscope-session.json")
    results = [n.message for n in graph.nodes.values() if n.message.role == "tool"]
    assert [r.name for r in results] == ["view_text_file", "execute_shell_command", "execute_shell_command"]
    # the result is the block's output (AgentScope's ToolResultBlock holds it under "output", not "content")
    shell = "<returncode>0</returncode>"
    assert [r.result.result[:26] for r in results] == ["The content of /Users/liuy", shell, shell]
    # _sys_prompt is the base its ReActAgent extends with its skills' prompt: not given as if it were the system
    # message, and the graph says what is missing
    assert graph.metadata["context_incomplete"]["missing"] == ["system_prompt", "tools"]


def test_n_samples_of_one_prompt_are_siblings_and_a_sample_logged_as_none_is_not_trained() -> None:
    _, stats, _ = convert_file(FIXTURES / "swarm-triage-evals.json", SETTINGS)
    assert stats.turns_dropped == {"context_unknown": 2}
    contexts = _contexts("swarm-triage-evals.json")
    assert len(contexts) == 10  # the sampled texts, each after its own prompt alone (no sibling in its context)
    assert {c[0] for c in contexts} == {
        ("user", "I had some turbulence on my flight"),
        ("user", "What is the meaning of life"),
    }
    assert all(len(c) == 2 for c in contexts) and "None" not in {c[1][1] for c in contexts}


@pytest.mark.parametrize(
    ("name", "opener"),
    [("letta-loop.af", None), ("areal-tau2-rollout.json", "Hi! How can I help you today?")],
)
def test_a_reply_written_before_any_input_is_context_not_a_turn(name: str, opener: str | None) -> None:
    # Letta's boot-up send_message and tau2's fixed greeting open the conversation with nothing but a system prompt
    # before them: no model call answered anything, so they are the application's text (injected), as a character
    # card's greeting is
    (graph,) = _graphs(name)
    first = next(n for n in graph.nodes.values() if n.message.role == "assistant")
    assert first.origin.value == "injected"
    assert (first.message.parts[0].text if first.message.parts else None) == opener
    # every reply after the user's turns is sampled, the greeting in its context
    contexts = _contexts(name)
    assert len(contexts) == (0 if opener is None else 4)
    assert all(c[0] == ("assistant", opener) and c[1][0] == "user" for c in contexts)


def test_a_reply_sampled_after_the_system_prompt_alone_stays_a_turn(tmp_path: Path) -> None:
    # the same opening, logged with the usage only a model call reports: the model was called with the system
    # prompt alone (OpenAI's API allows it), so it is a turn
    messages = [
        {"role": "system", "content": "You are a storyteller. Begin."},
        {"role": "assistant", "content": "Once upon a time...", "usage": {"prompt_tokens": 12, "completion_tokens": 5}},
        {"role": "user", "content": "Go on."},
        {"role": "assistant", "content": "...there was a fox."},
    ]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps({"messages": messages}), encoding="utf-8")
    assert _books(path) == (2, 2, 0, 0)
    path.write_text(json.dumps({"messages": [messages[0], {**messages[1], "usage": None}, *messages[2:]]}))
    assert _books(path) == (1, 1, 0, 0)


def test_a_reply_whose_steps_call_tools_is_each_model_call_after_the_results_before_it() -> None:
    (graph,) = _graphs("lmstudio-tool-steps.json")
    calls = [n.message for n in graph.nodes.values() if getattr(n.message, "calls", ())]
    assert [(c.calls[0].invocation_id, c.calls[0].option_name) for c in calls] == [
        ("365218540", "get_weather"),
        ("88211734", "get_weather"),
    ]
    results = [n.message for n in graph.nodes.values() if n.message.role == "tool"]
    assert [(r.result.invocation_id, r.result.result) for r in results] == [
        ("365218540", '{"temp_c": 18, "sky": "cloudy"}'),
        ("88211734", '{"temp_c": 21, "sky": "sunny"}'),
    ]
    contexts = _contexts("lmstudio-tool-steps.json")
    # the text after a result is a reply of its own, sampled after the call and its result; the status and debug
    # steps are not in any context
    assert [[role for role, _ in c] for c in contexts] == [
        ["system", "user", "assistant"],
        ["system", "user", "assistant", "tool", "assistant"],
        ["system", "user", "assistant", "tool", "assistant", "user", "assistant"],
        ["system", "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"],
    ]
    assert contexts[1][-1] == ("assistant", "It is 18 °C and cloudy in Paris.")


def test_the_branches_a_chat_keeps_by_the_message_they_fork_after_are_siblings_after_it() -> None:
    system = ("system", "You are a helpful assistant.")
    pound = ("user", "How many grams in a pound?")
    shown = [system, pound, ("assistant", "About 453.6 grams."), ("user", "And in an ounce?")]
    # the session's own list is the branch shown; a saved branch hangs after the message it forked from, whole (its
    # follow-up continues its own reply, never the shown one)
    assert sorted(_contexts("chatbox-forks.json")) == sorted(
        [
            shown[:3],
            [*shown, ("assistant", "About 28.35 grams.")],
            [*shown, ("assistant", "An ounce is 28.3495 grams.")],
            [system, pound, ("assistant", "A pound is 453.59237 grams.")],
            [
                system,
                pound,
                ("assistant", "A pound is 453.59237 grams."),
                ("user", "Round it."),
                ("assistant", "454 grams."),
            ],
        ]
    )


def test_each_older_thread_of_a_chat_session_is_a_conversation_of_its_own_after_its_own_system_prompt() -> None:
    helpful, terse = ("system", "You are a helpful assistant."), ("system", "You answer in one sentence.")
    pound = ("user", "How many grams in a pound?")
    borrow = ("user", "What is a borrow checker?")
    # each thread is the messages Chatbox sent in it, its system prompt first (the session's, copied when the thread
    # began, or the one the user set in it), never joined to the session's current messages or to another thread
    assert sorted(_contexts("chatbox-threads.json")) == sorted(
        [
            [helpful, ("user", "What is the boiling point of water?"),
             ("assistant", "100 degrees Celsius at sea level.")],
            [helpful, pound, ("assistant", "About 453.6 grams.")],
            [helpful, pound, ("assistant", "About 453.6 grams."), ("user", "And in an ounce?"),
             ("assistant", "About 28.35 grams.")],
            [terse, borrow, ("assistant", "The part of the Rust compiler that enforces ownership rules.")],
            [terse, borrow, ("assistant", "It checks references at compile time.")],  # the fork saved in the thread
        ]
    )  # fmt: skip
    assert len({g.graph_id for g in _graphs("chatbox-threads.json")}) == 3  # one conversation a thread
    explained = explain_file(FIXTURES / "chatbox-threads.json")  # a mapping would read the current thread alone
    assert not explained.mapping_yaml and explained.conversations == {"thread of a chat session": 3}


def test_a_thread_without_forks_and_a_session_without_threads_read_as_before(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "chatbox-threads.json").read_text(encoding="utf-8"))
    session = data["chat-sessions"][0]
    del session["messageForksHash"]
    path = tmp_path / "chatbox.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert _books(path) == (4, 4, 0, 0)  # 1 + 2 + 1: the saved reply went with the forks
    stray = {"id": "x", "role": "assistant", "contentParts": [{"type": "text", "text": "Lost?"}]}
    lists = [{"id": "f", "messages": [stray]}, {"id": "g", "messages": []}]
    session["messageForksHash"] = {"gone": {"position": 1, "lists": lists}}
    path.write_text(json.dumps(data), encoding="utf-8")
    # a branch after a message in no list: the session's own messages are refused with it (its reply and the branch's
    # counted lost, never dropped unsaid); the threads, whole conversations each, are still read
    assert _books(path)[1:] == (3, 0, 2)


def test_branches_that_do_not_fit_the_conversation_are_refused_not_lost(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "chatbox-forks.json").read_text(encoding="utf-8"))
    forks = data["chat-sessions"][0]["messageForksHash"]
    forks["m-gone"] = forks.pop("m3")  # a saved reply after a message the session no longer holds
    path = tmp_path / "chatbox.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    _, trained, dropped, lost = _books(path)
    assert (trained, dropped) == (0, 0) and lost >= 5


def test_explain_prints_no_mapping_for_branches_kept_beside_the_list() -> None:
    explained = explain_file(FIXTURES / "chatbox-forks.json")
    assert not explained.mapping_yaml and explained.conversations == {"forked message list (message tree)": 1}


def test_a_text_record_of_one_rendered_conversation_is_that_conversation_and_unparsed_markup_is_refused() -> None:
    path = FIXTURES / "text-rendered-records.jsonl"
    contexts = _contexts("text-rendered-records.jsonl")
    # each reply after the turns before it, parsed back from the family's own markup (Llama 2's padding trimmed)
    assert contexts[2] == [
        ("system", "You are a DevOps assistant."),
        ("user", "How do I find high API latency?"),
        ("assistant", "Start from the p99 per endpoint."),
        ("user", "And then?"),
        ("assistant", "Trace the slowest requests."),
    ]
    assert contexts[-1][-2:] == [("user", "Example?"), ("assistant", "Maybe in Haskell.")]
    rejects = [e for e in read_events(detect_format(path), path) if not hasattr(e, "graph")]
    assert [(e.source.record, e.error.code) for e in rejects] == [("line 4", "ambiguous_structure")]
    assert "chatml chat-template markup" in rejects[0].error.message


def test_a_file_of_plain_text_records_is_refused_saying_it_holds_documents_not_conversations(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"text": "Once upon a time."}\n{"text": "There was a fox."}\n', encoding="utf-8")
    with pytest.raises(MsgtrainError) as raised:
        detect_format(path)
    assert "a record of a text alone is a document, not a conversation" in str(raised.value)


def test_tool_results_a_task_history_wrote_as_user_text_stay_user_turns_after_the_calls() -> None:
    # Cline's ToolResultUtils writes a tool_result block when it knows the call's id, else the result as a text block
    # of the user turn ("[tool for 'x'] Result:"); its OpenAI conversion (convertToOpenAiMessages) then sends that
    # text as a user message after the assistant's tool_calls, with no tool message: the model saw a user turn
    (graph,) = _graphs("cline-text-results.json")
    last = [n for n in graph.nodes.values() if n.origin.value == "sampled"][-1]
    path = graph.path(last.id)
    assert [n.message.role for n in path] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert [c.option_name for c in path[1].message.calls] == ["list_files", "read_file"]
    texts = [p.text for p in path[2].message.parts]
    assert texts[0].startswith("[list_files for 'src/lib'] Result:") and texts[1].startswith("[read_file for")
    assert not [n for n in graph.nodes.values() if n.message.role == "tool"]  # no result invented for the calls


def test_a_greeting_at_the_root_of_a_message_tree_is_context_on_every_branch(tmp_path: Path) -> None:
    # a chat UI's export linking each message to its parent, opened by the assistant's greeting (no user before it):
    # the two regenerated replies below the user's turn are trained, the greeting on neither branch
    messages = [
        {"id": "g", "parentMessageId": None, "role": "assistant", "content": "Hi! I am Aria, how can I help?"},
        {"id": "u", "parentMessageId": "g", "role": "user", "content": "Tell me a joke"},
        {"id": "a", "parentMessageId": "u", "role": "assistant", "content": "Why did the chicken cross the road?"},
        {"id": "b", "parentMessageId": "u", "role": "assistant", "content": "Knock knock."},
    ]
    path = tmp_path / "export.json"
    path.write_text(json.dumps({"conversation": {"title": "t", "messages": messages}}), encoding="utf-8")
    assert _books(path) == (2, 2, 0, 0)
    (graph,) = [e.graph for e in read_events(detect_format(path), path) if hasattr(e, "graph")]
    greeting = next(n for n in graph.nodes.values() if n.parent is None)
    assert (greeting.message.role, greeting.origin.value) == ("assistant", "injected")
