"""``--target tree``: every trained token sees in its tree row exactly what it saw in its canonical sample.

The structural reference is computed here from the mask rule alone (``k <= q < subtree_end[k]``), independent
of how the rows were built: for every canonical sample and every trained turn, the visible tokens of the turn's
last token, with their position ids, must be the sample's tokens up to the turn's end; a counting argument over
all queries (``|visible(q)| == position_ids[q] + 1``) extends that to every token of the turn. The numeric
reference is a random Qwen2 or Qwen3 model on CPU, run once on canonical rows and once on tree rows: on sample_logs,
on a seeded, token-bounded choice of graphs of every real-log folder, and through FlexAttention's block mask.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from msgtrain.export.schema import samples_to_table
from msgtrain.export.tree import TREE_SCHEMA, TreeStats, tokens_lower_bound, tree_table
from msgtrain.linearize import linearize_graph
from tests.conftest import load_named_tokenizer, shared_folders, shared_path
from tests.oracle import Oracle, RunGenerator, to_records

# The oracle corpora's templates; these cannot represent tools and are replayed without tool turns.
NO_TOOLS = {"phi3", "smollm3", "deepseek-r1-distill"}
TOKENIZER_PARAM = "template"  # the tests of one template run one after another (tests/conftest.py)

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
    if pack_length is not None:
        assert max(out["num_tokens"].to_pylist(), default=0) <= pack_length
        assert stats.tokens >= tokens_lower_bound(canonical, pack_length, scope) >= stats.trie_tokens
    return out, stats


def _canonical_of_oracle(template: str, seed: int, tmp_path: Path) -> pa.Table:
    from msgtrain.ingest.core.base import ReadGraph
    from msgtrain.ingest.formats.api.calls import READER as CALLS

    tok = load_named_tokenizer(template)
    # Hard cases (inline reasoning, control-token text, mid-run changes) on half the sessions, as the oracle tests do.
    calls = RunGenerator(seed, template, with_tools=template not in NO_TOOLS, hard=0.5).run(n_turns=7)
    records = to_records(Oracle(tok.hf, template), calls, random.Random(seed), 0.5)
    path = tmp_path / "calls.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    samples = []
    for event in CALLS.read(path):
        assert isinstance(event, ReadGraph)
        samples.extend(linearize_graph(event.graph, tok).samples)
    return samples_to_table(samples)


@pytest.mark.parametrize("template", ["demo", "qwen3", "qwen2.5", "phi3", "gpt-oss", "smollm3", "deepseek-r1-distill"])
@pytest.mark.parametrize("seed", range(2))
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


Converted = Callable[..., pa.Table]


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Converted:
    """The canonical rows of ``inputs`` under ``options``, converted once per module: the tests only read them."""
    done: dict[str, pa.Table] = {}

    def canonical(*inputs: str, **options: Any) -> pa.Table:
        key = json.dumps([inputs, options], sort_keys=True)
        if key not in done:
            done[key] = _convert(list(inputs), tmp_path_factory.mktemp("canonical") / "c", **options)
        return done[key]

    return canonical


SAMPLE_LOGS = str(ROOT / "sample_logs")


def test_sample_logs_tree_rows_are_equivalent_and_cut_trees_carry_their_root_paths(converted: Converted) -> None:
    canonical = converted(SAMPLE_LOGS)
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

    from msgtrain.tools.stats import dataset_stats

    stats = dataset_stats(out)
    assert (stats["tokens"], stats["flat_tokens"], stats["rows"]) == (
        tree["tokens"],
        tree["flat_tokens"],
        rows.num_rows,
    )
    assert stats["flat_per_tree_token"] == tree["flat_per_tree_token"]
    assert main(["stats", str(out)]) == 0
    assert "the flat samples would have" in capsys.readouterr().out

    # inspect: the listing, then one row with every segment indented one step deeper than its parent
    assert main(["inspect", str(out)]) == 0
    assert "tree rows" in capsys.readouterr().out
    widest = max(range(rows.num_rows), key=lambda i: rows["num_segments"][i].as_py())
    assert main(["inspect", str(out), "--sample", str(widest)]) == 0
    shown = capsys.readouterr().out
    labels = [line for line in shown.splitlines() if "└ segment [" in line]
    row = rows.slice(widest, 1).to_pylist()[0]
    assert len(labels) == row["num_segments"] > 1
    depth: list[int] = []
    for p in row["segment_parents"]:
        depth.append(depth[p] + 1 if p >= 0 else 0)
    assert [len(line) - len(line.lstrip(" ")) for line in labels] == [2 * d for d in depth]


REAL_TEMPLATES = {"claude_code_spotter": "qwen2.5", "tau_bench": "qwen3"}


def _real_options(template: str) -> dict[str, Any]:
    from tests.conftest import TEMPLATES

    tok_folder, config = TEMPLATES[template]
    options: dict[str, Any] = {"tokenizer": str(shared_path(tok_folder))}
    if config:
        options["chat_template"] = str(shared_path(config))
    return options


@pytest.mark.parametrize("folder", shared_folders("real_logs"))
def test_real_logs_tree_rows_keep_every_trained_tokens_context(folder: str, converted: Converted) -> None:
    template = REAL_TEMPLATES.get(folder, "qwen3")
    try:
        canonical = converted(str(shared_path("real_logs", folder)), **_real_options(template))
    except FileNotFoundError:
        pytest.skip(f"{folder}: no training rows")
    except TypeError as e:  # converting is not what this test checks; the ingest tests own that failure
        pytest.skip(f"{folder}: the canonical conversion itself fails ({e})")
    if canonical.num_rows == 0:
        pytest.skip(f"{folder}: no training rows")
    whole = TreeStats()
    tree_table(canonical, None, "graph", whole)  # uncut: exactly the trie
    assert whole.tokens == whole.trie_tokens <= whole.flat_tokens
    longest = int(max(canonical["num_tokens"].to_pylist()))
    _tree(canonical, longest)  # the largest trees cut into blocks: checked token by token
    _numeric_check_of_some_graphs(canonical, "qwen2" if template == "qwen2.5" else "qwen3", folder)


# Budget of the numeric check per real-log folder: a few graphs (seeded choice) of its samples of at most 2k tokens
# (what --pack-length 2048 keeps), at most 8k flat tokens (each folder with a branching graph that fits keeps one);
# a folder with no such sample gets one graph at 4k. Folders whose shortest sample is longer (swe_agent: 7.6k,
# copilot_cli_vct: 12k tokens) are checked structurally only.
NUMERIC_BUDGETS = ((2048, 3), (4096, 1))  # (row tokens, graphs)
NUMERIC_FLAT_TOKENS = 8192


def _numeric_check_of_some_graphs(canonical: pa.Table, family: str, seed: str) -> None:
    """A random tiny model of ``family`` gives a seeded choice of the data's graphs (branching ones first) the
    same logprobs, loss and gradient from tree rows as from canonical rows. The trees are cut at the longest
    chosen sample, so copied root paths are checked too where a tree needs more than one row."""
    torch = pytest.importorskip("torch")
    for row_tokens, n_graphs in NUMERIC_BUDGETS:
        fits = pc.and_(
            pc.less_equal(canonical["num_tokens"], row_tokens), pc.greater(canonical["num_trained_tokens"], 0)
        )
        kept = canonical.filter(fits)
        graphs = kept.group_by("graph_id").aggregate([("num_tokens", "sum"), ("num_tokens", "count")]).to_pylist()
        rng = random.Random(seed)
        rng.shuffle(graphs)
        graphs.sort(key=lambda g: g["num_tokens_count"] == 1)  # graphs that branch first (seeded order within)
        chosen: list[str] = []
        flat = 0
        for g in graphs:
            if len(chosen) < n_graphs and flat + g["num_tokens_sum"] <= NUMERIC_FLAT_TOKENS:
                chosen.append(g["graph_id"])
                flat += g["num_tokens_sum"]
        if chosen:
            break
    else:
        return  # no sample of this data fits the budget; the structural check above still covers every row
    subset = kept.filter(pc.is_in(kept["graph_id"], pa.array(chosen)))
    longest = int(max(subset["num_tokens"].to_pylist()))
    tree, stats = _tree(subset, longest)
    vocab = 512
    model = _tiny_model(family, vocab, "sdpa")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _compare(model, subset, tree, stats.trained_tokens, vocab)
    finally:
        torch.set_num_threads(threads)


def _tiny_model(family: str, vocab: int, attention: str) -> Any:
    """A randomly initialised 2-layer Qwen2 or Qwen3 (Qwen3 adds q/k norms and an explicit head_dim), fp32."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    sizes: dict[str, Any] = {
        "vocab_size": vocab,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 1 << 17,
        "tie_word_embeddings": False,
    }
    if family == "qwen3":
        config = transformers.Qwen3Config(head_dim=8, **sizes)
        model = transformers.Qwen3ForCausalLM
    else:
        config = transformers.Qwen2Config(**sizes)
        model = transformers.Qwen2ForCausalLM
    config._attn_implementation = attention
    return model(config).float().eval()


def _tiny_qwen2(vocab: int, attention: str) -> Any:
    return _tiny_model("qwen2", vocab, attention)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_random_qwen2_gives_tree_rows_the_canonical_logprobs_loss_and_gradient(
    attention: str, converted: Converted
) -> None:
    torch = pytest.importorskip("torch")
    vocab = 512  # ids are folded into a small vocabulary: what is compared is which tokens attend to which
    canonical = converted(SAMPLE_LOGS)
    # The multi-sample graphs of sample_logs (forks, edits, n>1) with samples of at most 720 tokens keep the
    # test small; at 720 tokens per row their trees are cut, so copied root paths are covered too.
    graphs = canonical.group_by("graph_id").aggregate([("num_tokens", "max"), ("num_tokens", "count")])
    keep = [r["graph_id"] for r in graphs.to_pylist() if r["num_tokens_count"] > 1 and r["num_tokens_max"] <= 720]
    assert len(keep) >= 3
    canonical = canonical.filter(pc.is_in(canonical["graph_id"], pa.array(keep)))
    tree, stats = _tree(canonical, 720)
    assert stats.split_trees >= 1 and stats.tokens < stats.flat_tokens
    model = _tiny_qwen2(vocab, attention)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster than contending for the cores
    try:
        _compare(model, canonical, tree, stats.trained_tokens, vocab)
    finally:
        torch.set_num_threads(threads)


def _compare(model: Any, canonical: pa.Table, tree: pa.Table, trained_tokens: int, vocab: int) -> None:
    import torch

    from msgtrain.trainers.tree import collate, tree_logprobs, weighted_nll

    # Canonical: one causal forward per sample; the logits at i - 1 predict token i.
    # A log can hold one conversation twice (equal sample ids): values are kept per key as a list.
    expected: dict[tuple[str, str, int], list[float]] = {}
    model.zero_grad()
    canonical_loss = torch.zeros(())
    for c in canonical.to_pylist():
        ids = torch.tensor([c["input_ids"]]) % vocab
        logits = model(input_ids=ids, position_ids=torch.arange(ids.shape[1])[None]).logits
        lp = torch.log_softmax(logits[0, :-1].float(), -1).gather(-1, ids[0, 1:, None])[:, 0]
        for tid, span in zip(c["turn_ids"], c["turn_spans"], strict=True):
            turn = lp[span["start"] - 1 : span["end"] - 1]
            canonical_loss = canonical_loss - turn.sum()
            for k, value in enumerate(turn.detach().tolist()):
                expected.setdefault((c["sample_id"], tid, k), []).append(value)
    canonical_loss.backward()
    canonical_grad = {n: p.grad.clone() for n, p in model.named_parameters()}

    model.zero_grad()
    rows = tree.to_pylist()
    for r in rows:
        r["input_ids"] = [i % vocab for i in r["input_ids"]]
    batch = collate(rows)
    token_lp = tree_logprobs(model, batch)
    summed = weighted_nll(token_lp, batch["loss_mask"], weights=torch.ones(token_lp.shape))
    summed.backward()
    lp = token_lp.detach().tolist()
    got: dict[tuple[str, str, int], list[float]] = {}
    for b, r in enumerate(rows):
        seen: dict[int, int] = {}
        for q, t in enumerate(r["turn_index"]):
            if t >= 0:
                k = seen.get(t, 0)
                seen[t] = k + 1
                got.setdefault((r["turn_sample_ids"][t], r["turn_ids"][t], k), []).append(lp[b][q])
    assert got.keys() == expected.keys() and sum(map(len, got.values())) == trained_tokens
    assert all(len(got[k]) == len(expected[k]) for k in expected)
    assert max(abs(a - b) for k in expected for a, b in zip(sorted(got[k]), sorted(expected[k]), strict=True)) <= 1e-4
    assert abs(summed.item() - canonical_loss.item()) <= 1e-3 * max(1.0, abs(canonical_loss.item()))
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, canonical_grad[name], rtol=1e-4, atol=1e-4, msg=name)


@pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")
def test_trl_sft_trainer_with_the_tree_collator_and_loss_optimises_the_canonical_objective(
    tmp_path: Path, converted: Converted
) -> None:
    trl = pytest.importorskip("trl")
    import datasets
    import torch
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from msgtrain.trainers.tree import TreeCollator, trainer_loss

    class TreeSFTTrainer(trl.SFTTrainer):  # type: ignore[misc]
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # type: ignore[no-untyped-def]
            return trainer_loss(model, inputs, return_outputs, num_items_in_batch)

    vocab = 512
    canonical = converted(SAMPLE_LOGS)
    canonical = canonical.filter(pc.equal(canonical["graph_id"], "weather_tools.yaml:a0b7d323"))
    tree, stats = _tree(canonical, None)
    assert stats.samples > 1 and tree.num_rows == 1
    rows = tree.to_pylist()
    for r in rows:
        r["input_ids"] = [i % vocab for i in r["input_ids"]]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0")),
        pad_token="t0",
        eos_token="t0",
    )
    model = _tiny_qwen2(vocab, "sdpa")
    args = trl.SFTConfig(
        output_dir=str(tmp_path / "trainer"),
        report_to=[],
        per_device_train_batch_size=1,
        max_steps=1,
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        max_length=None,
        disable_tqdm=True,
        remove_unused_columns=False,  # keep position_ids / parent_index / subtree_end / loss_mask for the collator
        dataset_kwargs={"skip_prepare_dataset": True},  # rows are final: no tokenizing, truncating or label building
    )
    trainer = TreeSFTTrainer(
        model=model,
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
        data_collator=TreeCollator(),
    )
    batch = trainer.data_collator([trainer.train_dataset[0]])
    with torch.no_grad():
        loss = trainer.compute_loss(model, batch).item()
        nll, count = 0.0, 0
        for c in canonical.to_pylist():
            ids = torch.tensor([c["input_ids"]]) % vocab
            lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
            mask = torch.tensor(c["loss_mask"][1:], dtype=torch.bool)
            nll -= lp[mask].sum().item()
            count += int(mask.sum())
    assert abs(loss - nll / count) <= 1e-5
    trainer.train()  # one CPU step through TRL's own loop


@pytest.mark.parametrize("target", ["tree", "packed"])
def test_samples_longer_than_a_row_are_dropped_listed_and_counted_and_the_rest_is_written(
    target: str, tmp_path: Path, capsys: Any, converted: Converted
) -> None:
    from msgtrain.cli import main

    canonical = converted(SAMPLE_LOGS)
    pack_length = 1200
    lengths = dict(zip(canonical["sample_id"].to_pylist(), canonical["num_tokens"].to_pylist(), strict=True))
    too_long = {s for s, n in lengths.items() if n > pack_length}
    assert 0 < len(too_long) < len(lengths)
    out = tmp_path / target
    args = ["convert", str(ROOT / "sample_logs"), "-o", str(out), "--target", target, "--pack-length", str(pack_length)]
    assert main(args) == 3  # published, with dropped samples: partial (README, Exit codes)
    summary = capsys.readouterr()
    assert f"too_long={len(too_long)} (listed in" in summary.out + summary.err  # the summary's dropped-samples row
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["max_length"] == pack_length  # --pack-length implies --max-length: one rule
    # sample_logs repeats two conversations whole: their samples are dropped as duplicates, not for length.
    assert {**report["samples"]["dropped_by_reason"], "duplicate": 0} == {"too_long": len(too_long), "duplicate": 0}
    assert report["outputs"]["drops"] == "drops.jsonl"
    drops = [json.loads(line) for line in (out / "drops.jsonl").read_text().splitlines()]
    assert {d["sample_id"] for d in drops} == too_long and len(drops) == len(too_long)
    for d in drops:
        assert d["reason"] == "too_long" and d["num_tokens"] == lengths[d["sample_id"]] > d["max_length"]
        assert (
            d["graph_id"] == canonical.filter(pc.equal(canonical["sample_id"], d["sample_id"]))["graph_id"][0].as_py()
        )
    rows = pq.read_table(sorted((out / "data").glob("*.parquet")))
    assert max(rows["num_tokens"].to_pylist()) <= pack_length
    written = {s for ids in rows["sample_ids"].to_pylist() for s in ids}
    assert written == set(lengths) - too_long  # every sample that fits is kept, whatever tree it shares
    if target == "tree":
        kept = canonical.filter(pc.less_equal(canonical["num_tokens"], pack_length))
        check_tree_equivalence(kept, rows)


def test_a_run_without_over_long_samples_writes_no_drops_file(tmp_path: Path) -> None:
    from msgtrain.cli import main

    out = tmp_path / "tree"
    assert main(["convert", str(ROOT / "sample_logs"), "-o", str(out), "--target", "tree", "-q"]) == 0
    assert not (out / "drops.jsonl").exists()
    assert json.loads((out / "report.json").read_text())["outputs"]["drops"] is None


def test_claude_code_spotter_at_pack_length_32768_drops_its_long_sessions_and_keeps_the_rest(
    tmp_path: Path, converted: Converted
) -> None:
    options = _real_options(REAL_TEMPLATES["claude_code_spotter"])
    canonical = converted(str(shared_path("real_logs", "claude_code_spotter")), **options)
    rows = _convert(
        [str(shared_path("real_logs", "claude_code_spotter"))],
        tmp_path / "t",
        target="tree",
        pack_length=32768,
        **options,
    )
    long_ = canonical.filter(pc.greater(canonical["num_tokens"], 32768))
    assert long_.num_rows > 0  # sessions reach ~128k tokens: the case a nightly job must survive
    drops = [json.loads(line) for line in (tmp_path / "t" / "drops.jsonl").read_text().splitlines()]
    assert sorted(d["sample_id"] for d in drops) == sorted(long_["sample_id"].to_pylist())
    check_tree_equivalence(canonical.filter(pc.less_equal(canonical["num_tokens"], 32768)), rows)


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile:UserWarning")
def test_flex_attention_with_the_tree_block_mask_gives_tree_rows_the_canonical_logprobs(
    family: str, converted: Converted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through transformers' own ``flex_attention`` path with :func:`block_mask` as the attention mask.

    transformers compiles FlexAttention on first use (about 20 s with inductor on this CPU); the test makes it take
    its uncompiled branch (the one it uses when already inside a compiled region), which runs the same mask_mod
    and block sparsity. FlexAttention has no backward on CPU (torch 2.13 raises), so only the forward is checked.
    """
    torch = pytest.importorskip("torch")
    flex = pytest.importorskip("transformers.integrations.flex_attention")
    from msgtrain.trainers.tree import block_mask, collate, tree_logprobs

    monkeypatch.setattr(flex, "is_torchdynamo_compiling", lambda: True)
    vocab, block = 512, 64
    canonical = converted(SAMPLE_LOGS)
    # Two branching graphs (parallel tool calls; a streamed, compressed session), cut at their longest sample:
    # several rows, copied root paths, padding to the block size. Kept small: uncompiled FlexAttention is slow.
    keep = ["weather_tools.yaml:a0b7d323", "streamed_and_compressed.yaml:85996267"]
    canonical = canonical.filter(pc.is_in(canonical["graph_id"], pa.array(keep)))
    tree, stats = _tree(canonical, int(max(canonical["num_tokens"].to_pylist())))
    assert stats.split_trees >= 1 and stats.samples > 5
    model = _tiny_model(family, vocab, "flex_attention")
    rows = tree.to_pylist()
    for r in rows:
        r["input_ids"] = [i % vocab for i in r["input_ids"]]
    batch = collate(rows, multiple_of=block)
    assert batch["input_ids"].shape[1] % block == 0 and min(len(r["input_ids"]) for r in rows) % block != 0  # padded
    with torch.no_grad():
        lp = tree_logprobs(model, batch, block_mask(batch["subtree_end"], block)).tolist()
        model.config._attn_implementation = "sdpa"  # the reference: one causal forward per canonical sample
        worst, compared = 0.0, 0
        where = {}
        for b, r in enumerate(rows):
            seen: dict[int, int] = {}
            for q, t in enumerate(r["turn_index"]):
                if t >= 0:
                    k = seen.get(t, 0)
                    seen[t] = k + 1
                    where[(r["turn_sample_ids"][t], r["turn_ids"][t], k)] = lp[b][q]
        for c in canonical.to_pylist():
            ids = torch.tensor([c["input_ids"]]) % vocab
            flat = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
            for tid, span in zip(c["turn_ids"], c["turn_spans"], strict=True):
                for k, value in enumerate(flat[span["start"] - 1 : span["end"] - 1].tolist()):
                    worst = max(worst, abs(where[(c["sample_id"], tid, k)] - value))
                    compared += 1
    assert compared == stats.trained_tokens == len(where)
    assert worst <= 1e-4


def test_blocks_of_one_tree_packed_into_one_row_hold_their_copied_root_paths_once(converted: Converted) -> None:
    from msgtrain.export.tree import _groups, _Rows, build_forest, cut_blocks, pack_blocks

    canonical = converted(SAMPLE_LOGS)
    pack_length = int(max(canonical["num_tokens"].to_pylist()))
    rows = _Rows.of(canonical)
    pieces = [
        b
        for members in _groups(rows, canonical.num_rows, "split")
        for trie, _ in build_forest(rows, members)
        for b in cut_blocks(rows, trie, pack_length)
    ]
    merged, row_of, _ = pack_blocks(pieces, pack_length)
    assert len(merged) < len(pieces)  # some row holds two pieces of one tree
    assert sum(b.size for b in merged) < sum(b.size for b in pieces)  # ... and their common copies once
    assert all(np.bincount(row_of, weights=[b.size for b in merged]) <= pack_length)
    owned = [n for b in merged for n in b.nodes]
    assert sorted(owned) == sorted(n for b in pieces for n in b.nodes)  # every segment owned exactly once
    for b in merged:  # a block holds every ancestor of what it holds (its root paths)
        held = set(b.nodes) | set(b.path)
        assert all(b.trie.parent[n] in held or b.trie.parent[n] == 0 for n in held)
    _tree(canonical, pack_length, "split")  # and the rows keep every trained token's context


def test_pack_length_implies_max_length_for_tree_rows_and_a_smaller_max_length_is_kept() -> None:
    from msgtrain.run.config import ConvertConfig

    assert ConvertConfig(target="tree", pack_length=4096).max_length == 4096
    assert ConvertConfig(target="tree", pack_length=4096, max_length=1024).max_length == 1024
    # Without --pack-length a tree is one row, whatever its size: no length limit is invented for it.
    only_max = ConvertConfig(target="tree", max_length=1024)
    assert (only_max.pack_length, only_max.max_length) == (None, 1024)
    assert ConvertConfig(target="tree").max_length is None
