"""The canonical sample: the one record every export target is a view of.

Invariants (checked by :func:`check_sample`):
- ``len(input_ids) == len(loss_mask) == len(logprobs) == num_tokens``.
- ``loss_mask[i] == 1`` exactly on completion tokens of the sample's trained turns, i.e. inside ``turn_spans``;
  spans are disjoint, sorted, and ``num_trained_tokens == sum(loss_mask)``.
- ``logprobs[i]`` is the engine logprob of token i when it is trained and the engine reported it, else null.
- ``sample_id`` is deterministic: a hash of graph id, trained turn ids and tokens, so reruns give equal ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

SPAN = pa.struct([("start", pa.int32()), ("end", pa.int32())])

CANONICAL_SCHEMA = pa.schema(
    [
        ("sample_id", pa.string()),
        ("graph_id", pa.string()),
        ("source", pa.string()),
        ("policy", pa.string()),
        ("input_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float32())),
        ("turn_ids", pa.list_(pa.string())),
        ("turn_spans", pa.list_(SPAN)),
        ("turn_group_ids", pa.list_(pa.string())),
        ("group_id", pa.string()),
        ("cut_reason", pa.string()),
        ("num_tokens", pa.int32()),
        ("num_trained_tokens", pa.int32()),
        ("num_turns", pa.int32()),
        ("engine_tokens", pa.int32()),
        ("token_source", pa.string()),
        ("reward", pa.float64()),
        ("flags", pa.list_(pa.string())),
        ("metadata", pa.string()),
    ]
)


@dataclass
class Sample:
    """One training row before it becomes Arrow. Arrays are numpy (int32 ids, int8 mask, float32 logprobs)."""

    sample_id: str
    graph_id: str
    source: str
    policy: str
    input_ids: np.ndarray
    loss_mask: np.ndarray
    logprobs: np.ndarray  # float32, NaN where unknown (becomes null in Arrow)
    turn_ids: list[str]
    turn_spans: list[tuple[int, int]]
    turn_group_ids: list[str]
    group_id: str
    cut_reason: str
    engine_tokens: int
    reward: float | None = None
    flags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_trained_tokens(self) -> int:
        return int(self.loss_mask.sum())

    @property
    def token_source(self) -> str:
        if self.engine_tokens == 0:
            return "rendered"
        return "engine" if self.engine_tokens == self.num_tokens else "mixed"


# One NaN seen as a read-only array of any length up to 2**60 (stride 0): a slice of it is a sample's unknown logprobs.
_UNKNOWN = np.broadcast_to(np.float32(np.nan), (1 << 60,))


def unknown_logprobs(n: int) -> np.ndarray:
    """``n`` unknown logprobs (NaN) that hold no memory: a read-only view of one value (a sample's logprobs are
    unknown on every token but those of engine-logged replies, so most samples hold nothing else). A slice of one
    shared view: ``np.broadcast_to`` per sample cost more than the rest of the sample's assembly."""
    return _UNKNOWN[:n]


def _all_unknown(values: np.ndarray) -> bool:
    return values.ndim == 1 and values.shape[0] > 0 and values.strides == (0,) and bool(np.isnan(values[0]))


# A sample of this many tokens or more is a chunk of its own in :func:`samples_to_table`: its columns are its arrays.
LONG_ROW_TOKENS = 1 << 18


def samples_to_table(samples: list[Sample]) -> pa.Table:
    """Build the canonical Arrow table without Python loops over tokens (per-row values are gathered once).

    Memory: a column of one sample is its array itself (no copy), and logprobs unknown everywhere
    (:func:`unknown_logprobs`) become nulls over zeroed memory the table never writes to, so a sample's tokens are
    held once while its table is built and written. A sample of :data:`LONG_ROW_TOKENS` or more is a chunk of the
    table alone (its arrays, not a copy of them), the runs of shorter samples between are chunks of their
    concatenated values: a long row among others was copied whole while the sample still held it (5 bytes per
    token more at the peak of writing a part). A part written from the table holds a record batch per chunk."""
    runs: list[list[Sample]] = []
    for s in samples:
        if s.num_tokens >= LONG_ROW_TOKENS or not runs or runs[-1][-1].num_tokens >= LONG_ROW_TOKENS:
            runs.append([s])
        else:
            runs[-1].append(s)
    if len(runs) <= 1:
        return _table(samples)
    return pa.concat_tables([_table(run) for run in runs])


def _table(samples: list[Sample]) -> pa.Table:
    """One chunk of :func:`samples_to_table`: the samples' values concatenated (a lone sample's are its arrays)."""

    def offsets_of(lengths: np.ndarray) -> np.ndarray:
        offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        return offsets

    def flat_of(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
        if len(arrays) == 1 and arrays[0].flags.c_contiguous:
            return arrays[0]
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)

    def list_col(arrays: list[np.ndarray], typ: pa.DataType) -> pa.Array:
        offsets = offsets_of(np.fromiter((a.shape[0] for a in arrays), dtype=np.int64, count=len(arrays)))
        values = pa.array(flat_of(arrays, typ.to_pandas_dtype()), type=typ, from_pandas=False)
        return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), values)

    def logprobs_col(arrays: list[np.ndarray]) -> pa.Array:
        offsets = offsets_of(np.fromiter((a.shape[0] for a in arrays), dtype=np.int64, count=len(arrays)))
        total = int(offsets[-1])
        if all(a.shape[0] == 0 or _all_unknown(a) for a in arrays):
            # Every value null: zeroed buffers (calloc'd pages, never touched) in place of NaNs and a mask.
            validity = pa.py_buffer(np.zeros((total + 7) // 8, dtype=np.uint8))
            data = pa.py_buffer(np.zeros(total, dtype=np.float32))
            values = pa.Array.from_buffers(pa.float32(), total, [validity, data], null_count=total)
        else:
            flat = flat_of(arrays, np.float32)
            values = pa.array(flat, type=pa.float32(), mask=np.isnan(flat), from_pandas=False)
        return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), values)

    input_ids = list_col([s.input_ids.astype(np.int32, copy=False) for s in samples], pa.int32())
    loss_mask = list_col([s.loss_mask.astype(np.int8, copy=False) for s in samples], pa.int8())
    # num_trained_tokens: the mask's count per row (a loop over rows, not tokens; no running sum over every token).
    trained = np.fromiter((np.count_nonzero(s.loss_mask) for s in samples), dtype=np.int64, count=len(samples))
    # turn_spans from flat (start, end) columns: a list of dicts per row costs a Python object per span.
    span_counts = np.fromiter((len(s.turn_spans) for s in samples), dtype=np.int64, count=len(samples))
    bounds = np.array([ab for s in samples for ab in s.turn_spans], dtype=np.int32).reshape(-1, 2)
    spans = pa.ListArray.from_arrays(
        pa.array(offsets_of(span_counts), type=pa.int32()),
        pa.StructArray.from_arrays([pa.array(bounds[:, 0]), pa.array(bounds[:, 1])], fields=list(SPAN)),
    )
    # A conversation's samples share one metadata dict: serialized once per dict.
    dumped: dict[int, str] = {}
    metadata = []
    for s in samples:
        text = dumped.get(id(s.metadata))
        if text is None:
            text = dumped[id(s.metadata)] = json.dumps(s.metadata, sort_keys=True, ensure_ascii=False)
        metadata.append(text)
    cols: dict[str, Any] = {
        "sample_id": [s.sample_id for s in samples],
        "graph_id": [s.graph_id for s in samples],
        "source": [s.source for s in samples],
        "policy": [s.policy for s in samples],
        "input_ids": input_ids,
        "loss_mask": loss_mask,
        "logprobs": logprobs_col([s.logprobs.astype(np.float32, copy=False) for s in samples]),
        "turn_ids": [s.turn_ids for s in samples],
        "turn_spans": spans,
        "turn_group_ids": [s.turn_group_ids for s in samples],
        "group_id": [s.group_id for s in samples],
        "cut_reason": [s.cut_reason for s in samples],
        "num_tokens": pa.array(np.diff(input_ids.offsets.to_numpy()), type=pa.int32()),
        "num_trained_tokens": pa.array(trained, type=pa.int32()),
        "num_turns": [len(s.turn_ids) for s in samples],
        "engine_tokens": [s.engine_tokens for s in samples],
        "token_source": [s.token_source for s in samples],
        "reward": [s.reward for s in samples],
        "flags": [s.flags for s in samples],
        "metadata": metadata,
    }
    arrays = [
        cols[f.name] if isinstance(cols[f.name], pa.Array) else pa.array(cols[f.name], type=f.type)
        for f in CANONICAL_SCHEMA
    ]
    return pa.Table.from_arrays(arrays, schema=CANONICAL_SCHEMA)


def check_sample(row: dict[str, Any]) -> None:
    """Assert the canonical invariants on one row (as ``to_pylist`` gives it). Raises AssertionError."""
    n = len(row["input_ids"])
    assert len(row["loss_mask"]) == n == len(row["logprobs"]) == row["num_tokens"]
    mask = np.zeros(n, dtype=np.int8)
    prev_end = 0
    for span in row["turn_spans"]:
        assert prev_end <= span["start"] < span["end"] <= n, f"bad span {span}"
        mask[span["start"] : span["end"]] = 1
        prev_end = span["end"]
    assert mask.tolist() == list(row["loss_mask"]), "loss_mask must be 1 exactly inside turn_spans"
    assert int(mask.sum()) == row["num_trained_tokens"]
    assert len(row["turn_ids"]) == len(row["turn_spans"]) == row["num_turns"]
    for i, lp in enumerate(row["logprobs"]):
        assert lp is None or mask[i] == 1, "logprobs only on trained tokens"
