"""Export stage: targets, length policy, splits, writer formats and the run config.

Canonical tables are built from synthetic :class:`Sample` objects (hypothesis draws turn layouts and lengths),
every target × format is written and loaded back with ``datasets``, and the trainer-facing invariants are checked
on what ``datasets`` returns: labels are -100 exactly where the loss mask is 0, packed rows never mix two samples
inside one sequence's positions, splits are disjoint by conversation, parquet rewrites are byte-identical.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msgtrain.errors import ConfigError, OutputError
from msgtrain.export.length import LengthStats, apply_length_policy
from msgtrain.export.pack import PACKED_SCHEMA, Packer, best_fit_decreasing, pack_table
from msgtrain.export.schema import CANONICAL_SCHEMA, Sample, check_sample, samples_to_table
from msgtrain.export.split import SplitAssigner, assign_splits, graph_fraction, parse_split_spec, split_table
from msgtrain.export.targets import TARGETS, TargetOptions, get_target
from msgtrain.export.writer import PLAIN_COLUMNS, DatasetWriter
from msgtrain.run.config import (
    OUTPUT_SETTINGS,
    RUN_SETTINGS,
    ConvertConfig,
    load_config,
    load_config_data,
    merge_cli,
)
from tests.conftest import tiny_llama

ROOT = Path(__file__).resolve().parents[1]
GRAPH_FRACTION_0 = 0.899439529718592  # blake2b-64("conversation-0") / 2**64
FAST = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


# --- synthetic canonical samples -------------------------------------------------------------------------------


def make_sample(
    index: int,
    segments: list[tuple[int, int]],
    tail: int = 0,
    *,
    seed: int = 0,
    graph: str | None = None,
    token_source: str = "engine",
    reward: float | None = 1.0,
) -> Sample:
    """A canonical sample: each segment is (context tokens, trained completion tokens); ``tail`` context ends it."""
    rng = np.random.default_rng(seed)
    spans, position = [], 0
    for context, completion in segments:
        position += context
        spans.append((position, position + completion))
        position += completion
    n = position + tail
    mask = np.zeros(n, dtype=np.int8)
    for start, end in spans:
        mask[start:end] = 1
    logprobs = np.full(n, np.nan, dtype=np.float32)
    trained = np.flatnonzero(mask)
    logprobs[trained] = -rng.random(trained.size).astype(np.float32)
    if trained.size > 2 and seed % 3 == 0:  # some samples miss a logprob on a trained token
        logprobs[trained[0]] = np.nan
    engine = {"engine": n, "rendered": 0, "mixed": max(1, n // 2) if n > 1 else n}[token_source]
    return Sample(
        sample_id=f"s{index:04d}",
        graph_id=graph or f"g{index:04d}",
        source="synthetic.jsonl",
        policy="agent",
        input_ids=rng.integers(0, 50_000, n).astype(np.int32),
        loss_mask=mask,
        logprobs=logprobs,
        turn_ids=[f"s{index:04d}.t{k}" for k in range(len(spans))],
        turn_spans=spans,
        turn_group_ids=[f"grp{index}.{k}" for k in range(len(spans))],
        group_id=f"grp{index // 2}",
        cut_reason="end",
        engine_tokens=engine,
        reward=reward,
        flags=[],
        metadata={"task": index},
    )


segments_st = st.lists(st.tuples(st.integers(0, 12), st.integers(1, 9)), min_size=1, max_size=5)


@st.composite
def sample_lists(draw: Any, max_samples: int = 12) -> list[Sample]:
    count = draw(st.integers(1, max_samples))
    return [
        make_sample(
            i,
            draw(segments_st),
            draw(st.integers(0, 4)),
            seed=draw(st.integers(0, 10_000)),
            graph=f"g{draw(st.integers(0, 5))}",
            token_source=draw(st.sampled_from(["engine", "rendered", "mixed"])),
        )
        for i in range(count)
    ]


def fixed_samples(count: int = 30) -> list[Sample]:
    rng = np.random.default_rng(7)
    return [
        make_sample(
            i,
            [(int(rng.integers(0, 30)), int(rng.integers(1, 20))) for _ in range(int(rng.integers(1, 4)))],
            int(rng.integers(0, 5)),
            seed=i,
            graph=f"conv{i % 9}",
        )
        for i in range(count)
    ]


def convert_all(target: str, table: pa.Table, **options: Any) -> pa.Table:
    converter = get_target(target).make_converter(TargetOptions(**options))
    return pa.concat_tables([converter.convert(table), converter.flush()])


def originals_by_id(samples: list[Sample]) -> dict[str, Sample]:
    return {s.sample_id: s for s in samples}


# --- targets ---------------------------------------------------------------------------------------------------


# Targets whose rows are views of canonical samples; dpo and kto pair judged replies (tests/test_preference_targets.py).
SAMPLE_TARGETS = sorted(set(TARGETS) - {"dpo", "kto"})


@pytest.mark.parametrize("target", SAMPLE_TARGETS)
def test_every_target_produces_exactly_its_declared_schema(target: str) -> None:
    table = samples_to_table(fixed_samples())
    out = convert_all(target, table, pack_length=256)
    assert out.schema.equals(TARGETS[target].schema)
    assert out.num_rows == (table.num_rows if target not in ("packed", "tree") else out.num_rows)
    assert out.num_rows > 0


@FAST
@given(sample_lists())
def test_labels_are_minus_100_exactly_where_loss_mask_is_zero(samples: list[Sample]) -> None:
    out = convert_all("labels", samples_to_table(samples)).to_pylist()
    assert all(row.keys() == {"input_ids", "attention_mask", "labels"} for row in out)
    for sample, row in zip(samples, out, strict=True):
        ids, labels = np.asarray(row["input_ids"]), np.asarray(row["labels"])
        assert np.array_equal(ids, sample.input_ids)
        assert np.array_equal(labels == -100, sample.loss_mask == 0)
        assert np.array_equal(labels[sample.loss_mask == 1], ids[sample.loss_mask == 1])
        assert row["attention_mask"] == [1] * len(ids)


@FAST
@given(sample_lists())
def test_trl_masks_both_equal_the_loss_mask_and_keep_provenance(samples: list[Sample]) -> None:
    out = convert_all("trl", samples_to_table(samples)).to_pylist()
    for sample, row in zip(samples, out, strict=True):
        assert row["completion_mask"] == row["assistant_masks"] == sample.loss_mask.tolist()
        assert (row["sample_id"], row["graph_id"]) == (sample.sample_id, sample.graph_id)


@FAST
@given(sample_lists(max_samples=20), st.integers(40, 120), st.integers(1, 7), st.integers(1, 400))
def test_packed_rows_hold_whole_samples_with_restarting_positions(
    samples: list[Sample], pack_length: int, buffer_rows: int, buffer_tokens: int
) -> None:
    by_id = originals_by_id(samples)
    longest = max(s.num_tokens for s in samples)
    pack_length = max(pack_length, longest)
    out = convert_all(
        "packed",
        samples_to_table(samples),
        pack_length=pack_length,
        pack_buffer_rows=buffer_rows,
        pack_buffer_tokens=buffer_tokens,
    )
    seen: Counter[str] = Counter()
    for row in out.to_pylist():
        ids = np.asarray(row["input_ids"])
        assert len(ids) <= pack_length and sum(row["seq_lengths"]) == len(ids) == row["num_tokens"]
        assert row["seq_start_id"][0] == 0
        assert row["seq_start_id"] == np.concatenate(([0], np.cumsum(row["seq_lengths"])[:-1])).tolist()
        for start, length, sample_id in zip(row["seq_start_id"], row["seq_lengths"], row["sample_ids"], strict=True):
            original = by_id[sample_id]
            seen[sample_id] += 1
            window = slice(start, start + length)
            # the sequence's positions hold exactly one sample's tokens, in order, nothing else
            assert np.array_equal(ids[window], original.input_ids)
            assert row["position_ids"][window] == list(range(length))
            labels = np.asarray(row["labels"][window])
            assert np.array_equal(labels == -100, original.loss_mask == 0)
            # NeMo's label-aligned mask: position j trains the prediction of token j + 1 of the same sample
            nemo = np.asarray(row["loss_mask"][window])
            assert np.array_equal(nemo[:-1], original.loss_mask[1:]) and nemo[-1] == 0
    assert seen == Counter({s.sample_id: 1 for s in samples if s.num_tokens})


def test_best_fit_decreasing_puts_each_item_in_the_tightest_open_bin() -> None:
    # Decreasing order 7, 5, 4, 3, 1: 7 opens A (3 left), 5 opens B (5 left), 4 goes to B (best fit: 1 left,
    # first fit would also pick B), 3 fits only A (0 left), 1 fits B exactly (0 left) → two full bins.
    lengths = np.array([4, 7, 1, 5, 3])
    bins, _ = best_fit_decreasing(lengths, 10)
    assert bins.max() == 1
    assert np.bincount(bins, weights=lengths).tolist() == [10.0, 10.0]
    # Best fit (not first fit): with A=2 left and B=4 left, a 2 goes to A.
    bins, _ = best_fit_decreasing(np.array([8, 6, 2, 2]), 10)
    assert bins.tolist() == [0, 1, 0, 1]


def test_packing_refuses_a_sample_longer_than_the_pack_instead_of_splitting_it() -> None:
    table = samples_to_table([make_sample(0, [(10, 10)])])
    with pytest.raises(OutputError, match="cannot fit a pack of 8"):
        pack_table(table, 8)


def test_packing_efficiency_is_tokens_over_row_capacity() -> None:
    samples = [make_sample(i, [(2, 3)]) for i in range(8)]  # 8 samples of 5 tokens
    converter = get_target("packed").make_converter(TargetOptions(pack_length=10))
    out = pa.concat_tables([converter.convert(samples_to_table(samples)), converter.flush()])
    assert out.num_rows == 4
    stats = converter.stats()
    assert stats["efficiency"] == 1.0 and stats["samples"] == 8 and stats["samples_per_row"] == 2.0


def test_rl_rows_carry_prompt_length_logprobs_reward_and_group() -> None:
    samples = fixed_samples(12)
    out = convert_all("rl", samples_to_table(samples)).to_pylist()
    for sample, row in zip(samples, out, strict=True):
        assert row["prompt_length"] == sample.turn_spans[0][0]
        assert row["input_ids"][: row["prompt_length"]] == sample.input_ids[: sample.turn_spans[0][0]].tolist()
        assert not any(row["loss_mask"][: row["prompt_length"]])
        trained_logprobs = [row["logprobs"][i] for i in np.flatnonzero(sample.loss_mask)]
        assert row["logprobs_complete"] == all(lp is not None for lp in trained_logprobs)
        assert (row["reward"], row["group_id"]) == (sample.reward, sample.group_id)
        assert [(s["start"], s["end"]) for s in row["turn_spans"]] == sample.turn_spans


def test_unknown_target_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="unknown target 'sharegpt'") as info:
        get_target("sharegpt")
    assert "canonical, labels, trl, packed, rl" in str(info.value)


def test_targets_refuse_tables_that_are_not_canonical() -> None:
    with pytest.raises(ConfigError, match="missing columns"):
        convert_all("labels", pa.table({"input_ids": [[1, 2]]}))


# --- length policy ---------------------------------------------------------------------------------------------


def _turn_accounting(samples: list[Sample], out: pa.Table, stats: LengthStats) -> Counter[str]:
    trained = Counter(t for row in out.column("turn_ids").to_pylist() for t in row)
    assert all(count == 1 for count in trained.values()), "a turn is trained in two rows"
    assert stats.turns_in == sum(len(s.turn_ids) for s in samples)
    assert stats.turns_in == stats.turns_out + sum(stats.dropped_turns.values())
    assert stats.turns_out == sum(trained.values())
    return trained


@FAST
@given(sample_lists(), st.integers(4, 40))
def test_drop_policy_removes_over_long_samples_and_counts_their_turns(samples: list[Sample], limit: int) -> None:
    stats = LengthStats()
    result = apply_length_policy(samples_to_table(samples), max_length=limit, overflow="drop", stats=stats)
    kept = [s.sample_id for s in samples if s.num_tokens <= limit]
    assert result.table.column("sample_id").to_pylist() == kept
    assert result.dropped_samples == Counter({"too_long": len(samples) - len(kept)} if len(kept) < len(samples) else {})
    # One record per dropped sample, in input order, for drops.jsonl.
    over = [s for s in samples if s.num_tokens > limit]
    assert [(d["reason"], d["sample_id"], d["graph_id"], d["num_tokens"], d["turns"]) for d in result.dropped] == [
        ("too_long", s.sample_id, s.graph_id, s.num_tokens, len(s.turn_ids)) for s in over
    ]
    assert all(d["max_length"] == limit for d in result.dropped)
    _turn_accounting(samples, result.table, stats)


@FAST
@given(sample_lists(), st.integers(4, 40), st.booleans())
def test_truncate_never_leaves_a_partially_trained_turn_unless_asked(
    samples: list[Sample], limit: int, allow_partial: bool
) -> None:
    by_id = originals_by_id(samples)
    stats = LengthStats()
    result = apply_length_policy(
        samples_to_table(samples), max_length=limit, overflow="truncate", allow_partial_turns=allow_partial, stats=stats
    )
    _turn_accounting(samples, result.table, stats)
    assert [d["reason"] for d in result.dropped] == ["no_turn_fits"] * stats.dropped_samples["no_turn_fits"]
    assert {d["sample_id"] for d in result.dropped}.isdisjoint(result.table.column("sample_id").to_pylist())
    for row in result.table.to_pylist():
        check_sample(row)
        original = by_id[row["sample_id"]]
        assert len(row["input_ids"]) <= limit
        assert row["input_ids"] == original.input_ids[: len(row["input_ids"])].tolist()  # a prefix, token-exact
        spans = dict(zip(original.turn_ids, original.turn_spans, strict=True))
        for turn, span in zip(row["turn_ids"], row["turn_spans"], strict=True):
            start, end = spans[turn]
            assert span["start"] == start
            if span["end"] != end:  # only a turn crossing the limit, and only when partial turns are allowed
                assert allow_partial and span["end"] == limit < end and "partial_turn" in row["flags"]
    if not allow_partial:
        assert stats.partial_turns == 0


@FAST
@given(sample_lists(), st.integers(4, 40))
def test_split_trains_every_fitting_turn_once_in_rows_within_the_limit(samples: list[Sample], limit: int) -> None:
    by_id = originals_by_id(samples)
    stats = LengthStats()
    result = apply_length_policy(samples_to_table(samples), max_length=limit, overflow="split", stats=stats)
    trained = _turn_accounting(samples, result.table, stats)
    for sample in samples:
        for turn, (start, end) in zip(sample.turn_ids, sample.turn_spans, strict=True):
            fits = sample.num_tokens <= limit or end - start <= limit
            assert trained[turn] == (1 if fits else 0), (turn, start, end, limit)
    for row in result.table.to_pylist():
        check_sample(row)
        assert len(row["input_ids"]) <= limit
        if "split" not in row["flags"]:
            assert row["input_ids"] == by_id[row["sample_id"]].input_ids.tolist()
            continue
        meta = json.loads(row["metadata"])["msgtrain_split"]
        original, offset = by_id[meta["of"]], meta["offset"]
        assert row["sample_id"] == f"{meta['of']}#{meta['part']}"
        assert row["input_ids"] == original.input_ids[offset : offset + len(row["input_ids"])].tolist()
        assert ("prefix_dropped" in row["flags"]) == (offset > 0)
        # a trained turn keeps all its tokens, at the shifted position
        spans = dict(zip(original.turn_ids, original.turn_spans, strict=True))
        for turn, span in zip(row["turn_ids"], row["turn_spans"], strict=True):
            assert (span["start"] + offset, span["end"] + offset) == spans[turn]


def test_split_keeps_the_conversation_start_for_turns_that_end_within_the_limit() -> None:
    sample = make_sample(0, [(5, 5), (5, 5), (5, 5), (5, 5)])  # turns end at 10, 20, 30, 40
    result = apply_length_policy(samples_to_table([sample]), max_length=25, overflow="split")
    rows = result.table.to_pylist()
    assert [len(r["input_ids"]) for r in rows] == [20, 25]
    assert [r["turn_ids"] for r in rows] == [sample.turn_ids[:2], sample.turn_ids[2:]]
    assert rows[0]["flags"] == ["split"] and rows[1]["flags"] == ["split", "prefix_dropped"]
    assert json.loads(rows[1]["metadata"])["msgtrain_split"]["offset"] == 15


def test_length_policy_rejects_an_unknown_overflow_name() -> None:
    with pytest.raises(ConfigError, match="unknown overflow policy 'wrap'"):
        apply_length_policy(samples_to_table(fixed_samples(2)), max_length=10, overflow="wrap")


def test_truncated_mixed_rows_stay_mixed_and_engine_rows_stay_engine() -> None:
    samples = [make_sample(0, [(10, 10), (10, 10)], token_source="mixed"), make_sample(1, [(10, 30)])]
    out = apply_length_policy(samples_to_table(samples), max_length=25, overflow="truncate").table.to_pylist()
    assert [r["token_source"] for r in out] == ["mixed"]  # sample 1's only turn crosses the limit: dropped
    assert 0 < out[0]["engine_tokens"] < 25


# --- splits ----------------------------------------------------------------------------------------------------


def test_split_spec_parses_names_and_fractions_in_order() -> None:
    assert parse_split_spec("validation=0.05, test=0.01") == {"validation": 0.05, "test": 0.01}
    assert list(parse_split_spec({"test": 0.1, "validation": 0.2})) == ["test", "validation"]
    assert parse_split_spec("") == {} and parse_split_spec(None) == {}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("validation", "NAME=FRACTION"),
        ("validation=abc", "not a number"),
        ("validation=1.5", "outside"),
        ("train=0.1", "train cannot be given"),
        ("validation=0.6,test=0.5", "leaving nothing for train"),
        ("9lives=0.1", "bad split name"),
    ],
)
def test_bad_split_specs_say_what_to_write(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_split_spec(spec)


def test_splits_are_disjoint_by_conversation_stable_and_near_the_requested_fraction() -> None:
    graph_ids = [f"conversation-{i}" for i in range(4000) for _ in range(2)]  # two samples per conversation
    table = pa.table({"graph_id": graph_ids, "row": list(range(len(graph_ids)))})
    parts = split_table(table, {"validation": 0.05})
    graphs = {name: set(part.column("graph_id").to_pylist()) for name, part in parts.items()}
    assert graphs["train"].isdisjoint(graphs["validation"])
    assert 0.04 < len(graphs["validation"]) / 4000 < 0.06
    for part in parts.values():  # row order is kept inside each split
        assert part.column("row").to_pylist() == sorted(part.column("row").to_pylist())
    assigner = SplitAssigner("validation=0.05")
    assert {g: assigner.split_of(g) for g in graphs["validation"]} == dict.fromkeys(graphs["validation"], "validation")
    # the vectorised and per-graph assignments agree
    some = pa.array(["conversation-0", "conversation-3", "conversation-17"])
    halves = {"validation": 0.5}
    assert assign_splits(some, halves).to_pylist() == [SplitAssigner(halves).split_of(g) for g in some.to_pylist()]


def test_the_split_hash_is_a_fixed_function_so_splits_survive_upgrades_and_machines() -> None:
    # Pinned values: changing the hash would silently move conversations between train and validation.
    assert graph_fraction("conversation-0") == GRAPH_FRACTION_0
    assert SplitAssigner("validation=0.5").split_of("conversation-0") == (
        "validation" if GRAPH_FRACTION_0 < 0.5 else "train"
    )


def test_appending_a_split_to_the_spec_keeps_earlier_assignments() -> None:
    ids = [f"c{i}" for i in range(3000)]
    before = SplitAssigner("validation=0.05")
    after = SplitAssigner("validation=0.05,test=0.05")
    moved = [g for g in ids if before.split_of(g) == "validation" and after.split_of(g) != "validation"]
    assert moved == []
    assert any(after.split_of(g) == "test" for g in ids)


# --- writer: every target × format, loaded back with datasets --------------------------------------------------


def write_dataset(
    out: Path, fmt: str, target: str, samples: list[Sample], *, batches: int = 3, **kwargs: Any
) -> dict[str, Any]:
    assigner = SplitAssigner("validation=0.2")
    writer = DatasetWriter(
        out,
        format=fmt,
        target=target,
        pack_length=kwargs.pop("pack_length", 256),
        decode=lambda ids: " ".join(f"<{i}>" for i in ids),
        splits=assigner.names,
        **kwargs,
    )
    table = samples_to_table(samples)
    step = -(-table.num_rows // batches)
    for start in range(0, table.num_rows, step):
        for split, part in assigner.split_table(table.slice(start, step)).items():
            writer.write(split, part)
    return writer.close()


def _check_loaded(target: str, rows: list[dict[str, Any]], samples: list[Sample]) -> None:
    by_id = originals_by_id(samples)
    if target == "labels":
        by_ids = {tuple(s.input_ids.tolist()): s for s in samples}
        for row in rows:
            mask = by_ids[tuple(row["input_ids"])].loss_mask
            assert np.array_equal(np.asarray(row["labels"]) == -100, mask == 0)
    elif target == "packed":
        for row in rows:
            for start, length, sample_id in zip(
                row["seq_start_id"], row["seq_lengths"], row["sample_ids"], strict=True
            ):
                assert row["input_ids"][start : start + length] == by_id[sample_id].input_ids.tolist()
    elif target == "tree":  # each sample is the root path of its last token (tests/test_export_tree.py: more)
        for row in rows:
            for last, sample_id in zip(row["sample_last_index"], row["sample_ids"], strict=True):
                path = [last]
                while row["parent_index"][path[-1]] >= 0:
                    path.append(row["parent_index"][path[-1]])
                assert [row["input_ids"][i] for i in reversed(path)] == by_id[sample_id].input_ids.tolist()
    else:
        for row in rows:
            mask = row["completion_mask"] if target == "trl" else row["loss_mask"]
            assert mask == by_id[row["sample_id"]].loss_mask.tolist()
            if target == "canonical":
                check_sample(row)


@pytest.mark.parametrize("target", SAMPLE_TARGETS)
@pytest.mark.parametrize("fmt", ["parquet", "hf"])
def test_every_target_and_format_loads_with_datasets_with_exact_columns_and_dtypes(
    tmp_path: Path, fmt: str, target: str
) -> None:
    import datasets

    samples = fixed_samples(40)
    out = tmp_path / "out"
    summary = write_dataset(out, fmt, target, samples, rows_per_shard=9, row_group_size=4)
    expected = datasets.Features.from_arrow_schema(TARGETS[target].schema)
    if fmt == "parquet":
        data_files = {split: str(out / "data" / f"{split}-*.parquet") for split in summary["splits"]}
        loaded = datasets.load_dataset("parquet", data_files=data_files, cache_dir=str(tmp_path / "cache"))
        info = datasets.DatasetInfo.from_directory(str(out))
        assert info.features == expected
        assert {name: s.num_examples for name, s in info.splits.items()} == {
            name: s["rows"] for name, s in summary["splits"].items()
        }
    else:
        loaded = datasets.load_from_disk(str(out))
        assert not (out / ".staging").exists()
    assert set(loaded) == {"train", "validation"}
    for split, dataset in loaded.items():
        assert dataset.features == expected, split
        assert dataset.column_names == TARGETS[target].schema.names
        assert dataset.num_rows == summary["splits"][split]["rows"]
        _check_loaded(target, dataset.to_list(), samples)
    assert sum(s["samples"] for s in summary["splits"].values()) == len(samples)
    assert sum(s["tokens"] for s in summary["splits"].values()) == sum(s.num_tokens for s in samples)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == summary["files"]


@pytest.mark.parametrize("target", ["labels", "packed"])
def test_the_output_directory_loads_as_a_hub_style_dataset_beside_a_report(tmp_path: Path, target: str) -> None:
    import datasets

    out = tmp_path / "out"
    summary = write_dataset(out, "parquet", target, fixed_samples(20), rows_per_shard=5)
    (out / "report.json").write_text("{}")
    loaded = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "cache"))
    assert set(loaded) == {"train", "validation"}
    assert {name: d.num_rows for name, d in loaded.items()} == {n: s["rows"] for n, s in summary["splits"].items()}


def test_parquet_rewrite_is_byte_identical_whatever_the_write_batching(tmp_path: Path) -> None:
    samples = fixed_samples(50)
    write_dataset(tmp_path / "a", "parquet", "canonical", samples, batches=1, row_group_size=7, rows_per_shard=20)
    write_dataset(tmp_path / "b", "parquet", "canonical", samples, batches=6, row_group_size=7, rows_per_shard=20)
    files_a = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert files_a == files_b and len(files_a) > 3
    for rel in files_a:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel


def test_parquet_files_use_zstd_and_the_configured_row_groups_and_shards(tmp_path: Path) -> None:
    samples = [make_sample(i, [(3, 4)], graph="one") for i in range(23)]  # all train, 7 tokens each
    writer = DatasetWriter(tmp_path, target="labels", rows_per_shard=10, row_group_size=4)
    writer.write("train", samples_to_table(samples))
    summary = writer.close()
    files = summary["splits"]["train"]["files"]
    assert files == [f"data/train-0000{i}-of-00003.parquet" for i in range(3)]
    groups = []
    for name in files:
        meta = pq.read_metadata(tmp_path / name)
        groups.append([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
        assert meta.row_group(0).column(0).compression == "ZSTD"
    assert groups == [[4, 4, 2], [4, 4, 2], [3]]


def test_token_columns_are_written_without_a_dictionary_and_the_others_with_one(tmp_path: Path) -> None:
    # Token ids and positions are plain (a dictionary hides their repeats from zstd), and so are logprobs (floats,
    # msgtrain's pages: msgtrain/export/parquet_pages.py); every other column, nested leaves included, keeps
    # dictionary encoding (the masks' pages are msgtrain's too: a dictionary and runs); values read back as written.
    samples = fixed_samples(12)
    writer = DatasetWriter(tmp_path, target="canonical")
    table = samples_to_table(samples)
    writer.write("train", table)
    writer.close()
    path = tmp_path / "data" / "train-00000-of-00001.parquet"
    meta = pq.read_metadata(path)
    plain = {}
    for c in range(meta.num_columns):
        column = meta.row_group(0).column(c)
        plain[column.path_in_schema] = "RLE_DICTIONARY" not in column.encodings
        assert column.compression == "ZSTD"
    assert plain.pop("input_ids.list.element") is True
    assert plain.pop("logprobs.list.element") is True
    assert plain["loss_mask.list.element"] is False and plain["turn_spans.list.element.start"] is False
    assert not any(plain.values()), plain
    back = pq.read_table(path)
    assert back["input_ids"].to_pylist() == table["input_ids"].to_pylist()
    assert back["logprobs"].to_pylist() == table["logprobs"].to_pylist()


def test_every_plain_column_is_a_list_of_integers_of_some_target() -> None:
    # A misspelt name would silently keep the dictionary.
    for name in PLAIN_COLUMNS:
        types = [t.schema.field(name).type for t in TARGETS.values() if name in t.schema.names]
        assert types and all(pa.types.is_list(t) and pa.types.is_integer(t.value_type) for t in types), name


def test_row_groups_are_also_bounded_by_tokens(tmp_path: Path) -> None:
    samples = [make_sample(i, [(50, 50)], graph="one") for i in range(10)]  # 100 tokens each
    writer = DatasetWriter(tmp_path, target="canonical", row_group_size=1000, row_group_tokens=250)
    writer.write("train", samples_to_table(samples))
    writer.close()
    meta = pq.read_metadata(tmp_path / "data" / "train-00000-of-00001.parquet")
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [3, 3, 3, 1]


@pytest.mark.parametrize("fmt", ["parquet", "hf", "jsonl"])
def test_a_declared_split_with_no_rows_is_reported_but_writes_no_file_so_the_rest_loads(
    tmp_path: Path, fmt: str
) -> None:
    import datasets

    writer = DatasetWriter(tmp_path, format=fmt, target="labels", splits=["train", "validation"])
    writer.write("train", samples_to_table(fixed_samples(3)))
    summary = writer.close()
    empty = {"rows": 0, "samples": 0, "tokens": 0, "trained_tokens": 0, "longest_sample_tokens": 0, "files": []}
    assert summary["splits"]["validation"] == empty
    assert not any("validation" in f for f in summary["files"])
    if fmt == "parquet":
        loaded = datasets.load_dataset(str(tmp_path), cache_dir=str(tmp_path / "cache"))
    elif fmt == "hf":
        loaded = datasets.load_from_disk(str(tmp_path))
    else:
        return
    assert set(loaded) == {"train"} and loaded["train"].num_rows == 3


def test_jsonl_preview_shows_ids_and_decoded_text_per_trained_span(tmp_path: Path) -> None:
    sample = make_sample(0, [(2, 3), (1, 2)], 1)
    writer = DatasetWriter(tmp_path, format="jsonl", target="labels", decode=lambda ids: "|".join(map(str, ids)))
    writer.write("train", samples_to_table([sample]))
    summary = writer.close()
    (line,) = (tmp_path / summary["splits"]["train"]["files"][0]).read_text().splitlines()
    row = json.loads(line)
    ids = sample.input_ids.tolist()
    assert row["input_ids"] == ids
    assert row["trained_spans"] == [
        {"start": 2, "end": 5, "text": "|".join(map(str, ids[2:5]))},
        {"start": 6, "end": 8, "text": "|".join(map(str, ids[6:8]))},
    ]


def test_packed_summary_reports_packing_efficiency_per_split(tmp_path: Path) -> None:
    summary = write_dataset(tmp_path, "parquet", "packed", fixed_samples(40), pack_length=128)
    packing = summary["packing"]
    assert packing["samples"] == 40 and packing["pack_length"] == 128
    assert packing["efficiency"] == pytest.approx(packing["tokens"] / (packing["rows"] * 128), abs=1e-6)
    assert set(packing["by_split"]) == {"train", "validation"}
    # NeMo's packing metadata (for pad_cu_seqlens): one entry per split, in NeMo's shifted-length convention
    metadata = json.loads((tmp_path / "packing_metadata.json").read_text())
    assert [entry["split"] for entry in metadata] == ["train", "validation"]
    for entry in metadata:
        rows = pq.read_table(tmp_path / "data" / f"{entry['split']}-00000-of-00001.parquet").to_pylist()
        assert entry["max_samples_per_bin"] == max(r["num_samples"] for r in rows)
        assert entry["min_packed_seqlen"] == min(r["num_tokens"] - r["num_samples"] for r in rows)
        assert entry["dataset_max_seqlen"] == max(max(r["seq_lengths"]) for r in rows) - 1
        assert entry["pack_size"] == 128


def test_writer_holds_at_most_one_row_group_per_split_between_writes(tmp_path: Path) -> None:
    samples = fixed_samples(60)
    writer = DatasetWriter(tmp_path, target="packed", pack_length=256, row_group_size=5, pack_buffer_rows=8)
    for start in range(0, 60, 7):
        writer.write("train", samples_to_table(samples[start : start + 7]))
        state = writer._splits["train"]
        assert state.sink.cutter.rows < 5  # a full row group is written out at once
        assert isinstance(state.converter, Packer) and state.converter._buffer.rows < 8
    assert writer.close()["packing"]["samples"] == 60


def test_writer_errors_are_actionable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown format 'csv'"):
        DatasetWriter(tmp_path, format="csv")
    with pytest.raises(ConfigError, match="pack length"):
        DatasetWriter(tmp_path, target="packed")
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OutputError, match="cannot write") as info:
        DatasetWriter(blocker / "out", target="labels")
    assert info.value.where == str(blocker / "out") and "writable" in str(info.value)
    closed = DatasetWriter(tmp_path / "ok")
    closed.close()
    with pytest.raises(OutputError, match="after close"):
        closed.write("train", samples_to_table(fixed_samples(1)))


# --- TRL reads the output as-is --------------------------------------------------------------------------------


# TRL 1.16's SFTConfig still sets `gradient_checkpointing`, which transformers 5 deprecates: not ours to fix.
TRL_WARNINGS = pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")


def _tiny_trl_setup(tmp_path: Path) -> tuple[Any, Any, Any]:
    trl = pytest.importorskip("trl", reason="TRL not installed (pip install torch==2.13.0 trl)")
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(64)} | {"<pad>": 64}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<pad>")), pad_token="<pad>", eos_token="<pad>"
    )
    model = tiny_llama(65)
    args = trl.SFTConfig(
        output_dir=str(tmp_path / "trainer"),
        report_to=[],
        per_device_train_batch_size=4,
        max_steps=1,
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        max_length=None,
        disable_tqdm=True,
    )
    return trl, (model, tokenizer), args


def _small_vocab(samples: list[Sample]) -> list[Sample]:
    for s in samples:
        s.input_ids = s.input_ids % 64
    return samples


@TRL_WARNINGS
@pytest.mark.parametrize("target", ["trl", "labels"])
def test_trl_sft_trainer_trains_exactly_the_loss_mask_from_the_written_parquet(tmp_path: Path, target: str) -> None:
    trl, (model, tokenizer), args = _tiny_trl_setup(tmp_path)
    import datasets

    samples = _small_vocab(fixed_samples(8))
    out = tmp_path / "out"
    writer = DatasetWriter(out, target=target)
    writer.write("train", samples_to_table(samples))
    writer.close()
    train = datasets.load_dataset(
        "parquet", data_files=str(out / "data" / "train-*.parquet"), split="train", cache_dir=str(tmp_path / "cache")
    )
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    prepared = trainer.train_dataset
    by_ids = {tuple(s.input_ids.tolist()): s for s in samples}
    assert prepared.num_rows == len(samples)
    for row in prepared.to_list():
        mask = by_ids[tuple(row["input_ids"])].loss_mask
        assert np.array_equal(np.asarray(row["labels"]) == -100, mask == 0)
    batch = trainer.data_collator([{k: r[k] for k in ("input_ids", "labels")} for r in prepared.to_list()[:4]])
    for i, row in enumerate(prepared.to_list()[:4]):
        n = len(row["input_ids"])
        assert batch["labels"][i, :n].tolist() == row["labels"] and set(batch["labels"][i, n:].tolist()) <= {-100}
        assert batch["attention_mask"][i].sum().item() == n
    trainer.train()  # one CPU step on a tiny random model: the dataset is accepted end to end


@TRL_WARNINGS
def test_trl_sft_trainer_accepts_packed_rows_padding_free_and_keeps_seq_lengths(tmp_path: Path) -> None:
    trl, (model, tokenizer), args = _tiny_trl_setup(tmp_path)
    import datasets

    samples = _small_vocab(fixed_samples(16))
    out = tmp_path / "out"
    writer = DatasetWriter(out, target="packed", pack_length=128)
    writer.write("train", samples_to_table(samples))
    writer.close()
    train = datasets.load_dataset(
        "parquet", data_files=str(out / "data" / "train-*.parquet"), split="train", cache_dir=str(tmp_path / "cache")
    )
    args.padding_free = True
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    prepared = trainer.train_dataset.to_list()[:4]
    assert all(row["seq_lengths"] == src["seq_lengths"] for row, src in zip(prepared, train.to_list(), strict=False))
    batch = trainer.data_collator([{k: r[k] for k in ("input_ids", "labels", "seq_lengths")} for r in prepared])
    # TRL's positions are exactly msgtrain's: they restart at every packed sample, so no sample attends to another
    assert batch["position_ids"][0].tolist() == [p for r in prepared for p in r["position_ids"]]
    trainer.train()


def test_trl_padding_free_collator_restarts_positions_at_every_packed_sample(tmp_path: Path) -> None:
    pytest.importorskip("trl", reason="TRL not installed (pip install torch==2.13.0 trl)")
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    samples = _small_vocab(fixed_samples(12))
    packed = convert_all("packed", samples_to_table(samples), pack_length=128).to_pylist()
    collator = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)
    batch = collator([{k: r[k] for k in ("input_ids", "labels", "seq_lengths")} for r in packed])
    positions = batch["position_ids"][0].tolist()
    starts = np.concatenate(
        [
            np.asarray(r["seq_start_id"]) + off
            for r, off in zip(packed, np.cumsum([0] + [len(r["input_ids"]) for r in packed[:-1]]), strict=True)
        ]
    )
    assert [i for i, p in enumerate(positions) if p == 0] == starts.tolist()
    assert batch["cu_seq_lens_q"].tolist() == [*starts.tolist(), len(positions)]
    flat_labels = np.concatenate([r["labels"] for r in packed])
    expected = flat_labels.copy()
    expected[starts] = -100  # TRL never trains a sequence's first token (nothing precedes it)
    assert batch["labels"][0].tolist() == expected.tolist()


# --- run config ------------------------------------------------------------------------------------------------

SHIPPED = sorted((ROOT / "configs").glob("*.yaml"))


def test_configs_are_shipped_for_the_common_setups() -> None:
    names = {p.name for p in SHIPPED}
    assert {"sft-qwen3.yaml", "rl-grpo.yaml", "packed-nemo.yaml", "labels-axolotl.yaml"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_config_loads_and_names_a_known_target(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.target in TARGETS
    assert len(cfg.config_hash()) == 64


def test_every_config_field_is_classified_as_output_changing_or_run_only() -> None:
    fields = set(ConvertConfig.model_fields)
    assert fields == OUTPUT_SETTINGS | RUN_SETTINGS
    assert not OUTPUT_SETTINGS & RUN_SETTINGS


def test_config_formats_match_the_writer_formats() -> None:
    from typing import get_args

    from msgtrain.export.writer import FORMATS

    assert get_args(ConvertConfig.model_fields["format"].annotation) == FORMATS


def test_unknown_config_key_is_named_with_a_suggestion_and_the_valid_keys(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("target: labels\nmax_lenght: 4096\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "unknown key 'max_lenght'" in message and "did you mean 'max_length'" in message
    assert "valid keys: inputs, output" in message and str(path) in message


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("target: sharegpt\n", "unknown target 'sharegpt'"),
        ("format: csv\n", "format: Input should be"),
        ("max_length: -3\n", "max_length: Input should be greater than 0"),
        ("overflow: truncate\n", "needs max_length"),
        ("split: validation=2\n", "outside (0, 1)"),
        ("render_date: tomorrow\n", "YYYY-MM-DD"),
        ("target: labels\npack_length: 512\n", "only applies to targets packed and tree"),
        ("target: packed\n", "needs a row length"),
        ("target: packed\npack_length: 512\nmax_length: 1024\n", "longer than pack_length"),
        ("allow_partial_turns: true\n", "only applies to overflow truncate"),
        ("- a\n- b\n", "must be a mapping"),
        ("target: [\n", "not valid YAML"),
    ],
)
def test_bad_config_values_are_config_errors_that_say_what_is_expected(
    tmp_path: Path, yaml_text: str, message: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert message in str(info.value)


def test_cli_flags_that_were_given_override_the_file_and_absent_ones_do_not(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("target: labels\nmax-length: 4096\noverflow: truncate\nsplit: {validation: 0.05}\n")
    cfg = merge_cli(
        load_config_data(path), {"max_length": 2048, "overflow": None, "inputs": ["logs/"], "output": "out"}
    )
    assert (cfg.target, cfg.max_length, cfg.overflow, cfg.split) == ("labels", 2048, "truncate", {"validation": 0.05})
    assert cfg.inputs == (Path("logs/"),) and cfg.output == Path("out")
    cfg.require_io()
    with pytest.raises(ConfigError, match="no inputs"):
        load_config(path).require_io()
    with pytest.raises(ConfigError, match="unknown key 'colour'"):
        merge_cli({}, {"colour": True})


def test_keyword_construction_reports_config_errors_too() -> None:
    with pytest.raises(ConfigError, match="unknown key 'bogus'"):
        ConvertConfig(bogus=1)
    with pytest.raises(ConfigError, match="unknown target"):
        ConvertConfig(target="nope")


def test_packed_target_derives_pack_length_and_max_length_from_each_other() -> None:
    assert ConvertConfig(target="packed", max_length=4096).pack_length == 4096
    assert ConvertConfig(target="packed", pack_length=2048).max_length == 2048


def test_yaml_dates_and_strings_both_give_an_iso_render_date(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("render_date: 2025-01-31\n")
    assert load_config(path).render_date == "2025-01-31"
    assert ConvertConfig(render_date="2025-02-01").render_date == "2025-02-01"


def test_config_hash_changes_with_output_settings_only() -> None:
    base = ConvertConfig(target="labels", max_length=4096)
    assert base.config_hash() == ConvertConfig(target="labels", max_length=4096).config_hash()
    assert (
        base.config_hash()
        == ConvertConfig(
            target="labels", max_length=4096, workers=8, quiet=True, output="elsewhere", inputs=["a", "b"]
        ).config_hash()
    )
    for change in ({"max_length": 2048}, {"target": "trl"}, {"split": "validation=0.05"}, {"tokenizer": "x"}):
        assert ConvertConfig(**{"target": "labels", "max_length": 4096, **change}).config_hash() != base.config_hash()
    # split order moves conversations between splits; policy order does not change anything
    assert (
        ConvertConfig(split="test=0.1,validation=0.05").config_hash()
        != ConvertConfig(split="validation=0.05,test=0.1").config_hash()
    )
    assert ConvertConfig(policies=["a", "b"]).config_hash() == ConvertConfig(policies=["b", "a"]).config_hash()


def test_the_canonical_target_is_the_canonical_schema_plus_the_mask_trl_reads() -> None:
    schema = TARGETS["canonical"].schema
    assert schema.remove(schema.get_field_index("assistant_masks")).equals(CANONICAL_SCHEMA)
    assert schema.names.index("assistant_masks") == schema.names.index("loss_mask") + 1
    rows = convert_all("canonical", samples_to_table(fixed_samples(4)))
    assert rows.schema.equals(schema) and rows["assistant_masks"].equals(rows["loss_mask"])
    assert TARGETS["packed"].schema.equals(PACKED_SCHEMA)
