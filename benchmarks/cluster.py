"""Bucket to bucket on a two-node Ray cluster: files/s, MB/s and the driver's peak memory at growing input sizes.

Starts what a test would: a local S3-compatible server (moto's server mode on 127.0.0.1) and a Ray cluster of two
one-CPU nodes on this machine (``ray.cluster_utils.Cluster``). For each size it uploads generated per-call logs to
the bucket, runs ``msgtrain convert s3://… -o s3://… --engine ray`` as its own driver process (as a user submits
it), and reports the driver's peak RSS (``ru_maxrss`` of that process alone), the wall time, and the bytes of logs
read and of parts written by the workers. The driver's peak must not grow with the parts' total size: parts go from
workers to the store, never through the driver, and the shards are written by one task each.

    python benchmarks/cluster.py --files 12 48         # two sizes (files of ~``--convs`` conversations each)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import corpus as gen  # noqa: E402

BUCKET = "msgtrain-bench"
# Runs a command and prints the peak RSS (KiB) of that child alone: a fresh interpreter has waited for no other.
PEAK = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True);"
    " print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def _prefix_bytes(store: Any, url: str) -> int:
    store.fs.invalidate_cache()
    return sum(size for _, size in store.list_files(url))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--files", type=int, nargs="+", default=[12, 48], help="input sizes, in log files")
    ap.add_argument("--convs", type=int, default=6, help="conversations per file")
    ap.add_argument("--turns", type=int, default=16, help="sampled turns per conversation")
    ap.add_argument("--rows-per-shard", type=int, default=100, help="small, so assembly is several shard tasks")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        import ray
        from moto.server import ThreadedMotoServer
        from ray.cluster_utils import Cluster

        from msgtrain.run.storage import Store
    except ImportError as e:
        print(f"skipped: {e} (pip install 'msgtrain[ray,store-test]')")
        return 0

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )
    store = Store.of(f"s3://{BUCKET}")
    store.fs.mkdir(BUCKET)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    rows = []
    pool = gen.synthetic_pool()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in args.files:
                logs, out = f"s3://{BUCKET}/logs-{n}", f"s3://{BUCKET}/out-{n}"
                convs = gen.make_conversations(pool, args.turns, n * args.convs, reasoning=True)
                for k, group in enumerate(gen.spread(convs, n)):
                    path = Path(tmp) / f"calls-{n}-{k:04d}.jsonl"
                    gen.write_calls(path, group, model="policy")
                    store.upload(path, f"{logs}/{path.name}")
                    path.unlink()
                cmd = [sys.executable, "-m", "msgtrain.cli", "convert", logs, "-o", out, "--engine", "ray", "-q"]
                cmd += ["--rows-per-shard", str(args.rows_per_shard)]
                env = {**os.environ, "RAY_ADDRESS": cluster.address}
                started = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-c", PEAK, *cmd], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True
                )
                seconds = time.perf_counter() - started
                in_bytes, part_bytes = _prefix_bytes(store, logs), _prefix_bytes(store, f"{out}/_state/parts")
                row = {
                    "files": n,
                    "input_mb": round(in_bytes / 1e6, 1),
                    "parts_mb": round(part_bytes / 1e6, 1),
                    "dataset_mb": round(_prefix_bytes(store, f"{out}/_versions") / 1e6, 1),
                    "shards": sum(url.endswith(".parquet") for url, _ in store.list_files(f"{out}/_versions")),
                    "seconds": round(seconds, 1),
                    "files_per_s": round(n / seconds, 2),
                    "mb_per_s": round(in_bytes / 1e6 / seconds, 2),
                    "driver_peak_rss_mb": round(int(done.stdout.split()[-1]) / 1024, 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
        server.stop()
    cols = list(rows[0]) if rows else []
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in cols) + " |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
