"""execute: planned jobs → parts, through one :class:`Executor` protocol with two implementations — a local
process pool (:class:`LocalPool`) and Ray tasks (:class:`RayTasks`, :mod:`msgtrain.run.ray_engine`). The pipeline
never branches on the engine: it asks :func:`executor_for` once and calls the protocol.

Invariants:
- Every job's part is written by :func:`msgtrain.run.parts.write_part_to` wherever it runs, and ``on_done`` is
  called on the driver once per job; output never depends on the order jobs finish in (parts are assembled in
  sorted order).
- A worker never outlives the run (Ctrl-C, SIGTERM, a SIGKILLed main process) and never prints a traceback for
  Ctrl-C; the tokenizer's thread pool is one thread per worker process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Protocol

from msgtrain.ingest.chunks import Chunk
from msgtrain.run import parts
from msgtrain.run.config import ConvertConfig
from msgtrain.run.parts import Job, LinearizeSettings, PartStats, convert_job, write_part_to
from msgtrain.run.signals import ignore_sigint_in_worker, sigint_deferred
from msgtrain.run.units import plan_file

OnDone = Callable[[Job, PartStats], None]
OnPlan = Callable[[Path, str, list[Chunk]], list[Job]]


class Executor(Protocol):
    """Where the work of a run happens."""

    def session(self) -> contextlib.AbstractContextManager[Any]:
        """Held for the whole run (a Ray connection; nothing for a local pool)."""
        ...

    def run_parts(
        self,
        jobs: list[Job],
        settings: LinearizeSettings,
        parts_dir: Path | str,
        on_done: OnDone,
        plans: Sequence[tuple[Path, str]] = (),
        chunk_bytes: int = 0,
        on_plan: OnPlan | None = None,
    ) -> None:
        """Convert ``jobs`` into parts; files in ``plans`` are first cut into chunks (``on_plan`` registers them
        and returns the chunk jobs still to convert)."""
        ...

    def run_tasks(self, calls: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
        """``fn(*args)`` for each call, side by side; results in order."""
        ...

    def plans_in_workers(self) -> bool:
        """Whether local files worth cutting are planned by the workers (while other files convert)."""
        ...


class LocalPool:
    """A local pool of ``workers`` processes (in this process when 1)."""

    def __init__(self, workers: int):
        self.workers = workers

    def session(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def run_parts(
        self,
        jobs: list[Job],
        settings: LinearizeSettings,
        parts_dir: Path | str,
        on_done: OnDone,
        plans: Sequence[tuple[Path, str]] = (),
        chunk_bytes: int = 0,
        on_plan: OnPlan | None = None,
    ) -> None:
        _run_parts(jobs, settings, parts_dir, self.workers, on_done, plans, chunk_bytes, on_plan)

    def run_tasks(self, calls: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
        return [fn(*args) for fn, args in calls]

    def plans_in_workers(self) -> bool:
        return self.workers > 1


class RayTasks:
    """Ray tasks, one CPU each, retried when their worker dies (:mod:`msgtrain.run.ray_engine`)."""

    def session(self) -> contextlib.AbstractContextManager[Any]:
        from msgtrain.run.ray_engine import ray_session

        return ray_session()

    def run_parts(
        self,
        jobs: list[Job],
        settings: LinearizeSettings,
        parts_dir: Path | str,
        on_done: OnDone,
        plans: Sequence[tuple[Path, str]] = (),
        chunk_bytes: int = 0,
        on_plan: OnPlan | None = None,
    ) -> None:
        from msgtrain.run.ray_engine import run_parts_ray

        assert not plans, "Ray plans huge inputs before conversion (plans_in_workers is False)"
        run_parts_ray(jobs, settings, parts_dir, on_done)

    def run_tasks(self, calls: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
        from msgtrain.run.ray_engine import run_tasks_ray

        return run_tasks_ray(calls) if calls else []

    def plans_in_workers(self) -> bool:
        return False


def executor_for(cfg: ConvertConfig) -> Executor:
    """The executor ``--engine`` names."""
    return RayTasks() if cfg.engine == "ray" else LocalPool(cfg.workers)


def _worker_init(parent: int) -> None:
    # One process per core: keep the tokenizer's own thread pool to one thread so workers do not oversubscribe.
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    # Ctrl-C reaches the whole process group: the main process alone handles it (and stops the workers), so no
    # worker prints a KeyboardInterrupt traceback (it started with SIGINT blocked: msgtrain.run.signals).
    ignore_sigint_in_worker()
    _die_with_parent(parent)
    parts.SETTLE_HEAP = True


def _die_with_parent(parent: int) -> None:
    """A worker must not outlive the run: a SIGKILLed main process cannot stop its workers itself."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            pr_set_pdeathsig = 1
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    # Everywhere (and in case the parent died before prctl took effect): watch the parent's pid.

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, name="msgtrain-parent-watch", daemon=True).start()


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Stop a pool's workers now (interrupt, error): waiting for their running conversions could take minutes."""
    pool.shutdown(wait=False, cancel_futures=True)
    # ProcessPoolExecutor has no public way to stop running tasks; its worker processes are in ``_processes``.
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(Exception):
            process.kill()


def _convert_to_part(job: Job, settings: LinearizeSettings, parts_dir: Path | str) -> dict[str, Any]:
    samples, stats, rejects = convert_job(job, settings)
    write_part_to(parts_dir, job.key, job.meta, samples, stats, rejects)
    return stats.to_json()


def _run_parts(
    jobs: list[Job],
    settings: LinearizeSettings,
    parts_dir: Path | str,
    workers: int,
    on_done: Callable[[Job, PartStats], None],
    plans: Sequence[tuple[Path, str]] = (),
    chunk_bytes: int = 0,
    on_plan: Callable[[Path, str, list[Chunk]], list[Job]] | None = None,
) -> None:
    """Convert ``jobs``; files in ``plans`` are first cut into chunks by a worker (``on_plan`` registers them and
    returns the chunk jobs still to convert), then their chunks convert like any job."""
    if workers <= 1 or (len(jobs) <= 1 and not plans):
        for job in jobs:
            on_done(job, PartStats.from_json(_convert_to_part(job, settings, parts_dir)))
        return
    ctx = get_context("spawn")  # fork after the tokenizer's threads exist can deadlock
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_worker_init, initargs=(os.getpid(),)
    ) as pool:
        pending: dict[Future[Any], Job | tuple[Path, str]] = {}
        # Plans first (their chunks are the biggest work), then largest first (longest-processing-time order): a
        # big file started last would leave the other workers idle at the end. Output order does not depend on
        # it: parts are assembled in sorted order.
        queue: list[Job | tuple[Path, str]] = [*plans, *sorted(jobs, key=lambda job: -job.size)]
        try:
            while queue or pending:
                while queue and len(pending) < workers * 2:
                    item = queue.pop(0)
                    with sigint_deferred():  # submit may start a worker process
                        if isinstance(item, Job):
                            pending[pool.submit(_convert_to_part, item, settings, parts_dir)] = item
                        else:
                            pending[pool.submit(plan_file, item[0], settings, chunk_bytes)] = item
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in sorted(done, key=lambda f: isinstance(pending[f], Job)):
                    item = pending.pop(fut)
                    if isinstance(item, Job):
                        on_done(item, PartStats.from_json(fut.result()))
                    else:
                        assert on_plan is not None
                        chunk_jobs: list[Job] = sorted(on_plan(*item, fut.result()), key=lambda job: -job.size)
                        queue[:0] = chunk_jobs
        except BaseException:
            _stop_workers(pool)
            raise
