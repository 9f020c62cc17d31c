"""The command line reports like the tools users know: --version, shell completion, one exit-code table for every
command (README, "Exit codes"), progress against a known total, a summary that says where and how long, one
next-step hint, and an ``inspect`` bounded by default."""

from __future__ import annotations

import itertools
import json
import re
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from msgtrain import __version__
from msgtrain.cli import main
from msgtrain.linearize.tokenizer import CHATML_TEMPLATE, _build_demo_tokenizer
from msgtrain.run.report_hints import next_step
from tests.conftest import SAMPLE_LOGS

SAMPLE = SAMPLE_LOGS / "native" / "edit_and_compaction.graph.jsonl"


# ------------------------------------------------------------------------------------------ version, completion
def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"msgtrain {__version__}"


def test_shell_completion_is_offered_and_prints_a_script(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["--help"]) == 0
    assert "--install-completion" in capsys.readouterr().out
    # --show-completion is a flag for the shell the process runs under, which typer finds by walking the parent
    # processes; a test worker may have none (a detached or CI runner), so the shell is given as found.
    import shellingham

    monkeypatch.setattr(shellingham, "detect_shell", lambda *a, **k: ("bash", "/bin/bash"))
    assert main(["--show-completion"]) == 0
    assert "_MSGTRAIN_COMPLETE" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ exit codes
@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Inputs for every row of the exit-code table: logs good and bad, tokenizer folders, a dataset."""
    root = tmp_path_factory.mktemp("material")
    (root / "junk").mkdir()
    (root / "junk" / "bad.jsonl").write_text("not json\n", encoding="utf-8")
    (root / "partial").mkdir()
    (root / "partial" / "log.graph.jsonl").write_text(SAMPLE.read_text(encoding="utf-8") + "{broken\n")
    tok = _build_demo_tokenizer()
    tok.save_pretrained(root / "tok_ok")
    tok.chat_template = "{{ messages | length }}" + CHATML_TEMPLATE  # changes once later turns exist
    tok.save_pretrained(root / "tok_rerenders")
    (root / "tok_unreadable").mkdir()
    (root / "tok_unreadable" / "tokenizer.json").write_text("{not a tokenizer", encoding="utf-8")
    (root / "tok_unreadable" / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    (root / "corrupt" / "data").mkdir(parents=True)
    (root / "corrupt" / "data" / "train-00000-of-00001.parquet").write_bytes(b"not parquet")
    assert main(["convert", str(SAMPLE), "-o", str(root / "dataset"), "-q"]) == 0
    return {p.name: p for p in root.iterdir()}


def _interrupt(monkeypatch: pytest.MonkeyPatch, module: str, name: str) -> None:
    def stop(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(f"{module}.{name}", stop)


def _no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError


INTERRUPTS = {
    "convert": ("msgtrain.run.pipeline", "convert"),
    "validate": ("msgtrain.tools.validate_cmd", "validate_inputs"),
    "audit-template": ("msgtrain.tools.audit_cmd", "audit_template"),
    "inspect": ("msgtrain.tools.inspect_cmd", "inspect_input"),
    "stats": ("msgtrain.tools.stats", "dataset_stats"),
}
# (command line with {names} of the material and OUT, expected exit code, what the case is)
TABLE: list[tuple[str, int, str]] = [
    ("convert {SAMPLE} -o {OUT}", 0, "clean"),
    ("convert {junk} -o {OUT}", 1, "read nothing: nothing published"),
    ("convert {missing} -o {OUT}", 2, "an input that does not exist"),
    ("convert {SAMPLE} -o {OUT} --tokenizer {missing}", 2, "a tokenizer folder that does not exist"),
    ("convert {SAMPLE} -o {OUT} --workers 0", 2, "a bad option value"),
    ("convert {SAMPLE} -o {OUT} --input-format telepathy", 2, "an unknown forced format"),
    ("convert {partial} -o {OUT}", 3, "finished with rejects"),
    ("convert {SAMPLE} -o {OUT}", 130, "interrupted"),
    ("validate {SAMPLE} --structure-only", 0, "clean"),
    ("validate {SAMPLE} --tokenizer {tok_unreadable}", 1, "a vocabulary that cannot be read"),
    ("validate {missing}", 2, "an input that does not exist"),
    ("validate {SAMPLE} --input-format openai_chatt", 2, "an unknown forced format"),
    ("validate {junk} --structure-only", 3, "problems found"),
    ("validate {SAMPLE}", 130, "interrupted"),
    ("audit-template --tokenizer {tok_ok} --feature multi_turn", 0, "every property holds"),
    ("audit-template --tokenizer {tok_unreadable}", 1, "a vocabulary that cannot be read"),
    ("audit-template --tokenizer {missing}", 2, "a tokenizer folder that does not exist"),
    ("audit-template --tokenizer {tok_rerenders} --feature multi_turn", 3, "a property fails"),
    ("audit-template --tokenizer {tok_ok}", 130, "interrupted"),
    ("inspect {SAMPLE} --sample 0", 0, "clean"),
    ("inspect {corrupt}", 1, "a dataset that cannot be read"),
    ("inspect {missing}", 2, "an input that does not exist"),
    ("inspect {SAMPLE} --max-turns -1", 2, "a bad option value"),
    ("inspect {SAMPLE}", 130, "interrupted"),
    ("stats {dataset}", 0, "clean"),
    ("stats {corrupt}", 1, "a dataset that cannot be read"),
    ("stats {missing}", 2, "not a dataset"),
    ("stats {dataset} --plot {OUT}.png", 2, "--plot without the plot extra"),
    ("stats {dataset}", 130, "interrupted"),
    ("formats", 0, "clean"),
    ("formats --bogus", 2, "an unknown option"),
]


@pytest.mark.parametrize(("line", "code", "case"), TABLE, ids=[f"{c[0].split()[0]}-{c[1]}-{c[2]}" for c in TABLE])
def test_every_command_exits_with_the_code_of_the_readme_table(
    line: str,
    code: int,
    case: str,
    material: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    command = line.split()[0]
    if code == 130:
        _interrupt(monkeypatch, *INTERRUPTS[command])
    if "--plot" in line:
        _no_matplotlib(monkeypatch)
    names = {k: str(v) for k, v in material.items()}
    names |= {"SAMPLE": str(SAMPLE), "OUT": str(tmp_path / "out"), "missing": str(tmp_path / "no-such")}
    assert main([part.format(**names) for part in line.split()]) == code, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if code in (1, 2) and command != "formats":
        assert "error:" in err.lower()  # one line says what is wrong
    if code == 1 and command == "convert":
        assert not (tmp_path / "out").exists()


def test_the_readme_documents_each_exit_code_in_one_table() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("### Exit codes") :].split("\n\n")[2]
    assert [row.split("|")[1].strip() for row in table.splitlines()[2:]] == ["`0`", "`1`", "`2`", "`3`", "`130`"]


# ------------------------------------------------------------------------------------------ progress and summary
def test_progress_knows_the_total_before_the_first_file_is_converted(tmp_path: Path) -> None:
    from msgtrain.cli_convert import ConvertProgress
    from msgtrain.run.config import ConvertConfig
    from msgtrain.run.pipeline import convert

    events: list[tuple[str, dict[str, Any]]] = []
    cfg = ConvertConfig(inputs=(SAMPLE_LOGS / "native",), output=tmp_path / "out")
    convert(cfg, progress=lambda kind, info: events.append((kind, dict(info))))
    kinds = [k for k, _ in events]
    assert kinds[0] == "listed" and kinds.index("planned") < kinds.index("file")
    files = events[0][1]["files"]
    assert files == len(list((SAMPLE_LOGS / "native").rglob("*.jsonl")))
    assert dict(events)["planned"]["total"] == files

    from rich.console import Console

    console = Console(file=StringIO(), force_terminal=True, width=120)
    with ConvertProgress(console) as bar:
        bar.hook("listed", {"files": 7})
        assert bar.progress.tasks[bar.read].total == 7  # no "0/?" once the inputs are listed
        bar.hook("planned", {"total": 9, "reused": 4})
        task = bar.progress.tasks[bar.read]
        assert (task.total, task.completed) == (9, 4)


def _summary_of(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["convert", *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    # The table wraps long cells: read it as one line, without its borders.
    rows = [line.strip("│ ").split("│") for line in (out.out + out.err).splitlines()]
    return " ".join(" ".join(cell.strip() for cell in row) for row in rows)


def test_the_summary_gives_output_time_reused_parts_and_packing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    text = _summary_of(
        [str(SAMPLE_LOGS / "native"), "-o", str(out), "--target", "packed", "--pack-length", "2048"], capsys
    )
    assert str(out) in text.replace(" ", "") and "packed target" in text
    assert re.search(r"\d+\.\d s · \d+ parts? converted", text)
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert f"{report['outputs']['packing']['efficiency']:.1%}" in text
    text = _summary_of([str(SAMPLE_LOGS / "native"), "-o", str(out), "--resume"], capsys)
    parts = len(list((SAMPLE_LOGS / "native").rglob("*.jsonl")))
    assert f"{parts} part{'s' * (parts != 1)}: {parts} reused (--resume), 0 converted" in text


def _report(samples: int, rerender: int, total: int, trained: int, target: str = "canonical") -> dict[str, Any]:
    return {
        "samples": {"written": samples, "dropped_by_reason": {}},
        "tokens": {"total": total, "trained": trained},
        "cuts_by_reason": {"template_rerender": rerender, "start": samples - rerender},
        "config": {"target": target, "overflow": "drop"},
        "tokenizer": {"name": "/models/Qwen3-8B"},
    }


def test_many_template_rerender_cuts_with_little_trained_suggest_tree_and_audit() -> None:
    # The shape of the run in issue 29: 1,663 template_rerender cuts, 1.4 % of the tokens trained.
    hint = next_step(_report(1700, 1663, 10_000_000, 140_000))
    assert hint is not None
    assert "--target tree" in hint and "msgtrain audit-template --tokenizer /models/Qwen3-8B" in hint
    assert "1663 of 1700" in hint and "1.4%" in hint
    assert next_step(_report(1700, 1663, 10_000_000, 140_000, target="tree")) is None
    assert next_step(_report(1700, 10, 10_000_000, 140_000)) is None
    assert next_step(_report(1700, 1663, 10_000_000, 5_000_000)) is None


def test_many_samples_dropped_for_length_suggest_overflow_split() -> None:
    report = _report(80, 0, 1000, 500)
    report["samples"]["dropped_by_reason"] = {"too_long": 20}
    assert "--overflow split" in (next_step(report) or "")


# ------------------------------------------------------------------------------------------ inspect bounds
@pytest.fixture
def long_session(tmp_path: Path) -> Path:
    """One conversation of 30 sampled turns behind a 20,000-character system prompt, as a native graph log."""
    from msgtrain import MessageGraph

    g = MessageGraph()
    g.append({"role": "system", "content": "You are careful. " * 1200})
    for k in range(30):
        g.append({"role": "user", "content": f"step {k}?"})
        g.append({"role": "assistant", "content": f"done with step {k}."})
    path = tmp_path / "session.graph.jsonl"
    g.save(path)
    return path


def _inspect(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["inspect", *args]) == 0
    return capsys.readouterr().out


def test_inspect_is_bounded_by_default_and_marks_what_it_leaves_out(
    long_session: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bounded = _inspect([str(long_session), "--html", str(tmp_path / "b.html")], capsys)
    whole = _inspect(
        [str(long_session), "--max-turns", "0", "--max-chars", "0", "--html", str(tmp_path / "w.html")], capsys
    )
    assert "tokens elided (--max-chars 0 shows all)" in bounded
    assert "trained turns (--max-turns 0 shows all)" in bounded
    assert "elided" not in whole and "You are careful. " * 1200 in whole.replace("\n", "")
    assert "done with step 29.<|im_end|>" in whole and "done with step 29.<|im_end|>" not in bounded
    assert len(bounded) * 3 < len(whole)
    page, full_page = (tmp_path / "b.html").read_text(), (tmp_path / "w.html").read_text()
    assert 'class="elided"' in page and len(page) * 3 < len(full_page)


def test_inspect_max_turns_lists_the_samples_past_the_budget(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = _inspect([str(SAMPLE), "--max-turns", "1"], capsys)
    assert "sample 0 (of 3)" in text and "sample 1 (of 3)" not in text
    assert "2 more samples not shown (1, 2): past --max-turns 1" in text


def test_inspect_bounds_keep_every_shown_token_as_unbounded_and_decode_only_those(long_session: Path) -> None:
    from msgtrain.tools.bounds import bounded_pieces, gaps
    from msgtrain.tools.inspect_cmd import inspect_input
    from msgtrain.tools.sample_view import range_pieces, token_pieces

    ins = inspect_input(long_session)
    view = ins.views[0]
    whole = token_pieces(ins.decode, view.input_ids.tolist())
    calls: list[int] = []

    def counting(ids: list[int]) -> str:
        calls.append(len(ids))
        return ins.decode(ids)

    pieces, ranges = bounded_pieces(view, range_pieces(counting, view.input_ids.tolist()), 3, 500)
    assert ranges == sorted(ranges) and all(a < b for a, b in ranges)
    assert all(b1 < a2 for (_, b1), (a2, _) in itertools.pairwise(ranges))  # disjoint, not adjacent
    assert ranges[-1][1] == view.turn_spans[2][1]  # up to the end of the third trained turn
    for a, b in view.turn_spans[:3]:  # short turns are shown whole
        assert any(lo <= a and b <= hi for lo, hi in ranges)
    for a, b in ranges:
        assert pieces[a:b] == whole[a:b]  # each shown token as the unbounded view shows it
    hidden = gaps(ranges, view.num_tokens)
    assert sum(b - a for a, b in ranges) + sum(b - a for a, b in hidden) == view.num_tokens
    assert sum(b - a for a, b in hidden) > view.num_tokens // 2
    assert len(calls) < view.num_tokens // 4  # the elided middle was never decoded


@pytest.mark.parametrize(
    ("target", "longest", "hinted"), [("canonical", 4096, True), ("trl", 1024, False), ("rl", 4096, False)]
)
def test_samples_longer_than_trls_default_max_length_suggest_setting_it(
    target: str, longest: int, hinted: bool
) -> None:
    report = _report(80, 0, 1000, 500, target=target)
    report["outputs"] = {
        "splits": {"train": {"longest_sample_tokens": 100}, "test": {"longest_sample_tokens": longest}}
    }
    hint = next_step(report)
    assert (hint is not None and f"SFTConfig(max_length={longest})" in hint) is hinted, hint


def test_the_report_names_each_splits_longest_sample(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["convert", str(SAMPLE_LOGS), "-o", str(out), "-q"]) == 0
    report = json.loads((out / "report.json").read_text())
    rows = pq.read_table(out / "data" / "train-00000-of-00001.parquet", columns=["num_tokens"])
    assert report["outputs"]["splits"]["train"]["longest_sample_tokens"] == max(rows["num_tokens"].to_pylist())
