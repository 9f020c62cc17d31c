"""The convert pipeline: input files → parts (read + linearize, in workers) → assembly (length policy, splits,
target, writer) → atomic publish of OUT with ``report.json`` and ``rejects.jsonl``.

Invariants:
- Accounting: records read = converted + rejected + skipped (per reason); sampled turns found = trained + dropped
  (per reason). :func:`check_accounting` asserts both before anything is published.
- Atomic output: OUT is assembled in a private sibling directory and published with a rename: readers see the
  previous dataset or the new one, never a partial one. A killed run leaves OUT untouched plus its finished parts
  in the state directory (``.OUT.msgtrain-state``), which ``--resume`` reuses.
- Deterministic: parts are assembled in sorted (source path, content hash, chunk) order whatever the number of
  workers or the order they finished in, so the same inputs and settings give byte-identical output.
- Work is split by input file, and a JSONL log larger than ``chunk_mb`` into chunks of whole conversations
  (:mod:`msgtrain.ingest.chunks`): the same samples and accounting as the whole file, in parallel and in memory
  bounded by the chunk, not the file.
- Resumable / incremental: a part is keyed by file content + linearization settings + tokenizer; with
  ``--resume`` finished parts are reused and the published dataset is the union of every part converted under the
  same settings in this state directory (nightly runs over a growing log folder convert only new files).
- A bad record or file never stops the run (unless ``strict``); it lands in the rejects file.
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
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from msgtrain import __version__
from msgtrain.errors import ConfigError, MsgtrainError, OutputError
from msgtrain.ingest.base import default_debug_log, detect_format, get_reader, unit_directories
from msgtrain.ingest.chunks import Chunk, KeyFunction, is_jsonl, key_function, plan_chunks
from msgtrain.linearize import DEMO_TOKENIZER, load_tokenizer
from msgtrain.run.parts import (
    PART_FILE,
    Job,
    LinearizeSettings,
    PartStats,
    convert_job,
    fetch_part,
    file_digest,
    is_complete,
    merge_chunk_rejects,
    merge_chunk_tables,
    part_key,
    read_part,
    write_part_to,
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

LOG_SUFFIXES = (".jsonl", ".json", ".yaml", ".yml", ".traj", ".ndjson")
MANIFEST = "manifest.json"
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


def discover_locations(inputs: list[str]) -> tuple[list[Path | str], list[str]]:
    """:func:`discover_inputs`, and URLs: an object, or every object under a prefix (sorted; hidden names and
    names without a log suffix skipped likewise). Returns (files and object URLs, ignored)."""
    files: list[Path | str] = []
    ignored: list[str] = []
    for item in inputs:
        if not is_remote(item):
            local, skipped = discover_inputs([item])
            files += local
            ignored += skipped
            continue
        found = Store.of(item).list_files(item)
        if not found:
            raise ConfigError(f"input {item!r} names no object", hint="check the bucket and prefix")
        for url, _ in found:
            rel = url[len(item.rstrip("/")) :].strip("/").split("/")
            if any(part.startswith(".") for part in rel if part):
                continue
            name = url.rpartition("/")[2]
            suffix = "." + name.rpartition(".")[2].lower() if "." in name else ""
            (files if suffix in LOG_SUFFIXES or url == item.rstrip("/") else ignored).append(url)
    return files, ignored


def discover_inputs(inputs: list[str]) -> tuple[list[Path], list[str]]:
    """Expand files and directories (recursive, sorted, hidden files skipped). Returns (inputs, ignored files).

    A directory that a reader takes as one log (``unit_directories``, e.g. an OpenHands V1 conversation folder) is
    one input, handed over whole; the files inside it are not inputs of their own.
    """
    files: list[Path] = []
    ignored: list[str] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            units = unit_directories(p)
            found: list[Path] = list(units)
            for f in sorted(p.rglob("*")):
                if not f.is_file() or any(part.startswith(".") for part in f.relative_to(p).parts):
                    continue
                if any(u in f.parents for u in units):
                    continue
                if f.suffix.lower() in LOG_SUFFIXES:
                    found.append(f)
                else:
                    ignored.append(f)  # type: ignore[arg-type]
            files.extend(sorted(found))
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigError(f"input {item!r} does not exist", hint="pass log files or directories")
    return files, [str(f) for f in ignored]


def state_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.msgtrain-state"


def _sibling(out: Path, tag: str) -> Path:
    return out.parent / f".{out.name}.{tag}-{os.getpid()}"


def publish(tmp: Path, out: Path) -> None:
    """Atomically replace OUT with TMP (rename; the previous dataset is removed only after the swap)."""
    old = None
    if out.exists():
        old = _sibling(out, "old")
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------- workers
def _worker_init() -> None:
    # One process per core: keep the tokenizer's own thread pool to one thread so workers do not oversubscribe.
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


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
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init) as pool:
        pending: dict[Future[Any], Job | tuple[Path, str]] = {}
        # Plans first (their chunks are the biggest work), then largest first (longest-processing-time order): a
        # big file started last would leave the other workers idle at the end. Output order does not depend on
        # it: parts are assembled in sorted order.
        queue: list[Job | tuple[Path, str]] = [*plans, *sorted(jobs, key=lambda job: -job.size)]
        try:
            while queue or pending:
                while queue and len(pending) < workers * 2:
                    item = queue.pop(0)
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
            for fut in pending:
                fut.cancel()
            raise


# ---------------------------------------------------------------------------------------------------- convert
def convert(cfg: Any, progress: ProgressHook | None = None) -> dict[str, Any]:
    """Run a conversion described by a :class:`msgtrain.run.config.ConvertConfig`; return the report."""
    started = time.perf_counter()
    if cfg.output is None:
        raise ConfigError("no output directory", hint="pass -o OUT")
    remote = is_remote(cfg.output)
    out = Path(cfg.output)  # only used for a local OUT
    state: Path | str
    parts_dir: Path | str
    if remote:
        if cfg.rejects is not None:
            raise ConfigError(
                "--rejects cannot be used with an object-store OUT",
                hint="the rejects are published with the dataset (OUT/_versions/<version>/rejects.jsonl)",
            )
        state = join(str(cfg.output), STATE_PREFIX)
        parts_dir = join(state, "parts")
    else:
        if out.exists() and not out.is_dir():
            raise OutputError(f"output {out} exists and is not a directory", hint="choose another -o")
        out.parent.mkdir(parents=True, exist_ok=True)
        state = state_dir(out)
        parts_dir = state / "parts"
    files, ignored = discover_locations([str(p) for p in cfg.inputs])
    tok = load_tokenizer(cfg.tokenizer, cfg.chat_template)
    settings = LinearizeSettings(
        tokenizer=cfg.tokenizer,
        chat_template=cfg.chat_template,
        policies=tuple(cfg.policies),
        render_date=cfg.render_date,
        input_format=cfg.input_format,
        content_special_tokens=cfg.content_special_tokens,
        strict=cfg.strict,
        # On an object store the workers' tracebacks stay on the machine that hit them (a local temp file).
        debug_log=str(state / DEBUG_LOG) if isinstance(state, Path) else str(default_debug_log()),
    )
    skey = settings.key(tok.fingerprint)
    manifest: dict[str, dict[str, Any]] = _load_manifest(state) if cfg.resume else {}
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
    reused = converted = 0
    total_parts = 0
    chunk_bytes = int(cfg.chunk_mb * (1 << 20))

    def add_jobs(f: Path | str, digest: str, chunks: list[Chunk]) -> list[Job]:
        """Register the parts of one file (whole, or its chunks); return those still to convert."""
        nonlocal reused, converted, total_parts
        units: list[Chunk | None] = [*chunks] or [None]
        keys_of_file = set()
        todo = []
        for chunk in units:
            label = f"{chunk.index}/{chunk.count}/{chunk_bytes}" if chunk is not None else ""
            key = part_key(f, digest, skey, label)
            meta: dict[str, Any] = {"source": str(f), "digest": digest, "settings": skey, "version": __version__}
            if chunk is not None:
                meta["chunk"] = [chunk.index, chunk.count]
            keys_of_file.add(key)
            manifest[key] = meta
            total_parts += 1
            if cfg.resume and complete(key):
                reused += 1
            else:
                todo.append(Job(f, key, meta, chunk))
        converted += len(todo)
        # A file that changed since it was converted replaces its old parts; files that disappeared (rotated
        # logs) keep theirs, so the published dataset stays the union of everything converted.
        for old in [k for k, m in manifest.items() if m["source"] == str(f) and k not in keys_of_file]:
            del manifest[old]
        return todo

    # With a local worker pool, huge files are planned by the workers (planning is a pass over the file), while
    # other files convert; otherwise here.
    plan_in_workers = cfg.engine == "local" and cfg.workers > 1
    for f in files:
        if isinstance(f, str):  # an object on a store: hashed by the store, converted whole
            digest = Store.of(f).content_hash(f)
            jobs += add_jobs(f, digest, [])
            continue
        digest = file_digest(f)
        if plan_in_workers and _chunkable(f, settings, chunk_bytes):
            plans.append((f, digest))
        else:
            jobs += add_jobs(f, digest, plan_file(f, settings, chunk_bytes))

    def on_plan(f: Path, digest: str, chunks: list[Chunk]) -> list[Job]:
        todo = add_jobs(f, digest, chunks)
        _save_manifest(state, manifest)
        return todo

    running = PartStats()
    done_files = reused

    def on_done(job: Job, stats: PartStats) -> None:
        nonlocal done_files
        path = job.path
        done_files += 1
        running.add(stats)
        # The manifest is rewritten as parts finish so a killed run can resume from here.
        _save_manifest(state, manifest)
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
        _check_reject_rate(cfg, running)

    _save_manifest(state, manifest)
    with contextlib.ExitStack() as stack:
        if cfg.engine == "ray":
            from msgtrain.run.ray_engine import ray_session, run_parts_ray, run_task_ray

            stack.enter_context(ray_session())
        try:
            if cfg.engine == "ray":
                run_parts_ray(jobs, settings, parts_dir, on_done)
            else:
                _run_parts(jobs, settings, parts_dir, cfg.workers, on_done, plans, chunk_bytes, on_plan)
        except KeyboardInterrupt:
            raise Interrupted(
                f"interrupted after {done_files} of {total_parts} parts; finished parts are kept",
                hint="run the same command with --resume to finish",
            ) from None
        complete = _completeness(parts_dir)
        keys = sorted(
            (k for k, m in manifest.items() if m["settings"] == skey and complete(k)),
            key=lambda k: (manifest[k]["source"], manifest[k]["digest"], manifest[k].get("chunk") or [0, 1]),
        )
        # The parts of one input file (its chunks, in chunk order) are assembled together.
        groups = [
            list(g) for _, g in itertools.groupby(keys, key=lambda k: (manifest[k]["source"], manifest[k]["digest"]))
        ]
        if remote:
            # A new version under OUT/_versions/, made current by one small pointer written last. With Ray the
            # assembly is a task on a worker: the driver never holds a part's or a shard's bytes.
            assert isinstance(parts_dir, str)
            version = new_version()
            target = version_url(str(cfg.output), version)
            args = (cfg, parts_dir, groups, ignored, target)
            data = run_task_ray(assemble_to_store, *args) if cfg.engine == "ray" else assemble_to_store(*args)
            publish_pointer(str(cfg.output), version)
            data["published"] = {"version": version, "path": target}
            rejects_at = join(target, "rejects.jsonl")
        else:
            assert isinstance(parts_dir, Path)
            data = _assemble(cfg, out, tok, parts_dir, groups, ignored, progress)
            rejects_at = str(cfg.rejects) if cfg.rejects else str(out / "rejects.jsonl")
    data["resume"] = {"parts": len(keys), "reused": reused, "converted": converted}
    data["seconds"] = round(time.perf_counter() - started, 3)
    faults = data["records"]["rejected_by_reason"].get("reader_error", 0)
    debug_log = settings.debug_log
    data["outputs"]["debug_log"] = debug_log if faults else None
    data["outputs"]["rejects"] = rejects_at if data["records"]["rejected"] else None
    return data


def _load_manifest(state: Path | str) -> dict[str, dict[str, Any]]:
    if isinstance(state, str):
        store, url = Store.of(state), join(state, MANIFEST)
        return json.loads(store.read_bytes(url)).get("parts", {}) if store.exists(url) else {}
    path = state / MANIFEST
    return json.loads(path.read_text(encoding="utf-8")).get("parts", {}) if path.is_file() else {}


def _save_manifest(state: Path | str, manifest: dict[str, dict[str, Any]]) -> None:
    data = {"format": "msgtrain.state", "version": 1, "parts": manifest}
    if isinstance(state, str):  # one PUT: the previous manifest or this one, never half of one
        Store.of(state).put_bytes(join(state, MANIFEST), (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
        return
    state.mkdir(parents=True, exist_ok=True)
    _write_json_atomic(state / MANIFEST, data)


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


def _key_function(path: Path, settings: LinearizeSettings, chunk_bytes: int) -> KeyFunction | None:
    """The reader's chunk keys for a JSONL log above ``chunk_bytes``; None when the file stays one unit of work.

    A file that cannot be looked at (no reader recognises it, unreadable) is left whole: its worker reports it.
    """
    try:
        if chunk_bytes <= 0 or path.is_dir() or path.stat().st_size <= chunk_bytes or not is_jsonl(path):
            return None
        reader = get_reader(settings.input_format) if settings.input_format else detect_format(path)
        return key_function(reader, path)
    except (MsgtrainError, OSError):
        return None


def _chunkable(path: Path, settings: LinearizeSettings, chunk_bytes: int) -> bool:
    return _key_function(path, settings, chunk_bytes) is not None


def plan_file(path: Path, settings: LinearizeSettings, chunk_bytes: int) -> list[Chunk]:
    """Chunks of a JSONL log above ``chunk_bytes`` whose reader can key its records; [] = one unit of work."""
    keys = _key_function(path, settings, chunk_bytes)
    if keys is None:
        return []
    try:
        return plan_chunks(path, keys, chunk_bytes)
    except (MsgtrainError, OSError):
        return []


def _check_reject_rate(cfg: Any, stats: PartStats) -> None:
    limit = cfg.max_reject_rate
    rejected = sum(stats.records_rejected.values())
    if limit is not None and stats.records_read >= 20 and rejected / stats.records_read > limit:
        raise MsgtrainError(
            f"{rejected} of {stats.records_read} records rejected ({rejected / stats.records_read:.1%}), above"
            f" --max-reject-rate {limit:.1%}; stopping",
            hint="look at the rejects of the state directory's parts; the inputs may be the wrong format",
            code="reject_rate",
        )


def _group_counts(table: pa.Table, column: str) -> dict[str, Counter[str]]:
    if table.num_rows == 0:
        return {}
    agg = table.group_by(column).aggregate(
        [("num_tokens", "sum"), ("num_trained_tokens", "sum"), ("num_turns", "sum"), ("sample_id", "count")]
    )
    out: dict[str, Counter[str]] = {}
    for row in agg.to_pylist():
        out[str(row[column])] = Counter(
            samples=row["sample_id_count"],
            tokens=row["num_tokens_sum"],
            trained_tokens=row["num_trained_tokens_sum"],
            turns=row["num_turns_sum"],
        )
    return out


def _assemble(
    cfg: Any,
    out: Path,
    tok: Any,
    parts_dir: Path,
    groups: list[list[str]],
    ignored: list[str],
    progress: ProgressHook | None,
) -> dict[str, Any]:
    """Write OUT from the parts: ``groups`` are the part keys of each input file (a file's chunks merge back
    into its order), in the deterministic assembly order."""
    tmp = _sibling(out, "tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        rejects_path = Path(cfg.rejects) if cfg.rejects else tmp / "rejects.jsonl"
        data = _write_dataset(
            cfg,
            tmp,
            tok,
            lambda group: [read_part(parts_dir / key) for key in group],
            groups,
            ignored,
            progress,
            rejects_path,
        )
        publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return data


def assemble_to_store(
    cfg: Any, parts_url: str, groups: list[list[str]], ignored: list[str], target: str
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
    cfg: Any,
    tmp: Path,
    tok: Any,
    read_group: Callable[[list[str]], list[tuple[dict[str, Any], pa.Table, str]]],
    groups: list[list[str]],
    ignored: list[str],
    progress: ProgressHook | None,
    rejects_path: Path,
) -> dict[str, Any]:
    """Write the dataset, its rejects and ``report.json`` into ``tmp`` (not published); return the report."""
    from msgtrain.export.length import LengthStats, apply_length_policy
    from msgtrain.export.split import SplitAssigner
    from msgtrain.export.writer import DatasetWriter

    splitter = SplitAssigner(cfg.split)
    writer = DatasetWriter(
        tmp,
        format=cfg.format,
        target=cfg.target,
        pack_length=cfg.pack_length,
        tree_scope=cfg.tree_scope,
        rows_per_shard=cfg.rows_per_shard,
        row_group_size=cfg.row_group_size,
        splits=splitter.names,
        decode=tok.decode,
    )
    rejects_path.parent.mkdir(parents=True, exist_ok=True)
    stats = PartStats()
    length = LengthStats()
    cuts: Counter[str] = Counter()
    by_split: Counter[str] = Counter()
    by_policy: dict[str, Counter[str]] = {}
    by_source: dict[str, Counter[str]] = {}
    tokens = trained_tokens = engine_tokens = samples = 0
    length_dropped_turns: Counter[str] = Counter()
    sources: set[str] = set()
    done_parts, total = 0, sum(map(len, groups))
    with open(rejects_path, "w", encoding="utf-8") as rejects:
        for group in groups:
            read = read_group(group)
            for meta, _, _ in read:
                sources.add(meta["source"])
                stats.add(PartStats.from_json(meta["stats"]))
            done_parts += len(group)
            if len(group) == 1:
                rejects.write(read[0][2])
                tables: Iterable[pa.Table] = [read[0][1]]
            else:  # the chunks of one file, put back in the order converting the whole file gives
                rejects.writelines(merge_chunk_rejects([text for _, _, text in read]))
                tables = merge_chunk_tables([table for _, table, _ in read], cfg.row_group_size)
            for table in tables:
                table, _, dropped_turns = apply_length_policy(
                    table,
                    max_length=cfg.max_length,
                    overflow=cfg.overflow,
                    allow_partial_turns=cfg.allow_partial_turns,
                    stats=length,
                )
                length_dropped_turns.update(dropped_turns)
                if table.num_rows == 0:
                    continue
                cuts.update(c for c in table.column("cut_reason").to_pylist() if c != "start")
                for split, part in splitter.split_table(table).items():
                    if part.num_rows:
                        writer.write(split, part)
                        by_split[split] += part.num_rows
                samples += table.num_rows
                tokens += int(pc.sum(table["num_tokens"]).as_py() or 0)
                trained_tokens += int(pc.sum(table["num_trained_tokens"]).as_py() or 0)
                engine_tokens += int(pc.sum(table["engine_tokens"]).as_py() or 0)
                for bucket, column in ((by_policy, "policy"), (by_source, "source")):
                    for name, c in _group_counts(table, column).items():
                        if column == "source":
                            name = name.rsplit(":", 1)[0].split(" (")[0]
                        bucket.setdefault(name, Counter()).update(c)
            if progress:
                progress("assemble", {"index": done_parts, "total": total, "samples": samples, "tokens": tokens})
    outputs = writer.close()
    turns_dropped = stats.turns_dropped + length_dropped_turns
    data = {
        "msgtrain_version": __version__,
        "files": {"read": len(sources), "ignored": ignored},
        "records": {
            "read": stats.records_read,
            "converted": stats.records_converted,
            "rejected": sum(stats.records_rejected.values()),
            "skipped": sum(stats.records_skipped.values()),
            "rejected_by_reason": dict(sorted(stats.records_rejected.items())),
            "skipped_by_reason": dict(sorted(stats.records_skipped.items())),
        },
        "graphs": stats.graphs,
        "turns": {
            "found": stats.turns_found,
            "trained": stats.turns_trained - sum(length_dropped_turns.values()),
            "dropped": sum(turns_dropped.values()),
            "dropped_by_reason": dict(sorted(turns_dropped.items())),
        },
        "samples": {
            "written": samples,
            "by_split": dict(sorted(by_split.items())),
            "dropped_by_reason": dict(sorted(length.dropped_samples.items())),
            "length_policy": length.to_dict(),
        },
        "cuts_by_reason": dict(sorted(cuts.items())),
        "flags": dict(sorted(stats.flags.items())),
        "tokens": {
            "total": tokens,
            "trained": trained_tokens,
            "engine": engine_tokens,
            "rendered": tokens - engine_tokens,
            "engine_share": round(engine_tokens / tokens, 6) if tokens else 0.0,
        },
        "by_policy": {k: dict(sorted(v.items())) for k, v in sorted(by_policy.items())},
        "by_source": {k: dict(sorted(v.items())) for k, v in sorted(by_source.items())},
        "tokenizer": {"name": tok.name, "fingerprint": tok.fingerprint, "demo": tok.name == DEMO_TOKENIZER},
        "config": {
            "format": cfg.format,
            "target": cfg.target,
            "max_length": cfg.max_length,
            "overflow": cfg.overflow,
            "split": dict(cfg.split),
            "policies": list(cfg.policies),
        },
        "outputs": outputs,
    }
    check_accounting(data)
    if cfg.rejects is None and rejects_path.stat().st_size == 0:
        rejects_path.unlink()
    # report.json must not change between identical runs: timings live only in the returned report.
    (tmp / "report.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return data
