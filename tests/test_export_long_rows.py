"""A row group with a very long list row: its list columns are written as msgtrain's own Parquet pages
(msgtrain/export/parquet_pages.py), read back as the same values, statistics and types as pyarrow writes them.

Oracle: pyarrow's own writing of the same rows (the path every other row group takes) and its reader.
"""

from __future__ import annotations

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
def test_long_rows_read_back_as_pyarrow_writes_them_and_other_row_groups_are_its_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    table = _table(seed)
    plain = _write(tmp_path / "pyarrow", table)
    monkeypatch.setattr(parquet_pages, "LONG_ROW_VALUES", 1000)
    monkeypatch.setattr(parquet_pages, "PAGE_LEVELS", 700)  # pages end inside rows and between them
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
            rows = pq.ParquetFile(ours).read_row_group(g, columns=["input_ids"])["input_ids"]
            ids = meta.row_group(g).column(1)
            if max(pc.list_value_length(rows).fill_null(0).to_pylist()) > 1000:
                long_groups += 1
                assert ids.encodings == ("PLAIN", "RLE") and ids.dictionary_page_offset is None
            else:  # a row group without a long row is pyarrow's own
                assert ids.encodings == ref.row_group(g).column(1).encodings
                assert ids.total_compressed_size == ref.row_group(g).column(1).total_compressed_size
    assert long_groups  # the case under test happened


def test_a_long_rows_pages_are_made_one_at_a_time_from_its_own_values(tmp_path: Path) -> None:
    """What encoding a long row's pages holds besides the row: one page's body, its values copied into it once, and
    its compressed bytes (allocated at zstd's bound, then shrunk). Measured with tracemalloc (numpy's and Python's
    allocations): 2.0 pages of values (1.04 uncompressed); 4.8 when a page's values were concatenated, turned into
    bytes and joined to its levels, each a copy, beside its levels as arrays of a byte per value."""
    import tracemalloc

    n = 6 * parquet_pages.PAGE_LEVELS
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
    assert peak < 2.5 * parquet_pages.PAGE_LEVELS * 4, peak


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
