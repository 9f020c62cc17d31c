"""Sweep the token-exactness oracle over template families × modes × seeds and count what msgtrain trains and loses.

    python -m tests.oracle_sweep [--families gemma4,llama3.1] [--seeds 20] [--turns 7]

For each family (any name tests/conftest.py's ``load_named_tokenizer`` knows) and mode (``engine``: every call
logged with the engine's prompt and completion ids; ``rendered``: none, so msgtrain renders the template) it
replays seeded runs with every hard case of tests/oracle.py's generator and prints a table: distinct sampled turns,
those the oracle can expect (the template renders them), trained exactly as expected, trained with other ids
(must be 0), and the turns msgtrain did not train, by its reason. The test suite runs a few seeds of the same
replay (tests/test_linearize_oracle_gguf.py); this tool is for the wide sweep.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.oracle import END_OF_TURN, NO_TOOLS, Oracle, RunGenerator, expected_turns, to_records

MODES = {"engine": 1.0, "rendered": 0.0}
HARD = 0.5


@dataclass
class Tally:
    sampled: int = 0  # distinct sampled turns (same context, same message: once)
    expected: int = 0  # of which the oracle can expect ids (the template renders them, or the engine logged them)
    exact: int = 0  # trained spans equal to an expected turn
    wrong: int = 0  # trained spans equal to no expected turn
    lost: Counter[str] = field(default_factory=Counter)  # msgtrain's drop reasons

    def add(self, other: Tally) -> None:
        self.sampled += other.sampled
        self.expected += other.expected
        self.exact += other.exact
        self.wrong += other.wrong
        self.lost.update(other.lost)


def _oracle(name: str, cache: dict[str, tuple[Any, Oracle]]) -> tuple[Any, Oracle]:
    if name not in cache:
        from tests.conftest import load_named_tokenizer

        tok = load_named_tokenizer(name)
        cache[name] = (tok, Oracle(tok.hf, name))
    return cache[name]


def replay(
    name: str, seed: int, mode: str, *, n_turns: int = 7, cache: dict[str, tuple[Any, Oracle]] | None = None
) -> tuple[Tally, list[dict[str, Any]], list[Any]]:
    """One seeded run of ``name`` in ``mode`` through msgtrain: (tally, rows, expected turns)."""
    from msgtrain.export.schema import samples_to_table
    from msgtrain.ingest.boundary import read_events
    from msgtrain.ingest.core.base import ReadGraph
    from msgtrain.ingest.formats.api.calls import READER as CALLS
    from msgtrain.linearize import linearize_graph

    tok, oracle = _oracle(name, {} if cache is None else cache)
    rng = random.Random(1000 + seed)
    calls = RunGenerator(seed, name, with_tools=name not in NO_TOOLS, hard=HARD).run(n_turns=n_turns)
    records = to_records(oracle, calls, rng, MODES[mode])
    expected = expected_turns(oracle, calls)
    tally = Tally(expected=len(expected))
    tally.sampled = len({json.dumps([c.context, c.tools, m], sort_keys=True) for c in calls for m in c.choices})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "calls.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        samples = []
        for event in read_events(CALLS, path):
            assert isinstance(event, ReadGraph), event
            res = linearize_graph(event.graph, tok)
            samples.extend(res.samples)
            tally.lost.update(t.reason or "?" for t in res.turns if t.status != "trained")
    rows = samples_to_table(samples).to_pylist() if samples else []
    want = Counter((tuple(e.prompt), tuple(e.completion)) for e in expected)
    for row in rows:
        ids = row["input_ids"]
        for span in row["turn_spans"]:
            key = (tuple(ids[: span["start"]]), tuple(ids[span["start"] : span["end"]]))
            if want[key] > 0:
                want[key] -= 1
                tally.exact += 1
            else:
                tally.wrong += 1
    return tally, rows, expected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=",".join(sorted(END_OF_TURN)))
    parser.add_argument("--modes", default="engine,rendered")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--turns", type=int, default=7)
    args = parser.parse_args(argv)
    cache: dict[str, tuple[Any, Oracle]] = {}
    print("| family | mode | sampled turns | expected | trained exact | trained wrong | lost (reason: turns) |")
    print("|---|---|---|---|---|---|---|")
    bad = False
    for name in args.families.split(","):
        for mode in args.modes.split(","):
            total = Tally()
            start = time.monotonic()
            for seed in range(args.seeds):
                tally, _, _ = replay(name, seed, mode, n_turns=args.turns, cache=cache)
                total.add(tally)
            lost = ", ".join(f"{r}: {n}" for r, n in total.lost.most_common()) or "-"
            print(
                f"| {name} | {mode} | {total.sampled} | {total.expected} | {total.exact} | {total.wrong} | {lost} |"
                f"  ({time.monotonic() - start:.0f} s)",
                flush=True,
            )
            bad = bad or total.wrong > 0 or total.exact < total.expected
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
