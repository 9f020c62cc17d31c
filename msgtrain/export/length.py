"""``--max-length N`` with ``--overflow drop|truncate|split``: what happens to samples longer than N tokens.

Policies (only samples with more than N tokens are touched; the rest pass through unchanged, in order):

- ``drop`` (default): the sample is dropped (reason ``too_long``); its turns count as dropped turns
  (``sample_too_long``).
- ``truncate``: the row is cut to its first N tokens. A trained turn that crosses N would be trained on a
  partial completion, so its loss is zeroed and it is reported as a dropped turn (``truncated``); turns that
  start at or after N are dropped the same way. With ``allow_partial_turns`` the crossing turn keeps its first
  tokens trained instead (flag ``partial_turn``). A row left with no trained turn is dropped
  (``no_turn_fits``). Kept rows are flagged ``truncated``.
- ``split``: the sample becomes several rows, each training a run of consecutive turns exactly once. The first
  row is the conversation prefix up to the end of the last turn ending within N tokens, so it starts at the
  conversation start, as the model saw it. A turn ending after N cannot be trained with its whole prefix
  inside N tokens; its row is the window of N tokens ending where the turn (and any following turns that fit)
  ends. Such a row loses the start of the conversation: it is flagged ``prefix_dropped`` and its metadata
  records ``msgtrain_split.offset``, the number of leading tokens cut. A single turn longer than N is dropped
  (``turn_too_long``). Every row of a split sample is flagged ``split`` and gets the id
  ``{sample_id}#{part}``.

Invariants (tested with hypothesis):
- Every output row has at most N tokens; every row satisfies the canonical invariants (``check_sample``).
- Token-exactness: every output row's ``input_ids`` is a contiguous slice of the original sample's ids; a row
  not flagged ``prefix_dropped`` starts at the original's first token.
- Accounting: ``turns_in == turns_out + sum(dropped_turns)`` and every trained turn is trained in exactly one
  output row or counted as dropped with a reason; every sample is either in the output or in
  ``dropped_samples`` with a reason, and listed (ids, length) in the result's ``dropped`` records.

``engine_tokens`` of a cut row is exact for all-engine and all-rendered samples; for ``mixed`` samples the
canonical record does not say which tokens came from the engine, so the count is scaled to the row's length
and kept strictly between 0 and the row length (the row stays ``mixed``).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np
import pyarrow as pa

from msgtrain.errors import ConfigError
from msgtrain.export import arrays
from msgtrain.export.schema import CANONICAL_SCHEMA, Sample, samples_to_table

Overflow = Literal["drop", "truncate", "split"]  # the type config files and the CLI validate against
OVERFLOW_POLICIES: tuple[str, ...] = ("drop", "truncate", "split")


@dataclass(frozen=True)
class LengthPolicy:
    """What to do with samples longer than ``max_length`` (``None`` = no limit)."""

    max_length: int | None = None
    overflow: str = "drop"  # one of OVERFLOW_POLICIES, checked at construction
    allow_partial_turns: bool = False

    def __post_init__(self) -> None:
        if self.overflow not in OVERFLOW_POLICIES:
            raise ConfigError(
                f"unknown overflow policy {self.overflow!r}",
                hint=f"choose one of: {', '.join(OVERFLOW_POLICIES)}",
            )
        if self.max_length is not None and self.max_length < 1:
            raise ConfigError(f"max_length must be a positive number of tokens, got {self.max_length}")


@dataclass
class LengthStats:
    """Counters the pipeline puts in the report; ``merge`` adds the counters of another batch or worker."""

    samples_in: int = 0
    rows_out: int = 0
    turns_in: int = 0
    turns_out: int = 0
    over_length: int = 0
    truncated_samples: int = 0
    partial_turns: int = 0
    split_samples: int = 0
    split_rows: int = 0
    prefix_dropped_rows: int = 0
    dropped_samples: Counter[str] = field(default_factory=Counter)
    dropped_turns: Counter[str] = field(default_factory=Counter)

    def merge(self, other: LengthStats) -> None:
        for name in (
            "samples_in",
            "rows_out",
            "turns_in",
            "turns_out",
            "over_length",
            "truncated_samples",
            "partial_turns",
            "split_samples",
            "split_rows",
            "prefix_dropped_rows",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.dropped_samples.update(other.dropped_samples)
        self.dropped_turns.update(other.dropped_turns)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: v for k, v in self.__dict__.items() if not isinstance(v, Counter)}
        out["dropped_samples"] = dict(sorted(self.dropped_samples.items()))
        out["dropped_turns"] = dict(sorted(self.dropped_turns.items()))
        return out


class LengthResult(NamedTuple):
    """What one call did: the rows to write, the drops of this call by reason, and one record per sample it
    dropped whole (``reason``, ``sample_id``, ``graph_id``, ``source``, ``num_tokens``, ``turns``,
    ``max_length``), in input order, for the run's ``drops.jsonl``."""

    table: pa.Table
    dropped_samples: Counter[str]
    dropped_turns: Counter[str]
    dropped: list[dict[str, Any]]


def apply_length_policy(
    table: pa.Table,
    *,
    max_length: int | None,
    overflow: str = "drop",
    allow_partial_turns: bool = False,
    stats: LengthStats | None = None,
) -> LengthResult:
    """Apply the length policy to a canonical table; returns the rows to write and this call's drops.

    ``stats``, when given, accumulates every counter across calls (the report's ``length`` section). Rows
    within the limit are kept as they are (one vectorised filter); only over-long rows are rebuilt, sample by
    sample, with numpy slices. The output keeps input order, with the parts of a split sample in place of the sample.
    """
    policy = LengthPolicy(max_length, overflow, allow_partial_turns)
    call = LengthStats()
    dropped: list[dict[str, Any]] = []
    result = _apply(table.select(CANONICAL_SCHEMA.names).cast(CANONICAL_SCHEMA), policy, call, dropped)
    if stats is not None:
        stats.merge(call)
    return LengthResult(result, call.dropped_samples, call.dropped_turns, dropped)


def _drop_record(table: pa.Table, index: int, reason: str, limit: int) -> dict[str, Any]:
    row = table.slice(index, 1).select(["sample_id", "graph_id", "source", "num_tokens", "num_turns"]).to_pylist()[0]
    return {
        "reason": reason,
        "sample_id": row["sample_id"],
        "graph_id": row["graph_id"],
        "source": row["source"],
        "num_tokens": row["num_tokens"],
        "turns": row["num_turns"],
        "max_length": limit,
    }


def _apply(table: pa.Table, policy: LengthPolicy, stats: LengthStats, dropped: list[dict[str, Any]]) -> pa.Table:
    n_turns = arrays.lengths_of(table["turn_ids"])
    stats.samples_in += table.num_rows
    stats.turns_in += int(n_turns.sum())
    if policy.max_length is None or table.num_rows == 0:
        stats.rows_out += table.num_rows
        stats.turns_out += int(n_turns.sum())
        return table

    limit = policy.max_length
    over = arrays.lengths_of(table["input_ids"]) > limit
    n_over = int(over.sum())
    stats.over_length += n_over
    fits = table.filter(pa.array(~over)) if n_over else table
    if n_over == 0 or policy.overflow == "drop":
        if n_over:
            stats.dropped_samples["too_long"] += n_over
            stats.dropped_turns["sample_too_long"] += int(n_turns[over].sum())
            dropped.extend(_drop_record(table, i, "too_long", limit) for i in np.flatnonzero(over).tolist())
        stats.rows_out += fits.num_rows
        stats.turns_out += int(n_turns[~over].sum())
        return fits

    over_index = np.flatnonzero(over)
    rebuilt: list[Sample] = []
    rebuilt_from: list[int] = []
    over_samples = _samples_of(table.take(pa.array(over_index)))
    for position, sample in zip(over_index.tolist(), over_samples, strict=True):
        if policy.overflow == "truncate":
            parts = _truncate(sample, limit, policy.allow_partial_turns, stats)
        else:
            parts = _split(sample, limit, stats)
        if not parts:
            dropped.append(_drop_record(table, position, "no_turn_fits", limit))
        rebuilt.extend(parts)
        rebuilt_from.extend([position] * len(parts))

    stats.rows_out += fits.num_rows + len(rebuilt)
    stats.turns_out += int(n_turns[~over].sum()) + sum(len(s.turn_ids) for s in rebuilt)
    if not rebuilt:
        return fits
    combined = pa.concat_tables([fits, samples_to_table(rebuilt)])
    source_position = np.concatenate((np.flatnonzero(~over), np.asarray(rebuilt_from, dtype=np.int64)))
    return combined.take(pa.array(np.argsort(source_position, kind="stable")))


def _samples_of(table: pa.Table) -> list[Sample]:
    """Canonical rows → :class:`Sample` objects whose arrays are numpy views of the flat columns."""
    offsets = arrays.offsets_of(table["input_ids"])
    ids = arrays.flat_values(table["input_ids"], np.int32)
    mask = arrays.flat_values(table["loss_mask"], np.int8)
    logprobs = arrays.flat_values(table["logprobs"], np.float32)
    scalars = table.drop_columns(["input_ids", "loss_mask", "logprobs"]).to_pylist()
    samples = []
    for i, row in enumerate(scalars):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        samples.append(
            Sample(
                sample_id=row["sample_id"],
                graph_id=row["graph_id"],
                source=row["source"],
                policy=row["policy"],
                input_ids=ids[lo:hi],
                loss_mask=mask[lo:hi],
                logprobs=logprobs[lo:hi],
                turn_ids=list(row["turn_ids"]),
                turn_spans=[(int(s["start"]), int(s["end"])) for s in row["turn_spans"]],
                turn_group_ids=list(row["turn_group_ids"]),
                group_id=row["group_id"],
                cut_reason=row["cut_reason"],
                engine_tokens=int(row["engine_tokens"]),
                reward=row["reward"],
                flags=list(row["flags"]),
                metadata=json.loads(row["metadata"]) if row["metadata"] else {},
            )
        )
    return samples


def _engine_tokens(sample: Sample, new_length: int) -> int:
    if sample.token_source != "mixed" or new_length < 2:
        return new_length if sample.token_source == "engine" else min(sample.engine_tokens, new_length)
    scaled = round(sample.engine_tokens * new_length / max(sample.num_tokens, 1))
    return int(min(max(scaled, 1), new_length - 1))


def _row(
    sample: Sample, start: int, end: int, turns: list[int], spans: list[tuple[int, int]], **changes: Any
) -> Sample:
    """A row of ``sample``'s tokens [start, end) training ``turns`` on the given (row-relative) spans."""
    mask = np.zeros(end - start, dtype=np.int8)
    for a, b in spans:
        mask[a:b] = 1
    logprobs = sample.logprobs[start:end].copy()
    logprobs[mask == 0] = np.nan  # canonical rule: logprobs only on trained tokens
    aligned_groups = len(sample.turn_group_ids) == len(sample.turn_ids)
    fields: dict[str, Any] = {
        "sample_id": sample.sample_id,
        "graph_id": sample.graph_id,
        "source": sample.source,
        "policy": sample.policy,
        "input_ids": sample.input_ids[start:end],
        "loss_mask": mask,
        "logprobs": logprobs,
        "turn_ids": [sample.turn_ids[t] for t in turns],
        "turn_spans": spans,
        "turn_group_ids": [sample.turn_group_ids[t] for t in turns] if aligned_groups else sample.turn_group_ids,
        "group_id": sample.group_id,
        "cut_reason": sample.cut_reason,
        "engine_tokens": _engine_tokens(sample, end - start),
        "reward": sample.reward,
        "flags": list(sample.flags),
        "metadata": dict(sample.metadata),
    }
    fields.update(changes)
    return Sample(**fields)


def _truncate(sample: Sample, limit: int, allow_partial: bool, stats: LengthStats) -> list[Sample]:
    kept: list[int] = []
    spans: list[tuple[int, int]] = []
    flags = [*sample.flags, "truncated"]
    for t, (start, end) in enumerate(sample.turn_spans):
        if end <= limit:
            kept.append(t)
            spans.append((start, end))
        elif start < limit and allow_partial:
            kept.append(t)
            spans.append((start, limit))
            stats.partial_turns += 1
            flags.append("partial_turn")
        else:
            stats.dropped_turns["truncated"] += 1
    if not kept:
        stats.dropped_samples["no_turn_fits"] += 1
        return []
    stats.truncated_samples += 1
    return [_row(sample, 0, limit, kept, spans, flags=flags)]


def _split(sample: Sample, limit: int, stats: LengthStats) -> list[Sample]:
    spans = sample.turn_spans
    windows: list[tuple[int, int, list[int]]] = []  # (row start, row end, trained turns)
    t = 0
    while t < len(spans):
        first_start, first_end = spans[t]
        if first_end - first_start > limit:
            stats.dropped_turns["turn_too_long"] += 1
            t += 1
            continue
        # Turns ending within the limit share the one row that keeps the conversation start; after that, a row
        # is the window of `limit` tokens ending at the last turn m whose window still reaches back to turn t.
        keeps_prefix = first_end <= limit
        bound = limit if keeps_prefix else first_start + limit
        last = t
        while last + 1 < len(spans) and spans[last + 1][1] <= bound:
            last += 1
        row_end = spans[last][1]
        row_start = 0 if keeps_prefix else row_end - limit
        windows.append((row_start, row_end, list(range(t, last + 1))))
        t = last + 1
    if not windows:
        stats.dropped_samples["no_turn_fits"] += 1
        return []

    stats.split_samples += 1
    stats.split_rows += len(windows)
    rows = []
    for part, (row_start, row_end, turns) in enumerate(windows):
        flags = [*sample.flags, "split"]
        if row_start > 0:
            flags.append("prefix_dropped")
            stats.prefix_dropped_rows += 1
        metadata = {
            **sample.metadata,
            "msgtrain_split": {
                "of": sample.sample_id,
                "part": part,
                "parts": len(windows),
                "offset": row_start,
            },
        }
        row_spans = [(spans[u][0] - row_start, spans[u][1] - row_start) for u in turns]
        rows.append(
            _row(
                sample,
                row_start,
                row_end,
                turns,
                row_spans,
                sample_id=f"{sample.sample_id}#{part}",
                flags=flags,
                metadata=metadata,
            )
        )
    return rows
