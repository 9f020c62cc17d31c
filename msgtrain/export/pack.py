"""Packing canonical samples into rows of at most ``pack_length`` tokens (best-fit decreasing).

One packed row holds several whole samples back to back. Its columns serve two trainer families at once:

- NeMo / Megatron-Bridge packed Parquet (``GPTSFTPackedParquetDataset``): ``input_ids`` list<int32>,
  ``seq_start_id`` list<int32> (offset of each sample inside the row, first is 0) and ``loss_mask``
  list<int8>. NeMo's ``loss_mask`` is *label-aligned*: its collate function trains the prediction made at
  position ``j`` (label ``input_ids[j + 1]``) when ``loss_mask[j] == 1`` and drops the last position of every
  sequence, so here ``loss_mask[j] = canonical_loss_mask[j + 1]`` inside a sample and 0 on each sample's last
  token (the same roll NeMo's own ``fill_packing_strategy`` applies).
- TRL padding-free training: ``labels`` list<int64> (token-aligned, -100 where not trained) and
  ``seq_lengths`` list<int32>, from which TRL's collator rebuilds ``position_ids``; ``position_ids`` is also
  written for trainers that read it directly.

Invariants (tested):
- Samples are never split: every sample's tokens are one contiguous run inside one row, starting at its
  ``seq_start_id``, and ``position_ids`` restart at 0 at every ``seq_start_id``.
- ``sum(seq_lengths) == len(input_ids) <= pack_length``; rows are not padded (trainers pad at collate time).
- The assignment only depends on the sample lengths and their order, so identical input packs identically.
- Packing works on a bounded buffer of samples (rows and tokens), so memory stays bounded; the buffer is cut by
  row and token counts, never by how the caller happened to batch its writes.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from msgtrain.errors import OutputError
from msgtrain.export import arrays
from msgtrain.export.buffer import RowBuffer

IGNORE_INDEX = -100

PACKED_SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("seq_start_id", pa.list_(pa.int32())),
        ("labels", pa.list_(pa.int64())),
        ("seq_lengths", pa.list_(pa.int32())),
        ("position_ids", pa.list_(pa.int32())),
        ("sample_ids", pa.list_(pa.string())),
        ("num_samples", pa.int32()),
        ("num_tokens", pa.int32()),
        ("num_trained_tokens", pa.int32()),
    ]
)


def best_fit_decreasing(lengths: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """Assign items to bins of ``capacity`` by best-fit decreasing.

    Items are taken longest first (ties keep input order); each goes to the open bin with the least room that
    still fits it, else opens a new bin. Returns ``(bin_of_item, rank_of_item)``: bins are numbered in
    creation order and ``rank`` is the item's position in the decreasing order (items in a bin sort by rank).
    The loop is over items, not tokens; the sorted list of free space makes each choice a binary search.
    """
    if lengths.size and int(lengths.max()) > capacity:
        raise OutputError(
            f"a sample of {int(lengths.max())} tokens cannot fit a pack of {capacity}",
            hint="set --max-length to at most --pack-length so over-long samples are handled before packing",
            code="sample_longer_than_pack",
        )
    order = np.argsort(-lengths, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    bin_of = np.empty(lengths.size, dtype=np.int64)
    free: list[tuple[int, int]] = []  # (room left, bin id), sorted: the first entry >= need is the best fit
    bins = 0
    for item in order.tolist():
        need = int(lengths[item])
        at = bisect.bisect_left(free, (need, -1))
        if at < len(free):
            room, chosen = free.pop(at)
            bisect.insort(free, (room - need, chosen))
        else:
            chosen = bins
            bins += 1
            bisect.insort(free, (capacity - need, chosen))
        bin_of[item] = chosen
    return bin_of, rank


def pack_table(table: pa.Table, pack_length: int) -> tuple[pa.Table, dict[str, int]]:
    """Pack one buffer of canonical rows into :data:`PACKED_SCHEMA` rows. Returns the table and counts.

    Empty samples (no tokens) cannot be addressed by ``seq_start_id`` and carry no loss; they are skipped and
    counted as ``skipped_empty``.
    """
    lengths_all = arrays.lengths_of(table["input_ids"])
    nonempty = lengths_all > 0
    skipped = int((~nonempty).sum())
    if skipped:
        table = table.filter(pa.array(nonempty))
        lengths_all = lengths_all[nonempty]
    if table.num_rows == 0:
        return PACKED_SCHEMA.empty_table(), {"skipped_empty": skipped}

    bin_of, rank = best_fit_decreasing(lengths_all, pack_length)
    order = np.lexsort((rank, bin_of))
    ordered = table.select(["sample_id", "input_ids", "loss_mask"]).take(pa.array(order))
    sample_len = lengths_all[order]
    sample_bin = bin_of[order]
    n_bins = int(sample_bin.max()) + 1

    # Flattening the reordered list columns concatenates the samples of each bin back to back. The buffer is
    # token-bounded far below 2**31, so int32 positions are safe and halve the memory of the int64 ones.
    ids = arrays.flat_values(ordered["input_ids"], np.int32)
    mask = arrays.flat_values(ordered["loss_mask"], np.int8)

    samples_per_bin = np.bincount(sample_bin, minlength=n_bins).astype(np.int64)
    tokens_per_bin = np.bincount(sample_bin, weights=sample_len, minlength=n_bins).astype(np.int64)
    row_offsets = np.concatenate(([0], np.cumsum(tokens_per_bin)))
    seq_offsets = np.concatenate(([0], np.cumsum(samples_per_bin)))
    sample_start = np.concatenate(([0], np.cumsum(sample_len)))[:-1]
    sample_end = sample_start + sample_len
    start_in_row = sample_start - row_offsets[sample_bin]

    position_ids = np.arange(ids.shape[0], dtype=np.int32)
    position_ids -= np.repeat(sample_start.astype(np.int32), sample_len)
    labels = ids.astype(np.int64)
    labels[mask == 0] = IGNORE_INDEX
    # NeMo's label-aligned mask: roll left by one inside every sample; a sample's last token predicts nothing.
    nemo_mask = np.zeros_like(mask)
    nemo_mask[:-1] = mask[1:]
    nemo_mask[sample_end - 1] = 0
    trained_per_sample = np.add.reduceat(mask, sample_start, dtype=np.int64)  # every sample is non-empty here
    trained_per_bin = np.bincount(sample_bin, weights=trained_per_sample, minlength=n_bins).astype(np.int64)

    columns = {
        "input_ids": arrays.build_list(row_offsets, ids, pa.int32()),
        "loss_mask": arrays.build_list(row_offsets, nemo_mask, pa.int8()),
        "seq_start_id": arrays.build_list(seq_offsets, start_in_row, pa.int32()),
        "labels": arrays.build_list(row_offsets, labels, pa.int64()),
        "seq_lengths": arrays.build_list(seq_offsets, sample_len, pa.int32()),
        "position_ids": arrays.build_list(row_offsets, position_ids, pa.int32()),
        "sample_ids": arrays.strings_list(seq_offsets, arrays.as_array(ordered["sample_id"])),
        "num_samples": pa.array(samples_per_bin, type=pa.int32()),
        "num_tokens": pa.array(tokens_per_bin, type=pa.int32()),
        "num_trained_tokens": pa.array(trained_per_bin, type=pa.int32()),
    }
    packed = pa.Table.from_arrays([columns[f.name] for f in PACKED_SCHEMA], schema=PACKED_SCHEMA)
    return packed, {"skipped_empty": skipped}


class Packer:
    """Stateful packed-target converter: buffers canonical rows and packs them a bounded buffer at a time.

    A buffer closes at ``buffer_rows`` samples or ``buffer_tokens`` tokens, whichever comes first; only the
    three columns packing needs are kept while buffering. ``convert`` returns the packed rows completed so far
    (possibly none); ``flush`` packs the remainder. ``stats`` reports samples, rows, tokens and the packing
    efficiency (tokens / (rows × pack_length)).
    """

    def __init__(self, pack_length: int, buffer_rows: int = 16384, buffer_tokens: int = 32 * 1024 * 1024) -> None:
        if pack_length < 1 or buffer_rows < 1 or buffer_tokens < 1:
            raise OutputError(
                f"pack_length ({pack_length}), buffer_rows ({buffer_rows}) and buffer_tokens ({buffer_tokens}) "
                "must be positive"
            )
        self.pack_length = pack_length
        self._buffer = RowBuffer(buffer_rows, max(buffer_tokens, pack_length))
        self._samples = 0
        self._rows = 0
        self._tokens = 0
        self._skipped_empty = 0
        self._max_samples_per_row = 0
        self._max_sample_tokens = 0
        self._min_row_tokens: int | None = None
        self._min_row_tokens_nemo: int | None = None

    def convert(self, table: pa.Table) -> pa.Table:
        self._buffer.add(table.select(["sample_id", "input_ids", "loss_mask"]))
        return self._drain(final=False)

    def flush(self) -> pa.Table:
        return self._drain(final=True)

    def _drain(self, final: bool) -> pa.Table:
        done = []
        while (chunk := self._buffer.take(final)) is not None:
            done.append(self._pack(chunk))
        return pa.concat_tables(done) if done else PACKED_SCHEMA.empty_table()

    def _pack(self, table: pa.Table) -> pa.Table:
        packed, counts = pack_table(table, self.pack_length)
        self._skipped_empty += counts["skipped_empty"]
        self._samples += table.num_rows - counts["skipped_empty"]
        self._rows += packed.num_rows
        self._tokens += int(pc.sum(packed["num_tokens"]).as_py() or 0)
        if packed.num_rows:
            samples = packed["num_samples"].to_numpy().astype(np.int64)
            tokens = packed["num_tokens"].to_numpy().astype(np.int64)
            longest = int(pc.max(pc.list_flatten(packed["seq_lengths"])).as_py())
            self._max_samples_per_row = max(self._max_samples_per_row, int(samples.max()))
            self._max_sample_tokens = max(self._max_sample_tokens, longest)
            # NeMo measures a sequence after the next-token shift (one token shorter), see nemo_metadata().
            low, low_nemo = int(tokens.min()), int((tokens - samples).min())
            self._min_row_tokens = low if self._min_row_tokens is None else min(self._min_row_tokens, low)
            self._min_row_tokens_nemo = (
                low_nemo if self._min_row_tokens_nemo is None else min(self._min_row_tokens_nemo, low_nemo)
            )
        return packed

    def nemo_metadata(self) -> dict[str, Any]:
        """This split's entry of NeMo's ``packing_metadata`` list (what ``pad_cu_seqlens`` reads).

        Same keys and conventions as NeMo's ``create_packing_strategy``: lengths count a sequence after the
        next-token shift (one token less per sample) and the efficiency is a percentage.
        """
        stats = self.stats()
        return {
            "dataset_max_seqlen": max(self._max_sample_tokens - 1, 0),
            "max_samples_per_bin": self._max_samples_per_row,
            "packing_factor": round(stats["samples_per_row"], 2),
            "packing_efficiency": round(stats["efficiency"] * 100, 2),
            "pack_size": self.pack_length,
            "min_packed_seqlen": self._min_row_tokens_nemo or 0,
        }

    def stats(self) -> dict[str, Any]:
        capacity = self._rows * self.pack_length
        return {
            "pack_length": self.pack_length,
            "samples": self._samples,
            "rows": self._rows,
            "tokens": self._tokens,
            "efficiency": round(self._tokens / capacity, 6) if capacity else 0.0,
            "samples_per_row": round(self._samples / self._rows, 4) if self._rows else 0.0,
            "max_samples_per_row": self._max_samples_per_row,
            "max_sample_tokens": self._max_sample_tokens,
            "min_row_tokens": self._min_row_tokens or 0,
            "skipped_empty": self._skipped_empty,
        }
