"""The msgtrain-vs-TRL benchmark's corpus (``benchmarks/vs_trl.py``): the ``distinct`` mode the goal is judged on
makes every copy's conversations different (no user message shared between two copies) while keeping each
conversation's shape and what real logs share (system prompt, tool schemas); ``duplicated`` copies read the same.

Oracle: msgtrain's own readers over the written files (what both sides of the benchmark read), compared copy by copy
with the real source files read as they are (copy 0)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import vs_trl
from tests.conftest import shared_path


def _records_of_copy(corpus: Path, k: int, tmp: Path) -> list[dict[str, Any]]:
    """The records msgtrain's readers give for copy ``k`` alone (its files linked into a folder of their own)."""
    folder = tmp / f"copy-{k}"
    folder.mkdir()
    for path in sorted(corpus.glob(f"*-{k:03d}.*")):
        (folder / path.name).symlink_to(path)
    return vs_trl.conversation_records(folder)


def _shape(rec: dict[str, Any]) -> list[tuple[str, int]]:
    return [(m["role"], len(m.get("tool_calls") or [])) for m in rec["messages"]]


def _texts(rec: dict[str, Any], role: str) -> list[str]:
    return [json.dumps(m.get("content"), ensure_ascii=False) for m in rec["messages"] if m["role"] == role]


@pytest.fixture(scope="module")
def sources_present() -> None:
    for rel in vs_trl.SOURCES:
        shared_path("real_logs", *rel.split("/"))


def test_distinct_copies_share_no_user_message_and_keep_shape(sources_present: None, tmp_path: Path) -> None:
    corpus = vs_trl.build_corpus(tmp_path / "corpora", 3, "distinct")
    copies = [_records_of_copy(corpus, k, tmp_path) for k in range(3)]
    real = copies[0]
    assert len(real) == 370  # copy 0 is the real files as they are
    users = [{t for rec in recs for t in _texts(rec, "user")} for recs in copies]
    for a in range(3):
        for b in range(a + 1, 3):
            assert not users[a] & users[b], f"copies {a} and {b} share a user message"
    for k, recs in enumerate(copies[1:], start=1):
        assert [_shape(r) for r in recs] == [_shape(r) for r in real]  # messages, roles, tool calls: unchanged
        for rec, orig in zip(recs, real, strict=True):
            assert rec["tools"] == orig["tools"]  # tool schemas still shared across copies
            assert _texts(rec, "system") == _texts(orig, "system")
            # the marker is a few characters, once per message (once per result of a list of parallel results)
            marker = vs_trl.copy_marker(k)
            for m, o in zip(rec["messages"], orig["messages"], strict=True):
                text, before = (json.dumps(x.get("content"), ensure_ascii=False) for x in (m, o))
                grown, markers = len(text) - len(before), text.count(marker)
                assert 0 <= grown <= markers * (len(marker) + 16)
                assert markers <= 1 or m["role"] == "tool"
        tool_results = [
            (t, o)
            for r, q in zip(recs, real, strict=True)
            for t, o in zip(_texts(r, "tool"), _texts(q, "tool"), strict=True)
        ]
        changed = sum(t != o for t, o in tool_results)
        assert changed >= 0.95 * len(tool_results), f"copy {k}: only {changed} of {len(tool_results)} tool results"


def test_duplicated_copies_read_alike(sources_present: None, tmp_path: Path) -> None:
    corpus = vs_trl.build_corpus(tmp_path / "corpora", 2, "duplicated")
    first, second = (_records_of_copy(corpus, k, tmp_path) for k in range(2))
    assert first == second
    assert len({p.read_bytes() for p in corpus.glob("glaive*")}) == 2  # distinct bytes: msgtrain converts both
