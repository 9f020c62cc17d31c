"""aider chat transcripts (``.aider.chat.history.md``): the reader, its detection, and input discovery of markdown.

The fixtures are written here in the shape aider writes (``aider/io.py`` ``user_input`` / ``ai_output`` /
``append_chat_history``, ``aider/coders/base_coder.py``, ``aider/commands.py`` in Aider-AI/aider at
5dc9490bb35f9729ef2c95d00a19ccd30c26339c), and in the shape of public transcripts (never their text):
- AlexShchuka/mozgoslav ``.aider.chat.history.md`` at 1f66bc9d44c5950cada7054a9581d7058caaac66 (v0.86: streamed
  ``<thinking-content-...>`` reasoning, a ``^C`` before the partial reply it interrupted, "Add file to the chat?"
  answered by a group preference and logged as ``####`` input);
- Abhisekpm/JobSpeak ``.aider.chat.history.md`` at 25a5ac71d552440f7f7e330ecb8e1f487e87dd5f (v0.79: a context too
  large, "Try to proceed anyway? n", then ``^C`` at the input prompt);
- BjornNordblom/pocketflow-text2sql-gui ``.aider.chat.history.md`` at fa36619313c0eb9605ca446524c7c0b111af6b59
  (CRLF line ends, multi-line pasted prompts with blank lines written ``####   ``).
``sample_logs/aider/.aider.chat.history.md`` is written by hand in the same shape.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msgtrain.cli import main
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadSkip, SourceRef
from msgtrain.ingest.detect import detect_format, looks_like_a_log
from msgtrain.ingest.formats.sessions.aider import (
    ADDED_FILES,
    EDITOR_DONE,
    EDITS_COMMITTED,
    EDITS_UNCOMMITTED,
    INTERRUPT_ASSISTANT,
    INTERRUPT_USER,
    OK_MESSAGE,
    UNDO_REPLY,
    command_of,
)
from msgtrain.ingest.supplied import load_rules, with_supplied_context
from msgtrain.model.completeness import missing_context
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.run.plan import discover_inputs

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "aider" / ".aider.chat.history.md"
HEADER = "# aider chat started at 2025-06-02 10:14:03"
STARTUP = "> Aider v0.86.1  \n> Main model: openai/gpt-4.1 with diff edit format  \n"
THINK = "thinking-content-7bbeb8e1441453ad999a0bbba8a46d4b"


def transcript(*pieces: str, header: str = HEADER) -> str:
    """A session as aider appends it: the header, then each piece after a blank line."""
    return f"\n{header}\n\n" + STARTUP + "".join(f"\n{p}\n" for p in pieces)


def prompt(text: str) -> str:
    """``user_input``: each line prefixed ``#### `` and ended with two spaces."""
    return "  \n".join(f"#### {line}" for line in text.split("\n")) + "  "


def graphs_of(path: Path) -> list[MessageGraph]:
    return [ev.graph for ev in read_events(detect_format(path), path) if isinstance(ev, ReadGraph)]


def branch_texts(graph: MessageGraph) -> list[list[tuple[str, str, str]]]:
    """Each branch as (role, origin, text) per message."""
    return [
        [(n.message.role, str(n.origin), n.message.text) for n in branch.nodes]
        for branch in sorted(graph.branches(), key=lambda b: len(b.nodes))
    ]


def side_and_main(graph: MessageGraph, main_prompt: str) -> list[list[tuple[str, str, str]]]:
    """The two branches of ``graph``: the side one, then the one that starts with ``main_prompt``."""
    return sorted(branch_texts(graph), key=lambda b: b[0][2] == main_prompt)


def first_branch(tmp_path: Path, *pieces: str) -> list[str]:
    """The texts of the one branch of a one-session transcript of ``pieces``."""
    (graph,) = graphs_of(write(tmp_path, transcript(*pieces)))
    (branch,) = branch_texts(graph)
    return [text for _, _, text in branch]


def write(tmp_path: Path, text: str, name: str = ".aider.chat.history.md", newline: str = "\n") -> Path:
    path = tmp_path / name
    path.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return path


def test_the_sample_trains_each_reply_whose_prompt_the_transcript_holds_and_names_the_others() -> None:
    out = []
    for ev in read_events(detect_format(SAMPLE), SAMPLE):
        assert isinstance(ev, ReadGraph)
        out.append(ev.graph)
    first, second = out
    assert missing_context(first) == ["files", "system_prompt"] == missing_context(second)
    replies = [n for n in first.nodes.values() if n.message.role == "assistant"]
    # Injected: the "Ok." after the commit note, and aider's answer to the interrupt.
    origins = sorted(str(n.origin) for n in replies)
    assert origins == ["carried", "injected", "injected", "sampled", "sampled", "sampled", "sampled"]
    users = [n.message.text for n in first.nodes.values() if n.message.role == "user"]
    assert 'make greet() take a name\nand default it to "world"' in users
    assert users.count("does anything else call greet()?") == 1  # /ask's text, not the copy aider logs again
    assert ADDED_FILES.format(fnames="main.py") in users
    assert EDITS_COMMITTED.format(hash="3f2a9c1", message="feat: add name parameter to greet") in users
    assert not any(u.startswith(("/", "Add ")) for u in users)
    # /clear: the test request starts a branch of its own, from the root.
    assert "add a test for greet" in [first.nodes[r].message.text for r in first.children[None]]
    # --watch-files: the reply to an "AI!" comment is not on the branch the next prompt extends.
    (unseen,) = [n for n in second.nodes.values() if n.origin is Origin.CARRIED]
    assert unseen.message.metadata["why_not_trained"].startswith("the transcript does not hold this reply's prompt")
    assert [b[0][2] for b in branch_texts(second) if b[0][0] == "user"] == ["thanks, now also strip the name"]


def test_converting_the_sample_counts_the_interrupted_and_the_unseen_replies_with_their_reasons(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    assert main(["convert", str(SAMPLE.parent), "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["turns"]["found"] == 7 and report["turns"]["trained"] == 5
    assert report["turns"]["dropped_by_reason"] == {"interrupted": 1, "context_unknown": 1}
    assert report["flags"]["context_incomplete"] == report["samples"]["written"]


def test_a_reply_interrupted_mid_stream_is_context_for_later_turns_never_trained(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        transcript(
            prompt("why is the hotkey slow?"),
            ">  \n>  \n> ^C again to exit  ",  # keyboard_interrupt() logs before the partial reply (send's finally)
            f"<{THINK}>\n\nLet me think.\n\n</{THINK}>\n\nThe hotkey handler waits",
            "> Tokens: 9.1k sent, 20 received.  ",
            prompt("you were looping; what is the cause?"),
            "The handler awaits the backend on every key press.",
        ),
    )
    (graph,) = graphs_of(path)
    (branch,) = branch_texts(graph)
    assert branch == [
        ("user", "context", "why is the hotkey slow?"),
        ("assistant", "carried", "The hotkey handler waits"),
        ("user", "injected", INTERRUPT_USER),
        ("assistant", "injected", INTERRUPT_ASSISTANT),
        ("user", "context", "you were looping; what is the cause?"),
        ("assistant", "sampled", "The handler awaits the backend on every key press."),
    ]
    interrupted = next(n for n in graph.nodes.values() if n.origin is Origin.CARRIED)
    assert [p.kind for p in interrupted.message.parts] == ["reasoning", "text"]
    out = tmp_path / "out"
    assert main(["convert", str(path), "-o", str(out)]) == 0  # an interrupted reply is the log's limit, not a failure
    report = json.loads((out / "report.json").read_text())
    assert report["turns"]["dropped_by_reason"] == {"interrupted": 1}
    assert report["turns"]["trained"] == 1


def test_before_v0_72_2_an_interrupted_reply_is_followed_by_no_note(tmp_path: Path) -> None:
    text = transcript(prompt("go"), "> ^C again to exit  ", "Partial", prompt("again"), "Whole.")
    path = write(tmp_path, text.replace("Aider v0.86.1", "Aider v0.48.1"))
    (graph,) = graphs_of(path)
    assert [t[2] for t in branch_texts(graph)[0]] == ["go", "Partial", "again", "Whole."]


def test_a_ctrl_c_after_aider_refused_the_request_changes_no_message(tmp_path: Path) -> None:
    texts = first_branch(
        tmp_path,
        prompt("can you run this application?"),
        "> Your estimated chat context of 275,159 tokens exceeds the 200,000 token limit for anthropic/sonnet!  \n"
        "> Try to proceed anyway? (Y)es/(N)o [Yes]: n  \n>  \n>  \n> ^C again to exit  ",
        prompt("make the button black"),
        "Done.",
    )
    assert texts == ["can you run this application?", "make the button black", "Done."]


def test_a_ctrl_c_before_any_text_of_a_running_request_ends_the_prompt_as_aider_records_it(tmp_path: Path) -> None:
    path = write(tmp_path, transcript(prompt("hello"), ">  \n>  \n> ^C again to exit  ", prompt("hi"), "Hi!"))
    (graph,) = graphs_of(path)
    assert [t[2] for t in branch_texts(graph)[0]] == [
        f"hello\n{INTERRUPT_USER}",
        INTERRUPT_ASSISTANT,
        "hi",
        "Hi!",
    ]


def test_commands_are_not_messages_and_chat_commands_send_their_text_once(tmp_path: Path) -> None:
    texts = first_branch(
        tmp_path,
        prompt("/add src/app.py"),
        "> Added src/app.py to the chat  ",
        prompt("/ask what does main do?"),
        prompt("what does main do?"),  # Coder.run(with_message) logs the text again
        "It parses arguments.",
        prompt("/tok"),
        "> Approximate context window usage  ",
        prompt("/ok and add a test"),
        prompt(f"{OK_MESSAGE} and add a test"),
        "Done.",
        prompt("!ls"),
        prompt("/undo"),
    )
    assert texts == [
        "what does main do?",
        "It parses arguments.",
        f"{OK_MESSAGE} and add a test",
        "Done.",
    ]


def test_command_names_resolve_by_unique_prefix_as_aider_resolves_them() -> None:
    assert command_of("/tok") == ("tokens", "")
    assert command_of("/a x") == (None, "x")  # add, architect, ask: ambiguous, nothing runs
    assert command_of("/ask  two  spaces") == ("ask", "two  spaces")
    assert command_of("!pytest -q") == ("run", "pytest -q")
    assert command_of("plain text") is None


def test_the_editor_of_architect_mode_replies_in_a_conversation_of_its_own(tmp_path: Path) -> None:
    plan = "Change `greet` to take a name.\n\n1. Add the parameter."
    path = write(
        tmp_path,
        transcript(
            "> Editor model: openai/gpt-4.1-mini with editor-diff edit format  ",
            prompt("/architect greet by name"),
            prompt("greet by name"),
            plan,
            "> Tokens: 1.2k sent, 30 received.  \n> Edit the files? (Y)es/(N)o [Yes]: y  ",
            prompt(plan),  # editor_coder.run(with_message=content) logs the plan as a prompt
            "greet.py\n```python\n<<<<<<< SEARCH\ndef greet():\n=======\ndef greet(name):\n>>>>>>> REPLACE\n```",
            "> Applied edit to greet.py  \n> Commit 0c1d2e3 feat: greet by name  ",
            prompt("thanks"),
            "Welcome.",
        ),
    )
    (graph,) = graphs_of(path)
    editor, architect = side_and_main(graph, "greet by name")
    assert architect[:2] == [("user", "context", "greet by name"), ("assistant", "sampled", plan)]
    # The architect's history gets aider's note once the editor ran, not the editor's commit.
    assert [t[2] for t in architect[2:]] == [EDITOR_DONE, "Ok.", "thanks", "Welcome."]
    assert editor[0] == ("user", "context", plan) and editor[1][1] == "sampled" and len(editor) == 2
    models = {graph.nodes[nid].message.text[:8]: gen.model for nid, gen in graph.generations.items()}
    assert models == {"Change `": "openai/gpt-4.1", "greet.py": "openai/gpt-4.1-mini", "Welcome.": "openai/gpt-4.1"}


def test_files_a_reply_named_and_the_user_added_are_the_next_replys_prompt(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        transcript(
            prompt("where is the setting read?"),
            "In `settings.py` and `config.py`.",
            "> config.py  \n> Add file to the chat? (Y)es/(N)o/(A)ll/(S)kip all/(D)on't ask again [Yes]: a  \n"
            "> settings.py  ",
            prompt("Add file to the chat? (Y)es/(N)o/(A)ll/(S)kip all/(D)on't ask again [Yes]: all"),
            "> Add file to the chat? (Y)es/(N)o/(A)ll/(S)kip all/(D)on't ask again [Yes]: a  ",
            "Both read `MOZ_SETTINGS`.",
        ),
    )
    (graph,) = graphs_of(path)
    assert branch_texts(graph)[0][2:] == [
        ("user", "injected", ADDED_FILES.format(fnames="config.py, settings.py")),
        ("assistant", "sampled", "Both read `MOZ_SETTINGS`."),
    ]


def test_a_byte_order_mark_before_the_header_keeps_the_first_session_whole(tmp_path: Path) -> None:
    path = write(tmp_path, "\ufeff" + transcript(prompt("hi"), "Hello.").lstrip("\n"), "bom.md")
    (graph,) = graphs_of(path)
    assert graph.metadata["started_at"] == "2025-06-02 10:14:03"


def test_crlf_transcripts_keep_blank_lines_and_prompt_lines_and_lost_trailing_spaces_are_read_by_prefix(
    tmp_path: Path,
) -> None:
    text = transcript(prompt("first line\n\n  indented"), "Reply\n\nwith a paragraph.")
    (crlf,) = graphs_of(write(tmp_path, text, "crlf.md", newline="\r\n"))
    trimmed = "\n".join(line.rstrip() for line in text.split("\n"))
    (bare,) = graphs_of(write(tmp_path, trimmed, "trimmed.md"))
    assert [t[2] for t in branch_texts(crlf)[0]] == ["first line\n\n  indented", "Reply\n\nwith a paragraph."]
    assert [t[2] for t in branch_texts(bare)[0]] == ["first line\n\n  indented", "Reply\n\nwith a paragraph."]


def test_a_session_without_prompts_or_replies_is_one_skipped_record(tmp_path: Path) -> None:
    text = transcript("> You can skip this check with --no-gitignore  ") + transcript(prompt("hi"), "Hello.")
    path = write(tmp_path, text)
    events = list(read_events(detect_format(path), path))
    assert [type(e).__name__ for e in events] == ["ReadSkip", "ReadGraph"]
    assert isinstance(events[0], ReadSkip) and events[0].reason == "aider_session_without_chat"


def test_a_renamed_transcript_is_detected_by_its_head_and_a_readme_is_not(tmp_path: Path) -> None:
    renamed = write(tmp_path, transcript(prompt("hi"), "Hello."), "notes.md")
    assert detect_format(renamed).name == "aider" and looks_like_a_log(renamed)
    readme = write(tmp_path, "# My project\n\n#### Usage  \n> quoted  \n", "README.md")
    assert not looks_like_a_log(readme)
    # Named as aider names it, a transcript whose first header was cut is still aider's.
    headless = write(tmp_path, prompt("hi") + "\n\nHello.\n", ".aider.chat.history.md")
    assert detect_format(headless).name == "aider"
    assert [t[2] for t in branch_texts(graphs_of(headless)[0])[0]] == ["hi", "Hello."]


def test_discovery_reads_the_hidden_transcript_and_lists_a_readme_with_its_reason(tmp_path: Path) -> None:
    write(tmp_path, transcript(prompt("hi"), "Hello."))
    write(tmp_path, "# My project\n", "README.md")
    write(tmp_path, "print('hi')\n", "main.py")
    files, ignored = discover_inputs([tmp_path])
    assert [f.name for f in files] == [".aider.chat.history.md"]
    reasons = {Path(i["path"]).name: i["reason"] for i in ignored}
    assert reasons["main.py"] == "not a log file suffix"
    assert reasons["README.md"].startswith("not a log file suffix: text that is not a transcript a reader knows")
    assert "# aider chat started at" in reasons["README.md"]


def test_validate_names_the_passed_over_readme(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, transcript(prompt("hi"), "Hello."))
    write(tmp_path, "# My project\n", "README.md")
    main(["validate", str(tmp_path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["ignored"] == [str(tmp_path / "README.md")]


def test_a_system_prompt_supplied_for_the_format_leads_every_branch_and_the_files_stay_missing(
    tmp_path: Path,
) -> None:
    prompt_file = tmp_path / "aider-system.txt"
    prompt_file.write_text("Act as an expert software developer.\n", encoding="utf-8")
    config = tmp_path / "convert.yaml"
    config.write_text(f"context:\n  - {{format: aider, system_prompt: {prompt_file}}}\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["convert", str(SAMPLE.parent), "-o", str(out), "--config", str(config)]) == 0
    report = json.loads((out / "report.json").read_text())
    written = report["samples"]["written"]
    assert report["context_supplied"]["samples"]["system_prompt"] == written
    # aider's chat files and repository map are still not in the samples: they stay context-incomplete.
    assert report["flags"]["context_incomplete"] == written
    graphs = [ev.graph for ev in read_events(detect_format(SAMPLE), SAMPLE) if isinstance(ev, ReadGraph)]
    rules = load_rules([{"format": "aider", "system_prompt": str(prompt_file)}])
    for ev in with_supplied_context(
        (ReadGraph(g, SourceRef(str(SAMPLE))) for g in graphs), rules, "aider", str(SAMPLE)
    ):
        assert isinstance(ev, ReadGraph) and missing_context(ev.graph) == ["files"]
        roots = [ev.graph.nodes[r].message for r in ev.graph.children[None]]
        assert {m.role for m in roots} == {"system"}


def test_a_session_that_restored_the_earlier_transcript_trains_nothing_until_clear(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        transcript(
            "> Restored previous conversation history.  ",
            prompt("go on"),
            "Continuing.",
            prompt("/clear"),
            prompt("start over"),
            "Fresh.",
        ),
    )
    (graph,) = graphs_of(path)
    origins = {n.message.text: n.origin for n in graph.nodes.values() if n.message.role == "assistant"}
    assert origins == {"Continuing.": Origin.CARRIED, "Fresh.": Origin.SAMPLED}
    carried = next(n for n in graph.nodes.values() if n.origin is Origin.CARRIED)
    assert "--restore-chat-history" in carried.message.metadata["why_not_trained"]


def test_a_multi_line_output_message_is_output_even_where_its_padded_lines_end_in_spaces(tmp_path: Path) -> None:
    # confirm_ask pads a multi-line subject's lines to one width; tool_output writes "> " on its first line only
    # (0xf1e/health-analyzer-poc .aider.chat.history.md at 87686c139eecd296ea3ab9c72b4e0c9197f68668).
    path = write(
        tmp_path,
        transcript(
            prompt("write the script"),
            "Here it is.",
            "> Applied edit to run.sh  \n> Commit e14ab36 feat: add run.sh  \n"
            "> export TOKEN=x\nexport OWNER=me    \n./run.sh  \n"
            "> Run shell commands? (Y)es/(N)o/(D)on't ask again [Yes]: n  ",
            prompt("thanks"),
            "You're welcome.",
        ),
    )
    (graph,) = graphs_of(path)
    note = EDITS_COMMITTED.format(hash="e14ab36", message="feat: add run.sh")
    texts = ["write the script", "Here it is.", note, "Ok.", "thanks", "You're welcome."]
    assert [t[2] for t in branch_texts(graph)[0]] == texts


def test_transcripts_of_aider_before_v0_5_are_read_in_their_own_grammar(tmp_path: Path) -> None:
    # aider/io.py at 11c0dd89d (2023-05-17): "---" then "#### > " prompts; the first days' output was "_italic_".
    text = (
        "\n# Aider chat started at 2023-05-12 15:23:26\n\n"
        "_Creating app.py_  \n_Add them? yes_  \n\n"
        "---\n#### >  make a flask app  \n#### >    with two routes  \n\n"
        "Ok, here are the changes:\n\n_emphasis in the reply_\n\n"
        "_Applied edit to app.py_  \n\n"
        "---\n#### >  remove one  \n\nDone.\n\n> Applied edit to app.py  \n"
    )
    (graph,) = graphs_of(write(tmp_path, text, "old.md"))
    assert [t[2] for t in branch_texts(graph)[0]] == [
        "make a flask app\n  with two routes",
        "Ok, here are the changes:\n\n_emphasis in the reply_",
        "remove one",
        "Done.",
    ]


def test_a_forced_aider_reader_rejects_a_file_it_does_not_recognise(tmp_path: Path) -> None:
    readme = write(tmp_path, "# My project\n\nSome text\n", "README.md")
    out = tmp_path / "out"
    assert main(["convert", str(readme), "--input-format", "aider", "-o", str(out), "--allow-empty"]) == 3
    (reject,) = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert reject["reason"] == "forced_format_not_recognised"


def test_a_bucket_lists_the_hidden_transcript_as_an_input_and_a_readme_with_its_reason() -> None:
    fsspec = pytest.importorskip("fsspec")
    from msgtrain.run.storage import discover_objects

    memory = fsspec.filesystem("memory")
    memory.pipe("/aider-bucket/logs/.aider.chat.history.md", SAMPLE.read_bytes())
    memory.pipe("/aider-bucket/logs/README.md", b"# notes\n")
    try:
        found, ignored = discover_objects("memory://aider-bucket/logs")
    finally:
        memory.rm("/aider-bucket", recursive=True)
    assert [str(f).rsplit("/", 1)[1] for f in found] == [".aider.chat.history.md"]
    assert [i["reason"].split(":")[0] for i in ignored] == ["not a log file suffix"]
    assert "# aider chat started at" in ignored[0]["reason"]


def test_after_applied_edits_the_history_holds_aiders_note_and_ok_as_aider_keeps_it(tmp_path: Path) -> None:
    # base_coder.send_message -> move_back_cur_messages(saved_message): the commit note (or "I updated the files."
    # without a commit), then "Ok."; the linter's later commit is not the note.
    texts = first_branch(
        tmp_path,
        prompt("rename foo"),
        "Renamed.",
        "> Applied edit to a.py  \n> Commit 1a2b3c4 refactor: rename foo to bar  \n"
        "> Commit 5d6e7f8 style: Ran the linter  ",
        prompt("and baz"),
        "Done.",
        "> Applied edit to b.py  ",
        prompt("thanks"),
        "Welcome.",
    )
    assert texts == [
        "rename foo",
        "Renamed.",
        EDITS_COMMITTED.format(hash="1a2b3c4", message="refactor: rename foo to bar"),
        "Ok.",
        "and baz",
        "Done.",
        EDITS_UNCOMMITTED,
        "Ok.",
        "thanks",
        "Welcome.",
    ]


def test_a_failed_edit_is_reflected_back_as_the_next_prompt_whole(tmp_path: Path) -> None:
    # Aquaticat/Monochromatic .aider.chat.history.md at 56372c6db0d4f2431d99bfdbe2142702ed891101 (v0.84): the error
    # is one tool_output message, "> " on its first line only, stripped; aider sends str(err), which ends with "\n".
    error = (
        "# 1 SEARCH/REPLACE block failed to match!\n\n"
        "## SearchReplaceNoExactMatch: This SEARCH block failed to exactly match lines in a.py\n"
        "<<<<<<< SEARCH\n    x = 1\n=======\n    x = 2\n>>>>>>> REPLACE\n\n"
        "The SEARCH section must exactly match an existing block of lines including all white space, comments,"
        " indentation, docstrings, etc"
    )
    texts = first_branch(
        tmp_path,
        prompt("set x to 2"),
        "a.py\n```python\n<<<<<<< SEARCH\n    x = 1\n=======\n    x = 2\n>>>>>>> REPLACE\n```",
        "> Tokens: 2.0k sent, 40 received.  \n> The LLM did not conform to the edit format.  \n"
        "> https://aider.chat/docs/troubleshooting/edit-errors.html  \n> " + error + "  ",
        "You are right, the indentation differs.",
        "> Applied edit to a.py  \n> Commit 1a2b3c4 fix: set x to 2  ",
    )
    assert texts[2:4] == [error + "\n", "You are right, the indentation differs."]


def test_the_failed_edit_of_a_reply_off_the_branch_leaves_its_retry_off_the_branch(tmp_path: Path) -> None:
    error = "# 1 SEARCH/REPLACE block failed to match!\n\nThe SEARCH section must exactly match"
    failed = "> The LLM did not conform to the edit format.  \n> " + error + "  "
    path = write(
        tmp_path,
        transcript(
            "> Processing your request...  ", "Edit for the AI! comment.", failed, "Retry.", prompt("ok"), "Ok!"
        ),
    )
    (graph,) = graphs_of(path)
    carried = {n.message.text for n in graph.nodes.values() if n.origin is Origin.CARRIED}
    assert carried == {"Edit for the AI! comment.", "Retry."}


def test_markdown_with_prompt_lines_but_no_session_header_is_explained(tmp_path: Path) -> None:
    from msgtrain.errors import FormatError

    cut = write(tmp_path, "notes\n\n" + prompt("hi") + "\n\nHello.\n", "notes.md")
    with pytest.raises(FormatError) as caught:
        detect_format(cut)
    assert "aider: 1 '#### ' prompt lines but no '# aider chat started at' session header" in str(caught.value.hint)


def test_a_switch_to_another_edit_format_summarises_the_history_and_asks_and_codes_do_not(tmp_path: Path) -> None:
    # commands.cmd_chat_mode / Coder.create(summarize_from_coder): a changed edit format summarises a history.
    def announce(edit_format: str) -> str:
        return f"> Aider v0.86.1  \n> Main model: openai/gpt-4.1 with {edit_format} edit format  "

    path = write(
        tmp_path,
        transcript(
            prompt("first"),
            "One.",
            prompt("/ask"),
            announce("ask"),
            prompt("second"),
            "Two.",
            prompt("/architect"),
            announce("architect"),
            prompt("third"),
            "Three.",
        ),
    )
    (graph,) = graphs_of(path)
    origins = {n.message.text: n.origin for n in graph.nodes.values() if n.message.role == "assistant"}
    assert origins == {"One.": Origin.SAMPLED, "Two.": Origin.SAMPLED, "Three.": Origin.CARRIED}
    three = next(n for n in graph.nodes.values() if n.message.text == "Three.")
    assert three.message.metadata["why_not_trained"].startswith("aider summarised its history")


def test_before_v0_49_a_reply_to_add_or_undo_answers_the_message_the_command_returned(tmp_path: Path) -> None:
    # AspireOne/laura-backend .aider.chat.history.md at 81d397da11050fcdbf267d221d5d5f1a8438c7e6 (v0.37): cmd_add
    # returned prompts.added_files after some chat, cmd_undo prompts.undo_command_reply; run_loop sent them.
    texts = first_branch(
        tmp_path,
        prompt("make a cron job"),
        "Which module?",
        prompt("/add src/app.module.ts"),
        "> Added src/app.module.ts to the chat  ",
        "I will register it there.",
        prompt("/undo"),
        "> Commit `1a2b3c4` was reset and removed from git.  ",
        "Understood.",
    )
    assert texts == [
        "make a cron job",
        "Which module?",
        ADDED_FILES.format(fnames="src/app.module.ts"),
        "I will register it there.",
        UNDO_REPLY,
        "Understood.",
    ]


def test_output_messages_of_several_lines_are_output_after_a_prompt_and_at_a_sessions_start(tmp_path: Path) -> None:
    # BartoshMaxim/TradePirates .aider.chat.history.md at 7dc1eafdccd922a08c04391e964451ff77f86e45: the command line
    # of `aider --message` over several lines (CR CR LF ends), first in the session; a /git usage text after /git.
    text = (
        f"\r\n{HEADER}\r\n\r\n> aider --architect --message \r\r\n   1. Read TODO.md  \r\n"
        + STARTUP.replace("\n", "\r\n")
        + "\r\n"
        + prompt("/git")
        + "\r\n> usage: git [-v | --version]\r\n           <command> [<args>]  \r\n\r\n"
        + prompt("hi")
        + "\r\n\r\n> A quote in the reply\r\n\r\nHello.\r\n"
    )
    (graph,) = graphs_of(write(tmp_path, text, "crcrlf.md", newline="\n"))
    assert [t[2] for t in branch_texts(graph)[0]] == ["hi", "> A quote in the reply\n\nHello."]


def test_a_whole_file_listing_without_a_name_is_reflected_as_its_one_line_error(tmp_path: Path) -> None:
    # BeauCranston/car-game .aider.chat.history.md at 62288fd46cb451c94de0fd94835ffe221dd3cc75 (wholefile_coder.py).
    texts = first_branch(
        tmp_path,
        prompt("rewrite it"),
        "```\ncode\n```",
        "> Tokens: 21k sent, 4.7k received.  \n> The LLM did not conform to the edit format.  \n"
        "> https://aider.chat/docs/troubleshooting/edit-errors.html  \n"
        "> No filename provided before ``` in file listing  ",
        "Here is the corrected listing.",
    )
    assert texts[2:] == ["No filename provided before ``` in file listing", "Here is the corrected listing."]


def test_a_quote_ending_in_a_line_break_stays_in_its_reply_where_replies_are_followed_by_usage(
    tmp_path: Path,
) -> None:
    # BeauCranston/car-game .aider.chat.history.md at 62288fd46cb451c94de0fd94835ffe221dd3cc75: a reply's own
    # "> **Optionally** ...  " (a markdown line break) looks like aider's output; the usage report ends the reply.
    reply = "## Plan\n\n> **Optionally** merge the classes  \n\n### Next\n\n> a quote  \n\nThe end."
    texts = first_branch(tmp_path, prompt("plan it"), reply, "> Tokens: 2.0k sent, 90 received.  ", prompt("ok"), "Ok!")
    assert texts == ["plan it", reply, "ok", "Ok!"]


def test_lint_fixes_are_a_conversation_of_their_own_that_ends_when_the_user_types_again(tmp_path: Path) -> None:
    # commands.cmd_lint: a clone of the coder with cur_messages=[] and done_messages=[] runs each file's errors.
    errors = (
        "# Fix any errors below, if possible.\n\n## Running: flake8 a.py\n\na.py:1:1: F401 'os' imported but unused"
    )
    path = write(
        tmp_path,
        transcript(
            prompt("add a helper"),
            "Added.",
            "> Tokens: 1k sent, 9 received.  ",
            prompt("/lint"),
            "> " + errors.replace("\n", "  \n> ") + "  \n> Fix lint errors in a.py? (Y)es/(N)o [Yes]: y  ",
            prompt(errors),
            "Removed the import.",
            "> Tokens: 1k sent, 9 received.  \n> Applied edit to a.py  ",
            prompt("thanks"),
            "Welcome.",
        ),
    )
    (graph,) = graphs_of(path)
    lint, main_branch = side_and_main(graph, "add a helper")
    assert [t[2] for t in lint] == [errors, "Removed the import.", EDITS_UNCOMMITTED, "Ok."]  # the lint coder's own
    assert [t[2] for t in main_branch] == ["add a helper", "Added.", "thanks", "Welcome."]
    assert lint[1][1] == "sampled" and main_branch[3][1] == "sampled"


@pytest.mark.parametrize(
    ("output", "fnames"),
    [
        # v0.7x on: the file's line, then the question (AlexShchuka/mozgoslav above).
        ("> a.py  \n> Add file to the chat? (Y)es/(N)o/(D)on't ask again [Yes]: y  ", "a.py"),
        # v0.6x: the file in the question (ArkMaster123/clientdemoNISTAI at ce7c3092ade36b701a59c2448debdfc0e3cb6cd8).
        ("> Add .gitignore to the chat? (Y)es/(N)o/(D)on't ask again [Yes]: y  ", ".gitignore"),
        # before: every file's line after the usage report, then one question (aider v0.50.0 base_coder.py).
        ("> Tokens: 1k sent, 9 received.  \n> a.py  \n> b.py  \n> Add these files to the chat? y  ", "a.py, b.py"),
    ],
)
def test_the_files_a_reply_named_are_the_next_prompt_in_each_versions_question(
    tmp_path: Path, output: str, fnames: str
) -> None:
    texts = first_branch(tmp_path, prompt("where is it read?"), "In the files.", output, "Both read it.")
    assert texts[2:] == [ADDED_FILES.format(fnames=fnames), "Both read it."]


def test_adding_a_shell_commands_output_is_not_a_file_a_reply_named(tmp_path: Path) -> None:
    output = "> Running ls  \n> Add command output to the chat? (Y)es/(N)o/(D)on't ask again [Yes]: y  "
    path = write(tmp_path, transcript(prompt("list"), "Run `ls`.", output, "Here they are."))
    (graph,) = graphs_of(path)
    carried = [n.message.text for n in graph.nodes.values() if n.origin is Origin.CARRIED]
    assert carried == ["Here they are."]


def test_a_prompt_that_ends_like_an_old_answer_is_still_a_prompt(tmp_path: Path) -> None:
    assert first_branch(tmp_path, prompt("is this right? yes"), "It is.") == ["is this right? yes", "It is."]


def test_aiders_other_files_in_a_project_folder_are_skipped_by_name_not_rejected(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    write(project, transcript(prompt("hi"), "Hello."))
    write(project, "model: sonnet\nauto-commits: false\n", ".aider.conf.yml")
    write(project, "\n# 2025-06-02 10:14:03.123456\n+hi\n", ".aider.input.history")
    (project / ".aider.tags.cache.v4").mkdir()
    out = tmp_path / "out"
    assert main(["convert", str(project), "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["records"]["skipped_by_reason"] == {"aider_config": 1, "aider_input_history": 1}
    assert report["records"]["rejected"] == 0 and report["turns"]["trained"] == 1
    assert [Path(i["path"]).name for i in report["files"]["ignored"]] == [".aider.tags.cache.v4"]


def test_a_session_whose_prompts_got_no_reply_is_a_skip_that_says_so_not_an_empty_graph(tmp_path: Path) -> None:
    # AgentArchitectDev/SYNERGIA_CORE_NEXT_PRO .aider.chat.history.md at a189f408ad93f156ccade3027dd7dd222cce0dbe:
    # each request failed (an API error) or was interrupted; a run of such sessions converts nothing and says why.
    failed = "> litellm.AuthenticationError: Incorrect API key provided  \n>  \n>  \n> ^C KeyboardInterrupt  "
    path = write(tmp_path, transcript(prompt("hi"), failed), "failed.md")
    (event,) = list(read_events(detect_format(path), path))
    assert isinstance(event, ReadSkip) and event.reason == "aider_session_without_replies"
    assert main(["convert", str(path), "-o", str(tmp_path / "out")]) != 0
