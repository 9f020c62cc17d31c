"""A run touches only its own OUT's names: sibling datasets named like its temporary files survive, and no output
path (OUT, ``--rejects``) may be an input, lie under an input folder, or lie inside another msgtrain dataset."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from msgtrain.run.publish import state_dir, versions_dir
from tests.test_nightly_safety import make_logs, report, run, samples

# OUT names that the temporary names of an OUT called "sft" (.sft.old-PID, .sft.link-PID, .sft.tmp-*) used to match
# through their hidden state and version folders, and one whose own name has that shape.
SIBLINGS = ["sft.old-jan", "sft.old-123", "sft.tmp-1", "sft.link-2", ".sft.link-99", ".sft.old-7"]


def _intact(out: Path) -> bool:
    return out.is_symlink() and (out / "report.json").is_file() and state_dir(out).is_dir() and samples(out) > 0


@pytest.mark.parametrize("mode", ["symlink", "rename"])
def test_sibling_datasets_named_like_temporary_names_survive_every_publish(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MSGTRAIN_PUBLISH", mode)
    logs = make_logs(tmp_path, 1)
    siblings = [tmp_path / name for name in SIBLINGS]
    for sibling in siblings:
        assert run(str(logs), "-o", str(sibling), "--resume") == 0
    before = {p.name for p in tmp_path.iterdir()}
    for _ in range(3):  # the first publish, then replacements (which clean litter and old versions)
        assert run(str(logs), "-o", str(tmp_path / "sft"), "--resume") == 0
    for sibling in siblings:
        assert (sibling / "report.json").is_file(), f"{sibling.name} was damaged"
        assert state_dir(sibling).is_dir() and versions_dir(sibling).is_dir(), f"{sibling.name} lost its state"
        if mode == "symlink":
            assert _intact(sibling)
    # Nothing that was there before is gone: the run only added sft's own three names.
    after = {p.name for p in tmp_path.iterdir()}
    assert before <= after
    assert after - before == {"sft", ".sft.msgtrain-state", ".sft.msgtrain-versions"}
    # And the siblings still resume from their own parts.
    assert run(str(logs), "-o", str(siblings[0]), "--resume") == 0
    assert report(siblings[0])["records"]["read"] > 0


def test_rejects_that_is_an_input_is_refused_and_the_input_left_untouched(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 2)
    app = logs / "calls-000.jsonl"
    before = app.read_bytes()
    assert run(str(logs), "-o", str(tmp_path / "out"), "--rejects", str(app)) == 2
    assert app.read_bytes() == before
    assert not (tmp_path / "out").exists()
    # The same file named as a single input, and through a symlink.
    assert run(str(app), "-o", str(tmp_path / "out"), "--rejects", str(app)) == 2
    (tmp_path / "alias.jsonl").symlink_to(app)
    assert run(str(logs), "-o", str(tmp_path / "out"), "--rejects", str(tmp_path / "alias.jsonl")) == 2
    assert app.read_bytes() == before


def test_rejects_under_an_input_folder_is_refused(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 1)
    assert run(str(logs), "-o", str(tmp_path / "out"), "--rejects", str(logs / "nightly" / "rejects.jsonl")) == 2
    assert sorted(p.name for p in logs.iterdir()) == ["calls-000.jsonl"]


def test_outputs_inside_another_dataset_or_its_hidden_folders_are_refused(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 1)
    other = tmp_path / "other"
    assert run(str(logs), "-o", str(other)) == 0
    kept = samples(other)
    for args in (
        ["--rejects", str(other / "rejects-mine.jsonl")],
        ["--rejects", str(state_dir(other) / "rejects.jsonl")],
        ["--rejects", str(versions_dir(other) / "rejects.jsonl")],
        ["--rejects", str(tmp_path / "out" / "rejects.jsonl")],  # inside this run's own OUT: replaced next time
    ):
        assert run(str(logs), "-o", str(tmp_path / "out"), *args) == 2, args
    assert run(str(logs), "-o", str(other / "nested")) == 2
    assert run(str(logs), "-o", str(versions_dir(other) / "nested")) == 2
    assert samples(other) == kept and not (tmp_path / "out").exists()


def test_out_under_an_input_folder_is_refused(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 1)
    assert run(str(logs), "-o", str(logs / "out")) == 2
    assert sorted(p.name for p in logs.iterdir()) == ["calls-000.jsonl"]


def test_rejects_elsewhere_is_written_and_reports_its_bad_records(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 1)
    (logs / "broken.jsonl").write_text("{not json\n")
    rejects = tmp_path / "nightly-rejects" / "rejects.jsonl"
    assert run(str(logs), "-o", str(tmp_path / "out"), "--rejects", str(rejects)) == 3
    lines = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert [Path(r["file"]).name for r in lines] == ["broken.jsonl"]


def test_a_hand_edited_names_record_cannot_make_a_run_delete_other_paths(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 1)
    out = tmp_path / "out"
    assert run(str(logs), "-o", str(out)) == 0
    (tmp_path / "keep.txt").write_text("mine")
    (tmp_path / ".other.link-1").mkdir()
    record = state_dir(out) / "publish-names.jsonl"
    names = ["keep.txt", ".other.link-1", "../x", ".out.msgtrain-state", str(tmp_path / "keep.txt")]
    record.write_text("".join(json.dumps({"name": n}) + "\n" for n in names))
    assert run(str(logs), "-o", str(out)) == 0
    assert (tmp_path / "keep.txt").read_text() == "mine" and (tmp_path / ".other.link-1").is_dir()
    assert state_dir(out).is_dir() and os.path.islink(out)


def _broken_logs(tmp_path: Path) -> Path:
    logs = make_logs(tmp_path, 1)
    (logs / "broken.jsonl").write_text("{not json\n")
    return logs


def test_rejects_that_names_a_users_file_or_an_old_log_is_refused_unless_overwrite(tmp_path: Path) -> None:
    logs = _broken_logs(tmp_path)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    yesterday = make_logs(tmp_path, 1, name="old") / "calls-000.jsonl"  # a log not given to tonight's run
    kept = {p: p.read_bytes() for p in (notes, yesterday)}
    (tmp_path / "to-notes").symlink_to(notes)
    (tmp_path / "to-log").symlink_to(yesterday)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name in ("notes.txt", "old/calls-000.jsonl", "to-notes", "to-log", "dangling"):
        assert run(str(logs), "-o", str(tmp_path / "out"), "--rejects", str(tmp_path / name)) == 2, name
        assert not (tmp_path / "out").exists(), name
    assert all(p.read_bytes() == data for p, data in kept.items())
    assert not (tmp_path / "nowhere").exists()
    # --overwrite replaces the link itself, never the file it points at.
    assert run(str(logs), "-o", str(tmp_path / "out"), "--rejects", str(tmp_path / "to-log"), "--overwrite") == 3
    assert not (tmp_path / "to-log").is_symlink() and "broken.jsonl" in (tmp_path / "to-log").read_text()
    assert yesterday.read_bytes() == kept[yesterday]
    assert run(str(logs), "-o", str(tmp_path / "out"), "--rejects", str(notes), "--overwrite") == 3
    assert "broken.jsonl" in notes.read_text()


def test_a_rejects_file_msgtrain_wrote_is_replaced_until_someone_edits_it(tmp_path: Path) -> None:
    logs = _broken_logs(tmp_path)
    rejects = tmp_path / "rejects.jsonl"
    assert run(str(logs), "-o", str(tmp_path / "out"), "--rejects", str(rejects)) == 3
    first = rejects.read_bytes()
    assert run(str(logs), "-o", str(tmp_path / "out"), "--rejects", str(rejects)) == 3
    assert rejects.read_bytes() == first
    with open(rejects, "a") as f:
        f.write("my note about these rejects\n")
    edited = rejects.read_bytes()
    assert run(str(logs), "-o", str(tmp_path / "out"), "--rejects", str(rejects)) == 2
    assert rejects.read_bytes() == edited


def test_inspect_html_and_stats_plot_refuse_a_file_they_did_not_write(tmp_path: Path) -> None:
    from msgtrain.cli import main

    logs = make_logs(tmp_path, 1)
    page = tmp_path / "page.html"
    page.write_text("my page\n")
    assert main(["inspect", str(logs / "calls-000.jsonl"), "--html", str(page)]) == 2
    assert page.read_text() == "my page\n"
    assert main(["inspect", str(logs / "calls-000.jsonl"), "--html", str(page), "--overwrite"]) == 0
    assert "<html" in page.read_text().lower()
    assert main(["inspect", str(logs / "calls-000.jsonl"), "--html", str(page)]) == 0  # its own page now
    plot = tmp_path / "lengths.png"
    plot.write_bytes(b"not mine")
    assert run(str(logs), "-o", str(tmp_path / "out")) == 0
    assert main(["stats", str(tmp_path / "out"), "--plot", str(plot)]) == 2
    assert plot.read_bytes() == b"not mine"
