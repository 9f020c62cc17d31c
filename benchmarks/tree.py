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
``--repeat``, in one process, tokenizer load included on both sides); a training step (forward + backward) of a
tiny random Qwen3 on CPU (fp32, SDPA, one thread) over the canonical rows that fit ``--step-pack-length`` vs their
tree rows, in interleaved pairs: the time ratio against the token ratio, the summed loss of both, the largest
logprob and gradient differences (``--step-dense`` adds the tree rows through a dense mask); and the peak memory
of ``collate`` for the longest row at 32768 tokens.
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


def _tiny_qwen3(vocab: int) -> Any:
    """The test suite's small Qwen3 shape (2 layers, 4 heads of 16, 2 KV heads), random, fp32, SDPA."""
    import torch
    import transformers

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
    return transformers.Qwen3ForCausalLM(config).float()


def training_step(canonical: Any, pack_length: int, graphs: int, repeat: int, dense: bool = False) -> dict[str, Any]:
    """Forward + backward of a tiny random Qwen3 over the canonical rows of ``graphs`` graphs (0: all) that fit
    ``pack_length`` vs over their tree rows at that pack length (batch 1 each), in ``repeat`` interleaved pairs.

    Reports the token ratio (tree / flat tokens), the median step-time ratio and the two against each other, the
    summed loss of both (relative difference), the largest logprob difference of a trained token and the
    largest relative difference of a parameter's gradient. With ``dense``, a third side: the tree rows through a
    dense ``L × L`` boolean mask (what ``msgtrain.trainers.tree`` passed before it had a sparse form)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import torch

    from msgtrain.export.tree import tree_table
    from msgtrain.trainers.tree import collate, dense_mask, tree_logprobs

    kept = canonical.filter(pc.less_equal(canonical["num_tokens"], pack_length))
    ids = sorted(set(kept["graph_id"].to_pylist()))
    if graphs:
        ids = ids[:graphs]
    subset = kept.filter(pc.is_in(kept["graph_id"], value_set=pa.array(ids)))
    if not subset.num_rows:
        return {}
    tree = tree_table(subset, pack_length)
    vocab = 2048
    model = _tiny_qwen3(vocab)
    flat_rows = subset.to_pylist()
    tree_rows = tree.to_pylist()
    for r in tree_rows:
        r["input_ids"] = [i % vocab for i in r["input_ids"]]

    def canonical_step() -> tuple[dict[tuple[str, str, int], float], float]:
        got: dict[tuple[str, str, int], float] = {}
        total = 0.0
        model.zero_grad()
        for c in flat_rows:
            ids = torch.tensor([c["input_ids"]]) % vocab
            logits = model(input_ids=ids).logits
            lp = torch.log_softmax(logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
            mask = torch.tensor(c["loss_mask"][1:], dtype=torch.bool)
            loss = -(lp[mask]).sum()
            loss.backward()
            total += loss.item()
            values = lp.detach().tolist()
            for tid, span in zip(c["turn_ids"], c["turn_spans"], strict=True):
                for k in range(span["end"] - span["start"]):
                    got[(c["sample_id"], tid, k)] = values[span["start"] - 1 + k]
        return got, total

    def tree_step(dense: bool = False) -> tuple[dict[tuple[str, str, int], float], float]:
        got: dict[tuple[str, str, int], float] = {}
        total = 0.0
        model.zero_grad()
        for r in tree_rows:
            batch = collate([r])
            mask = dense_mask(batch["subtree_end"], batch["lengths"]) if dense else None
            lp = tree_logprobs(model, batch, mask)
            loss = -(lp * batch["loss_mask"]).sum()
            loss.backward()
            total += loss.item()
            values = lp[0].detach().tolist()
            seen: dict[int, int] = {}
            for q, t in enumerate(r["turn_index"]):
                if t >= 0:
                    k = seen.get(t, 0)
                    seen[t] = k + 1
                    got[(r["turn_sample_ids"][t], r["turn_ids"][t], k)] = values[q]
        return got, total

    # One thread: the matrices are tiny, and on a shared machine a second OpenMP thread spins waiting for a core
    # (measured: small ops 30x slower at load 11 on 2 cores); both sides run the same way.
    torch.set_num_threads(1)
    flat_times, tree_times, dense_times = [], [], []
    for _ in range(max(1, repeat)):  # interleaved pairs: both sides see the same machine load
        started = time.process_time()
        flat_lp, flat_loss = canonical_step()
        flat_times.append(time.process_time() - started)
        flat_grad = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        started = time.process_time()
        tree_lp, tree_loss = tree_step()
        tree_times.append(time.process_time() - started)
        if dense:
            started = time.process_time()
            tree_step(dense=True)
            dense_times.append(time.process_time() - started)
    assert flat_lp.keys() == tree_lp.keys()
    grad_diff = max(
        float((p.grad - flat_grad[n]).norm() / flat_grad[n].norm().clamp(min=1e-30))
        for n, p in model.named_parameters()
        if p.grad is not None
    )
    flat_tokens = int(pc.sum(subset["num_tokens"]).as_py())
    tree_tokens_ = int(pc.sum(tree["num_tokens"]).as_py())
    time_ratio = statistics.median(t / f for t, f in zip(tree_times, flat_times, strict=True))
    token_ratio = tree_tokens_ / flat_tokens
    result = {
        "pack_length": pack_length,
        "graphs": len(ids),
        "samples": subset.num_rows,
        "tree_rows": tree.num_rows,
        "flat_tokens": flat_tokens,
        "tree_tokens": tree_tokens_,
        "token_ratio": round(token_ratio, 4),
        "canonical_cpu_seconds": [round(t, 2) for t in flat_times],
        "tree_cpu_seconds": [round(t, 2) for t in tree_times],
        "time_ratio": round(time_ratio, 4),
        "time_ratio_per_token_ratio": round(time_ratio / token_ratio, 3),
        "summed_loss_canonical": flat_loss,
        "summed_loss_tree": tree_loss,
        "loss_relative_diff": abs(tree_loss - flat_loss) / abs(flat_loss),
        "max_abs_logprob_diff": max(abs(flat_lp[k] - tree_lp[k]) for k in flat_lp),
        "max_relative_grad_diff": grad_diff,
        "trained_tokens": len(flat_lp),
    }
    if dense_times:
        result["dense_mask_cpu_seconds"] = [round(t, 2) for t in dense_times]
        result["dense_mask_time_ratio"] = round(
            statistics.median(t / f for t, f in zip(dense_times, flat_times, strict=True)), 4
        )
    return result


def collate_peak(canonical: Any, pack_length: int = 32768) -> dict[str, Any]:
    """Peak memory of :func:`collate` for the longest tree row at ``pack_length``, in a fresh process (a large one
    reuses its freed memory and would hide an allocation): the rise of its resident high-water mark (reset through
    ``/proc/self/clear_refs``) above its resident size before the call."""
    import subprocess
    import tempfile

    from msgtrain.export.tree import tree_table

    rows = tree_table(canonical, pack_length).to_pylist()
    if not rows:
        return {}
    row = max(rows, key=lambda r: len(r["input_ids"]))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "row.json"
        path.write_text(json.dumps(row))
        out = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--collate-peak", str(path)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    peak = json.loads(out)
    return {"row_tokens": len(row["input_ids"]), "collate_peak_mb": None if peak is None else round(peak / 2**20, 2)}


def _child_collate_peak(path: Path) -> int:
    from msgtrain.trainers.tree import collate

    row = json.loads(path.read_text())
    collate([row])  # warm: imports, torch's first allocations
    print(json.dumps(_peak_rise(lambda: collate([row]))))
    return 0


def _peak_rise(call: Any) -> int | None:
    """Bytes the resident high-water mark rises above the current resident size while ``call()`` runs (Linux)."""
    status = Path("/proc/self/status")
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None

    def field(name: str) -> int:
        line = next(x for x in status.read_text().splitlines() if x.startswith(name + ":"))
        return int(line.split()[1]) * 1024

    before = field("VmRSS")
    result = call()
    rise = field("VmHWM") - before
    del result
    return rise


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
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--collate-peak"]:
        return _child_collate_peak(Path(argv[1]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-step", action="store_true", help="skip the training step (minutes on a small CPU)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--work", type=Path, default=ROOT / "benchmarks" / ".corpus" / "tree")
    parser.add_argument("--step-pack-length", type=int, default=4096)
    parser.add_argument("--step-graphs", type=int, default=0, help="graphs in the training step (0: all that fit)")
    parser.add_argument("--step-repeat", type=int, default=2, help="interleaved canonical/tree step pairs")
    parser.add_argument("--step-dense", action="store_true", help="also time the tree rows with a dense mask")
    parser.add_argument("--only", help="run only the data sets whose name contains this")
    args = parser.parse_args(argv)
    if not (SHARED / "real_logs").is_dir() or not (SHARED / "tokenizers" / "qwen3").is_dir():
        print("skipped: ../shared (real logs and tokenizers) is not present")
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {os.getloadavg()}")
    results = []
    for name, inputs, template in _data_sets(args.work):
        if args.only and args.only not in name:
            continue
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
            entry["training_step"] = training_step(
                canonical, args.step_pack_length, args.step_graphs, args.step_repeat, args.step_dense
            )
        entry["collate_32k"] = collate_peak(canonical)
        results.append(entry)
        print(json.dumps(entry, indent=2))
    print(f"load average at end: {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
