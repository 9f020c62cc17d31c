"""Time per batch result file of ``msgtrain convert`` on one folder of 10, 100 and 1,000 batch jobs, on the local
disk and on an S3 server (moto, on 127.0.0.1).

Usage: ``python3 benchmarks/joined_files.py`` (``--counts 10 100`` for a quicker look, ``--stores disk`` for the disk
alone, ``--workers N``); benchmarks/README.md explains it.

Each count N is one folder of N OpenAI batch jobs (a month of nightly batches): N result files and the N input files
they are joined with by ``custom_id`` (two requests each), every file with bytes of its own, written once into
``benchmarks/.corpus/batch-N/`` and reused (on S3 uploaded under a prefix of its own in a fresh bucket). Each
conversion is a fresh process running ``msgtrain convert`` with the embedded demo tokenizer; the time printed is the
conversion's own (``seconds`` of the returned report: planning with its partner digests, parts, assembly, publish),
and per result file the marginal cost, (that time - the time of a folder of one job) / (N - 1), so that a run's fixed
cost (the tokenizer, assembly, publishing) is not spread over the files. What the goal measures is that time per
result file staying flat as N grows (within 1.5x from 10 to 1,000): a reader that indexed every batch file of the
folder for each file it reads, or copied each sibling once per read, shows up as a time per file growing with N.

Invariants: nothing here changes what msgtrain does; each run's dataset is checked to hold one sample per request.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "benchmarks" / ".corpus"
BUCKET = "msgtrain-bench"
REQUESTS = 2  # per batch job
URL = "/v1/chat/completions"
CHILD = """
import json, sys
from msgtrain.run.config import ConvertConfig
from msgtrain.run.pipeline import convert
cfg = ConvertConfig(inputs=[sys.argv[1]], output=sys.argv[2], workers=int(sys.argv[3]), quiet=True)
report = convert(cfg)
print(json.dumps({"seconds": report["seconds"], "samples": report["samples"]["written"]}))
"""


def _line(value: dict[str, object]) -> str:
    return json.dumps(value, separators=(",", ":")) + "\n"


def corpus(count: int) -> Path:
    """A folder of ``count`` batch jobs: ``job-K_input.jsonl`` and ``job-K_output.jsonl`` (made once)."""
    folder = CORPUS / f"batch-{count}"
    done = folder / ".complete"
    if done.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for k in range(count):
        requests, results = [], []
        for i in range(REQUESTS):
            custom_id = f"job{k}-req{i}"
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"Job {k}: what is {k} + {i}?"}]}
            requests.append(_line({"custom_id": custom_id, "method": "POST", "url": URL, "body": body}))
            message = {"role": "assistant", "content": f"{k + i}."}
            choices = [{"index": 0, "message": message, "finish_reason": "stop"}]
            reply = {"id": f"chatcmpl-{k}-{i}", "object": "chat.completion", "model": "gpt-4o", "choices": choices}
            response = {"status_code": 200, "body": reply}
            results.append(_line({"id": f"batch_req_{k}_{i}", "custom_id": custom_id, "response": response}))
        (folder / f"job-{k:05d}_input.jsonl").write_text("".join(requests), encoding="utf-8")
        (folder / f"job-{k:05d}_output.jsonl").write_text("".join(results), encoding="utf-8")
    done.write_text("", encoding="utf-8")
    return folder


def convert(source: str, workers: int) -> dict[str, float]:
    """One fresh process converting ``source``: the report's seconds and samples."""
    with tempfile.TemporaryDirectory(prefix="msgtrain-bench-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, source, str(Path(tmp) / "out"), str(workers)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"convert {source} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--stores", nargs="+", choices=["disk", "s3"], default=["disk", "s3"])
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'where':<6} {'result files':>12} {'seconds':>9} {'ms / result file':>17} {'vs first':>9}")
    for store in args.stores:
        with _store(store) as s3:
            base = _seconds(1, s3, args.workers)  # what a run costs whatever its size (start, tokenizer, publish)
            print(f"{store:<6} {1:>12} {base:>9.2f} {'(fixed cost)':>17}")
            first = None
            for count in args.counts:
                seconds = _seconds(count, s3, args.workers)
                per_file = (seconds - base) / (count - 1) * 1000  # the marginal cost of a batch job's files
                first = first or per_file
                print(f"{store:<6} {count:>12} {seconds:>9.2f} {per_file:>17.2f} {per_file / first:>8.2f}x")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _seconds(count: int, s3: Any, workers: int) -> float:
    """The conversion time of a folder of ``count`` batch jobs, on the disk or (``s3``) in a bucket."""
    folder = corpus(count)
    source = str(folder)
    if s3 is not None:
        source = f"s3://{BUCKET}/batch-{count}"
        for p in sorted(folder.glob("*.jsonl")):
            s3.upload(p, f"{source}/{p.name}")
    result = convert(source, workers)
    assert result["samples"] == count * REQUESTS, result
    return float(result["seconds"])


@contextlib.contextmanager
def _store(store: str) -> Iterator[Any]:
    """The S3 test server's bucket (moto, on 127.0.0.1: tests/store_helpers.py) for ``s3``, None for the disk."""
    if store == "disk":
        yield None
        return
    sys.path.insert(0, str(ROOT))
    from tests.store_helpers import moto_s3

    with moto_s3(BUCKET) as s3:
        yield s3


if __name__ == "__main__":
    main()
