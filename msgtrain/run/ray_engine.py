"""``--engine ray``: the local engine's per-part conversion, run as a Ray Data pipeline on a local or remote cluster.

Invariants:
- Same work, same parts: each job (an input file, or one chunk of a huge one) runs
  :func:`msgtrain.run.parts.convert_file` and :func:`msgtrain.run.parts.write_part` exactly as the local engine's
  workers do, so the pipeline's deterministic assembly gives output byte-identical to ``--engine local`` (whatever
  the order jobs finish in).
- Ray Data never infers a schema from the logs: the dataset's rows are the jobs (a pickled :class:`Job`: a path
  and, for a chunk, its line ranges), and ``map_batches`` (tasks of one CPU) reads and parses the log inside the
  task with msgtrain's own readers (Arrow schema inference on mixed-shape JSON breaks). Each output row is one
  finished part's files as bytes plus its accounting.
- Inputs are read by the workers at their path (a shared filesystem on a multi-node cluster); parts come back to
  the driver through Ray's object store and are published into ``parts_dir`` with one rename each, so the output
  and state directories need not be shared.
- Each task holds one CPU and keeps the tokenizer's own thread pool to one thread (``RAYON_NUM_THREADS=1``); Ray
  reuses worker processes, which keep their loaded tokenizer (cached per process) across jobs.
- A bad file never stops the run (its rejects are in its part); with ``strict`` the first error is raised as the
  original :class:`~msgtrain.errors.MsgtrainError`, not wrapped in Ray's error type.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from msgtrain.errors import ConfigError, MsgtrainError
from msgtrain.run.parts import Job, LinearizeSettings, PartStats, convert_file, write_part

TASK_ENV = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


def convert_job_to_files(job: Job, settings: LinearizeSettings) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Convert one job and return (stats, {file name: bytes}) of its finished part."""
    samples, stats, rejects = convert_file(job.path, settings, job.chunk)
    with tempfile.TemporaryDirectory(prefix="msgtrain-ray-") as tmp:
        part = write_part(Path(tmp), job.key, job.meta, samples, stats, rejects)
        files = {p.name: p.read_bytes() for p in sorted(part.iterdir()) if p.is_file()}
    return stats.to_json(), files


def _convert_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The ``map_batches`` function: rows of pickled (job, settings) in, rows of finished parts (or a strict error)
    out. Ray reuses worker processes, and the tokenizer is cached per process, so it is loaded once per worker."""
    for name, value in TASK_ENV.items():  # before the first tokenizer call of this worker process
        os.environ.setdefault(name, value)
    out: dict[str, list[Any]] = {"index": [], "stats": [], "files": [], "error": []}
    for index, payload in zip(batch["index"], batch["job"], strict=True):
        job, settings = pickle.loads(payload)
        try:
            stats, files = convert_job_to_files(job, settings)
            out["stats"].append(json.dumps(stats))
            out["files"].append(pickle.dumps(files))
            out["error"].append(b"")
        except MsgtrainError as e:  # only with strict: a bad record otherwise becomes a reject in the part
            out["stats"].append("")
            out["files"].append(b"")
            out["error"].append(pickle.dumps(e))
        out["index"].append(int(index))
    return {
        "index": np.asarray(out["index"], dtype=np.int64),
        "stats": np.asarray(out["stats"], dtype=object),
        "files": np.asarray(out["files"], dtype=object),
        "error": np.asarray(out["error"], dtype=object),
    }


def _publish_part(parts_dir: Path, key: str, files: dict[str, bytes]) -> None:
    """Write a part's files into a private directory, then rename it into place (as ``write_part`` does)."""
    final = parts_dir / key
    tmp = parts_dir / f".tmp-{key}-ray-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)


def _import_ray() -> Any:
    try:
        import ray
        import ray.data  # the Data library is part of the extra
    except ImportError as e:
        raise ConfigError(
            "--engine ray needs Ray Data, which is not installed",
            hint="pip install 'msgtrain[ray]' (or use --engine local)",
        ) from e
    return ray


def run_parts_ray(
    jobs: list[Job],
    settings: LinearizeSettings,
    parts_dir: Path,
    on_done: Callable[[Job, PartStats], None],
    address: str | None = None,
) -> None:
    """Convert ``jobs`` on Ray Data; call ``on_done`` on the driver as each part lands.

    Connects to ``address`` (``"auto"``, ``"ray://host:10001"``, ...) or, when None, to ``RAY_ADDRESS`` if set, else
    starts a local Ray instance for the run. An already initialised Ray (``ray.init`` by the caller) is reused.
    """
    if not jobs:
        return
    ray = _import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        # Largest first, as the local engine, so a big file does not start last; one block per job so jobs
        # spread over the cluster's CPUs.
        order = sorted(jobs, key=lambda job: -job.size)
        items = [{"index": i, "job": pickle.dumps((job, settings))} for i, job in enumerate(order)]
        context = ray.data.DataContext.get_current()
        # msgtrain reports progress itself; Ray Data's progress bars and execution logs (and its notice that the
        # bars are off) would interleave with it. Its errors still show.
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        ds = ray.data.from_items(items, override_num_blocks=len(items))
        parts = ds.map_batches(_convert_batch, batch_size=1, num_cpus=1, runtime_env={"env_vars": TASK_ENV})
        for row in parts.iter_rows():
            if row["error"]:
                raise pickle.loads(row["error"])
            job = order[int(row["index"])]
            _publish_part(parts_dir, job.key, pickle.loads(row["files"]))
            on_done(job, PartStats.from_json(json.loads(row["stats"])))
    finally:
        if started_here:
            ray.shutdown()
