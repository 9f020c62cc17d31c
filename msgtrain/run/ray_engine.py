"""``--engine ray``: the local engine's per-part conversion, run as Ray tasks on a local or remote cluster.

Invariants:
- Same work, same parts: each job (an input file, or one chunk of a huge one) runs
  :func:`msgtrain.run.parts.convert_job` and writes its part through the run's
  :class:`~msgtrain.run.part_store.PartsStore` exactly as the local
  engine's workers do, so the pipeline's deterministic assembly gives output byte-identical to ``--engine local``
  (whatever the order jobs finish in, and whichever attempt of a retried job wrote the part).
- Workers read their input themselves (an object on a store, or a path on a filesystem every node sees) and write
  their part straight into the state directory or prefix; a task returns only the part's accounting (a few
  hundred bytes of JSON). The driver never holds a part's bytes: its memory does not grow with the parts' size.
- The dataset is assembled by tasks too (:func:`assemble_on_cluster`): one per output shard for Parquet of a
  row-wise target (:mod:`msgtrain.run.assembly`), else one task for the whole dataset, written into OUT's staging
  directory (a path every node sees) or a fresh version prefix on a store. The driver publishes (the pointer, or
  the symlink swap) last.
- A worker that dies (node lost, OOM-killed) has its task retried by Ray (``max_retries``); a part is complete
  only once its marker is written, so a half-written attempt is simply overwritten by the retry.
- Each task holds one CPU and keeps the tokenizer's own thread pool to one thread (``RAYON_NUM_THREADS=1``); Ray
  reuses worker processes, which keep their loaded tokenizer (cached per process) across jobs.
- Paths a task opens are absolute, resolved on the driver before any task is planned (:func:`config_for_workers`,
  :func:`job_for_workers`): a worker runs in a working directory of its own (on another node, or in its session
  directory on this one), so a relative path names nothing there, or another file. OUT (and with it the state,
  parts and staging directories shard tasks write into), ``--rejects``, a ``--tokenizer`` folder, a
  ``--chat-template`` file and each job's input are made absolute; URLs and hub ids mean the same on every node.
  What a user reads keeps the spelling they gave: a sample's ``source`` and a reject's file name the input as it
  was passed, as the local engine writes them (:func:`msgtrain.run.parts.convert_job` puts the spelling back).
- A bad file never stops the run (its rejects are in its part); with ``strict`` the first error is raised as the
  original :class:`~msgtrain.errors.MsgtrainError`, not wrapped in Ray's error type.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import socket
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from msgtrain.errors import ConfigError, MsgtrainError
from msgtrain.export.split import SplitAssigner
from msgtrain.linearize.tokenizer_source import looks_local
from msgtrain.run.assembly import (
    REJECTS,
    AssemblyJob,
    ScanResult,
    Tally,
    build_report,
    check_accounting,
    decide_duplicates,
    digest_slice,
    distributable,
    plan_shards,
    refuse_result,
    scan_batches,
    scan_slice,
    shard_outputs,
    write_dataset,
    write_drops,
    write_metadata,
    write_rejects,
    write_shard,
)
from msgtrain.run.config import ConvertConfig
from msgtrain.run.part_store import PartsStore
from msgtrain.run.parts import Job, LinearizeSettings, PartStats, convert_job
from msgtrain.run.storage import child, is_remote

TASK_ENV = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
# Store credentials and endpoints the workers need as much as the driver (an S3-compatible server's address).
FORWARDED_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "HF_TOKEN",
    "STORAGE_EMULATOR_HOST",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_CONNECTION_STRING",
)
MAX_RETRIES = 3  # retries of a task whose worker died; an error raised by msgtrain itself is not retried


def _env() -> dict[str, str]:
    return {**TASK_ENV, **{name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}}


def _convert_task(job: Job, settings: LinearizeSettings, parts: PartsStore) -> tuple[str, bytes]:
    """Convert one job and write its part; return (stats JSON, b"") or ("", pickled strict error)."""
    for name, value in TASK_ENV.items():  # before the first tokenizer call of this worker process
        os.environ.setdefault(name, value)
    try:
        samples, stats, rejects = convert_job(job, settings)
        parts.write(job.key, job.meta, samples, stats, rejects)
    except MsgtrainError as e:  # only with strict: a bad record otherwise becomes a reject in the part
        return "", pickle.dumps(e)
    return json.dumps(stats.to_json()), b""


def _call_task(fn: Callable[..., Any], *args: Any) -> tuple[Any, bytes]:
    # Arguments are passed flat: Ray resolves an object ref only when it is an argument itself.
    try:
        return fn(*args), b""
    except MsgtrainError as e:
        return None, pickle.dumps(e)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ConfigError(
            "--engine ray needs Ray, which is not installed",
            hint="pip install 'msgtrain[ray]' (or use --engine local)",
        ) from e
    return ray


PROBE_SECONDS = 5.0  # how long a cluster's address may take to accept a connection before the run gives up


def cluster_address(address: str | None) -> str:
    """The address to give ``ray.init``: ``address``, else ``RAY_ADDRESS``, else ``"local"`` (a new local instance:
    never a cluster Ray finds on its own, such as the one a ``ray start`` that has since died recorded in Ray's
    temporary directory, which Ray would retry for minutes). A cluster address is first checked to accept a
    connection within :data:`PROBE_SECONDS`; one that does not is a :class:`~msgtrain.errors.ConfigError` naming
    it, at once."""
    given = address or os.environ.get("RAY_ADDRESS") or "local"
    if given == "local":
        return given
    target = given
    if given == "auto":
        from ray._private.services import find_bootstrap_address

        target = find_bootstrap_address(None) or ""
        if not target:
            raise ConfigError(
                "RAY_ADDRESS=auto but no Ray cluster was started on this node (no `ray start` address recorded)",
                hint="start one with `ray start --head`, set RAY_ADDRESS to the cluster's address, or unset"
                " RAY_ADDRESS to run a local Ray instance",
            )
    host, _, port = target.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=PROBE_SECONDS):
            pass
    except (OSError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or type(e).__name__
        raise ConfigError(
            f"no Ray cluster answers at {given}" + (f" ({target})" if target != given else "") + f": {reason}",
            hint="start the cluster (`ray start --head`), fix RAY_ADDRESS, or unset it to run a local Ray instance",
            code="ray_unreachable",
        ) from None
    return given


@contextlib.contextmanager
def ray_session(address: str | None = None) -> Iterator[Any]:
    """Connect to ``address`` (``"auto"``, ``"ray://host:10001"``, ...) or, when None, to ``RAY_ADDRESS`` if set,
    else start a local Ray instance, for the duration of the block (:func:`cluster_address`). An initialised Ray
    (``ray.init`` by the caller, or an enclosing session) is reused and left running."""
    ray = _import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(
            address=cluster_address(address), include_dashboard=False, log_to_driver=False, configure_logging=False
        )
    try:
        yield ray
    finally:
        if started_here:
            ray.shutdown()


def run_parts_ray(
    jobs: list[Job],
    settings: LinearizeSettings,
    parts: PartsStore,
    on_done: Callable[[Job, PartStats], None],
    address: str | None = None,
) -> None:
    """Convert ``jobs`` as Ray tasks that write their parts into ``parts`` (a directory every node sees, or a prefix
    on a store); call ``on_done`` on the driver as each part lands."""
    if not jobs:
        return
    with ray_session(address) as ray:
        task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, runtime_env={"env_vars": _env()})(_convert_task)
        # Largest first, as the local engine, so a big file does not start last.
        # Each task opens its input by an absolute path: a worker's working directory is not the driver's.
        pending = {
            task.remote(job_for_workers(job), settings, parts): job for job in sorted(jobs, key=lambda job: -job.size)
        }
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    job = pending.pop(ref)
                    stats, error = ray.get(ref)
                    if error:
                        raise pickle.loads(error)
                    on_done(job, PartStats.from_json(json.loads(stats)))
        except BaseException:
            for ref in pending:
                ray.cancel(ref)
            raise


def run_task_ray(fn: Callable[..., Any], *args: Any, address: str | None = None) -> Any:
    """Run ``fn(*args)`` as one Ray task (one CPU, retried if its worker dies) and return its result; a
    :class:`~msgtrain.errors.MsgtrainError` it raises is raised here as itself."""
    with ray_session(address) as ray:
        task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, runtime_env={"env_vars": _env()})(_call_task)
        result, error = ray.get(task.remote(fn, *args))
        if error:
            raise pickle.loads(error)
        return result


def run_tasks_ray(calls: list[tuple[Callable[..., Any], tuple[Any, ...]]], address: str | None = None) -> list[Any]:
    """Run each ``fn(*args)`` as its own Ray task (one CPU each, retried if its worker dies), side by side; return
    their results in the order given. The first :class:`~msgtrain.errors.MsgtrainError` raised is raised here
    as itself, and the other tasks are cancelled. Arguments shared by many calls should be ``ray.put`` refs."""
    if not calls:
        return []
    with ray_session(address) as ray:
        task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, runtime_env={"env_vars": _env()})(_call_task)
        # Named after the function: the worker process title (``ray::write_shard``) says what it does.
        refs = [task.options(name=fn.__name__).remote(fn, *args) for fn, args in calls]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    result, error = ray.get(ref)
                    if error:
                        raise pickle.loads(error)
                    results[index[ref]] = result
        except BaseException:
            for ref in pending:
                ray.cancel(ref)
            raise
        return results


def put(value: Any) -> Any:
    """``value`` in Ray's object store (a ref tasks receive as the value itself): one copy for many tasks."""
    return _import_ray().put(value)


def cluster_cpus() -> int:
    """The CPUs of the cluster this driver is connected to."""
    return max(1, int(_import_ray().cluster_resources().get("CPU", 1)))


def _absolute(path: Path | str) -> Path:
    return Path(os.path.abspath(os.path.expanduser(path)))


def config_for_workers(cfg: ConvertConfig) -> ConvertConfig:
    """``cfg`` with every local path a task opens made absolute (inputs keep their spelling: see the module)."""
    update: dict[str, Any] = {}
    if cfg.output is not None and not is_remote(str(cfg.output)):
        update["output"] = _absolute(cfg.output)
    if cfg.rejects is not None:
        update["rejects"] = _absolute(cfg.rejects)
    if cfg.tokenizer is not None and looks_local(cfg.tokenizer):
        update["tokenizer"] = str(_absolute(cfg.tokenizer))
    if cfg.chat_template is not None and not is_remote(cfg.chat_template):
        update["chat_template"] = str(_absolute(cfg.chat_template))
    return cfg.model_copy(update=update) if update else cfg


def job_for_workers(job: Job) -> Job:
    """``job`` with a local input's path absolute; its ``meta["source"]`` keeps the spelling samples are named by."""
    if isinstance(job.path, str) or job.path.is_absolute():
        return job
    return replace(job, path=_absolute(job.path))


def assemble_on_cluster(job: AssemblyJob) -> dict[str, Any]:
    """Write the dataset ``job`` describes into ``job.dest`` (a local directory every node sees, or a prefix on a
    store) with Ray tasks, the driver never holding a part's or a shard's bytes.

    Parquet of a row-wise target (:func:`~msgtrain.run.assembly.distributable`): scan tasks, then one task per
    shard and one for the rejects; then one task writes ``dataset_info.json`` and, last, ``report.json`` (built on
    the driver from the scans' accounting, refused before any shard is written if it must be). Any other dataset
    (rows that depend on their neighbours, hf or jsonl files) is written by one task. Returns the report."""
    if not distributable(job.cfg):
        return run_task_ray(write_dataset, job)
    cfg, parts, dest = job.cfg, job.parts, job.dest
    batches = scan_batches(job.groups, 2 * cluster_cpus())
    shared = put(job.groups)  # one copy in Ray's object store, not one per task
    # A first pass for the run's duplicate turns (decided in assembly order, as the sequential writer decides).
    digests = run_tasks_ray([(digest_slice, (cfg, parts, shared, start, stop)) for start, stop in batches])
    decided = put(decide_duplicates(digests))
    scans: list[ScanResult] = run_tasks_ray(
        [(scan_slice, (cfg, parts, shared, start, stop, decided)) for start, stop in batches]
    )
    tally = Tally()
    for scan in scans:
        tally.merge(scan.tally)
    refuse_result(job, tally)
    splits = SplitAssigner(cfg.split).names
    plans = plan_shards(splits, [rows for scan in scans for rows in scan.rows], cfg.rows_per_shard)
    calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
        (write_shard, (cfg, parts, shared, plan, dest, decided)) for plan in plans
    ]
    rejects = job.rejects or child(dest, REJECTS)
    calls.append((write_rejects, (parts, shared, rejects, job.rejects is not None)))
    results = run_tasks_ray(calls)
    outputs = shard_outputs(cfg, splits, plans, results[:-1])
    outputs["drops"] = write_drops(tally, dest)  # small: ids and lengths, already on the driver with the tally
    data = build_report(cfg, tally, job.tokenizer, job.ignored, outputs)
    check_accounting(data)
    # A task too, though small: ``dataset_info.json`` is written by ``datasets``, whose import alone would add
    # tens of MB to the driver.
    run_tasks_ray([(write_metadata, (cfg.target, splits, [r.info for r in results[:-1]], data, dest))])
    return data
