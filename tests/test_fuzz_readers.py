"""Fuzzing every reader through the fault boundary: mutated copies of each reader's sample and of small real logs.

For every mutation (drop a key, swap a value's type, insert raw bytes, NULs, lone surrogates, very deep nesting,
truncate, duplicate or reorder lines) ``validate`` and ``convert`` run in-process and must: raise nothing, balance
their books (records read = converted + rejected + skipped, the same count for both commands), and — where a JSONL
line was mutated in place and the file is still read by the same reader — give exactly the samples they gave before
for every conversation that does not contain the mutated line (conversations as the reader's ``chunk_keys`` group
lines), and — for every reader, sessions included — train at least the turns the same file trains with that line
unreadable: one bad field costs at most its record and the turns whose context held it. Seeded and bounded
(hypothesis, derandomized).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msgtrain.errors import MsgtrainError
from msgtrain.ingest import registry  # noqa: F401 - registers the readers
from msgtrain.ingest.core.chunks import is_jsonl, key_function, line_groups
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.registry import REGISTRY
from msgtrain.run.parts import LinearizeSettings, PartStats, convert_file, source_line
from msgtrain.tools.validate_cmd import validate_inputs
from tests.conftest import ROOT, SHARED

SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)
REAL_LIMIT = 150_000  # bytes: real logs small enough to fuzz many times over


def _inputs() -> list[Path]:
    # Byte mutation needs a file: a directory reader's example (a folder log) is not fuzzed here.
    files = [ROOT / reader.example for reader in REGISTRY.values() if (ROOT / reader.example).is_file()]
    real = SHARED / "real_logs"
    if real.is_dir():  # one small file per folder, whatever folders there are
        for folder in sorted(p for p in real.iterdir() if p.is_dir()):
            small = [
                p
                for p in sorted(folder.rglob("*"))
                if p.is_file() and p.suffix in (".json", ".jsonl", ".yaml", ".traj") and p.stat().st_size < REAL_LIMIT
            ]
            files += [p for p in small if _reader_name(p) is not None][:1]
    return files


def _reader_name(path: Path) -> str | None:
    try:
        return detect_format(path).name
    except MsgtrainError:
        return None


INPUTS = _inputs()
LINE_MUTATIONS = (
    "drop_key",
    "swap_type",
    "insert_bytes",
    "nul",
    "surrogate",
    "surrogate_key",
    "deep",
    "truncate_line",
)
FILE_MUTATIONS = ("duplicate_line", "reorder_lines", "truncate_file", "insert_bytes_anywhere")


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:8]):
            out += _paths(v, (*prefix, i))
    return out


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _mutate_value(value: Any, kind: str, rng: random.Random) -> Any:
    """A structural mutation of a parsed JSON value (its copy is returned)."""
    value = json.loads(json.dumps(value))
    paths = [p for p in _paths(value) if p]
    if not paths:
        return [value] if kind == "swap_type" else value
    path = rng.choice(paths)
    parent, last = _get(value, path[:-1]), path[-1]
    if kind == "drop_key" and isinstance(parent, dict):
        del parent[last]
    elif kind == "drop_key" and isinstance(parent, list):
        parent.pop(last)
    elif kind == "swap_type":
        old = parent[last]
        parent[last] = rng.choice([v for v in (None, 7, "text", [1], {"k": "v"}, True) if type(v) is not type(old)])
    elif kind == "nul":
        parent[last] = f"{parent[last]}\x00nul" if isinstance(parent[last], str) else "\x00"
    elif kind == "surrogate":
        parent[last] = "\ud800 lone \udfff" + (parent[last] if isinstance(parent[last], str) else "")
    elif kind == "surrogate_key" and isinstance(parent, dict):
        parent["key \udc80"] = parent.pop(last)
    elif kind == "deep":
        parent[last] = _DEEP  # spliced in as text by _dumps: too deep for json.dumps itself
    return value


_DEEP = "\x00deep\x00"
_DEEP_TEXT = b"[" * 5000 + b"1" + b"]" * 5000


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=True).encode().replace(json.dumps(_DEEP).encode(), _DEEP_TEXT)


def _mutate_line(raw: bytes, kind: str, rng: random.Random) -> bytes:
    body = raw.rstrip(b"\n")
    if kind == "insert_bytes":
        at = rng.randrange(len(body) + 1)
        return body[:at] + bytes(rng.choice((0x00, 0xFF, 0xC3, 0x80, 0x0B)) for _ in range(3)) + body[at:] + b"\n"
    if kind == "truncate_line":
        return body[: rng.randrange(len(body) + 1)] + b"\n"
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return body[::-1] + b"\n"
    return _dumps(_mutate_value(value, kind, rng)) + b"\n"


def _mutate_file(data: bytes, kind: str, rng: random.Random, jsonl: bool) -> tuple[bytes, int | None]:
    """The mutated bytes, and the (1-based) line mutated in place, if the mutation was one line of a JSONL file."""
    lines = data.splitlines(keepends=True)
    filled = [i for i, line in enumerate(lines) if line.strip()]
    if kind in LINE_MUTATIONS and jsonl and filled:
        i = rng.choice(filled)
        lines[i] = _mutate_line(lines[i], kind, rng)
        return b"".join(lines), i + 1
    if kind in LINE_MUTATIONS:  # one document: mutate its structure (or its bytes where it is not JSON)
        try:
            return _dumps(_mutate_value(json.loads(data), kind, rng)), None
        except (ValueError, RecursionError):
            kind = "insert_bytes_anywhere"
    if kind == "duplicate_line" and filled:
        i = rng.choice(filled)
        lines.insert(i, lines[i] if lines[i].endswith(b"\n") else lines[i] + b"\n")
    elif kind == "reorder_lines" and len(lines) > 1:
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "truncate_file":
        return data[: rng.randrange(len(data) + 1)], None
    else:
        at = rng.randrange(len(data) + 1)
        return data[:at] + b"\x00\xff\xfe\xed" + data[at:], None
    return b"".join(lines), None


def _check_books(stats: PartStats) -> None:
    rejected, skipped = sum(stats.records_rejected.values()), sum(stats.records_skipped.values())
    assert stats.records_read == stats.records_converted + rejected + skipped, stats.to_json()


def _samples_by_line(samples: list[Any]) -> dict[int, Counter[tuple[bytes, bytes]]]:
    out: dict[int, Counter[tuple[bytes, bytes]]] = {}
    for s in samples:
        out.setdefault(source_line(s.source), Counter())[(s.input_ids.tobytes(), s.loss_mask.tobytes())] += 1
    return out


def _touched_lines(path: Path, mutated_line: int) -> set[int] | None:
    """Lines in the same conversation group as ``mutated_line`` (None: the reader cannot say, compare nothing)."""
    try:
        reader = detect_format(path)
    except MsgtrainError:
        return None
    keys = key_function(reader, path) if is_jsonl(path) else None
    if keys is None:
        return None
    _, root, _ = line_groups(path, keys)
    group = root[mutated_line - 1]
    return {i + 1 for i, g in enumerate(root.tolist()) if g == group}


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, tuple[str, Any]]:
    out = {}
    for path in INPUTS:
        samples, stats, _ = convert_file(path, SETTINGS)
        _check_books(stats)
        out[path] = (str(_reader_name(path)), samples)
    return out


@settings(
    max_examples=120,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    which=st.integers(min_value=0, max_value=len(INPUTS) - 1),
    kind=st.sampled_from(LINE_MUTATIONS + FILE_MUTATIONS),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_a_mutated_log_never_crashes_balances_its_books_and_keeps_untouched_samples(
    originals: dict[Path, tuple[str, Any]], tmp_path_factory: pytest.TempPathFactory, which: int, kind: str, seed: int
) -> None:
    original = INPUTS[which]
    rng = random.Random(seed)
    data = original.read_bytes()
    mutated, line = _mutate_file(data, kind, rng, is_jsonl(original))
    path = tmp_path_factory.mktemp("fuzz") / original.name
    path.write_bytes(mutated)

    samples, stats, rejects = convert_file(path, SETTINGS)
    _check_books(stats)
    for reject in rejects:
        json.loads(reject)
        reject.encode("utf-8")  # writable as UTF-8, whatever the record quoted
    # Bad text (lone surrogates among it) is a specific reject, never a fault of linearization or export.
    assert "internal_error" not in stats.records_rejected, rejects
    report = validate_inputs([path])
    if str(path) in report.ignored:
        # a file without a log suffix that no reader recognises once mutated (a damaged logs.db): input discovery
        # passes it over (`convert` and `validate` alike list it as ignored), so it holds nothing either could train
        assert stats.records_converted == 0
    else:
        assert report.records == stats.records_read

    reader_name, before = originals[original]
    if line is None or _reader_name(path) != reader_name:
        return
    _costs_at_most_an_unreadable_record(path, line, stats, tmp_path_factory.mktemp("reference"))
    touched_before, touched_after = _touched_lines(original, line), _touched_lines(path, line)
    if touched_before is None or touched_after is None:
        return
    touched = touched_before | touched_after
    old, new = _samples_by_line(before), _samples_by_line(samples)
    for first_line, expected in old.items():
        if first_line not in touched:
            assert new.get(first_line) == expected, (kind, line, first_line)


def _costs_at_most_an_unreadable_record(path: Path, line: int, stats: PartStats, folder: Path) -> None:
    """One bad field costs at most the record it is in and the turns whose context held that record: exactly what
    the same file with that record unreadable (a line that is not JSON) costs. So the mutant trains at least the
    turns the reference trains, and rejects at most as many records as the reference, plus the records that only
    made sense with it (a tool result answering a call in the rejected record: at most one per rejected record)."""
    lines = path.read_bytes().splitlines(keepends=True)
    lines[line - 1] = b'{"not json\n'
    reference = folder / path.name
    reference.write_bytes(b"".join(lines))
    if _reader_name(reference) != _reader_name(path):
        return  # the unreadable line was what made the file this format (a native graph's header): no reference
    _, expected, _ = convert_file(reference, SETTINGS)
    assert stats.turns_trained >= expected.turns_trained, (path.name, line, stats.to_json(), expected.to_json())
    assert stats.records_read == expected.records_read


def test_a_ten_megabyte_string_in_a_record_is_read_like_any_other(tmp_path: Path) -> None:
    record = {"messages": [{"role": "user", "content": "x" * (10 << 20)}, {"role": "assistant"}]}
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n" + json.dumps(good) + "\n", encoding="utf-8")
    samples, stats, rejects = convert_file(path, SETTINGS)
    _check_books(stats)
    assert stats.records_converted == 2 and len(samples) == 2
    (reject,) = [json.loads(r) for r in rejects]
    assert reject["record"] == "line 2" and len(reject["excerpt"]) < 4096
