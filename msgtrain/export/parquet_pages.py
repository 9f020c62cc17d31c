"""The list columns of a row group that holds a very long row, written as Parquet pages by msgtrain itself.

pyarrow writes a row of a list column as one batch and one data page, however long: for a row of n values its
writer holds the row's definition and repetition levels, their page copies, the encoded values and (int8) the
values widened to int32 at once, 15-24 bytes per value (docs/performance.md, Memory). Parquet allows a record to
span data pages of version 1 when no page index is written, which is how the export writes, so a row group whose
longest list row passes :data:`LONG_ROW_VALUES` is written in two steps:

1. pyarrow writes the row group with those columns' rows made empty lists (every other column as usual);
2. :class:`PageWriter` encodes each such column of the row group in pages of :data:`PAGE_LEVELS` levels (PLAIN
   values, RLE levels, the file's compression) into a side file, holding one page at a time; when the shard is
   closed, :func:`splice` puts those column chunks after pyarrow's and rewrites the footer so the row group's
   column points at them (pyarrow's empty-list chunk stays in the file, unreferenced and a few bytes long).

Invariants:
- Values read back are the row group's values: the same lists, nulls and types (tests/test_export_long_rows.py
  against pyarrow's own writing of the same table).
- Deterministic: the same rows give the same bytes.
- A shard without a long row is pyarrow's bytes, untouched (nothing here runs).
- The footer is read and written as Thrift's compact protocol field by field (:func:`_read_struct`,
  :func:`_write_struct`): fields of it that are not changed are written back as they were read.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

LONG_ROW_VALUES = 1 << 18  # values in one row of a list column past which its row group's pages are msgtrain's
PAGE_LEVELS = 1 << 18  # levels per data page msgtrain writes (~1 MiB of int32 values)

# Parquet's enums (parquet.thrift).
_PHYSICAL = {"int8": 1, "int16": 1, "int32": 1, "int64": 2, "float": 4, "double": 5}  # INT32, INT64, FLOAT, DOUBLE
_PLAIN_DTYPE = {"int8": "<i4", "int16": "<i4", "int32": "<i4", "int64": "<i8", "float": "<f4", "double": "<f8"}
# The codecs whose Arrow compression (pyarrow.compress) is the Parquet codec's bytes (Arrow's "lz4" is the frame
# format, Parquet's LZ4_RAW is not: a file in it is left to pyarrow).
_CODECS = {"none": 0, "snappy": 1, "gzip": 2, "brotli": 4, "zstd": 6}
_PLAIN, _RLE, _DATA_PAGE = 0, 3, 0

# Thrift compact protocol types.
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)

Fields = list[list[Any]]  # a struct: [field id, compact type, value] in the order read


def long_list_columns(table: pa.Table, compression: str) -> list[str]:
    """The list columns of numbers of ``table`` (one row group) whose longest row passes :data:`LONG_ROW_VALUES`
    (none when the file's ``compression`` is not one msgtrain writes pages in)."""
    names: list[str] = []
    if compression.lower() not in _CODECS:
        return names
    for name, column in zip(table.column_names, table.columns, strict=True):
        t = column.type
        if not (pa.types.is_list(t) and str(t.value_type) in _PHYSICAL):
            continue
        for chunk in column.chunks:
            offsets = chunk.offsets.to_numpy()
            if offsets.shape[0] > 1 and int(np.diff(offsets).max()) > LONG_ROW_VALUES:
                names.append(name)
                break
    return names


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
    start: int  # offset in the side file
    compressed: int
    uncompressed: int
    levels: int
    nulls: int
    low: bytes | None
    high: bytes | None


@dataclass
class PageWriter:
    """Column chunks of long rows, written as they come into ``path``, spliced into the shard at its close."""

    path: Path
    compression: str
    chunks: list[_Chunk] = field(default_factory=list)
    _file: BinaryIO | None = None

    def write(self, group: int, table: pa.Table, names: list[str]) -> None:
        """Encode the columns ``names`` of ``table``, the shard's row group ``group``."""
        if self._file is None:
            self._file = open(self.path, "wb")  # noqa: SIM115 - held open across row groups, closed by splice
        for name in names:
            column = table.column(name)  # read a chunk at a time, never combined (a copy of a long row)
            self.chunks.append(self._column(group, name, column.chunks, _Levels.of(table.schema.field(name))))

    def _column(self, group: int, name: str, chunks: list[pa.ListArray], levels_of: _Levels) -> _Chunk:
        assert self._file is not None
        kind = str(chunks[0].type.value_type)
        start = self._file.tell()
        compressed = uncompressed = levels = nulls = 0
        low: Any = None
        high: Any = None
        codec = _CODECS[self.compression.lower()]
        itemsize = np.dtype(_PLAIN_DTYPE[kind]).itemsize
        for rep, dfn, pieces in _pages(chunks, levels_of):
            # The page's body (its levels, then its values as PLAIN) made in one buffer, the values copied into it
            # once: a copy of the page's values, their bytes and the body besides were 3 MiB at a time.
            head = rep.encoded() + dfn.encoded()
            count = sum(piece.shape[0] for piece in pieces)
            body = np.empty(len(head) + count * itemsize, dtype=np.uint8)
            body[: len(head)] = np.frombuffer(head, dtype=np.uint8)
            plain = body[len(head) :].view(_PLAIN_DTYPE[kind])
            at = 0
            for piece in pieces:
                plain[at : at + piece.shape[0]] = piece
                at += piece.shape[0]
            if plain.shape[0]:
                lo, hi = plain.min(), plain.max()
                if kind in ("float", "double"):
                    finite = plain[~np.isnan(plain)]
                    lo, hi = (finite.min(), finite.max()) if finite.shape[0] else (None, None)
                if lo is not None:
                    low = lo if low is None else min(low, lo)
                    high = hi if high is None else max(high, hi)
            del plain
            packed = body.data if codec == 0 else pa.compress(body, codec=self.compression, asbytes=True)
            header = _write_struct(
                [
                    [1, _I32, _DATA_PAGE],
                    [2, _I32, len(body)],
                    [3, _I32, len(packed)],
                    [5, _STRUCT, [[1, _I32, rep.total], [2, _I32, _PLAIN], [3, _I32, _RLE], [4, _I32, _RLE]]],
                ]
            )
            self._file.write(header)
            self._file.write(packed)
            compressed += len(header) + len(packed)
            uncompressed += len(header) + len(body)
            del body, packed
            levels += rep.total
            nulls += dfn.below(levels_of.value)
        dtype = np.dtype(_PLAIN_DTYPE[kind])
        if low is not None and kind in ("float", "double") and low == 0 and high == 0:
            low, high = -0.0, 0.0  # Parquet's rule for zeros of either sign
        return _Chunk(
            group,
            name,
            start,
            compressed,
            uncompressed,
            levels,
            nulls,
            None if low is None else np.array(low, dtype=dtype).tobytes(),
            None if high is None else np.array(high, dtype=dtype).tobytes(),
        )

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self.path.unlink(missing_ok=True)


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


def _pages(chunks: list[pa.ListArray], lv: _Levels) -> Iterator[tuple[_Runs, _Runs, list[np.ndarray]]]:
    """(repetition levels, definition levels, non-null values in pieces) of each data page of a list column given
    as its chunks, in order: the same pages however its rows are chunked. Levels are kept as runs, never as an
    array of one byte per level.

    Repetition is 0 at a row's first level and 1 after; definition levels as :class:`_Levels` says. A page ends
    after :data:`PAGE_LEVELS` levels, inside a row if need be."""
    reps, dfns = _Runs(), _Runs()
    vals: list[np.ndarray] = []

    def page() -> tuple[_Runs, _Runs, list[np.ndarray]]:
        nonlocal reps, dfns, vals
        out = (reps, dfns, vals)
        reps, dfns, vals = _Runs(), _Runs(), []
        return out

    for array in chunks:
        offsets = array.offsets.to_numpy()
        values = array.values
        valid_rows = np.ones(len(array), dtype=bool) if array.null_count == 0 else array.is_valid().to_numpy(False)
        for row in range(len(array)):
            lo, hi = int(offsets[row]), int(offsets[row + 1])
            if not valid_rows[row] or lo == hi:  # a null row's offsets may span values that are not its own
                reps.add(0, 1)
                dfns.add(lv.empty if valid_rows[row] else lv.null_row, 1)
                hi = lo
            a = lo
            while a < hi:
                b = min(hi, a + PAGE_LEVELS - reps.total)
                part = values.slice(a, b - a)
                reps.add(0 if a == lo else 1, 1)
                reps.add(1, b - a - 1)
                if part.null_count == 0:
                    dfns.add(lv.value, b - a)
                    vals.append(part.to_numpy(zero_copy_only=False))
                elif part.null_count == b - a:
                    dfns.add(lv.null_value, b - a)
                else:
                    valid = part.is_valid().to_numpy(False)
                    dfns.add_levels(np.where(valid, np.int8(lv.value), np.int8(lv.null_value)))
                    vals.append(part.drop_null().to_numpy(zero_copy_only=False))
                a = b
                if reps.total >= PAGE_LEVELS:
                    yield page()
            if reps.total >= PAGE_LEVELS:
                yield page()
    if reps.total:
        yield page()


class _Runs:
    """A page's repetition or definition levels as runs of one value: what Parquet's RLE / bit-packing hybrid
    writes of them, here as RLE runs only (levels up to 3 take one byte per run value whatever their bit width)."""

    def __init__(self) -> None:
        self.values: list[int] = []
        self.counts: list[int] = []
        self.total = 0

    def add(self, value: int, count: int) -> None:
        if count <= 0:
            return
        if self.values and self.values[-1] == value:
            self.counts[-1] += count
        else:
            self.values.append(value)
            self.counts.append(count)
        self.total += count

    def add_levels(self, levels: np.ndarray) -> None:
        starts = np.concatenate(([0], np.flatnonzero(np.diff(levels)) + 1))
        lengths = np.diff(np.concatenate((starts, [levels.shape[0]])))
        for start, count in zip(starts.tolist(), lengths.tolist(), strict=True):
            self.add(int(levels[start]), count)

    def below(self, level: int) -> int:
        """How many levels are under ``level``."""
        return sum(n for v, n in zip(self.values, self.counts, strict=True) if v < level)

    def encoded(self) -> bytes:
        """The runs in Parquet's RLE encoding, after their 4-byte length."""
        out = bytearray()
        for value, count in zip(self.values, self.counts, strict=True):
            out += _uvarint(count << 1)
            out.append(value)
        return struct.pack("<I", len(out)) + bytes(out)


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
            _set(md, 2, _LIST, [_I32, [_PLAIN, _RLE]])
            _set(md, 5, _I64, c.levels)
            _set(md, 6, _I64, c.uncompressed)
            _set(md, 7, _I64, c.compressed)
            _set(md, 9, _I64, base + c.start)
            stats: Fields = [[3, _I64, c.nulls]]
            if c.low is not None and c.high is not None:
                stats += [[5, _BINARY, c.high], [6, _BINARY, c.low], [7, _TRUE, True], [8, _TRUE, True]]
            _set(md, 12, _STRUCT, stats)
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
