"""execute: the second step of a run, planned jobs → parts, through one :class:`Executor` protocol with two
implementations — a local process pool (:class:`LocalPool`) and Ray tasks (:class:`RayTasks`,
:mod:`msgtrain.run.ray_engine`). The executor also runs the assembly where the parts are
(:meth:`Executor.assemble`). No other step branches on the engine: the pipeline asks :func:`executor_for` once and
calls the protocol.

Invariants:
- Every job's part is written through the run's :class:`~msgtrain.run.part_store.PartsStore` wherever it runs,
  and ``on_done`` is called on the driver once per job; output never depends on the order jobs finish in (parts
  are assembled in sorted order).
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
from typing import TYPE_CHECKING, Any, Protocol

from msgtrain.errors import MsgtrainError, OutputError
from msgtrain.export.without_pandas import skip_pandas
from msgtrain.ingest.core.chunks import Chunk
from msgtrain.run import parts
from msgtrain.run.allocators import tune_allocators
from msgtrain.run.assembly import AssemblyJob, write_dataset
from msgtrain.run.config import ConvertConfig, ProgressHook
from msgtrain.run.empty_result import check_reject_rate
from msgtrain.run.parts import Job, LinearizeSettings, PartStats, convert_job
from msgtrain.run.signals import ignore_sigint_in_worker, sigint_deferred, what_stopped
from msgtrain.run.units import plan_file

if TYPE_CHECKING:
    from msgtrain.run.part_store import PartsStore
    from msgtrain.run.plan import RunPlan

OnDone = Callable[[Job, PartStats], None]
OnPlan = Callable[[Path, str, list[Chunk]], list[Job]]
MIN_RECORDS_FOR_RATE = 1000  # --max-reject-rate stops a run early only once this many records were read


class Interrupted(MsgtrainError):
    code = "interrupted"


class Executor(Protocol):
    """Where the work of a run happens."""

    input_hint: str  # what a run that could read no input should check first, on this executor

    def prepare(self, cfg: ConvertConfig) -> ConvertConfig:
        """``cfg`` as the executor's workers need it (every path they open meaning the same to them)."""
        ...

    def session(self) -> contextlib.AbstractContextManager[Any]:
        """Held for the whole run (a Ray connection; nothing for a local pool)."""
        ...

    def run_parts(
        self,
        jobs: list[Job],
        settings: LinearizeSettings,
        part_store: PartsStore,
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

    def assemble(self, job: AssemblyJob, tok: Any, progress: ProgressHook | None) -> dict[str, Any]:
        """Write the dataset ``job`` describes into ``job.dest`` (not published) and return its report, running
        where the parts are (``tok``: the driver's tokenizer, for work done on the driver)."""
        ...


class LocalPool:
    """A local pool of ``workers`` processes (in this process when 1)."""

    input_hint = ""

    def __init__(self, workers: int):
        self.workers = workers

    def prepare(self, cfg: ConvertConfig) -> ConvertConfig:
        return cfg

    def session(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def run_parts(
        self,
        jobs: list[Job],
        settings: LinearizeSettings,
        part_store: PartsStore,
        on_done: OnDone,
        plans: Sequence[tuple[Path, str]] = (),
        chunk_bytes: int = 0,
        on_plan: OnPlan | None = None,
    ) -> None:
        _run_parts(jobs, settings, part_store, self.workers, on_done, plans, chunk_bytes, on_plan)

    def run_tasks(self, calls: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
        return [fn(*args) for fn, args in calls]

    def plans_in_workers(self) -> bool:
        return self.workers > 1

    def assemble(self, job: AssemblyJob, tok: Any, progress: ProgressHook | None) -> dict[str, Any]:
        return write_dataset(job, tok, progress)


class RayTasks:
    """Ray tasks, one CPU each, retried when their worker dies (:mod:`msgtrain.run.ray_engine`)."""

    input_hint = "with --engine ray every node must see the inputs at the same path (or read them from s3:// URLs); "

    def prepare(self, cfg: ConvertConfig) -> ConvertConfig:
        from msgtrain.run.ray_engine import config_for_workers

        return config_for_workers(cfg)  # a task's working directory is not the driver's: its paths are absolute

    def session(self) -> contextlib.AbstractContextManager[Any]:
        from msgtrain.run.ray_engine import ray_session

        return ray_session()

    def run_parts(
        self,
        jobs: list[Job],
        settings: LinearizeSettings,
        part_store: PartsStore,
        on_done: OnDone,
        plans: Sequence[tuple[Path, str]] = (),
        chunk_bytes: int = 0,
        on_plan: OnPlan | None = None,
    ) -> None:
        from msgtrain.run.ray_engine import run_parts_ray

        assert not plans, "Ray plans huge inputs before conversion (plans_in_workers is False)"
        run_parts_ray(jobs, settings, part_store, on_done)

    def run_tasks(self, calls: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
        from msgtrain.run.ray_engine import run_tasks_ray

        return run_tasks_ray(calls) if calls else []

    def plans_in_workers(self) -> bool:
        return False

    def assemble(self, job: AssemblyJob, tok: Any, progress: ProgressHook | None) -> dict[str, Any]:
        from msgtrain.run.ray_engine import assemble_on_cluster

        return assemble_on_cluster(job)


def executor_for(cfg: ConvertConfig) -> Executor:
    """The executor ``--engine`` names."""
    return RayTasks() if cfg.engine == "ray" else LocalPool(cfg.workers)


def execute(plan: RunPlan, executor: Executor, cfg: ConvertConfig, progress: ProgressHook | None) -> None:
    """Convert the plan's jobs into parts; when it returns, every part of the run is complete in ``plan.parts``.

    Mid-run, ``--max-reject-rate`` is judged once the records read speak for the run (not the first bad file)."""
    running = PartStats()
    done_files = plan.reused

    def on_done(job: Job, stats: PartStats) -> None:
        nonlocal done_files
        done_files += 1
        running.add(stats)
        if progress:
            rejected = sum(running.records_rejected.values())
            figures = {"index": done_files, "total": plan.total_parts, "path": str(job.path)}
            progress(
                "file",
                {**figures, "records": running.records_read, "rejected": rejected, "turns": running.turns_trained},
            )
        if running.records_read >= MIN_RECORDS_FOR_RATE and done_files * 10 >= plan.total_parts + len(plan.plans):
            check_reject_rate(cfg, running)

    try:
        executor.run_parts(
            plan.jobs, plan.settings, plan.parts, on_done, plan.plans, plan.chunk_bytes, plan.add_planned
        )
    except KeyboardInterrupt as e:
        try:
            count, size = plan.parts.footprint()
            kept = f"{count} finished parts kept ({size / 2**20:.1f} MiB in {plan.parts})"
        except Exception:  # a store gone: the interrupt is still said
            kept = f"finished parts kept in {plan.parts}"
        raise Interrupted(
            f"{what_stopped(e)} after {done_files} of {plan.total_parts} parts; workers stopped, {kept}",
            hint="run the same command with --resume to finish",
        ) from None
    _check_parts(plan)


def _check_parts(plan: RunPlan) -> None:
    """Every part of the run is there for assembly, or the run stops (publishing without one would silently drop
    its samples)."""
    complete = plan.complete = plan.recheck()
    lost = [job for job in plan.jobs if not complete(job.key)]
    if lost:
        # Every job reported its part done: a part the driver cannot see was written where only its worker sees
        # it (a local OUT on another node).
        raise OutputError(
            f"{len(lost)} parts reported done are not in {plan.parts} (first: {lost[0].path})",
            hint="with --engine ray on several nodes, write OUT to an object store (s3://...) or shared storage",
        )
    missing = sum(1 for k in plan.run_keys if not complete(k))
    if missing:  # a part vanished or broke after it was written (disk, hand edits)
        raise OutputError(
            f"{missing} parts are missing or corrupt after conversion",
            where=str(plan.parts),
            hint="run the same command with --resume to recompute them",
        )


def _worker_init(parent: int) -> None:
    # One process per core: keep the tokenizer's own thread pool to one thread so workers do not oversubscribe.
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    # Ctrl-C reaches the whole process group: the main process alone handles it (and stops the workers), so no
    # worker prints a KeyboardInterrupt traceback (it started with SIGINT blocked: msgtrain.run.signals).
    ignore_sigint_in_worker()
    _die_with_parent(parent)
    parts.SETTLE_HEAP = True
    tune_allocators()  # its Arrow pool came with the environment this process was started with
    skip_pandas()  # a worker runs msgtrain alone: pyarrow need not import pandas


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
    """Stop a pool's workers now (interrupt, error) and reap them: waiting for their running conversions could take
    minutes, and a finished part is complete on disk (``part.json`` last), so killing the rest loses nothing.

    The process table is read before ``shutdown``, which drops it (``_processes = None`` on Python 3.11)."""
    # ProcessPoolExecutor has no public way to stop running tasks; its worker processes are in ``_processes``.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        with contextlib.suppress(Exception):
            process.kill()
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + 1.0
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(max(0.0, deadline - time.monotonic()))
    # The pool's manager thread closes its wake-up pipe once it sees the workers gone; the interpreter's exit hook
    # writes to that pipe, and racing the close it printed a traceback (EBADF) under the one line an interrupt says.
    if manager is not None:
        with contextlib.suppress(Exception):
            manager.join(max(0.0, deadline - time.monotonic()))


def _convert_to_part(job: Job, settings: LinearizeSettings, part_store: PartsStore) -> dict[str, Any]:
    samples, stats, rejects = convert_job(job, settings)
    part_store.write(job.key, job.meta, samples, stats, rejects)
    return stats.to_json()


def _run_parts(
    jobs: list[Job],
    settings: LinearizeSettings,
    part_store: PartsStore,
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
            on_done(job, PartStats.from_json(_convert_to_part(job, settings, part_store)))
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
                            pending[pool.submit(_convert_to_part, item, settings, part_store)] = item
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
