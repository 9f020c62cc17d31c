"""``--target tree``: every trained token sees in its tree row exactly what it saw in its canonical sample.

The structural reference is computed here from the mask rule alone (``k <= q < subtree_end[k]``), independent
of how the rows were built: for every canonical sample and every trained turn, the visible tokens of the turn's
last token, with their position ids, must be the sample's tokens up to the turn's end; a counting argument over
all queries (``|visible(q)| == position_ids[q] + 1``) extends that to every token of the turn. The numeric
reference is a random Qwen2 model on CPU, run once on canonical rows and once on tree rows.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from msgtrain.export.schema import samples_to_table
from msgtrain.export.tree import TREE_SCHEMA, TreeStats, tree_table
from msgtrain.linearize import linearize_graph
from tests.conftest import load_named_tokenizer, shared_path
from tests.oracle import Oracle, RunGenerator, to_records

ROOT = Path(__file__).resolve().parents[1]


def visible(ends: np.ndarray, q: int) -> np.ndarray:
    """Row indices the mask rule lets query ``q`` see."""
    k = np.arange(q + 1)
    return k[ends[: q + 1] > q]


def check_tree_equivalence(canonical: pa.Table, tree: pa.Table) -> None:
    """Assert the tree rows train exactly the canonical tokens, each with exactly its canonical context."""
    rows = tree.to_pylist()
    arrays = []
    for r in rows:
        ends = np.asarray(r["subtree_end"], dtype=np.int64)
        pos = np.asarray(r["position_ids"], dtype=np.int64)
        n = ends.shape[0]
        assert np.all(ends > np.arange(n)) and np.all(ends <= n)
        # |visible(q)| = (q + 1) - #{k : end[k] <= q}: every query sees as many tokens as its depth + 1.
        seen = np.arange(n) + 1 - np.searchsorted(np.sort(ends), np.arange(n), side="right")
        assert np.array_equal(seen, pos + 1), "a token sees more or fewer tokens than its depth"
        parent = np.asarray(r["parent_index"], dtype=np.int64)
        roots = pos == 0
        assert np.all(parent[roots] == -1) and np.all(pos[~roots] == pos[parent[~roots]] + 1)
        arrays.append(
            (r, ends, np.asarray(r["input_ids"]), pos, np.asarray(r["loss_mask"]), np.asarray(r["turn_index"]))
        )
    # A log can hold the same conversation twice (equal sample ids): each copy is matched once.
    turn_at: dict[str, list[tuple[int, int]]] = {}
    sample_at: dict[str, list[tuple[int, int]]] = {}
    for i, r in enumerate(rows):
        for t, tid in enumerate(r["turn_ids"]):
            turn_at.setdefault(f"{r['turn_sample_ids'][t]}/{tid}", []).append((i, t))
        for s, sid in enumerate(r["sample_ids"]):
            sample_at.setdefault(sid, []).append((i, s))
    trained_tree = sum(int(a[4].sum()) for a in arrays)
    trained_canonical = 0
    for c in canonical.to_pylist():
        ids = np.asarray(c["input_ids"])
        if not ids.size:
            continue
        i, s = sample_at[c["sample_id"]].pop()
        r, ends, tids, pos, _, _ = arrays[i]
        path = visible(ends, r["sample_last_index"][s])
        assert np.array_equal(tids[path], ids) and np.array_equal(pos[path], np.arange(ids.size))
        lp_canonical = c["logprobs"]
        for t, (tid, span) in enumerate(zip(c["turn_ids"], c["turn_spans"], strict=True)):
            i, k = turn_at[f"{c['sample_id']}/{tid}"].pop()
            r, ends, tids, pos, loss, turn_index = arrays[i]
            assert r["turn_spans"][k] == span and r["turn_group_ids"][k] == c["turn_group_ids"][t]
            context = visible(ends, r["turn_last_index"][k])
            a, b = span["start"], span["end"]
            assert np.array_equal(tids[context], ids[:b]), "a trained turn's context differs from its sample's"
            assert np.array_equal(pos[context], np.arange(b))
            trained = context[a:b]
            assert np.all(loss[trained] == 1) and np.all(turn_index[trained] == k)
            lp_tree = [r["logprobs"][q] for q in trained]
            assert lp_tree == lp_canonical[a:b]
            trained_canonical += b - a
    assert trained_tree == trained_canonical, "the tree trains tokens no canonical sample trains"
    assert not any(turn_at.values()) and not any(sample_at.values()), "tree rows hold turns no sample trains"


def _tree(canonical: pa.Table, pack_length: int | None, scope: str = "graph") -> tuple[pa.Table, TreeStats]:
    stats = TreeStats()
    out = tree_table(canonical, pack_length, scope, stats)
    assert out.schema == TREE_SCHEMA
    check_tree_equivalence(canonical, out)
    assert int(np.sum(out["num_flat_tokens"].to_numpy())) == stats.flat_tokens
    return out, stats


def _canonical_of_oracle(template: str, seed: int, tmp_path: Path) -> pa.Table:
    from msgtrain.ingest.base import ReadGraph
    from msgtrain.ingest.calls import READER as CALLS

    tok = load_named_tokenizer(template)
    calls = RunGenerator(seed, template).run(n_turns=7)
    records = to_records(Oracle(tok.hf, template), calls, random.Random(seed), 0.5)
    path = tmp_path / "calls.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    samples = []
    for event in CALLS.read(path):
        assert isinstance(event, ReadGraph)
        samples.extend(linearize_graph(event.graph, tok).samples)
    return samples_to_table(samples)


@pytest.mark.parametrize("template", ["demo", "qwen3", "qwen2.5", "gpt-oss"])
@pytest.mark.parametrize("seed", range(3))
def test_oracle_runs_keep_every_trained_tokens_context_in_tree_rows(template: str, seed: int, tmp_path: Path) -> None:
    canonical = _canonical_of_oracle(template, seed, tmp_path)
    longest = int(max(canonical["num_tokens"].to_pylist()))
    for pack_length in (None, longest, longest + 37):
        _, stats = _tree(canonical, pack_length)
        assert stats.tokens <= stats.flat_tokens
    _, merged = _tree(canonical, None, "split")
    assert merged.tokens <= stats.trie_tokens


def _convert(inputs: list[str], out: Path, **options: Any) -> pa.Table:
    from msgtrain.run.config import ConvertConfig
    from msgtrain.run.pipeline import convert

    convert(ConvertConfig(inputs=inputs, output=out, quiet=True, **options))
    return pq.read_table(sorted((out / "data").glob("*.parquet")))


def test_sample_logs_tree_rows_are_equivalent_and_cut_trees_carry_their_root_paths(tmp_path: Path) -> None:
    canonical = _convert([str(ROOT / "sample_logs")], tmp_path / "c")
    _, whole = _tree(canonical, None)
    assert whole.tokens == whole.trie_tokens < whole.flat_tokens
    longest = int(max(canonical["num_tokens"].to_pylist()))
    out, cut = _tree(canonical, longest)  # the largest trees no longer fit a row: they are cut into blocks
    assert cut.split_trees >= 1 and cut.blocks > cut.trees
    assert max(out["num_tokens"].to_pylist()) <= longest
    assert cut.trained_tokens == whole.trained_tokens


def test_identical_completions_of_one_context_are_not_merged_into_one_trained_token() -> None:
    from msgtrain.export.schema import Sample

    def sample(name: str, ids: list[int], start: int) -> Sample:
        mask = np.zeros(len(ids), np.int8)
        mask[start:] = 1
        return Sample(
            sample_id=name,
            graph_id="g",
            source="x:1",
            policy="p",
            input_ids=np.asarray(ids, np.int32),
            loss_mask=mask,
            logprobs=np.where(mask == 1, -0.5, np.nan).astype(np.float32),
            turn_ids=[f"t-{name}"],
            turn_spans=[(start, len(ids))],
            turn_group_ids=["grp"],
            group_id="grp",
            cut_reason="start",
            engine_tokens=0,
        )

    canonical = samples_to_table(
        [sample("a", [1, 2, 3, 4], 2), sample("b", [1, 2, 3, 4], 2), sample("c", [1, 2, 5], 2)]
    )
    _out, stats = _tree(canonical, None)
    assert stats.trees == 2 and stats.trained_tokens == 5


def test_convert_cli_writes_tree_rows_and_reports_tokens_saved(tmp_path: Path, capsys: Any) -> None:
    from msgtrain.cli import main

    out = tmp_path / "tree"
    code = main(["convert", str(ROOT / "sample_logs"), "-o", str(out), "--target", "tree", "--pack-length", "4096"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    tree = report["outputs"]["tree"]
    assert tree["flat_tokens"] == report["tokens"]["total"] > tree["tokens"] > 0
    assert tree["flat_per_tree_token"] == round(tree["flat_tokens"] / tree["tokens"], 4)
    captured = capsys.readouterr()
    assert "flat" in captured.out + captured.err
    rows = pq.read_table(sorted((out / "data").glob("*.parquet")))
    assert sum(rows["num_trained_tokens"].to_pylist()) == report["tokens"]["trained"]
    assert max(rows["num_tokens"].to_pylist()) <= 4096


REAL_TEMPLATES = {"claude_code_spotter": "qwen2.5", "tau_bench": "qwen3"}


@pytest.mark.parametrize(
    "folder",
    sorted(p.name for p in shared_path("real_logs").iterdir() if p.is_dir())
    if shared_path("real_logs").is_dir()
    else [],
)
def test_real_logs_tree_rows_keep_every_trained_tokens_context(folder: str, tmp_path: Path) -> None:
    from tests.conftest import TEMPLATES

    template = REAL_TEMPLATES.get(folder, "qwen3")
    tok_folder, config = TEMPLATES[template]
    options: dict[str, Any] = {"tokenizer": str(shared_path(tok_folder))}
    if config:
        options["chat_template"] = str(shared_path(config))
    try:
        canonical = _convert([str(shared_path("real_logs", folder))], tmp_path / "c", **options)
    except FileNotFoundError:
        pytest.skip(f"{folder}: no training rows")
    except TypeError as e:  # converting is not what this test checks; the ingest tests own that failure
        pytest.skip(f"{folder}: the canonical conversion itself fails ({e})")
    if canonical.num_rows == 0:
        pytest.skip(f"{folder}: no training rows")
    _, stats = _tree(canonical, None)
    assert stats.tokens == stats.trie_tokens <= stats.flat_tokens
    longest = int(max(canonical["num_tokens"].to_pylist()))
    _tree(canonical, longest)
