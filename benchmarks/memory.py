"""Peak memory of ``msgtrain convert`` against the size of the largest record: the bound in docs/performance.md.

Usage: ``python3 benchmarks/memory.py`` (record sizes 1, 10 and 45 MB; ``--sizes 1 4 16``; ``--tokenizer
PATH`` or ``demo``, default the Qwen3 tokenizer of ../shared when present, else the embedded demo tokenizer).

Per size, one JSONL file holds a few small conversations and one conversation whose record is that large (a user
message of ~size bytes of prose, and a short reply), converted by a fresh ``msgtrain convert`` process; its peak
RSS (``ru_maxrss`` of the child) is printed against the record size. A first run with only the small conversations
gives the base; ``k`` is printed as the least-squares slope of (peak - base) against the record size and as the
largest (peak - base) / size, the factor of the bound ``peak ≤ base + k × largest record`` the docs state.

``--writer`` measures instead the floor pyarrow's Parquet writer sets (docs/performance.md, Memory): one row holding
a list of n values, written alone by pyarrow with the export's settings (zstd, dictionary, statistics), against the
same values as a flat column and against the export's own writing of the row (msgtrain's pages for a long row,
``msgtrain/export/parquet_pages.py``), each in a fresh process; it prints the added peak RSS per value.

Invariants: one process per measurement (peaks never mix); the inputs are generated, nothing from ../shared but the
tokenizer is read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QWEN3 = ROOT.parent / "shared" / "tokenizers" / "qwen3"
RUN = "import sys; sys.argv[0] = 'msgtrain'; from msgtrain.cli import run; run()"
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "tired", "engineers"]


def _small(i: int) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"a {i}"}]}


def _prose(size: int) -> str:
    out: list[str] = []
    n = 0
    i = 0
    while n < size:
        word = WORDS[(i * 7 + i // 13) % len(WORDS)]
        out.append(word)
        n += len(word) + 1
        i += 1
    return " ".join(out)


def write_input(folder: Path, size: int) -> Path:
    """A JSONL log of 8 small conversations and, when ``size`` > 0, one record of about ``size`` bytes."""
    path = folder / f"log-{size}.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(8):
            f.write(json.dumps(_small(i)) + "\n")
        if size:
            big = {"messages": [{"role": "user", "content": _prose(size)}, {"role": "assistant", "content": "ok"}]}
            f.write(json.dumps(big) + "\n")
    return path


def peak_rss(path: Path, out: Path, tokenizer: str | None) -> int:
    """Peak RSS in bytes of one ``msgtrain convert`` process (its own ``ru_maxrss``, read when it is reaped)."""
    cmd = [sys.executable, "-c", RUN, "convert", str(path), "-o", str(out), "-q", "--max-graph-tokens", "0"]
    if tokenizer:
        cmd += ["--tokenizer", tokenizer]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode not in (0, 3):
        raise SystemExit(f"convert failed ({proc.returncode}): {stderr[-2000:].decode(errors='replace')}")
    return int(usage.ru_maxrss) * 1024


WRITE_ONE = """
import sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
n, kind, layout, path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
values = pa.array((np.arange(n) % 97).astype(kind))
column = values if layout == "flat" else pa.ListArray.from_arrays(pa.array([0, n], type=pa.int32()), values)
table = pa.table({"c": column})
def rss(field):  # this process's own (ru_maxrss would count the parent's RSS at the fork)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))
def reset_peak():  # what building the values held is not the writer's
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
if layout == "pages":  # as the export writes it: msgtrain's own pages for a row this long
    from pathlib import Path
    from msgtrain.export.buffer import RowBuffer
    from msgtrain.export.writer import _ParquetSink
    reset_peak()
    before = rss("VmRSS:")
    sink = _ParquetSink(Path(path), "train", table.schema, 1, RowBuffer(1, 1 << 40, "c"), "zstd")
    sink.append(table)
    sink.close()
else:
    reset_peak()
    before = rss("VmRSS:")
    with pq.ParquetWriter(path, table.schema, compression="zstd", use_dictionary=True, write_statistics=True) as w:
        w.write_table(table, row_group_size=table.num_rows)
print(rss("VmHWM:") - before)
"""


def writer_floor(values: list[int]) -> None:
    """Print what pyarrow's Parquet writer adds to the peak for one row of n list values, against flat values and
    against msgtrain's own pages (what the export writes for a row this long)."""
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "system")}
    print(f"pyarrow {pa_version()}, Arrow pool {env['ARROW_DEFAULT_MEMORY_POOL']}")
    head = ["values", "type", "one row (pyarrow's page)", "flat column", "msgtrain's pages", "bytes per value"]
    print("| " + " | ".join(head) + " |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="msgtrain-mem-") as tmp:
        for n in values:
            for kind in ("int32", "int8"):
                added = {}
                for layout in ("list", "flat", "pages"):
                    where = Path(tmp) / ("out" if layout == "pages" else "one.parquet")
                    cmd = [sys.executable, "-c", WRITE_ONE, str(n), kind, layout, str(where)]
                    added[layout] = int(
                        subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, cwd=ROOT).stdout
                    )
                    shutil.rmtree(where, ignore_errors=True)
                mib = {k: f"+{v / 2**20:.0f} MiB" for k, v in added.items()}
                print(
                    f"| {n / 1e6:.0f} M | {kind} | {mib['list']} | {mib['flat']} | {mib['pages']}"
                    f" | {added['list'] / n:.1f} (pyarrow), {added['pages'] / n:.1f} (msgtrain) |"
                )


def pa_version() -> str:
    import pyarrow

    return str(pyarrow.__version__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 10, 45], help="record sizes in MB")
    parser.add_argument("--tokenizer", default=str(QWEN3) if QWEN3.is_dir() else None, help="a folder, or demo")
    parser.add_argument("--writer", action="store_true", help="measure the Parquet writer's floor instead")
    args = parser.parse_args(argv)
    if args.writer:
        writer_floor(sorted(int(s * 1_000_000) for s in args.sizes))
        return 0
    if args.tokenizer in ("", "demo"):
        args.tokenizer = None
    sizes = sorted(int(s * 1_000_000) for s in args.sizes)
    with tempfile.TemporaryDirectory(prefix="msgtrain-mem-") as tmp:
        folder = Path(tmp)
        base = peak_rss(write_input(folder, 0), folder / "out-0", args.tokenizer)
        rows = []
        for size in sizes:
            peak = peak_rss(write_input(folder, size), folder / f"out-{size}", args.tokenizer)
            rows.append((size, peak))
    n = len(rows)
    mean_x = sum(s for s, _ in rows) / n
    mean_y = sum(p - base for _, p in rows) / n
    k = sum((s - mean_x) * (p - base - mean_y) for s, p in rows) / max(sum((s - mean_x) ** 2 for s, _ in rows), 1)
    worst = max((p - base) / s for s, p in rows)
    print(f"tokenizer: {args.tokenizer or 'demo'}; base (no large record): {base / 2**20:.0f} MiB")
    print("| record | peak RSS | peak − base | (peak − base) / record |")
    print("|---|---|---|---|")
    for size, peak in rows:
        extra = peak - base
        print(f"| {size / 1e6:.0f} MB | {peak / 2**20:.0f} MiB | {extra / 2**20:.0f} MiB | {extra / size:.1f} |")
    print(f"k (slope) = {k:.1f}; largest ratio = {worst:.1f}: peak ≤ {base / 2**20:.0f} MiB + {worst:.0f} × record")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
