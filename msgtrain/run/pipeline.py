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

import itertools
import json
import os
import shutil
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
from msgtrain.ingest.base import detect_format, get_reader
from msgtrain.ingest.chunks import Chunk, KeyFunction, is_jsonl, key_function, plan_chunks
from msgtrain.linearize import DEMO_TOKENIZER, load_tokenizer
from msgtrain.run.parts import (
    Job,
    LinearizeSettings,
    PartStats,
    convert_file,
    file_digest,
    is_complete,
    merge_chunk_rejects,
    merge_chunk_tables,
    part_key,
    read_part,
    write_part,
)

LOG_SUFFIXES = (".jsonl", ".json", ".yaml", ".yml", ".traj", ".ndjson")
MANIFEST = "manifest.json"

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


def discover_inputs(inputs: list[str]) -> tuple[list[Path], list[str]]:
    """Expand files and directories (recursive, sorted, hidden files skipped). Returns (files, ignored files)."""
    files: list[Path] = []
    ignored: list[str] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            for f in sorted(p.rglob("*")):
                if not f.is_file() or any(part.startswith(".") for part in f.relative_to(p).parts):
                    continue
                (files if f.suffix.lower() in LOG_SUFFIXES else ignored).append(f)  # type: ignore[arg-type]
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


def _convert_to_part(job: Job, settings: LinearizeSettings, parts_dir: str) -> dict[str, Any]:
    samples, stats, rejects = convert_file(job.path, settings, job.chunk)
    write_part(Path(parts_dir), job.key, job.meta, samples, stats, rejects)
    return stats.to_json()


def _run_parts(
    jobs: list[Job],
    settings: LinearizeSettings,
    parts_dir: Path,
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
            on_done(job, PartStats.from_json(_convert_to_part(job, settings, str(parts_dir))))
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
                        pending[pool.submit(_convert_to_part, item, settings, str(parts_dir))] = item
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
    out = Path(cfg.output)
    if out.exists() and not out.is_dir():
        raise OutputError(f"output {out} exists and is not a directory", hint="choose another -o")
    out.parent.mkdir(parents=True, exist_ok=True)
    files, ignored = discover_inputs([str(p) for p in cfg.inputs])
    tok = load_tokenizer(cfg.tokenizer, cfg.chat_template)
    settings = LinearizeSettings(
        tokenizer=cfg.tokenizer,
        chat_template=cfg.chat_template,
        policies=tuple(cfg.policies),
        render_date=cfg.render_date,
        input_format=cfg.input_format,
        content_special_tokens=cfg.content_special_tokens,
        strict=cfg.strict,
    )
    skey = settings.key(tok.fingerprint)
    state = state_dir(out)
    parts_dir = state / "parts"
    manifest_path = state / MANIFEST
    manifest: dict[str, dict[str, Any]] = {}
    if cfg.resume and manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text(encoding="utf-8")).get("parts", {})
    elif parts_dir.exists():
        shutil.rmtree(parts_dir)
    parts_dir.mkdir(parents=True, exist_ok=True)
    for stray in parts_dir.glob(".tmp-*"):
        shutil.rmtree(stray, ignore_errors=True)

    jobs: list[Job] = []
    plans: list[tuple[Path, str]] = []
    reused = converted = 0
    total_parts = 0
    chunk_bytes = int(cfg.chunk_mb * (1 << 20))

    def add_jobs(f: Path, digest: str, chunks: list[Chunk]) -> list[Job]:
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
            if cfg.resume and is_complete(parts_dir / key):
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
        digest = file_digest(f)
        if plan_in_workers and _chunkable(f, settings, chunk_bytes):
            plans.append((f, digest))
        else:
            jobs += add_jobs(f, digest, plan_file(f, settings, chunk_bytes))

    def on_plan(f: Path, digest: str, chunks: list[Chunk]) -> list[Job]:
        todo = add_jobs(f, digest, chunks)
        _write_json_atomic(manifest_path, {"format": "msgtrain.state", "version": 1, "parts": manifest})
        return todo

    running = PartStats()
    done_files = reused

    def on_done(job: Job, stats: PartStats) -> None:
        nonlocal done_files
        path = job.path
        done_files += 1
        running.add(stats)
        # The manifest is rewritten as parts finish so a killed run can resume from here.
        _write_json_atomic(manifest_path, {"format": "msgtrain.state", "version": 1, "parts": manifest})
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

    _write_json_atomic(manifest_path, {"format": "msgtrain.state", "version": 1, "parts": manifest})
    try:
        if cfg.engine == "ray":
            from msgtrain.run.ray_engine import run_parts_ray

            run_parts_ray(jobs, settings, parts_dir, on_done)
        else:
            _run_parts(jobs, settings, parts_dir, cfg.workers, on_done, plans, chunk_bytes, on_plan)
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted after {done_files} of {total_parts} parts; finished parts are kept",
            hint="run the same command with --resume to finish",
        ) from None
    keys = sorted(
        (k for k, m in manifest.items() if m["settings"] == skey and is_complete(parts_dir / k)),
        key=lambda k: (manifest[k]["source"], manifest[k]["digest"], manifest[k].get("chunk") or [0, 1]),
    )
    # The parts of one input file (its chunks, in chunk order) are assembled together.
    groups = [list(g) for _, g in itertools.groupby(keys, key=lambda k: (manifest[k]["source"], manifest[k]["digest"]))]
    data = _assemble(cfg, out, tok, parts_dir, groups, ignored, progress)
    data["resume"] = {"parts": len(keys), "reused": reused, "converted": converted}
    data["seconds"] = round(time.perf_counter() - started, 3)
    data["outputs"]["rejects"] = (
        (str(cfg.rejects) if cfg.rejects else str(out / "rejects.jsonl")) if data["records"]["rejected"] else None
    )
    return data


def _key_function(path: Path, settings: LinearizeSettings, chunk_bytes: int) -> KeyFunction | None:
    """The reader's chunk keys for a JSONL log above ``chunk_bytes``; None when the file stays one unit of work.

    A file that cannot be looked at (no reader recognises it, unreadable) is left whole: its worker reports it.
    """
    try:
        if chunk_bytes <= 0 or path.stat().st_size <= chunk_bytes or not is_jsonl(path):
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
    from msgtrain.export.length import LengthStats, apply_length_policy
    from msgtrain.export.split import SplitAssigner
    from msgtrain.export.writer import DatasetWriter

    tmp = _sibling(out, "tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        splitter = SplitAssigner(cfg.split)
        writer = DatasetWriter(
            tmp,
            format=cfg.format,
            target=cfg.target,
            pack_length=cfg.pack_length,
            rows_per_shard=cfg.rows_per_shard,
            row_group_size=cfg.row_group_size,
            splits=splitter.names,
            decode=tok.decode,
        )
        rejects_path = Path(cfg.rejects) if cfg.rejects else tmp / "rejects.jsonl"
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
                read = [read_part(parts_dir / key) for key in group]
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
        publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return data
