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


def test_a_failed_run_that_keeps_its_parts_says_where_they_are_and_how_large(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "good.jsonl").write_text(json.dumps(CHAT) + "\n")
    (logs / "junk.jsonl").write_text("{broken\n")
    out = tmp_path / "out"
    assert main(["convert", str(logs), "-o", str(out), "-q"]) == 3
    capsys.readouterr()
    assert main(["convert", str(logs), "-o", str(out), "-q", "--max-reject-rate", "0.1"]) == 1
    said = " ".join(capsys.readouterr().err.split())
    parts = tmp_path / ".out.msgtrain-state" / "parts"
    size = sum(f.stat().st_size for f in parts.rglob("*") if f.is_file())
    assert f"2 parts ({size / 1024:.1f} KiB) are kept in {parts}" in said, said
    assert "--resume" in said and "delete" in said


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


def test_store_errors_are_one_line_naming_the_url_and_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("moto", reason="the store tests need moto (pip install 'msgtrain[store-test]')")
    import s3fs

    from msgtrain.run import pipeline
    from tests.store_helpers import moto_s3

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "chats.jsonl").write_text(json.dumps(CHAT) + "\n")

    def said() -> str:
        err = capsys.readouterr().err
        assert "internal error" not in err and "Traceback" not in err, err
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        return lines[0]

    with moto_s3("round3-errors") as store:
        capsys.readouterr()
        # A bucket that does not exist: not "another run is writing this output".
        assert main(["convert", str(logs), "-o", "s3://no-such-bucket/sft", "-q"]) == 1
        line = said()
        assert "s3://no-such-bucket/sft" in line and "bucket no-such-bucket does not exist" in line
        # No credentials: named, with how to pass them under ray job submit.
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(name)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        s3fs.S3FileSystem.clear_instance_cache()
        assert main(["convert", str(logs), "-o", "s3://round3-errors/sft", "-q"]) == 1
        line = said()
        assert "s3://round3-errors/sft" in line and "no usable credentials" in line and "runtime env" in line
        monkeypatch.undo()
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        s3fs.S3FileSystem.clear_instance_cache()
        # The endpoint gone mid-run (after the lease was taken): the connection error, not the lease's release.
        execute = pipeline.execute

        def server_dies(*args: object, **kwargs: object) -> object:
            store.server.stop()
            return execute(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(pipeline, "execute", server_dies)
        assert main(["convert", str(logs), "-o", "s3://round3-errors/sft", "-q"]) == 1
        line = said()
        assert "cannot connect to the s3:// store at http://127.0.0.1" in line and "s3://round3-errors/sft" in line


def test_a_latin1_line_is_one_reject_naming_the_encoding_and_a_utf16_file_is_decoded_by_its_bom(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    chats = [{**CHAT, "messages": [{"role": "user", "content": w}, CHAT["messages"][1]]} for w in ("hi", "café", "hey")]
    (logs / "latin.jsonl").write_bytes(
        "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in chats).encode("latin-1")
    )
    (logs / "wide.jsonl").write_bytes((json.dumps(CHAT) + "\n").encode("utf-16"))
    out = tmp_path / "out"
    assert main(["convert", str(logs), "-o", str(out), "-q"]) == 3
    rejects = {Path(r["file"]).name: r for r in _rejects(out)}
    assert rejects["latin.jsonl"]["record"] == "line 2" and rejects["latin.jsonl"]["reason"] == "bad_utf8"
    assert "Latin-1" in rejects["latin.jsonl"]["hint"] and "iconv" in rejects["latin.jsonl"]["hint"]
    assert "wide.jsonl" not in rejects  # UTF-16 by its byte-order mark: decoded (tests/test_text_encodings.py)
    assert json.loads((out / "report.json").read_text())["records"]["converted"] == 3  # latin.jsonl's valid lines + 1
