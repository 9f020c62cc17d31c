"""`msgtrain stats` over canonical Parquet written here (and over a real `convert` of sample_logs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from msgtrain.cli import main
from msgtrain.errors import ConfigError
from msgtrain.export.schema import Sample, samples_to_table
from msgtrain.tools.stats import dataset_stats, distribution
from tests.conftest import SAMPLE_LOGS


def sample(
    n: int,
    spans: list[tuple[int, int]],
    *,
    engine: int = 0,
    policy: str = "p",
    source: str = "a.jsonl:1",
    cut: str = "start",
    graph: str = "g",
) -> Sample:
    mask = np.zeros(n, dtype=np.int8)
    for a, b in spans:
        mask[a:b] = 1
    return Sample(
        sample_id=f"s{n}-{source}-{cut}",
        graph_id=graph,
        source=source,
        policy=policy,
        input_ids=np.arange(n, dtype=np.int32),
        loss_mask=mask,
        logprobs=np.full(n, np.nan, dtype=np.float32),
        turn_ids=[f"t{k}" for k in range(len(spans))],
        turn_spans=spans,
        turn_group_ids=["x"] * len(spans),
        group_id="x",
        cut_reason=cut,
        engine_tokens=engine,
    )


def write_dataset(out: Path, splits: dict[str, list[Sample]], report: dict[str, Any] | None = None) -> Path:
    (out / "data").mkdir(parents=True)
    for split, samples in splits.items():
        pq.write_table(samples_to_table(samples), out / "data" / f"{split}-00000-of-00001.parquet")
    if report is not None:
        (out / "report.json").write_text(json.dumps(report))
    return out


REPORT = {
    "records": {"read": 12, "rejected_by_reason": {"bad_json": 2}, "skipped_by_reason": {"telemetry": 1}},
    "turns": {"found": 9, "dropped_by_reason": {"render_error": 1}},
    "samples": {"dropped_by_reason": {"too_long": 1}},
}


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    train = [
        sample(100, [(40, 60), (80, 100)], policy="solver", source="runs/a.jsonl:1"),
        sample(300, [(250, 300)], engine=300, policy="solver", source="runs/a.jsonl:7", cut="edit"),
        sample(50, [(10, 20)], engine=20, policy="critic", source="runs/b.jsonl (item 3)", cut="template_rerender"),
    ]
    validation = [sample(1000, [(900, 1000)], policy="solver", source="runs/c.jsonl:2")]
    return write_dataset(tmp_path / "out", {"train": train, "validation": validation}, REPORT)


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["stats", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_totals_shares_and_reasons_add_up(capsys: pytest.CaptureFixture[str], dataset: Path) -> None:
    code, s = run_json(capsys, str(dataset))
    assert code == 0
    assert s["samples"] == 4 and s["splits"] == {"train": 3, "validation": 1}
    assert s["tokens"] == 1450 and s["trained_tokens"] == 40 + 50 + 10 + 100
    assert s["turns"] == 5
    assert s["engine_tokens"] == 320 and s["rendered_tokens"] == 1130
    assert s["engine_share"] == pytest.approx(320 / 1450, abs=1e-6)
    assert s["samples_by_token_source"] == {"rendered": 2, "engine": 1, "mixed": 1}
    assert s["cut_reasons"] == {"start": 2, "edit": 1, "template_rerender": 1}
    assert s["drops"]["records_rejected"] == {"bad_json": 2}
    assert s["drops"]["turns_dropped"] == {"render_error": 1}
    assert s["drops"]["samples_dropped"] == {"too_long": 1}


def test_per_policy_and_per_source_file_group_the_rows(capsys: pytest.CaptureFixture[str], dataset: Path) -> None:
    _, s = run_json(capsys, str(dataset))
    assert s["by_policy"]["solver"] == {
        "samples": 3,
        "tokens": 1400,
        "trained_tokens": 190,
        "turns": 4,
        "engine_share": round(300 / 1400, 6),
    }
    assert s["by_policy"]["critic"]["samples"] == 1
    # The record part of a source (":7", " (item 3)") is dropped: sources group by file.
    assert set(s["by_source"]) == {"runs/a.jsonl", "runs/b.jsonl", "runs/c.jsonl"}
    assert s["by_source"]["runs/a.jsonl"]["samples"] == 2


def test_histograms_count_every_sample_once(capsys: pytest.CaptureFixture[str], dataset: Path) -> None:
    _, s = run_json(capsys, str(dataset))
    for key in ("tokens", "trained_tokens", "turns"):
        dist = s["lengths"][key]
        assert sum(c for _, _, c in dist["bins"]) == s["samples"]
        assert dist["bins"][0][0] <= dist["min"] and dist["max"] < dist["bins"][-1][1]
    assert s["lengths"]["tokens"]["max"] == 1000 and s["lengths"]["turns"]["bins"] == [[1, 2, 3], [2, 3, 1]]


def test_terminal_output_shows_bars_and_reasons(capsys: pytest.CaptureFixture[str], dataset: Path) -> None:
    assert main(["stats", str(dataset)]) == 0
    out = capsys.readouterr().out
    assert "1450 (per sample" in out
    assert "22.1%" in out  # engine share of tokens
    assert "2 (bad_json=2)" in out
    assert "█" * 40 in out  # the fullest histogram bin spans the whole bar width
    assert "per source file" in out and "runs/b.jsonl" in out


def test_without_report_json_drop_reasons_are_said_to_be_unknown(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = write_dataset(tmp_path / "out", {"train": [sample(10, [(5, 10)])]})
    code, s = run_json(capsys, str(out))
    assert code == 0 and s["drops"] is None
    main(["stats", str(out)])
    assert "no report.json" in capsys.readouterr().out


def test_a_directory_without_parquet_or_with_another_schema_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no dataset files \(data/\*.parquet"):
        dataset_stats(tmp_path)
    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"text": ["hello"]}), tmp_path / "data" / "train-00000-of-00001.parquet")
    with pytest.raises(ConfigError, match="not a msgtrain dataset") as err:
        dataset_stats(tmp_path)
    assert "columns text" in err.value.message and "any --target" in (err.value.hint or "")


def test_plot_writes_a_png_when_matplotlib_is_installed(tmp_path: Path, dataset: Path) -> None:
    pytest.importorskip("matplotlib", reason="the optional 'plot' extra is not installed")
    png = tmp_path / "plots" / "lengths.png"
    assert main(["stats", str(dataset), "--plot", str(png), "--json"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, dataset: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    assert main(["stats", str(dataset), "--plot", str(tmp_path / "x.png")]) == 2  # an option whose extra is missing
    err = capsys.readouterr().err
    assert "needs matplotlib" in err and "pip install matplotlib" in err
    assert not (tmp_path / "x.png").exists()


def test_distribution_uses_integer_bins_for_few_values_and_powers_of_two_otherwise() -> None:
    small = distribution(np.array([1, 1, 2, 5]), integer_bins=True)
    assert [(lo, hi) for lo, hi, _ in small.bins] == [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    wide = distribution(np.array([3, 8, 1000]))
    assert wide.bins[0][:2] == (2, 4) and wide.bins[-1] == (512, 1024, 1)
    assert [c for _, _, c in wide.bins] == [1, 0, 1, 0, 0, 0, 0, 0, 1]
    assert distribution(np.array([0, 0, 7])).bins[0] == (0, 1, 2)
    assert distribution(np.array([], dtype=np.int64)).count == 0


def test_stats_of_a_converted_sample_logs_dataset_match_its_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert main(["convert", str(SAMPLE_LOGS), "-o", str(out), "-q"]) == 0
    report = json.loads((out / "report.json").read_text())
    code, s = run_json(capsys, str(out))
    assert code == 0
    assert s["samples"] == report["samples"]["written"]
    assert s["tokens"] == report["tokens"]["total"] and s["trained_tokens"] == report["tokens"]["trained"]
    assert s["engine_tokens"] == report["tokens"]["engine"]
    assert {k: v for k, v in s["cut_reasons"].items() if k != "start"} == report["cuts_by_reason"]
