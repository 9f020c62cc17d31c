"""A file rewritten in place while a run reads it (rsync --inplace, sync tools, editors) is never published torn:
its rows are the old file's, the new file's, or none with a ``changed_while_reading`` reject; and ``--resume``
never reuses a part keyed by bytes it did not read."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from msgtrain.cli import main
from tests.conftest import SAMPLE_LOGS

RECORDS = [json.loads(line) for line in (SAMPLE_LOGS / "calls" / "agent_calls.jsonl").read_text().splitlines()]


def _log(tag: str, sessions: int) -> bytes:
    lines = []
    for k in range(sessions):
        for rec in RECORDS:
            rec = json.loads(json.dumps(rec))
            rec["request"]["messages"][0]["content"] = f"You are the {tag} travel assistant number {k}."
            lines.append(json.dumps({**rec, "session_id": f"{tag}-{k}"}) + "\n")
    return "".join(lines).encode()


def _rows(out: Path) -> Counter[tuple[int, ...]]:
    rows: Counter[tuple[int, ...]] = Counter()
    for f in sorted((out / "data").glob("*.parquet")):
        rows.update(tuple(ids) for ids in pq.read_table(f, columns=["input_ids"]).column("input_ids").to_pylist())
    return rows


def _convert(log: Path, out: Path, *extra: str) -> int:
    return main(["convert", str(log), "-o", str(out), "-q", "--allow-empty", *extra])


def _rewrite_in_place(path: Path, data: bytes, delay: float, step: int = 64 << 10) -> threading.Thread:
    """Overwrite ``path`` in 64 KB writes, as rsync --inplace does, starting after ``delay`` seconds."""

    def rewrite() -> None:
        time.sleep(delay)
        with open(path, "r+b") as f:
            for start in range(0, len(data), step):
                f.write(data[start : start + step])
                f.flush()
                time.sleep(0.003)
            f.truncate()

    thread = threading.Thread(target=rewrite)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[bytes, Counter[tuple[int, ...]]]]:
    root = tmp_path_factory.mktemp("versions")
    found = {}
    for tag, sessions in (("old", 240), ("new", 180)):
        data = _log(tag, sessions)
        (root / tag).mkdir()
        (root / tag / "calls.jsonl").write_bytes(data)
        assert _convert(root / tag / "calls.jsonl", root / tag / "out") == 0
        found[tag] = (data, _rows(root / tag / "out"))
    assert not set(found["old"][1]) & set(found["new"][1])
    return found


@pytest.mark.parametrize("delay", [0.0, 0.3, 1.0])
def test_a_file_rewritten_while_read_gives_old_rows_new_rows_or_a_reject_and_resume_after_a_restore_is_clean(
    tmp_path: Path, logs: dict[str, tuple[bytes, Counter[tuple[int, ...]]]], delay: float
) -> None:
    (old, old_rows), (new, new_rows) = logs["old"], logs["new"]
    log, out = tmp_path / "calls.jsonl", tmp_path / "out"
    log.write_bytes(old)
    writer = _rewrite_in_place(log, new, delay)
    try:
        code = _convert(log, out)
    finally:
        writer.join()
    rows = _rows(out)
    report = json.loads((out / "report.json").read_text())
    if rows in (old_rows, new_rows):
        assert code == 0
    else:
        assert not rows, f"a torn dataset: {len(rows)} rows, neither the old file's nor the new file's"
        if report["files"]["unreadable"]:
            # It changed during every hash of planning (a loaded machine): listed as unreadable, saying why, exit 3.
            assert code == 3 and report["records"]["read"] == 0, report
            (ignored,) = report["files"]["ignored"]
            assert "changed while it was hashed" in ignored["reason"], ignored
        else:
            assert report["records"]["rejected_by_reason"] == {"changed_while_reading": 1}, report["records"]
            rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
            assert [r["reason"] for r in rejects] == ["changed_while_reading"]
    # The original bytes put back: --resume gives what a clean run of them gives, whatever it kept.
    log.write_bytes(old)
    assert _convert(log, out, "--resume") == 0
    assert _rows(out) == old_rows


@pytest.mark.parametrize("when", ["before_reading", "while_reading"])
def test_a_partner_rewritten_after_planning_is_a_reject_and_resume_after_a_restore_is_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """A batch output is joined with its input file (its partner): the partner rewritten between planning and the
    end of the reading leaves no rows built from bytes the part's key does not name."""
    from msgtrain.run import parts

    folder, out, clean = tmp_path / "batch", tmp_path / "out", tmp_path / "clean"
    folder.mkdir()
    for name in ("batch_input.jsonl", "batch_output.jsonl"):
        (folder / name).write_bytes((SAMPLE_LOGS / "batch" / name).read_bytes())
    partner = folder / "batch_input.jsonl"
    old = partner.read_bytes()
    new = old.replace(b"The kettle boils fast", b"The new toaster browns bread evenly and boils fast")
    assert new != old
    assert _convert(folder / "batch_output.jsonl", clean) == 0
    clean_rows = _rows(clean)
    assert clean_rows

    def rewrite_partner() -> None:
        with open(partner, "r+b") as f:
            f.write(new)
            f.truncate()

    hooked = "_reading_planned_bytes" if when == "before_reading" else "convert_file"
    real = getattr(parts, hooked)

    def rewritten_first(*args: object, **kwargs: object) -> object:
        rewrite_partner()
        return real(*args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(parts, hooked, rewritten_first)
        assert _convert(folder / "batch_output.jsonl", out) == 3  # finished, with a reject
    report = json.loads((out / "report.json").read_text())
    assert not _rows(out)
    assert report["records"]["rejected_by_reason"] == {"changed_while_reading": 1}, report["records"]
    # The partner's original bytes put back: --resume gives what a clean run gives (the part was not kept).
    partner.write_bytes(old)
    assert _convert(folder / "batch_output.jsonl", out, "--resume") == 0
    assert _rows(out) == clean_rows
