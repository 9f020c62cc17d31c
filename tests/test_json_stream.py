"""Item-by-item reading of a JSON array document (msgtrain.ingest.core.json_stream).

The oracle is ``json.loads`` of the whole document: over seeded random arrays (strings holding ``]``, ``,``, ``{``,
escaped quotes and backslashes, non-ASCII and astral characters, line separators), read with chunks of every small
size so that a chunk boundary falls at every offset, the items come out equal to the whole document's, each at its
byte offset.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import msgtrain.ingest.core.base as base
from msgtrain.errors import ParseError
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.core.json_stream import iter_array_items
from msgtrain.ingest.detect import detect_format

_ALPHABET = ["a", "]", "[", ",", '"', "\\", "{", "}", ":", " ", "\n", "é", "中", "😀", "\u2028", "\t", "/"]


def _value(r: random.Random, depth: int = 0) -> Any:
    kind = r.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return "".join(r.choice(_ALPHABET) for _ in range(r.randrange(9)))
    if kind == 1:
        return r.randrange(-(10**12), 10**12)
    if kind == 2:
        return r.uniform(-1e6, 1e6)
    if kind == 3:
        return r.choice([True, False, None])
    if kind == 4:
        return [_value(r, depth + 1) for _ in range(r.randrange(4))]
    return {"".join(r.choice(_ALPHABET) for _ in range(3)): _value(r, depth + 1) for _ in range(r.randrange(4))}


def _items(path: Path, chunk: int) -> list[tuple[int, Any, int]]:
    return list(iter_array_items(path, str(path), chunk=chunk))


def test_random_arrays_read_in_chunks_of_every_small_size_give_the_items_json_loads_gives(tmp_path: Path) -> None:
    r = random.Random(35)
    path = tmp_path / "array.json"
    for _ in range(150):
        array = [_value(r) for _ in range(r.randrange(6))]
        text = json.dumps(array, ensure_ascii=r.random() < 0.3, indent=r.choice([None, 1, "\t"]))
        raw = text.encode()
        path.write_bytes((b"\xef\xbb\xbf" if r.random() < 0.1 else b"") + raw)  # (offsets are of the text)
        for chunk in range(1, 10):
            items = _items(path, chunk)
            assert [i for i, _, _ in items] == list(range(len(array)))
            assert [v for _, v, _ in items] == array, (text, chunk)
            for _, value, offset in items:  # each item starts at its byte offset
                assert json.JSONDecoder().raw_decode(raw[offset:].decode())[0] == value


def test_an_item_over_the_limit_is_skipped_unheld_and_the_items_after_it_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "MAX_RECORD_BYTES", 4096)
    big = {"text": 'x"]},\\' * 2000, "nested": [[{"a": "]"}]] * 50}
    array = [{"a": 1}, big, "s" * 5000, 7, {"b": "ok"}]
    path = tmp_path / "array.json"
    path.write_text(json.dumps(array), encoding="utf-8")
    for chunk in (7, 4096, 1 << 20):
        items = _items(path, chunk)
        assert [v for _, v, _ in items if not isinstance(v, ParseError)] == [{"a": 1}, 7, {"b": "ok"}]
        errors = [(i, v.code) for i, v, _ in items if isinstance(v, ParseError)]
        assert errors == [(1, "record_too_large"), (2, "record_too_large")]
        assert "--max-record-mb limit" in str(items[1][1])


def test_a_bad_item_is_its_own_error_and_a_lost_structure_ends_the_document_after_what_was_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "array.json"
    path.write_bytes(b'[{"a": 1}, {"b": tru}, {"c": "\xff"}, {"d": [1, 2]} {"e": 3}, {"f": 4}]')
    for chunk in (1, 3, 1 << 20):
        items = _items(path, chunk)
        shown = [(i, v.code if isinstance(v, ParseError) else v) for i, v, _ in items]
        assert shown == [(0, {"a": 1}), (1, "bad_json"), (2, "bad_utf8"), (3, {"d": [1, 2]}), (4, "bad_json")]
        assert "the rest of the document is not read" in str(items[-1][1])
    path.write_bytes(b'[{"a": 1}, {"b": [2')
    assert [(i, v.code if isinstance(v, ParseError) else v) for i, v, _ in _items(path, 4)] == [
        (0, {"a": 1}),
        (1, "bad_json"),
    ]
    path.write_bytes(b"  [ ]  ")
    assert _items(path, 2) == []


def _chat(i: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"a{i}"}]}


def test_malformed_json_mid_array_is_a_reject_and_the_items_before_it_convert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the limit the array is read item by item: where its structure is lost, what was read before converts and
    the rest of the file is one reject saying so (its items are not guessed)."""
    monkeypatch.setattr(base, "MAX_RECORD_BYTES", 4096)
    items = [json.dumps(_chat(i)) for i in range(80)]
    text = "[" + ",\n".join(items[:50]) + ",\n" + items[50][:-3] + "\n" + ",\n".join(items[51:]) + "]"
    path = tmp_path / "chats.json"
    path.write_text(text, encoding="utf-8")
    assert path.stat().st_size > 4096
    events = list(read_events(detect_format(path), path))
    graphs = [e for e in events if isinstance(e, ReadGraph)]
    rejects = [e for e in events if isinstance(e, ReadReject)]
    assert [g.source.record for g in graphs] == [f"item {i}" for i in range(50)]
    assert len(rejects) == 1 and rejects[0].error.code == "bad_json" and rejects[0].source.record == "item 50"
    assert "the rest of the document is not read" in str(rejects[0].error) and "jq" in (rejects[0].error.hint or "")


def test_an_export_read_item_by_item_gives_the_graphs_and_rejects_of_the_export_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The structural reader's file records (a ChatGPT conversations.json, hand-written fixture) are the same items
    whether the document is read whole or item by item past the limit."""
    from tests.conftest import ROOT

    source = ROOT / "tests" / "fixtures" / "chatgpt_export" / "conversations.json"
    path = tmp_path / "conversations.json"
    path.write_bytes(source.read_bytes())

    def read() -> list[tuple[str, str, Any]]:
        reader = detect_format(path)
        assert reader.name == "structural"
        return [
            (type(e).__name__, e.source.record, e.graph.graph_id if isinstance(e, ReadGraph) else e.error.code)  # type: ignore[union-attr]
            for e in read_events(reader, path)
        ]

    whole = read()
    # Under the file's size, over its largest item as written (11,042 bytes: indented, as the whole file is).
    monkeypatch.setattr(base, "MAX_RECORD_BYTES", 12_000)
    assert path.stat().st_size > base.MAX_RECORD_BYTES
    assert read() == whole and sum(kind == "ReadGraph" for kind, _, _ in whole) == 3
