"""An exported dataset read back, whatever ``--target`` and ``--format`` wrote it: its files, and its samples.

``inspect``, ``stats`` and ``validate`` look at an OUT through this module only.

Invariants:
- The layout decides the format: ``data/*.parquet`` (parquet), ``dataset_dict.json`` with ``{split}/*.arrow``
  (hf, ``save_to_disk``), ``data/*.jsonl`` (jsonl). The split of a file is in its name or folder.
- The columns decide the target (:func:`target_of`), so a dataset without its ``report.json`` is still read.
- :func:`sample_table` turns rows of any target but ``tree`` into one row per *sample* with the columns of
  :data:`SAMPLE_SCHEMA`, null where the target does not carry them: ``packed`` rows are cut back into their
  samples (at ``seq_start_id``, ``seq_lengths`` long), the token-aligned trained mask is ``loss_mask``,
  ``completion_mask`` or ``labels != -100``, and targets without turn spans get the runs of trained tokens as
  their turns (a sampled turn always ends with its end-of-turn token and the next one starts after a header, so
  two turns never touch). ``tree`` rows hold tries, not samples: the tools read them by their own columns.
- Everything runs on flat numpy arrays (:mod:`msgtrain.export.arrays`); no Python loop per token.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from msgtrain.errors import ConfigError, DatasetError
from msgtrain.export import arrays
from msgtrain.export.schema import CANONICAL_SCHEMA, SPAN

# data/{split}-{i:05d}-of-{n:05d}.parquet|jsonl, the layout the writer uses and the Hub recognises.
SHARD_NAME = re.compile(r"^(?P<split>.+?)-\d{5}-of-\d{5}\.(parquet|jsonl)$")
IGNORE_INDEX = -100

# The canonical columns the tools read, with the canonical types.
SAMPLE_SCHEMA = pa.schema(
    [
        CANONICAL_SCHEMA.field(name)
        for name in (
            *("sample_id", "graph_id", "source", "policy", "input_ids", "loss_mask", "logprobs", "turn_ids"),
            *("turn_spans", "cut_reason", "num_tokens", "num_trained_tokens", "num_turns", "engine_tokens"),
            *("token_source", "flags"),
        )
    ]
)


@dataclass
class DataFile:
    """One data file of a dataset: its split, its format, its columns and rows (read on demand)."""

    path: Path
    split: str
    format: str  # parquet | hf | jsonl
    _table: pa.Table | None = field(default=None, repr=False)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Turn what a damaged file raises (pyarrow, the OS, json) into one :class:`DatasetError` naming it."""
        try:
            yield
        except (pa.ArrowException, OSError, ValueError) as e:  # json's and UnicodeDecodeError are ValueErrors
            if isinstance(e, DatasetError):
                raise
            raise DatasetError(
                f"cannot read this {self.format} file: {type(e).__name__}: {e}",
                where=str(self.path),
                hint="it is truncated, damaged or not written by msgtrain: convert again into this OUT "
                "(`msgtrain convert ... -o OUT`) or restore the file",
            ) from e

    @cached_property
    def names(self) -> list[str]:
        with self._reading():
            return self._names()

    def _names(self) -> list[str]:
        if self.format == "parquet":
            import pyarrow.parquet as pq

            return list(pq.read_schema(self.path).names)
        if self.format == "jsonl":
            with self.path.open(encoding="utf-8") as f:
                first = f.readline()
            return list(json.loads(first)) if first.strip() else []
        return list(self._read(None).column_names)

    @cached_property
    def num_rows(self) -> int:
        with self._reading():
            return self._num_rows()

    def _num_rows(self) -> int:
        if self.format == "parquet":
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(self.path).metadata.num_rows)
        return int(self._read(None).num_rows)

    def read(self, columns: list[str] | None = None) -> pa.Table:
        """The file's rows (only ``columns`` when given; parquet reads only those from disk).

        Raises :class:`DatasetError` (never a pyarrow or OS error) when the file cannot be read."""
        with self._reading():
            return self._read(columns)

    def _read(self, columns: list[str] | None) -> pa.Table:
        if self.format == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(self.path, columns=columns)
        if self._table is None:
            if self.format == "hf":
                with pa.memory_map(str(self.path)) as source:
                    try:  # save_to_disk writes the Arrow stream format; the file format is read as well
                        self._table = pa.ipc.open_stream(source).read_all()
                    except pa.ArrowInvalid:
                        self._table = pa.ipc.open_file(source).read_all()
            else:
                # Python's json, not pyarrow.json: pyarrow 26 builds invalid list arrays from lists of nulls (as
                # logprobs without engine values are). The jsonl format is a preview: small.
                with self.path.open(encoding="utf-8") as f:
                    self._table = pa.Table.from_pylist([json.loads(line) for line in f if line.strip()])
        return self._table if columns is None else self._table.select(columns)


@contextlib.contextmanager
def readable_dataset(location: str | Path) -> Iterator[Path]:
    """A local path to read the dataset at ``location`` from: the path itself, or, for an object-store OUT
    (``s3://``, ``gs://``...), a temporary copy of the version its ``_latest`` pointer names (the whole dataset is
    downloaded: a store has no random access the readers here could use)."""
    import tempfile

    from msgtrain.run.storage import Store, current_version, is_remote, version_url

    text = str(location)
    if not is_remote(text):
        yield Path(location)
        return
    version = current_version(text)
    if version is None:
        raise ConfigError(
            f"{text} holds no published msgtrain dataset (no _latest pointer)",
            hint="pass the -o of a finished `msgtrain convert` run (the prefix, not a version inside it)",
        )
    with tempfile.TemporaryDirectory(prefix="msgtrain-dataset-") as tmp:
        local = Path(tmp) / "out"
        Store.of(text).download_tree(version_url(text, version), local)
        yield local


def data_files(out: str | Path) -> list[DataFile]:
    """The data files of the dataset at ``out``, split by split, in the order the writer numbered them."""
    out = Path(out)
    parquet = sorted((out / "data").glob("*.parquet"))
    if parquet:
        return [DataFile(f, _split_of(f), "parquet") for f in parquet]
    if (out / "dataset_dict.json").is_file():
        splits = json.loads((out / "dataset_dict.json").read_text(encoding="utf-8")).get("splits") or []
        files = [DataFile(f, str(s), "hf") for s in splits for f in sorted((out / str(s)).glob("*.arrow"))]
        if files:
            return files
    jsonl = sorted((out / "data").glob("*.jsonl"))
    if jsonl:
        return [DataFile(f, _split_of(f), "jsonl") for f in jsonl]
    hint = (
        "this looks like a log file: run `msgtrain convert` first, or `msgtrain inspect` it"
        if out.is_file()
        else "pass the output directory of `msgtrain convert -o OUT` (data/*.parquet, data/*.jsonl, or "
        "dataset_dict.json with {split}/*.arrow for --format hf)"
    )
    raise ConfigError("no dataset files (data/*.parquet, data/*.jsonl or dataset_dict.json)", where=str(out), hint=hint)


def is_dataset(path: Path) -> bool:
    """Whether ``path`` is an exported dataset (any format) rather than logs."""
    if not path.is_dir():
        return False
    return (path / "dataset_dict.json").is_file() or any(
        f.suffix in (".parquet", ".jsonl") and SHARD_NAME.match(f.name) for f in (path / "data").glob("*")
    )


def _split_of(path: Path) -> str:
    m = SHARD_NAME.match(path.name)
    return m.group("split") if m else path.stem


def target_of(names: list[str]) -> str:
    """The ``--target`` whose rows have these columns."""
    columns = set(names)
    if "num_flat_tokens" in columns:
        return "tree"
    if "seq_start_id" in columns:
        return "packed"
    if "completion_mask" in columns:
        return "trl"
    if "prompt_length" in columns:
        return "rl"
    if "turn_spans" in columns and "loss_mask" in columns:
        return "canonical"
    if {"input_ids", "labels"} <= columns:
        return "labels"
    if {"prompt_ids", "chosen_ids"} <= columns or {"prompt_ids", "completion_ids", "label"} <= columns:
        raise ConfigError(
            "preference rows (--target dpo / kto) pair or label samples: this command reads samples",
            hint="convert the same logs with --target canonical --train-negative to read their samples here "
            "(report.json's outputs.preference counts the pairs)",
            code="preference_dataset",
        )
    raise ConfigError(
        f"not a msgtrain dataset: columns {', '.join(sorted(columns)) or '(none)'}",
        hint="pass an OUT written by `msgtrain convert` (any --target and --format)",
        code="not_a_dataset",
    )


def report_of(out: str | Path) -> dict[str, Any] | None:
    path = Path(out) / "report.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


# ---------------------------------------------------------------------- rows -> samples
def _trained_mask(table: pa.Table, target: str) -> tuple[np.ndarray, np.ndarray]:
    """(row offsets, flat token-aligned 0/1 mask of trained tokens) of a table of ``target`` rows."""
    if target in ("canonical", "rl"):
        column = "loss_mask"
    elif target == "trl":
        column = "completion_mask"
    else:  # labels, packed: token-aligned labels (packed's loss_mask is NeMo's label-aligned one)
        labels = table["labels"]
        return arrays.offsets_of(labels), (arrays.flat_values(labels, np.int64) != IGNORE_INDEX).astype(np.int8)
    return arrays.offsets_of(table[column]), arrays.flat_values(table[column], np.int8)


def mask_runs(offsets: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, pa.Array]:
    """Per row, the runs of 1s of a flat 0/1 mask: (runs per row, list<struct<start, end>> relative to the row)."""
    rows = arrays.row_index(offsets)
    if mask.size == 0:
        empty = pa.array([], type=SPAN)
        zeros = pa.array(np.zeros(offsets.shape[0], dtype=np.int32))
        return np.zeros(offsets.shape[0] - 1, dtype=np.int64), pa.ListArray.from_arrays(zeros, empty)
    on = mask.astype(bool)
    row_start = np.zeros(mask.shape[0], dtype=bool)
    row_start[offsets[:-1][np.diff(offsets) > 0]] = True
    row_end = np.zeros(mask.shape[0], dtype=bool)
    row_end[offsets[1:][np.diff(offsets) > 0] - 1] = True
    prev_off = np.concatenate(([True], ~on[:-1])) | row_start
    next_off = np.concatenate((~on[1:], [True])) | row_end
    starts = np.flatnonzero(on & prev_off)
    ends = np.flatnonzero(on & next_off) + 1
    per_row = np.bincount(rows[starts], minlength=offsets.shape[0] - 1).astype(np.int64)
    base = offsets[rows[starts]]
    spans = pa.StructArray.from_arrays(
        [pa.array((starts - base).astype(np.int32)), pa.array((ends - base).astype(np.int32))], fields=list(SPAN)
    )
    list_offsets = np.concatenate(([0], np.cumsum(per_row)))
    return per_row, pa.ListArray.from_arrays(pa.array(list_offsets.astype(np.int32)), spans)


def sample_table(table: pa.Table, target: str) -> pa.Table:
    """Rows of ``target`` (not ``tree``) as one row per sample with :data:`SAMPLE_SCHEMA` (see module docs)."""
    if target == "tree":
        raise ConfigError("tree rows hold prefix trees, not samples", hint="read them by their own columns")
    offsets, mask = _trained_mask(table, target)
    ids = arrays.flat_values(table["input_ids"], np.int64)
    columns: dict[str, Any] = {}
    if target == "packed":
        # Samples lie back to back in their row: cut the flat arrays at each sample's start.
        lengths = arrays.flat_values(table["seq_lengths"], np.int64)
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        columns["sample_id"] = pc.list_flatten(arrays.as_array(table["sample_ids"]))
    else:
        for name in ("sample_id", "graph_id", "source", "policy", "cut_reason", "token_source", "flags"):
            if name in table.column_names:
                columns[name] = arrays.as_array(table[name])
        if "turn_ids" in table.column_names:
            columns["turn_ids"] = arrays.as_array(table["turn_ids"])
        if "logprobs" in table.column_names:
            columns["logprobs"] = arrays.as_array(table["logprobs"])
        if "engine_tokens" in table.column_names:
            columns["engine_tokens"] = arrays.as_array(table["engine_tokens"])
    n = offsets.shape[0] - 1
    columns["input_ids"] = arrays.build_list(offsets, ids, pa.int64())
    columns["loss_mask"] = arrays.build_list(offsets, mask, pa.int8())
    columns["num_tokens"] = pa.array(np.diff(offsets))
    columns["num_trained_tokens"] = pa.array(arrays.per_row_sum(mask, offsets))
    if "turn_spans" in table.column_names and target != "packed":
        columns["turn_spans"] = arrays.as_array(table["turn_spans"])
        columns["num_turns"] = pc.list_value_length(columns["turn_spans"])
    else:
        runs, columns["turn_spans"] = mask_runs(offsets, mask)
        columns["num_turns"] = pa.array(runs)
    out = [_as_type(columns.get(f.name), f.type, n) for f in SAMPLE_SCHEMA]
    return pa.Table.from_arrays(out, schema=SAMPLE_SCHEMA)


def _as_type(value: pa.Array | None, type_: pa.DataType, n: int) -> pa.Array:
    """``value`` cast to ``type_``; a column the target lacks is all null. JSON lines give ``null`` (and
    ``list<null>``) to a column whose values are all null: those are rebuilt, not cast."""
    if value is None or pa.types.is_null(value.type):
        return pa.nulls(n, type_)
    if pa.types.is_list(value.type) and pa.types.is_null(value.type.value_type):
        values = pa.nulls(len(pc.list_flatten(value)), type_.value_type)
        offsets = pa.array(arrays.offsets_of(value).astype(np.int32))
        return pa.ListArray.from_arrays(offsets, values, mask=value.is_null())
    return pc.cast(value, type_)


def samples_per_row(file: DataFile, target: str) -> np.ndarray:
    """How many samples each row of ``file`` holds (1, except ``packed`` and ``tree`` rows)."""
    if target in ("packed", "tree"):
        return np.asarray(file.read(["num_samples"])["num_samples"].to_numpy(), dtype=np.int64)
    return np.ones(file.num_rows, dtype=np.int64)
