"""Assembly: the parts of a run → the rows of the dataset, split by split, and the report's accounting.

Two ways to run it, with the same bytes:

- *Sequential* (:func:`assembly_tables` feeding one :class:`~msgtrain.export.writer.DatasetWriter`): the local
  engine, and any target whose rows depend on their neighbours (``packed``, ``tree``) or a format written as a
  whole (``hf``, ``jsonl``).
- *One task per output shard* (:func:`plan_shards`, :func:`write_shard`, run by
  :func:`msgtrain.run.ray_engine.assemble_on_cluster`), for Parquet of a row-wise target: a
  first pass of tasks (:func:`scan_groups`) reads the parts and returns only counts (rows per split per input
  file, and the report's accounting); the driver cuts each split's row sequence into shards of
  ``rows_per_shard`` rows, exactly where the sequential writer cuts (before the scan, a pass of tasks returns the
  digests of every trained turn, :func:`digest_groups`, and the driver decides the run's duplicate turns, which
  the sequential writer decides as it goes: :mod:`msgtrain.export.dedupe`); each shard task reads only the input files
  its rows come from, and writes its shard where it belongs. The driver writes ``dataset_info.json`` and
  ``report.json`` from the tasks' accounting.

Invariants:
- The row sequence of a split is a function of the parts and the export settings only: input files in assembly
  order, a file's chunks merged back into its order (:func:`~msgtrain.run.parts.merge_chunk_tables`), the length
  policy and the split assignment applied row by row. So the rows of shard *i* are the same whichever process
  computes them.
- A shard's bytes depend only on its rows: the sequential writer starts each shard with an empty row-group buffer
  and ends its last row group at the shard's end (the shard's room), which is what a writer given exactly that
  shard's rows does.
- Tally counters are sums, so the accounting of batches of files merged in any order equals one pass's.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from msgtrain import __version__
from msgtrain.export.dedupe import DUPLICATE, DuplicateCount, Position, TrainedOnce, decide, turn_digests
from msgtrain.export.groups import GroupPlan, GroupPlanner
from msgtrain.export.length import LengthStats, apply_length_policy
from msgtrain.export.split import SplitAssigner
from msgtrain.export.targets import TargetOptions, get_target, is_row_wise, logprobs_complete
from msgtrain.export.writer import (
    DATA_DIR,
    INFO_FILE,
    DatasetWriter,
    ShardInfo,
    parquet_shard_info,
    write_parquet_info,
)
from msgtrain.ingest.supplied import supplied_report
from msgtrain.linearize import DEMO_TOKENIZER, load_tokenizer
from msgtrain.linearize.content_format import resolve_content_format
from msgtrain.run.config import ConvertConfig, ProgressHook
from msgtrain.run.empty_result import check_reject_rate, refuse_empty_replacement
from msgtrain.run.own_files import own_file
from msgtrain.run.part_store import PartsStore, ReadGroup
from msgtrain.run.parts import PartStats, accounting_report, merge_chunk_rejects, merge_chunk_tables
from msgtrain.run.storage import child, put_file, writable_dir

REJECTS = "rejects.jsonl"  # in OUT, unless --rejects names a file of its own
DROPS = "drops.jsonl"  # in OUT: one line per sample the length policy dropped whole (reason, ids, length)
Group = list[str]  # the part keys of one input file (its chunks, in chunk order)


@dataclass
class Tally:
    """The report's counters over some input files (summed across files, batches and workers)."""

    stats: PartStats = field(default_factory=PartStats)
    length: LengthStats = field(default_factory=LengthStats)
    length_dropped_turns: Counter[str] = field(default_factory=Counter)
    cuts: Counter[str] = field(default_factory=Counter)
    by_split: Counter[str] = field(default_factory=Counter)
    by_policy: dict[str, Counter[str]] = field(default_factory=dict)
    by_source: dict[str, Counter[str]] = field(default_factory=dict)
    samples: int = 0
    tokens: int = 0
    trained_tokens: int = 0
    engine_tokens: int = 0
    sources: set[str] = field(default_factory=set)
    # One record per sample the length policy dropped whole (``drops.jsonl``), in output order.
    drops: list[dict[str, Any]] = field(default_factory=list)
    duplicates: DuplicateCount = field(default_factory=DuplicateCount)
    # Rows the rl target's group plan dropped whole, by reason (group_incomplete, group_key_missing).
    group_dropped: Counter[str] = field(default_factory=Counter)
    grouping: dict[str, Any] | None = None  # the group plan's report (rl target)
    behaviour: Counter[str] = field(default_factory=Counter)  # rows with behaviour-policy data

    def add_table(self, table: pa.Table) -> None:
        """Count rows that passed the length policy (before they are split)."""
        self.cuts.update(c for c in table.column("cut_reason").to_pylist() if c != "start")
        self.samples += table.num_rows
        self.tokens += int(pc.sum(table["num_tokens"]).as_py() or 0)
        self.trained_tokens += int(pc.sum(table["num_trained_tokens"]).as_py() or 0)
        self.engine_tokens += int(pc.sum(table["engine_tokens"]).as_py() or 0)
        self.behaviour["rows_with_complete_logprobs"] += int(logprobs_complete(table).sum())
        self.behaviour["rows_naming_the_model_or_sampling"] += sum(
            '"behaviour"' in text for text in table["metadata"].to_pylist()
        )
        for bucket, column in ((self.by_policy, "policy"), (self.by_source, "source")):
            for name, c in _group_counts(table, column).items():
                if column == "source":  # the file: without ``:<record>`` and `` (<graph>)``
                    head, sep, tail = name.rpartition(":")
                    name = (head if sep and "/" not in tail else name).split(" (")[0]
                bucket.setdefault(name, Counter()).update(c)

    def merge(self, other: Tally) -> None:
        self.stats.add(other.stats)
        self.length.merge(other.length)
        self.duplicates.merge(other.duplicates)
        for name in ("length_dropped_turns", "cuts", "by_split", "group_dropped", "behaviour"):
            getattr(self, name).update(getattr(other, name))
        for name in ("by_policy", "by_source"):
            mine = getattr(self, name)
            for key, counts in getattr(other, name).items():
                mine.setdefault(key, Counter()).update(counts)
        for name in ("samples", "tokens", "trained_tokens", "engine_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.sources |= other.sources
        self.drops.extend(other.drops)


def _group_counts(table: pa.Table, column: str) -> dict[str, Counter[str]]:
    """Per value of ``column`` (a null as ``"None"``): its rows' samples, tokens, trained tokens and turns.

    Summed with numpy over the column's dictionary codes: ``Table.group_by`` would import pyarrow's query engine
    (Acero) and its dataset module, a start-up cost of every convert for a few sums."""
    if table.num_rows == 0:
        return {}
    encoded = pc.dictionary_encode(table.column(column).combine_chunks(), null_encoding="encode")
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.intp)
    groups = len(encoded.dictionary)

    def per_group(name: str, count: bool = False) -> list[int]:
        values = table.column(name)
        if count:  # rows whose value is not null, as the count aggregate counts them
            weights = np.asarray(pc.is_valid(values).to_numpy(zero_copy_only=False), dtype=np.int64)
        else:  # the counts of a canonical row are never null
            weights = np.asarray(values.to_numpy(), dtype=np.int64)
        out = np.zeros(groups, dtype=np.int64)
        np.add.at(out, codes, weights)
        return [int(t) for t in out]

    samples, tokens = per_group("sample_id", count=True), per_group("num_tokens")
    trained, turns = per_group("num_trained_tokens"), per_group("num_turns")
    return {
        str(value): Counter(samples=samples[i], tokens=tokens[i], trained_tokens=trained[i], turns=turns[i])
        for i, value in enumerate(encoded.dictionary.to_pylist())
    }


def part_tables(table: pa.Table) -> list[pa.Table]:
    """A part's rows as tables of one record batch each, in order: a long row is a batch of its own
    (:func:`~msgtrain.export.schema.samples_to_table`), read from the part's memory map as it is, where a table of
    several batches is copied whole by whatever combines its chunks (the digests of its turns, its accounting)."""
    batches = table.to_batches()
    return [pa.Table.from_batches([b]) for b in batches] if len(batches) > 1 else [table]


def policed_tables(
    cfg: ConvertConfig,
    groups: Iterable[Group],
    read_group: ReadGroup,
    tally: Tally,
    rejects: IO[str] | None = None,
    on_group: Callable[[int], None] | None = None,
    once: TrainedOnce | None = None,
) -> Iterator[tuple[int, pa.Table]]:
    """The rows of each group (input file) after the length policy, before groups and splits: (index, table). A
    turn an earlier row trained is not trained again (:mod:`msgtrain.export.dedupe`), decided before the length
    policy: ``once`` judges (a new judge when None: ``groups`` are then the whole run)."""
    once = once if once is not None else TrainedOnce()
    for index, group in enumerate(groups):
        first_row = 0
        read = read_group(group)
        for meta, _, _ in read:
            tally.sources.add(meta["source"])
            tally.stats.add(PartStats.from_json(meta["stats"]))
        if len(group) == 1:
            if rejects is not None:
                rejects.write(read[0][2])
            tables: Iterable[pa.Table] = part_tables(read[0][1])
        else:  # the chunks of one file, put back in the order converting the whole file gives
            if rejects is not None:
                rejects.writelines(merge_chunk_rejects([text for _, _, text in read]))
            tables = merge_chunk_tables([table for _, table, _ in read], cfg.row_group_size)
        for table in tables:
            rows = table.num_rows
            table = once.apply(group[0], table, first_row, tally.duplicates, [])
            first_row += rows
            table, _, dropped_turns, dropped = apply_length_policy(
                table,
                max_length=cfg.max_length,
                overflow=cfg.overflow,
                allow_partial_turns=cfg.allow_partial_turns,
                stats=tally.length,
            )
            tally.length_dropped_turns.update(dropped_turns)
            tally.drops.extend(dropped)
            if table.num_rows:
                yield index, table
        if on_group is not None:
            on_group(index)


def assembly_tables(
    cfg: ConvertConfig,
    groups: Iterable[Group],
    read_group: ReadGroup,
    tally: Tally,
    rejects: IO[str] | None = None,
    on_group: Callable[[int], None] | None = None,
    grouping: GroupPlan | None = None,
    once: TrainedOnce | None = None,
) -> Iterator[tuple[int, str, pa.Table]]:
    """The dataset's rows as (index of the group in ``groups``, split, canonical table), in output order; counts
    them into ``tally``, writes the groups' rejects to ``rejects`` (in file order) when given, and calls
    ``on_group(index)`` after each group. With ``grouping`` (the ``rl`` target's :class:`GroupPlan`), rows get
    their group, weight and advantage (or are dropped with the plan's reason), and a group's rows share a split."""
    splitter = SplitAssigner(cfg.split)
    for index, table in policed_tables(cfg, groups, read_group, tally, rejects, on_group, once):
        by_group = False
        if grouping is not None:
            table = _apply_grouping(grouping, table, tally)
            by_group = grouping.key is not None
            if table.num_rows == 0:
                continue
        tally.add_table(table)
        for split, part in splitter.split_table(table, by="group_id" if by_group else "graph_id").items():
            if part.num_rows:
                tally.by_split[split] += part.num_rows
                yield index, split, part


def _apply_grouping(grouping: GroupPlan, table: pa.Table, tally: Tally) -> pa.Table:
    kept, dropped, reasons = grouping.apply(table)
    for row, reason in zip(
        dropped.select(["sample_id", "graph_id", "source", "num_tokens", "num_turns"]).to_pylist(), reasons, strict=True
    ):
        tally.group_dropped[reason] += 1
        tally.length_dropped_turns[reason] += row["num_turns"]
        tally.drops.append(
            {
                "reason": reason,
                **{k: row[k] for k in ("sample_id", "graph_id", "source", "num_tokens")},
                "turns": row["num_turns"],
                "group_by": grouping.key,
                "group_size": grouping.size,
            }
        )
    return kept


def plan_groups(cfg: ConvertConfig, groups: list[Group], read_group: ReadGroup) -> GroupPlan | None:
    """The ``rl`` target's group plan, from a first pass over the rows (only their ids, keys and rewards are kept);
    None for other targets."""
    if cfg.target != "rl":
        return None
    planner = GroupPlanner(cfg.group_by, cfg.group_size)
    for _, table in policed_tables(cfg, groups, read_group, Tally()):
        planner.observe(table)
    return planner.plan()


UNREADABLE = "unreadable"  # the reason of every input discovery or hashing could not read starts with this


def unreadable_count(ignored: list[dict[str, str]]) -> int:
    """How many inputs could not be read at all (a folder or file without permission, an I/O error): the command
    line shows the count and exits 3, as for rejected records."""
    return sum(1 for item in ignored if str(item.get("reason", "")).startswith(UNREADABLE))


def build_report(
    cfg: ConvertConfig, tally: Tally, tokenizer: dict[str, Any], ignored: list[dict[str, str]], outputs: dict[str, Any]
) -> dict[str, Any]:
    """``report.json``'s content (``tokenizer``: name, fingerprint, demo)."""
    stats, length = tally.stats, tally.length
    duplicates = tally.duplicates
    turns_dropped = stats.turns_dropped + tally.length_dropped_turns + Counter({DUPLICATE: duplicates.turns})
    tokens, engine_tokens = tally.tokens, tally.engine_tokens
    return {
        "msgtrain_version": __version__,
        "files": {"read": len(tally.sources), "unreadable": unreadable_count(ignored), "ignored": ignored},
        **accounting_report(
            stats.records_read,
            stats.records_converted,
            stats.records_rejected,
            stats.records_skipped,
            stats.graphs,
            stats.turns_found,
            stats.turns_trained - sum(tally.length_dropped_turns.values()) - duplicates.turns,
            turns_dropped,
            stats.turns_lost,
            stats.history_copies,
        ),
        "samples": {
            "written": tally.samples,
            "by_split": dict(sorted(tally.by_split.items())),
            "dropped_by_reason": dict(
                sorted((length.dropped_samples + Counter({DUPLICATE: duplicates.dropped_samples})).items())
            ),
            # Rows kept for their new turns, with a turn an earlier row trained masked off.
            "duplicate_turns_masked": duplicates.masked_samples,
            "length_policy": length.to_dict(),
        },
        **({"groups": tally.grouping} if tally.grouping is not None else {}),
        "behaviour": {
            "rows_with_complete_logprobs": tally.behaviour["rows_with_complete_logprobs"],
            "rows_naming_the_model_or_sampling": tally.behaviour["rows_naming_the_model_or_sampling"],
        },
        "cuts_by_reason": dict(sorted(tally.cuts.items())),
        "flags": dict(sorted(stats.flags.items())),
        "context_supplied": supplied_report(cfg.context, cfg.system_prompt, cfg.tools, tally.sources, stats.flags),
        "tokens": {
            "total": tokens,
            "trained": tally.trained_tokens,
            "engine": engine_tokens,
            "rendered": tokens - engine_tokens,
            "engine_share": round(engine_tokens / tokens, 6) if tokens else 0.0,
        },
        "by_policy": {k: dict(sorted(v.items())) for k, v in sorted(tally.by_policy.items())},
        "by_source": {k: dict(sorted(v.items())) for k, v in sorted(tally.by_source.items())},
        "tokenizer": tokenizer,
        "config": {
            "format": cfg.format,
            "target": cfg.target,
            "max_length": cfg.max_length,
            "overflow": cfg.overflow,
            "split": dict(cfg.split),
            "policies": list(cfg.policies),
        },
        "outputs": outputs,
    }


# -------------------------------------------------------------------------------------------- one task per shard
def distributable(cfg: ConvertConfig) -> bool:
    """Whether this dataset can be written one shard per task: Parquet of a row-wise target."""
    options = TargetOptions(pack_length=cfg.pack_length, tree_scope=cfg.tree_scope)
    # rl rows carry their trajectory's weight and group, planned over the whole dataset first (plan_groups)
    return bool(cfg.format == "parquet" and cfg.target != "rl" and is_row_wise(get_target(cfg.target), options))


@dataclass(frozen=True)
class ScanResult:
    """What a scan task returns: per group (in the order given), the rows of each split; and the accounting."""

    rows: list[dict[str, int]]
    tally: Tally


Decided = dict[str, frozenset[Position]]  # input file (its first part key) → its duplicate turns


def digest_groups(cfg: ConvertConfig, parts: PartsStore, groups: list[Group]) -> list[tuple[str, list[list[bytes]]]]:
    """Per group, the digests of its rows' trained turns, rows in assembly order (a task: the first pass of an
    assembly one shard per task, from which the driver decides the run's duplicate turns,
    :func:`~msgtrain.export.dedupe.decide`)."""
    out = []
    with parts.reading() as read_group:
        for group in groups:
            read = read_group(group)
            if len(group) == 1:
                tables: Iterable[pa.Table] = part_tables(read[0][1])
            else:
                tables = merge_chunk_tables([t for _, t, _ in read], cfg.row_group_size)
            out.append((group[0], [d for table in tables for d in turn_digests(table)]))
    return out


def digest_slice(
    cfg: ConvertConfig, parts: PartsStore, groups: list[Group], start: int, stop: int
) -> list[tuple[str, list[list[bytes]]]]:
    return digest_groups(cfg, parts, groups[start:stop])


def decide_duplicates(digests: list[list[tuple[str, list[list[bytes]]]]]) -> Decided:
    """The run's duplicate turns from the digest tasks' results (in batch order)."""
    return decide(item for batch in digests for item in batch)


def scan_groups(cfg: ConvertConfig, parts: PartsStore, groups: list[Group], decided: Decided) -> ScanResult:
    """Count the rows each group gives to each split (a task: reads parts, writes nothing); ``decided``: the run's
    duplicate turns."""
    tally = Tally()
    rows: list[dict[str, int]] = [{} for _ in groups]
    with parts.reading() as read_group:
        for index, split, table in assembly_tables(cfg, groups, read_group, tally, once=TrainedOnce(decided)):
            rows[index][split] = rows[index].get(split, 0) + table.num_rows
    return ScanResult(rows, tally)


@dataclass(frozen=True)
class ShardPlan:
    """Shard ``index`` of ``count`` of ``split``: rows [start, stop) of each of the groups listed."""

    split: str
    index: int
    count: int
    pieces: tuple[tuple[int, int, int], ...]  # (group index, start, stop) within the group's rows of the split

    @property
    def name(self) -> str:  # the name the sequential writer gives it
        return f"{DATA_DIR}/{self.split}-{self.index:05d}-of-{self.count:05d}.parquet"

    @property
    def rows(self) -> int:
        return sum(stop - start for _, start, stop in self.pieces)


def plan_shards(splits: list[str], rows: list[dict[str, int]], rows_per_shard: int) -> list[ShardPlan]:
    """Cut each split's row sequence (groups in order) into shards of ``rows_per_shard`` rows, the last shorter."""
    plans = []
    for split in splits:
        counts = [r.get(split, 0) for r in rows]
        total = sum(counts)
        count = math.ceil(total / rows_per_shard)
        group, offset = 0, 0  # the next row: ``offset`` within group ``group``
        for index in range(count):
            need = min(rows_per_shard, total - index * rows_per_shard)
            pieces = []
            while need:
                take = min(need, counts[group] - offset)
                if take:
                    pieces.append((group, offset, offset + take))
                need -= take
                offset += take
                if offset == counts[group]:
                    group, offset = group + 1, 0
            plans.append(ShardPlan(split, index, count, tuple(pieces)))
    return plans


@dataclass(frozen=True)
class ShardResult:
    """What a shard task returns: the shard's ``dataset_info`` figures and the writer's per-split counters."""

    info: ShardInfo
    samples: int
    tokens: int
    trained_tokens: int
    longest_sample_tokens: int


def write_shard(
    cfg: ConvertConfig, parts: PartsStore, groups: list[Group], plan: ShardPlan, dest: Path | str, decided: Decided
) -> ShardResult:
    """Write one shard into ``dest`` (the dataset's directory, or its prefix on a store) at ``plan.name`` (a
    task): read the groups ``plan`` names, keep its rows, write them as the sequential writer writes that shard
    (``decided``: the run's duplicate turns)."""
    wanted = {g: (start, stop) for g, start, stop in plan.pieces}
    order = sorted(wanted)
    with tempfile.TemporaryDirectory(prefix="msgtrain-shard-") as scratch, parts.reading() as read_group:
        root = Path(scratch)
        writer = DatasetWriter(
            root,
            format="parquet",
            target=cfg.target,
            pack_length=cfg.pack_length,
            tree_scope=cfg.tree_scope,
            rows_per_shard=plan.rows,  # the shard's end is where the sequential writer's room runs out
            row_group_size=cfg.row_group_size,
        )
        seen = dict.fromkeys(order, 0)
        chosen = [groups[g] for g in order]
        for local, split, table in assembly_tables(cfg, chosen, read_group, Tally(), once=TrainedOnce(decided)):
            if split != plan.split:
                continue
            g = order[local]
            start, stop = wanted[g]
            lo, hi = seen[g], seen[g] + table.num_rows
            seen[g] = hi
            if hi > start and lo < stop:
                writer.write(split, table.slice(max(start - lo, 0), min(stop, hi) - max(start, lo)))
        split = writer.close()["splits"][plan.split]
        assert len(split["files"]) == 1 and split["rows"] == plan.rows, split
        info = parquet_shard_info(plan.split, root / split["files"][0], plan.rows)
        put_file(root / split["files"][0], child(dest, plan.name))
    return ShardResult(info, split["samples"], split["tokens"], split["trained_tokens"], split["longest_sample_tokens"])


def shard_outputs(
    cfg: ConvertConfig, splits: list[str], plans: list[ShardPlan], results: list[ShardResult]
) -> dict[str, Any]:
    """The writer's summary (the report's ``outputs``) of a dataset written one shard per task."""
    out: dict[str, dict[str, Any]] = {}
    for name in splits:
        mine = [(p, r) for p, r in zip(plans, results, strict=True) if p.split == name]
        out[name] = {
            "rows": sum(p.rows for p, _ in mine),
            "samples": sum(r.samples for _, r in mine),
            "tokens": sum(r.tokens for _, r in mine),
            "trained_tokens": sum(r.trained_tokens for _, r in mine),
            "longest_sample_tokens": max((r.longest_sample_tokens for _, r in mine), default=0),
            "files": [p.name for p, _ in mine],
        }
    return {
        "format": cfg.format,
        "target": get_target(cfg.target).name,
        "files": sorted([p.name for p in plans] + [INFO_FILE]),
        "splits": out,
    }


def write_rejects(parts: PartsStore, groups: list[Group], dest: Path | str, keep_empty: bool) -> int:
    """Write the rejects of every group, in assembly order, to ``dest`` (a path, or an object's URL); return their
    count. Nothing is written when there are none, unless ``keep_empty`` (a user-named ``--rejects`` file)."""
    count = 0
    with tempfile.TemporaryDirectory(prefix="msgtrain-rejects-") as scratch:
        path = Path(scratch) / "rejects.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for group in groups:
                texts = [parts.rejects(key) for key in group]
                lines = merge_chunk_rejects(texts) if len(group) > 1 else texts[0].splitlines(keepends=True)
                for line in lines:
                    f.write(line)
                    count += 1
        if count or keep_empty:
            put_file(path, dest)
    return count


def write_drops(tally: Tally, dest: Path | str) -> str | None:
    """Write ``drops.jsonl`` (the samples the length policy dropped whole) into ``dest`` (a directory, or a prefix
    on a store); return its name relative to the dataset, or None when nothing was dropped (no file)."""
    if not tally.drops:
        return None
    with tempfile.TemporaryDirectory(prefix="msgtrain-drops-") as scratch:
        path = Path(scratch) / DROPS
        path.write_text("".join(json.dumps(d, sort_keys=True) + "\n" for d in tally.drops), encoding="utf-8")
        put_file(path, child(dest, DROPS))
    return DROPS


def scan_batches(groups: list[Group], tasks: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of ``groups`` for ``tasks`` scan tasks (contiguous, so results concatenate in order)."""
    tasks = max(1, min(tasks, len(groups)))
    size = math.ceil(len(groups) / tasks) if groups else 0
    return [(start, min(start + size, len(groups))) for start in range(0, len(groups), size)] if size else []


def write_metadata(
    target: str, splits: list[str], shards: list[ShardInfo], data: dict[str, Any], dest: Path | str
) -> None:
    """Write ``dataset_info.json`` and then ``report.json`` (last: its presence means the rest is there)."""
    with tempfile.TemporaryDirectory(prefix="msgtrain-meta-") as scratch:
        root = Path(scratch)
        write_parquet_info(root, get_target(target), splits, shards)
        (root / "report.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        for name in (INFO_FILE, "report.json"):
            put_file(root / name, child(dest, name))


def scan_slice(
    cfg: ConvertConfig, parts: PartsStore, groups: list[Group], start: int, stop: int, decided: Decided
) -> ScanResult:
    return scan_groups(cfg, parts, groups[start:stop], decided)


def check_accounting(report: dict[str, Any]) -> None:
    """The two identities every run must satisfy; raises AssertionError naming the broken one."""
    r = report["records"]
    assert r["read"] == r["converted"] + r["rejected"] + r["skipped"], f"records do not add up: {r}"
    assert sum(r["rejected_by_reason"].values()) == r["rejected"], r
    assert sum(r["skipped_by_reason"].values()) == r["skipped"], r
    t = report["turns"]
    assert t["found"] == t["trained"] + t["dropped"], f"turns do not add up: {t}"
    assert sum(t["dropped_by_reason"].values()) == t["dropped"], t


@dataclass(frozen=True)
class AssemblyJob:
    """What writing a dataset needs, wherever it runs (a Ray task receives it whole)."""

    cfg: ConvertConfig
    parts: PartsStore  # where the parts are
    groups: list[Group]  # the part keys of each input file, in assembly order
    dest: Path | str  # the staging directory or version prefix the dataset is written into (not published)
    rejects: Path | None  # a --rejects file of the user's; None: rejects.jsonl in the dataset
    ignored: list[dict[str, str]]  # inputs passed over, for the report
    tokenizer: dict[str, Any]  # the report's tokenizer entry (:func:`tokenizer_info`)
    previous_samples: int  # the samples of the dataset OUT shows now: an empty result may not replace them


def refuse_result(job: AssemblyJob, tally: Tally) -> None:
    """The checks a dataset must pass before it is written out in full: ``--max-reject-rate`` on every record of
    the run, and an empty result never replacing a dataset with samples (a run that converted nothing at all is
    refused afterwards, with its first reject: :func:`~msgtrain.run.empty_result.refuse_nothing_read`)."""
    check_reject_rate(job.cfg, tally.stats)
    if tally.stats.records_converted:
        refuse_empty_replacement(job.cfg, job.previous_samples, tally.samples)


def write_dataset(job: AssemblyJob, tok: Any = None, progress: ProgressHook | None = None) -> dict[str, Any]:
    """Write the dataset, its rejects and ``report.json`` (last) into ``job.dest``; return the report. Runs where
    it is called: on the driver, or as a task (``tok`` None: the tokenizer, which decodes cut reasons, is loaded
    there). Parts on a store are copied to local disk one input file at a time and memory-mapped, as local parts
    are; a dataset for a store is written to local disk (the writer needs files it can rename) and uploaded."""
    from msgtrain.export.split import SplitAssigner
    from msgtrain.export.writer import DatasetWriter

    cfg, groups = job.cfg, job.groups
    if tok is None:
        tok = load_tokenizer(cfg.tokenizer, cfg.chat_template)
    with writable_dir(job.dest, last=("report.json",)) as root, job.parts.reading() as read_group:
        writer = DatasetWriter(
            root,
            format=cfg.format,
            target=cfg.target,
            pack_length=cfg.pack_length,
            tree_scope=cfg.tree_scope,
            rows_per_shard=cfg.rows_per_shard,
            row_group_size=cfg.row_group_size,
            splits=SplitAssigner(cfg.split).names,
            decode=tok.decode,
            tokenizer=tok,
        )
        tally = Tally()
        total, done_parts = sum(map(len, groups)), 0

        def on_group(index: int) -> None:
            nonlocal done_parts
            done_parts += len(groups[index])
            if progress:
                figures = {"index": done_parts, "total": total, "samples": tally.samples, "tokens": tally.tokens}
                progress("assemble", figures)

        # A --rejects file of the user's is replaced whole, beside a marker (run/own_files.py), even when the
        # result is refused below: the rejects say why.
        grouping = plan_groups(cfg, groups, read_group)
        with own_file(job.rejects) if job.rejects else contextlib.nullcontext(root / REJECTS) as rejects_path:
            with open(rejects_path, "w", encoding="utf-8") as rejects:
                for _, split, table in assembly_tables(cfg, groups, read_group, tally, rejects, on_group, grouping):
                    writer.write(split, table)
            empty = rejects_path.stat().st_size == 0
        if grouping is not None:
            tally.grouping = grouping.report(tally.group_dropped)
        outputs = writer.close()
        refuse_result(job, tally)
        # Relative to OUT in report.json; the caller returns where it was published.
        outputs["drops"] = write_drops(tally, root)
        data = build_report(cfg, tally, job.tokenizer, job.ignored, outputs)
        check_accounting(data)
        if job.rejects is None and empty:
            (root / REJECTS).unlink()
        # report.json must not change between identical runs: timings live only in the returned report.
        write_report(root, data)
    return data


def tokenizer_info(tok: Any, content_format: str = "auto") -> dict[str, Any]:
    """The report's tokenizer entry; ``content_format`` is how list content reached the template (given or, for
    ``auto``, detected: msgtrain.linearize.content_format), ``content_format_detected`` what detection says."""
    template = getattr(tok, "chat_template", None) if not getattr(tok, "encodes_messages", False) else None
    detected = resolve_content_format("auto", template) if template else None
    return {
        "name": tok.name,
        "fingerprint": tok.fingerprint,
        "demo": tok.name == DEMO_TOKENIZER,
        "content_format": resolve_content_format(content_format, template) if template else None,
        "content_format_detected": detected,
    }


def write_report(root: Path, data: dict[str, Any]) -> None:
    (root / "report.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
