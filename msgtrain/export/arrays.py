"""Vectorised helpers between Arrow list columns and flat numpy arrays.

Every export view (targets, length policy, packing) works the same way: take a list column apart into
``offsets`` (int64, starting at 0, one more than the number of rows) and a flat numpy array of values, compute
on the flat array, and rebuild a list column from new offsets and values. No Python loop ever runs over tokens.

Invariants:
- :func:`offsets_of` always starts at 0, even for sliced arrays (Arrow keeps the parent's offsets on a slice).
- :func:`build_list` refuses offsets that do not fit Arrow's 32-bit list offsets instead of wrapping.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from msgtrain.errors import OutputError

_INT32_MAX = np.iinfo(np.int32).max


def as_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array for a table column (tables built from several batches are chunked)."""
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def offsets_of(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Row offsets into the flat values of a list column, as int64 starting at 0 (length ``rows + 1``). A column of
    several chunks is read a chunk at a time (combining them would copy its values)."""
    if isinstance(column, pa.ChunkedArray) and column.num_chunks > 1:
        lengths = np.concatenate([np.diff(offsets_of(chunk)) for chunk in column.chunks])
        offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return offsets
    array = as_array(column)
    offsets = np.asarray(array.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    return offsets - offsets[0]


def lengths_of(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per-row list lengths as int64."""
    return np.diff(offsets_of(column))


def flat_values(column: pa.Array | pa.ChunkedArray, dtype: Any) -> np.ndarray:
    """The flat values of a list column as numpy ``dtype``; nulls become NaN for float dtypes."""
    flat = pc.list_flatten(as_array(column))
    return np.asarray(flat.to_numpy(zero_copy_only=False), dtype=dtype)


def row_index(offsets: np.ndarray) -> np.ndarray:
    """For every flat position, the row it belongs to (int64)."""
    return np.repeat(np.arange(offsets.shape[0] - 1, dtype=np.int64), np.diff(offsets))


# Values summed at a time by per_row_sum: its temporaries (the block cast to int64, its running sum) stay ~1 MiB.
SUM_BLOCK = 1 << 16


def per_row_sum(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sum of ``values`` inside each row (empty rows give 0), as int64. The running sum is taken a block of
    :data:`SUM_BLOCK` values at a time and kept only at the rows' offsets: no int64 array as long as the values."""
    at = np.zeros(offsets.shape[0], dtype=np.int64)  # the sum of the values before each offset
    done = 0
    for start in range(0, values.shape[0], SUM_BLOCK):
        stop = min(start + SUM_BLOCK, values.shape[0])
        running = np.cumsum(values[start:stop], dtype=np.int64)
        lo, hi = np.searchsorted(offsets, [start, stop], side="right")
        at[lo:hi] = done + running[offsets[lo:hi] - start - 1]
        done += int(running[-1])
    return at[1:] - at[:-1]


def build_list(offsets: np.ndarray, values: np.ndarray, value_type: pa.DataType, nan_to_null: bool = False) -> pa.Array:
    """Rebuild a list column from int64 offsets and flat values (NaN → null when ``nan_to_null``)."""
    if offsets.shape[0] and offsets[-1] > _INT32_MAX:
        raise OutputError(
            f"a batch holds {int(offsets[-1])} list values, more than Arrow's 32-bit list offsets allow",
            hint="write smaller batches (the pipeline's batch size) or fewer tokens per row group",
            code="batch_too_large",
        )
    mask = np.isnan(values) if nan_to_null else None
    flat = pa.array(values, type=value_type, mask=mask, from_pandas=False)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32), type=pa.int32()), flat)


def strings_list(offsets: np.ndarray, values: pa.Array) -> pa.Array:
    """A list<string> column from offsets and a flat string array."""
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32), type=pa.int32()), values)
