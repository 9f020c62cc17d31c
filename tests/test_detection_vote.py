"""Format detection by a per-record majority vote (msgtrain.ingest.core.base.detect_format).

Each parseable record of a file's head (a JSONL line, or an item of a top-level JSON array) is shown to every
detector on its own; the reader accepting most of them (at least half; ties by registry order) reads the file, and
its bad records are rejected one by one. The head as a whole decides only where no reader takes half of the records
(formats whose records cannot be told apart one by one): every real and sample log must be detected as that rule
alone detects it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain.errors import MsgtrainError
from msgtrain.ingest import registry  # noqa: F401 - registers the readers
from msgtrain.ingest.core.base import read_head
from msgtrain.ingest.detect import _majority_reader, detect_format, head_records
from msgtrain.ingest.registry import REGISTRY
from msgtrain.run.parts import LinearizeSettings, convert_file
from msgtrain.run.plan import discover_inputs
from tests.conftest import SAMPLE_LOGS, shared_path

SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)


def _chat(i: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]}


def _sharegpt(i: int) -> dict[str, Any]:
    return {"conversations": [{"from": "human", "value": f"question {i}"}, {"from": "gpt", "value": f"answer {i}"}]}


BAD_LINES = {
    "wrong_role": json.dumps({"messages": [{"role": "hacker", "content": "x"}, {"role": "assistant", "content": "y"}]}),
    "wrong_type": json.dumps({"messages": "not a list of messages"}),
    "truncated": json.dumps(_chat(99))[:25],
}


@pytest.mark.parametrize("bad", sorted(BAD_LINES))
@pytest.mark.parametrize("first_bad", [1, 2, 3])
def test_a_file_whose_first_records_are_bad_is_detected_and_its_good_records_converted(
    tmp_path: Path, bad: str, first_bad: int
) -> None:
    lines = [BAD_LINES[bad]] * first_bad + [json.dumps(_chat(i)) for i in range(20)]
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert detect_format(path).name == "openai_chat"
    samples, stats, rejects = convert_file(path, SETTINGS)
    assert (stats.records_read, stats.records_converted, len(samples)) == (20 + first_bad, 20, 20)
    assert [json.loads(r)["record"] for r in rejects] == [f"line {i}" for i in range(1, first_bad + 1)]


def test_a_json_array_whose_first_items_are_bad_is_detected_and_its_good_items_converted(tmp_path: Path) -> None:
    bad = {"conversations": [{"from": "hacker", "value": "x"}, {"from": "gpt", "value": "y"}]}
    path = tmp_path / "data.json"
    path.write_text(json.dumps([bad, bad, bad] + [_sharegpt(i) for i in range(10)], indent=1), encoding="utf-8")
    assert len(head_records(read_head(path))) == 13
    assert detect_format(path).name == "sharegpt"
    samples, stats, _ = convert_file(path, SETTINGS)
    assert (stats.records_read, stats.records_converted, len(samples)) == (13, 10, 10)


@pytest.mark.parametrize(("chat", "sharegpt", "expected"), [(12, 8, "openai_chat"), (8, 12, "sharegpt")])
def test_a_file_mixing_two_formats_is_read_by_the_majority(
    tmp_path: Path, chat: int, sharegpt: int, expected: str
) -> None:
    records = [_sharegpt(i) for i in range(sharegpt)] + [_chat(i) for i in range(chat)]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert detect_format(path).name == expected
    _, stats, _ = convert_file(path, SETTINGS)
    assert stats.records_read == chat + sharegpt
    assert stats.records_converted >= max(chat, sharegpt)  # the ShareGPT reader also reads OpenAI-style messages


def test_a_tie_between_two_formats_goes_to_the_earlier_reader_in_the_registry(tmp_path: Path) -> None:
    names = list(REGISTRY)
    assert names.index("sharegpt") < names.index("openai_chat")
    for order in ("chat_first", "sharegpt_first"):
        records = [_chat(i) for i in range(10)] + [_sharegpt(i) for i in range(10)]
        if order == "sharegpt_first":
            records.reverse()
        path = tmp_path / f"{order}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        assert detect_format(path).name == "sharegpt", order


def _whole_head_reader(path: Path) -> str | None:
    """The rule detection used before the vote: the first reader (registry order) accepting the head as a whole."""
    head = read_head(path)
    for reader in REGISTRY.values():
        try:
            if reader.detect(path, head):
                return reader.name
        except Exception:
            continue
    return None


def _logs(root: Path) -> list[Path]:
    files, _ = discover_inputs([str(root)])
    return [f for f in files if f.is_file()]


def _count_detected_as_the_head_says(logs: list[Path]) -> int:
    """Assert each log is detected as its head as a whole says; return how many of them the vote decided."""
    voted = 0
    for path in logs:
        before = _whole_head_reader(path)
        try:
            now: str | None = detect_format(path).name
        except MsgtrainError:
            now = None
        assert now == before, path
        voted += _majority_reader(path, read_head(path)) is not None
    return voted


def test_every_sample_log_is_detected_as_its_head_as_a_whole_says() -> None:
    logs = _logs(SAMPLE_LOGS)
    assert len(logs) > 20
    assert _count_detected_as_the_head_says(logs) > 12  # the vote, not the fallback, decides half of them


def test_every_real_log_is_detected_as_its_head_as_a_whole_says() -> None:
    logs = _logs(shared_path("real_logs"))
    assert len(logs) > 20
    assert _count_detected_as_the_head_says(logs) > 15  # the vote, not the fallback, decides the files of many records


def test_a_directory_log_is_still_claimed_by_its_directory_reader() -> None:
    folder = SAMPLE_LOGS / "openhands_v1" / "conv0001"
    assert detect_format(folder).name == "openhands_v1"


CALL_LOGS = {
    "anthropic": SAMPLE_LOGS / "anthropic" / "request_response.jsonl",
    "openai_responses": SAMPLE_LOGS / "openai_responses" / "calls.jsonl",
}
BROKEN_FIRST_LINES = {
    "truncated": '{"request": {"model": "m", "messages": [{"role": "us',
    "foreign": json.dumps({"event": "startup", "pid": 4242}),
    "half_a_call": json.dumps({"request": {"model": "m"}}),
}


@pytest.mark.parametrize("broken", sorted(BROKEN_FIRST_LINES))
@pytest.mark.parametrize("reader", sorted(CALL_LOGS))
def test_a_broken_first_line_of_a_call_log_costs_that_line_and_the_layout_comes_from_the_majority(
    tmp_path: Path, reader: str, broken: str
) -> None:
    original = CALL_LOGS[reader]
    path = tmp_path / original.name
    path.write_text(BROKEN_FIRST_LINES[broken] + "\n" + original.read_text(encoding="utf-8"), encoding="utf-8")
    forced = LinearizeSettings(
        tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=reader
    )
    clean_samples, clean_stats, _ = convert_file(original, forced)
    samples, stats, rejects = convert_file(path, forced)
    assert [json.loads(r)["record"] for r in rejects] == ["line 1"]
    assert stats.records_read == clean_stats.records_read + 1
    assert stats.records_converted == clean_stats.records_converted
    assert len(samples) == len(clean_samples) > 0
