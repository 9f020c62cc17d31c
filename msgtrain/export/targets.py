"""Export targets: every trainer-facing layout is a view of the canonical sample table.

One interface, one table (:data:`TARGETS`). A target has a name, the Arrow schema of its rows, the trainers
that read it, and a converter factory: ``make_converter(options)`` returns an object whose ``convert(table)``
turns a batch of canonical rows (:data:`~msgtrain.export.schema.CANONICAL_SCHEMA`) into target rows and whose
``flush()`` returns rows still buffered (only packing buffers). Adding a target = one converter + one line in
the table.

Invariants (tested for every target):
- Conversions are vectorised over flat token arrays (no Python loop over tokens) and keep row order.
- ``labels[i] == -100`` exactly where the canonical ``loss_mask[i] == 0``, else ``labels[i] == input_ids[i]``.
- ``trl``'s ``completion_mask`` and ``assistant_masks``, and the ``canonical`` target's ``assistant_masks``, equal
  the canonical ``loss_mask``: no view handed to TRL's ``SFTTrainer`` with its defaults trains an untrained token.
- ``train_mask(target_rows)`` gives, per row, the token-aligned 0/1 mask of trained tokens (used by previews).
- Provenance columns are kept only where the trainers tolerate extra columns (see docs/export.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from msgtrain.errors import ConfigError
from msgtrain.export import arrays
from msgtrain.export.groups import GROUP_FIELDS, default_group_columns
from msgtrain.export.pack import IGNORE_INDEX, PACKED_SCHEMA, Packer
from msgtrain.export.preference import DPO_SCHEMA, KTO_SCHEMA, DpoConverter, KtoConverter, completion_mask
from msgtrain.export.schema import CANONICAL_SCHEMA, SPAN
from msgtrain.export.tree import TREE_SCHEMA, TreeConverter


@dataclass(frozen=True)
class TargetOptions:
    """Target knobs. ``pack_length`` is required by ``packed``, optional for ``tree`` (row length; without it
    one tree per row) and ignored elsewhere; ``tree_scope`` is read by ``tree`` only; ``tokenizer`` by ``dpo`` and
    ``kto`` only."""

    pack_length: int | None = None
    tree_scope: str = "graph"
    pack_buffer_rows: int = 16384
    pack_buffer_tokens: int = 32 * 1024 * 1024
    # The run's tokenizer (a TokenizerBundle or a transformers tokenizer): dpo and kto write text TRL tokenizes
    # back into exactly the row's ids, which they check with it.
    tokenizer: Any = None


class Converter(Protocol):
    """Turns canonical batches into target rows; ``flush`` returns what is still buffered at the end."""

    def convert(self, table: pa.Table) -> pa.Table: ...

    def flush(self) -> pa.Table: ...

    def stats(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    trainers: str
    schema: pa.Schema
    make_converter: Callable[[TargetOptions], Converter]
    train_mask: Callable[[pa.Table], pa.Array]
    """Token-aligned list<int8> mask of trained tokens for rows of this target's schema."""


class _RowWise:
    """Converter for targets whose output row is a function of one input row (no buffering)."""

    def __init__(self, convert: Callable[[pa.Table], pa.Table], schema: pa.Schema) -> None:
        self._convert = convert
        self._schema = schema

    def convert(self, table: pa.Table) -> pa.Table:
        return self._convert(table)

    def flush(self) -> pa.Table:
        return self._schema.empty_table()

    def stats(self) -> dict[str, Any]:
        return {}


def _check_canonical(table: pa.Table) -> None:
    missing = [f.name for f in CANONICAL_SCHEMA if f.name not in table.column_names]
    if missing:
        raise ConfigError(
            f"export expects canonical sample tables; missing columns {missing}",
            hint="build tables with msgtrain.export.schema.samples_to_table",
            code="not_canonical",
        )


def _mask_list(table: pa.Table, column: str) -> pa.Array:
    return arrays.as_array(table[column])


def _labels(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    offsets = arrays.offsets_of(table["input_ids"])
    ids = arrays.flat_values(table["input_ids"], np.int64)
    mask = arrays.flat_values(table["loss_mask"], np.int8)
    return offsets, np.where(mask.astype(bool), ids, IGNORE_INDEX)


# --- canonical ----------------------------------------------------------------------------------------------


# The canonical rows plus ``assistant_masks`` (= ``loss_mask``) right after ``loss_mask``: TRL's ``SFTTrainer``
# builds its labels from ``assistant_masks`` whatever its settings (``_prepare_dataset``, TRL 1.16) and otherwise
# trains every token, so the default output handed to it with its defaults trains exactly the loss mask.
_LOSS_MASK_AT = CANONICAL_SCHEMA.get_field_index("loss_mask")
CANONICAL_TARGET_SCHEMA = CANONICAL_SCHEMA.insert(
    _LOSS_MASK_AT + 1, CANONICAL_SCHEMA.field("loss_mask").with_name("assistant_masks")
)


def to_canonical(table: pa.Table) -> pa.Table:
    _check_canonical(table)
    rows = table.select([f.name for f in CANONICAL_SCHEMA]).cast(CANONICAL_SCHEMA)
    return rows.add_column(_LOSS_MASK_AT + 1, CANONICAL_TARGET_SCHEMA.field("assistant_masks"), rows["loss_mask"])


# --- labels: input_ids / attention_mask / labels ------------------------------------------------------------

LABELS_SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.int32())),
        ("attention_mask", pa.list_(pa.int8())),
        ("labels", pa.list_(pa.int64())),
    ]
)


def to_labels(table: pa.Table) -> pa.Table:
    """Exactly the three columns axolotl requires; LLaMA-Factory passes every column to its collator."""
    _check_canonical(table)
    offsets, labels = _labels(table)
    columns = {
        "input_ids": arrays.as_array(table["input_ids"]),
        "attention_mask": arrays.build_list(offsets, np.ones(labels.shape[0], dtype=np.int8), pa.int8()),
        "labels": arrays.build_list(offsets, labels, pa.int64()),
    }
    return pa.Table.from_arrays([columns[f.name] for f in LABELS_SCHEMA], schema=LABELS_SCHEMA)


def _labels_train_mask(table: pa.Table) -> pa.Array:
    offsets = arrays.offsets_of(table["labels"])
    labels = arrays.flat_values(table["labels"], np.int64)
    return arrays.build_list(offsets, (labels != IGNORE_INDEX).astype(np.int8), pa.int8())


# --- trl: input_ids + completion_mask + assistant_masks -----------------------------------------------------

PROVENANCE = [("sample_id", pa.string()), ("graph_id", pa.string()), ("source", pa.string())]

TRL_SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.int32())),
        ("completion_mask", pa.list_(pa.int8())),
        ("assistant_masks", pa.list_(pa.int8())),
        *PROVENANCE,
    ]
)


def to_trl(table: pa.Table) -> pa.Table:
    """Both masks equal ``loss_mask``: TRL always applies ``assistant_masks`` and applies ``completion_mask``
    only when ``completion_only_loss`` is on, so writing both trains the same tokens under either setting."""
    _check_canonical(table)
    mask = arrays.as_array(table["loss_mask"])
    columns = {
        "input_ids": arrays.as_array(table["input_ids"]),
        "completion_mask": mask,
        "assistant_masks": mask,
        **{name: arrays.as_array(table[name]) for name, _ in PROVENANCE},
    }
    return pa.Table.from_arrays([columns[f.name] for f in TRL_SCHEMA], schema=TRL_SCHEMA)


# --- rl: one row per sample with logprobs, reward, group and per-turn spans ---------------------------------

# The behaviour policy's model and sampling parameters (metadata ``behaviour``, msgtrain.linearize.behaviour) as
# columns: null where the log does not say, or where the row's trained turns were sampled differently.
BEHAVIOUR_FIELDS = [
    ("behaviour_model", pa.string()),
    ("temperature", pa.float64()),
    ("top_p", pa.float64()),
    ("top_k", pa.float64()),
]


RL_SCHEMA = pa.schema(
    [
        ("sample_id", pa.string()),
        ("graph_id", pa.string()),
        ("source", pa.string()),
        ("policy", pa.string()),
        ("group_id", pa.string()),
        ("input_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float32())),
        ("reward", pa.float64()),
        *[(f.name, f.type) for f in GROUP_FIELDS],
        ("prompt_length", pa.int32()),
        ("num_tokens", pa.int32()),
        ("num_trained_tokens", pa.int32()),
        ("logprobs_complete", pa.bool_()),
        *BEHAVIOUR_FIELDS,
        ("turn_ids", pa.list_(pa.string())),
        ("turn_spans", pa.list_(SPAN)),
        ("turn_group_ids", pa.list_(pa.string())),
        ("token_source", pa.string()),
        ("cut_reason", pa.string()),
        ("flags", pa.list_(pa.string())),
        ("metadata", pa.string()),
    ]
)


def to_rl(table: pa.Table) -> pa.Table:
    """Adds ``prompt_length`` (first trained token: ``input_ids[:prompt_length]`` is the prompt, the rest the
    response that ``loss_mask`` gates) and ``logprobs_complete`` (every trained token has an engine logprob,
    so the row can serve as off-policy data with behaviour logprobs) and the behaviour policy's model and sampling
    parameters where the log names them (:data:`BEHAVIOUR_FIELDS`). ``trajectory_id``, ``weight`` and
    ``advantage`` come from the run's group plan (:mod:`msgtrain.export.groups`); rows converted without one get
    ``weight`` = 1 / the trajectory's rows in this batch and no advantage."""
    _check_canonical(table)
    n = table.num_rows
    num_tokens = arrays.lengths_of(table["input_ids"])
    span_offsets = arrays.offsets_of(table["turn_spans"])
    span_starts = np.asarray(
        pc.struct_field(pc.list_flatten(arrays.as_array(table["turn_spans"])), "start").to_numpy(zero_copy_only=False),
        dtype=np.int64,
    )
    has_turn = np.diff(span_offsets) > 0
    first_start = num_tokens.copy()
    first_start[has_turn] = span_starts[span_offsets[:-1][has_turn]]

    trained = arrays.per_row_sum(
        arrays.flat_values(table["loss_mask"], np.int64), arrays.offsets_of(table["loss_mask"])
    )

    columns: dict[str, Any] = {
        name: arrays.as_array(table[name]) for name in RL_SCHEMA.names if name in table.column_names
    }
    if "weight" not in table.column_names:
        columns.update(default_group_columns(table))
    columns["prompt_length"] = pa.array(first_start, type=pa.int32())
    columns["num_tokens"] = pa.array(num_tokens, type=pa.int32())
    columns["num_trained_tokens"] = pa.array(trained, type=pa.int32())
    columns["logprobs_complete"] = pa.array(logprobs_complete(table) if n else np.zeros(0, bool))
    columns.update(behaviour_columns(table))
    return pa.Table.from_arrays([columns[f.name] for f in RL_SCHEMA], schema=RL_SCHEMA)


def logprobs_complete(table: pa.Table) -> np.ndarray:
    """Per canonical row: it trains tokens and every trained token has an engine logprob."""
    lp_offsets = arrays.offsets_of(table["logprobs"])
    flat = pc.list_flatten(arrays.as_array(table["logprobs"]))
    if flat.null_count == len(flat):  # no logprob anywhere (the usual case): no row is complete, nothing to count
        return np.zeros(lp_offsets.shape[0] - 1, dtype=bool)
    with_logprob = arrays.per_row_sum(pc.is_valid(flat).to_numpy(zero_copy_only=False), lp_offsets)
    trained = arrays.per_row_sum(arrays.flat_values(table["loss_mask"], np.int8), arrays.offsets_of(table["loss_mask"]))
    return np.asarray((with_logprob == trained) & (trained > 0), dtype=bool)


def behaviour_columns(table: pa.Table) -> dict[str, pa.Array]:
    values: dict[str, list[Any]] = {name: [] for name, _ in BEHAVIOUR_FIELDS}
    for text in table["metadata"].to_pylist():
        found = json.loads(text).get("behaviour") if text and '"behaviour"' in text else None
        found = found if isinstance(found, dict) else {}
        for name, _ in BEHAVIOUR_FIELDS:
            values[name].append(found.get("model" if name == "behaviour_model" else name))
    return {name: pa.array(values[name], type=typ) for name, typ in BEHAVIOUR_FIELDS}


# --- the registry -------------------------------------------------------------------------------------------


def _packed_converter(options: TargetOptions) -> Converter:
    if options.pack_length is None:
        raise ConfigError(
            "the packed target needs a pack length",
            hint="pass --pack-length N (or pack_length: N in the config)",
            code="missing_pack_length",
        )
    return _CheckedPacker(options.pack_length, options.pack_buffer_rows, options.pack_buffer_tokens)


class _CheckedPacker(Packer):
    def convert(self, table: pa.Table) -> pa.Table:
        _check_canonical(table)
        return super().convert(table)


class _CheckedTree(TreeConverter):
    def convert(self, table: pa.Table) -> pa.Table:
        _check_canonical(table)
        return super().convert(table)


class _CheckedDpo(DpoConverter):
    def convert(self, table: pa.Table) -> pa.Table:
        _check_canonical(table)
        return super().convert(table)


class _CheckedKto(KtoConverter):
    def convert(self, table: pa.Table) -> pa.Table:
        _check_canonical(table)
        return super().convert(table)


def _tree_converter(options: TargetOptions) -> Converter:
    return _CheckedTree(options.pack_length, options.tree_scope, options.pack_buffer_rows, options.pack_buffer_tokens)


TARGETS: dict[str, Target] = {
    t.name: t
    for t in [
        Target(
            name="canonical",
            description="every canonical column: ids, loss mask (also as assistant_masks), logprobs, turns, provenance",
            trainers="TRL SFTTrainer (defaults: labels from assistant_masks); msgtrain's own format; custom loaders",
            schema=CANONICAL_TARGET_SCHEMA,
            make_converter=lambda _options: _RowWise(to_canonical, CANONICAL_TARGET_SCHEMA),
            train_mask=lambda table: _mask_list(table, "loss_mask"),
        ),
        Target(
            name="labels",
            description="input_ids, attention_mask, labels (-100 where not trained)",
            trainers="TRL SFTTrainer (pre-tokenized), axolotl (pre-tokenized), LLaMA-Factory tokenized_path",
            schema=LABELS_SCHEMA,
            make_converter=lambda _options: _RowWise(to_labels, LABELS_SCHEMA),
            train_mask=_labels_train_mask,
        ),
        Target(
            name="trl",
            description="input_ids + completion_mask + assistant_masks, plus sample_id/graph_id/source",
            trainers="TRL SFTTrainer (pre-tokenized dataset, labels built from the masks)",
            schema=TRL_SCHEMA,
            make_converter=lambda _options: _RowWise(to_trl, TRL_SCHEMA),
            train_mask=lambda table: _mask_list(table, "completion_mask"),
        ),
        Target(
            name="packed",
            description="best-fit-decreasing packs: input_ids, loss_mask (label-aligned), seq_start_id, "
            "labels, seq_lengths, position_ids, sample_ids",
            trainers="NeMo / Megatron-Bridge packed Parquet, TRL padding_free",
            schema=PACKED_SCHEMA,
            make_converter=_packed_converter,
            train_mask=_labels_train_mask,
        ),
        Target(
            name="rl",
            description="one row per sample: ids, loss_mask, logprobs, reward, group_id, trajectory_id, weight, "
            "advantage, prompt_length, turns",
            trainers="GRPO/PPO-style trainers (verl, OpenRLHF, SkyRL, custom loops)",
            schema=RL_SCHEMA,
            make_converter=lambda _options: _RowWise(to_rl, RL_SCHEMA),
            train_mask=lambda table: _mask_list(table, "loss_mask"),
        ),
        Target(
            name="tree",
            description="prefix-tree rows: each graph's samples as one trie, shared prefixes once, with "
            "position_ids, parent_index and subtree_end for the tree attention mask",
            trainers="trainers with tree attention (msgtrain.trainers.tree: 4D mask / FlexAttention)",
            schema=TREE_SCHEMA,
            make_converter=_tree_converter,
            train_mask=lambda table: _mask_list(table, "loss_mask"),
        ),
        Target(
            name="dpo",
            description="preference pairs: prompt/chosen/rejected text that tokenizes back to the logged ids, plus "
            "prompt_ids/chosen_ids/rejected_ids, sample ids, rewards",
            trainers="TRL DPOTrainer (defaults), OpenRLHF preference datasets (prompt/chosen/rejected keys)",
            schema=DPO_SCHEMA,
            make_converter=lambda options: _CheckedDpo(options.tokenizer),
            train_mask=completion_mask("chosen_ids"),
        ),
        Target(
            name="kto",
            description="judged replies: prompt/completion text that tokenizes back to the logged ids, label, plus "
            "prompt_ids/completion_ids",
            trainers="TRL KTOTrainer (defaults; it builds its KL column), OpenRLHF KTO datasets",
            schema=KTO_SCHEMA,
            make_converter=lambda options: _CheckedKto(options.tokenizer),
            train_mask=completion_mask("completion_ids"),
        ),
    ]
}


def get_target(name: str) -> Target:
    """The registered target ``name``; a ConfigError listing the valid names otherwise."""
    try:
        return TARGETS[name]
    except KeyError:
        raise ConfigError(
            f"unknown target {name!r}",
            hint=f"choose one of: {', '.join(TARGETS)}",
            code="unknown_target",
        ) from None


def is_row_wise(target: Target, options: TargetOptions) -> bool:
    """Whether each output row of ``target`` is a function of one canonical row (no packing buffer, no tree):
    then any run of rows can be converted on its own, so shards can be written independently."""
    try:
        return isinstance(target.make_converter(options), _RowWise)
    except ConfigError:
        return False
