"""`msgtrain convert` as users run it: the README's command, real tokenizers, bad input, workers, resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from msgtrain.cli import main
from msgtrain.export.schema import check_sample
from msgtrain.run.assembly import check_accounting
from tests.conftest import SAMPLE_LOGS, shared_path


def run(*args: str) -> int:
    return main([*args])


def report(out: Path) -> dict[str, Any]:
    data = json.loads((out / "report.json").read_text())
    check_accounting(data)  # every run in the suite must balance its books
    return data


def rows(out: Path) -> list[dict[str, Any]]:
    return [r for f in sorted((out / "data").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def test_the_readme_main_job_converts_sample_logs_offline_with_the_demo_tokenizer(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run("convert", str(SAMPLE_LOGS / "native"), str(SAMPLE_LOGS / "calls"), "-o", str(out), "-q") == 0
    data = report(out)
    assert data["tokenizer"]["demo"] is True
    assert data["samples"]["written"] > 0 and data["tokens"]["trained"] > 0
    for row in rows(out):
        check_sample(row)
    from datasets import load_dataset

    ds = load_dataset("parquet", data_files=str(out / "data" / "*.parquet"), split="train")
    assert ds.num_rows == data["samples"]["written"]


def test_real_tokenizer_reports_edit_compaction_and_rerender_cuts(tmp_path: Path) -> None:
    tok = shared_path("tokenizers", "qwen3")
    out = tmp_path / "out"
    assert run("convert", str(SAMPLE_LOGS / "native"), "-o", str(out), "--tokenizer", str(tok), "-q") == 0
    cuts = report(out)["cuts_by_reason"]
    assert cuts.get("edit", 0) >= 1 and cuts.get("compaction", 0) == 1 and cuts.get("template_rerender", 0) >= 1


def test_bad_records_go_to_rejects_and_good_ones_in_the_same_file_are_still_converted(tmp_path: Path) -> None:
    good = (SAMPLE_LOGS / "calls" / "agent_calls.jsonl").read_text().splitlines()
    mixed = tmp_path / "logs" / "mixed.jsonl"
    mixed.parent.mkdir()
    bad = [
        "{not json",
        json.dumps({"request": {"messages": []}, "response": {"choices": []}}),
        json.dumps({"request": {"messages": [{"role": "hacker", "content": "x"}]}, "response": {"choices": [{}]}}),
    ]
    mixed.write_text("\n".join([good[0], bad[0], good[1], bad[1], bad[2], good[2]]) + "\n" + '{"request": {"mess')
    out = tmp_path / "out"
    assert run("convert", str(mixed.parent), "-o", str(out), "-q") == 3  # finished, with rejects
    data = report(out)
    assert data["records"]["rejected"] == 4 and data["records"]["converted"] == 3
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert {r["reason"] for r in rejects} >= {"bad_json", "truncated_line", "unknown_role"}
    assert all(r["file"].endswith("mixed.jsonl") and r["record"].startswith("line ") for r in rejects)
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "mixed.jsonl").write_text("\n".join(good) + "\n")
    out2 = tmp_path / "out2"
    assert run("convert", str(clean), "-o", str(out2), "-q") == 0
    strip = lambda rs: [{k: v for k, v in r.items() if k != "source"} for r in rs]  # noqa: E731
    assert strip(rows(out)) == strip(rows(out2))  # the garbage around them changed nothing


def test_strict_fails_on_the_first_bad_record(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert run("convert", str(bad), "-o", str(tmp_path / "out"), "--strict", "-q") == 1
    assert not (tmp_path / "out").exists()


def test_one_and_two_workers_write_byte_identical_parquet(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    for i in range(3):
        shutil.copytree(SAMPLE_LOGS / "native", logs / f"n{i}")
        shutil.copytree(SAMPLE_LOGS / "calls", logs / f"c{i}")
    a, b = tmp_path / "a", tmp_path / "b"
    assert run("convert", str(logs), "-o", str(a), "-q") == 0
    assert run("convert", str(logs), "-o", str(b), "-q", "--workers", "2") == 0
    files = sorted(p.name for p in (a / "data").iterdir())
    assert files == sorted(p.name for p in (b / "data").iterdir())
    for name in files:
        assert (a / "data" / name).read_bytes() == (b / "data" / name).read_bytes()
    assert (a / "report.json").read_bytes() == (b / "report.json").read_bytes()


def test_resume_converts_only_new_files_and_publishes_the_union(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(SAMPLE_LOGS / "native", logs / "day1")
    out = tmp_path / "out"
    assert run("convert", str(logs), "-o", str(out), "-q", "--resume") == 0
    first = report(out)
    shutil.copytree(SAMPLE_LOGS / "calls", logs / "day2")
    assert run("convert", str(logs), "-o", str(out), "-q", "--resume") == 0
    second = json.loads((out / "report.json").read_text())
    full = tmp_path / "full"
    assert run("convert", str(logs), "-o", str(full), "-q") == 0
    assert (out / "data" / "train-00000-of-00001.parquet").read_bytes() == (
        full / "data" / "train-00000-of-00001.parquet"
    ).read_bytes()
    assert second["samples"]["written"] > first["samples"]["written"]


def test_a_split_keeps_every_conversation_in_one_split(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    records = [json.loads(line) for line in (SAMPLE_LOGS / "calls" / "agent_calls.jsonl").read_text().splitlines()]
    with open(logs / "many.jsonl", "w") as f:
        for i in range(12):  # twelve conversations (session ids), three calls each
            for rec in records:
                f.write(json.dumps({**rec, "session_id": f"s{i}"}) + "\n")
    out = tmp_path / "out"
    assert run("convert", str(logs), "-o", str(out), "-q", "--split", "validation=0.5") == 0
    by_split: dict[str, set[str]] = {}
    for f in (out / "data").glob("*.parquet"):
        split = f.name.split("-")[0]
        by_split.setdefault(split, set()).update(pq.read_table(f, columns=["graph_id"]).column(0).to_pylist())
    assert set(by_split) == {"train", "validation"}
    assert not by_split["train"] & by_split["validation"]


def test_missing_input_is_one_red_line_with_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("convert", str(tmp_path / "nope"), "-o", str(tmp_path / "out")) == 2  # usage (README, Exit codes)
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err
