"""``--target tree`` against the canonical rows: tokens written, trie tokens, convert time, training-step time.

```
python3 benchmarks/tree.py                  # the table published in docs/performance.md
python3 benchmarks/tree.py --repeat 3 --json out.json
```

Data (needs ``../shared``; prints ``skipped: ...`` without it):

- ``claude_code_spotter`` (the folder) with the Qwen2.5 template (Qwen3 tokenizer + the qwen2.5-instruct config):
  tool-call turns drift at ``\\n\\n``, so each drift cuts and repeats the session so far;
- ``tau_bench`` first 20 trajectories with Qwen3 (re-renders earlier turns' reasoning);
- a generated Qwen3 agent corpus: 16 sessions of 32 sampled turns (``corpus.py``, content from the real logs).

Per data set: flat tokens (canonical rows), trie tokens (each graph's distinct prefixes once), tree tokens at
several ``--pack-length`` values and both ``--tree-scope`` values (samples longer than the pack length dropped,
as convert drops them), with ``tokens_lower_bound``: no cut into rows of that length can hold fewer tokens;
convert time canonical vs tree (median of
``--repeat``, in one process, tokenizer load included on both sides); and a training step (forward + backward)
of a tiny random Qwen3 on CPU (fp32, SDPA) over the canonical rows of a few graphs vs their tree rows, with the
largest difference of the trained tokens' logprobs between the two (numeric equivalence).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT))

from benchmarks import corpus as gen  # noqa: E402

TOKENIZERS = {
    "qwen3": ("tokenizers/qwen3", None),
    "qwen2.5": ("tokenizers/qwen3", "tokenizers/qwen2.5-instruct/tokenizer_config.json"),
}
PACK_LENGTHS = (None, 32768, 131072)


def _convert(inputs: list[Path], out: Path, template: str, **options: Any) -> tuple[float, dict[str, Any]]:
    from msgtrain.run.config import ConvertConfig
    from msgtrain.run.pipeline import convert

    folder, config = TOKENIZERS[template]
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    report = convert(
        ConvertConfig(
            inputs=[str(p) for p in inputs],
            output=out,
            tokenizer=str(SHARED / folder),
            chat_template=str(SHARED / config) if config else None,
            quiet=True,
            **options,
        )
    )
    return time.perf_counter() - started, report


def _data_sets(work: Path) -> list[tuple[str, list[Path], str]]:
    real = SHARED / "real_logs"
    generated = work / "qwen3-agent-32t"
    if not generated.is_dir():
        generated.mkdir(parents=True)
        pool = gen.load_pool(real)
        convs = gen.make_conversations(pool, 32, 16, reasoning=True)
        for k, group in enumerate(gen.spread(convs, 4)):
            gen.write_calls(generated / f"part-{k:03d}.jsonl", group, model="bench-policy")
    return [
        ("claude_code_spotter / Qwen2.5", [real / "claude_code_spotter"], "qwen2.5"),
        ("tau_bench first20 / Qwen3", [real / "tau_bench" / "gpt-4o-airline.first20.json"], "qwen3"),
        ("generated agent 16×32 turns / Qwen3", [generated], "qwen3"),
    ]


def _read(out: Path) -> Any:
    import pyarrow.parquet as pq

    return pq.read_table(sorted((out / "data").glob("*.parquet")))


def training_step(canonical: Any, max_tree_tokens: int, graphs: int) -> dict[str, Any]:
    """Forward + backward of a tiny random Qwen3 over the canonical rows of up to ``graphs`` graphs whose tree
    fits ``max_tree_tokens`` vs over their tree rows (one row per graph, batch 1 each)."""
    import pyarrow.compute as pc
    import torch
    import transformers

    from msgtrain.export.tree import tree_table
    from msgtrain.trainers.tree import collate, tree_logprobs

    whole = tree_table(canonical, None)
    fitting = [
        r
        for r in whole.select(["graph_ids", "num_tokens", "num_flat_tokens", "num_samples"]).to_pylist()
        if r["num_tokens"] <= max_tree_tokens and r["num_samples"] > 1
    ]
    # The graphs whose trees save the most (ties: the larger tree), so the step shows what sharing buys.
    fitting.sort(key=lambda r: (-r["num_flat_tokens"] / r["num_tokens"], -r["num_tokens"]))
    chosen = fitting[:graphs]
    if not chosen:
        return {}
    keep = sorted({g for r in chosen for g in r["graph_ids"]})
    subset = canonical.filter(pc.is_in(canonical["graph_id"], value_set=__import__("pyarrow").array(keep)))
    tree = tree_table(subset, None)
    vocab = 2048
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=1 << 17,
    )
    config._attn_implementation = "sdpa"
    model = transformers.Qwen3ForCausalLM(config).float()

    def canonical_step() -> dict[tuple[str, str, int], float]:
        got: dict[tuple[str, str, int], float] = {}
        model.zero_grad()
        for c in subset.to_pylist():
            ids = torch.tensor([c["input_ids"]]) % vocab
            logits = model(input_ids=ids).logits
            lp = torch.log_softmax(logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
            mask = torch.tensor(c["loss_mask"][1:], dtype=torch.bool)
            (-(lp[mask]).sum()).backward()
            values = lp.detach().tolist()
            for tid, span in zip(c["turn_ids"], c["turn_spans"], strict=True):
                for k in range(span["end"] - span["start"]):
                    got[(c["sample_id"], tid, k)] = values[span["start"] - 1 + k]
        return got

    def tree_step() -> dict[tuple[str, str, int], float]:
        got: dict[tuple[str, str, int], float] = {}
        model.zero_grad()
        for r in tree.to_pylist():
            r["input_ids"] = [i % vocab for i in r["input_ids"]]
            batch = collate([r])
            lp = tree_logprobs(model, batch)
            (-(lp * batch["loss_mask"]).sum()).backward()
            values = lp[0].detach().tolist()
            seen: dict[int, int] = {}
            for q, t in enumerate(r["turn_index"]):
                if t >= 0:
                    k = seen.get(t, 0)
                    seen[t] = k + 1
                    got[(r["turn_sample_ids"][t], r["turn_ids"][t], k)] = values[q]
        return got

    torch.set_num_threads(max(1, (os.cpu_count() or 1)))
    started = time.perf_counter()
    flat_lp = canonical_step()
    canonical_seconds = time.perf_counter() - started
    started = time.perf_counter()
    tree_lp = tree_step()
    tree_seconds = time.perf_counter() - started
    assert flat_lp.keys() == tree_lp.keys()
    return {
        "graphs": len(keep),
        "samples": subset.num_rows,
        "flat_tokens": int(pc.sum(subset["num_tokens"]).as_py()),
        "tree_tokens": int(pc.sum(tree["num_tokens"]).as_py()),
        "canonical_seconds": round(canonical_seconds, 3),
        "tree_seconds": round(tree_seconds, 3),
        "time_ratio": round(tree_seconds / canonical_seconds, 3),
        "max_abs_logprob_diff": max(abs(flat_lp[k] - tree_lp[k]) for k in flat_lp),
        "trained_tokens": len(flat_lp),
    }


def tree_tokens(canonical: Any, pack_length: int | None, scope: str) -> dict[str, Any]:
    """Tree rows of ``canonical`` at one pack length and scope, against the trie and the lower bound of any cut.

    As ``convert --pack-length N`` does, samples longer than N are dropped first (counted here); the trie, the
    flat tokens and the bound are those of the samples kept."""
    import pyarrow.compute as pc

    from msgtrain.export.tree import TreeStats, tokens_lower_bound, tree_table

    kept = canonical if pack_length is None else canonical.filter(pc.less_equal(canonical["num_tokens"], pack_length))
    stats = TreeStats()
    tree_table(kept, pack_length, scope, stats)
    bound = stats.trie_tokens if pack_length is None else tokens_lower_bound(kept, pack_length, scope)
    return {
        "dropped_too_long": canonical.num_rows - kept.num_rows,
        "rows": stats.rows,
        "flat_tokens": stats.flat_tokens,
        "trie_tokens": stats.trie_tokens,
        "tokens": stats.tokens,
        "lower_bound": bound,
        "tree_per_trie": round(stats.tokens / stats.trie_tokens, 4) if stats.trie_tokens else None,
        "bound_per_trie": round(bound / stats.trie_tokens, 4) if stats.trie_tokens else None,
        "flat_per_tree": round(stats.flat_tokens / stats.tokens, 3) if stats.tokens else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-step", action="store_true", help="skip the training step (minutes on a small CPU)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--work", type=Path, default=ROOT / "benchmarks" / ".corpus" / "tree")
    parser.add_argument("--step-max-tree-tokens", type=int, default=8192)
    parser.add_argument("--step-graphs", type=int, default=3)
    args = parser.parse_args(argv)
    if not (SHARED / "real_logs").is_dir() or not (SHARED / "tokenizers" / "qwen3").is_dir():
        print("skipped: ../shared (real logs and tokenizers) is not present")
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {os.getloadavg()}")
    results = []
    for name, inputs, template in _data_sets(args.work):
        out = args.work / "out"
        _convert(inputs, out / "canonical", template)  # warm-up: file cache, imports, tokenizer files
        times_c, times_t = [], []
        for _ in range(args.repeat):
            seconds, report = _convert(inputs, out / "canonical", template)
            times_c.append(seconds)
            seconds, tree_report = _convert(inputs, out / "tree", template, target="tree")
            times_t.append(seconds)
        canonical = _read(out / "canonical")
        longest = int(max(canonical["num_tokens"].to_pylist()))
        entry: dict[str, Any] = {
            "data": name,
            "samples": canonical.num_rows,
            "longest_sample": longest,
            "flat_tokens": report["tokens"]["total"],
            "trained_tokens": report["tokens"]["trained"],
            "trie_tokens": tree_report["outputs"]["tree"]["trie_tokens"],
            "convert_seconds_canonical": round(statistics.median(times_c), 3),
            "convert_seconds_tree": round(statistics.median(times_t), 3),
            "trees": {},
        }
        entry["convert_time_ratio"] = round(entry["convert_seconds_tree"] / entry["convert_seconds_canonical"], 3)
        for scope in ("graph", "split"):
            for pack_length in PACK_LENGTHS:
                entry["trees"][f"{scope}@{pack_length or 'none'}"] = tree_tokens(canonical, pack_length, scope)
        if not args.no_step:
            entry["training_step"] = training_step(canonical, args.step_max_tree_tokens, args.step_graphs)
        results.append(entry)
        print(json.dumps(entry, indent=2))
    print(f"load average at end: {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
