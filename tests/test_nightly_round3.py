"""Smaller failures of the third nightly sweep: each said as what it is, nothing left behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from msgtrain.cli import main

CHAT = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def _rejects(out: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]


def test_valid_json_nested_past_the_parsers_limit_is_a_nesting_reject_not_invalid_json(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    deep = "[" * 100_000 + "]" * 100_000
    record = json.dumps(CHAT)[:-1] + ', "meta": ' + deep + "}"
    (logs / "deep.json").write_text(record)  # one document on one line
    (logs / "deep.jsonl").write_text(json.dumps(CHAT) + "\n" + record + "\n" + json.dumps(CHAT) + "\n")
    out = tmp_path / "out"
    assert main(["convert", str(logs), "-o", str(out), "-q"]) == 3
    rejects = _rejects(out)
    assert [(Path(r["file"]).name, r["reason"]) for r in rejects] == [
        ("deep.json", "too_deep"),
        ("deep.jsonl", "too_deep"),
    ]
    assert all("nesting limit" in r["message"] for r in rejects)


def test_a_failed_first_run_leaves_no_state_or_lock_folder_and_an_interrupted_one_keeps_its_parts(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "junk.jsonl").write_text("{broken\n")
    out = tmp_path / "out"
    assert main(["convert", str(logs), "-o", str(out), "-q"]) == 1  # nothing read: refused
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]
    # A run that published before keeps its state when a later run fails (its parts serve --resume).
    (logs / "good.jsonl").write_text(json.dumps(CHAT) + "\n")
    assert main(["convert", str(logs), "-o", str(out), "-q"]) == 3
    assert main(["convert", str(logs), "-o", str(out), "-q", "--max-reject-rate", "0.1"]) == 1
    assert (tmp_path / ".out.msgtrain-state").is_dir() and (out / "report.json").is_file()


def test_fifos_dangling_links_and_link_loops_are_listed_on_screen_as_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "good.jsonl").write_text(json.dumps(CHAT) + "\n")
    os.mkfifo(logs / "pipe.jsonl")
    (logs / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    (logs / "loop.jsonl").symlink_to(logs / "loop.jsonl")
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["convert", str(logs), "-o", str(out)]) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert "3 inputs could not be read" in err
    assert f"{logs / 'pipe.jsonl'}: unreadable: a FIFO, not a regular file" in err
    assert f"{logs / 'gone.jsonl'}: unreadable: dangling symlink" in err
    assert f"{logs / 'loop.jsonl'}: unreadable: symlink loop" in err
    assert json.loads((out / "report.json").read_text())["files"]["unreadable"] == 3


def test_validate_and_convert_agree_that_a_lone_csv_is_not_a_log_and_both_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "data.csv"
    csv.write_text("a,b\n1,2\n")
    capsys.readouterr()
    assert main(["validate", str(csv)]) == 3  # was 0, "no problems"
    said = " ".join(capsys.readouterr().out.split())
    assert "nothing_read" in said and f"{csv} (not a log file suffix)" in said
    assert main(["convert", str(csv), "-o", str(tmp_path / "out"), "-q"]) == 1
    assert f"{csv} (not a log file suffix)" in " ".join(capsys.readouterr().err.split())


def test_stats_validate_and_inspect_read_an_object_store_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("moto", reason="the store tests need moto (pip install 'msgtrain[store-test]')")
    from tests.store_helpers import moto_s3

    logs = tmp_path / "logs"
    logs.mkdir()
    chats = [
        {"messages": [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": "hello"}]}
        for i in range(3)
    ]
    (logs / "chats.jsonl").write_text("".join(json.dumps(c) + "\n" for c in chats))
    with moto_s3("round3"):
        out = "s3://round3/sft"
        assert main(["convert", str(logs), "-o", out, "-q"]) == 0
        capsys.readouterr()
        assert main(["stats", out, "--json"]) == 0
        stats = json.loads(capsys.readouterr().out)
        assert stats["dataset"] == out and stats["samples"] == 3
        assert main(["validate", out]) == 0
        assert "s3:/round3" not in capsys.readouterr().out
        assert main(["inspect", out, "--sample", "0"]) == 0
        assert "hello" in capsys.readouterr().out
        assert main(["stats", "s3://round3/nothing-here"]) == 2  # no dataset there: said so, a usage error
        assert "no published msgtrain dataset" in capsys.readouterr().err
