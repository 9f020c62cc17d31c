"""Per-call logs without session ids: which calls are one conversation (msgtrain.ingest.common.call_log).

A call continues an earlier call when the earlier call's messages and reply start its context, however short the
earlier call was; calls that merely open alike (two sessions both starting with "hi") stay apart. Checked on a
hand-written log and over seeded random logs against the calls that were written (the oracle): every reply is
sampled once, after exactly the messages its call sent, the books train each once and drop none, and a huge file
cut into chunks gives the same books.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.chunks import key_function, plan_chunks
from msgtrain.ingest.core.events import ReadGraph
from msgtrain.ingest.detect import detect_format
from msgtrain.model.graph import Origin
from msgtrain.run.parts import LinearizeSettings, PartStats, convert_file

SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str, reasoning: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return message


def _call(messages: list[dict[str, Any]], reply: dict[str, Any]) -> str:
    """One line of a per-call log (OpenAI chat-completions request and response bodies, the `calls` format)."""
    response = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "policy",
        "choices": [{"index": 0, "message": reply, "finish_reason": "stop"}],
    }
    return json.dumps({"request": {"model": "policy", "messages": messages}, "response": response})


def _llm_call(messages: list[dict[str, Any]], reply: dict[str, Any]) -> str:
    """One line of AutoGen 0.4's LLMCallEvent log ({"type": "LLMCall", "messages", "response", "agent_id"}): a
    per-call log no reader owns, read by the structural reader."""
    response = json.loads(_call([], reply))["response"]
    return json.dumps({"type": "LLMCall", "messages": messages, "response": response, "agent_id": "planner"})


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _graphs(path: Path) -> list[ReadGraph]:
    return [e for e in read_events(detect_format(path), path) if isinstance(e, ReadGraph)]


def _said(message: Any) -> tuple[str, str]:
    return message.role, message.text


def _sampled(graphs: list[ReadGraph]) -> list[tuple[tuple[tuple[str, str], ...], tuple[str, str]]]:
    """(context, reply) of every sampled node of the graphs read, as (role, text) pairs."""
    out = []
    for event in graphs:
        graph = event.graph
        for node in graph.nodes.values():
            if node.origin is Origin.SAMPLED:
                context = tuple(_said(n.message) for n in graph.path(node.id)[:-1])
                out.append((context, _said(node.message)))
    return out


def test_a_first_call_of_one_message_and_its_continuations_are_one_conversation(tmp_path: Path) -> None:
    hello, weather = _assistant("Hello!"), _assistant("Sunny.")
    lines = [
        _call([_user("hi")], hello),
        _call([_user("hi"), hello, _user("Weather?")], weather),
        _call([_user("hi"), hello, _user("Weather?"), weather, _user("Tomorrow?")], _assistant("Rain.")),
        # another session opening with the same message: its own conversation, not a sibling of the first
        _call([_user("hi")], _assistant("Hey there")),
        _call([_user("hi"), _assistant("Hey there"), _user("A joke?")], _assistant("Knock knock.")),
    ]
    path = _write(tmp_path / "calls.jsonl", lines)
    _, stats, rejects = convert_file(path, SETTINGS)
    # before: the first replies were trained in the first call's graph and dropped again (context_unknown) as the
    # history of a second graph keyed by the first two messages
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost, rejects) == (5, {}, 0, [])
    graphs = _graphs(path)
    assert sorted((e.records, len(e.graph.nodes)) for e in graphs) == [(2, 4), (3, 6)]
    by_reply = {reply[1]: context for context, reply in _sampled(graphs)}
    assert by_reply["Knock knock."] == (("user", "hi"), ("assistant", "Hey there"), ("user", "A joke?"))
    assert by_reply["Rain."][1] == ("assistant", "Hello!")


def test_a_reply_resent_without_its_reasoning_still_continues_its_call(tmp_path: Path) -> None:
    lines = [
        _call([_user("2+2?")], _assistant("4.", reasoning="Two and two make four.")),
        _call([_user("2+2?"), _assistant("4."), _user("And 3+3?")], _assistant("6.")),  # reasoning dropped
    ]
    path = _write(tmp_path / "calls.jsonl", lines)
    _, stats, rejects = convert_file(path, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped), rejects) == (2, {}, [])
    assert [e.records for e in _graphs(path)] == [2]


def test_calls_that_open_alike_but_never_resend_each_other_stay_apart(tmp_path: Path) -> None:
    # a system prompt and the same first message in two sessions, each logging a reward with its calls
    system = {"role": "system", "content": "Be helpful."}
    lines = [
        json.loads(_call([system, _user("hi")], _assistant("Hello A"))) | {"reward": 1.0},
        json.loads(_call([system, _user("hi")], _assistant("Hello B"))) | {"reward": 0.0},
    ]
    path = _write(tmp_path / "calls.jsonl", [json.dumps(x) for x in lines])
    samples, stats, _ = convert_file(path, SETTINGS)
    assert stats.turns_trained == 2 and len(_graphs(path)) == 2
    assert sorted(s.reward for s in samples) == [0.0, 1.0]  # each session's reward on its own reply


Pairs = list[tuple[tuple[tuple[str, str], ...], tuple[str, str]]]


def _random_log(
    rng: random.Random, line: Any = _call, *, two_sessions_first: bool = False
) -> tuple[list[str], Pairs, int, int]:
    """Per-call lines (``line`` writes one) of several conversations interleaved (each one's order kept), the
    (context, reply) of every call written, how many conversations hold a reply no call sampled, and how many
    conversations there are: first calls of 1..4 messages, openings shared across conversations, sampled replies
    unique. ``two_sessions_first``: the first two lines are two conversations' first calls."""
    openings = ["hi", "hello", "hi"]  # "hi" twice: conversations that open alike
    conversations: list[list[str]] = []
    oracle: Pairs = []
    scripted = 0
    for c in range(rng.randint(2, 6)):
        history: list[dict[str, Any]] = []
        if rng.random() < 0.3:
            history.append({"role": "system", "content": rng.choice(["Be brief.", "Be kind."])})
        history.append(_user(rng.choice(openings)))
        # a longer first call: turns the log never sampled (a scripted greeting, a pasted transcript)
        if rng.random() < 0.5:
            history += [_assistant(rng.choice(["Welcome.", "Hi!"])), _user(rng.choice([*openings, "q"]))]
            scripted += 1
        lines = []
        for t in range(rng.randint(1, 4)):
            reply = _assistant(f"reply {c}.{t}", reasoning=f"thinking {c}.{t}" if rng.random() < 0.3 else None)
            lines.append(line(list(history), reply))
            oracle.append((tuple((m["role"], m["content"]) for m in history), ("assistant", reply["content"])))
            resent = {"role": "assistant", "content": reply["content"]}  # a client drops the reasoning
            history += [resent, _user(rng.choice(["go on", "why?", f"more {t}"]))]
        conversations.append(lines)
    lines = []
    queues = [list(q) for q in conversations]
    if two_sessions_first:
        lines += [queues[0].pop(0), queues[1].pop(0)]
    while any(queues):
        lines.append(rng.choice([q for q in queues if q]).pop(0))
    return lines, oracle, scripted, len(conversations)


@pytest.mark.parametrize("seed", range(12))
def test_random_per_call_logs_train_every_reply_once_in_its_own_context(tmp_path: Path, seed: int) -> None:
    lines, oracle, scripted, _ = _random_log(random.Random(seed))
    path = _write(tmp_path / "calls.jsonl", lines)
    assert detect_format(path).name == "calls"
    graphs = _graphs(path)
    assert sorted(_sampled(graphs)) == sorted(oracle)  # each reply sampled once, after exactly its messages
    assert sum(e.records for e in graphs) == len(lines)
    _, stats, rejects = convert_file(path, SETTINGS)
    # the books: every sampled reply trained once; a scripted reply the log holds but no call sampled is context,
    # counted once per conversation (not once per call that re-sent it, nor per graph a conversation was split in)
    dropped = {"context_unknown": scripted} if scripted else {}
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost, rejects) == (len(oracle), dropped, 0, [])
    # a huge file is cut where no conversation is: the chunks' books are the whole file's
    keys = key_function(detect_format(path), path)
    assert keys is not None
    chunks = plan_chunks(path, keys, max(path.stat().st_size // 4, 1))
    if chunks:
        total = PartStats()
        for chunk in chunks:
            total.add(convert_file(path, SETTINGS, chunk)[1])
        assert total.to_json() == stats.to_json()


def test_one_call_per_line_records_follow_the_same_rule_in_the_structural_reader(tmp_path: Path) -> None:
    # Shape of AutoGen 0.4's LLMCallEvent lines, read by the structural reader: two sessions open with "hi"; the
    # third call of the first comes after the second opened
    def line(messages: list[dict[str, Any]], text: str) -> str:
        return _llm_call(messages, _assistant(text))

    hello_a, hello_b = _assistant("Hello A"), _assistant("Hello B")
    lines = [
        line([_user("hi")], "Hello A"),
        line([_user("hi"), hello_a, _user("Weather?")], "Sunny."),
        line([_user("hi")], "Hello B"),
        line([_user("hi"), hello_a, _user("Weather?"), _assistant("Sunny."), _user("Tomorrow?")], "Rain."),
        line([_user("hi"), hello_b, _user("A joke?")], "Knock knock."),
    ]
    path = _write(tmp_path / "llm_calls.jsonl", lines)
    assert detect_format(path).name == "structural"
    _, stats, rejects = convert_file(path, SETTINGS)
    # before: the third call of the first session was joined to the second session (the nearest earlier record its
    # messages start with), which held "Hello A" and "Sunny." as context only: trained once and dropped again
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost, rejects) == (5, {}, 0, [])
    graphs = _graphs(path)
    assert len(graphs) == 2 and sum(e.records for e in graphs) == len(lines)
    by_reply = {reply[1]: context for context, reply in _sampled(graphs)}
    assert by_reply["Knock knock."] == (("user", "hi"), ("assistant", "Hello B"), ("user", "A joke?"))
    assert by_reply["Rain."][:2] == (("user", "hi"), ("assistant", "Hello A"))


def test_a_per_line_call_log_that_opens_with_two_sessions_is_read_as_calls(tmp_path: Path) -> None:
    # two sessions' calls interleaved from the first line: no record continues the one just before it
    hello_a, hello_b = _assistant("Hello A"), _assistant("Hello B")
    lines = [
        _llm_call([_user("hi A")], hello_a),
        _llm_call([_user("hi B")], hello_b),
        _llm_call([_user("hi A"), hello_a, _user("Weather?")], _assistant("Sunny.")),
        _llm_call([_user("hi B"), hello_b, _user("A joke?")], _assistant("Knock knock.")),
    ]
    path = _write(tmp_path / "llm_calls.jsonl", lines)
    assert detect_format(path).name == "structural"
    # before: read record by record, each session split into one graph per call
    graphs = _graphs(path)
    assert [e.records for e in graphs] == [2, 2]
    assert sorted(_sampled(graphs)) == [
        ((("user", "hi A"),), ("assistant", "Hello A")),
        ((("user", "hi A"), ("assistant", "Hello A"), ("user", "Weather?")), ("assistant", "Sunny.")),
        ((("user", "hi B"),), ("assistant", "Hello B")),
        ((("user", "hi B"), ("assistant", "Hello B"), ("user", "A joke?")), ("assistant", "Knock knock.")),
    ]
    samples, stats, rejects = convert_file(path, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost, rejects) == (4, {}, 0, [])
    assert len(samples) == 2  # one sample per conversation, each reply trained once in it


def test_records_that_are_independent_conversations_are_still_read_one_by_one(tmp_path: Path) -> None:
    # a dataset of one-call records, several opening alike, none re-sending another: each record its own graph,
    # streamed record by record (each its own task of the books, never held until the file ends)
    lines = [
        _llm_call([_user("hi")], _assistant("Hello.")),
        _llm_call([_user("hi")], _assistant("Hi there.")),
        _llm_call([_user("Name a prime.")], _assistant("7.")),
        _llm_call([_user("hello"), _assistant("Hey."), _user("Weather?")], _assistant("Sunny.")),
    ]
    path = _write(tmp_path / "llm_calls.jsonl", lines)
    items = list(detect_format(path).read(path))
    assert [getattr(i, "records", None) for i in items] == [1, 1, 1, 1]
    assert [i.source.record for i in items] == ["line 1", "line 2", "line 3", "line 4"]
    _, stats, rejects = convert_file(path, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost, rejects) == (4, {}, 0, [])
    assert len(_graphs(path)) == 4


@pytest.mark.parametrize("seed", range(8))
def test_random_interleaved_call_lines_in_the_structural_reader_train_every_reply_once(
    tmp_path: Path, seed: int
) -> None:
    lines, oracle, scripted, conversations = _random_log(random.Random(seed), _llm_call, two_sessions_first=True)
    path = _write(tmp_path / "llm_calls.jsonl", lines)
    assert detect_format(path).name == "structural"
    graphs = _graphs(path)
    assert sorted(_sampled(graphs)) == sorted(oracle)  # each reply sampled once, after exactly its messages
    assert len(graphs) == conversations and sum(e.records for e in graphs) == len(lines)
    _, stats, rejects = convert_file(path, SETTINGS)
    dropped = {"context_unknown": scripted} if scripted else {}
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost, rejects) == (len(oracle), dropped, 0, [])


def test_a_call_logged_twice_is_one_call(tmp_path: Path) -> None:
    # a gateway that logs a call from its trace and from its span: the same messages, the same reply
    hello = _assistant("Hello!")
    lines = [
        _call([_user("hi")], hello),
        _call([_user("hi")], hello),
        _call([_user("hi"), hello, _user("Weather?")], _assistant("Sunny.")),
    ]
    path = _write(tmp_path / "calls.jsonl", lines)
    _, stats, rejects = convert_file(path, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped), rejects) == (2, {}, [])
    graphs = _graphs(path)
    assert len(graphs) == 1 and graphs[0].records == 3
