"""OUT's state grows linearly with the number of parts: the manifest is written whole a fixed number of times per
run (never once per part), and what is learnt mid-run is appended to a journal that survives a crash."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from msgtrain.run.journal import JOURNAL, MANIFEST, append_manifest, load_manifest, save_manifest
from tests.test_nightly_safety import make_logs, run, samples


def test_the_manifest_is_written_whole_a_fixed_number_of_times_per_run_not_once_per_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[int] = []
    real_replace = os.replace

    def counting(src: Any, dst: Any) -> None:
        if Path(dst).name == MANIFEST:
            writes.append(1)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", counting)
    for files in (4, 24):
        logs = make_logs(tmp_path / str(files), files)
        writes.clear()
        assert run(str(logs), "-o", str(tmp_path / f"out-{files}"), "--resume") == 0
        assert samples(tmp_path / f"out-{files}") > 0
        assert len(writes) <= 2, f"{len(writes)} manifest writes for {files} files"


def test_journal_entries_replay_over_the_snapshot_and_a_line_cut_by_a_crash_is_ignored(tmp_path: Path) -> None:
    meta = {"source": "a.jsonl", "digest": "d1", "settings": "s"}
    save_manifest(tmp_path, {"k1": meta})
    manifest = load_manifest(tmp_path)
    entries = {"k2": {**meta, "chunk": [0, 2]}, "k3": {**meta, "chunk": [1, 2]}}
    manifest.update(entries)
    append_manifest(tmp_path, entries, manifest)
    with open(tmp_path / JOURNAL, "a") as f:
        f.write(json.dumps({"key": "k4", "meta": meta})[:25])  # the run died mid-line
    assert set(load_manifest(tmp_path)) == {"k1", "k2", "k3"}
    save_manifest(tmp_path, load_manifest(tmp_path))  # folded into the snapshot; the journal is emptied
    assert not (tmp_path / JOURNAL).exists() and set(load_manifest(tmp_path)) == {"k1", "k2", "k3"}


def test_a_foreign_or_truncated_manifest_counts_as_empty(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text('{"parts": {"k": {"source": 1}}, "x"')
    assert load_manifest(tmp_path) == {}
    (tmp_path / MANIFEST).write_text('["not", "a", "manifest"]')
    (tmp_path / JOURNAL).write_text('{"key": "k", "meta": "nope"}\n[1]\n')
    assert load_manifest(tmp_path) == {}
