"""``validate`` predicts ``convert``: it fails exactly when convert would reject or drop something, and its counts
are convert's, for the same inputs and options (validate linearizes by default, with the tokenizer convert would
resolve: the embedded demo one when none is given). ``--structure-only`` skips linearization.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain.cli import main
from msgtrain.cli_convert import lost_in_run
from msgtrain.model.graph import MessageGraph
from msgtrain.model.message import Generation
from msgtrain.run.config import ConvertConfig
from msgtrain.run.pipeline import convert
from msgtrain.tools.validate_cmd import Linearization, validate_inputs
from tests.conftest import SAMPLE_LOGS, shared_path


def _chat(i: int, role: str = "user", answer: str | None = None) -> dict[str, Any]:
    reply = {"role": "assistant", "content": answer if answer is not None else f"answer number {i} " * 3}
    return {"messages": [{"role": role, "content": f"question {i}"}, reply]}


def _crafted(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    records = [_chat(i) for i in range(6)]
    if name == "bad_role":
        records[1] = _chat(1, role="hacker")
    if name == "empty_reply":
        records[2] = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant"}]}
    (folder / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    if name == "dropped_turn":  # a sampled turn whose logged ids are empty: nothing to train, convert drops it
        g = MessageGraph(graph_id="g-drop")
        g.append({"role": "user", "content": "hi"})
        g.append({"role": "assistant", "content": "x"}, generation=Generation(token_ids=()))
        g.save(folder / "run.graph.jsonl")
    return folder


CASES: list[tuple[str, dict[str, Any]]] = [
    ("clean", {}),
    ("bad_role", {}),
    ("empty_reply", {}),
    ("dropped_turn", {}),
    ("clean", {"max_length": 12}),  # every sample too long: dropped by the length policy
    ("clean", {"max_length": 12, "overflow": "truncate"}),
    ("sample_logs", {}),
    ("sample_logs", {"max_length": 300}),
    ("real_logs", {}),
    # A real tokenizer whose template drops turns (Phi-3 writes its end-of-text only after the last turn).
    ("sample_logs", {"tokenizer": "tokenizers/phi-3-mini-instruct", "render_date": "2025-01-01"}),
]


def _inputs(tmp_path: Path, name: str) -> Path:
    if name == "sample_logs":
        return SAMPLE_LOGS
    if name == "real_logs":
        return shared_path("real_logs")
    return _crafted(tmp_path, name)


@pytest.fixture(scope="module")
def real_logs_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict[str, Any]]:
    """``msgtrain convert ../shared/real_logs -o OUT`` as a user runs it, once for the tests that read it: its exit
    code, what it printed and its report.json (a run's report is report.json's, plus timings and paths)."""
    real = shared_path("real_logs")
    out = tmp_path_factory.mktemp("real_logs") / "out"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = main(["convert", str(real), "-o", str(out)])
    return code, printed.getvalue(), json.loads((out / "report.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("name", "options"), CASES, ids=[f"{n}-{'-'.join(str(v).rsplit('/')[-1] for v in o.values())}" for n, o in CASES]
)
def test_validate_fails_exactly_when_convert_rejects_or_drops_and_counts_what_convert_counts(
    tmp_path: Path, name: str, options: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    if "tokenizer" in options:
        options = {**options, "tokenizer": str(shared_path(*options["tokenizer"].split("/")))}
    cfg = ConvertConfig(inputs=(_inputs(tmp_path, name),), output=tmp_path / "out", **options)
    if name == "real_logs":  # the CLI's run of the same inputs and (default) options
        _, _, data = request.getfixturevalue("real_logs_run")
    else:
        data = convert(cfg)
    report = validate_inputs(list(cfg.inputs), cfg.input_format, Linearization.from_config(cfg))

    # convert's exit-3 rule (drops that are the user's choice or the log's own limit are not failures).
    convert_fails = bool(data["records"]["rejected"] or lost_in_run(data))
    assert (not report.ok) == convert_fails
    counts = report.convert_counts()
    assert counts["records"] == data["records"]
    assert counts["graphs"] == data["graphs"]
    assert counts["turns"] == data["turns"]
    assert counts["samples"]["dropped_by_reason"] == data["samples"]["dropped_by_reason"]
    if (
        name in ("bad_role", "empty_reply", "dropped_turn")
        or ("max_length" in options and name == "clean")
        or ("tokenizer" in options)
    ):
        assert convert_fails, "the case must exercise a failing convert"


def test_the_validate_command_linearizes_by_default_and_structure_only_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = _crafted(tmp_path, "clean")
    config = tmp_path / "convert.yaml"
    config.write_text(f"inputs: [{logs}]\noutput: {tmp_path / 'out'}\nmax_length: 12\n", encoding="utf-8")
    assert main(["validate", str(logs)]) == 0
    assert main(["validate", "--config", str(config)]) == 3  # the config's max_length drops every sample
    out = capsys.readouterr().out
    assert "[dropped_sample_too_long]" in out and "convert would:" in out
    assert main(["validate", "--config", str(config), "--structure-only"]) == 0
    assert "structure only" in capsys.readouterr().out
    assert main(["validate", str(logs), "--max-length", "12", "--json"]) == 3
    data = json.loads(capsys.readouterr().out)
    assert data["linearized"] and data["convert"]["samples"]["dropped_by_reason"] == {"too_long": 6}


def test_all_real_logs_convert_in_one_run_without_a_traceback_and_with_balanced_books(
    real_logs_run: tuple[int, str, dict[str, Any]],
) -> None:
    """The fault boundary on every real-log folder, including ones in formats no reader reads yet: the run ends with
    exit 0 or 3, prints no traceback, and its books balance; validate reads the same records."""
    code, printed, report = real_logs_run
    assert code in (0, 3), printed[-2000:]
    assert "Traceback" not in printed
    r = report["records"]
    assert r["read"] == r["converted"] + r["rejected"] + r["skipped"]
    assert validate_inputs([shared_path("real_logs")]).records == r["read"]
