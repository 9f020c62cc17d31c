"""Coding-agent session logs in shapes msgtrain's readers had not met: small hand-made files modeled on the tools'
own sources (tests/fixtures/unseen/PROVENANCE.md), each counted by hand: which replies were sampled, in which
context, and why the others are not trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.events import ReadGraph, ReadSkip
from msgtrain.ingest.detect import detect_format
from msgtrain.model.graph import MessageGraph, Node
from msgtrain.model.message import TextPart
from msgtrain.run.parts import LinearizeSettings, convert_file

FIXTURES = Path(__file__).parent / "fixtures" / "unseen"
SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)


def _books(path: Path) -> tuple[int, int, int, int]:
    """(turns found, trained, dropped, lost) of converting ``path``."""
    _, stats, _ = convert_file(path, SETTINGS)
    return stats.turns_found, stats.turns_trained, sum(stats.turns_dropped.values()), stats.turns_lost


def _read(path: Path) -> tuple[list[MessageGraph], int]:
    """The graphs of ``path`` and the number of records its events account for."""
    events = list(read_events(detect_format(path), path))
    graphs = [e.graph for e in events if isinstance(e, ReadGraph)]
    records = sum(e.records for e in events if isinstance(e, ReadGraph))
    records += sum(e.count for e in events if isinstance(e, ReadSkip))
    return graphs, records


def _text(node: Node) -> str:
    result = getattr(node.message, "result", None)
    if result is not None:
        return str(result.result)
    return " ".join(p.text for p in getattr(node.message, "parts", ()) if isinstance(p, TextPart) and p.text)


def _replies(graph: MessageGraph) -> list[tuple[str, str, list[str]]]:
    """(origin, reply text, [role:text of each message before it]) of every assistant message, in file order."""
    return [
        (n.origin.value, _text(n), [f"{c.message.role}:{_text(c)}" for c in graph.path(n.id)[:-1]])
        for n in graph.nodes.values()
        if n.is_assistant
    ]


def test_a_codex_turn_logged_only_as_its_ui_event_is_not_trained_and_no_reply_spans_two_turns() -> None:
    path = FIXTURES / "codex-user-event-only.jsonl"
    (graph,), records = _read(path)
    assert records == len(path.read_text(encoding="utf-8").splitlines())
    base = "system:You are Codex, a coding agent. Work in the user's repository."
    dev = "system:<permissions instructions>\nsandbox_mode is read-only.\n</permissions instructions>"
    assert _replies(graph) == [
        # turn 1: the call, then the answer after its result, each after the instructions and the prompt sent
        ("sampled", "", [base, dev, "user:How many notes are there?"]),
        ("sampled", "There are 12 notes.", [base, dev, "user:How many notes are there?", "assistant:", "tool:12\n"]),
        # turn 2: the rollout holds the user_message event alone, not the item Codex sent; its reply is its own
        # message (not more of turn 1's answer) and is not trained
        (
            "carried",
            "The newest is 2026-11-19.md.",
            [base, dev, "user:How many notes are there?", "assistant:", "tool:12\n", "assistant:There are 12 notes."],
        ),
        # after the compaction the replacement history is the whole context again
        ("sampled", "You're welcome.", [base, "user:How many notes are there?", "user:", "user:Thanks!"]),
    ]
    assert _books(path) == (4, 3, 1, 0)


def test_a_claude_code_reply_below_an_attachment_the_model_was_sent_is_not_trained() -> None:
    path = FIXTURES / "claude-code-attachments.jsonl"
    (graph,), records = _read(path)
    assert records == len(path.read_text(encoding="utf-8").splitlines())
    assert _replies(graph) == [
        ("sampled", "", ["user:Run the tests."]),
        # the hook's error notice between the result and the reply was shown to the user only
        ("sampled", "One test fails: test_div.", ["user:Run the tests.", "assistant:", "tool:1 failed"]),
        # the CLAUDE.md the prompt brought in was sent with it, as text the log does not hold
        (
            "carried",
            "I will fix calc.div, not the test.",
            [
                "user:Run the tests.",
                "assistant:",
                "tool:1 failed",
                "assistant:One test fails: test_div.",
                "user:Fix it.",
            ],
        ),
    ]
    assert _books(path) == (3, 2, 1, 0)


@pytest.mark.parametrize("kind", ["todo", "already_read_file", "task_progress"])
def test_a_claude_code_attachment_its_api_conversion_sends_nothing_for_is_passed_over(
    tmp_path: Path, kind: str
) -> None:
    # Claude Code's normalizeAttachmentForAPI returns no message for these kinds (the todo list, a file already read,
    # task progress shown to the user). Before: a gap, and the replies below it carried (1 of 3 trained).
    lines = (FIXTURES / "claude-code-attachments.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    for record in records:
        if record.get("type") == "attachment":
            record["attachment"] = {"type": kind, "content": []}
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (graph,), _ = _read(path)
    assert [origin for origin, _, _ in _replies(graph)] == ["sampled", "sampled", "sampled"]


def test_a_codex_fork_that_inherits_its_history_by_reference_trains_only_after_a_compaction_restores_it() -> None:
    path = FIXTURES / "codex-fork-history-base.jsonl"
    (graph,), records = _read(path)
    assert records == len(path.read_text(encoding="utf-8").splitlines())
    base = "system:You are Codex, a coding agent."
    assert _replies(graph) == [
        # the fork's first reply was sampled after the parent rollout's first seven records, not in this file
        ("carried", "Added an LRU cache around load().", [base, "user:Now try it with a cache instead."]),
        # the replacement history is the whole context again
        (
            "sampled",
            "Yes, functools.lru_cache locks.",
            [base, "user:Now try it with a cache instead.", "user:", "user:Is it thread-safe?"],
        ),
        # a message from another agent, in a record kind the reader does not know, came before this reply
        (
            "carried",
            "The cache keeps 128 entries.",
            [
                base,
                "user:Now try it with a cache instead.",
                "user:",
                "user:Is it thread-safe?",
                "assistant:Yes, functools.lru_cache locks.",
            ],
        ),
    ]
    assert _books(path) == (3, 1, 2, 0)


def test_a_claude_code_reply_after_a_microcompaction_is_not_trained_with_the_results_it_cleared() -> None:
    path = FIXTURES / "claude-code-microcompact.jsonl"
    (graph,), records = _read(path)
    assert records == len(path.read_text(encoding="utf-8").splitlines())
    read = ["user:What does build.sh do?", "assistant:", "tool:#!/bin/sh\nhugo --minify"]
    assert _replies(graph) == [
        ("sampled", "", ["user:What does build.sh do?"]),  # thinking and the call: one response
        ("sampled", "It runs hugo with --minify.", read),
        # the model was sent toolu_a's result cleared, not the text above
        (
            "carried",
            "I have not read deploy.sh yet.",
            [*read, "assistant:It runs hugo with --minify.", "user:And deploy.sh?"],
        ),
    ]
    assert _books(path) == (3, 2, 1, 0)


def test_the_acknowledgement_gemini_cli_seeds_a_saved_chat_with_is_context_not_a_turn() -> None:
    ack = "assistant:Got it. Thanks for the context!"
    for name in ("gemini-cli-checkpoint.json", "gemini-cli-tool-checkpoint.json"):
        path = FIXTURES / name
        (graph,), _ = _read(path)
        seeded, call, answer = _replies(graph)
        # the environment context and the CLI's fixed reply to it: the model was sent both, sampled neither
        assert seeded[:2] == ("injected", ack.removeprefix("assistant:")), name
        assert [c[:31] for c in seeded[2]] == ["user:This is the Gemini CLI. We"], name
        assert call[:2] == ("sampled", "") and call[2][1:] == [ack, "user:List the files."], name
        assert answer[:2] == ("sampled", "There are two files: build.sh and README.md."), name
        assert answer[2][1:4] == [ack, "user:List the files.", "assistant:"] and len(answer[2]) == 5, name
        assert _books(path) == (2, 2, 0, 0), name


def test_a_copilot_reply_after_a_compaction_is_not_trained_with_the_history_the_compaction_replaced() -> None:
    path = FIXTURES / "copilot-cli-compaction.jsonl"
    (graph,), records = _read(path)
    assert records == len(path.read_text(encoding="utf-8").splitlines())
    system = "system:You are the GitHub Copilot CLI, a terminal assistant."
    asked = [system, "user:<current_datetime>2026-11-24T10:00:03Z</current_datetime>\n\nSummarise README.md"]
    assert _replies(graph) == [
        ("sampled", "", asked),
        ("sampled", "README.md describes a small REST API.", [*asked, "assistant:", "tool:# API\nA small REST API."]),
        # the compaction's summary replaced the first turn in what Copilot sent; the log holds the turn, not the summary
        (
            "carried",
            "I would need to read the code to tell.",
            [
                *asked,
                "assistant:",
                "tool:# API\nA small REST API.",
                "assistant:README.md describes a small REST API.",
                "user:<current_datetime>2026-11-24T10:00:14Z</current_datetime>\n\nWhich framework?",
            ],
        ),
    ]
    assert _books(path) == (3, 2, 1, 0)


def test_a_codex_rollout_without_base_instructions_is_marked_for_its_system_prompt_though_it_logs_developer_messages(
    tmp_path: Path,
) -> None:
    from msgtrain.model.completeness import missing_context

    lines = (FIXTURES / "codex-user-event-only.jsonl").read_text(encoding="utf-8").splitlines()
    meta = json.loads(lines[0])
    del meta["payload"]["base_instructions"]
    path = tmp_path / "rollout-no-instructions.jsonl"
    path.write_text("\n".join([json.dumps(meta), *lines[1:]]) + "\n", encoding="utf-8")
    (graph,), _ = _read(path)
    assert _replies(graph)[0][2][0].startswith("system:<permissions instructions>")  # a developer message heads it
    assert "system_prompt" in missing_context(graph)
    (logged,), _ = _read(FIXTURES / "codex-user-event-only.jsonl")
    assert "system_prompt" not in missing_context(logged)


def test_a_codex_rollout_that_logs_its_context_messages_as_user_events_too_trains_every_reply(tmp_path: Path) -> None:
    # Older Codex logged the context messages it adds as user_message events as well, with their kind.
    lines = [json.loads(line) for line in (FIXTURES / "codex-user-event-only.jsonl").read_text().splitlines()]
    ctx = "<environment_context>\n  <cwd>/home/dev/notes</cwd>\n</environment_context>"
    env_item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ctx}]}
    env_event = {"type": "user_message", "message": ctx, "kind": "environment_context"}
    stamp = lines[2]["timestamp"]
    extra = [
        {"timestamp": stamp, "type": t, "payload": p}
        for t, p in (("response_item", env_item), ("event_msg", env_event))
    ]
    path = tmp_path / "rollout-old-events.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in [*lines[:3], *extra, *lines[3:12]]), encoding="utf-8")
    (graph,), _ = _read(path)
    assert [origin for origin, _, _ in _replies(graph)] == ["sampled", "sampled"]
