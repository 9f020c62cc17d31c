"""``validate OUT``: check an exported dataset (any ``--target``, any ``--format``) against its own invariants.

What is checked, per data file, vectorised over its flat token arrays (:mod:`msgtrain.tools.dataset`):
- every token list of a row has the row's length, and the per-row counts (``num_tokens``,
  ``num_trained_tokens``, ``num_samples``...) are what the lists hold;
- masks are 0/1, and the target's masks agree: ``labels`` is ``input_ids`` exactly where trained and -100
  elsewhere; ``trl``'s two masks and canonical ``assistant_masks`` equal the trained mask; canonical and ``rl``
  turn spans are exactly the runs of the loss mask (each sampled turn's completion, nothing else);
- ``packed`` rows: samples lie back to back (``seq_start_id`` = running sum of ``seq_lengths``), positions restart
  at every sample, and NeMo's label-aligned ``loss_mask`` is the trained mask shifted by one inside each sample;
- ``tree`` rows: every segment's parent comes before it;
- and against ``report.json`` (when present): each split's rows, samples, tokens (of the flat samples) and
  trained tokens are what its files hold; against ``dataset_info.json`` (parquet): each split's rows.

Each problem names the file, the row (when one row is at fault: the first of them, with how many there are) and
what was expected. A dataset with problems exits 3, as ``validate`` on logs does.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from msgtrain.errors import DatasetError
from msgtrain.export import arrays
from msgtrain.tools.dataset import (
    IGNORE_INDEX,
    DataFile,
    data_files,
    mask_runs,
    report_of,
    sample_table,
    target_of,
)
from msgtrain.tools.validate_cmd import Finding

HINT = "the dataset was changed after msgtrain wrote it, or this is a bug: rerun `msgtrain convert` into a new OUT"


@dataclass
class DatasetValidation:
    """What ``validate OUT`` found: the dataset's target and format, what it holds per split, the problems."""

    dataset: str
    target: str = ""
    format: str = ""
    files: int = 0
    splits: dict[str, dict[str, int]] = field(default_factory=dict)
    problems: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "dataset": self.dataset,
            "target": self.target,
            "format": self.format,
            "files": self.files,
            "splits": self.splits,
            "problems": [vars(p) for p in self.problems],
        }


class _Checker:
    def __init__(self, file: DataFile, problems: list[Finding]) -> None:
        self.file = file
        self.problems = problems

    def rows(self, bad: np.ndarray, code: str, message: str) -> None:
        """One finding for the rows where ``bad`` holds: the first of them, and how many."""
        where = np.flatnonzero(bad)
        if where.size:
            more = f" (and {where.size - 1} more rows)" if where.size > 1 else ""
            self.problems.append(Finding(str(self.file.path), f"row {int(where[0])}", code, message + more, HINT))

    def same_lengths(self, table: pa.Table, columns: list[str], counted: str | None = None) -> np.ndarray:
        """Offsets of ``columns[0]``; a problem for every other list column (or ``counted``) of other lengths."""
        first = arrays.offsets_of(table[columns[0]])
        lengths = np.diff(first)
        for name in columns[1:]:
            self.rows(
                arrays.lengths_of(table[name]) != lengths, "length_mismatch", f"{name} is not as long as {columns[0]}"
            )
        if counted is not None:
            declared = np.asarray(table[counted].to_numpy(), dtype=np.int64)
            self.rows(declared != lengths, "count_mismatch", f"{counted} is not the number of tokens")
        return first


def _flat(table: pa.Table, name: str) -> np.ndarray:
    return arrays.flat_values(table[name], np.int64)


def _check_file(file: DataFile, target: str, problems: list[Finding]) -> dict[str, int]:
    """Check one file's rows; return what it holds (rows, samples, tokens of the flat samples, trained tokens)."""
    table = file.read()
    check = _Checker(file, problems)
    if target == "tree":
        offsets = check.same_lengths(table, ["input_ids", "position_ids", "loss_mask", "turn_index"], "num_tokens")
        mask = _flat(table, "loss_mask")
        check.rows(
            arrays.per_row_sum(~np.isin(mask, (0, 1)), offsets) > 0, "bad_mask", "loss_mask holds values other than 0/1"
        )
        declared = np.asarray(table["num_trained_tokens"].to_numpy(), dtype=np.int64)
        check.rows(
            arrays.per_row_sum(mask, offsets) != declared, "count_mismatch", "num_trained_tokens is not sum(loss_mask)"
        )
        parents = _flat(table, "segment_parents")
        seg_offsets = arrays.offsets_of(table["segment_parents"])
        own = np.arange(parents.shape[0]) - np.repeat(seg_offsets[:-1], np.diff(seg_offsets))
        check.rows(
            arrays.per_row_sum(parents >= own, seg_offsets) > 0,
            "bad_tree",
            "a segment's parent does not come before it",
        )
        return {
            "rows": table.num_rows,
            "samples": int(np.sum(table["num_samples"].to_numpy())),
            "tokens": int(np.sum(table["num_flat_tokens"].to_numpy())),
            "trained_tokens": int(mask.sum()),
        }
    samples = sample_table(table, target)
    offsets = arrays.offsets_of(samples["input_ids"])
    ids = _flat(samples, "input_ids")
    mask = _flat(samples, "loss_mask")
    if target in ("canonical", "rl"):
        check.same_lengths(table, ["input_ids", "loss_mask", "logprobs"], "num_tokens")
        if "assistant_masks" in table.column_names:
            check.same_lengths(table, ["input_ids", "assistant_masks"])
            check.rows(_differs(table, "assistant_masks", "loss_mask"), "mask_mismatch", "assistant_masks != loss_mask")
        _, runs = mask_runs(offsets, mask)
        check.rows(
            _spans_differ(runs, arrays.as_array(table["turn_spans"])),
            "spans_mismatch",
            "turn_spans are not exactly the runs of loss_mask",
        )
    elif target == "trl":
        check.same_lengths(table, ["input_ids", "completion_mask", "assistant_masks"])
        check.rows(
            _differs(table, "completion_mask", "assistant_masks"), "mask_mismatch", "completion_mask != assistant_masks"
        )
    else:  # labels, packed: labels are the ids where trained
        check.same_lengths(table, ["input_ids", "labels"])
        labels, row_ids = _flat(table, "labels"), _flat(table, "input_ids")
        wrong = (labels != IGNORE_INDEX) & (labels != row_ids)
        check.rows(
            arrays.per_row_sum(wrong, arrays.offsets_of(table["labels"])) > 0,
            "bad_labels",
            "labels differ from input_ids where trained",
        )
        if target == "labels":
            check.rows(_flat_ne(table, "attention_mask", 1), "bad_mask", "attention_mask is not all 1")
        else:
            _check_packed(table, check, mask)
    check.rows(
        arrays.per_row_sum(~np.isin(mask, (0, 1)), offsets) > 0,
        "bad_mask",
        "the trained mask holds values other than 0/1",
    )
    if "num_trained_tokens" in table.column_names and target != "packed":
        declared = np.asarray(table["num_trained_tokens"].to_numpy(), dtype=np.int64)
        check.rows(
            arrays.per_row_sum(mask, offsets) != declared,
            "count_mismatch",
            "num_trained_tokens is not the trained tokens",
        )
    return {
        "rows": table.num_rows,
        "samples": samples.num_rows,
        "tokens": int(ids.shape[0]),
        "trained_tokens": int(mask.sum()),
    }


def _spans_differ(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Per row, whether two list<struct<start, end>> columns differ (flat comparison when the counts agree)."""
    offsets_a, offsets_b = arrays.offsets_of(a), arrays.offsets_of(b)
    if not np.array_equal(offsets_a, offsets_b):  # a corrupt dataset: compare row by row
        return np.asarray([x != y for x, y in zip(a.to_pylist(), b.to_pylist(), strict=True)], dtype=bool)
    flat_a, flat_b = pc.list_flatten(a), pc.list_flatten(b)
    differ = np.zeros(len(flat_a), dtype=bool)
    for name in ("start", "end"):
        differ |= np.asarray(flat_a.field(name).to_numpy(zero_copy_only=False)) != np.asarray(
            flat_b.field(name).to_numpy(zero_copy_only=False)
        )
    return arrays.per_row_sum(differ, offsets_a) > 0


def _differs(table: pa.Table, a: str, b: str) -> np.ndarray:
    offsets = arrays.offsets_of(table[a])
    if not np.array_equal(offsets, arrays.offsets_of(table[b])):
        return np.ones(table.num_rows, dtype=bool)
    return arrays.per_row_sum(_flat(table, a) != _flat(table, b), offsets) > 0


def _flat_ne(table: pa.Table, name: str, value: int) -> np.ndarray:
    return arrays.per_row_sum(_flat(table, name) != value, arrays.offsets_of(table[name])) > 0


def _check_packed(table: pa.Table, check: _Checker, trained: np.ndarray) -> None:
    """Samples back to back, positions restarting per sample, NeMo's loss_mask = trained mask shifted by one."""
    offsets = check.same_lengths(table, ["input_ids", "labels", "loss_mask", "position_ids"], "num_tokens")
    check.same_lengths(table, ["seq_lengths", "seq_start_id", "sample_ids"])
    lengths, starts = _flat(table, "seq_lengths"), _flat(table, "seq_start_id")
    seq_offsets = arrays.offsets_of(table["seq_lengths"])
    check.rows(
        arrays.per_row_sum(lengths, seq_offsets) != np.diff(offsets),
        "bad_packing",
        "seq_lengths do not add up to the row",
    )
    running = np.cumsum(lengths) - lengths  # start of each sample in the flat array
    row_of_sample = arrays.row_index(seq_offsets)
    expected_starts = running - offsets[row_of_sample]
    check.rows(
        arrays.per_row_sum(starts != expected_starts, seq_offsets) > 0,
        "bad_packing",
        "seq_start_id is not the running sum of seq_lengths",
    )
    sample_of_token = np.repeat(np.arange(lengths.shape[0]), lengths)
    positions = np.arange(sample_of_token.shape[0]) - running[sample_of_token]
    check.rows(
        arrays.per_row_sum(_flat(table, "position_ids") != positions, offsets) > 0,
        "bad_positions",
        "position_ids do not restart at 0 at every sample",
    )
    last = np.zeros(trained.shape[0], dtype=bool)
    last[(running + lengths - 1)[lengths > 0]] = True
    shifted = np.where(last, 0, np.concatenate((trained[1:], [0])))
    check.rows(
        arrays.per_row_sum(_flat(table, "loss_mask") != shifted, offsets) > 0,
        "bad_mask",
        "loss_mask is not the trained mask shifted by one inside each sample (NeMo's label-aligned mask)",
    )
    declared = np.asarray(table["num_samples"].to_numpy(), dtype=np.int64)
    check.rows(declared != np.diff(seq_offsets), "count_mismatch", "num_samples is not the number of samples")


def validate_dataset(out: str | Path) -> DatasetValidation:
    """Check the dataset at ``out`` (see the module's docs)."""
    files = data_files(out)
    result = DatasetValidation(dataset=str(out), format=files[0].format, files=len(files))
    files = _readable(files, result.problems)
    if not files:
        return result
    targets = {target_of(f.names) for f in files}
    result.target = target = sorted(targets)[0]
    if len(targets) > 1:
        result.problems.append(
            Finding(str(out), "", "mixed_targets", f"files of several targets: {', '.join(sorted(targets))}", HINT)
        )
        return result
    held: dict[str, dict[str, int]] = defaultdict(lambda: {"rows": 0, "samples": 0, "tokens": 0, "trained_tokens": 0})
    for f in files:
        for key, value in _check_file(f, target, result.problems).items():
            held[f.split][key] += value
    result.splits = dict(held)
    report = report_of(out)
    written = ((report or {}).get("outputs") or {}).get("splits")
    if written is not None:
        for split in sorted(set(written) | set(held)):
            for key in ("rows", "samples", "tokens", "trained_tokens"):
                want = (written.get(split) or {}).get(key, 0)
                got = held[split][key] if split in held else 0
                if want != got:
                    result.problems.append(
                        Finding(
                            str(Path(out) / "report.json"),
                            f"outputs.splits.{split}",
                            "report_mismatch",
                            f"report.json says {want} {key.replace('_', ' ')}, the files hold {got}",
                            HINT,
                        )
                    )
    _check_dataset_info(Path(out), held, result.problems)
    return result


def _readable(files: list[DataFile], problems: list[Finding]) -> list[DataFile]:
    """The files whose rows can be read; each other one is a finding (its rows then count as missing)."""
    readable = []
    for f in files:
        try:
            f.names  # noqa: B018 - reads the schema (footer) now, so a damaged file is found before any check
            f.num_rows  # noqa: B018
        except DatasetError as e:
            problems.append(Finding(str(f.path), "", e.code, e.message, e.hint or HINT))
            continue
        readable.append(f)
    return readable


def _check_dataset_info(out: Path, held: dict[str, dict[str, int]], problems: list[Finding]) -> None:
    """``dataset_info.json`` (parquet layout): each split's ``num_examples`` is its rows, as ``datasets`` reads it."""
    path = out / "dataset_info.json"
    if not path.is_file():
        return
    splits = json.loads(path.read_text(encoding="utf-8")).get("splits") or {}
    for split in sorted(set(splits) | set(held)):
        want = (splits.get(split) or {}).get("num_examples", 0)
        got = held[split]["rows"] if split in held else 0
        if want != got:
            message = f"dataset_info.json says {want} rows, the files hold {got}"
            problems.append(Finding(str(path), f"splits.{split}", "info_mismatch", message, HINT))


def render_dataset_validation(result: DatasetValidation) -> Any:
    from rich.console import Group
    from rich.text import Text

    lines = [Text(str(p), style="red") for p in result.problems]
    held = ", ".join(
        f"{split}: {v['samples']} samples in {v['rows']} rows, {v['tokens']} tokens ({v['trained_tokens']} trained)"
        for split, v in sorted(result.splits.items())
    )
    verdict = f"{len(result.problems)} problems" if result.problems else "ok"
    lines.append(
        Text(
            f"{result.dataset}: --target {result.target}, --format {result.format}, {result.files} files; "
            f"{held}: {verdict}"
        )
    )
    return Group(*lines)
