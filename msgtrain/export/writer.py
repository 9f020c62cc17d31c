"""Streaming dataset writer: canonical batches in, trainer-ready files out, with bounded memory.

``DatasetWriter(out_dir, format, target)`` → ``write(split, table)`` any number of times → ``close()``.
Each split has its own target converter (packing never mixes splits) and its own sink:

- ``parquet`` (default): ``data/{split}-{i:05d}-of-{n:05d}.parquet`` — the layout ``datasets`` and the Hub
  recognise — zstd-compressed, plus ``dataset_info.json`` (a ``datasets.DatasetInfo``: features, splits).
  Each file embeds its ``datasets`` features in the Arrow schema metadata, so ``load_dataset`` restores the
  exact types.
- ``hf``: ``DatasetDict.save_to_disk`` layout (``dataset_dict.json``, ``{split}/data-*.arrow``), loadable with
  ``datasets.load_from_disk``. Rows are first streamed to Arrow IPC files in ``.staging/``, which ``datasets``
  memory-maps, so converting never holds the dataset in memory; the staging directory is removed at close.
- ``jsonl``: ``data/{split}-00000-of-00001.jsonl``, a human-readable preview: every target column plus
  ``trained_spans`` (start, end and, with a ``decode`` callable, the decoded text of each trained span).

Invariants:
- Memory: at most one row group per split (bounded by ``row_group_size`` rows and ``row_group_tokens``
  tokens) plus the packer's buffer is held; everything else is on disk.
- Determinism: row groups and shards are cut by row and token counts only, never by how ``write`` calls were
  batched, and nothing time- or path-dependent is written, so identical rows give byte-identical parquet.
- The writer writes directly into ``out_dir``; publishing it atomically is the caller's job.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from msgtrain.errors import ConfigError, OutputError
from msgtrain.export import arrays, parquet_pages
from msgtrain.export.buffer import RowBuffer
from msgtrain.export.pack import Packer
from msgtrain.export.targets import Converter, Target, TargetOptions, get_target

Format = Literal["parquet", "hf", "jsonl"]
FORMATS: tuple[str, ...] = get_args(Format)
DATA_DIR = "data"
STAGING_DIR = ".staging"
PACKING_METADATA = "packing_metadata.json"
INFO_FILE = "dataset_info.json"  # written by datasets.DatasetInfo.write_to_directory
DEFAULT_ROWS_PER_SHARD = 100_000
DEFAULT_ROW_GROUP_SIZE = 1_000
DEFAULT_ROW_GROUP_TOKENS = 8 * 1024 * 1024  # ~32 MiB of int32 ids per row group before compression

Decode = Callable[[list[int]], str]


# Arrow types as ``datasets`` names them in a ``Value`` feature (its ``_arrow_to_datasets_dtype``).
_VALUE_DTYPES = {
    pa.bool_(): "bool",
    pa.int8(): "int8",
    pa.int16(): "int16",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.float32(): "float32",
    pa.float64(): "float64",
    pa.string(): "string",
    pa.large_string(): "large_string",
}


def hf_features(schema: pa.Schema) -> dict[str, Any]:
    """The ``datasets`` features of ``schema`` as ``Features.from_arrow_schema(schema).to_dict()`` gives them, made
    without importing ``datasets`` (about half a second, and pandas with it) for the types the targets use; any
    other type is asked of ``datasets`` itself. tests/test_startup.py compares both for every target."""
    try:
        return {f.name: _feature(f.type) for f in schema}
    except KeyError:
        from datasets import Features

        return dict(Features.from_arrow_schema(schema).to_dict())


def _feature(t: pa.DataType) -> dict[str, Any]:
    if pa.types.is_list(t):
        return {"feature": _feature(t.value_type), "_type": "List"}
    if pa.types.is_struct(t):
        return {field.name: _feature(field.type) for field in t}
    return {"dtype": _VALUE_DTYPES[t], "_type": "Value"}


# Columns of token ids and token positions, written without dictionary encoding. Their values are wide (a vocabulary,
# a context's positions) and their rows repeat long runs of one another (a conversation's history in each of its
# samples): the dictionary's indices, bit-packed at ~17 bits, hide those runs from zstd and take longer to build
# than the plain values take to write. Columns of few distinct values (masks, labels that are mostly -100, turn
# numbers, strings) keep it: it makes them smaller. Measured in docs/performance.md (Writing the dataset).
PLAIN_COLUMNS = frozenset(
    {
        "input_ids",
        "position_ids",
        "parent_index",
        "subtree_end",
        "prompt_ids",
        "chosen_ids",
        "rejected_ids",
        "completion_ids",
    }
)
# Data pages of 4 MiB (pyarrow's default is 1 MiB) compressed at zstd level 3 (its default 1): each page is
# compressed alone, and level 3's larger window over a larger page finds the repeated contexts level 1 misses.
DATA_PAGE_SIZE = 4 << 20
ZSTD_LEVEL = 3


def parquet_options(schema: pa.Schema, compression: str) -> dict[str, Any]:
    """The options of ``pyarrow.parquet.ParquetWriter`` the export writes ``schema`` with (``compression``: the
    codec; a level is given for zstd only)."""
    return {
        "compression": compression,
        "compression_level": ZSTD_LEVEL if compression.lower() == "zstd" else None,
        "use_dictionary": [p for p in _leaf_paths(schema) if p.split(".")[0] not in PLAIN_COLUMNS],
        "write_statistics": True,
        "data_page_size": DATA_PAGE_SIZE,
    }


@functools.lru_cache(maxsize=16)
def _leaf_paths(schema: pa.Schema) -> tuple[str, ...]:
    """The Parquet column paths of ``schema``'s leaves (``input_ids.list.element``), as pyarrow names them: the
    names its per-column options take (a top-level name does not reach a nested leaf)."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    meta = pq.read_metadata(pa.BufferReader(sink.getvalue()))
    return tuple(meta.schema.column(i).path for i in range(meta.num_columns))


def _features_metadata(schema: pa.Schema) -> dict[bytes, bytes]:
    """The ``huggingface`` schema metadata ``datasets`` writes and reads back as exact features."""
    return {b"huggingface": json.dumps({"info": {"features": hf_features(schema)}}, sort_keys=True).encode()}


@dataclass
class _ParquetShard:
    partial: Path
    writer: pq.ParquetWriter
    rows: int = 0
    groups: int = 0
    pages: parquet_pages.PageWriter | None = None  # the pages of its row groups' columns msgtrain writes


class _ParquetSink:
    def __init__(
        self,
        root: Path,
        split: str,
        schema: pa.Schema,
        shard_rows: int,
        cutter: RowBuffer,
        compression: str,
    ) -> None:
        self.root, self.split, self.shard_rows, self.cutter = root, split, shard_rows, cutter
        self.schema = schema.with_metadata(_features_metadata(schema))
        self.compression = compression
        self.shards: list[tuple[Path, int]] = []  # finished (partial path, rows)
        self._open: _ParquetShard | None = None

    def append(self, table: pa.Table, final: bool = False) -> None:
        self.cutter.add(table)
        while True:
            room = self.shard_rows - (self._open.rows if self._open else 0)
            group = self.cutter.take(final, room)
            if group is None:
                return
            shard = self._open or self._start_shard()
            table = group.cast(self.schema)
            own = parquet_pages.own_columns(table, self.compression, PLAIN_COLUMNS)
            if own:
                # pyarrow spends ~9 ns per value of a list column on its levels and writes a long row as one page,
                # 15-24 bytes per value at once (msgtrain/export/parquet_pages.py): msgtrain writes the pages of
                # the token-aligned columns, spliced in at the shard's close. They are read chunk by chunk (a long
                # row is a chunk of its own, see samples_to_table): combined first, a long row's values were copied.
                if shard.pages is None:
                    side = shard.partial.with_name(shard.partial.name + ".pages")
                    level = parquet_options(self.schema, self.compression)["compression_level"]
                    shard.pages = parquet_pages.PageWriter(side, self.compression, level)
                shard.pages.write(shard.groups, table, own)
                table = parquet_pages.emptied(table, own)
            # One chunk per column: pyarrow's bytes then do not depend on how the rows arrived.
            table = table.combine_chunks()
            shard.writer.write_table(table, row_group_size=group.num_rows)
            del table
            shard.rows += group.num_rows
            shard.groups += 1
            if shard.rows >= self.shard_rows:
                self._finish_shard()

    def _start_shard(self) -> _ParquetShard:
        path = self.root / DATA_DIR / f"{self.split}-{len(self.shards):05d}.parquet.partial"
        writer = _open_output(
            lambda: pq.ParquetWriter(path, self.schema, **parquet_options(self.schema, self.compression)),
            path,
        )
        self._open = _ParquetShard(path, writer)
        return self._open

    def _finish_shard(self) -> None:
        assert self._open is not None
        self._open.writer.close()
        if self._open.pages is not None:
            parquet_pages.splice(self._open.partial, self._open.pages)
        self.shards.append((self._open.partial, self._open.rows))
        self._open = None

    def close(self) -> list[tuple[Path, int]]:
        """Flush, close, and rename shards to ``{split}-{i}-of-{n}.parquet``. Returns (final path, rows)."""
        self.append(self.schema.empty_table(), final=True)
        if self._open is not None:
            self._finish_shard()
        total = len(self.shards)
        done = []
        for i, (partial, rows) in enumerate(self.shards):
            final = partial.with_name(f"{self.split}-{i:05d}-of-{total:05d}.parquet")
            try:
                partial.rename(final)
            except OSError as e:
                raise OutputError(
                    f"cannot rename {partial} to {final.name}: {e.strerror or e}", where=str(partial)
                ) from e
            done.append((final, rows))
        return done


class _ArrowStagingSink:
    """Streams rows to an Arrow IPC stream file that ``datasets.Dataset.from_file`` memory-maps at close."""

    def __init__(self, root: Path, split: str, schema: pa.Schema, cutter: RowBuffer) -> None:
        self.path = root / STAGING_DIR / f"{split}.arrow"
        self.schema = schema.with_metadata(_features_metadata(schema))
        self.cutter = cutter
        self.rows = 0
        self._sink: pa.OSFile | None = None
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None

    def append(self, table: pa.Table, final: bool = False) -> None:
        self.cutter.add(table)
        while (group := self.cutter.take(final)) is not None:
            if self._writer is None:  # opened on the first row: an empty split leaves no file
                self._sink = _open_output(lambda: pa.OSFile(str(self.path), "wb"), self.path)
                self._writer = pa.ipc.new_stream(self._sink, self.schema)
            self._writer.write_table(group.cast(self.schema))
            self.rows += group.num_rows

    def close(self) -> Path | None:
        """Finish the staged file; ``None`` when the split received no rows."""
        self.append(self.schema.empty_table(), final=True)
        if self._writer is None or self._sink is None:
            return None
        self._writer.close()
        self._sink.close()
        return self.path


class _JsonlSink:
    def __init__(self, root: Path, split: str, target: Target, decode: Decode | None) -> None:
        self.path = root / DATA_DIR / f"{split}-00000-of-00001.jsonl"
        self.target, self.decode = target, decode
        self.rows = 0
        self._file: IO[str] | None = None

    def append(self, table: pa.Table, final: bool = False) -> None:
        if not table.num_rows:
            return
        if self._file is None:  # opened on the first row: an empty split leaves no file
            self._file = _open_output(lambda: self.path.open("w", encoding="utf-8", newline="\n"), self.path)
        if "input_ids" not in table.column_names:  # preference rows: their text columns show what is trained
            self._file.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in table.to_pylist()))
            self.rows += table.num_rows
            return
        mask = self.target.train_mask(table)
        offsets = arrays.offsets_of(mask)
        flat_mask = arrays.flat_values(mask, np.int8)
        flat_ids = arrays.flat_values(table["input_ids"], np.int64)
        lines = []
        for i, row in enumerate(table.to_pylist()):
            lo, hi = int(offsets[i]), int(offsets[i + 1])
            row["trained_spans"] = [
                {
                    "start": a,
                    "end": b,
                    **({"text": self.decode(flat_ids[lo + a : lo + b].tolist())} if self.decode else {}),
                }
                for a, b in _runs(flat_mask[lo:hi])
            ]
            lines.append(json.dumps(row, ensure_ascii=False))
        self._file.write("\n".join(lines) + "\n")
        self.rows += table.num_rows

    def close(self) -> Path | None:
        """Close the preview; ``None`` when the split received no rows."""
        if self._file is None:
            return None
        self._file.close()
        return self.path


def _runs(mask: np.ndarray) -> Iterable[tuple[int, int]]:
    """[start, end) of every run of ones in a 0/1 vector."""
    edges = np.diff(np.concatenate(([0], (mask != 0).astype(np.int8), [0])))
    return zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True)


def _open_output(opener: Callable[[], Any], path: Path) -> Any:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return opener()
    except OSError as e:
        raise OutputError(
            f"cannot write {path}: {e.strerror or e}",
            where=str(path),
            hint="check that the output directory is writable and the disk is not full",
        ) from e


@dataclass(frozen=True)
class ShardInfo:
    """What ``dataset_info.json`` needs of one finished Parquet shard (a worker that wrote it can return it)."""

    split: str
    rows: int
    num_bytes: int  # uncompressed, summed over row groups, as ``datasets`` counts a split's num_bytes
    size: int  # bytes on disk


def parquet_shard_info(split: str, path: Path, rows: int) -> ShardInfo:
    meta = pq.read_metadata(path)
    num_bytes = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    return ShardInfo(split, rows, num_bytes, path.stat().st_size)


def write_parquet_info(out_dir: Path, target: Target, splits: list[str], shards: list[ShardInfo]) -> None:
    """``dataset_info.json`` of a Parquet dataset from its shards (in shard order within each split), splits in
    ``splits`` order; a split without shards is not listed (``datasets`` cannot load a split without files).

    The bytes ``datasets.DatasetInfo.write_to_directory`` writes for this info (its fields in its order, unset ones
    left out), made without importing ``datasets``: tests/test_startup.py compares them."""
    split_infos: dict[str, dict[str, Any]] = {}
    for name in splits:
        mine = [s for s in shards if s.split == name]
        if not mine:
            continue
        rows = [s.rows for s in mine]
        split: dict[str, Any] = {"name": name, "num_bytes": sum(s.num_bytes for s in mine), "num_examples": sum(rows)}
        if len(mine) > 1:
            split["shard_lengths"] = rows
        split_infos[name] = {**split, "dataset_name": None}
    info = {
        "description": f"msgtrain export, target {target.name!r}: {target.description}",
        "citation": "",
        "homepage": "",
        "license": "",
        "features": hf_features(target.schema),
        "config_name": "default",
        "splits": split_infos,
        "download_size": sum(s.size for s in shards),
        "dataset_size": sum(s["num_bytes"] for s in split_infos.values()),
    }
    try:
        (out_dir / INFO_FILE).write_bytes(json.dumps(info).encode("utf-8"))
    except OSError as e:
        raise OutputError(f"cannot write dataset_info.json: {e}", where=str(out_dir)) from e


@dataclass
class _SplitState:
    converter: Converter
    sink: _ParquetSink | _ArrowStagingSink | _JsonlSink
    samples: int = 0
    tokens: int = 0
    trained_tokens: int = 0
    longest_sample: int = 0  # tokens of the longest sample (a trainer's max_length below it truncates)
    files: list[str] = field(default_factory=list)
    file_rows: list[int] = field(default_factory=list)


class DatasetWriter:
    """Write canonical sample tables as ``target`` rows in ``format`` under ``out_dir``.

    ``splits`` declares splits to report even when no row lands in them (a tiny dataset whose 5 % validation
    split ends up empty): they appear in the summary with 0 rows and no files, because ``datasets`` cannot load
    a split without data (an empty file would make ``load_dataset(OUT)`` fail).
    ``decode`` (ids → text) is only used by the jsonl preview.
    """

    def __init__(
        self,
        out_dir: str | Path,
        format: str = "parquet",
        target: str = "canonical",
        *,
        pack_length: int | None = None,
        tree_scope: str = "graph",
        pack_buffer_rows: int = 16384,
        pack_buffer_tokens: int = 32 * 1024 * 1024,
        rows_per_shard: int = DEFAULT_ROWS_PER_SHARD,
        row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
        row_group_tokens: int = DEFAULT_ROW_GROUP_TOKENS,
        splits: Iterable[str] = (),
        decode: Decode | None = None,
        compression: str = "zstd",
        tokenizer: Any = None,
    ) -> None:
        if format not in FORMATS:
            raise ConfigError(
                f"unknown format {format!r}",
                hint=f"choose one of: {', '.join(FORMATS)}",
                code="unknown_format",
            )
        for name, value in (
            ("rows_per_shard", rows_per_shard),
            ("row_group_size", row_group_size),
            ("row_group_tokens", row_group_tokens),
            ("pack_buffer_rows", pack_buffer_rows),
            ("pack_buffer_tokens", pack_buffer_tokens),
        ):
            if value < 1:
                raise ConfigError(f"{name} must be positive, got {value}")
        self.out_dir = Path(out_dir)
        self.format = format
        self.target = get_target(target)
        self.options = TargetOptions(
            pack_length=pack_length,
            tree_scope=tree_scope,
            pack_buffer_rows=pack_buffer_rows,
            pack_buffer_tokens=pack_buffer_tokens,
            tokenizer=tokenizer,
        )
        self.rows_per_shard, self.row_group_size = rows_per_shard, row_group_size
        self.row_group_tokens = row_group_tokens
        self.decode = decode
        self.compression = compression
        self._splits: dict[str, _SplitState] = {}
        self._closed = False
        self.target.make_converter(self.options)  # fail now, not at the first write, on missing options
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(
                f"cannot write {self.out_dir}: {e.strerror or e}",
                where=str(self.out_dir),
                hint="check that the output directory is writable and the disk is not full",
            ) from e
        for name in splits:
            self._state(name)

    def _state(self, split: str) -> _SplitState:
        state = self._splits.get(split)
        if state is None:
            # row groups are cut by the tokens of each row's longest id column (preference rows have no input_ids)
            length_column = "input_ids" if "input_ids" in self.target.schema.names else self.target.schema.names[3]
            cutter = RowBuffer(self.row_group_size, self.row_group_tokens, length_column)
            sink: _ParquetSink | _ArrowStagingSink | _JsonlSink
            if self.format == "parquet":
                sink = _ParquetSink(
                    self.out_dir, split, self.target.schema, self.rows_per_shard, cutter, self.compression
                )
            elif self.format == "hf":
                sink = _ArrowStagingSink(self.out_dir, split, self.target.schema, cutter)
            else:
                sink = _JsonlSink(self.out_dir, split, self.target, self.decode)
            state = self._splits[split] = _SplitState(self.target.make_converter(self.options), sink)
        return state

    def write(self, split: str, table: pa.Table) -> None:
        """Append canonical rows to ``split`` (converted to the target, buffered, written in row groups)."""
        if self._closed:
            raise OutputError("write() after close()", code="writer_closed")
        state = self._state(split)
        if table.num_rows:
            state.samples += table.num_rows
            lengths = pc.list_value_length(table["input_ids"])
            state.tokens += int(pc.sum(lengths).as_py() or 0)
            state.longest_sample = max(state.longest_sample, int(pc.max(lengths).as_py() or 0))
            state.trained_tokens += int(pc.sum(pc.list_flatten(table["loss_mask"])).as_py() or 0)
        state.sink.append(state.converter.convert(table))

    def close(self) -> dict[str, Any]:
        """Flush and finish every split; returns files, rows/samples/tokens per split and packing stats."""
        if self._closed:
            raise OutputError("close() called twice", code="writer_closed")
        self._closed = True
        for state in self._splits.values():
            state.sink.append(state.converter.flush(), final=True)
        if self.target.name == "packed" and self.format != "jsonl":
            self._write_packing_metadata()
        if self.format == "parquet":
            self._close_parquet()
        elif self.format == "hf":
            self._close_hf()
        else:
            for state in self._splits.values():
                assert isinstance(state.sink, _JsonlSink)
                path = state.sink.close()
                state.files = [self._relative(path)] if path is not None else []
                state.file_rows = [state.sink.rows]
        return self._summary()

    def _write_packing_metadata(self) -> None:
        """``packing_metadata.json``: NeMo's list of per-dataset packing stats (train first), for
        Megatron-Bridge's ``PackedSequenceSpecs.packed_metadata_path`` / ``pad_cu_seqlens``."""
        entries = []
        for name in sorted(self._splits, key=lambda n: (n != "train", n)):
            converter = self._splits[name].converter
            if isinstance(converter, Packer) and converter.stats()["rows"]:
                entries.append({"split": name, **converter.nemo_metadata()})
        path = self.out_dir / PACKING_METADATA
        try:
            path.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
        except OSError as e:
            raise OutputError(f"cannot write {path}: {e.strerror or e}", where=str(path)) from e

    def _relative(self, path: Path) -> str:
        return path.relative_to(self.out_dir).as_posix()

    def _close_parquet(self) -> None:
        shards: list[ShardInfo] = []
        for name, state in self._splits.items():
            assert isinstance(state.sink, _ParquetSink)
            done = state.sink.close()
            state.files = [self._relative(path) for path, _ in done]
            state.file_rows = [rows for _, rows in done]
            shards += [parquet_shard_info(name, path, rows) for path, rows in done]
        write_parquet_info(self.out_dir, self.target, list(self._splits), shards)

    def _close_hf(self) -> None:
        from datasets import Dataset, DatasetDict
        from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

        staged: dict[str, Path] = {}
        for name, state in self._splits.items():
            assert isinstance(state.sink, _ArrowStagingSink)
            path = state.sink.close()
            state.file_rows = [state.sink.rows]
            if path is not None:
                staged[name] = path
        if not staged:
            return
        # from_file memory-maps the staged Arrow streams, so save_to_disk copies without loading the dataset.
        dataset_dict = DatasetDict({name: Dataset.from_file(str(path)) for name, path in staged.items()})
        shards = {name: -(-self._splits[name].file_rows[0] // self.rows_per_shard) for name in staged}
        # datasets draws its own tqdm bars on stderr; the CLI owns the terminal, so silence them for this call.
        were_disabled = are_progress_bars_disabled()
        disable_progress_bars()
        try:
            dataset_dict.save_to_disk(str(self.out_dir), num_shards=shards)
        except OSError as e:
            raise OutputError(
                f"cannot save the dataset: {e}",
                where=str(self.out_dir),
                hint="check that the output directory is writable and the disk is not full",
            ) from e
        finally:
            if not were_disabled:
                enable_progress_bars()
        del dataset_dict
        shutil.rmtree(self.out_dir / STAGING_DIR, ignore_errors=True)
        for name in staged:
            self._splits[name].files = sorted(self._relative(p) for p in (self.out_dir / name).iterdir())

    def _summary(self) -> dict[str, Any]:
        splits: dict[str, dict[str, Any]] = {}
        for name, state in self._splits.items():
            splits[name] = {
                "rows": sum(state.file_rows),
                "samples": state.samples,
                "tokens": state.tokens,
                "trained_tokens": state.trained_tokens,
                "longest_sample_tokens": state.longest_sample,
                "files": state.files,
            }
        summary: dict[str, Any] = {
            "format": self.format,
            "target": self.target.name,
            "files": sorted(
                [f for s in splits.values() for f in s["files"]]
                + [
                    f
                    for f in ("dataset_info.json", "dataset_dict.json", PACKING_METADATA)
                    if (self.out_dir / f).exists()
                ]
            ),
            "splits": splits,
        }
        if self.target.name == "packed":
            by_split = {name: state.converter.stats() for name, state in self._splits.items()}
            rows = sum(s["rows"] for s in by_split.values())
            tokens = sum(s["tokens"] for s in by_split.values())
            capacity = rows * (self.options.pack_length or 0)
            summary["packing"] = {
                "pack_length": self.options.pack_length,
                "rows": rows,
                "samples": sum(s["samples"] for s in by_split.values()),
                "tokens": tokens,
                "efficiency": round(tokens / capacity, 6) if capacity else 0.0,
                "by_split": by_split,
            }
        if self.target.name in ("dpo", "kto"):
            by_split = {name: state.converter.stats() for name, state in self._splits.items()}
            total: Counter[str] = Counter()
            for counts in by_split.values():
                total.update(counts)
            summary["preference"] = {**dict(sorted(total.items())), "by_split": by_split}
        if self.target.name == "tree":
            summary["tree"] = _tree_summary(
                {name: state.converter.stats() for name, state in self._splits.items()},
                self.options.pack_length,
                self.options.tree_scope,
            )
        return summary


def _tree_summary(by_split: dict[str, dict[str, Any]], pack_length: int | None, scope: str) -> dict[str, Any]:
    """Totals of the tree converters: tokens written vs the tokens the flat samples would have had."""
    keys = ("samples", "trees", "split_trees", "blocks", "rows", "tokens", "flat_tokens", "trie_tokens")
    total = {key: sum(int(s.get(key, 0)) for s in by_split.values()) for key in keys}
    tokens, flat, trie = total["tokens"], total["flat_tokens"], total["trie_tokens"]
    return {
        "pack_length": pack_length,
        "scope": scope,
        **total,
        "flat_per_tree_token": round(flat / tokens, 4) if tokens else 0.0,
        "tree_per_trie_token": round(tokens / trie, 4) if trie else 0.0,
        "by_split": by_split,
    }
