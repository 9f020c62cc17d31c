"""The list columns of numbers of a Parquet shard (token ids, masks, logprobs), written as Parquet pages by msgtrain.

pyarrow's writer spends about 9 ns per value of a list column on its levels and encoding whatever the options
(docs/performance.md, Writing the dataset), and writes a row of a list column as one batch and one data page however
long, holding 15-24 bytes per value of it at once (docs/performance.md, Memory). These columns' levels are runs (a
row's repetition levels are a 0 and then 1s; its definition levels one value unless it holds nulls), so msgtrain
encodes them as runs, a row group's column at a time, in pages of at most :data:`PAGE_LEVELS` levels:

1. pyarrow writes the row group with those columns' rows made empty lists (every other column as usual);
2. :class:`PageWriter` encodes each such column of the row group (its levels as RLE runs; int8 values, the masks,
   as a dictionary and runs of its indices; other values PLAIN; the file's compression and level) into a side file,
   holding one page at a time; when the shard is closed, :func:`splice` puts those column chunks after pyarrow's and
   rewrites the footer so the row group's column points at them (pyarrow's empty-list chunk stays in the file,
   unreferenced and a few bytes long).

Which columns (:func:`own_columns`): the int8 and floating-point ones, the integer ones the caller writes PLAIN (its
token-id columns), and any other whose longest row passes :data:`LONG_ROW_VALUES`. A page ends at a row's end; a
row longer than :data:`LONG_ROW_VALUES` is cut into pages of its own of :data:`LONG_ROW_PAGE_LEVELS` levels (Parquet
allows a record to span data pages of version 1 when no page index is written, which is how the export writes).

Invariants:
- Values read back are the row group's values: the same lists, nulls and types, and the same statistics
  (tests/test_export_long_rows.py against pyarrow's own writing of the same table).
- Deterministic, whatever the chunks a column arrives in: the same rows give the same bytes.
- The footer is read and written as Thrift's compact protocol field by field (:func:`_read_struct`,
  :func:`_write_struct`): fields of it that are not changed are written back as they were read.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

LONG_ROW_VALUES = 1 << 18  # values in one row past which a list column of numbers is msgtrain's whatever its type
PAGE_LEVELS = 1 << 20  # levels per data page at most (4 MiB of int32 values, the export's data page size)
LONG_ROW_PAGE_LEVELS = 1 << 18  # levels per data page of a long row (~1 MiB of int32 values)
_BLOCK = 1 << 16  # levels or values whose runs are found at once (temporary arrays of ~40 bytes each)

# Parquet's enums (parquet.thrift).
_PHYSICAL = {"int8": 1, "int16": 1, "int32": 1, "int64": 2, "float": 4, "double": 5}  # INT32, INT64, FLOAT, DOUBLE
_PLAIN_DTYPE = {"int8": "<i4", "int16": "<i4", "int32": "<i4", "int64": "<i8", "float": "<f4", "double": "<f8"}
# The codecs whose Arrow compression (pyarrow.Codec) is the Parquet codec's bytes (Arrow's "lz4" is the frame
# format, Parquet's LZ4_RAW is not: a file in it is left to pyarrow).
_CODECS = {"none": 0, "uncompressed": 0, "snappy": 1, "gzip": 2, "brotli": 4, "zstd": 6}
_PLAIN, _RLE, _RLE_DICTIONARY = 0, 3, 8
_DATA_PAGE, _DICTIONARY_PAGE = 0, 2

# Thrift compact protocol types.
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)

Fields = list[list[Any]]  # a struct: [field id, compact type, value] in the order read


def own_columns(table: pa.Table, compression: str, plain: Iterable[str] = ()) -> list[str]:
    """The list columns of numbers of ``table`` (one row group) msgtrain writes: int8 and floating-point ones, the
    integer ones named in ``plain``, and any whose longest row passes :data:`LONG_ROW_VALUES` (none when the file's
    ``compression`` is not one msgtrain writes pages in). Others (labels, turn numbers: few distinct values in short
    rows) are pyarrow's, dictionary-encoded."""
    names: list[str] = []
    if compression.lower() not in _CODECS:
        return names
    plain = set(plain)
    for name, column in zip(table.column_names, table.columns, strict=True):
        t = column.type
        if not (pa.types.is_list(t) and str(t.value_type) in _PHYSICAL):
            continue
        if str(t.value_type) in ("int8", "float", "double") or name in plain or _longest(column) > LONG_ROW_VALUES:
            names.append(name)
    return names


def _longest(column: pa.ChunkedArray) -> int:
    longest = 0
    for chunk in column.chunks:
        offsets = chunk.offsets.to_numpy()
        if offsets.shape[0] > 1:
            longest = max(longest, int(np.diff(offsets).max()))
    return longest


def emptied(table: pa.Table, names: list[str]) -> pa.Table:
    """``table`` with the rows of the columns ``names`` made empty lists (what pyarrow writes in their place)."""
    for name in names:
        i = table.schema.get_field_index(name)
        typ = table.schema.field(i).type
        offsets = pa.array(np.zeros(table.num_rows + 1, dtype=np.int32), type=pa.int32())
        empty = pa.ListArray.from_arrays(offsets, pa.array([], typ.value_type), type=typ)
        table = table.set_column(i, table.schema.field(i), empty)
    return table


@dataclass
class _Chunk:
    """One column chunk msgtrain wrote into the side file."""

    group: int  # row group index in the shard
    name: str
    start: int  # offset in the side file: its dictionary page, else its first data page
    data_start: int  # its first data page
    compressed: int
    uncompressed: int
    levels: int
    nulls: int
    pages: int  # data pages
    dictionary: bool  # a dictionary page, data pages of RLE_DICTIONARY indices; else PLAIN values
    low: bytes | None
    high: bytes | None


@dataclass(frozen=True)
class _Levels:
    """The definition levels of a list column's cases: an optional list and an optional element (Arrow's
    default) give a null row 0, an empty row 1, a null element 2 and a value 3; each non-null part counts one less."""

    null_row: int
    empty: int
    null_value: int
    value: int

    @staticmethod
    def of(f: pa.Field) -> _Levels:
        empty = 1 if f.nullable else 0
        null_value = empty + 1
        return _Levels(0, empty, null_value, null_value + (1 if f.type.value_field.nullable else 0))


@dataclass
class _Rows:
    """A column's rows over all its chunks, by row: its levels' start in the column (``starts``, one entry more: the
    end), its value count (0 for an empty or a null row), whether it is null, its chunk and its first value there."""

    starts: np.ndarray
    lengths: np.ndarray
    null: np.ndarray
    chunk: np.ndarray
    first: np.ndarray
    values: list[pa.Array]  # each chunk's values, a null row spanning none of them
    spans: list[tuple[int, int]]  # [start, end) of each chunk's values its rows hold

    @staticmethod
    def of(chunks: list[pa.ListArray]) -> _Rows:
        lengths, null, chunk, first, values, spans = [], [], [], [], [], []
        for i, array in enumerate(chunks):
            if array.null_count:  # a null row's offsets may span values that are not its own: left out
                valid = array.is_valid().to_numpy(zero_copy_only=False)
                n = np.where(valid, np.diff(array.offsets.to_numpy().astype(np.int64)), 0)
                at = np.zeros(len(array) + 1, dtype=np.int64)
                np.cumsum(n, out=at[1:])
                null.append(~valid)
                values.append(array.flatten())
            else:
                at = array.offsets.to_numpy().astype(np.int64)
                n = np.diff(at)
                null.append(np.zeros(len(array), dtype=bool))
                values.append(array.values)
            lengths.append(n)
            chunk.append(np.full(len(array), i, dtype=np.int64))
            first.append(at[:-1])
            spans.append((int(at[0]), int(at[-1])))
        n = np.concatenate(lengths)
        starts = np.zeros(n.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.maximum(n, 1), out=starts[1:])  # an empty or null row is one level
        return _Rows(starts, n, np.concatenate(null), np.concatenate(chunk), np.concatenate(first), values, spans)

    def pages(self) -> list[tuple[int, int]]:
        """[start, end) levels of each data page: as many whole rows as fit in :data:`PAGE_LEVELS` levels; a row
        longer than :data:`LONG_ROW_VALUES` in pages of its own of :data:`LONG_ROW_PAGE_LEVELS` levels (a page's
        buffers are then a few MiB however long the row), as is a row that alone passes :data:`PAGE_LEVELS`."""
        ends, total = self.starts[1:], int(self.starts[-1])
        long = np.flatnonzero(self.lengths > LONG_ROW_VALUES)
        out, at = [], 0
        while at < total:
            i = int(np.searchsorted(ends, at, side="right"))  # the row level ``at`` is in
            k = int(np.searchsorted(long, i))
            if k < long.shape[0] and long[k] == i:
                cut = min(at + LONG_ROW_PAGE_LEVELS, int(ends[i]))
            else:
                j = int(np.searchsorted(ends, at + PAGE_LEVELS, side="right")) - 1  # the last row that fits
                if k < long.shape[0]:
                    j = min(j, int(long[k]) - 1)  # a long row starts a page
                cut = int(ends[j]) if j >= i else min(at + PAGE_LEVELS, int(ends[i]))
            out.append((at, cut))
            at = cut
        return out

    def non_null(self) -> Iterable[np.ndarray]:
        """The column's non-null values, a chunk at a time."""
        for values, (lo, hi) in zip(self.values, self.spans, strict=True):
            part = values.slice(lo, hi - lo)
            if len(part):
                yield (part.drop_null() if part.null_count else part).to_numpy(zero_copy_only=False)


@dataclass
class _Page:
    """One data page: its levels, the runs of its repetition and definition levels (RLE-encoded after their 4-byte
    length), how many definition levels are under a value's (empty and null rows, null values) and its non-null
    values in pieces (views of the chunks' values)."""

    levels: int
    rep: bytes
    dfn: bytes
    below: int
    pieces: list[np.ndarray]


def _page(rows: _Rows, lv: _Levels, lo: int, hi: int) -> _Page:
    """The data page of levels [lo, hi) of ``rows``."""
    first = int(np.searchsorted(rows.starts[1:], lo, side="right"))
    last = int(np.searchsorted(rows.starts[1:], hi - 1, side="right")) + 1
    starts = rows.starts[first:last]
    a = np.maximum(starts, lo)  # each row's levels in the page: [a, b)
    b = np.minimum(rows.starts[first + 1 : last + 1], hi)
    # Repetition: 0 where a row starts, 1 after (a row begun on an earlier page goes on with 1s).
    rep_values = np.ones(2 * a.shape[0], dtype=np.uint8)
    rep_values[0::2] = starts < lo
    rep_counts = np.empty(2 * a.shape[0], dtype=np.int64)
    rep_counts[0::2] = 1
    rep_counts[1::2] = b - a - 1
    # Values: a chunk's rows hold contiguous values (a null row none), so the page's are a piece per chunk.
    lengths, chunk, first_value = rows.lengths[first:last], rows.chunk[first:last], rows.first[first:last]
    v_lo = first_value + np.minimum(a - starts, lengths)
    v_hi = first_value + np.minimum(b - starts, lengths)
    arrays: list[pa.Array] = []
    for c in np.unique(chunk).tolist():
        mine = np.flatnonzero(chunk == c)
        start, stop = int(v_lo[mine[0]]), int(v_hi[mine[-1]])
        if stop > start:
            arrays.append(rows.values[c].slice(start, stop - start))
    count = sum(len(x) for x in arrays)
    nulls = sum(x.null_count for x in arrays)
    empty = np.flatnonzero(lengths == 0)
    levels = hi - lo
    if not empty.shape[0] and nulls in (0, count):  # one run: every level a value, or every one a null value
        dfn = _rle(np.array([lv.null_value if nulls else lv.value], dtype=np.uint8), np.array([levels]))
    else:  # the levels made a block at a time: arrays of a few bytes per level, never of the whole page
        at = a[empty] - lo  # the empty and null rows' levels in the page
        kinds = np.where(rows.null[first:last][empty], lv.null_row, lv.empty).astype(np.uint8)
        values = pa.chunked_array(arrays, type=rows.values[0].type)
        out = []
        for x in range(0, levels, _BLOCK):
            y = min(x + _BLOCK, levels)
            per_level = np.full(y - x, lv.value, dtype=np.uint8)
            i, j = np.searchsorted(at, [x, y])
            per_level[at[i:j] - x] = kinds[i:j]
            if nulls:  # the block's values are those after the levels before it that are not empty rows'
                v = x - int(i)
                valid = values.slice(v, (y - x) - int(j - i)).is_valid().to_numpy(zero_copy_only=False)
                holds_value = np.ones(y - x, dtype=bool)
                holds_value[at[i:j] - x] = False
                per_level[np.flatnonzero(holds_value)[~valid]] = lv.null_value
            out.append(_rle(*_runs(per_level)))
        dfn = b"".join(out)
    pieces = [(x.drop_null() if x.null_count else x).to_numpy(zero_copy_only=False) for x in arrays]
    return _Page(
        levels,
        _with_length(_rle(rep_values, rep_counts)),
        _with_length(dfn),
        int(empty.shape[0]) + nulls,
        [p for p in pieces if p.shape[0]],
    )


def _blocks(pieces: list[np.ndarray], size: int) -> Iterator[np.ndarray]:
    """The values of ``pieces`` (in order) in blocks of ``size`` (the last shorter), whatever the pieces' lengths."""
    held: list[np.ndarray] = []
    count = 0
    for piece in pieces:
        at = 0
        while at < piece.shape[0]:
            part = piece[at : at + size - count]
            held.append(part)
            count += part.shape[0]
            at += part.shape[0]
            if count == size:
                yield held[0] if len(held) == 1 else np.concatenate(held)
                held, count = [], 0
    if held:
        yield held[0] if len(held) == 1 else np.concatenate(held)


def _runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs of equal values of ``values``: each run's value and length."""
    if not values.shape[0]:
        return values, np.zeros(0, dtype=np.int64)
    starts = np.concatenate(([0], np.flatnonzero(values[1:] != values[:-1]) + 1))
    return values[starts], np.diff(np.append(starts, values.shape[0]))


def _rle(values: np.ndarray, counts: np.ndarray) -> bytes:
    """Runs (``values``, one byte each: a bit width up to 8, repeated ``counts`` times; runs of none left out) in
    Parquet's RLE / bit-packing hybrid, as RLE runs only: each its ULEB128 header ``count << 1``, then its value."""
    if counts.shape[0] <= 16:  # a few runs (a page's definition levels, a mask's block): numpy costs more
        few = bytearray()
        for value, count in zip(values.tolist(), counts.tolist(), strict=True):
            if count > 0:
                few += _uvarint(count << 1)
                few.append(value)
        return bytes(few)
    keep = counts > 0
    values, header = values[keep], counts[keep].astype(np.int64) << 1
    width = np.searchsorted(_ULEB128_LIMITS, header, side="right") + 1  # the header's bytes
    at = np.zeros(header.shape[0], dtype=np.int64)
    np.cumsum(width[:-1] + 1, out=at[1:])
    out = np.empty(int(width.sum()) + header.shape[0], dtype=np.uint8)
    out[at] = (header & 0x7F) | np.where(width > 1, 0x80, 0)
    for k in range(1, int(width.max(initial=0))):
        sel = width > k
        out[at[sel] + k] = ((header[sel] >> (7 * k)) & 0x7F) | np.where(width[sel] > k + 1, 0x80, 0)
    out[at + width] = values
    return out.tobytes()


_ULEB128_LIMITS = np.array([(1 << (7 * k)) - 1 for k in range(1, 10)], dtype=np.uint64).astype(np.int64)


def _with_length(encoded: bytes) -> bytes:
    return struct.pack("<I", len(encoded)) + encoded


@dataclass
class PageWriter:
    """Column chunks of msgtrain's columns, written as they come into ``path``, spliced into the shard at its close
    (``level``: the codec's compression level, None for its default)."""

    path: Path
    compression: str
    level: int | None = None
    chunks: list[_Chunk] = field(default_factory=list)
    _file: BinaryIO | None = None
    _codec: pa.Codec | None = None

    def write(self, group: int, table: pa.Table, names: list[str]) -> None:
        """Encode the columns ``names`` of ``table``, the shard's row group ``group``."""
        if self._file is None:
            self._file = open(self.path, "w+b")  # noqa: SIM115 - held open across row groups, closed by splice
            if _CODECS[self.compression.lower()]:
                self._codec = pa.Codec(self.compression, compression_level=self.level)
        written: dict[tuple[Any, ...], _Chunk] = {}
        for name in names:
            column = table.column(name)  # read a chunk at a time, never combined (a copy of a long row)
            f = table.schema.field(name)
            # A column of the same arrays as one written before (the canonical target's assistant_masks is its
            # loss_mask) is the same pages: copied, not encoded again.
            same = (str(f.type), f.nullable, f.type.value_field.nullable, *map(_identity, column.chunks))
            if same in written:
                self.chunks.append(self._copy(written[same], name))
                continue
            written[same] = self._column(group, name, column.chunks, _Levels.of(f))
            self.chunks.append(written[same])

    def _copy(self, chunk: _Chunk, name: str) -> _Chunk:
        """``chunk``'s pages written again, as column ``name``'s."""
        assert self._file is not None
        end = self._file.tell()
        for at in range(chunk.start, chunk.start + chunk.compressed, 1 << 20):
            self._file.seek(at)
            block = self._file.read(min(1 << 20, chunk.start + chunk.compressed - at))
            self._file.seek(0, os.SEEK_END)
            self._file.write(block)
        return dataclasses.replace(chunk, name=name, start=end, data_start=end + chunk.data_start - chunk.start)

    def _put(self, kind: int, header: list[Any], body: np.ndarray) -> tuple[int, int]:
        """Write a page of type ``kind`` (its header's other fields ``header``, its body compressed); return its
        compressed and uncompressed sizes, headers included."""
        assert self._file is not None
        packed = body.data if self._codec is None else self._codec.compress(body, asbytes=True)
        head = _write_struct([[1, _I32, kind], [2, _I32, body.nbytes], [3, _I32, len(packed)], header])
        self._file.write(head)
        self._file.write(packed)
        return len(head) + len(packed), len(head) + body.nbytes

    def _column(self, group: int, name: str, chunks: list[pa.ListArray], lv: _Levels) -> _Chunk:
        assert self._file is not None
        kind = str(chunks[0].type.value_type)
        dtype = np.dtype(_PLAIN_DTYPE[kind])
        rows = _Rows.of(chunks)
        start = self._file.tell()
        compressed = uncompressed = levels = nulls = pages = 0
        low: Any = None
        high: Any = None
        if kind == "int8":  # a dictionary of the values' range (masks: 0 and 1), indices as runs
            for values in rows.non_null():
                low = values.min() if low is None else min(low, values.min())
                high = values.max() if high is None else max(high, values.max())
        if low is not None:
            width = max(1, int(high) - int(low)).bit_length()
            dictionary = np.arange(int(low), int(high) + 1, dtype=dtype)
            sizes = self._put(
                _DICTIONARY_PAGE,
                [7, _STRUCT, [[1, _I32, dictionary.shape[0]], [2, _I32, _PLAIN]]],
                dictionary.view(np.uint8),
            )
            compressed, uncompressed = compressed + sizes[0], uncompressed + sizes[1]
        indexed = low is not None
        data_start = self._file.tell()
        for lo, hi in rows.pages():
            page = _page(rows, lv, lo, hi)
            head = page.rep + page.dfn
            if indexed:
                runs = []
                for block in _blocks(page.pieces, _BLOCK):  # a block at a time: a run that crosses blocks is two
                    values, counts = _runs(block)
                    runs.append(_rle((values.astype(np.int16) - int(low)).astype(np.uint8), counts))
                body = np.frombuffer(b"".join([head, bytes([width]), *runs]), dtype=np.uint8)
                encoding = _RLE_DICTIONARY
            else:
                # The page's body (its levels, then its values PLAIN) made in one buffer, the values copied into it
                # once: a copy of the page's values, their bytes and the body besides were 3 MiB at a time.
                count = sum(piece.shape[0] for piece in page.pieces)
                body = np.empty(len(head) + count * dtype.itemsize, dtype=np.uint8)
                body[: len(head)] = np.frombuffer(head, dtype=np.uint8)
                plain = body[len(head) :].view(dtype)
                at = 0
                for piece in page.pieces:
                    plain[at : at + piece.shape[0]] = piece
                    at += piece.shape[0]
                low, high = _bounds(plain, low, high)
                del plain
                encoding = _PLAIN
            header = [5, _STRUCT, [[1, _I32, page.levels], [2, _I32, encoding], [3, _I32, _RLE], [4, _I32, _RLE]]]
            sizes = self._put(_DATA_PAGE, header, body)
            del body
            compressed, uncompressed = compressed + sizes[0], uncompressed + sizes[1]
            levels += page.levels
            nulls += page.below
            pages += 1
        if low is not None and kind in ("float", "double") and low == 0 and high == 0:
            low, high = -0.0, 0.0  # Parquet's rule for zeros of either sign
        return _Chunk(
            group,
            name,
            start,
            data_start,
            compressed,
            uncompressed,
            levels,
            nulls,
            pages,
            indexed,
            None if low is None else np.array(low, dtype=dtype).tobytes(),
            None if high is None else np.array(high, dtype=dtype).tobytes(),
        )

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self.path.unlink(missing_ok=True)


def _identity(array: pa.Array) -> tuple[Any, ...]:
    """What makes two list arrays the same values: the same buffers, at the same offsets and lengths."""
    buffers = tuple((b.address, b.size) if b is not None else None for b in array.buffers())
    return (array.offset, len(array), array.values.offset, len(array.values), buffers)


def _bounds(plain: np.ndarray, low: Any, high: Any) -> tuple[Any, Any]:
    """``low`` and ``high`` widened by ``plain``'s values (NaN left out, as Parquet's statistics leave it)."""
    if not plain.shape[0]:
        return low, high
    if plain.dtype.kind == "f":
        plain = plain[~np.isnan(plain)]
        if not plain.shape[0]:
            return low, high
    lo, hi = plain.min(), plain.max()
    return (lo if low is None else min(low, lo)), (hi if high is None else max(high, hi))


# ------------------------------------------------------------------------------------------------- the footer
def splice(shard: Path, pages: PageWriter) -> None:
    """Append ``pages``' column chunks to the closed Parquet file ``shard`` (in place of its footer) and write a
    footer whose row groups point at them; the side file is removed."""
    assert pages._file is not None
    pages._file.close()
    pages._file = None
    with open(shard, "r+b") as f:
        f.seek(-8, os.SEEK_END)
        length, magic = struct.unpack("<I4s", f.read(8))
        if magic != b"PAR1":
            raise ValueError(f"{shard} is not a Parquet file")
        end = f.seek(0, os.SEEK_END) - 8 - length
        f.seek(end)
        meta, _ = _read_struct(memoryview(f.read(length)), 0)
        f.seek(end)
        f.truncate()
        with open(pages.path, "rb") as side:
            while block := side.read(1 << 20):
                f.write(block)
        _point_at(meta, pages.chunks, end)
        footer = _write_struct(meta)
        f.write(footer)
        f.write(struct.pack("<I", len(footer)) + b"PAR1")
    pages.path.unlink()


def _get(fields: Fields, fid: int) -> list[Any] | None:
    return next((f for f in fields if f[0] == fid), None)


def _set(fields: Fields, fid: int, ctype: int, value: Any) -> None:
    """Set field ``fid`` (kept in field-id order, as Thrift writes a struct)."""
    hit = _get(fields, fid)
    if hit is not None:
        hit[1], hit[2] = ctype, value
        return
    fields.append([fid, ctype, value])
    fields.sort(key=lambda f: f[0])


def _point_at(meta: Fields, chunks: list[_Chunk], base: int) -> None:
    groups = _get(meta, 4)
    assert groups is not None
    for c in chunks:
        group = groups[2][1][c.group]
        columns = _get(group, 1)
        assert columns is not None
        for column in columns[2][1]:
            cmeta = _get(column, 3)
            assert cmeta is not None
            path = _get(cmeta[2], 3)
            assert path is not None
            if path[2][1][0] != c.name.encode():
                continue
            md: Fields = cmeta[2]
            old_compressed, old_uncompressed = _get(md, 7)[2], _get(md, 6)[2]  # type: ignore[index]
            md[:] = [f for f in md if f[0] not in (10, 11, 12, 13, 14, 15, 16)]  # pyarrow's pages, stats, indexes
            if c.dictionary:
                _set(md, 2, _LIST, [_I32, [_PLAIN, _RLE, _RLE_DICTIONARY]])
                _set(md, 11, _I64, base + c.start)
                page_stats = [[_DICTIONARY_PAGE, _PLAIN, 1], [_DATA_PAGE, _RLE_DICTIONARY, c.pages]]
            else:
                _set(md, 2, _LIST, [_I32, [_PLAIN, _RLE]])
                page_stats = [[_DATA_PAGE, _PLAIN, c.pages]]
            _set(md, 5, _I64, c.levels)
            _set(md, 6, _I64, c.uncompressed)
            _set(md, 7, _I64, c.compressed)
            _set(md, 9, _I64, base + c.data_start)
            stats: Fields = [[3, _I64, c.nulls]]
            if c.low is not None and c.high is not None:  # as pyarrow writes them: the deprecated fields too
                stats = [[1, _BINARY, c.high], [2, _BINARY, c.low], *stats]
                stats += [[5, _BINARY, c.high], [6, _BINARY, c.low], [7, _TRUE, True], [8, _TRUE, True]]
            _set(md, 12, _STRUCT, stats)
            encodings = [
                [[1, _I32, kind], [2, _I32, encoding], [3, _I32, count]] for kind, encoding, count in page_stats
            ]
            _set(md, 13, _LIST, [_STRUCT, encodings])
            _set(column, 2, _I64, base + c.start)
            for fid, old, new in ((2, old_uncompressed, c.uncompressed), (6, old_compressed, c.compressed)):
                total = _get(group, fid)
                if total is not None:
                    total[2] += new - old


# ------------------------------------------------------------------------------------------------- Thrift compact
def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, pos
        shift += 7


def _read_value(buf: memoryview, pos: int, ctype: int) -> tuple[Any, int]:
    if ctype in (_TRUE, _FALSE):  # an element of a list: one byte
        return buf[pos] == 1, pos + 1
    if ctype == _BYTE:
        return buf[pos], pos + 1
    if ctype in (_I16, _I32, _I64):
        n, pos = _read_uvarint(buf, pos)
        return (n >> 1) ^ -(n & 1), pos
    if ctype == _DOUBLE:
        return struct.unpack_from("<d", buf, pos)[0], pos + 8
    if ctype == _BINARY:
        n, pos = _read_uvarint(buf, pos)
        return bytes(buf[pos : pos + n]), pos + n
    if ctype in (_LIST, _SET):
        head = buf[pos]
        pos += 1
        size, elem = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _read_uvarint(buf, pos)
        items = []
        for _ in range(size):
            item, pos = _read_value(buf, pos, elem)
            items.append(item)
        return [elem, items], pos
    if ctype == _MAP:
        size, pos = _read_uvarint(buf, pos)
        if not size:
            return [0, 0, []], pos
        kinds = buf[pos]
        pos += 1
        pairs = []
        for _ in range(size):
            k, pos = _read_value(buf, pos, kinds >> 4)
            v, pos = _read_value(buf, pos, kinds & 0x0F)
            pairs.append((k, v))
        return [kinds >> 4, kinds & 0x0F, pairs], pos
    if ctype == _STRUCT:
        return _read_struct(buf, pos)
    raise ValueError(f"unknown Thrift compact type {ctype}")


def _read_struct(buf: memoryview, pos: int) -> tuple[Fields, int]:
    fields: Fields = []
    last = 0
    while True:
        head = buf[pos]
        pos += 1
        ctype = head & 0x0F
        if ctype == _STOP:
            return fields, pos
        delta = head >> 4
        if delta:
            fid = last + delta
        else:
            n, pos = _read_uvarint(buf, pos)
            fid = (n >> 1) ^ -(n & 1)
        if ctype in (_TRUE, _FALSE):
            value: Any = ctype == _TRUE
        else:
            value, pos = _read_value(buf, pos, ctype)
        fields.append([fid, ctype, value])
        last = fid


def _write_value(out: bytearray, ctype: int, value: Any) -> None:
    if ctype in (_TRUE, _FALSE):
        out.append(1 if value else 2)
    elif ctype == _BYTE:
        out.append(value & 0xFF)
    elif ctype in (_I16, _I32, _I64):
        out += _uvarint((value << 1) ^ (value >> 63))
    elif ctype == _DOUBLE:
        out += struct.pack("<d", value)
    elif ctype == _BINARY:
        out += _uvarint(len(value)) + value
    elif ctype in (_LIST, _SET):
        elem, items = value
        if len(items) < 15:
            out.append(len(items) << 4 | elem)
        else:
            out.append(0xF0 | elem)
            out += _uvarint(len(items))
        for item in items:
            _write_value(out, elem, item)
    elif ctype == _MAP:
        ktype, vtype, pairs = value
        out += _uvarint(len(pairs))
        if pairs:
            out.append(ktype << 4 | vtype)
            for k, v in pairs:
                _write_value(out, ktype, k)
                _write_value(out, vtype, v)
    elif ctype == _STRUCT:
        out += _write_struct(value)
    else:
        raise ValueError(f"unknown Thrift compact type {ctype}")


def _write_struct(fields: Fields) -> bytes:
    out = bytearray()
    last = 0
    for fid, ctype, value in fields:
        wire = (_TRUE if value else _FALSE) if ctype in (_TRUE, _FALSE) else ctype
        if 0 < fid - last <= 15:
            out.append((fid - last) << 4 | wire)
        else:
            out.append(wire)
            out += _uvarint((fid << 1) ^ (fid >> 15))
        if ctype not in (_TRUE, _FALSE):
            _write_value(out, ctype, value)
        last = fid
    out.append(_STOP)
    return bytes(out)
