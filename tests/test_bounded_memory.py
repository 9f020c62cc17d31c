"""Bounded memory per worker (issue 30, item 2): no input makes a reader hold more than a bounded amount.

Each test lowers the per-record limit (``MAX_RECORD_BYTES``) so that inputs many times past it stay small enough
for the suite, and measures with ``tracemalloc`` what the reading held at its peak.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import msgtrain.ingest.base as base
from msgtrain.ingest.base import ReadGraph, ReadReject, is_json_lines
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.chunks import key_function, line_groups
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.registry import get_reader

LIMIT = 64 * 1024
TAIL = 8 * 1024 * 1024  # 128 times the limit
STEP = 256 * 1024  # msgtrain.ingest.base.LINE_STEP, what skipping a long line reads at a time
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


def test_a_cassette_larger_than_the_document_limit_is_rejected_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "MAX_DOCUMENT_BYTES", LIMIT)
    path = tmp_path / "big.yaml"
    path.write_text("interactions:\n" + "# padding\n" * LIMIT, encoding="utf-8")
    events = list(read_events(get_reader("cassettes"), path))
    assert [(e.error.code, e.count) for e in events if isinstance(e, ReadReject)] == [("record_too_large", 1)]
