"""The convert pipeline: input files → parts (read + linearize, in workers) → assembly (length policy, splits,
target, writer) → atomic publish of OUT with ``report.json``, ``rejects.jsonl`` and ``drops.jsonl``.

Invariants:
- Accounting: records read = converted + rejected + skipped (per reason); sampled turns found = trained + dropped
  (per reason). :func:`check_accounting` asserts both before anything is published.
- Safe output (:mod:`msgtrain.run.publish`): OUT is checked before anything is written (never an input, ``.`` or
  ``/``, never a directory msgtrain did not write unless ``overwrite``); OUT exists at every instant and shows the
  previous dataset or the new one, never a partial one. One run at a time per OUT (:mod:`msgtrain.run.lock`;
  on an object store a lease object, :mod:`msgtrain.run.lease`).
  A killed run leaves OUT untouched plus its finished parts in the state directory (``.OUT.msgtrain-state``),
  which ``--resume`` reuses.
- Deterministic: parts are assembled in sorted (source path, content hash, chunk) order whatever the number of
  workers or the order they finished in, so the same inputs and settings give byte-identical output.
- Work is split by input file, and a JSONL log larger than ``chunk_mb`` into chunks of whole conversations
  (:mod:`msgtrain.ingest.chunks`): the same samples and accounting as the whole file, in parallel and in memory
  bounded by the chunk, not the file.
- Resumable / incremental: a part is keyed by file content + file name + linearization settings + tokenizer
  (:func:`~msgtrain.run.parts.part_key`; never the folder: a file moved elsewhere is reused, its sources rewritten;
  the same bytes are converted once per run); with ``--resume`` finished parts are reused, exactly as a clean run
  would write them. The published dataset is exactly this run's inputs; ``keep_missing`` also keeps the parts of
  earlier inputs that are no longer inputs (rotated logs). A corrupt or partial part or manifest is recomputed.
- A bad record or file never stops the run (unless ``strict``); it lands in the rejects file. A sample longer than
  ``max_length`` (implied by ``pack_length`` for the packed and tree targets) never stops it either: the length
  policy drops it, counts it by reason and lists it (ids, length) in ``drops.jsonl``.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from msgtrain import __version__
from msgtrain.errors import ConfigError, MsgtrainError, OutputError
from msgtrain.ingest.chunks import Chunk
from msgtrain.ingest.faults import default_debug_log
from msgtrain.run.assembly import (
    DROPS,
    Tally,
    assemble_on_cluster,
    assemble_to_store,
    distributable,
    local_group_reader,
    reporter,
    write_dataset,
    write_local_dataset,
)
from msgtrain.run.config import ConvertConfig, ProgressHook
from msgtrain.run.empty_result import check_reject_rate, refuse_empty_replacement, refuse_nothing_read
from msgtrain.run.execute import executor_for
from msgtrain.run.journal import append_manifest, load_manifest, save_manifest
from msgtrain.run.lease import StoreLease, store_lock
from msgtrain.run.lock import exclusive_lock
from msgtrain.run.object_chunks import ObjectView, plan_object
from msgtrain.run.parts import (
    Job,
    PartStats,
    part_key,
    reuse_part,
    settings_from_config,
)
from msgtrain.run.plan import clear_parts, completeness, discover_locations, load_tokenizer_checked, real_location
from msgtrain.run.publish import (
    check_output,
    clean_litter,
    hidden_siblings,
    publish,
    staging_dir,
    state_dir,
)
from msgtrain.run.ray_engine import config_for_workers
from msgtrain.run.storage import (
    is_remote,
    join,
    new_version,
    publish_pointer,
    version_url,
)
from msgtrain.run.units import chunkable, input_digest, object_chunkable, plan_file

MIN_RECORDS_FOR_RATE = 1000  # --max-reject-rate stops a run early only once this many records were read
DEBUG_LOG = "debug.log"  # in the state directory: tracebacks of reader_error rejects (never printed)
STATE_PREFIX = "_state"  # an object-store OUT keeps its state under OUT/_state/ (no sibling to hide it in)


class Interrupted(MsgtrainError):
    code = "interrupted"


# ---------------------------------------------------------------------------------------------------- convert
def convert(cfg: ConvertConfig, progress: ProgressHook | None = None) -> dict[str, Any]:
    """Run a conversion described by a :class:`msgtrain.run.config.ConvertConfig`; return the report.

    A local OUT is checked (:func:`check_output`) before anything is written, and everything beside it is changed
    under its lock (:func:`exclusive_lock`), starting with the litter of dead runs."""
    started = time.perf_counter()
    if cfg.output is None:
        raise ConfigError("no output directory", hint="pass -o OUT")
    if cfg.engine == "ray":  # a task's working directory is not the driver's: every path it opens is absolute
        cfg = config_for_workers(cfg)
    output = cfg.output  # after the line above: OUT's state and parts directories are opened by the tasks too
    assert output is not None
    if cfg.keep_missing and not cfg.resume:
        raise ConfigError("--keep-missing keeps parts of earlier runs: it needs --resume", hint="add --resume")
    if is_remote(str(output)):
        if cfg.rejects is not None:
            raise ConfigError(
                "--rejects cannot be used with an object-store OUT",
                hint="the rejects are published with the dataset (OUT/_versions/<version>/rejects.jsonl)",
            )
        state = join(str(cfg.output), STATE_PREFIX)
        with store_lock(state) as lease:  # a store has no flock: a lease object with a heartbeat
            return _convert_in(cfg, None, state, join(state, "parts"), started, progress, lease)
    out = Path(output)
    check_output(
        out,
        [Path(p) for p in cfg.inputs if not is_remote(str(p))],
        overwrite=cfg.overwrite,
        rejects=Path(cfg.rejects) if cfg.rejects is not None else None,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    local_state = state_dir(out)
    with exclusive_lock(local_state):
        clean_litter(out)
        return _convert_in(cfg, out, local_state, local_state / "parts", started, progress)


def _convert_in(
    cfg: ConvertConfig,
    out: Path | None,
    state: Path | str,
    parts_dir: Path | str,
    started: float,
    progress: ProgressHook | None,
    lease: StoreLease | None = None,
) -> dict[str, Any]:
    """The run itself; ``out`` is None for an object-store OUT (``cfg.output``), whose ``lease`` is held."""
    remote = out is None
    exclude = [out, *hidden_siblings(out)] if out is not None else []
    forced = bool(cfg.input_format or cfg.mapping)
    files, ignored = discover_locations([str(p) for p in cfg.inputs], exclude, forced)
    if progress:  # the total is known from here on: a progress display needs no "?"
        progress("listed", {"files": len(files)})
    tok = load_tokenizer_checked(cfg)
    # On an object store the workers' tracebacks stay on the machine that hit them (a local temp file).
    settings = settings_from_config(
        cfg, debug_log=str(state / DEBUG_LOG) if isinstance(state, Path) else str(default_debug_log())
    )
    skey = settings.key(tok.fingerprint)
    manifest: dict[str, dict[str, Any]] = load_manifest(state) if cfg.resume else {}
    if not cfg.resume:
        clear_parts(parts_dir)
    if isinstance(parts_dir, Path):
        parts_dir.mkdir(parents=True, exist_ok=True)
        for stray in parts_dir.glob(".tmp-*"):
            shutil.rmtree(stray, ignore_errors=True)
    # On a store, which parts are complete is one listing, not a request per part.
    complete = completeness(parts_dir)
    if not cfg.resume and isinstance(state, Path):
        (state / DEBUG_LOG).unlink(missing_ok=True)

    jobs: list[Job] = []
    plans: list[tuple[Path, str]] = []
    object_plans: list[tuple[str, str]] = []
    reused = converted = 0
    total_parts = 0
    chunk_bytes = int(cfg.chunk_mb * (1 << 20))
    run_keys: dict[str, None] = {}  # this run's parts, in registration order: exactly what is published
    run_digests: set[str] = set()
    run_paths: set[str] = set()

    def add_jobs(f: Path | str, digest: str, chunks: list[Chunk], view: ObjectView | None = None) -> list[Job]:
        """Register the parts of one file (whole, or its chunks); return those still to convert."""
        nonlocal reused, converted, total_parts
        units: list[Chunk | None] = [*chunks] or [None]
        todo = []
        for chunk in units:
            label = f"{chunk.index}/{chunk.count}/{chunk_bytes}" if chunk is not None else ""
            name = f.name if isinstance(f, Path) else f.rstrip("/").rpartition("/")[2]
            key = part_key(digest, skey, label, name=name)
            meta: dict[str, Any] = {
                "source": str(f),
                "real": real_location(f),
                "digest": digest,
                "settings": skey,
                "version": __version__,
            }
            if chunk is not None:
                meta["chunk"] = [chunk.index, chunk.count]
            manifest[key] = meta
            run_keys[key] = None
            total_parts += 1
            if cfg.resume and complete(key) and reuse_part(parts_dir, key, meta):
                reused += 1
            else:
                todo.append(Job(f, key, meta, chunk, view if chunk is not None else None))
        converted += len(todo)
        return todo

    # With a local worker pool, huge files are planned by the workers (planning is a pass over the file), while
    # other files convert; otherwise here.
    executor = executor_for(cfg)
    plan_in_workers = executor.plans_in_workers()
    first_with_digest: dict[str, Path | str] = {}
    for index, f in enumerate(files):
        if progress:
            progress("hash", {"index": index, "total": len(files)})
        try:
            # An object on a store is hashed by the store (its metadata, or a read); a folder log by its objects.
            digest = input_digest(f)  # the file's bytes, and those of files its reader consults beside it
        except OSError as e:
            ignored.append({"path": str(f), "reason": f"unreadable: {e.strerror or e}"})
            continue
        if digest in first_with_digest:  # the same bytes under another name: converted once
            ignored.append({"path": str(f), "reason": f"same content as {first_with_digest[digest]}"})
            continue
        first_with_digest[digest] = f
        run_digests.add(digest)
        run_paths.add(real_location(f))
        if isinstance(f, str):
            if object_chunkable(f, chunk_bytes):
                object_plans.append((f, digest))
            else:
                jobs += add_jobs(f, digest, [])
        elif plan_in_workers and chunkable(f, settings, chunk_bytes):
            plans.append((f, digest))
        else:
            jobs += add_jobs(f, digest, plan_file(f, settings, chunk_bytes))

    # Huge objects: planned by a task each (a pass over the object) before conversion; their chunks' workers then
    # fetch only their byte ranges.
    planned = executor.run_tasks([(plan_object, (url, settings, chunk_bytes)) for url, _ in object_plans])
    for (url, digest), (chunks, view) in zip(object_plans, planned, strict=True):
        jobs += add_jobs(url, digest, chunks, view)

    def on_plan(f: Path, digest: str, chunks: list[Chunk]) -> list[Job]:
        known = set(run_keys)
        todo = add_jobs(f, digest, chunks)
        append_manifest(state, {k: manifest[k] for k in run_keys if k not in known}, manifest)
        return todo

    running = PartStats()
    done_files = reused

    def on_done(job: Job, stats: PartStats) -> None:
        nonlocal done_files
        path = job.path
        done_files += 1
        running.add(stats)
        if progress:
            progress(
                "file",
                {
                    "index": done_files,
                    "total": total_parts,
                    "path": str(path),
                    "records": running.records_read,
                    "rejected": sum(running.records_rejected.values()),
                    "turns": running.turns_trained,
                },
            )
        # Mid-run, the rate is judged only on a sample large enough to speak for the run (not the first bad file);
        # the whole run is judged before publishing.
        if running.records_read >= MIN_RECORDS_FOR_RATE and done_files * 10 >= total_parts + len(plans):
            check_reject_rate(cfg, running)

    # Once, before any part: a killed run resumes from its parts, found by key (journal.py: never once per part).
    save_manifest(state, manifest)
    if progress:
        progress("planned", {"total": total_parts + len(plans), "reused": reused})
    with contextlib.ExitStack() as stack:
        stack.enter_context(executor.session())
        if cfg.engine == "ray":
            from msgtrain.run.ray_engine import run_task_ray
        try:
            executor.run_parts(jobs, settings, parts_dir, on_done, plans, chunk_bytes, on_plan)
        except KeyboardInterrupt:
            raise Interrupted(
                f"interrupted after {done_files} of {total_parts} parts; finished parts are kept",
                hint="run the same command with --resume to finish",
            ) from None
        complete = completeness(parts_dir)
        lost = [job for job in jobs if not complete(job.key)]
        if lost:
            # Every job reported its part done: a part the driver cannot see was written where only its worker
            # sees it (a local OUT on another node). Publishing without it would silently drop its samples.
            raise OutputError(
                f"{len(lost)} parts reported done are not in {parts_dir} (first: {lost[0].path})",
                hint="with --engine ray on several nodes, write OUT to an object store (s3://...) or shared storage",
            )
        published = [k for k in run_keys if complete(k)]
        if len(published) != len(run_keys):  # a part vanished or broke after it was written (disk, hand edits)
            raise OutputError(
                f"{len(run_keys) - len(published)} parts are missing or corrupt after conversion",
                where=str(parts_dir),
                hint="run the same command with --resume to recompute them",
            )
        if cfg.keep_missing:
            # Parts of earlier inputs that are not inputs now (rotated logs); a file that is an input now with
            # other bytes replaces its old parts.
            published += sorted(
                k
                for k, m in manifest.items()
                if k not in run_keys
                and m["settings"] == skey
                and m["digest"] not in run_digests
                and m.get("real", m["source"]) not in run_paths
                and complete(k)
            )
        keys = sorted(
            published,
            key=lambda k: (manifest[k]["source"], manifest[k]["digest"], manifest[k].get("chunk") or [0, 1]),
        )
        # The parts of one input file (its chunks, in chunk order) are assembled together.
        groups = [
            list(g) for _, g in itertools.groupby(keys, key=lambda k: (manifest[k]["source"], manifest[k]["digest"]))
        ]
        if remote:
            # A new version under OUT/_versions/, made current by one small pointer written last. With Ray the
            # assembly is tasks (one per shard, or one for the whole dataset): the driver never holds a part's or a
            # shard's bytes.
            assert isinstance(parts_dir, str)
            version = new_version()
            target = version_url(str(cfg.output), version)
            args = (cfg, parts_dir, groups, ignored, target)
            if cfg.engine == "ray" and distributable(cfg):  # one task per shard
                rejects = join(target, "rejects.jsonl")
                data = assemble_on_cluster(cfg, parts_dir, groups, target, rejects, reporter(cfg, tok, ignored))
            elif cfg.engine == "ray":
                data = run_task_ray(assemble_to_store, *args)
            else:
                data = assemble_to_store(*args)
            refuse_nothing_read(cfg, data)
            if lease is not None:
                lease.check()  # a run that lost its lease (stalled past its expiry) must not publish
            publish_pointer(str(cfg.output), version)
            data["published"] = {"version": version, "path": target}
            rejects_at = join(target, "rejects.jsonl")
            drops_at = join(target, DROPS)
        else:
            assert isinstance(parts_dir, Path) and out is not None
            if cfg.engine == "ray" and distributable(cfg):
                data = _assemble_on_cluster(cfg, out, tok, parts_dir, groups, ignored)
            else:
                data = _assemble(cfg, out, tok, parts_dir, groups, ignored, progress)
            rejects_at = str(cfg.rejects) if cfg.rejects else str(out / "rejects.jsonl")
            drops_at = str(out / DROPS)
            # The state now describes exactly the published dataset; other parts are garbage.
            kept = set(keys)
            for key in [k for k in manifest if k not in kept]:
                del manifest[key]
            save_manifest(state, manifest)
            for part in parts_dir.iterdir():
                if part.name not in kept:
                    shutil.rmtree(part, ignore_errors=True)
    data["resume"] = {"parts": len(keys), "reused": reused, "converted": converted}
    data["seconds"] = round(time.perf_counter() - started, 3)
    faults = data["records"]["rejected_by_reason"].get("reader_error", 0)
    debug_log = settings.debug_log
    data["outputs"]["debug_log"] = debug_log if faults else None
    data["outputs"]["rejects"] = rejects_at if data["records"]["rejected"] else None
    data["outputs"]["drops"] = drops_at if data["outputs"].get("drops") else None
    return data


def _assemble(
    cfg: ConvertConfig,
    out: Path,
    tok: Any,
    parts_dir: Path,
    groups: list[list[str]],
    ignored: list[dict[str, str]],
    progress: ProgressHook | None,
) -> dict[str, Any]:
    """Write OUT from the parts: ``groups`` are the part keys of each input file (a file's chunks merge back
    into its order), in the deterministic assembly order."""
    tmp = staging_dir(out)
    try:
        rejects_path = Path(cfg.rejects) if cfg.rejects else tmp / "rejects.jsonl"
        if cfg.engine == "ray":
            # Rows that depend on their neighbours (packed, tree) or hf/jsonl files: one task writes them into the
            # staging directory (a path every node sees), so the driver never holds a part's bytes.
            from msgtrain.run.ray_engine import run_task_ray

            data = run_task_ray(write_local_dataset, cfg, tmp, parts_dir, groups, ignored, rejects_path)
        else:
            data = write_dataset(cfg, tmp, tok, local_group_reader(parts_dir), groups, ignored, progress, rejects_path)
        # The rate on every record of the run, whatever was judged mid-run.
        records = data["records"]
        check_reject_rate(
            cfg, PartStats(records_read=records["read"], records_rejected=Counter(records["rejected_by_reason"]))
        )
        refuse_nothing_read(cfg, data, rejects_path)
        refuse_empty_replacement(cfg, out, data["samples"]["written"])
        publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return data


def _assemble_on_cluster(
    cfg: ConvertConfig, out: Path, tok: Any, parts_dir: Path, groups: list[list[str]], ignored: list[dict[str, str]]
) -> dict[str, Any]:
    """:func:`_assemble` with one Ray task per shard writing into the staging directory (a path every node sees,
    as the parts directory is); the driver writes the metadata and publishes."""

    def check(tally: Tally) -> None:
        stats = tally.stats
        check_reject_rate(cfg, PartStats(records_read=stats.records_read, records_rejected=stats.records_rejected))
        refuse_empty_replacement(cfg, out, tally.samples)

    tmp = staging_dir(out)
    try:
        rejects = Path(cfg.rejects) if cfg.rejects else tmp / "rejects.jsonl"
        data = assemble_on_cluster(cfg, parts_dir, groups, tmp, rejects, reporter(cfg, tok, ignored), check)
        refuse_nothing_read(cfg, data, rejects)
        publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return data
