"""msgtrain convert against the tokenizer floor and the naive per-call approach, in one run on one machine.

Usage: ``python3 benchmarks/run.py`` (``make bench``); ``--help`` for options; benchmarks/README.md explains the
columns and the targets. Corpora are generated into ``benchmarks/.corpus/`` (git-ignored) from the real logs under
``../shared/real_logs`` and reused while the generator and its parameters are unchanged.

Invariants:
- Every number in one table comes from this run on this machine; times are medians of ``--repeat`` runs.
- ``floor`` and ``naive`` run in this process with one tokenizer thread (RAYON_NUM_THREADS=1, set before any
  tokenizer is imported), the tokenizer already loaded; ``msgtrain convert`` runs as a subprocess and its process
  start (imports, tokenizer load, worker spawn: a convert of two one-turn files with the same workers) is measured
  separately and subtracted.
- The outputs of every worker count are compared byte for byte.
"""

from __future__ import annotations

import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before tokenizers is imported: the floor uses one core
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import functools
import hashlib
import itertools
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import corpus as gen  # noqa: E402 - needs the repository root on sys.path
from benchmarks.baselines import floor, naive  # noqa: E402

SHARED = ROOT.parent / "shared"
TOKENIZER = SHARED / "tokenizers" / "qwen3"
TEMPLATES = {
    # name -> (chat template override or None, reasoning in the logs)
    "qwen2.5": (SHARED / "tokenizers" / "qwen2.5-instruct" / "tokenizer_config.json", False),
    "qwen3": (None, True),
}
FORMATS = ("calls", "calls+ids", "native")
MODEL = "bench-policy"
FILES_PER_CORPUS = 8


# ------------------------------------------------------------------------------------------------ corpora
@dataclass(frozen=True)
class CorpusSpec:
    template: str
    fmt: str
    turns: int
    conversations: int

    @property
    def name(self) -> str:
        # The conversation count is part of the name: the naive baseline's subset is a corpus of its own.
        return f"{self.template}-{self.fmt.replace('+', '-')}-{self.turns}t-{self.conversations}c"


def _generator_digest() -> str:
    h = hashlib.blake2b(digest_size=8)
    h.update((ROOT / "benchmarks" / "corpus.py").read_bytes())
    return h.hexdigest()


def build_corpus(spec: CorpusSpec, root: Path, pool: gen.ContentPool, tokenizers: dict[str, Any]) -> Path:
    """Write the corpus's files (reused when its stamp matches the generator and the spec)."""
    out = root / spec.name
    stamp = {"spec": asdict(spec), "generator": _generator_digest(), "pool": pool.summary()}
    # Beside the corpus, not in it: msgtrain reads every file of the folder it is given (hidden files included)
    # and would reject the stamp as a log it does not know (exit 3).
    stamp_file = root / f".{spec.name}.stamp.json"
    if stamp_file.is_file() and json.loads(stamp_file.read_text()) == stamp:
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    reasoning = TEMPLATES[spec.template][1]
    convs = gen.make_conversations(pool, spec.turns, spec.conversations, reasoning=reasoning)
    engine = gen.EngineIds(tokenizers[spec.template].hf) if spec.fmt == "calls+ids" else None
    for k, group in enumerate(gen.spread(convs, FILES_PER_CORPUS)):
        path = out / f"part-{k:03d}.jsonl"
        if spec.fmt == "native":
            gen.write_native(path, group, model=MODEL)
        else:
            gen.write_calls(path, group, model=MODEL, engine=engine)
    stamp_file.write_text(json.dumps(stamp))
    return out


def build_start_probe(root: Path, pool: gen.ContentPool, template: str) -> Path:
    """Two one-turn files: converting them costs process start, tokenizer load and (with -j 2) worker spawn."""
    out = root / f"start-probe-{template}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for k, conv in enumerate(gen.make_conversations(pool, 1, 2, reasoning=TEMPLATES[template][1], seed=7)):
        gen.write_calls(out / f"probe-{k}.jsonl", [conv], model=MODEL)
    return out


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*.jsonl"))


# ------------------------------------------------------------------------------------------------ measuring
@dataclass
class ProcResult:
    seconds: float  # wall time of the whole subprocess
    convert_seconds: float  # inside it, after imports, tokenizer load and worker-pool start (see child_convert)
    pool_seconds: float  # starting and warming the worker pool (0 with one worker)
    warm_pool: bool  # the pipeline used the pre-started pool
    max_rss_mb: float  # largest single process of the tree (peak VmHWM)
    tree_rss_mb: float  # peak of the summed VmRSS over the process tree
    digest: str
    report: dict[str, Any]
    convert_cpu: float = 0.0  # CPU seconds (user + system) of the same span, worker processes included
    # The tokenizer's run counters (one worker: the conversion runs in the timed process; None with a pool): encoder
    # calls and input characters, characters of the segments the run-wide cache stored and evicted, renderings.
    work: dict[str, int] | None = None


def _cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (a worker pool's processes once shut down)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc; empty where /proc is absent)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out.extend(kids)
        todo.extend(kids)
    return out


def _memory_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in kB; zeros when it is gone."""
    rss = hwm = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return rss, hwm


def run_measured(cmd: Sequence[str], sample_memory: bool = True) -> tuple[float, float, float]:
    """Run ``cmd``; return (wall seconds, largest process peak RSS MB, peak summed tree RSS MB).

    Memory is sampled from /proc every 20 ms (VmHWM per process after its exec, so a child forked from this large
    process is not charged for our pages, which ``wait4``'s ru_maxrss would do). The sampler walks /proc and
    takes CPU from the run it watches (a loaded 2-core machine turned a 0.80 msgtrain/TRL ratio into 1.33), so a
    run whose time is compared with an unsampled one passes ``sample_memory=False`` (memory then reads 0).
    """
    tree_peak = 0
    hwm: dict[int, int] = {}
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stop = threading.Event()

    def sample() -> None:
        nonlocal tree_peak
        while not stop.wait(0.02):
            total = 0
            for pid in [proc.pid, *_children(proc.pid)]:
                rss, peak = _memory_kb(pid)
                total += rss
                hwm[pid] = max(hwm.get(pid, 0), peak)
            tree_peak = max(tree_peak, total)

    sampler = threading.Thread(target=sample, daemon=True)
    if sample_memory:
        sampler.start()
    _, err = proc.communicate()
    seconds = time.perf_counter() - started
    stop.set()
    if sample_memory:
        sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {err.decode(errors='replace')[-2000:]}")
    return seconds, max(hwm.values(), default=0) / 1024, tree_peak / 1024


def output_digest(out: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in sorted(out.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(out)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


# Modules the convert command imports lazily; the child imports them before its clock starts (process start).
PRELOAD = ("msgtrain.run.config", "msgtrain.run.pipeline", "msgtrain.export.writer", "datasets", "pandas")


def _warm_worker(tokenizer: str | None, template: str | None) -> int:
    """Runs in a pool worker: load the tokenizer (as the first task would), then linger so each worker gets one."""
    import importlib

    from msgtrain.linearize import load_tokenizer

    for name in ("msgtrain.run.parts", "msgtrain.ingest.registry", "pyarrow.ipc"):
        importlib.import_module(name)
    load_tokenizer(tokenizer, template)
    time.sleep(0.3)
    return os.getpid()


def child_convert(timing: Path, argv: list[str], warm: bool = True) -> int:
    """``msgtrain convert ARGV`` in this process, timing the command apart from process and worker-pool start.

    With ``--workers N > 1`` the pool the pipeline would start is started here first and warmed (each worker loads
    the tokenizer) before the clock starts; the pipeline then gets that pool. Its start is quoted separately.
    With ``warm=False`` the command runs as a user would run it (the pipeline starts its own pool).
    """
    import importlib
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from msgtrain.cli import main as cli_main
    from msgtrain.linearize import load_tokenizer
    from msgtrain.run import execute

    for name in PRELOAD:
        importlib.import_module(name)
    opts = dict(itertools.pairwise(argv))
    tokenizer, template = opts.get("--tokenizer"), opts.get("--chat-template")
    tok = load_tokenizer(tokenizer, template)
    workers = int(opts.get("--workers", "1"))
    pool_start = 0.0
    used: list[bool] = []
    if workers > 1 and warm:
        t = time.perf_counter()
        pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=get_context("spawn"),
            initializer=execute._worker_init,
            initargs=(os.getpid(),),
        )
        pids = set(pool.map(_warm_worker, [tokenizer] * workers * 2, [template] * workers * 2))
        pool_start = time.perf_counter() - t

        def warm_pool(*args: Any, **kwargs: Any) -> ProcessPoolExecutor:
            used.append(len(pids) == workers)
            return pool

        vars(execute)["ProcessPoolExecutor"] = warm_pool  # the local pool executor's next pool is this warm one
    before = _work(tok)
    started, cpu = time.perf_counter(), _cpu_seconds()
    rc = cli_main(["convert", *argv])
    data = {
        "convert": time.perf_counter() - started,
        "cpu": _cpu_seconds() - cpu,
        "pool_start": pool_start,
        "warm_pool": all(used) and bool(used),
        "work": {k: v - before[k] for k, v in _work(tok).items()} if workers == 1 else None,
    }
    timing.write_text(json.dumps(data))
    return rc


def _work(tok: Any) -> dict[str, int]:
    """The run counters of a tokenizer bundle (see ProcResult.work)."""
    cache = tok.segment_cache
    return {
        "encode_calls": tok.encode_calls,
        "encoded_chars": tok.encoded_chars,
        "stored_chars": cache.stored_chars,
        "evicted": cache.evicted,
        "renders": tok.renders,
    }


def run_convert(
    inputs: Path,
    out: Path,
    template: str,
    workers: int,
    extra: Sequence[str] = (),
    warm: bool = True,
    sample_memory: bool = True,
) -> ProcResult:
    tpl = TEMPLATES[template][0]
    args = [str(inputs), "-o", str(out), "-q", "--tokenizer", str(TOKENIZER), "--workers", str(workers), *extra]
    if tpl is not None:
        args += ["--chat-template", str(tpl)]
    timing = out.with_name(out.name + ".timing.json")
    child = "--child-convert" if warm else "--child-convert-cold"
    cmd = [sys.executable, str(Path(__file__).resolve()), child, str(timing), "--", *args]
    seconds, max_rss, tree_rss = run_measured(cmd, sample_memory)
    report = json.loads((out / "report.json").read_text())
    inner = json.loads(timing.read_text())
    return ProcResult(
        seconds,
        inner["convert"],
        inner["pool_start"],
        inner["warm_pool"],
        max_rss,
        tree_rss,
        output_digest(out),
        report,
        inner.get("cpu", 0.0),
        inner.get("work"),
    )


def median_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


@dataclass
class Row:
    corpus: str
    template: str
    fmt: str
    turns: int
    conversations: int
    files: int
    mb_in: float
    samples: int = 0
    tokens_out: int = 0
    records: int = 0  # records msgtrain read (native logs: the turns, as the floor counts them)
    floor_s: float = 0.0
    floor_tokens: int = 0
    naive_s: float | None = None  # scaled to the whole corpus when measured on a subset
    naive_measured_on: int = 0  # conversations the naive baseline ran on
    convert_s: dict[int, float] = field(default_factory=dict)  # workers -> seconds, fixed per-run cost subtracted
    wall_s: dict[int, float] = field(default_factory=dict)  # workers -> whole subprocess wall time
    max_rss_mb: dict[int, float] = field(default_factory=dict)
    tree_rss_mb: dict[int, float] = field(default_factory=dict)
    identical: bool = True

    def ratio_floor(self, w: int) -> float:
        return self.convert_s[w] / self.floor_s

    def us_per_token(self, w: int) -> float:
        return self.convert_s[w] / max(self.tokens_out, 1) * 1e6


# ------------------------------------------------------------------------------------------------ table
def _f(x: float | None, fmt: str = ".2f") -> str:
    return "–" if x is None else format(x, fmt)


def render_table(rows: list[Row], workers: Sequence[int]) -> str:
    w1 = workers[0]
    head = ["corpus", "convs", "MB in", "samples", "tokens out", "floor s", "naive s"]
    head += [f"j{w} s" for w in workers]
    head += [f"j{w1}/floor", f"naive/j{w1}"]
    head += [f"j{w1}/j{w}" for w in workers[1:]]
    head += [f"µs/tok j{w1}", *[f"RSS j{w} MB" for w in workers], "same bytes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        naive_cell = _f(r.naive_s) + ("*" if r.naive_s is not None and r.naive_measured_on < r.conversations else "")
        cells = [r.corpus, str(r.conversations), _f(r.mb_in, ".1f"), str(r.samples), str(r.tokens_out)]
        cells += [_f(r.floor_s), naive_cell]
        cells += [_f(r.convert_s.get(w)) for w in workers]
        cells += [_f(r.ratio_floor(w1)), _f(r.naive_s / r.convert_s[w1] if r.naive_s else None, ".1f")]
        # A corpus smaller than the noise of the worker pool's start gives no speed-up worth printing.
        cells += [_f(r.convert_s[w1] / r.convert_s[w] if r.convert_s[w] >= 0.05 else None) for w in workers[1:]]
        cells += [_f(r.us_per_token(w1))]
        cells += [f"{r.max_rss_mb[w]:.0f} ({r.tree_rss_mb[w]:.0f})" for w in workers]
        cells += ["yes" if r.identical else "**NO**"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def check_targets(rows: list[Row], workers: Sequence[int]) -> list[str]:
    """One line per performance target: met / missed, with the numbers that decide it."""
    out: list[str] = []
    w1 = workers[0]
    worst = max(rows, key=lambda r: r.ratio_floor(w1))
    bad = [f"{r.corpus} {r.ratio_floor(w1):.2f}" for r in rows if r.ratio_floor(w1) > 1.5]
    out.append(
        f"1. j{w1} ≤ 1.5× floor on every corpus: {'MET' if not bad else 'MISSED'}"
        f" (worst {worst.corpus} {worst.ratio_floor(w1):.2f}×{'; over: ' + ', '.join(bad) if bad else ''})"
    )
    for template in sorted({r.template for r in rows}):
        for fmt in ("calls", "native"):
            gaps = {
                r.turns: r.naive_s / r.convert_s[w1]
                for r in rows
                if r.template == template and r.fmt == fmt and r.naive_s
            }
            if not gaps:
                continue
            turns = sorted(gaps)
            grows = all(gaps[a] < gaps[b] for a, b in itertools.pairwise(turns))
            met = gaps.get(32, 5.0) >= 5 and grows
            out.append(
                f"2. {template} {fmt}: naive/j{w1} "
                + ", ".join(f"{t}t {gaps[t]:.1f}×" for t in turns)
                + f": {'MET' if met else 'MISSED'} (≥ 5× at 32 turns, growing with turns)"
            )
    for template in sorted({r.template for r in rows}):
        native = {r.turns: r.us_per_token(w1) for r in rows if r.template == template and r.fmt == "native"}
        if len(native) >= 2:
            lo, hi = min(native), max(native)
            ratio = native[hi] / native[lo]
            out.append(
                f"3. {template}: native µs/token {hi}t / {lo}t = {native[hi]:.2f} / {native[lo]:.2f} = {ratio:.2f}:"
                f" {'MET' if ratio <= 1.3 else 'MISSED'} (≤ 1.3)"
            )
    for w in workers[1:]:
        speed = {r.corpus: r.convert_s[w1] / r.convert_s[w] for r in rows if r.convert_s[w] >= 0.05}
        if not speed:
            continue
        low = [f"{c} {s:.2f}" for c, s in speed.items() if s < 1.7]
        same = all(r.identical for r in rows)
        out.append(
            f"5. j{w} ≥ 1.7× j{w1}: {'MET' if not low else 'MISSED'} (median {statistics.median(speed.values()):.2f}×"
            f"{'; below: ' + ', '.join(low) if low else ''}); output byte-identical across workers and runs:"
            f" {'yes' if same else 'NO'}"
        )
    return out


# ------------------------------------------------------------------------------------------------ big (memory)
def big_run(root: Path, pool: gen.ContentPool, gigabytes: float, workers: Sequence[int]) -> list[str]:
    """Peak RSS converting per-call logs of growing total size (files of 16 conversations of 32 turns)."""
    lines = [
        "| input GB | files | workers | wall s | RSS largest process MB | RSS process tree MB |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    base = root / "big-base"
    if not (base / ".done").is_file():
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        gen.write_calls(
            base / "base.jsonl", gen.make_conversations(pool, 32, 16, reasoning=False, seed=11), model=MODEL
        )
        (base / ".done").write_text("")
    one = (base / "base.jsonl").stat().st_size
    for size in (gigabytes / 4, gigabytes / 2, gigabytes):
        inputs = root / f"big-{size:g}gb"
        count = max(1, round(size * 2**30 / one))
        if not inputs.is_dir() or len(list(inputs.glob("*.jsonl"))) != count:
            shutil.rmtree(inputs, ignore_errors=True)
            inputs.mkdir(parents=True)
            for k in range(count):
                # Hard links: the same bytes under many names are many files to msgtrain (part keys name the path).
                os.link(base / "base.jsonl", inputs / f"calls-{k:05d}.jsonl")
        for w in workers:
            with tempfile.TemporaryDirectory(dir=root) as tmp:
                res = run_convert(inputs, Path(tmp) / "out", "qwen2.5", w)
            lines.append(
                f"| {count * one / 2**30:.2f} | {count} | {w} | {res.seconds:.0f} | {res.max_rss_mb:.0f} |"
                f" {res.tree_rss_mb:.0f} |"
            )
            print(lines[-1], flush=True)
    return lines


# ------------------------------------------------------------------------------------------------ huge (one file)
def huge_run(root: Path, pool: gen.ContentPool, megabytes: float, workers: Sequence[int]) -> list[str]:
    """One per-call log of ``megabytes`` (concurrent sessions interleaved), converted whole and in chunks."""
    base = gen.make_conversations(pool, 32, 16, reasoning=False, seed=13)
    records = [[json.dumps(r, ensure_ascii=False) for r in gen.call_records(c, model=MODEL, engine=None)] for c in base]
    per_copy = sum(len(line) + 1 for conv in records for line in conv)
    copies = max(2, round(megabytes * 2**20 / per_copy))
    path = root / f"huge-{megabytes:g}mb" / "calls.jsonl"
    if not path.is_file() or path.stat().st_size != copies * per_copy:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            # Copy k renames the sessions; copies are written 4 at a time, call by call, so sessions interleave.
            for first in range(0, copies, 4):
                group = range(first, min(first + 4, copies))
                for i, conv in enumerate(records):
                    for line in conv:
                        for k in group:
                            f.write(line.replace(f'"session_id": "{base[i].session}"', f'"session_id": "c{k}-{i}"'))
                            f.write("\n")
    size_mb = path.stat().st_size / 2**20
    lines = [
        f"one per-call log of {size_mb:.0f} MB ({copies * len(base)} conversations of 32 turns, qwen2.5):",
        "| chunks | workers | wall s | RSS largest process MB | RSS process tree MB | output |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    digests: dict[str, str] = {}
    sizes = [("whole", "0")] + [(f"{size_mb / n:.0f} MB", f"{size_mb / n + 0.5:.1f}") for n in (4, 8)]
    for label, chunk_mb in sizes:
        extra = ["--chunk-mb", chunk_mb]
        for w in workers:
            with tempfile.TemporaryDirectory(dir=root) as tmp:
                # As a user runs it: the pool starts while the parent reads, and a worker plans the file.
                res = run_convert(path.parent, Path(tmp) / "out", "qwen2.5", w, extra, warm=False)
                parts = len(list((Path(tmp) / ".out.msgtrain-state" / "parts").iterdir()))
            digests[f"{label} j{w}"] = res.digest
            same = "same as whole j1" if res.digest == next(iter(digests.values())) else "DIFFERS"
            lines.append(
                f"| {label} ({parts}) | {w} | {res.seconds:.1f} | {res.max_rss_mb:.0f} |"
                f" {res.tree_rss_mb:.0f} | {same} |"
            )
            print(lines[-1], flush=True)
    return lines


# ------------------------------------------------------------------------------------------------ main
def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--turns", type=int, nargs="+", default=[8, 32, 128], help="conversation lengths (sampled turns)")
    ap.add_argument("--templates", nargs="+", default=list(TEMPLATES), choices=list(TEMPLATES))
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=list(FORMATS))
    ap.add_argument("--budget", type=int, default=512, help="sampled turns per corpus (conversations = budget/turns)")
    ap.add_argument(
        "--naive-budget",
        type=int,
        default=256,
        help="sampled turns the naive baseline runs on (whole conversations; scaled to the corpus, marked *)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is shown")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--no-naive", action="store_true", help="skip the naive baseline")
    ap.add_argument(
        "--big",
        type=float,
        nargs="?",
        const=2.0,
        default=None,
        metavar="GB",
        help="also measure peak RSS converting GB/4, GB/2 and GB of per-call logs (default 2 GB; slow)",
    )
    ap.add_argument(
        "--huge",
        type=float,
        nargs="?",
        const=256.0,
        default=None,
        metavar="MB",
        help="also convert one per-call log of MB (default 256) whole and in chunks (--chunk-mb), j1 and j2",
    )
    ap.add_argument("--corpus-dir", type=Path, default=ROOT / "benchmarks" / ".corpus")
    ap.add_argument("--json", type=Path, default=None, help="also write every measurement as JSON here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--child-convert"], ["--child-convert-cold"]):
        return child_convert(Path(argv[1]), argv[3:], warm=argv[0] == "--child-convert")
    args = _parse(argv)
    real_logs = SHARED / "real_logs"
    if not real_logs.is_dir() or not TOKENIZER.is_dir():
        print(f"skipped: {SHARED} (real logs and tokenizers) is not present beside the checkout")
        return 0
    from msgtrain.linearize import load_tokenizer

    began = time.perf_counter()
    pool = gen.load_pool(real_logs)
    tokenizers = {t: load_tokenizer(str(TOKENIZER), str(tpl) if tpl else None) for t, (tpl, _) in TEMPLATES.items()}
    root = args.corpus_dir
    root.mkdir(parents=True, exist_ok=True)
    print(f"# msgtrain benchmark · {os.cpu_count()} cpus · python {platform.python_version()} · load {os.getloadavg()}")
    print(f"content pool: {pool.summary()}", flush=True)

    # Fixed cost of one run, measured on two one-turn files: process start (wall − in-process time − pool start),
    # worker-pool start (-j 2: spawn, imports, tokenizer load per worker) and the per-run cost inside the command
    # (reader registry, writer set-up), which is subtracted from the j columns.
    start: dict[tuple[str, int], float] = {}
    pool_start: dict[tuple[str, int], float] = {}
    fixed: dict[tuple[str, int], float] = {}
    for template in args.templates:
        probe = build_start_probe(root, pool, template)
        for w in args.workers:
            runs = []
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory(dir=root) as tmp:
                    runs.append(run_convert(probe, Path(tmp) / "out", template, w, sample_memory=False))
            start[(template, w)] = statistics.median(r.seconds - r.convert_seconds - r.pool_seconds for r in runs)
            pool_start[(template, w)] = statistics.median(r.pool_seconds for r in runs)
            fixed[(template, w)] = statistics.median(r.convert_seconds for r in runs)

    rows: list[Row] = []
    naive_cache: dict[tuple[str, int], tuple[float, int]] = {}
    for template in args.templates:
        hf = tokenizers[template].hf
        for turns in args.turns:
            for fmt in args.formats:
                spec = CorpusSpec(template, fmt, turns, max(1, args.budget // turns))
                t0 = time.perf_counter()
                path = build_corpus(spec, root, pool, tokenizers)
                built = time.perf_counter() - t0
                row = Row(spec.name, template, fmt, turns, spec.conversations, len(list(path.glob("*.jsonl"))), 0.0)
                row.mb_in = dir_bytes(path) / 2**20
                row.floor_s, fl = median_time(functools.partial(floor, path, hf), args.repeat)
                row.floor_tokens = fl.tokens
                if not args.no_naive and (template, turns) not in naive_cache:
                    subset = min(spec.conversations, max(1, args.naive_budget // turns))
                    calls_path = build_corpus(CorpusSpec(template, "calls", turns, subset), root, pool, tokenizers)
                    naive_s, _ = median_time(functools.partial(naive, calls_path, hf), args.repeat)
                    naive_cache[(template, turns)] = (naive_s * spec.conversations / subset, subset)
                if (template, turns) in naive_cache:
                    row.naive_s, row.naive_measured_on = naive_cache[(template, turns)]
                digests: set[str] = set()
                for w in args.workers:
                    # Timed runs unsampled, as the floor and naive baselines run; memory from one more run.
                    runs = []
                    for _ in range(args.repeat):
                        with tempfile.TemporaryDirectory(dir=root) as tmp:
                            runs.append(run_convert(path, Path(tmp) / "out", template, w, sample_memory=False))
                    with tempfile.TemporaryDirectory(dir=root) as tmp:
                        sampled = run_convert(path, Path(tmp) / "out", template, w)
                    digests.update(r.digest for r in [*runs, sampled])
                    if w > 1 and not all(r.warm_pool for r in runs):
                        print(f"  note: j{w} ran without the pre-started pool (pipeline changed?): pool start included")
                    row.wall_s[w] = statistics.median(r.seconds for r in runs)
                    inner = statistics.median(r.convert_seconds for r in runs)
                    row.convert_s[w] = max(inner - fixed[(template, w)], 1e-3)
                    row.max_rss_mb[w] = sampled.max_rss_mb
                    row.tree_rss_mb[w] = sampled.tree_rss_mb
                    rep = runs[0].report
                    row.samples, row.tokens_out = rep["samples"]["written"], rep["tokens"]["total"]
                    row.records = rep["records"]["read"] if fmt != "native" else fl.calls
                row.identical = len(digests) == 1
                if row.records != fl.calls:
                    print(f"  WARNING: {spec.name}: msgtrain read {row.records} records, the floor {fl.calls} calls")
                rows.append(row)
                print(
                    f"  {spec.name}: built {built:.1f} s, floor {row.floor_s:.2f} s, naive {_f(row.naive_s)} s, "
                    + ", ".join(f"j{w} {row.convert_s[w]:.2f} s" for w in args.workers),
                    flush=True,
                )

    print()
    print(render_table(rows, args.workers))
    print()
    print(
        "process start (imports + tokenizer load, not in the table): "
        + ", ".join(f"{t} {s:.2f} s" for (t, w), s in sorted(start.items()) if w == args.workers[0])
    )
    print(
        "worker pool start (spawn + imports + tokenizer load in each worker, not in the table): "
        + ", ".join(f"{t} j{w} {s:.2f} s" for (t, w), s in sorted(pool_start.items()) if w > 1)
    )
    print(
        "fixed cost per run inside the command (subtracted from the j columns): "
        + ", ".join(f"{t} j{w} {s:.2f} s" for (t, w), s in sorted(fixed.items()))
    )
    if any(r.naive_measured_on < r.conversations for r in rows if r.naive_s is not None):
        print("* naive measured on the first conversations of the corpus (--naive-budget turns) and scaled")
    print()
    for line in check_targets(rows, args.workers):
        print(line)
    big_lines: list[str] = []
    if args.big:
        print(f"\n## peak RSS on growing inputs (up to {args.big:g} GB of per-call logs, qwen2.5)", flush=True)
        big_lines = big_run(root, pool, args.big, args.workers)
    huge_lines: list[str] = []
    if args.huge:
        print(f"\n## one huge file ({args.huge:g} MB), whole and in chunks", flush=True)
        huge_lines = huge_run(root, pool, args.huge, args.workers)
    print(
        f"\ntotal {time.perf_counter() - began:.0f} s; load average now {os.getloadavg()[0]:.1f}"
        f" (numbers are only comparable on a quiet machine)"
    )
    if args.json:
        data = {
            "rows": [asdict(r) for r in rows],
            "process_start": {f"{t} j{w}": s for (t, w), s in start.items()},
            "pool_start": {f"{t} j{w}": s for (t, w), s in pool_start.items()},
            "fixed": {f"{t} j{w}": s for (t, w), s in fixed.items()},
            "big": big_lines,
            "huge": huge_lines,
        }
        args.json.write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
