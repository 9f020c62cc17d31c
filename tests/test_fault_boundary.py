"""The fault boundary around every reader (msgtrain.ingest.core.base.read_events) and detection that survives bad
records.

Properties checked: whatever a reader raises becomes a reject (``reader_error`` unless the reader's own error), the
rest of the file is still read, the books balance (records read = converted + rejected + skipped, counting every
line), excerpts never fail, no traceback reaches the terminal, and the traceback lands in the debug log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msgtrain.cli import main
from msgtrain.errors import ParseError, ValidationError
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import (
    EXCERPT_BYTES,
    ReadEvent,
    ReadGraph,
    ReadItem,
    ReadReject,
    ReadSkip,
    RecordTask,
    SourceRef,
    excerpt,
    iter_json_lines,
)
from msgtrain.ingest.core.chunks import ChunkKey, KeyFunction
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.faults import records_of
from msgtrain.ingest.registry import get_reader
from msgtrain.model.graph import MessageGraph
from msgtrain.model.message import PartsMessage, TextPart
from msgtrain.run.parts import LinearizeSettings, convert_file
from msgtrain.tools.validate_cmd import validate_inputs
from tests.conftest import ROOT, shared_path

SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)


def _chat_record(i: int, role: str = "user") -> dict[str, Any]:
    return {"messages": [{"role": role, "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]}


def _write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _books(stats: Any) -> None:
    assert stats.records_read == stats.records_converted + sum(stats.records_rejected.values()) + sum(
        stats.records_skipped.values()
    )


# ------------------------------------------------------------------------------------------ detection by majority
def test_a_bad_second_record_costs_only_itself_not_the_file(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "chat.jsonl", [_chat_record(i, "hacker" if i == 1 else "user") for i in range(51)])
    assert detect_format(path).name == "openai_chat"
    samples, stats, rejects = convert_file(path, SETTINGS)
    assert (stats.records_read, stats.records_converted) == (51, 50)
    assert dict(stats.records_rejected) == {"unknown_role": 1}
    (reject,) = [json.loads(r) for r in rejects]
    assert reject["record"] == "line 2" and '"hacker"' in reject["excerpt"]
    assert len(samples) == 50
    report = validate_inputs([path])
    assert report.records == 51 and [p.code for p in report.problems] == ["unknown_role"]


def test_a_file_whose_records_mostly_fail_the_openai_reader_is_read_by_shape_and_each_bad_role_named(
    tmp_path: Path,
) -> None:
    path = _write_jsonl(
        tmp_path / "chat.jsonl", [_chat_record(i, "user" if i % 3 == 0 else "hacker") for i in range(6)]
    )
    assert detect_format(path).name == "structural"
    samples, stats, rejects = convert_file(path, SETTINGS)
    assert (stats.records_converted, dict(stats.records_rejected)) == (2, {"unknown_role": 4})
    assert len(samples) == 2
    reject = json.loads(rejects[0])
    assert reject["record"] == "line 2" and '"hacker"' in reject["message"] and "$.messages[0]" in reject["where"]


def test_messages_nested_under_another_key_are_found_by_shape(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"meta": {"v": 1}, "episodes": [_chat_record(0), _chat_record(1)]}), encoding="utf-8")
    report = validate_inputs([path])
    assert report.problems == [] and report.records == 2


def test_unknown_format_hint_says_what_a_file_without_conversations_looks_like(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"meta": {"v": 1}, "rows": [{"a": 1}, {"a": 2}]}), encoding="utf-8")
    report = validate_inputs([path])
    (problem,) = report.problems
    assert problem.code == "unknown_format"
    assert "a JSON object with keys meta, rows" in problem.hint


# ------------------------------------------------------------------------------------------ the boundary
class _FlakyReader:
    """A line reader that raises a TypeError on records marked ``boom`` (a stand-in for a reader bug), groups
    records by ``conv`` and emits each conversation when the file ends, as session readers do."""

    name = "flaky"
    description = "test reader"
    example = ""

    def detect(self, path: Path, head: bytes) -> bool:
        return False

    def chunk_keys(self, path: Path) -> KeyFunction:
        def key(value: Any) -> ChunkKey:
            return (str(value["conv"]),) if isinstance(value, dict) and "conv" in value else ()

        return key

    def read(self, path: Path) -> Iterator[ReadItem]:
        convs: dict[str, list[int]] = {}
        for lineno, _, obj in iter_json_lines(path):
            if obj.get("boom"):
                {}[obj["boom"]]  # unhashable: raises TypeError as a reader bug would
            convs.setdefault(str(obj["conv"]), []).append(lineno)
        for conv, lines in convs.items():
            graph = MessageGraph(graph_id=f"{path.name}#{conv}")
            graph.append(PartsMessage(parts=(TextPart(text=conv),), role_hint_for_llm="user", policy="user"))
            yield ReadGraph(graph, SourceRef(str(path), f"line {lines[0]}"), records=len(lines))


def test_a_fault_in_a_grouping_reader_costs_only_the_failing_conversation(tmp_path: Path) -> None:
    rows = [{"conv": c} for c in "aabbcc"]
    rows[3] = {"conv": "b", "boom": {"x": 1}}
    path = _write_jsonl(tmp_path / "f.jsonl", rows)
    events = list(read_events(_FlakyReader(), path))
    graphs = {e.graph.graph_id: e.records for e in events if isinstance(e, ReadGraph)}
    assert graphs == {"f.jsonl#a": 2, "f.jsonl#c": 2}
    (reject,) = [e for e in events if isinstance(e, ReadReject)]
    assert reject.error.code == "reader_error" and reject.count == 2  # both lines of conversation b
    assert reject.source.record == "line 4" and reject.error.message.startswith("TypeError: ")
    assert '"boom"' in reject.excerpt and "Traceback" in reject.detail
    assert sum(records_of(e) for e in events) == 6


def test_a_fault_repeated_past_the_retry_limit_rejects_the_rest_with_every_line_counted(tmp_path: Path) -> None:
    rows = [{"conv": str(i), "boom": [i]} for i in range(40)]
    path = _write_jsonl(tmp_path / "f.jsonl", rows)
    events = list(read_events(_FlakyReader(), path))
    assert all(isinstance(e, ReadReject) and e.error.code == "reader_error" for e in events)
    assert sum(records_of(e) for e in events) == 40


class _TaskReader:
    """A reader whose per-record work runs as RecordTasks; a record with ``boom`` raises inside its task."""

    name = "tasks"
    description = "test reader"
    example = ""

    def detect(self, path: Path, head: bytes) -> bool:
        return False

    def read(self, path: Path) -> Iterator[ReadItem]:
        for lineno, raw, obj in iter_json_lines(path):
            ref = SourceRef(str(path), f"line {lineno}")

            def parse(obj: Any = obj, ref: SourceRef = ref) -> list[ReadEvent]:
                if obj.get("boom"):
                    raise KeyError(obj["boom"])
                if obj.get("bad"):
                    raise ValidationError("bad record", code="bad_record")
                return [ReadSkip(ref, "nothing")]

            yield RecordTask(ref, parse, raw=raw)


def test_a_fault_inside_a_record_task_costs_that_record_and_the_generator_goes_on(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "t.jsonl", [{}, {"boom": "k"}, {"bad": 1}, {}])
    events = list(read_events(_TaskReader(), path))
    assert [type(e).__name__ for e in events] == ["ReadSkip", "ReadReject", "ReadReject", "ReadSkip"]
    assert [e.error.code for e in events if isinstance(e, ReadReject)] == ["reader_error", "bad_record"]
    assert events[1].source.record == "line 2"  # type: ignore[union-attr]


def test_forcing_a_reader_onto_data_it_does_not_expect_gives_rejects_not_a_crash(tmp_path: Path) -> None:
    folder = shared_path("real_logs", "openhands_v1_sdk")
    events = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.rglob("event-*.json"))]
    path = tmp_path / "events.json"
    path.write_text(json.dumps(events), encoding="utf-8")
    out = list(read_events(get_reader("openhands"), path))
    assert any(isinstance(e, ReadReject) and e.error.code == "reader_error" for e in out)
    assert sum(records_of(e) for e in out) == len(events)
    # Each failing event costs itself only, and every reject names the event's index in the whole document (the
    # re-reads leave failing events out, and the reader's own rejects are renumbered back).
    refs = [e.source.record for e in out if isinstance(e, ReadReject)]
    assert len(refs) == len(set(refs)) == len(events)
    assert set(refs) == {f"item {i}" for i in range(len(events))}


def test_a_gzip_binary_cassette_is_read_without_a_crash() -> None:
    path = shared_path("real_logs", "cassettes_simonw_llm", "llm__test_responses_tool_use.yaml")
    _, stats, rejects = convert_file(path, SETTINGS)
    _books(stats)
    for line in rejects:
        json.loads(line)


def test_a_generation_call_no_branch_reads_is_rejected_not_skipped(tmp_path: Path) -> None:
    def interaction(uri: str, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "request": {"method": "POST", "uri": uri, "body": json.dumps(body)},
            "response": {"status": {"code": 200}, "body": {"string": json.dumps({"text": "hello"})}},
        }

    chat = {"model": "command-r", "messages": [{"role": "user", "content": "hi"}]}
    cassette = {
        "interactions": [
            interaction("https://api.llm.example/v2/chat", chat),
            interaction("https://api.cohere.com/v2/embed", {"texts": ["hi"], "input_type": "search_document"}),
            interaction("https://api.openai.com/v1/embeddings", {"model": "e", "input": "hi"}),
        ]
    }
    import yaml

    path = tmp_path / "cohere.yaml"
    path.write_text(yaml.safe_dump(cassette), encoding="utf-8")
    assert detect_format(path).name == "cassettes"
    _, stats, rejects = convert_file(path, SETTINGS)
    _books(stats)
    assert dict(stats.records_rejected) == {"unsupported_api": 1}
    assert dict(stats.records_skipped) == {"not_a_generation_call": 2}
    assert json.loads(rejects[0])["record"] == "interaction 0"
    assert not validate_inputs([path]).ok


@pytest.mark.parametrize(
    ("request_body", "response_body"),
    [
        ({"message": "hi", "chat_history": []}, {"text": "hello"}),  # a chat API with a single-message request
        ({"inputs": "hi", "parameters": {}}, [{"generated_text": "hello"}]),  # a text-generation server
        ({"q": "hi"}, {"generations": [{"text": "hello"}]}),  # told by the response alone
    ],
)
def test_a_generation_call_to_an_api_no_reader_knows_is_an_unsupported_api_reject(
    tmp_path: Path, request_body: dict[str, Any], response_body: Any
) -> None:
    import yaml

    interaction = {
        "request": {"method": "POST", "uri": "https://llm.example/v1/generate", "body": json.dumps(request_body)},
        "response": {"status": {"code": 200}, "body": {"string": json.dumps(response_body)}},
    }
    path = tmp_path / "calls.yaml"
    path.write_text(yaml.safe_dump({"interactions": [interaction]}), encoding="utf-8")
    _, stats, _ = convert_file(path, SETTINGS)
    assert dict(stats.records_rejected) == {"unsupported_api": 1} and not stats.records_skipped


def test_an_assistant_reply_with_nothing_in_it_is_rejected_unless_engine_ids_prove_it(tmp_path: Path) -> None:
    chat = _write_jsonl(
        tmp_path / "chat.jsonl",
        [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant"}]}, _chat_record(1)],
    )
    _, stats, _ = convert_file(chat, SETTINGS)
    assert dict(stats.records_rejected) == {"empty_reply": 1} and stats.records_converted == 1

    def call(choice: dict[str, Any]) -> dict[str, Any]:
        return {
            "request": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            "response": {"id": "r", "choices": [choice]},
        }

    calls = _write_jsonl(
        tmp_path / "calls.jsonl",
        [call({"message": {"role": "assistant"}}), call({"message": {"role": "assistant"}, "token_ids": [7]})],
    )
    assert detect_format(calls).name == "calls"
    _, stats, _ = convert_file(calls, SETTINGS)
    assert dict(stats.records_rejected) == {"empty_reply": 1} and stats.records_converted == 1


# ------------------------------------------------------------------------------------------ excerpts
class _Weird:
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        return "_Weird()"


_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)),  # includes lone surrogates, NULs
    st.binary(),
    st.just(_Weird()),
)
_values = st.recursive(
    _leaves,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values)
def test_an_excerpt_is_bounded_printable_json_and_never_fails(value: Any) -> None:
    text = excerpt(value)
    assert isinstance(text, str) and len(text) <= EXCERPT_BYTES + 40
    text.encode("utf-8")  # no lone surrogate survives
    json.dumps({"excerpt": text}, ensure_ascii=False)


def test_an_excerpt_of_huge_or_deep_values_is_bounded_and_fast() -> None:
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    assert len(excerpt(deep)) <= EXCERPT_BYTES + 40
    assert len(excerpt("y" * (10 << 20))) <= EXCERPT_BYTES + 40
    assert len(excerpt(b"\xff" * (10 << 20))) <= EXCERPT_BYTES + 40
    assert excerpt({"k": b"\x1f\x8b gzip"}).startswith('{"k":')


# ------------------------------------------------------------------------------------------ the command line
def test_an_internal_error_prints_one_line_and_its_traceback_goes_to_the_debug_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import msgtrain.tools.validate_cmd as validate_cmd

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(validate_cmd, "validate_inputs", broken)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    path = _write_jsonl(tmp_path / "a.jsonl", [_chat_record(0)])
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "internal error: ZeroDivisionError: a bug" in err and "Traceback" not in err
    assert "ZeroDivisionError" in (tmp_path / "msgtrain-debug.log").read_text(encoding="utf-8")


def test_convert_logs_reader_tracebacks_in_the_state_directory_and_counts_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = shared_path("real_logs", "openhands_v1_sdk")
    events = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.rglob("event-*.json"))]
    path = tmp_path / "in" / "events.json"
    path.parent.mkdir()
    path.write_text(json.dumps(events), encoding="utf-8")
    out = tmp_path / "out"
    # No record of this file converts: without --allow-empty the run would publish nothing (exit 1).
    code = main(["convert", str(path), "-o", str(out), "--input-format", "openhands", "--allow-empty"])
    captured = capsys.readouterr()
    assert code == 3
    assert "Traceback" not in captured.out + captured.err
    assert "reader errors" in captured.out + captured.err
    log = tmp_path / ".out.msgtrain-state" / "debug.log"
    assert "Traceback" in log.read_text(encoding="utf-8")
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    r = report["records"]
    assert r["read"] == len(events) == r["converted"] + r["rejected"] + r["skipped"]


# Every real-log folder converted in one run without a traceback and with balanced books: in test_validate_parity.py,
# on the conversion of ../shared/real_logs that its parity case reads too (one conversion for both).


def test_a_json_array_is_held_to_the_per_record_limit_item_by_item_and_any_other_document_as_a_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An array larger than the limit is read item by item: an oversized item is one reject before any reader works on
    # it, and the other items of the same document still convert. Any other document is read whole, so it is one
    # record for memory purposes: over the limit it is one reject, by its size, before it is read.
    import msgtrain.ingest.core.base as base

    monkeypatch.setattr(base, "MAX_RECORD_BYTES", 4096)
    records = [_chat_record(0), _chat_record(1), _chat_record(2)]
    records[1]["messages"][0]["content"] = "x" * 10_000
    path = tmp_path / "chats.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    events = list(read_events(detect_format(path), path))
    assert [(type(e).__name__, e.source.record) for e in events] == [
        ("ReadGraph", "item 0"),
        ("ReadReject", "item 1"),
        ("ReadGraph", "item 2"),
    ]
    reject = events[1]
    assert isinstance(reject, ReadReject) and reject.error.code == "record_too_large"
    assert "--max-record-mb limit" in str(reject.error) and len(reject.excerpt) <= EXCERPT_BYTES + 32
    whole = tmp_path / "chat.json"
    whole.write_text(json.dumps(records[1]), encoding="utf-8")
    events = list(read_events(detect_format(whole), whole))
    assert [(type(e).__name__, e.source.record) for e in events] == [("ReadReject", "file")]
    reject = events[0]
    assert isinstance(reject, ReadReject) and reject.error.code == "record_too_large"


def _sharegpt_items(n: int) -> list[dict[str, Any]]:
    return [
        {"conversations": [{"from": "human", "value": f"question {i} café"}, {"from": "gpt", "value": f"answer {i}"}]}
        for i in range(n)
    ]


@pytest.mark.parametrize("indent", [None, 1], ids=["compact", "pretty"])
@pytest.mark.parametrize(
    ("damage", "code"),
    [
        (lambda s: s.replace(b"question 137", b"question\xff137"), "bad_utf8"),
        (lambda s: s.replace(b'"answer 137"', b'"answer 137'), "bad_json"),
    ],
    ids=["invalid_byte", "lost_quote"],
)
def test_one_bad_byte_in_a_300_conversation_document_costs_that_conversation_only(
    tmp_path: Path, indent: int | None, damage: Any, code: str
) -> None:
    path = tmp_path / "data.json"
    raw = json.dumps(_sharegpt_items(300), indent=indent, ensure_ascii=False).encode()
    path.write_bytes(damage(raw))
    _, stats, rejects = convert_file(path, SETTINGS)
    _books(stats)
    assert (stats.records_read, stats.records_converted) == (300, 299)
    (reject,) = [json.loads(r) for r in rejects]
    assert (reject["reason"], reject["record"]) == (code, "item 137")


def test_single_byte_mutants_of_an_array_document_lose_at_most_the_items_the_byte_touched() -> None:
    """Seeded: every single-byte change that breaks the document keeps all but at most two of its items (a damaged
    separator joins two), and no item is invented or changed."""
    import random

    from msgtrain.ingest.core.tolerant_json import recover_array_items

    items = _sharegpt_items(40)
    for indent in (None, 2):
        raw = json.dumps(items, indent=indent, ensure_ascii=False).encode()
        rng = random.Random(30 + (indent or 0))
        broken = 0
        while broken < 60:
            mutant = bytearray(raw)
            mutant[rng.randrange(len(mutant))] = rng.randrange(256)
            try:
                json.loads(bytes(mutant).decode("utf-8"))
                continue  # still valid JSON: nothing to recover
            except (UnicodeDecodeError, json.JSONDecodeError):
                broken += 1
            recovered = recover_array_items(bytes(mutant), "data.json")
            assert recovered is not None
            good = [item for item in recovered if not isinstance(item, ValidationError | ParseError)]
            assert all(item in items for item in good)
            assert len(good) >= len(items) - 2, (indent, bytes(mutant))


def test_a_single_field_edit_of_a_native_graph_log_costs_only_what_depends_on_that_field(tmp_path: Path) -> None:
    """Every field of every record of the sample graph log, set to ``true`` or dropped: the graph is lost only when
    the header or its one environment is bad (everything depends on those), and no edit costs more turns than
    losing that record whole (the same line unreadable) does."""
    original = ROOT / "sample_logs" / "native" / "edit_and_compaction.graph.jsonl"
    lines = original.read_text(encoding="utf-8").splitlines()
    _, base, _ = convert_file(original, SETTINGS)
    assert base.turns_trained > 2
    path, reference = tmp_path / "edited.graph.jsonl", tmp_path / "reference.graph.jsonl"
    unreadable: dict[int, int] = {}
    for i, line in enumerate(lines):
        record = json.loads(line)
        for key in sorted(set(record) - {"type", "graph"}):
            for edit in ("true", "drop"):
                changed = {k: v for k, v in record.items() if edit == "true" or k != key}
                if edit == "true":
                    changed[key] = True
                path.write_text("\n".join([*lines[:i], json.dumps(changed), *lines[i + 1 :]]) + "\n", encoding="utf-8")
                _, stats, _ = convert_file(path, SETTINGS)
                _books(stats)
                if record["type"] not in ("graph", "env"):
                    assert stats.turns_trained > 0, (i + 1, key, edit)
                if i not in unreadable:
                    reference.write_text(
                        "\n".join([*lines[:i], '{"not json', *lines[i + 1 :]]) + "\n", encoding="utf-8"
                    )
                    unreadable[i] = convert_file(reference, SETTINGS)[1].turns_trained
                # (A graph log may omit the record of an environment without tools, so an unreadable env line
                # reads as "no tools"; a present but broken one is not guessed at: its nodes are left out.)
                if record["type"] != "env":
                    assert stats.turns_trained >= unreadable[i], (i + 1, key, edit)


class _ItemReader:
    """A reader of a JSON array's records that raises in its own generator on an item marked ``boom``."""

    name = "items"
    description = "test reader"
    example = ""

    def detect(self, path: Path, head: bytes) -> bool:
        return False

    def read(self, path: Path) -> Iterator[ReadItem]:
        from msgtrain.ingest.common.conversation_files import iter_raw_records

        for rec in iter_raw_records(path):
            if rec.value.get("boom"):
                {}[rec.value["boom"]]  # unhashable: raises TypeError as a reader bug would
            yield ReadSkip(rec.ref, "nothing")


def test_a_fault_in_a_generator_reading_an_array_past_the_limit_counts_every_item_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rest of the file after a fault is one reject standing for every item not yet accounted: an array read item
    # by item (larger than the limit) is counted as it is read, never loaded whole to count it.
    import msgtrain.ingest.core.base as base

    monkeypatch.setattr(base, "MAX_RECORD_BYTES", 512)
    items: list[dict[str, Any]] = [{"n": i, "pad": "p" * 100} for i in range(10)]
    items[6]["boom"] = [6]
    path = tmp_path / "items.json"
    path.write_text(json.dumps(items), encoding="utf-8")
    assert path.stat().st_size > 512
    events = list(read_events(_ItemReader(), path))
    assert [e.source.record for e in events if isinstance(e, ReadSkip)] == [f"item {i}" for i in range(6)]
    (reject,) = [e for e in events if isinstance(e, ReadReject)]
    assert reject.error.code == "reader_error" and reject.count == 4
    assert sum(records_of(e) for e in events) == 10


def test_a_value_parsed_from_json_text_writes_back_in_at_most_the_growth_bound_times_its_bytes() -> None:
    """The driver does not measure a record of a JSON file small enough (``RecordTask.size_bound``): that rests on a
    value's compact JSON being at most ``PARSED_TEXT_GROWTH`` times the text it was parsed from, a UTF-16 file's UTF-8
    copy (1.5 times its size) included. Numbers are the one way back that grows: every short literal is tried."""
    import itertools

    from msgtrain.ingest.core.base import PARSED_TEXT_GROWTH

    ratio = 0.0
    for n in range(1, 6):
        for chars in itertools.product("0159.eE+-", repeat=n):  # (longer literals: a float's text is <= 24 chars)
            text = "".join(chars)
            try:
                value = json.loads(text)
            except ValueError:
                continue
            ratio = max(ratio, len(json.dumps(value)) / len(text))
    assert ratio == 4.5  # 1e15 comes back as 1000000000000000.0
    assert ratio * 1.5 <= PARSED_TEXT_GROWTH
    for text in ['"\\/"', '"\\u00e9"', '"\\ud83d\\ude00"', '"\\u0001"', '"\\n"', '"é"', '{ "a" : [ 1 , true ] }']:
        assert len(json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))) <= len(text.encode())


def test_a_record_of_a_small_json_file_is_not_serialized_to_be_measured_and_a_large_one_still_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The structural reader bounds what it parses from a JSON file by the file's size: within the limit, the driver
    does not dump the record to measure it; beyond it, an oversized record is still one ``record_too_large`` reject
    and the others convert."""
    from types import SimpleNamespace

    import msgtrain.ingest.core.base as base
    import msgtrain.ingest.faults as faults
    from msgtrain.ingest.structure.structural import READER

    def item(i: int, text: str = "ok") -> dict[str, Any]:
        return {"id": i, "turns": [{"role": "user", "text": f"hi {i}"}, {"role": "assistant", "text": text}]}

    path = tmp_path / "chats.json"
    path.write_text(json.dumps([item(0), item(1)]), encoding="utf-8")
    measured: list[Any] = []

    def counting_dumps(value: Any, **kw: Any) -> str:
        measured.append(value)
        return json.dumps(value, **kw)

    monkeypatch.setattr(faults, "json", SimpleNamespace(dumps=counting_dumps))  # the driver's measuring dump
    events = list(read_events(READER, path))
    assert [type(e).__name__ for e in events] == ["ReadGraph", "ReadGraph"] and measured == []

    # A document within the limit (read whole) whose item writes back longer than the limit: numbers written 1e15
    # come back as 1000000000000000.0. The file is over an eighth of the limit: the driver measures, and rejects it.
    monkeypatch.setattr(base, "MAX_RECORD_BYTES", 4096)
    scored = {**item(1), "scores": "SCORES"}
    text = json.dumps([item(0), scored, item(2)]).replace('"SCORES"', "[" + ",".join(["1e15"] * 500) + "]")
    path.write_text(text, encoding="utf-8")
    assert base.MAX_RECORD_BYTES / 8 < len(text) < base.MAX_RECORD_BYTES
    events = list(read_events(READER, path))
    assert [(type(e).__name__, e.source.record) for e in events] == [
        ("ReadGraph", "item 0"),
        ("ReadReject", "item 1"),
        ("ReadGraph", "item 2"),
    ]
    reject = events[1]
    assert isinstance(reject, ReadReject) and reject.error.code == "record_too_large" and len(measured) == 3
