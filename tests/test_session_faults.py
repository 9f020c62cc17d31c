"""A fault that escapes a session reader's generator costs only the record it comes from.

Session readers (Claude Code, Codex, Copilot CLI, Gemini CLI JSONL, options logs) read a whole file as one
generator and build their sessions from every record; an exception escaping that generator ends it. The fault
boundary (:func:`msgtrain.ingest.core.base.read_events`) finds the record the fault comes from (the line being read, or,
for a fault raised while the session is built after the last line, the shortest failing prefix) and reads the file
again with that record handed over as a rejected one, which the reader rejects as it rejects a record that does not
parse (keeping later turns of the session as context only: their context lacked the record). Here a poisoned record
is inserted into real and sample logs: it raises as soon as it is touched ("now", a fault while streaming) or only
once every line was handed out ("late", a fault while building). The reference is independent of the boundary: the
same log with an unreadable record (a line that is not JSON, a ``null`` item, an event file that is not JSON) in the
poisoned record's place. The fault must cost exactly what that unreadable record costs: the same samples and books,
one ``reader_error`` in place of the parse error, at the poisoned record.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from msgtrain.errors import ValidationError
from msgtrain.ingest.core import base
from msgtrain.ingest.detect import detect_format
from msgtrain.run.parts import LinearizeSettings, convert_file
from tests.conftest import ROOT, shared_path

SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)
MARK = "msgtrain_poison"
OWN_CODE = "bad_content"


class _Boom(Exception):
    """What the poisoned record raises: a stand-in for a reader bug on input it does not expect."""


class _Poison(dict):  # type: ignore[type-arg]
    """A record that raises when read, once ``armed()`` says so."""

    def __init__(self, value: dict[str, Any], armed: Callable[[], bool], own: bool = False) -> None:
        super().__init__(value)
        self._armed = armed
        self._own = own

    def _check(self) -> None:
        if self._armed():
            if self._own:  # a validation error of the reader's own, as a bad field raises it
                raise ValidationError("poisoned record touched", code=OWN_CODE)
            raise _Boom("poisoned record touched")

    def __getitem__(self, key: Any) -> Any:
        self._check()
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._check()
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self._check()
        return super().__contains__(key)

    def __iter__(self) -> Iterator[Any]:
        self._check()
        return super().__iter__()

    def items(self) -> Any:
        self._check()
        return super().items()

    def keys(self) -> Any:
        self._check()
        return super().keys()

    def values(self) -> Any:
        self._check()
        return super().values()


def _poisoning(mode: str, own: bool = False) -> Callable[[Path], Iterator[tuple[int, bytes, Any]]]:
    """``iter_json_lines`` as the readers see it, with the marked line's record poisoned."""
    real = base.iter_json_lines

    def lines(path: Path) -> Iterator[tuple[int, bytes, Any]]:
        state = {"done": False}
        for lineno, raw, obj in real(path):
            if MARK.encode() in raw and isinstance(obj, dict):
                obj = _Poison(obj, (lambda: True) if mode == "now" else (lambda: state["done"]), own)
            yield lineno, raw, obj
        state["done"] = True

    return lines


SIMONW = ("shared", "real_logs", "claude_code_simonw", "sample_session.jsonl")
# (reader, module whose iter_json_lines the reader calls, log, 1-based line after which the poison goes; negative:
# from the end, so that turns before it give samples although the reader keeps later ones as context only)
CASES = [
    ("claude_code", "msgtrain.ingest.formats.sessions.claude_code", ("sample_logs", "claude_code", "session.jsonl"), 4),
    ("codex", "msgtrain.ingest.formats.sessions.codex", ("sample_logs", "codex", "rollout.jsonl"), 4),
    (
        "copilot_cli",
        "msgtrain.ingest.formats.sessions.copilot_cli",
        ("sample_logs", "copilot_cli", "session.jsonl"),
        -3,
    ),
    ("options", "msgtrain.ingest.common.conversation_files", ("sample_logs", "options", "research_agent.jsonl"), 2),
    ("codex", "msgtrain.ingest.formats.sessions.codex", ("shared", "real_logs", "codex_codemie", "turn-2.jsonl"), -3),
    (
        "gemini_cli",
        "msgtrain.ingest.formats.sessions.gemini_cli",
        ("shared", "real_logs", "gemini_cli_jsonl_vct", "gemini.jsonl"),
        -3,
    ),
    (
        "copilot_cli",
        "msgtrain.ingest.formats.sessions.copilot_cli",
        ("shared", "real_logs", "copilot_cli_vct", "copilot.jsonl"),
        20,
    ),
    ("claude_code", "msgtrain.ingest.formats.sessions.claude_code", SIMONW, 2),
]


def _log(parts: tuple[str, ...]) -> Path:
    return shared_path(*parts[1:]) if parts[0] == "shared" else ROOT.joinpath(*parts)


def _insert_poison(original: Path, tmp: Path, after: int) -> tuple[Path, int]:
    """A copy of ``original`` with a marked copy of its line ``after`` inserted after it; the new line's number."""
    lines = original.read_bytes().splitlines(keepends=True)
    after = after if after > 0 else len(lines) + after  # counted from the end: later turns keep earlier samples
    record = json.loads(lines[after - 1])
    record[MARK] = True
    lines.insert(after, json.dumps(record).encode() + b"\n")
    path = tmp / original.name
    path.write_bytes(b"".join(lines))
    return path, after + 1


def _samples(samples: list[Any], path: Path, inserted: int | None) -> list[tuple[str, bytes, bytes]]:
    """(source line as in the original file, input ids, loss mask) of each sample, in order."""
    out = []
    for s in samples:
        where = s.source[len(str(path)) :]
        line = int(where[1:]) if where.startswith(":") and where[1:].isdigit() else None
        if line is not None and inserted is not None and line > inserted:
            where = f":{line - 1}"
        out.append((where, s.input_ids.tobytes(), s.loss_mask.tobytes()))
    return out


# "late" only where the reader keeps its records until the session is built (Claude Code resolves parents then).
MODES = [(*case, "now") for case in CASES] + [(*case, "late") for case in CASES if case[0] == "claude_code"]


@pytest.mark.parametrize("own", [False, True], ids=["crash", "validation_error"])
@pytest.mark.parametrize(
    ("reader", "module", "log", "after", "mode"), MODES, ids=[f"{c[0]}:{c[2][-1]}:{c[4]}" for c in MODES]
)
def test_a_fault_in_a_session_reader_costs_only_the_failing_record(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    reader: str,
    module: str,
    log: tuple[str, ...],
    after: int,
    mode: str,
    own: bool,
) -> None:
    """A crash (a reader bug) and a reader's own validation error alike: the record is found and reported at its
    own line, and costs what that record unreadable costs."""
    original = _log(log)
    assert detect_format(original).name == reader
    path, poisoned = _insert_poison(original, tmp_path, after)
    reference = _unreadable_in_place(path, tmp_path, poisoned)
    expected, stats_expected, _ = convert_file(reference, SETTINGS)
    # Gemini CLI's JSONL log is one sample, and a rejected line leaves its session as context only: there the books
    # and the reject are what is compared.
    assert expected or reader == "gemini_cli", "the log must give samples for the comparison to mean something"

    monkeypatch.setattr(f"{module}.iter_json_lines", _poisoning(mode, own))
    samples, stats, rejects = convert_file(path, SETTINGS)

    code = OWN_CODE if own else "reader_error"
    (reject,) = [json.loads(r) for r in rejects if json.loads(r)["reason"] == code]
    assert reject["record"] == f"line {poisoned}"
    assert reject["message"] == ("" if own else "_Boom: ") + "poisoned record touched"
    assert MARK in reject["excerpt"]
    _same_books(stats, stats_expected, code)
    assert _samples(samples, path, None) == _samples(expected, reference, None)


def _unreadable_in_place(path: Path, tmp: Path, line: int) -> Path:
    """The reference: ``path`` with its line ``line`` replaced by one that is not JSON."""
    lines = path.read_bytes().splitlines(keepends=True)
    lines[line - 1] = b'{"not json\n'
    (tmp / "reference").mkdir(exist_ok=True)
    reference = tmp / "reference" / path.name
    reference.write_bytes(b"".join(lines))
    return reference


def _same_books(stats: Any, expected: Any, code: str = "reader_error") -> None:
    """The books of a run with one fault equal those of the reference, the fault counted where its parse error was."""
    assert stats.records_read == expected.records_read
    assert stats.records_converted == expected.records_converted
    assert stats.records_skipped == expected.records_skipped
    assert sum(stats.records_rejected.values()) == sum(expected.records_rejected.values())
    assert stats.records_rejected[code] == expected.records_rejected[code] + 1
    assert stats.turns_trained == expected.turns_trained


def test_one_message_with_content_true_costs_one_claude_code_record_reported_at_its_own_line(tmp_path: Path) -> None:
    lines = (ROOT / "sample_logs" / "claude_code" / "session.jsonl").read_text(encoding="utf-8").splitlines()
    at = next(
        i
        for i, line in enumerate(lines, 1)
        if i > 5 and json.loads(line).get("type") == "assistant" and json.loads(line)["message"].get("content")
    )
    record = json.loads(lines[at - 1])
    record["message"]["content"] = True
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join([*lines[: at - 1], json.dumps(record), *lines[at:]]) + "\n", encoding="utf-8")
    reference = _unreadable_in_place(path, tmp_path, at)
    expected, stats_expected, _ = convert_file(reference, SETTINGS)
    samples, stats, rejects = convert_file(path, SETTINGS)
    (reject,) = [json.loads(r) for r in rejects if json.loads(r)["reason"] == "bad_content"]
    assert reject["record"] == f"line {at}"
    assert reject["where"] == f"{path}:{at}", reject
    _same_books(stats, stats_expected, "bad_content")
    assert expected and _samples(samples, path, None) == _samples(expected, reference, None)


def test_a_late_fault_in_a_claude_code_session_is_found_by_its_record_not_the_last_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = ROOT / "sample_logs" / "claude_code" / "session.jsonl"
    path, poisoned = _insert_poison(original, tmp_path, 4)  # a message record, kept until the graph is built
    last = len([line for line in path.read_bytes().splitlines() if line.strip()])
    assert poisoned < last
    monkeypatch.setattr("msgtrain.ingest.formats.sessions.claude_code.iter_json_lines", _poisoning("late"))
    _, stats, rejects = convert_file(path, SETTINGS)
    (reject,) = [json.loads(r) for r in rejects if json.loads(r)["reason"] == "reader_error"]
    assert reject["record"] == f"line {poisoned}"
    assert stats.records_read == stats.records_converted + sum(stats.records_rejected.values()) + sum(
        stats.records_skipped.values()
    )


# ------------------------------------------------------------------------------------------ one-document sessions
def _poisoning_documents(key: str, own: bool = False) -> Callable[[Path], Any]:
    """``load_json_document`` as a document reader sees it, with the marked record of its list poisoned."""
    real = base.load_json_document

    def load(path: Path) -> Any:
        doc = real(path)
        items = base.document_records(doc, key)
        for i, item in enumerate(items or []):
            if isinstance(item, dict) and MARK in item:
                items[i] = _Poison(item, lambda: True, own)  # type: ignore[index]
        return doc

    return load


def _insert_poison_item(original: Path, tmp: Path, key: str, after: int) -> tuple[Path, int]:
    """A copy of ``original`` with a marked copy of item ``after`` (from the end when negative) inserted after it;
    the new item's index."""
    doc = json.loads(original.read_text(encoding="utf-8"))
    items = base.document_records(doc, key)
    assert items is not None and len(items) > after
    after = after if after >= 0 else len(items) + after
    record = {MARK: True, **items[after]}  # first, so that the reject's bounded excerpt shows it
    items.insert(after + 1, record)
    path = tmp / original.name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path, after + 1


SWE_REAL = ("shared", "real_logs", "swe_agent", "pydicom__pydicom-1458.gpt4.traj")
MINI_REAL = ("shared", "real_logs", "mini_swe_agent", "pvlib__pvlib-python-1072.traj.json")
GEMINI_REAL = ("shared", "real_logs", "gemini_cli_codemie", "session-2026-01-16T11-01-file-ops-37b7abef.json")
# (reader, module, log, item after which the poison goes)
DOCUMENT_CASES = [
    ("openhands", "msgtrain.ingest.formats.sessions.openhands", ("sample_logs", "openhands", "events.json"), 3),
    ("swe_agent", "msgtrain.ingest.formats.sessions.swe_agent", ("sample_logs", "swe_agent", "run.traj"), -3),
    (
        "mini_swe_agent",
        "msgtrain.ingest.formats.sessions.mini_swe_agent",
        ("sample_logs", "mini_swe_agent", "run.traj.json"),
        2,
    ),
    ("gemini_cli", "msgtrain.ingest.formats.sessions.gemini_cli", ("sample_logs", "gemini_cli", "session.json"), -2),
    (
        "openhands",
        "msgtrain.ingest.formats.sessions.openhands",
        ("shared", "real_logs", "openhands", "basic_interactions.json"),
        4,
    ),
    ("swe_agent", "msgtrain.ingest.formats.sessions.swe_agent", SWE_REAL, 3),
    ("mini_swe_agent", "msgtrain.ingest.formats.sessions.mini_swe_agent", MINI_REAL, 40),
    ("gemini_cli", "msgtrain.ingest.formats.sessions.gemini_cli", GEMINI_REAL, -2),
]


@pytest.mark.parametrize(
    ("reader", "module", "log", "after"), DOCUMENT_CASES, ids=[f"{c[0]}:{c[2][-1]}" for c in DOCUMENT_CASES]
)
def test_a_fault_in_a_document_session_reader_costs_only_the_failing_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str, module: str, log: tuple[str, ...], after: int
) -> None:
    original = _log(log)
    found = detect_format(original)
    assert found.name == reader
    key = found.document_records  # type: ignore[attr-defined]
    path, index = _insert_poison_item(original, tmp_path, key, after)
    doc = json.loads(path.read_text(encoding="utf-8"))
    base.document_records(doc, key)[index] = None  # type: ignore[index]
    (tmp_path / "reference").mkdir()
    reference = tmp_path / "reference" / path.name
    reference.write_text(json.dumps(doc), encoding="utf-8")
    expected, stats_expected, _ = convert_file(reference, SETTINGS)
    assert expected, "the log must give samples for the comparison to mean something"

    monkeypatch.setattr(f"{module}.load_json_document", _poisoning_documents(key))
    samples, stats, rejects = convert_file(path, SETTINGS)

    (reject,) = [json.loads(r) for r in rejects if json.loads(r)["reason"] == "reader_error"]
    assert reject["record"] in (f"{key}[{index}]", f"item {index}")
    assert reject["message"] == "_Boom: poisoned record touched" and MARK in reject["excerpt"]
    _same_books(stats, stats_expected)
    assert _samples(samples, path, None) == _samples(expected, reference, None)


@pytest.mark.parametrize(
    ("reader", "module", "log", "after"), DOCUMENT_CASES, ids=[f"{c[0]}:{c[2][-1]}" for c in DOCUMENT_CASES]
)
def test_a_validation_error_in_a_document_session_costs_only_its_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str, module: str, log: tuple[str, ...], after: int
) -> None:
    original = _log(log)
    key = detect_format(original).document_records  # type: ignore[attr-defined]
    path, index = _insert_poison_item(original, tmp_path, key, after)
    doc = json.loads(path.read_text(encoding="utf-8"))
    base.document_records(doc, key)[index] = None  # type: ignore[index]
    (tmp_path / "reference").mkdir()
    reference = tmp_path / "reference" / path.name
    reference.write_text(json.dumps(doc), encoding="utf-8")
    expected, stats_expected, _ = convert_file(reference, SETTINGS)

    monkeypatch.setattr(f"{module}.load_json_document", _poisoning_documents(key, own=True))
    samples, stats, rejects = convert_file(path, SETTINGS)

    (reject,) = [json.loads(r) for r in rejects if json.loads(r)["reason"] == OWN_CODE]
    assert reject["record"] in (f"{key}[{index}]", f"item {index}")
    _same_books(stats, stats_expected, OWN_CODE)
    assert _samples(samples, path, None) == _samples(expected, reference, None)


# ------------------------------------------------------------------------------------------ directory logs
def test_a_fault_in_a_directory_log_costs_only_the_failing_record_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = ROOT / "sample_logs" / "openhands_v1" / "conv0001"
    folder = tmp_path / "conv0001"
    shutil.copytree(original, folder)
    event = json.loads((folder / "events" / "event-00002-ev2.json").read_text(encoding="utf-8"))
    poisoned = folder / "events" / "event-00002-zz.json"  # sorts between events 2 and 3
    poisoned.write_text(json.dumps({MARK: True, **event}), encoding="utf-8")
    reference = tmp_path / "reference" / "conv0001"
    shutil.copytree(folder, reference)
    (reference / "events" / poisoned.name).write_text('{"not json', encoding="utf-8")
    expected, stats_expected, _ = convert_file(reference, SETTINGS)
    assert expected
    real = base.load_json_document

    def load(path: Path) -> Any:
        doc = real(path)
        return _Poison(doc, lambda: True) if isinstance(doc, dict) and MARK in doc else doc

    monkeypatch.setattr("msgtrain.ingest.common.session_common.load_json_document", load)
    samples, stats, rejects = convert_file(folder, SETTINGS)
    (reject,) = [json.loads(r) for r in rejects if json.loads(r)["reason"] == "reader_error"]
    assert reject["file"] == str(poisoned) and reject["message"] == "_Boom: poisoned record touched"
    _same_books(stats, stats_expected)
    assert [(s.input_ids.tobytes(), s.loss_mask.tobytes()) for s in samples] == [
        (s.input_ids.tobytes(), s.loss_mask.tobytes()) for s in expected
    ]


@pytest.mark.parametrize("example", ["strands/session_demo", "openhands_v1/conv0001"])
def test_a_folder_log_holds_each_record_file_to_the_record_limit(example: str) -> None:
    # --max-record-mb bounds a folder's record files as it bounds any record: each one over it is its own reject
    from msgtrain.ingest.boundary import read_events
    from msgtrain.ingest.core.base import ReadReject
    from msgtrain.ingest.registry import get_reader

    folder = ROOT / "sample_logs" / example
    reader = get_reader(example.split("/")[0])
    sizes = {p.name: p.stat().st_size for p in folder.rglob("*.json") if p.name not in ("agent.json", "session.json")}
    limit = sorted(sizes.values())[len(sizes) // 2]
    with base.record_limit(limit):
        events = list(read_events(reader, folder))
    too_large = {
        Path(e.source.file).name for e in events if isinstance(e, ReadReject) and e.error.code == "record_too_large"
    }
    assert too_large == {name for name, size in sizes.items() if size > limit} != set()


def test_one_bad_item_of_a_message_per_line_log_costs_its_own_line_not_the_conversation(tmp_path: Path) -> None:
    lines = (ROOT / "sample_logs" / "openai_responses" / "items.jsonl").read_text(encoding="utf-8").splitlines()
    outputs = [i for i, line in enumerate(lines) if json.loads(line).get("type") == "function_call_output"]
    assert outputs, "the sample log answers a call"
    bad = json.loads(lines[outputs[0]])
    del bad["call_id"]  # a result that answers no call: a validation error inside the conversation
    lines[outputs[0]] = json.dumps(bad)
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, clean, _ = convert_file(ROOT / "sample_logs" / "openai_responses" / "items.jsonl", SETTINGS)
    _, stats, rejects = convert_file(path, SETTINGS)
    (reject,) = [json.loads(r) for r in rejects]
    assert reject["record"] == f"line {outputs[0] + 1}"
    assert stats.records_converted == clean.records_converted - 1 and stats.graphs == clean.graphs
    assert stats.turns_trained >= 1
