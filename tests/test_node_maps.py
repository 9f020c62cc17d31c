"""Node maps (a chat UI's message tree keyed by node id), read by the structural reader: the ChatGPT data export.

``tests/fixtures/chatgpt_export/conversations.json`` is written for these tests in the shape of the ChatGPT export
(`conversations.json`: a list of ``{title, mapping, current_node, ...}``; nodes ``{id, message, parent,
children}``; messages ``{author: {role, name}, content: {content_type, ...}, recipient, metadata}``), as public
exporters document it (TomzxCode/llm-conversations-viewer ``docs/formats.md``) and recent exports write it:
a hidden empty system message, custom instructions (``user_editable_context``), ``thoughts`` and
``reasoning_recap`` nodes, a ``code`` call to ``python`` answered by an ``execution_output``, a regenerated reply
(two assistant siblings), an edited prompt (two user siblings), an image in a ``multimodal_text`` prompt, a
``web.run`` call whose result the export keeps empty (the pages only as citations in the metadata, as real exports
do); then a DALL·E image result and an unknown content type, which cannot be read: each is a gap on its branch,
rejected with its reason, the replies before it trained, the replies after it in the books as ``context_unknown``.

Assistant turns counted by hand: the first conversation holds 7 (the python call, the reply and its regeneration,
the reply after the image, the reply to the edited prompt, the web.run call, the reply after its withheld result),
the second 2 (the DALL·E call, trained; the reply after its image result, context_unknown), the third 1
(unreadable, lost).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.detect import detect_format
from msgtrain.model.completeness import missing_context
from msgtrain.model.graph import MessageGraph
from msgtrain.model.message import OptionCallMessage, OptionResultMessage
from msgtrain.run.parts import LinearizeSettings, convert_file

ROOT = Path(__file__).resolve().parents[1]
EXPORT = ROOT / "tests" / "fixtures" / "chatgpt_export" / "conversations.json"
SETTINGS = LinearizeSettings(None, None, (), None, None)


def read(path: Path) -> tuple[list[ReadGraph], list[ReadReject]]:
    reader = detect_format(path)
    assert reader.name == "structural"
    events = list(read_events(reader, path))
    return [e for e in events if isinstance(e, ReadGraph)], [e for e in events if isinstance(e, ReadReject)]


def branch_texts(graph: MessageGraph) -> list[list[str]]:
    def shown(m: Any) -> str:
        if isinstance(m, OptionCallMessage):
            return f"call {m.calls[0].option_name}({m.calls[0].raw_arguments or m.calls[0].arguments})"
        if isinstance(m, OptionResultMessage):
            return f"result {m.result.option_name}: {m.result.result}"
        return f"{m.role}: {m.text}"

    return [[shown(n.message) for n in b.nodes] for b in graph.branches()]


def test_a_chatgpt_export_is_read_as_one_tree_per_conversation_with_versions_as_branches() -> None:
    (ev, cat, page), rejects = read(EXPORT)
    assert sorted(branch_texts(ev.graph)) == [
        [
            "user: What is the mean of 3, 5 and 10?",
            "call python(print((3 + 5 + 10) / 3))",
            "result python: 6.0",
            "assistant: It is 6.0.",
            "user: Check it against a source on the web.",
            'call web.run({"search_query": [{"q": "mean of 3 5 10"}]})',
            "result web.run: ",
            "assistant: A source agrees: the mean is 6.",
        ],
        [
            "user: What is the mean of 3, 5 and 10?",
            "call python(print((3 + 5 + 10) / 3))",
            "result python: 6.0",
            "assistant: The mean is 6.",
            "user: And what does this chart show?",
            "assistant: It shows a rising trend.",
        ],
        ["user: What is the median of 3, 5 and 10?", "assistant: The median is 5."],
    ]
    # Every assistant reply, regenerations included, was sampled; the one after the withheld web.run result is
    # kept as context only.
    assert len(ev.graph.sampled_nodes()) == 6
    (after,) = [n for n in ev.graph.nodes.values() if n.message.text.startswith("A source agrees")]
    assert after.origin.value == "carried"
    call = next(n.message for n in ev.graph.nodes.values() if isinstance(n.message, OptionCallMessage))
    assert call.reasoning is None  # the thoughts node is the UI's summary of hidden reasoning, not the call's
    image = next(n.message for n in ev.graph.nodes.values() if "chart" in n.message.text)
    assert [getattr(p, "url", None) for p in image.parts] == ["file-service://file-AbC123", None]
    # The export never holds the system prompt the service built (custom instructions went into it), nor the
    # schema of the python tool it called.
    assert missing_context(ev.graph) == ["system_prompt", "tools"]
    assert ev.extras["title"] == "Mean with code" and ev.extras["current_node"] == "a2"
    passed = {
        "empty_system_message": 1,
        "no_message": 1,
        "reasoning_recap": 1,
        "thoughts": 1,
        "user_editable_context": 1,
    }
    assert ev.extras["node_map"] == {"passed": passed, "withheld_results": 1}
    # An unreadable node is a gap on its branch: the call before the image result is trained, the reply after it
    # kept as context only; a reply that cannot be read is lost, the prompt before it kept.
    assert branch_texts(cat.graph) == [
        ["user: Draw a cat.", 'call dalle.text2im({"prompt": "a cat"})', "assistant: Here is your cat."]
    ]
    assert [n.origin.value for n in cat.graph.nodes.values()] == ["context", "sampled", "carried"]
    assert branch_texts(page.graph) == [["user: Open example.com"]]
    assert [(r.source.record, r.error.code, r.turns, r.count) for r in rejects] == [
        ("item 1", "unsupported_content", 0, 0),
        ("item 2", "unsupported_content", 1, 0),
    ]
    assert "$.mapping.img.message" in str(rejects[0].error) and "multimodal_text" in rejects[0].error.message
    assert "'sonic_webpage'" in rejects[1].error.message and "trained up to it" in rejects[1].error.message


def test_every_assistant_turn_of_a_chatgpt_export_is_trained_or_in_the_books() -> None:
    samples, stats, rejects = convert_file(EXPORT, SETTINGS)
    # The replies after the withheld result and after the image result are in the books as context_unknown; every
    # other one is trained, or dropped with its reason where the template cannot render the image prompt before it;
    # the unreadable reply is lost. 10 in all, as counted by hand.
    assert stats.turns_found == 9 and stats.turns_dropped["context_unknown"] == 2
    assert stats.turns_trained + sum(stats.turns_dropped.values()) == 9 and stats.turns_trained >= 6
    assert stats.turns_lost == 1 and len(rejects) == 2
    assert stats.records_read == 3 and not stats.records_rejected
    assert all("context_incomplete" in s.flags for s in samples)


def test_a_node_whose_parent_is_not_in_the_map_rejects_its_conversation(tmp_path: Path) -> None:
    doc = json.loads(EXPORT.read_text())[:1]
    doc[0]["mapping"]["a3"]["parent"] = "gone"
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(doc))
    graphs, (reject,) = read(path)
    assert not graphs and reject.error.code == "orphan_message" and "'gone'" in reject.error.message


def test_nodes_whose_parents_form_a_cycle_reject_their_conversation_never_dropped_silently(tmp_path: Path) -> None:
    doc = json.loads(EXPORT.read_text())[:1]
    mapping = doc[0]["mapping"]
    mapping["u1-edit"]["parent"], mapping["a3"]["children"] = "a3", ["u1-edit"]  # u1-edit <-> a3
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(doc))
    graphs, (reject,) = read(path)
    assert not graphs and reject.error.code == "bad_structure" and "2 of" in reject.error.message


def test_an_older_export_with_an_edited_prompt_trains_both_replies(tmp_path: Path) -> None:
    # The shape of mitkury/chatgpt-export-parser tests/example-conversation.json (commit 08b4d0b0): an empty system
    # message, then the user edits the second prompt; the reply to the first version exists, the second has none.
    def node(i: str, parent: str | None, kids: list[str], role: str, text: str) -> dict[str, Any]:
        message = {"id": i, "author": {"role": role, "name": None, "metadata": {}}, "create_time": 1704067200,
                   "update_time": None, "content": {"content_type": "text", "parts": [text]}, "status": "finished",
                   "end_turn": True, "weight": 1, "metadata": {}, "recipient": "all"}  # fmt: skip
        return {"id": i, "parent": parent, "children": kids, "message": message}

    mapping = {
        "msg-1": node("msg-1", None, ["msg-2"], "system", ""),
        "msg-2": node("msg-2", "msg-1", ["msg-3"], "user", "Can you help me with a programming question?"),
        "msg-3": node("msg-3", "msg-2", ["msg-4", "msg-5"], "assistant", "Of course! What would you like to know?"),
        "msg-4": node("msg-4", "msg-3", ["msg-6"], "user", "How do I write a function in JavaScript?"),
        "msg-5": node("msg-5", "msg-3", [], "user", "Actually, can you help me with Python instead?"),
        "msg-6": node("msg-6", "msg-4", [], "assistant", "function greet(name) { return name; }"),
    }
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([{"id": "conv-123", "title": "t", "current_node": "msg-6", "mapping": mapping}]))
    _, stats, rejects = convert_file(path, SETTINGS)
    assert not rejects and (stats.turns_found, stats.turns_trained) == (2, 2)
    (ev,), _ = read(path)
    assert len(ev.graph.leaves()) == 2 and ev.extras["node_map"] == {"passed": {"empty_system_message": 1}}


def test_a_reply_of_weight_zero_is_context_in_the_books_never_trained(tmp_path: Path) -> None:
    doc = json.loads(EXPORT.read_text())[:1]
    doc[0]["mapping"]["a3"]["message"]["weight"] = 0.0
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(doc))
    (ev,), _ = read(path)
    (reply,) = [n for n in ev.graph.nodes.values() if n.message.text == "The median is 5."]
    assert reply.origin.value == "carried"
    _, stats, _ = convert_file(path, SETTINGS)
    assert stats.turns_found == 7 and stats.turns_dropped["context_unknown"] == 2


def _node(i: str, parent: str | None, kids: list[str], role: str, content: dict[str, Any]) -> dict[str, Any]:
    message = {"id": i, "author": {"role": role, "name": None, "metadata": {}}, "content": content,
               "status": "finished_successfully", "weight": 1.0, "metadata": {}, "recipient": "all"}  # fmt: skip
    return {"id": i, "parent": parent, "children": kids, "message": message}


def _text(text: str) -> dict[str, Any]:
    return {"content_type": "text", "parts": [text]}


def test_an_unreadable_node_mid_branch_cuts_that_branch_only_and_the_books_count_each_reply(tmp_path: Path) -> None:
    # A ChatGPT-export-shaped conversation, written by hand: after the first exchange the user asked twice (an edited
    # prompt, two sibling branches). On the first branch a reply is in a content type msgtrain does not read; the
    # replies below it were sampled in a context that held it. The second branch is fine.
    mapping = {
        "root": {"id": "root", "parent": None, "children": ["u1"], "message": None},
        "u1": _node("u1", "root", ["a1"], "user", _text("Name a prime.")),
        "a1": _node("a1", "u1", ["u2", "u2b"], "assistant", _text("7.")),
        "u2": _node("u2", "a1", ["bad"], "user", _text("Show me a page about it.")),
        "bad": _node("bad", "u2", ["u3"], "assistant", {"content_type": "sonic_webpage", "url": "https://x.org"}),
        "u3": _node("u3", "bad", ["a3"], "user", _text("Summarise it.")),
        "a3": _node("a3", "u3", ["u4"], "assistant", _text("7 is prime.")),
        "u4": _node("u4", "a3", ["a4"], "user", _text("Thanks.")),
        "a4": _node("a4", "u4", [], "assistant", _text("You're welcome.")),
        "u2b": _node("u2b", "a1", ["a2b"], "user", _text("Another one?")),
        "a2b": _node("a2b", "u2b", [], "assistant", _text("11.")),
    }
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([{"id": "c", "title": "primes", "current_node": "a2b", "mapping": mapping}]))
    (ev,), (gap,) = read(path)
    origins = {n.message.text: n.origin.value for n in ev.graph.nodes.values() if n.message.role == "assistant"}
    assert origins == {"7.": "sampled", "11.": "sampled", "7 is prime.": "carried", "You're welcome.": "carried"}
    # nothing is stitched across the gap: the replies below it hang under its parent, never after "Summarise it."
    below = [b for b in branch_texts(ev.graph) if "assistant: 7 is prime." in b]
    assert below == [
        ["user: Name a prime.", "assistant: 7.", "user: Show me a page about it.", "assistant: 7 is prime."]
    ]
    assert gap.error.code == "unsupported_content" and "$.mapping.bad.message" in str(gap.error)
    assert (gap.count, gap.turns) == (0, 1) and "2 later replies kept as context only" in gap.error.message
    _, stats, rejects = convert_file(path, SETTINGS)
    # 5 replies: 2 trained (before the gap, beside it), 2 after it as context_unknown, the unreadable one lost
    assert (stats.turns_trained, dict(stats.turns_dropped), stats.turns_lost) == (2, {"context_unknown": 2}, 1)
    assert stats.records_read == 1 and not stats.records_rejected and len(rejects) == 1


def test_an_unreadable_first_message_of_a_node_map_rejects_its_conversation(tmp_path: Path) -> None:
    mapping = {
        "u1": _node("u1", None, ["a1"], "user", {"content_type": "sonic_webpage"}),
        "a1": _node("a1", "u1", [], "assistant", _text("Hello.")),
    }
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([{"id": "c", "mapping": mapping}]))
    graphs, (reject,) = read(path)
    assert not graphs and reject.error.code == "unsupported_content" and reject.count == 1


def test_explain_says_a_chatgpt_export_is_a_node_map(capsys: Any) -> None:
    from msgtrain.cli import main

    assert main(["formats", "--explain", str(EXPORT)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "node map (message tree)" in out and "at $.mapping" in out
