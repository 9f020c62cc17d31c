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
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from msgtrain import __version__
from msgtrain.errors import ConfigError, MsgtrainError, OutputError
from msgtrain.ingest.chunks import Chunk
from msgtrain.ingest.faults import default_debug_log
from msgtrain.linearize import DEMO_TOKENIZER, load_tokenizer
from msgtrain.run.assembly import (
    DROPS,
    Tally,
    assemble_on_cluster,
    assembly_tables,
    build_report,
    distributable,
    write_drops,
)
from msgtrain.run.config import ConvertConfig
from msgtrain.run.empty_result import refuse_nothing_read
from msgtrain.run.execute import executor_for
from msgtrain.run.journal import append_manifest, load_manifest, save_manifest
from msgtrain.run.lease import StoreLease, store_lock
from msgtrain.run.lock import exclusive_lock
from msgtrain.run.object_chunks import ObjectView, plan_object
from msgtrain.run.parts import (
    PART_FILE,
    Job,
    PartStats,
    fetch_part,
    is_complete,
    part_key,
    read_part,
    reuse_part,
    settings_from_config,
)
from msgtrain.run.plan import (
    _chunkable,
    _object_chunkable,
    discover_locations,
    input_digest,
    plan_file,
)
from msgtrain.run.publish import (
    check_output,
    clean_litter,
    hidden_siblings,
    previous_report,
    publish,
    staging_dir,
    state_dir,
)
from msgtrain.run.storage import (
    Store,
    is_remote,
    iter_parts_complete,
    join,
    new_version,
    publish_pointer,
    version_url,
)
from msgtrain.run.worker_paths import config_for_workers

MIN_RECORDS_FOR_RATE = 1000  # --max-reject-rate stops a run early only once this many records were read
DEBUG_LOG = "debug.log"  # in the state directory: tracebacks of reader_error rejects (never printed)
STATE_PREFIX = "_state"  # an object-store OUT keeps its state under OUT/_state/ (no sibling to hide it in)

ProgressHook = Callable[[str, dict[str, Any]], None]


class Interrupted(MsgtrainError):
    code = "interrupted"


def check_accounting(report: dict[str, Any]) -> None:
    """The two identities every run must satisfy; raises AssertionError naming the broken one."""
    r = report["records"]
    assert r["read"] == r["converted"] + r["rejected"] + r["skipped"], f"records do not add up: {r}"
    assert sum(r["rejected_by_reason"].values()) == r["rejected"], r
    assert sum(r["skipped_by_reason"].values()) == r["skipped"], r
    t = report["turns"]
    assert t["found"] == t["trained"] + t["dropped"], f"turns do not add up: {t}"
    assert sum(t["dropped_by_reason"].values()) == t["dropped"], t


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


def _check_chat_template(tok: Any, source: str) -> None:
    """A --chat-template that does not render a conversation is a usage error, found before any work."""
    probe = [{"role": "user", "content": "msgtrain-probe-user"}, {"role": "assistant", "content": "msgtrain-probe-ok"}]
    try:
        text = tok.render(probe, add_generation_prompt=False)  # as apply_chat_template renders it
    except Exception as e:  # a template that fails on the simplest conversation is not a chat template
        raise ConfigError(
            f"--chat-template {source} does not render a conversation: {type(e).__name__}: {e}",
            hint="pass a .jinja chat template or a tokenizer_config.json with a chat_template",
            code="bad_chat_template",
        ) from None
    if not isinstance(text, str) or "msgtrain-probe-user" not in text or "msgtrain-probe-ok" not in text:
        raise ConfigError(
            f"--chat-template {source} is not a chat template (it does not print the messages)",
            hint="pass a .jinja chat template or a tokenizer_config.json with a chat_template",
            code="bad_chat_template",
        )


def load_tokenizer_checked(cfg: ConvertConfig) -> Any:
    """The tokenizer of a config, its ``--chat-template`` checked to render a conversation (a usage error if not)."""
    if cfg.chat_template is None:
        return load_tokenizer(cfg.tokenizer, None)
    try:
        tok = load_tokenizer(cfg.tokenizer, cfg.chat_template)
    except MsgtrainError:
        raise
    except (ValueError, AttributeError, TypeError, OSError) as e:  # not JSON, not a mapping, not UTF-8...
        raise ConfigError(
            f"--chat-template {cfg.chat_template} cannot be read as a chat template: {type(e).__name__}: {e}",
            hint="pass a .jinja chat template or a tokenizer_config.json with a chat_template",
            code="bad_chat_template",
        ) from None
    _check_chat_template(tok, cfg.chat_template)
    return tok


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
        _clear_parts(parts_dir)
    if isinstance(parts_dir, Path):
        parts_dir.mkdir(parents=True, exist_ok=True)
        for stray in parts_dir.glob(".tmp-*"):
            shutil.rmtree(stray, ignore_errors=True)
    # On a store, which parts are complete is one listing, not a request per part.
    complete = _completeness(parts_dir)
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
                "real": _real(f),
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
        run_paths.add(_real(f))
        if isinstance(f, str):
            if _object_chunkable(f, chunk_bytes):
                object_plans.append((f, digest))
            else:
                jobs += add_jobs(f, digest, [])
        elif plan_in_workers and _chunkable(f, settings, chunk_bytes):
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
            _check_reject_rate(cfg, running)

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
        complete = _completeness(parts_dir)
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
                data = assemble_on_cluster(cfg, parts_dir, groups, target, rejects, _reporter(cfg, tok, ignored))
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


def _real(f: Path | str) -> str:
    """A location's identity for --keep-missing: a local file's real path, an object's URL."""
    return f if isinstance(f, str) else os.path.realpath(f)


def _clear_parts(parts_dir: Path | str) -> None:
    if isinstance(parts_dir, str):
        Store.of(parts_dir).remove(parts_dir)
    elif parts_dir.exists():
        shutil.rmtree(parts_dir)


def _completeness(parts_dir: Path | str) -> Callable[[str], bool]:
    """Whether a part (by key) is complete: its marker is there."""
    if isinstance(parts_dir, str):
        done = set(iter_parts_complete(Store.of(parts_dir), parts_dir, PART_FILE))
        return done.__contains__
    return lambda key: is_complete(parts_dir / key)


def _refuse_empty_replacement(cfg: ConvertConfig, out: Path, samples: int) -> None:
    """An empty result does not silently replace a dataset that has samples (a wrong template, a wrong folder)."""
    if samples or cfg.allow_empty:
        return
    previous = previous_report(out)
    had = ((previous or {}).get("samples") or {}).get("written") or 0
    if had:
        raise OutputError(
            f"this run produced no samples; refusing to replace the {had} samples in {out}",
            hint="check the inputs and the report's rejects; pass --allow-empty to publish an empty dataset",
            code="empty_result",
        )


def _check_reject_rate(cfg: ConvertConfig, stats: PartStats) -> None:
    limit = cfg.max_reject_rate
    rejected = sum(stats.records_rejected.values())
    if limit is not None and stats.records_read and rejected / stats.records_read > limit:
        raise MsgtrainError(
            f"{rejected} of {stats.records_read} records rejected ({rejected / stats.records_read:.1%}), above"
            f" --max-reject-rate {limit:.1%}; stopping",
            hint="look at the rejects of the state directory's parts; the inputs may be the wrong format",
            code="reject_rate",
        )


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
            data = _write_dataset(
                cfg, tmp, tok, _local_group_reader(parts_dir), groups, ignored, progress, rejects_path
            )
        # The rate on every record of the run, whatever was judged mid-run.
        records = data["records"]
        _check_reject_rate(
            cfg, PartStats(records_read=records["read"], records_rejected=Counter(records["rejected_by_reason"]))
        )
        refuse_nothing_read(cfg, data, rejects_path)
        _refuse_empty_replacement(cfg, out, data["samples"]["written"])
        publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return data


def _local_group_reader(parts_dir: Path) -> Callable[[list[str]], list[tuple[dict[str, Any], pa.Table, str]]]:
    return lambda group: [read_part(parts_dir / key) for key in group]


def write_local_dataset(
    cfg: ConvertConfig,
    tmp: Path,
    parts_dir: Path,
    groups: list[list[str]],
    ignored: list[dict[str, str]],
    rejects: Path,
) -> dict[str, Any]:
    """Write the dataset from local parts into ``tmp`` (not published) and return its report: a Ray task's body
    (the tokenizer, needed to decode cut reasons and for the report, is loaded where it runs)."""
    tok = load_tokenizer(cfg.tokenizer, cfg.chat_template)
    return _write_dataset(cfg, tmp, tok, _local_group_reader(parts_dir), groups, ignored, None, rejects)


def _reporter(
    cfg: ConvertConfig, tok: Any, ignored: list[dict[str, str]]
) -> Callable[[Tally, dict[str, Any]], dict[str, Any]]:
    def report(tally: Tally, outputs: dict[str, Any]) -> dict[str, Any]:
        data = build_report(cfg, tally, _tokenizer_info(tok), ignored, outputs)
        check_accounting(data)
        return data

    return report


def _assemble_on_cluster(
    cfg: ConvertConfig, out: Path, tok: Any, parts_dir: Path, groups: list[list[str]], ignored: list[dict[str, str]]
) -> dict[str, Any]:
    """:func:`_assemble` with one Ray task per shard writing into the staging directory (a path every node sees,
    as the parts directory is); the driver writes the metadata and publishes."""

    def check(tally: Tally) -> None:
        stats = tally.stats
        _check_reject_rate(cfg, PartStats(records_read=stats.records_read, records_rejected=stats.records_rejected))
        _refuse_empty_replacement(cfg, out, tally.samples)

    tmp = staging_dir(out)
    try:
        rejects = Path(cfg.rejects) if cfg.rejects else tmp / "rejects.jsonl"
        data = assemble_on_cluster(cfg, parts_dir, groups, tmp, rejects, _reporter(cfg, tok, ignored), check)
        refuse_nothing_read(cfg, data, rejects)
        publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return data


def assemble_to_store(
    cfg: ConvertConfig, parts_url: str, groups: list[list[str]], ignored: list[dict[str, str]], target: str
) -> dict[str, Any]:
    """Assemble the dataset from parts on a store into the prefix ``target`` (a fresh version; publishing its
    pointer is the caller's job). Runs where it is called: on the driver, or as a Ray task on a worker.

    Parts are copied to local disk one input file at a time and memory-mapped, as local parts are; the dataset is
    written to local disk (the writer needs files it can rename) and uploaded with ``report.json`` last.
    """
    tok = load_tokenizer(cfg.tokenizer, cfg.chat_template)
    store = Store.of(target)
    with tempfile.TemporaryDirectory(prefix="msgtrain-assemble-") as scratch:
        root = Path(scratch)
        dataset, cache = root / "dataset", root / "parts"
        dataset.mkdir()

        def read_group(group: list[str]) -> list[tuple[dict[str, Any], pa.Table, str]]:
            # The previous file's copies are no longer needed (tables already written keep their mapping).
            shutil.rmtree(cache, ignore_errors=True)
            return [read_part(fetch_part(parts_url, key, cache)) for key in group]

        data = _write_dataset(cfg, dataset, tok, read_group, groups, ignored, None, dataset / "rejects.jsonl")
        store.upload_tree(dataset, target, last=("report.json",))
    return data


def _write_dataset(
    cfg: ConvertConfig,
    tmp: Path,
    tok: Any,
    read_group: Callable[[list[str]], list[tuple[dict[str, Any], pa.Table, str]]],
    groups: list[list[str]],
    ignored: list[dict[str, str]],
    progress: ProgressHook | None,
    rejects_path: Path,
) -> dict[str, Any]:
    """Write the dataset, its rejects and ``report.json`` into ``tmp`` (not published); return the report."""
    from msgtrain.export.split import SplitAssigner
    from msgtrain.export.writer import DatasetWriter

    writer = DatasetWriter(
        tmp,
        format=cfg.format,
        target=cfg.target,
        pack_length=cfg.pack_length,
        tree_scope=cfg.tree_scope,
        rows_per_shard=cfg.rows_per_shard,
        row_group_size=cfg.row_group_size,
        splits=SplitAssigner(cfg.split).names,
        decode=tok.decode,
    )
    rejects_path.parent.mkdir(parents=True, exist_ok=True)
    tally = Tally()
    total, done_parts = sum(map(len, groups)), 0

    def on_group(index: int) -> None:
        nonlocal done_parts
        done_parts += len(groups[index])
        if progress:
            progress(
                "assemble", {"index": done_parts, "total": total, "samples": tally.samples, "tokens": tally.tokens}
            )

    with open(rejects_path, "w", encoding="utf-8") as rejects:
        for _, split, table in assembly_tables(cfg, groups, read_group, tally, rejects, on_group):
            writer.write(split, table)
    outputs = writer.close()
    # Relative to OUT in report.json; the caller returns where it was published.
    outputs["drops"] = write_drops(tally, tmp)
    data = build_report(cfg, tally, _tokenizer_info(tok), ignored, outputs)
    check_accounting(data)
    if cfg.rejects is None and rejects_path.stat().st_size == 0:
        rejects_path.unlink()
    # report.json must not change between identical runs: timings live only in the returned report.
    _write_report(tmp, data)
    return data


def _tokenizer_info(tok: Any) -> dict[str, Any]:
    return {"name": tok.name, "fingerprint": tok.fingerprint, "demo": tok.name == DEMO_TOKENIZER}


def _write_report(root: Path, data: dict[str, Any]) -> None:
    (root / "report.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
