"""Open WebUI's ``<details>`` markup in assistant messages: read back into reasoning, tool calls and their results.

The export (``tests/fixtures/open_webui/chat-export.json``, hand-written, see the README beside it) is in the shape
Open WebUI writes: chats with ``chat.history.messages`` keyed by id and the current branch in ``chat.messages``;
each assistant ``content`` is what ``serialize_content_blocks`` (backend/open_webui/utils/middleware.py,
open-webui/open-webui at commit 000032ed1cfe) makes of a turn's reasoning, tool calls and text. The oracle is what
the model produced in each turn, written by hand below; the books count what could not be read back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain.errors import ValidationError
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.common.details_markup import details_steps
from msgtrain.ingest.core.events import ReadGraph
from msgtrain.ingest.detect import detect_format
from msgtrain.linearize import load_tokenizer
from msgtrain.model.graph import Origin
from msgtrain.run.parts import LinearizeSettings, convert_file

EXPORT = Path(__file__).resolve().parent / "fixtures" / "open_webui" / "chat-export.json"
SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)

# What the model produced in the first chat, turn by turn: (reasoning, text, calls) of each sampled reply, and the
# tool results between them, in path order.
WEATHER = [
    ("user", "What's the weather in Paris? What should I wear?"),
    (
        "assistant",
        (
            "The user wants the weather in Paris.\nBelow 25C & sunny means light clothes <usually>; call get_weather "
            "first.",
            "",
            [("get_weather", {"city": "Paris"})],
        ),
    ),
    ("tool", "Sunny, 22C"),
    ("assistant", ("22C and sunny: light layers.", "It is sunny and 22C in Paris: wear light layers.", [])),
    ("user", "And in Oslo?"),
    ("assistant", (None, "", [("get_weather", {"city": "Oslo"})])),
    ("tool", json.dumps({"sky": "cloudy", "temp_c": 4})),  # a result the tool returned as an object
    ("assistant", (None, "Cloudy and 4°C in Oslo: take a warm coat.", [])),
    ("user", "Thanks!"),
    ("assistant", (None, "You're welcome!", [])),
]


def _said(message: Any) -> tuple[str, Any]:
    if message.role == "assistant":
        calls = [(c.option_name, c.arguments) for c in getattr(message, "calls", ())]
        return "assistant", (message.reasoning, message.text, calls)
    if message.role == "tool":
        return "tool", message.result.result
    return message.role, message.text


def _graphs() -> list[ReadGraph]:
    return [e for e in read_events(detect_format(EXPORT), EXPORT) if isinstance(e, ReadGraph)]


def test_an_open_webui_turn_is_read_back_into_its_reasoning_calls_results_and_text() -> None:
    weather = _graphs()[0].graph
    (leaf,) = weather.leaves()
    path = weather.path(leaf)
    assert [_said(n.message) for n in path] == WEATHER
    # every reply of the path was sampled; the results are context; no markup is left in any message
    assert [n.origin for n in path if n.message.role == "assistant"] == [Origin.SAMPLED] * 5
    assert not any("<details" in n.message.text or "&gt;" in n.message.text for n in weather.nodes.values())
    # the calls and their results are paired by the ids the UI logged
    calls = [c.invocation_id for n in path for c in getattr(n.message, "calls", ())]
    assert calls == ["call_paris", "call_oslo"]


def test_the_books_train_what_was_read_back_and_cut_where_markup_cannot_be() -> None:
    samples, stats, rejects = convert_file(EXPORT, SETTINGS)
    # the weather chat's five replies are trained; the second chat's two calls written one after another (parallel
    # or one reply each?) and the third chat's reply saved unfinished (the user stopped it while it reasoned) are
    # turns lost, each a gap: the reply after each is kept as context only, never trained
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost) == (5, {"context_unknown": 2}, 2)
    assert stats.records_read == 3 and not stats.records_rejected
    assert sorted(json.loads(r)["reason"] for r in rejects) == ["ambiguous_markup", "interrupted_markup"]
    tok = load_tokenizer(None, None)
    text = "\n".join(tok.decode(s.input_ids) for s in samples)
    assert "Sunny, 22C" in text and "light layers" in text
    assert "<details" not in text and "&quot;" not in text and "Tool Executed" not in text


def test_text_without_open_webuis_own_blocks_is_left_as_text() -> None:
    assert details_steps("Plain answer.", "$") is None
    # a reply that writes HTML details of its own (a spoiler, another type) is what the model wrote
    spoiler = "Here:\n<details><summary>Spoiler</summary>\nIt was the butler.\n</details>"
    assert details_steps(spoiler, "$") is None
    assert details_steps('<details type="note" done="true">\n<summary>x</summary>\n</details>', "$") is None


@pytest.mark.parametrize(
    ("content", "code"),
    [
        # a block that never closes (a truncated export)
        (
            '<details type="reasoning" done="true" duration="2">\n<summary>Thought for 2 seconds</summary>\n&gt; a',
            "bad_markup",
        ),
        # reasoning lines without the quote prefix the UI writes
        (
            '<details type="reasoning" done="true" duration="2">\n<summary>Thought</summary>\nplain\n</details>\nHi',
            "bad_markup",
        ),
        # arguments that are not the JSON the UI writes
        (
            '<details type="tool_calls" done="true" id="c1" name="f" arguments="{oops" result="&quot;r&quot;">\n'
            "<summary>Tool Executed</summary>\n</details>\nDone.",
            "bad_markup",
        ),
        # code the model ran through the UI's interpreter: what it sampled for it is not read
        (
            '<details type="code_interpreter" done="true" output="&quot;4&quot;">\n<summary>Analyzed</summary>\n'
            "```python\nprint(2+2)\n```\n</details>\n4",
            "unsupported_markup",
        ),
        # text, then reasoning, in one reply: the order it was written in cannot be kept
        (
            'Hm.\n<details type="reasoning" done="true" duration="1">\n<summary>s</summary>\n&gt; r\n</details>',
            "ambiguous_markup",
        ),
    ],
)
def test_markup_that_cannot_be_read_back_is_an_error_never_text(content: str, code: str) -> None:
    with pytest.raises(ValidationError) as caught:
        details_steps(content, "$.messages[1]")
    assert caught.value.code == code and caught.value.where == "$.messages[1]"


def test_an_unreadable_reply_in_a_tree_cuts_its_branch_only(tmp_path: Path) -> None:
    # the weather chat as an export that keeps the tree only (chat.history), with a regenerated reply to "And in
    # Oslo?" that the user stopped while it reasoned, and a reply under it
    chat = json.loads(EXPORT.read_text(encoding="utf-8"))[0]
    del chat["chat"]["messages"]
    messages = chat["chat"]["history"]["messages"]
    messages["u2"]["childrenIds"].append("a2b")
    stopped = '<details type="reasoning" done="false">\n<summary>Thinking…</summary>\n&gt; Oslo is\n</details>'
    messages["a2b"] = {"id": "a2b", "parentId": "u2", "childrenIds": ["u4"], "role": "assistant", "content": stopped}
    messages["u4"] = {"id": "u4", "parentId": "a2b", "childrenIds": ["a4"], "role": "user", "content": "Go on."}
    messages["a4"] = {"id": "a4", "parentId": "u4", "childrenIds": [], "role": "assistant", "content": "Bring a coat."}
    path = tmp_path / "tree.json"
    path.write_text(json.dumps([chat]), encoding="utf-8")
    _, stats, rejects = convert_file(path, SETTINGS)
    # before: one unreadable message rejected the whole tree; now the branches beside it are trained
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost) == (5, {"context_unknown": 1}, 1)
    assert [json.loads(r)["reason"] for r in rejects] == ["interrupted_markup"]
    assert stats.records_read == 1 and not stats.records_rejected


def test_the_replies_open_webui_keeps_only_in_its_history_are_read(tmp_path: Path) -> None:
    # Open WebUI saves the branch shown as chat.messages and every message in chat.history.messages: a regenerated
    # reply to "And in Oslo?" that is not shown is in the history only
    chat = json.loads(EXPORT.read_text(encoding="utf-8"))[0]
    messages = chat["chat"]["history"]["messages"]
    messages["u2"]["childrenIds"].append("a2r")
    regenerated = "Oslo is cold today: a coat and gloves."
    messages["a2r"] = {"id": "a2r", "parentId": "u2", "childrenIds": [], "role": "assistant", "content": regenerated}
    path = tmp_path / "export.json"
    path.write_text(json.dumps([chat]), encoding="utf-8")
    _, stats, rejects = convert_file(path, SETTINGS)
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost, rejects) == (6, {}, 0, [])
    (graph,) = (e.graph for e in read_events(detect_format(path), path) if isinstance(e, ReadGraph))
    (sibling,) = (n for n in graph.nodes.values() if n.message.text == regenerated)
    assert [_said(n.message) for n in graph.path(sibling.id)[:-1]] == WEATHER[:5]  # after exactly "And in Oslo?"
