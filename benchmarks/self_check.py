"""What the completion self-check costs, relative to linearization (msgtrain.linearize.plan ``_mismatch``).

```
python3 benchmarks/self_check.py             # the table in docs/performance.md
python3 benchmarks/self_check.py --repeat 3  # medians of 3
```

Every rendered turn is checked (no header that opens another turn in its ids; no other message's text in its
text), so its cost grows with the turns and the messages before each. Measured in one process on real logs and a
generated agent corpus (needs ``../shared``; prints ``skipped: ...`` without it): the time of ``linearize_graph``
over every graph, and the time spent inside the self-check, timed around each call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT))

from benchmarks import corpus as gen  # noqa: E402

DATA = {
    # name: (inputs under ../shared/real_logs or a generated corpus, tokenizer folder, chat template)
    "tau_bench (qwen3)": (["tau_bench"], "tokenizers/qwen3", None),
    "claude_code_spotter (qwen2.5)": (
        ["claude_code_spotter"],
        "tokenizers/qwen3",
        "tokenizers/qwen2.5-instruct/tokenizer_config.json",
    ),
    "codex (qwen2.5)": (
        ["codex_codemie", "codex_localpush_redacted"],
        "tokenizers/qwen3",
        "tokenizers/qwen2.5-instruct/tokenizer_config.json",
    ),
    "generated 16 x 32 turns (qwen3)": (["<generated>"], "tokenizers/qwen3", None),
}


def _graphs(inputs: list[str], work: Path) -> list[Any]:
    from msgtrain.ingest.boundary import open_reader, read_events
    from msgtrain.ingest.core.events import ReadGraph
    from msgtrain.run.plan import discover_inputs

    if inputs == ["<generated>"]:
        pool = gen.load_pool(SHARED / "real_logs")
        convs = gen.make_conversations(pool, 32, 16, reasoning=True)
        path = work / "generated.jsonl"
        gen.write_calls(path, convs, model="Qwen/Qwen3-8B")
        paths = [str(path)]
    else:
        paths = [str(SHARED / "real_logs" / i) for i in inputs]
    files, _ = discover_inputs(paths)
    out: list[Any] = []
    for f in files:
        opened = open_reader(f)
        if not hasattr(opened, "read"):
            continue
        out.extend(ev.graph for ev in read_events(opened, f) if isinstance(ev, ReadGraph))  # type: ignore[arg-type]
    return out


def measure(graphs: list[Any], tok: Any) -> tuple[float, float, int]:
    """(seconds linearizing, seconds inside the self-check, turns checked)."""
    from msgtrain.linearize import linearize_graph
    from msgtrain.linearize.plan import _GraphLinearizer

    spent = [0.0, 0]
    original: Callable[..., Any] = _GraphLinearizer._mismatch

    def timed(self: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(self, *args)
        finally:
            spent[0] += time.perf_counter() - t0
            spent[1] += 1

    _GraphLinearizer._mismatch = timed  # type: ignore[method-assign,assignment]
    try:
        t0 = time.perf_counter()
        for g in graphs:
            linearize_graph(g, tok)
        total = time.perf_counter() - t0
    finally:
        _GraphLinearizer._mismatch = original  # type: ignore[method-assign]
    return total, float(spent[0]), int(spent[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    if not (SHARED / "tokenizers" / "qwen3").is_dir():
        print(f"skipped: {SHARED} has no tokenizers/qwen3")
        return 0
    import tempfile

    from msgtrain.linearize import load_tokenizer

    print(f"{'data':34} {'turns':>6} {'linearize s':>12} {'self-check s':>13} {'share':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (inputs, folder, template) in DATA.items():
            if inputs != ["<generated>"] and not all((SHARED / "real_logs" / i).exists() for i in inputs):
                print(f"{name:34} skipped: not in ../shared")
                continue
            tok = load_tokenizer(str(SHARED / folder), str(SHARED / template) if template else None)
            graphs = _graphs(inputs, Path(tmp))
            runs = [measure(graphs, tok) for _ in range(args.repeat)]
            total = statistics.median(r[0] for r in runs)
            check = statistics.median(r[1] for r in runs)
            print(f"{name:34} {runs[0][2]:6d} {total:12.2f} {check:13.3f} {check / total:7.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
