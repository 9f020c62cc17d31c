"""Time per input file of ``msgtrain convert`` on many small files: 500, 5,000 and 50,000 by default.

Usage: ``python3 benchmarks/files.py`` (``--counts 500 5000`` for a quicker look, ``--resume`` to also time a
second, fully resumed run over the same files); benchmarks/README.md explains it.

Each count is a folder of that many small OpenAI chat JSONL files (one two-turn conversation each, a few hundred
bytes, every file with bytes of its own: identical bytes are converted once), written once into
``benchmarks/.corpus/files-N/`` and reused. Each conversion is a fresh process running ``msgtrain convert`` with the
embedded demo tokenizer and one worker; the time printed is the conversion's own (``seconds`` of the returned report,
from the start of ``convert`` to the published dataset: discovery, hashing, parts, assembly, publish), and the wall
time of the whole process beside it. What the goal measures is that time per file staying flat as the count grows
(within 20 %): any per-part cost that grows with the number of parts (a state file rewritten after every part) shows
up as a per-file time growing with the count.

Invariants: nothing here changes what msgtrain does; each run's dataset is checked to hold one sample per file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "benchmarks" / ".corpus"
CHILD = """
import json, sys
from msgtrain.run.config import ConvertConfig
from msgtrain.run.pipeline import convert
cfg = ConvertConfig(inputs=[sys.argv[1]], output=sys.argv[2], resume=sys.argv[3] == "1")
report = convert(cfg)
print(json.dumps({"seconds": report["seconds"], "samples": report["samples"]["written"],
                  "reused": report["resume"]["reused"]}))
"""


def corpus(count: int) -> Path:
    """A folder of ``count`` small chat logs (made once; 1,000 files per sub-folder)."""
    folder = CORPUS / f"files-{count}"
    done = folder / ".complete"
    if done.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    for i in range(count):
        sub = folder / f"{i // 1000:03d}"
        if i % 1000 == 0:
            sub.mkdir(parents=True)
        record = {
            "messages": [
                {"role": "system", "content": "You answer questions about numbers."},
                {"role": "user", "content": f"What is {i} plus {i % 97}?"},
                {"role": "assistant", "content": f"{i} plus {i % 97} is {i + i % 97}."},
                {"role": "user", "content": "And doubled?"},
                {"role": "assistant", "content": f"Doubled, it is {2 * (i + i % 97)}."},
            ]
        }
        (sub / f"chat-{i:06d}.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    done.write_text("", encoding="utf-8")
    return folder


def run_once(inputs: Path, out: Path, resume: bool) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(inputs), str(out), "1" if resume else "0"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"convert failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**data, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[500, 5000, 50000])
    parser.add_argument("--resume", action="store_true", help="also time a fully resumed second run")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    header = f"{'files':>7} {'run':>7} {'convert s':>10} {'wall s':>8} {'ms / file':>10}"
    print(header)
    base: float | None = None
    for count in args.counts:
        inputs = corpus(count)
        with tempfile.TemporaryDirectory(prefix="msgtrain-files-") as tmp:
            out = Path(tmp) / "out"
            runs = [("fresh", False), *([("resumed", True)] if args.resume else [])]
            for label, resume in runs:
                result = run_once(inputs, out, resume)
                if result["samples"] != count:
                    raise SystemExit(f"{count} files gave {result['samples']} samples")
                per_file = 1000 * result["seconds"] / count
                if label == "fresh" and base is None:
                    base = per_file
                ratio = f"  ({per_file / base:.2f}x the first)" if label == "fresh" and base else ""
                print(
                    f"{count:>7} {label:>7} {result['seconds']:>10.1f} {result['wall']:>8.1f} {per_file:>10.2f}{ratio}"
                )
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
