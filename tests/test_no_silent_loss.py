"""No silent loss: every file under an input is read or listed with a reason, the books estimate the turns in
rejected records, a forced reader reads any suffix and rejects what it does not recognise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain.cli import main
from tests.conftest import SAMPLE_LOGS

CHAT = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}


def _convert(tmp_path: Path, *args: str, out_name: str = "out") -> tuple[int, dict[str, Any]]:
    out = tmp_path / out_name
    code = main(["convert", *args, "-o", str(out), "-q"])
    return code, json.loads((out / "report.json").read_text())


def _validate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["validate", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_hidden_files_are_read_and_hidden_directories_are_listed_with_a_reason(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / ".git").mkdir(parents=True)
    (logs / ".git" / "HEAD.json").write_text("{}")
    (logs / ".session.jsonl").write_text(json.dumps(CHAT) + "\n" + json.dumps(CHAT) + "\n")
    # aider's transcript: a dotfile in markdown, read by the aider reader; a README beside it is listed with why.
    (logs / ".aider.chat.history.md").write_text("#### hi  \n\nhello\n")
    (logs / "README.md").write_text("# logs\n")
    code, report = _convert(tmp_path, str(logs))
    # The session's second record repeats the first: read, and its reply counted once as a duplicate.
    assert code == 0 and report["turns"]["trained"] == 2
    assert report["turns"]["dropped_by_reason"] == {"duplicate": 1} and report["records"]["converted"] == 3
    ignored = {Path(i["path"]).name: i["reason"].split(":")[0] for i in report["files"]["ignored"]}
    assert ignored == {".git": "hidden directory, not searched", "README.md": "not a log file suffix"}


def test_the_books_estimate_the_assistant_turns_of_rejected_records(tmp_path: Path) -> None:
    # Two assistants taking turns (which one is the policy is ambiguous): every record rejected, 2 replies each.
    record = {
        "chat": [
            {"role": "user", "content": "Plan a trip"},
            {"role": "assistant", "name": "Planner", "content": "Step 1"},
            {"role": "assistant", "name": "Critic", "content": "Too vague"},
        ]
    }
    path = tmp_path / "roleplay.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps(record) + "\n" + json.dumps(CHAT) + "\n")
    code, report = _convert(tmp_path, str(path))  # read by the OpenAI reader: the chat lines are no conversation
    assert code == 3 and report["turns"]["trained"] == 1
    assert report["records"]["rejected_by_reason"] == {"not_a_conversation": 2}
    assert report["turns"]["in_rejected_records"] == 4
    talk = {"dialog": [{"speaker": "user", "text": "q"}, {"speaker": "bot", "text": "a"}]}
    path.write_text(json.dumps(record) + "\n" + json.dumps(record) + "\n" + json.dumps(talk) + "\n")
    code, report = _convert(tmp_path, str(path), out_name="out2")  # read by shape: ambiguous, the path named
    assert report["records"]["rejected_by_reason"] == {"ambiguous_structure": 2}
    assert report["turns"]["in_rejected_records"] == 4


def test_a_file_nothing_reads_counts_the_replies_it_held(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A JSON document whose messages hide in an object keyed by id: no layout reads it, the count is still known.
    doc = {"by_id": {"m1": {"role": "user", "content": "q"}, "m2": {"role": "assistant", "content": "a"}}}
    path = tmp_path / "mapping.json"
    path.write_text(json.dumps(doc))
    code, report = _validate(capsys, str(path))  # validate: convert publishes nothing from a run that read nothing
    assert code == 3 and report["convert"]["records"]["rejected"] == 1
    assert report["convert"]["turns"]["in_rejected_records"] == 1


def test_a_forced_reader_reads_any_suffix(tmp_path: Path) -> None:
    path = tmp_path / "chat.log"
    path.write_text(json.dumps(CHAT) + "\n" + json.dumps(CHAT) + "\n")
    code, report = _convert(tmp_path, str(path), "--input-format", "openai_chat")
    assert code == 0 and report["records"]["converted"] == 2
    assert report["turns"]["trained"] == 1 and report["turns"]["dropped_by_reason"] == {"duplicate": 1}


def test_a_forced_reader_that_recognises_nothing_rejects_instead_of_skipping_everything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = SAMPLE_LOGS / "openai_chat" / "conversations.jsonl"
    code, report = _validate(capsys, str(path), "--input-format", "claude_code")
    counts = report["convert"]
    assert code == 3 and counts["records"]["skipped"] == 0
    assert set(counts["records"]["rejected_by_reason"]) == {"forced_format_not_recognised"}
    assert counts["turns"]["in_rejected_records"] > 0
