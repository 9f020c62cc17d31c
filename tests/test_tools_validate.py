"""`msgtrain validate`: every problem in the input, located, with a reason code and a fix; nothing converted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain import MessageGraph
from msgtrain.cli import main
from msgtrain.model.message import OptionResultMessage, OptionResultPayload, text_message
from tests.conftest import SAMPLE_LOGS

REQUEST_OK = {
    "request": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "response": {"choices": [{"message": {"role": "assistant", "content": "hello"}}]},
}


def calls_line(messages: list[dict[str, Any]]) -> str:
    rec = {"request": {"model": "m", "messages": messages}, "response": REQUEST_OK["response"]}
    return json.dumps(rec)


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["validate", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture()
def bad_dir(tmp_path: Path) -> Path:
    """A directory with a calls log holding one good and three bad records, an unknown format, a hidden file."""
    d = tmp_path / "logs"
    d.mkdir()
    lines = [
        json.dumps(REQUEST_OK),
        calls_line([{"role": "user", "content": "hi"}, {"role": "tool", "content": "x", "tool_call_id": "zz"}]),
        "{not json",
        calls_line([{"role": "robot", "content": "beep"}]),
    ]
    (d / "agent.jsonl").write_text("\n".join(lines) + "\n")
    (d / "notes.json").write_text('{"hello": "world"}\n')
    (d / ".cache").mkdir()
    (d / ".cache" / "broken.jsonl").write_text("{broken\n")
    (d / "README.txt").write_text("not a log\n")
    return d


def test_sample_logs_validate_clean_with_exit_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(SAMPLE_LOGS)]) == 0
    out = capsys.readouterr().out
    assert "no problems" in out
    code, report = run_json(capsys, str(SAMPLE_LOGS))
    assert code == 0 and report["ok"] and report["problems"] == []
    assert report["graphs"] >= 2 and report["records"] > report["graphs"]


def test_every_problem_is_printed_with_file_line_location_code_and_fix(
    capsys: pytest.CaptureFixture[str], bad_dir: Path
) -> None:
    assert main(["validate", str(bad_dir)]) == 3
    lines = capsys.readouterr().out.splitlines()
    agent = bad_dir / "agent.jsonl"
    assert any(line.startswith(f"{agent}:2: message[1]: [unpaired_result]") and "(fix: " in line for line in lines), (
        lines
    )
    assert any(line.startswith(f"{agent}:3: [bad_json]") for line in lines), lines
    assert any(line.startswith(f'{agent}:4: message[0]: [unknown_role] unknown role "robot"') for line in lines), lines
    assert any(line.startswith(f"{bad_dir / 'notes.json'}: [unknown_format]") for line in lines), lines
    assert "4 problems" in lines[-1] and "1 file without a log suffix ignored" in lines[-1]
    # Hidden files are never read, like convert.
    assert not any(".cache" in line for line in lines)


def test_json_output_lists_problems_with_codes_and_hints(capsys: pytest.CaptureFixture[str], bad_dir: Path) -> None:
    code, report = run_json(capsys, str(bad_dir))
    assert code == 3 and not report["ok"]
    assert report["problems_by_code"] == {"bad_json": 1, "unknown_format": 1, "unknown_role": 1, "unpaired_result": 1}
    # Every record is accounted for: 4 lines of the calls log + 1 unreadable file.
    assert report["records"] == 5 and report["graphs"] == 1
    role = next(p for p in report["problems"] if p["code"] == "unknown_role")
    assert role["source"].endswith("agent.jsonl:4") and role["where"] == "message[0]"
    assert "system" in role["hint"]
    assert report["ignored"] == [str(bad_dir / "README.txt")]


def test_rules_are_checked_inside_graphs_that_load_and_fail_only_a_structure_only_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    g = MessageGraph(graph_id="g-unpaired")
    g.append(text_message("user", "hi"))
    g.append(OptionResultMessage(result=OptionResultPayload(invocation_id="nope", option_name="search")))
    g.append(text_message("assistant", "done"))
    path = tmp_path / "g.graph.jsonl"
    g.save(path)
    code, report = run_json(capsys, str(path), "--structure-only")
    assert code == 3
    [problem] = report["problems"]
    assert problem["code"] == "unpaired_result"
    assert problem["where"] == "graph g-unpaired branch 0 message[1]"
    assert problem["source"] == f"{path}:1"
    # By default validate judges as convert does: convert trains this graph, so the broken rule is a warning.
    code, report = run_json(capsys, str(path))
    assert code == 0 and report["problems"] == []
    assert [w["code"] for w in report["warnings"]] == ["unpaired_result"]


def test_a_graph_with_nothing_to_train_is_a_warning_not_a_problem(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    g = MessageGraph(graph_id="g-context-only")
    g.append(text_message("user", "hi"))
    g.append(text_message("assistant", "hello"), origin="carried")
    path = tmp_path / "g.graph.jsonl"
    g.save(path)
    code, report = run_json(capsys, str(path))
    assert code == 0 and report["ok"]
    # The carried reply is in the books (context_unknown), a listed drop, not a problem.
    by_code = {w["code"]: w for w in report["warnings"]}
    assert sorted(by_code) == ["dropped_context_unknown", "no_sampled_turns"]
    assert by_code["no_sampled_turns"]["where"] == "graph g-context-only"
    assert main(["validate", str(path)]) == 0
    assert "warning: " in capsys.readouterr().out


def test_a_forced_format_is_used_for_every_file(capsys: pytest.CaptureFixture[str]) -> None:
    native = SAMPLE_LOGS / "native"
    code, report = run_json(capsys, str(native), "--input-format", "calls")
    assert code == 3
    assert report["formats"] == {"calls": len(report["files"])}
    assert report["problems"], "native graph records are not per-call records"


def test_an_unknown_forced_format_and_a_missing_input_are_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(SAMPLE_LOGS), "--input-format", "telepathy"]) == 2  # a bad option value: usage
    assert "unknown input format 'telepathy'" in capsys.readouterr().err
    assert main(["validate", "/no/such/path"]) == 2  # usage
    assert "does not exist" in capsys.readouterr().err


def test_formats_lists_every_reader_with_an_example_that_it_detects(capsys: pytest.CaptureFixture[str]) -> None:
    from msgtrain.ingest.detect import detect_format

    assert main(["formats", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in rows]
    assert {"graph", "calls"} <= set(names)
    root = SAMPLE_LOGS.parent
    for row in rows:
        example = root / row["example"]
        if example.is_file():
            assert detect_format(example).name == row["name"], example


def test_a_broken_graph_is_located_at_the_line_of_the_bad_record(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    g = MessageGraph(graph_id="g-dangling")
    g.append(text_message("user", "hi"))
    g.append(text_message("assistant", "hello"))
    path = tmp_path / "g.graph.jsonl"
    g.save(path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    bad_line = next(n for n, r in enumerate(records, 1) if r["type"] == "node" and r["parent"] is not None)
    records[bad_line - 1]["parent"] = "no-such-node"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, report = run_json(capsys, str(path))
    assert code == 3
    [problem] = report["problems"]
    assert problem["code"] == "dangling_parent"
    assert problem["source"] == f"{path}:{bad_line}" and bad_line > 1


def test_validate_with_a_tokenizer_reports_what_convert_would_drop(tmp_path: Path) -> None:
    # A sampled turn whose logged ids are empty is structurally fine but has nothing to train: convert drops it.
    # Structure-only validate cannot see that; with a tokenizer validate linearizes as convert does and says so.
    from msgtrain.model.message import Generation
    from msgtrain.run.config import ConvertConfig
    from msgtrain.run.pipeline import convert
    from msgtrain.tools.validate_cmd import Linearization, validate_inputs

    g = MessageGraph(graph_id="g-drop")
    g.append({"role": "user", "content": "hi"})
    g.append({"role": "assistant", "content": "x"}, generation=Generation(token_ids=()))
    g.append({"role": "user", "content": "again"})
    g.append({"role": "assistant", "content": "fine"})
    logs = tmp_path / "logs"
    logs.mkdir()
    g.save(logs / "run.graph.jsonl")

    assert validate_inputs([logs]).ok
    report = validate_inputs([logs], lin=Linearization.load(None, None, None))
    assert [p.code for p in report.problems] == ["dropped_no_trainable_tokens"]
    assert "g-drop" in report.problems[0].where

    data = convert(ConvertConfig(inputs=(logs,), output=tmp_path / "out"))
    assert data["turns"]["dropped_by_reason"] == {"no_trainable_tokens": 1}
