"""A row group with a very long list row: its list columns are written as msgtrain's own Parquet pages
(msgtrain/export/parquet_pages.py), read back as the same values, statistics and types as pyarrow writes them.

Oracle: pyarrow's own writing of the same rows (the path every other row group takes) and its reader.
"""

from __future__ import annotations

import itertools
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from msgtrain.export import parquet_pages
from msgtrain.export.buffer import RowBuffer
from msgtrain.export.writer import _ParquetSink


def _list(rows: list[np.ndarray | None], typ: pa.DataType, nan_is_null: bool = False) -> pa.Array:
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum([0 if r is None else r.shape[0] for r in rows], out=offsets[1:])
    flat = np.concatenate([r for r in rows if r is not None] or [np.zeros(0)]).astype(typ.to_pandas_dtype())
    mask = np.isnan(flat) if nan_is_null else None
    values = pa.array(flat, type=typ, mask=mask, from_pandas=False)
    valid = pa.array([r is not None for r in rows])
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pc.invert(valid))


def _table(seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    lengths = [int(n) for n in rng.choice([0, 3, 40, 900, 2600], size=14)]
    ids = [rng.integers(0, 150_000, n) for n in lengths]
    ids[5] = None  # a null row among them
    logprobs = []
    for n in lengths:
        lp = -rng.exponential(size=n).astype(np.float32)
        lp[rng.random(n) < 0.5] = np.nan  # unknown: null
        logprobs.append(lp)
    table = pa.table(
        {
            "sample_id": [f"s{i}" for i in range(len(lengths))],
            "input_ids": _list(ids, pa.int32()),
            "loss_mask": _list([rng.integers(0, 2, n) for n in lengths], pa.int8()),
            "logprobs": _list(logprobs, pa.float32(), nan_is_null=True),
            "num_tokens": pa.array(lengths, type=pa.int32()),
        }
    )
    # A required list of required values: definition levels of another depth.
    required = pa.list_(pa.field("element", pa.int64(), nullable=False))
    mask = _list([rng.integers(-5, 5, n) for n in lengths], pa.int64()).cast(required)
    return table.append_column(pa.field("positions", required, nullable=False), mask)


def _write(out: Path, table: pa.Table) -> list[Path]:
    """``table`` through the export's Parquet sink: shards of 8 rows, row groups of 3."""
    sink = _ParquetSink(out, "train", table.schema, 8, RowBuffer(3, 1 << 30), "zstd")
    sink.append(table)
    return [path for path, _ in sink.close()]


def _statistics(path: Path) -> list[tuple[object, ...]]:
    meta = pq.ParquetFile(path).metadata
    out = []
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            s = meta.row_group(g).column(c).statistics
            out.append((g, c, s.null_count, s.min if s.has_min_max else None, s.max if s.has_min_max else None))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_list_columns_of_numbers_read_back_as_pyarrow_writes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    table = _table(seed)
    monkeypatch.setattr(parquet_pages, "own_columns", lambda *_: [])  # the oracle: pyarrow writes every column
    plain = _write(tmp_path / "pyarrow", table)
    monkeypatch.undo()
    monkeypatch.setattr(parquet_pages, "LONG_ROW_VALUES", 1000)
    monkeypatch.setattr(parquet_pages, "PAGE_LEVELS", 700)  # pages end inside rows and between them
    monkeypatch.setattr(parquet_pages, "LONG_ROW_PAGE_LEVELS", 500)
    spliced = _write(tmp_path / "spliced", table)
    again = _write(tmp_path / "again", table)
    # Rows that arrive as chunks (a long row is one of its own in a part, samples_to_table) give the same bytes.
    chunked = _write(tmp_path / "chunked", pa.concat_tables([table.slice(0, 4), table.slice(4, 1), table.slice(5)]))
    assert [p.read_bytes() for p in chunked] == [p.read_bytes() for p in spliced]
    assert [p.name for p in spliced] == [p.name for p in plain]
    long_groups = 0
    for ours, theirs, rerun in zip(spliced, plain, again, strict=True):
        assert ours.read_bytes() == rerun.read_bytes()  # deterministic
        back, expected = pq.read_table(ours), pq.read_table(theirs)
        assert back.schema == expected.schema and back.equals(expected)
        assert back.to_pylist() == expected.to_pylist()
        assert _statistics(ours) == _statistics(theirs)
        meta, ref = pq.ParquetFile(ours).metadata, pq.ParquetFile(theirs).metadata
        for g in range(meta.num_row_groups):
            columns = {meta.row_group(g).column(c).path_in_schema.split(".")[0]: c for c in range(meta.num_columns)}
            ids, mask = meta.row_group(g).column(columns["input_ids"]), meta.row_group(g).column(columns["loss_mask"])
            assert ids.encodings == ("PLAIN", "RLE") and ids.dictionary_page_offset is None
            if mask.statistics.has_min_max:  # int8 values: a dictionary of their range, indices as runs
                assert mask.encodings == ("PLAIN", "RLE", "RLE_DICTIONARY") and mask.dictionary_page_offset
            else:  # no value at all: nothing to index
                assert mask.encodings == ("PLAIN", "RLE") and mask.dictionary_page_offset is None
            rows = pq.ParquetFile(ours).read_row_group(g, columns=["positions"])["positions"]
            positions = meta.row_group(g).column(columns["positions"])
            if max(pc.list_value_length(rows).to_pylist()) > 1000:  # other integers are msgtrain's in a long row
                long_groups += 1
                assert positions.encodings == ("PLAIN", "RLE") and positions.dictionary_page_offset is None
            else:  # and pyarrow's otherwise
                reference = ref.row_group(g).column(columns["positions"])
                assert positions.encodings == reference.encodings
                assert positions.total_compressed_size == reference.total_compressed_size
    assert long_groups  # the case under test happened


def _random_table(rng: np.random.Generator) -> pa.Table:
    """Rows of the shapes the export meets and some it does not: empty and null rows, null values, runs of one
    mask value and masks of any int8, all-null and partly null logprobs, lengths around the page size."""
    n = int(rng.integers(1, 40))
    lengths = [int(rng.choice([0, 1, 2, 7, 99, 100, 101, 250])) for _ in range(n)]
    null_rows = rng.random(n) < 0.1
    ids = [None if null_rows[i] else rng.integers(0, 150_000, k) for i, k in enumerate(lengths)]
    runs = [np.repeat(rng.integers(-3, 2, 4), k // 4 + 1)[:k] for k in lengths]
    masks = [r if rng.random() < 0.5 else rng.integers(-128, 128, r.shape[0]) for r in runs]
    logprobs = []
    for k in lengths:
        lp = -rng.exponential(size=k).astype(np.float32)
        lp[rng.random(k) < rng.choice([0.0, 0.3, 1.0])] = np.nan
        logprobs.append(lp)
    mask = _list(masks, pa.int8())
    return pa.table(
        {
            "sample_id": [f"s{i}" for i in range(n)],
            "input_ids": _list(ids, pa.int32()),
            "loss_mask": mask,
            "assistant_masks": mask,  # the same arrays (the canonical target's copy): its pages are copied
            "logprobs": _list(logprobs, pa.float32(), nan_is_null=True),
            "reward": _list([rng.random(k % 3) for k in lengths], pa.float64()),
        }
    )


def test_msgtrains_pages_of_random_rows_in_random_chunks_read_back_as_pyarrow_writes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Property over seeded random tables cut into random chunks, with pages of 100 levels (pages that end inside
    rows, after empty and null rows, on a null value) and runs found 7 levels at a time: the values, nulls, types
    and statistics pyarrow reads back are those of pyarrow's own file of the rows, and the bytes do not depend on
    the chunks."""
    for seed in range(12):
        rng = np.random.default_rng(seed)
        table = _random_table(rng)
        with monkeypatch.context() as m:
            m.setattr(parquet_pages, "own_columns", lambda *_: [])
            theirs = _write(tmp_path / f"pyarrow-{seed}", table)
        monkeypatch.setattr(parquet_pages, "PAGE_LEVELS", 100)
        monkeypatch.setattr(parquet_pages, "LONG_ROW_VALUES", 200)  # rows of 250: pages of their own, of 60
        monkeypatch.setattr(parquet_pages, "LONG_ROW_PAGE_LEVELS", 60)
        monkeypatch.setattr(parquet_pages, "_BLOCK", 7)  # runs found a few levels at a time, across pieces
        ours = _write(tmp_path / f"ours-{seed}", table)
        cuts = sorted({int(c) for c in rng.integers(0, table.num_rows + 1, 4)} | {0, table.num_rows})
        pieces = [table.slice(a, b - a) for a, b in itertools.pairwise(cuts)]
        chunked = _write(tmp_path / f"chunked-{seed}", pa.concat_tables(pieces))
        monkeypatch.undo()
        assert [p.read_bytes() for p in chunked] == [p.read_bytes() for p in ours], seed
        for mine, reference in zip(ours, theirs, strict=True):
            back, expected = pq.read_table(mine), pq.read_table(reference)
            assert back.schema == expected.schema and back.equals(expected), seed
            assert _statistics(mine) == _statistics(reference), seed
            meta = pq.ParquetFile(mine).metadata
            assert all(meta.row_group(g).column(1).encodings == ("PLAIN", "RLE") for g in range(meta.num_row_groups))


def test_a_long_rows_pages_are_made_one_at_a_time_from_its_own_values(tmp_path: Path) -> None:
    """What encoding a long row's pages holds besides the row: one page's body, its values copied into it once, and
    its compressed bytes (allocated at zstd's bound, then shrunk). Measured with tracemalloc (numpy's and Python's
    allocations): 2.0 pages of values (1.04 uncompressed); 4.8 when a page's values were concatenated, turned into
    bytes and joined to its levels, each a copy, beside its levels as arrays of a byte per value."""
    import tracemalloc

    n = 6 * parquet_pages.LONG_ROW_PAGE_LEVELS
    short = pa.array([[1, 2, 3]] * 5, type=pa.list_(pa.int32()))
    row = pa.ListArray.from_arrays(pa.array([0, n], type=pa.int32()), pa.array(np.arange(n, dtype=np.int32) % 97))
    table = pa.table({"input_ids": pa.chunked_array([short, row])})
    writer = parquet_pages.PageWriter(tmp_path / "pages", "zstd")
    tracemalloc.start()
    try:
        writer.write(0, table, ["input_ids"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        writer.discard()
    (chunk,) = writer.chunks
    assert chunk.levels == 5 * 3 + n and chunk.nulls == 0
    assert peak < 2.5 * parquet_pages.LONG_ROW_PAGE_LEVELS * 4, peak


def test_runs_are_written_as_parquets_rle_runs_whatever_their_length() -> None:
    """Oracle: the RLE run of Parquet's encodings spec, a ULEB128 header ``count << 1`` then the value's byte, written
    one run at a time (counts to 2**31 - 1, a page's longest; runs of none left out; few runs and many)."""

    def uleb128(n: int) -> bytes:
        out = bytearray()
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        return bytes([*out, n])

    rng = np.random.default_rng(7)
    for n in [0, 1, 3, 16, 17, 200]:
        counts = rng.choice([0, 1, 63, 64, 8191, 8192, 1 << 20, (1 << 31) - 1], size=n).astype(np.int64)
        values = rng.integers(0, 4, n).astype(np.uint8)
        runs = zip(values.tolist(), counts.tolist(), strict=True)
        expected = b"".join(uleb128(c << 1) + bytes([v]) for v, c in runs if c)
        assert parquet_pages._rle(values, counts) == expected, n


def test_a_footer_read_and_written_back_is_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    pq.write_table(_table(3), path, compression="zstd", row_group_size=4)
    raw = path.read_bytes()
    (length,) = struct.unpack("<I", raw[-8:-4])
    footer = raw[-8 - length : -8]
    fields, end = parquet_pages._read_struct(memoryview(footer), 0)
    assert end == length and parquet_pages._write_struct(fields) == footer


_LONG_ROW_PEAK = """
import sys
import numpy as np
from pathlib import Path
from msgtrain.export.schema import Sample, samples_to_table, unknown_logprobs
from msgtrain.export.writer import DatasetWriter
n = int(sys.argv[2])
ids = (np.arange(n) % 97).astype(np.int32)
mask = np.zeros(n, dtype=np.int8)
mask[n // 2 :] = 1
sample = Sample("s", "g", "log.jsonl", "", ids, mask, unknown_logprobs(n), ["t"], [(n // 2, n)], ["t"], "", "end", 0)
table = samples_to_table([sample])
del sample, ids, mask
def rss(field):  # this process's own: ru_maxrss would also count the forking parent's RSS (kept across exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak so far (building the row) is not the export's
before = rss("VmRSS:")
writer = DatasetWriter(Path(sys.argv[1]), "parquet", "canonical")
writer.write("train", table)
writer.close()
print((rss("VmHWM:") - before) / n)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status")
def test_writing_a_long_row_holds_pages_not_the_row_times_twenty(tmp_path: Path) -> None:
    """One canonical row of 3 M tokens written by a fresh process, tuned as the command line is: what the export
    adds to the peak per token. Measured 3.4 (4.8 at 6 M); 19.3 when pyarrow writes the row's pages, whose mask
    columns alone cost ~19 bytes per token (docs/performance.md)."""
    env_script = "from msgtrain.run.allocators import tune_allocators; tune_allocators()\n" + _LONG_ROW_PEAK
    out = subprocess.run(
        [sys.executable, "-c", env_script, str(tmp_path / "out"), str(3_000_000)],
        capture_output=True,
        text=True,
        check=True,
    )
    per_token = float(out.stdout)
    assert per_token < 8, per_token
    back = pq.read_table(next((tmp_path / "out" / "data").glob("*.parquet")))
    assert back["input_ids"][0].values.to_numpy().tolist()[:200] == (np.arange(200) % 97).tolist()


def test_a_long_prefix_of_a_longer_sequence_is_its_prefix() -> None:
    # compared block by block: the sequence's last block is cut where the prefix ends (a Claude Code session's
    # 70 k-id prefix was refused as the next turn's, every turn became its own sample and the graph passed the cap)
    from msgtrain.linearize.plan import _PREFIX_BLOCK, _is_prefix

    seq = np.arange(_PREFIX_BLOCK + 10, dtype=np.int32)
    assert _is_prefix(seq[: _PREFIX_BLOCK + 5].copy(), seq)
    assert _is_prefix(seq[: _PREFIX_BLOCK + 5][::1].astype(np.int64), seq)
    changed = seq[: _PREFIX_BLOCK + 5].copy()
    changed[-1] += 1
    assert not _is_prefix(changed, seq)
