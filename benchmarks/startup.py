"""Start-up of the command line: whole processes, as a user runs them.

Usage: ``python3 benchmarks/startup.py`` (five runs per command; ``--runs N``); benchmarks/README.md explains it.

The goals (issue #37): ``--help`` <= 0.3 s and a one-record ``convert`` with the embedded tokenizer <= 1.0 s, wall,
on an idle 2-core machine; each is printed met / not met from its best run (on a loaded machine, read the CPU time).
The processes run with msgtrain's bytecode cached (an installed package has it: pip compiles at install), after one
warm-up run of each command; ``--source`` keeps ``PYTHONDONTWRITEBYTECODE`` as the environment sets it, so every
start compiles msgtrain's modules again (about 0.3 s of CPU on the 2-core machine).

Measured per command, each a fresh interpreter running the console script's entry point (``msgtrain.cli:run``,
without the shell shim an installed script may go through): wall time and CPU time (user + system of the child)
from process start to exit, medians and ranges over the runs, the commands run in turn so a drifting machine
affects them alike. For ``convert`` of one conversation (the Qwen3 tokenizer of ``../shared`` when present, else the
embedded demo tokenizer) also the moment the first record is read: the child notes the wall-clock time of its first
call into the readers, against the parent's clock before it started the process.

Then, for ``--help`` and ``convert``, the modules they import, from one ``python -X importtime`` run each: the
time spent importing and the top-level packages that took most of it.

Invariants: nothing here changes what msgtrain does (the first-record hook wraps ``read_events`` in the child only);
the conversion's output is checked to exist after each run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
QWEN3 = SHARED / "tokenizers" / "qwen3"
SOURCE = SHARED / "real_logs" / "sharegpt_llamafactory" / "reason_tool_use_demo_50.jsonl"

RUN = "import sys; sys.argv[0] = 'msgtrain'; from msgtrain.cli import run; run()"
# The child of a first-record measurement: the readers' entry point notes when it is first called.
FIRST = """
import sys, time
from pathlib import Path
mark = Path(sys.argv[1])
sys.argv = ["msgtrain", *sys.argv[2:]]
import msgtrain.run.parts as parts
orig = parts.read_events
def first(*args, **kwargs):
    if not mark.exists():
        mark.write_text(repr(time.time()))
    return orig(*args, **kwargs)
parts.read_events = first
from msgtrain.cli import run
run()
"""


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# The children's environment (main sets it): bytecode cached as an installed package has it, unless --source.
CHILD_ENV: dict[str, str] = dict(os.environ)


def child_env(tmp: str, source: bool) -> dict[str, str]:
    """The environment the measured processes run in. An installed package is compiled to bytecode once (pip does it
    at install): unless ``source``, the children may write their bytecode (``PYTHONDONTWRITEBYTECODE`` off, into a
    cache under ``tmp``) and a warm-up run compiles it, so no run pays for compiling msgtrain's modules."""
    env = dict(os.environ)
    if not source:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
    return env


def measure(argv: list[str], code: str = RUN) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh process running ``msgtrain ARGV``."""
    cpu = _child_cpu()
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=CHILD_ENV)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"msgtrain {' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return wall, _child_cpu() - cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--source",
        action="store_true",
        help="run from source as the environment says (PYTHONDONTWRITEBYTECODE: msgtrain compiled at every start)",
    )
    args = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "one.jsonl"
        tokenizer: list[str] = []
        if SOURCE.is_file() and QWEN3.is_dir():
            with open(SOURCE, encoding="utf-8") as f:
                log.write_text(f.readline(), encoding="utf-8")
            tokenizer = ["--tokenizer", str(QWEN3)]
            what = "one real conversation, Qwen3 tokenizer"
        else:
            log.write_text(
                json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
                + "\n",
                encoding="utf-8",
            )
            what = "one conversation, the embedded demo tokenizer (../shared is absent)"
        out = Path(tmp) / "out"
        convert = ["convert", str(log), "-q", "-o", str(out), *tokenizer]
        # The goal's command: one record of a per-call log, the embedded demo tokenizer (no tokenizer folder to load).
        one_call = Path(tmp) / "one_call.jsonl"
        with open(ROOT / "sample_logs" / "calls" / "agent_calls.jsonl", encoding="utf-8") as f:
            one_call.write_text(f.readline(), encoding="utf-8")
        embedded = "convert (one per-call record, embedded tokenizer)"
        commands = {
            "--help": ["--help"],
            "formats": ["formats"],
            "convert --help": ["convert", "--help"],
            embedded: ["convert", str(one_call), "-q", "-o", str(out)],
            f"convert ({what})": convert,
        }
        goals = {"--help": 0.3, embedded: 1.0}
        CHILD_ENV.clear()
        CHILD_ENV.update(child_env(tmp, args.source))
        for cmd in commands.values():  # the warm-up: bytecode compiled, files in the page cache
            shutil.rmtree(out, ignore_errors=True)
            measure(cmd)
        load = os.getloadavg()[0]
        compiled = "from source at every start" if args.source else "bytecode cached, as installed"
        version = sys.version.split()[0]
        print(f"# msgtrain start-up · python {version} · load {load:.1f} · {args.runs} runs · {compiled}")
        walls: dict[str, list[float]] = {k: [] for k in commands}
        cpus: dict[str, list[float]] = {k: [] for k in commands}
        firsts: list[float] = []
        for _ in range(args.runs):
            for name, cmd in commands.items():
                shutil.rmtree(out, ignore_errors=True)
                wall, cpu = measure(cmd)
                walls[name].append(wall)
                cpus[name].append(cpu)
            shutil.rmtree(out, ignore_errors=True)
            mark = Path(tmp) / "first"
            mark.unlink(missing_ok=True)
            began = time.time()
            measure([str(mark), *convert, "--overwrite"], code=FIRST)
            firsts.append(float(mark.read_text()) - began)
            if not (out / "report.json").is_file():
                raise SystemExit("convert wrote no report.json")
        print("\n| command | wall s (median) | wall s (min – max) | CPU s (median) |\n|---|---|---|---|")
        for name in commands:
            w, c = walls[name], cpus[name]
            med_w, med_c = statistics.median(w), statistics.median(c)
            print(f"| `{name}` | {med_w:.2f} | {min(w):.2f} – {max(w):.2f} | {med_c:.2f} |")
        print(
            f"| first record of `convert` read after | {statistics.median(firsts):.2f} | "
            f"{min(firsts):.2f} – {max(firsts):.2f} | – |"
        )
        print()
        for name, goal in goals.items():
            best, cpu = min(walls[name]), statistics.median(cpus[name])
            verdict = "met" if best <= goal else "not met"
            print(f"goal `{name}` <= {goal:.1f} s wall: {verdict} (best {best:.2f} s, CPU {cpu:.2f} s; load counts)")
        for name in ("--help", embedded, f"convert ({what})"):
            print(f"\ntop imports of `{name}` (python -X importtime, one run; self time summed per package):")
            shutil.rmtree(out, ignore_errors=True)
            total, top = top_imports(commands[name])
            print(f"  all imports: {total * 1000:.0f} ms")
            for package, seconds in top:
                print(f"  {seconds * 1000:7.1f} ms  {package}")
        print(f"\nload average now {os.getloadavg()[0]:.1f}")
    return 0


def top_imports(argv: list[str], n: int = 12) -> tuple[float, list[tuple[str, float]]]:
    """(seconds spent importing, the ``n`` top-level packages that took most of it) for ``msgtrain ARGV``, from
    ``python -X importtime``'s self times (each module's own, without its imports), summed per top-level package."""
    args = [sys.executable, "-X", "importtime", "-c", RUN, *argv]
    proc = subprocess.run(args, capture_output=True, text=True, env=CHILD_ENV)
    if proc.returncode != 0:
        raise SystemExit(f"msgtrain {' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    per_package: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cumulative, name = line[len("import time:") :].split("|", 2)
        package = name.strip().split(".")[0]
        per_package[package] = per_package.get(package, 0.0) + int(self_us) / 1e6
    ranked = sorted(per_package.items(), key=lambda kv: -kv[1])
    return sum(per_package.values()), ranked[:n]


if __name__ == "__main__":
    sys.exit(main())
