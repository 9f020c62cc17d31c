"""``inspect``, ``stats`` (with ``--plot``) and ``validate`` on every target and format ``convert`` writes.

``sample_logs`` is converted once (canonical), then exported again with ``--resume`` (the parts are reused, only
the export runs) as every target in every format; each command is run on each of them as a user runs it, and what
it reports is compared with the canonical samples.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from msgtrain.cli import main
from msgtrain.tools.dataset import data_files, sample_table, target_of
from msgtrain.tools.inspect_cmd import inspect_input
from msgtrain.tools.stats import dataset_stats
from tests.conftest import SAMPLE_LOGS

TARGETS = ("canonical", "labels", "trl", "rl", "packed", "tree")
FORMATS = ("parquet", "hf", "jsonl")
CASES = [(t, f) for t in TARGETS for f in FORMATS]
IDS = [f"{t}-{f}" for t, f in CASES]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """(target, format) -> a copy of what ``convert --target T --format F --split validation=0.2`` wrote."""
    root = tmp_path_factory.mktemp("targets")
    work = root / "work"
    written: dict[tuple[str, str], Path] = {}
    for target, fmt in CASES:
        args = ["convert", str(SAMPLE_LOGS), "-o", str(work), "--resume", "-q", "--target", target, "--format", fmt]
        args += ["--split", "validation=0.2"] + (["--pack-length", "2048"] if target == "packed" else [])
        assert main(args) == 0, (target, fmt)
        written[target, fmt] = Path(shutil.copytree(os.path.realpath(work), root / f"{target}-{fmt}"))
    return written


@pytest.fixture(scope="module")
def canonical(outputs: dict[tuple[str, str], Path]) -> list[dict[str, Any]]:
    """The canonical samples of every split, as rows."""
    files = sorted((outputs["canonical", "parquet"] / "data").glob("*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()


def _trained(ids: list[int], spans: list[dict[str, int]]) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    return tuple(ids), tuple((s["start"], s["end"]) for s in spans)


@pytest.mark.parametrize(("target", "fmt"), CASES, ids=IDS)
def test_stats_counts_every_sample_token_and_trained_token_of_every_target_and_plots_them(
    outputs: dict[tuple[str, str], Path], canonical: list[dict[str, Any]], target: str, fmt: str, tmp_path: Path
) -> None:
    out = outputs[target, fmt]
    stats = dataset_stats(out)
    assert stats["target"] == target and stats["format"] == fmt
    assert stats["samples"] == len(canonical)
    assert stats["trained_tokens"] == sum(r["num_trained_tokens"] for r in canonical)
    tokens = sum(r["num_tokens"] for r in canonical)
    assert (stats["flat_tokens"] if target == "tree" else stats["tokens"]) == tokens
    if target != "tree":
        # Targets without turn spans count the runs of trained tokens: the same turns.
        assert stats["turns"] == sum(r["num_turns"] for r in canonical)
        assert sum(stats["splits"].values()) == len(canonical)
    if fmt == "parquet":  # the plot is drawn from the stats alone, equal above for every format of a target
        pytest.importorskip("matplotlib", reason="the optional 'plot' extra is not installed")
        png = tmp_path / "lengths.png"
        assert main(["stats", str(out), "--plot", str(png)]) == 0
        assert png.read_bytes().startswith(b"\x89PNG")
    else:
        assert main(["stats", str(out)]) == 0
    assert main(["stats", str(out), "--json"]) == 0


@pytest.mark.parametrize(("target", "fmt"), CASES, ids=IDS)
def test_inspect_lists_and_shows_each_sample_of_every_target_with_its_trained_turns(
    outputs: dict[tuple[str, str], Path], canonical: list[dict[str, Any]], target: str, fmt: str, tmp_path: Path
) -> None:
    out = outputs[target, fmt]
    assert main(["inspect", str(out)]) == 0
    assert main(["inspect", str(out), "--sample", "0", "--html", str(tmp_path / "page.html")]) == 0
    if target == "tree":
        assert main(["inspect", str(out), "--sample", "1"]) == 0
        return
    expected = {_trained(r["input_ids"], r["turn_spans"]) for r in canonical}
    shown = []
    for k in range(0, len(canonical), 6):  # every sample is compared in the read-back test below
        (view,) = inspect_input(out, sample=str(k)).views
        shown.append((tuple(view.input_ids.tolist()), tuple(view.turn_spans)))
    assert set(shown) <= expected and len(set(shown)) == len(shown)  # distinct samples, exactly their turns
    if target != "labels":  # labels rows keep ids and labels only
        sample_id = canonical[5]["sample_id"]
        (view,) = inspect_input(out, sample=sample_id[:12]).views
        assert view.sample_id == sample_id


@pytest.mark.parametrize(("target", "fmt"), CASES, ids=IDS)
def test_validate_finds_nothing_wrong_in_what_convert_wrote_for_every_target(
    outputs: dict[tuple[str, str], Path], target: str, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(outputs[target, fmt]), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] and result["target"] == target and result["format"] == fmt
    assert result["splits"]["train"]["samples"] > 0 and result["splits"]["validation"]["samples"] > 0


def test_validate_compares_each_splits_rows_with_dataset_info(
    outputs: dict[tuple[str, str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = Path(shutil.copytree(outputs["labels", "parquet"], tmp_path / "out"))
    info = json.loads((out / "dataset_info.json").read_text())
    info["splits"]["train"]["num_examples"] += 1
    (out / "dataset_info.json").write_text(json.dumps(info))
    assert main(["validate", str(out), "--json"]) == 3
    (problem,) = json.loads(capsys.readouterr().out)["problems"]
    assert problem["code"] == "info_mismatch" and problem["where"] == "splits.train"


def _rewrite(out: Path, change: Any) -> None:
    (shard,) = sorted((out / "data").glob("train-*.parquet"))
    pq.write_table(change(pq.read_table(shard)), shard)


@pytest.mark.parametrize(
    ("target", "column", "code"),
    [
        ("labels", "labels", "bad_labels"),
        ("trl", "completion_mask", "mask_mismatch"),
        ("canonical", "loss_mask", "spans_mismatch"),
        ("rl", "turn_spans", "spans_mismatch"),
        ("packed", "position_ids", "bad_positions"),
        ("tree", "loss_mask", "count_mismatch"),
    ],
)
def test_validate_exits_3_naming_the_row_when_a_written_dataset_was_altered(
    outputs: dict[tuple[str, str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    target: str,
    column: str,
    code: str,
) -> None:
    out = Path(shutil.copytree(outputs[target, "parquet"], tmp_path / "out"))

    def alter_row_3(table: pa.Table) -> pa.Table:
        rows = table[column].to_pylist()
        first = rows[3][0]
        # A label on a token that is never trained (a row's first), a position that does not restart, a turn span
        # one token short of its run, a flipped mask bit.
        if column == "turn_spans":
            rows[3][0] = {**first, "end": first["end"] - 1}
        else:
            rows[3][0] = {"labels": 7, "position_ids": 5}.get(column, 1 - first)
        return table.set_column(table.schema.get_field_index(column), column, pa.array(rows, table[column].type))

    _rewrite(out, alter_row_3)
    assert main(["validate", str(out), "--json"]) == 3
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert any(p["code"] == code and p["where"] == "row 3" for p in problems), problems


def test_every_target_read_back_as_samples_is_the_canonical_samples(outputs: dict[tuple[str, str], Path]) -> None:
    reference = None
    for target in TARGETS[:-1]:  # tree rows hold tries, not samples
        files = data_files(outputs[target, "parquet"])
        table = pa.concat_tables([sample_table(f.read(), target_of(f.names)) for f in files])
        key = sorted(
            zip(
                table["input_ids"].to_pylist(),
                table["loss_mask"].to_pylist(),
                table["turn_spans"].to_pylist(),
                strict=True,
            )
        )
        assert reference is None or key == reference, target
        reference = key
        assert np.all(np.asarray(table["num_turns"]) == np.asarray([len(k) for k in table["turn_spans"].to_pylist()]))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_truncated_data_file_is_named_with_a_fix_never_an_internal_error(
    outputs: dict[tuple[str, str], Path], fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = Path(shutil.copytree(outputs["canonical", fmt], tmp_path / "out"))
    damaged = data_files(out)[0].path
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    capsys.readouterr()
    for command, code in (("inspect", 1), ("stats", 1), ("validate", 3)):
        assert main([command, str(out)]) == code, command
        said = capsys.readouterr()
        text = " ".join((said.out + said.err).split())
        assert "internal error" not in text, (command, text)
        assert damaged.name in text and ("convert again" in text or command == "validate"), (command, text)
    assert main(["validate", str(out), "--json"]) == 3
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert any(p["code"] == "unreadable_dataset_file" and p["source"] == str(damaged) for p in problems), problems
