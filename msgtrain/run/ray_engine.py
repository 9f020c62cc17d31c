"""``--engine ray``: the per-file conversion of the local engine, run as Ray tasks on a local or remote cluster.

Invariants:
- Same work, same parts: each task runs :func:`msgtrain.run.parts.convert_file` and
  :func:`msgtrain.run.parts.write_part` on one input file, exactly as the local engine's workers do, so the pipeline's
  deterministic assembly gives output byte-identical to ``--engine local`` (whatever the order tasks finish in).
- Ray never sees the logs' contents as data: a task receives a file *path* and parses the file itself, with the
  same readers as the local engine. No Ray Data schema inference runs on mixed-shape JSON.
- Inputs are read by the workers at their path (a shared filesystem on a multi-node cluster); parts come back to
  the driver through Ray's object store as the files of a finished part and are published into ``parts_dir`` with
  one rename each, so the output and state directories need not be shared.
- Work is split by input file: one file is one task (a conversation's records may be spread over its file).
- Each task holds one CPU and keeps the tokenizer's own thread pool to one thread (``RAYON_NUM_THREADS=1``); a
  worker process keeps its loaded tokenizer across tasks. At most ``2 × cluster CPUs`` tasks are in flight.
- A bad file never stops the run (its rejects are in its part); with ``strict`` the first error is raised as the
  original :class:`~msgtrain.errors.MsgtrainError`, not wrapped in Ray's error type.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msgtrain.errors import ConfigError
from msgtrain.run.parts import LinearizeSettings, PartStats, convert_file, write_part

TASK_ENV = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


def _convert_part_files(
    path: str, settings: LinearizeSettings, key: str, meta: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Inside a Ray worker: convert one file and return (stats, {file name: bytes}) of its finished part."""
    samples, stats, rejects = convert_file(Path(path), settings)
    with tempfile.TemporaryDirectory(prefix="msgtrain-ray-") as tmp:
        part = write_part(Path(tmp), key, meta, samples, stats, rejects)
        files = {p.name: p.read_bytes() for p in sorted(part.iterdir()) if p.is_file()}
    return stats.to_json(), files


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
    except ImportError as e:
        raise ConfigError(
            "--engine ray needs Ray, which is not installed",
            hint="pip install 'msgtrain[ray]' (or use --engine local)",
        ) from e
    return ray


def run_parts_ray(
    jobs: list[tuple[Path, str, dict[str, Any]]],
    settings: LinearizeSettings,
    parts_dir: Path,
    on_done: Callable[[Path, PartStats], None],
    address: str | None = None,
) -> None:
    """Convert ``jobs`` (path, part key, part meta) on Ray; call ``on_done`` on the driver as each part lands.

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
        task = ray.remote(num_cpus=1, max_retries=1)(_convert_part_files).options(runtime_env={"env_vars": TASK_ENV})
        window = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        queue = list(jobs)
        pending: dict[Any, tuple[Path, str]] = {}
        try:
            while queue or pending:
                while queue and len(pending) < window:
                    path, key, meta = queue.pop(0)
                    pending[task.remote(str(path), settings, key, meta)] = (path, key)
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    path, key = pending.pop(ref)
                    try:
                        stats, files = ray.get(ref)
                    except ray.exceptions.RayTaskError as e:
                        cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else None
                        if cause is not None:
                            raise cause from None
                        raise
                    _publish_part(parts_dir, key, files)
                    on_done(path, PartStats.from_json(stats))
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    finally:
        if started_here:
            ray.shutdown()
