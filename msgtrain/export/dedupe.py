"""Trained once per run: a (context, reply) pair already trained by an earlier row of the run is not trained again.

Logs repeat what was sampled once: a client re-sends the whole history with every call, files are cumulative
snapshots of one conversation (round 1 ⊂ round 2 ⊂ …), a cassette records an interaction twice. Within one graph
the linearizer already trains each turn once (turns that share a prefix share a sample); across graphs, records and
files of a run this module does, whatever reader produced the rows.

A trained turn's key is a digest of its tokens: the sample's ids up to the end of the turn's completion and where
the completion starts (so the same reply after another context, or the same tokens split otherwise, is another
turn). Only digests are kept (16 bytes a turn), never the texts.

Invariants:
- Deterministic: rows are judged in the run's assembly order (sorted parts, a file's chunks in order), the first
  occurrence is trained and every later one is a duplicate, so the result does not depend on workers, scheduling or
  ``--resume`` (reused parts are read like new ones).
- A duplicate turn in a row that also trains new turns has its loss mask off and leaves the row's ``turn_ids`` /
  ``turn_spans`` (the row is flagged ``duplicate_turn_masked``); a row left with no trained turn is dropped
  (reason ``duplicate``). Each duplicate turn is counted once as a dropped turn (``duplicate``), so the books
  balance: ``found == trained + dropped``.
- A row carrying a reward is a rollout of its own (RL groups count identical rollouts each): it is never judged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from msgtrain.export import arrays
from msgtrain.export.schema import Sample, samples_to_table

DUPLICATE = "duplicate"  # the reason of a dropped duplicate turn, and of a sample dropped with nothing new left
MASKED_FLAG = "duplicate_turn_masked"  # a row that keeps its new turns and no longer trains a duplicate one

Position = tuple[int, int]  # (row within its input file's rows, in order; the turn's index in the row)


def turn_digests(table: pa.Table) -> list[list[bytes]]:
    """Per row, the digest of each trained turn (empty for a row with a reward: never judged)."""
    offsets = arrays.offsets_of(table["input_ids"])
    ids = arrays.flat_values(table["input_ids"], np.int32)
    rewards = table.column("reward").to_pylist()
    spans = table.column("turn_spans").to_pylist()
    out: list[list[bytes]] = []
    for row, row_spans in enumerate(spans):
        if rewards[row] is not None:
            out.append([])
            continue
        lo = int(offsets[row])
        h = hashlib.blake2b(digest_size=16)
        done = 0
        digests = []
        for span in row_spans:
            start, end = int(span["start"]), int(span["end"])
            h.update(ids[lo + done : lo + end].data)  # the slice's buffer: a long turn's ids are not copied
            done = end
            turn = h.copy()
            turn.update(start.to_bytes(8, "little"))
            digests.append(turn.digest())
        out.append(digests)
    return out


@dataclass
class DuplicateCount:
    """What dropping duplicates did (summed across files, batches and workers)."""

    turns: int = 0  # duplicate turns not trained
    masked_samples: int = 0  # rows kept for their new turns
    dropped_samples: int = 0  # rows left with nothing new

    def merge(self, other: DuplicateCount) -> None:
        self.turns += other.turns
        self.masked_samples += other.masked_samples
        self.dropped_samples += other.dropped_samples


class TrainedOnce:
    """The run's judge: remembers the digest of every turn trained so far, in assembly order.

    ``decided`` (input file → the positions of its duplicate turns) replays decisions made before (a task that
    writes one shard of a dataset whose decisions the driver took over all files, :func:`decide`) instead of
    judging."""

    def __init__(self, decided: dict[str, frozenset[Position]] | None = None) -> None:
        self.seen: set[bytes] = set()
        self.decided = decided

    def duplicates(self, file: str, table: pa.Table, first_row: int) -> set[Position]:
        """The positions of the duplicate turns of ``table`` (rows ``first_row``… of input file ``file``)."""
        if self.decided is not None:
            mine = self.decided.get(file, frozenset())
            last = first_row + table.num_rows
            return {p for p in mine if first_row <= p[0] < last}
        found: set[Position] = set()
        for row, digests in enumerate(turn_digests(table)):
            for turn, digest in enumerate(digests):
                if digest in self.seen:
                    found.add((first_row + row, turn))
                else:
                    self.seen.add(digest)
        return found

    def apply(
        self, file: str, table: pa.Table, first_row: int, count: DuplicateCount, drops: list[dict[str, Any]]
    ) -> pa.Table:
        """``table`` without its duplicate turns: masked off in rows that keep new turns, rows left without any
        dropped (a record each appended to ``drops``, as ``drops.jsonl`` lists them); counted into ``count``."""
        found = self.duplicates(file, table, first_row)
        if not found:
            return table
        by_row: dict[int, set[int]] = {}
        for row, turn in found:
            by_row.setdefault(row - first_row, set()).add(turn)
        pieces: list[pa.Table] = []
        kept_from = 0
        # A row left with nothing new is recorded from these columns alone (no Sample of its tokens is made).
        heads = table.select(["sample_id", "graph_id", "source", "turn_ids"]).to_pylist()
        lengths = arrays.lengths_of(table["input_ids"])
        for row in sorted(by_row):
            if row > kept_from:
                pieces.append(table.slice(kept_from, row - kept_from))
            kept_from = row + 1
            count.turns += len(by_row[row])
            head = heads[row]
            if len(by_row[row]) == len(head["turn_ids"]):  # every turn a duplicate: the row goes
                count.dropped_samples += 1
                drops.append(_drop_record(head, int(lengths[row])))
                continue
            sample = _sample(table, row)
            left = _without_turns(sample, by_row[row])
            assert left is not None  # it keeps a turn that is not a duplicate
            count.masked_samples += 1
            pieces.append(samples_to_table([left]))
        if kept_from < table.num_rows:
            pieces.append(table.slice(kept_from))
        pieces = [p.cast(table.schema) for p in pieces if p.num_rows]
        return pa.concat_tables(pieces) if pieces else table.schema.empty_table()


def decide(files: Iterable[tuple[str, list[list[bytes]]]]) -> dict[str, frozenset[Position]]:
    """The positions of every input file's duplicate turns, from each file's :func:`turn_digests` of its rows in
    assembly order, files in assembly order: what :class:`TrainedOnce` finds reading the rows one file after the
    other."""
    seen: set[bytes] = set()
    out: dict[str, frozenset[Position]] = {}
    for file, rows in files:
        found = set()
        for row, digests in enumerate(rows):
            for turn, digest in enumerate(digests):
                if digest in seen:
                    found.add((row, turn))
                else:
                    seen.add(digest)
        if found:
            out[file] = frozenset(found)
    return out


_TOKEN_COLUMNS = ("input_ids", "loss_mask", "logprobs")


def _token_values(one: pa.Table, name: str, dtype: Any) -> np.ndarray:
    """The values of a one-row table's list column as numpy, nulls as NaN (without a Python object per token)."""
    values = one.column(name).combine_chunks().flatten()
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=dtype)


def _sample(table: pa.Table, row: int) -> Sample:
    one = table.slice(row, 1)
    r = one.drop_columns([c for c in _TOKEN_COLUMNS if c in one.column_names]).to_pylist()[0]
    return Sample(
        sample_id=r["sample_id"],
        graph_id=r["graph_id"],
        source=r["source"],
        policy=r["policy"],
        input_ids=_token_values(one, "input_ids", np.int32),
        loss_mask=_token_values(one, "loss_mask", np.int8),
        logprobs=_token_values(one, "logprobs", np.float32),
        turn_ids=list(r["turn_ids"]),
        turn_spans=[(s["start"], s["end"]) for s in r["turn_spans"]],
        turn_group_ids=list(r["turn_group_ids"]),
        group_id=r["group_id"],
        cut_reason=r["cut_reason"],
        engine_tokens=r["engine_tokens"],
        reward=r["reward"],
        flags=list(r["flags"]),
        metadata=json.loads(r["metadata"]) if r["metadata"] else {},
    )


def _without_turns(sample: Sample, drop: set[int]) -> Sample | None:
    keep = [i for i in range(len(sample.turn_ids)) if i not in drop]
    if not keep:
        return None
    mask, logprobs = sample.loss_mask.copy(), sample.logprobs.copy()
    for i in drop:
        a, b = sample.turn_spans[i]
        mask[a:b] = 0
        logprobs[a:b] = np.nan
    sample.loss_mask, sample.logprobs = mask, logprobs
    sample.turn_ids = [sample.turn_ids[i] for i in keep]
    sample.turn_spans = [sample.turn_spans[i] for i in keep]
    sample.turn_group_ids = [sample.turn_group_ids[i] for i in keep]
    sample.flags = sorted({*sample.flags, MASKED_FLAG})
    return sample


def _drop_record(head: dict[str, Any], num_tokens: int) -> dict[str, Any]:
    """The ``drops.jsonl`` record of a row dropped whole (``head``: its ids, source and turn ids)."""
    return {
        "reason": DUPLICATE,
        "sample_id": head["sample_id"],
        "graph_id": head["graph_id"],
        "source": head["source"],
        "num_tokens": num_tokens,
        "turns": len(head["turn_ids"]),
    }
