"""Bounded memory per worker (issue 30, item 2): no input makes a reader hold more than a bounded amount.

Each test lowers the per-record limit (``MAX_RECORD_BYTES``) so that inputs many times past it stay small enough
for the suite, and measures with ``tracemalloc`` what the reading held at its peak.
"""

from __future__ import annotations

import itertools
import json
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import msgtrain.ingest.core.base as base
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject, is_json_lines
from msgtrain.ingest.core.chunks import key_function, line_groups
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.registry import get_reader

LIMIT = 64 * 1024
TAIL = 8 * 1024 * 1024  # 128 times the limit
STEP = 256 * 1024  # msgtrain.ingest.core.base.LINE_STEP, what skipping a long line reads at a time
BOUND = 2 * (LIMIT + STEP) + 1024 * 1024  # what reading such a file may hold at its peak


def _chat(i: int) -> bytes:
    record = {"messages": [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"a{i}"}]}
    return json.dumps(record).encode() + b"\n"


def _peak(work: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def small_records(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "MAX_RECORD_BYTES", LIMIT)


def _nul_tail(path: Path) -> Path:
    path.write_bytes(_chat(0) + _chat(1) + b"\0" * TAIL)  # a crashed writer's preallocated, never written tail
    return path


def _sparse(path: Path) -> Path:
    with open(path, "wb") as f:
        f.write(_chat(0) + _chat(1))
        f.truncate(TAIL)  # a hole: reads as NULs, costs no disk
    return path


@pytest.mark.parametrize("make", [_nul_tail, _sparse], ids=["nul_tail", "sparse"])
def test_a_line_past_the_record_limit_is_rejected_without_ever_being_held_in_memory(
    tmp_path: Path, small_records: None, make: Callable[[Path], Path]
) -> None:
    path = make(tmp_path / "calls.jsonl")
    reader = detect_format(path)
    # The modules the reading imports on first use are imported before the measure: their code is no working set.
    warm = tmp_path / "warm.jsonl"
    warm.write_bytes(_chat(0) + _chat(1))
    list(read_events(reader, warm))
    events, peak = _peak(lambda: list(read_events(reader, path)))
    assert len([e for e in events if isinstance(e, ReadGraph)]) == 2
    rejects = [e for e in events if isinstance(e, ReadReject)]
    assert [(r.error.code, r.source.record) for r in rejects] == [("record_too_large", "line 3")]
    tail = path.stat().st_size - len(_chat(0) + _chat(1))
    assert f"record of {tail} bytes" in str(rejects[0].error)
    assert len(rejects[0].excerpt) <= base.EXCERPT_BYTES + 32
    # The limit and a step of the skip (each read by ``readline`` into a buffer of up to twice its size) plus the
    # reading's own working set, never the 8 MiB line.
    assert peak < BOUND, peak


def test_planning_chunks_and_telling_jsonl_from_a_document_hold_no_long_line(
    tmp_path: Path, small_records: None
) -> None:
    path = tmp_path / "calls.jsonl"
    path.write_bytes(b"\0" * TAIL + b"\n" + _chat(0) + _chat(1))  # the long line first
    assert _peak(lambda: is_json_lines(path))[1] < BOUND
    keys = key_function(get_reader("openai_chat"), path)
    assert keys is not None
    import numpy  # noqa: F401 - imported before measuring (line_groups imports it lazily)

    (bounds, _, nonblank), peak = _peak(lambda: line_groups(path, keys))
    assert peak < BOUND, peak
    assert bounds.tolist() == [0, TAIL + 1, TAIL + 1 + len(_chat(0)), TAIL + 1 + 2 * len(_chat(0))]
    assert nonblank.tolist() == [True, True, True]


def test_a_cassette_larger_than_the_record_limit_is_rejected_before_it_is_parsed(
    tmp_path: Path, small_records: None
) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("interactions:\n" + "# padding\n" * LIMIT, encoding="utf-8")
    events = list(read_events(get_reader("cassettes"), path))
    assert [(e.error.code, e.count) for e in events if isinstance(e, ReadReject)] == [("record_too_large", 1)]


def _rows(out: Path) -> list[dict[str, Any]]:
    """The rows of a run without what names their file and record (ids derive from ``file#record``)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "data" / "train-00000-of-00001.parquet").to_pylist()
    return [
        {k: v for k, v in row.items() if k not in ("sample_id", "graph_id", "source", "group_id", "turn_group_ids")}
        for row in rows
    ]


def test_a_json_array_over_max_record_mb_is_read_item_by_item_as_the_same_records_as_jsonl_are(
    tmp_path: Path,
) -> None:
    """A JSON array larger than --max-record-mb (a chat dataset or export saved as one document) is read item by item:
    each item is one record bounded by the limit, an item over it is one reject naming the limit and the option and
    the items after it convert, and the output (rows, books) is that of the same records as JSONL. A top-level object
    is still held whole, so over the limit it is one reject."""
    from msgtrain.cli import main

    pad = " words" * 50
    chats = [
        {"messages": [{"role": "user", "content": f"q{i}{pad}"}, {"role": "assistant", "content": f"a{i}"}]}
        for i in range(400)
    ]  # about 150 kB as one JSON document: over a limit of 1/8 MiB
    big = {"messages": [{"role": "user", "content": "x" * (2**17 + 10)}, {"role": "assistant", "content": "y"}]}
    records = [*chats[:200], big, *chats[200:]]
    as_array, as_lines = tmp_path / "array", tmp_path / "lines"
    as_array.mkdir()
    as_lines.mkdir()
    (as_array / "conversations.json").write_text(json.dumps(records), encoding="utf-8")
    (as_lines / "conversations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (as_array / "object.json").write_text(json.dumps({"messages": big["messages"]}), encoding="utf-8")
    runs = {}
    for name, logs in (("array", as_array), ("lines", as_lines)):
        out = tmp_path / f"out-{name}"
        assert main(["convert", str(logs), "-o", str(out), "-q", "--max-record-mb", "0.125"]) == 3
        rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
        report = json.loads((out / "report.json").read_text())
        runs[name] = (rejects, report, _rows(out))
    rejects, report, rows = runs["array"]
    assert sorted((r["reason"], Path(r["file"]).name, r["record"]) for r in rejects) == [
        ("record_too_large", "conversations.json", "item 200"),
        ("record_too_large", "object.json", "file"),
    ]
    assert all("--max-record-mb limit (0.125 MiB)" in r["message"] and "--max-record-mb" in r["hint"] for r in rejects)
    assert report["records"]["converted"] == 400
    line_rejects, line_report, line_rows = runs["lines"]
    assert [(r["reason"], r["record"]) for r in line_rejects] == [("record_too_large", "line 201")]
    assert line_report["records"]["converted"] == 400 and line_report["records"]["rejected"] == 1
    assert report["records"] == {
        **line_report["records"],
        "read": 402,
        "rejected": 2,
        "rejected_by_reason": {"record_too_large": 2},
    }
    assert report["by_policy"] == line_report["by_policy"] and report["graphs"] == line_report["graphs"]
    assert rows == line_rows and len(rows) == 400


def test_reading_a_json_array_many_times_the_limit_holds_about_one_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An array document read item by item holds a bounded buffer and one item at a time, never the file."""
    path = tmp_path / "conversations.json"
    with path.open("w", encoding="utf-8") as f:
        f.write("[")
        pad = " words" * 3000  # about 18 kB an item, under the limit
        chats = (
            {"messages": [{"role": "user", "content": f"q{i}{pad}"}, {"role": "assistant", "content": "a"}]}
            for i in range(300)
        )
        f.write(",".join(json.dumps(chat) for chat in chats))  # about 5.6 MB, 90 times the limit
        f.write("]")
    size = path.stat().st_size
    assert size > 80 * LIMIT
    monkeypatch.setattr(base, "MAX_RECORD_BYTES", LIMIT)
    reader = detect_format(path)
    graphs, peak = _peak(lambda: sum(1 for e in read_events(reader, path) if isinstance(e, ReadGraph)))
    assert graphs == 300
    assert peak < BOUND < size / 3


# ----------------------------------------------------------------------------------------------- per-graph caps
def _edited_chat(turns: int) -> Any:
    """A chat of ``turns`` turns whose every user message was edited once after its reply: each edit is a branch,
    so the graph gives one sample per turn, each holding its whole context (quadratic tokens, like a template that
    re-renders the history)."""
    from msgtrain import MessageGraph

    g = MessageGraph()
    g.append({"role": "system", "content": "You are terse."})
    for i in range(turns):
        g.append({"role": "user", "content": f"question {i} " + "word " * 20})
        g.append({"role": "assistant", "content": f"answer {i} " + "word " * 20})
        g[-2] = {"role": "user", "content": f"question {i}, edited " + "word " * 20}
        g.append({"role": "assistant", "content": f"answer {i}, again " + "word " * 20})
    return g


def test_each_per_graph_cap_rejects_with_its_own_reason_and_no_cap_is_reached_by_a_graph_within_them() -> None:
    from msgtrain.errors import MsgtrainError
    from msgtrain.linearize import LinearizeOptions, linearize_graph, load_tokenizer

    tok = load_tokenizer(None)
    graph = _edited_chat(12)
    full = linearize_graph(graph, tok)
    tokens = sum(len(s.input_ids) for s in full.samples)
    samples = len(full.samples)
    assert samples > 12
    state = tokens * 9 + samples * 300
    # Exactly at the sizes the graph gives: accepted.
    at = LinearizeOptions(max_graph_tokens=tokens, max_graph_samples=samples, max_graph_state_bytes=None)
    assert len(linearize_graph(graph, tok, options=at).samples) == samples
    for options, code in [
        (LinearizeOptions(max_graph_tokens=tokens - 1), "graph_too_many_tokens"),
        (LinearizeOptions(max_graph_samples=samples - 1), "graph_too_many_samples"),
        (LinearizeOptions(max_graph_state_bytes=state // 2), "graph_state_too_large"),
    ]:
        with pytest.raises(MsgtrainError) as rejected:
            linearize_graph(graph, tok, options=options)
        assert rejected.value.code == code
        assert "--max-graph" in str(rejected.value)


def test_a_graph_past_its_token_cap_is_rejected_before_the_rest_of_it_is_rendered() -> None:
    from msgtrain.errors import MsgtrainError
    from msgtrain.linearize import LinearizeOptions, linearize_graph, load_tokenizer

    tok = load_tokenizer(None)
    graph = _edited_chat(60)
    tok.clear_run_memos()  # both runs encode from nothing (the run's memos would serve the second)
    tok.encoded_tokens = 0
    total = sum(len(s.input_ids) for s in linearize_graph(graph, tok).samples)
    whole_cost = tok.encoded_tokens
    tok.clear_run_memos()
    tok.encoded_tokens = 0
    with pytest.raises(MsgtrainError):
        linearize_graph(graph, tok, options=LinearizeOptions(max_graph_tokens=total // 20))
    assert tok.encoded_tokens < whole_cost / 3


def test_the_caps_are_options_and_a_capped_conversation_is_one_reject_in_a_run(tmp_path: Path) -> None:
    from msgtrain.cli import main

    logs = tmp_path / "logs"
    logs.mkdir()
    long = {"messages": []}
    for i in range(30):
        long["messages"] += [
            {"role": "user", "content": f"q{i} " * 30},
            {"role": "assistant", "content": f"a{i} " * 30},
        ]
    (logs / "chats.jsonl").write_text(json.dumps(long) + "\n" + _chat(1).decode(), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["convert", str(logs), "-o", str(out), "--max-graph-tokens", "2000", "-q"]) in (0, 3)
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["records"]["rejected_by_reason"] == {"graph_too_many_tokens": 1}
    assert report["records"]["converted"] == 1
    out2 = tmp_path / "out2"
    assert main(["convert", str(logs), "-o", str(out2), "--max-graph-tokens", "0", "-q"]) == 0
    assert json.loads((out2 / "report.json").read_text(encoding="utf-8"))["records"]["converted"] == 2


def test_max_record_mb_rejects_a_larger_record_and_a_larger_decoded_body_naming_the_limit(tmp_path: Path) -> None:
    import gzip

    import yaml

    from msgtrain.cli import main
    from msgtrain.ingest.core import http_bodies

    big = {"messages": [{"role": "user", "content": "word " * 300_000}, {"role": "assistant", "content": "ok"}]}
    log = tmp_path / "logs" / "chats.jsonl"
    log.parent.mkdir()
    log.write_bytes(_chat(0) + json.dumps(big).encode() + b"\n" + _chat(1))
    reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    body = gzip.compress(json.dumps({**reply, "pad": "x" * 1_500_000}).encode())  # 1.5 MB decoded, 5 KB on disk
    interactions = [
        {
            "request": {
                "method": "POST",
                "uri": "https://api.openai.com/v1/chat/completions",
                "body": json.dumps({"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}),
            },
            "response": {
                "status": {"code": 200},
                "headers": {"Content-Type": ["application/json"], "Content-Encoding": ["gzip"]},
                "body": {"string": data},
            },
        }
        for i, data in enumerate([body, gzip.compress(json.dumps(reply).encode())])
    ]
    (tmp_path / "logs" / "cassette.yaml").write_text(yaml.safe_dump({"interactions": interactions}))
    out = tmp_path / "out"
    assert main(["convert", str(log.parent), "-o", str(out), "-q", "--max-record-mb", "1"]) == 3
    rejects = {r["reason"]: r for r in map(json.loads, (out / "rejects.jsonl").read_text().splitlines())}
    assert set(rejects) == {"record_too_large", "body_too_large"}
    for r in rejects.values():
        assert "--max-record-mb limit (1 MiB)" in r["message"] and "--max-record-mb" in r["hint"]
    report = json.loads((out / "report.json").read_text())
    assert report["records"]["converted"] == 3  # the two small chats and the small interaction
    # The limits are the run's alone: the defaults stand again after it, and by default both records convert.
    assert base.MAX_RECORD_BYTES == http_bodies.MAX_BODY_BYTES == 64 << 20
    assert main(["convert", str(log.parent), "-o", str(out), "-q"]) == 0


# ------------------------------------------------------------------------------------ a large record's tokens, once
def _long_chat_samples() -> list[Any]:
    from msgtrain import MessageGraph
    from msgtrain.linearize import linearize_graph, load_tokenizer

    g = MessageGraph()
    g.append({"role": "user", "content": "the quick brown fox " * 5_000})
    g.append({"role": "assistant", "content": "ok"})
    return linearize_graph(g, load_tokenizer(None)).samples


def test_a_samples_unknown_logprobs_hold_no_memory_and_its_table_holds_its_tokens_once() -> None:
    import numpy as np

    from msgtrain.export.schema import samples_to_table

    (sample,) = _long_chat_samples()
    assert sample.num_tokens > 100_000
    # No engine logprobs: one NaN seen through a view, not four bytes per token.
    assert sample.logprobs.strides == (0,) and np.isnan(sample.logprobs).all()
    table = samples_to_table([sample])
    # The ids column is the sample's own array (no copy), the logprobs nulls over memory the table never wrote.
    ids_buffer = table["input_ids"].chunk(0).values.buffers()[1]
    assert ids_buffer.address == sample.input_ids.ctypes.data
    logprobs = table["logprobs"].chunk(0)
    assert logprobs.values.null_count == sample.num_tokens and logprobs.to_pylist() == [[None] * sample.num_tokens]
    assert table["num_trained_tokens"].to_pylist() == [int(sample.loss_mask.sum())]


def test_a_long_row_among_short_ones_is_a_chunk_of_its_own_holding_the_samples_arrays() -> None:
    """A part's table holds a long row's ids and mask once: its chunk is the sample's arrays (they were copied into
    the rows' concatenated values while the sample still held them, 5 bytes per token at the part's peak)."""
    import numpy as np

    from msgtrain.export.schema import LONG_ROW_TOKENS, Sample, _table, samples_to_table, unknown_logprobs

    def sample(i: int, n: int) -> Sample:
        ids = (np.arange(n) % 251).astype(np.int32)
        mask = np.zeros(n, dtype=np.int8)
        mask[n - 2 :] = 1
        return Sample(
            f"s{i}", "g", f"log:{i}", "", ids, mask, unknown_logprobs(n), ["t"], [(n - 2, n)], ["t"], "g", "end", 0
        )

    samples = [sample(0, 5), sample(1, 7), sample(2, LONG_ROW_TOKENS), sample(3, 9), sample(4, LONG_ROW_TOKENS + 3)]
    table = samples_to_table(samples)
    ids, mask = table["input_ids"], table["loss_mask"]
    assert [len(c) for c in ids.chunks] == [2, 1, 1, 1]
    for chunk, mask_chunk, s in ((ids.chunk(1), mask.chunk(1), samples[2]), (ids.chunk(3), mask.chunk(3), samples[4])):
        assert chunk.values.buffers()[1].address == s.input_ids.ctypes.data
        assert mask_chunk.values.buffers()[1].address == s.loss_mask.ctypes.data
    # The same rows as one chunk of concatenated values.
    assert table.combine_chunks().equals(_table(samples))


def test_the_runs_memos_are_empty_while_its_dataset_is_assembled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the run memoized while converting (segment ids, encodings, renderings: up to 320 MiB in a long run, a
    small record's own ids and renderings in a short one) is not held beside the dataset being written."""
    from msgtrain.linearize import load_tokenizer
    from msgtrain.run import execute, pipeline
    from msgtrain.run.config import ConvertConfig
    from msgtrain.run.execute import LocalPool

    log = tmp_path / "log.jsonl"
    log.write_bytes(b"".join(_chat(i) for i in range(4)))
    tok = load_tokenizer(None)
    seen: list[tuple[int, int, int]] = []
    assemble = LocalPool.assemble

    def spy(self: LocalPool, job: Any, tok_: Any, progress: Any) -> Any:
        seen.append((len(tok.segment_cache), len(tok.encodings), len(tok.__dict__.get("_render_cache") or ())))
        return assemble(self, job, tok_, progress)

    monkeypatch.setattr(LocalPool, "assemble", spy)
    converted: list[int] = []
    convert_to_part = execute._convert_to_part

    def counting(*args: Any) -> Any:
        out = convert_to_part(*args)
        converted.append(len(tok.segment_cache))
        return out

    monkeypatch.setattr(execute, "_convert_to_part", counting)
    report = pipeline.convert(ConvertConfig(inputs=(log,), output=tmp_path / "out"))
    assert report["records"]["converted"] == 4
    assert converted and converted[-1] > 0  # the conversion memoized segments
    assert seen == [(0, 0, 0)]


def test_per_row_sums_hold_no_running_sum_as_long_as_the_values() -> None:
    import numpy as np

    from msgtrain.export import arrays

    values = np.zeros(8_000_000, dtype=np.int8)
    values[::3] = 1
    offsets = np.array([0, 5, 5, 3_000_001, 8_000_000], dtype=np.int64)
    sums, peak = _peak(lambda: arrays.per_row_sum(values, offsets))
    assert sums.tolist() == [int(values[a:b].sum()) for a, b in itertools.pairwise(offsets)]
    assert peak < 4 * arrays.SUM_BLOCK * 8, peak  # a block's running sum, not 8 bytes per value (64 MB)


_FREED_ARRAYS = """
import sys
if sys.argv[1] == "tuned":
    from msgtrain.run.allocators import tune_allocators
    tune_allocators()
import numpy as np
import pyarrow as pa

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

big = np.ones(16 << 20, np.uint8)
del big  # glibc raises its mmap threshold to a freed block's size unless it is fixed
before, arrays, kept = rss(), [], []
for _ in range(24):
    arrays.append(np.ones(2 << 20, np.uint8))  # 48 MiB freed below
    kept.append(np.ones(200_000, np.uint8))  # live between them: a heap's holes cannot be given back
del arrays
print(pa.default_memory_pool().backend_name, (rss() - before) >> 20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc/self/statm")
def test_a_conversion_process_returns_freed_large_arrays_and_writes_parquet_from_the_system_pool() -> None:
    """What a huge record's stages free is given back before the next stage (the peak follows what is live, not the
    largest heap so far): measured in a fresh process, tuned as the command line and workers tune themselves."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    runs = {
        how: subprocess.run(
            [sys.executable, "-c", _FREED_ARRAYS, how], capture_output=True, text=True, check=True, env=env
        ).stdout.split()
        for how in ("tuned", "default")
    }
    pool, kept = runs["tuned"]
    assert pool == "system" and int(kept) < 16, runs  # the 4.6 MiB still live, not the 48 MiB freed
    assert runs["default"][0] != "system" or int(runs["default"][1]) > 32, runs  # what the test tells apart


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss in KiB, glibc's mallopt")
def test_a_two_megabyte_byte_level_record_costs_the_console_script_under_nine_bytes_per_byte(tmp_path: Path) -> None:
    """benchmarks/memory.py at one small size, embedded (byte-level) tokenizer: the peak RSS of a conversion with a
    2 MB record, against one without it, in fresh processes. Measured 7.1 bytes per record byte; 11.3 when the part's
    table copied the long row and the run's memos and freed heap stayed through the assembly (docs/performance.md),
    21.5 when the memos kept a record this small, 28 when pyarrow wrote the row's pages, 59 before freed memory was
    given back."""
    from benchmarks.memory import peak_rss, write_input

    size = 2_000_000
    base = peak_rss(write_input(tmp_path, 0), tmp_path / "out-0", None)
    peak = peak_rss(write_input(tmp_path, size), tmp_path / "out-big", None)
    assert (peak - base) / size < 9, (base, peak)
