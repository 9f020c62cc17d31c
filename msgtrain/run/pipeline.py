"""The convert pipeline: files → readers → graphs → linearizer → length policy / split → writer → OUT.

Invariants:
- Accounting: records read = converted + rejected + skipped (per reason); sampled turns found = trained + dropped
  (per reason). :func:`check_accounting` asserts both on every report; the pipeline refuses to publish a report
  that breaks them.
- Output is atomic: everything is written into a private sibling directory and published with a rename; a reader
  of OUT sees the previous dataset or the new one, never a partial one.
- Deterministic: files are processed in sorted order, graphs in file order, samples in linearizer order, so the
  same inputs and settings give the same rows in the same order.
- A bad record or file never stops the run (unless ``strict``): it is written to the rejects file with its source,
  reason code, message and a bounded excerpt, and the rest is still converted.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgtrain.errors import ConfigError, MsgtrainError, OutputError
from msgtrain.export.schema import samples_to_table
from msgtrain.ingest.base import ReadGraph, ReadReject, ReadSkip, SourceRef, detect_format, get_reader
from msgtrain.linearize import DEMO_TOKENIZER, LinearizeOptions, linearize_graph, load_tokenizer
from msgtrain.linearize.render import Renderer

LOG_SUFFIXES = (".jsonl", ".json", ".yaml", ".yml", ".traj", ".ndjson")


@dataclass
class RunReport:
    """What a run did, in numbers. Serialised as OUT/report.json."""

    files_read: int = 0
    files_ignored: list[str] = field(default_factory=list)
    records_read: int = 0
    records_converted: int = 0
    records_rejected: Counter[str] = field(default_factory=Counter)
    records_skipped: Counter[str] = field(default_factory=Counter)
    graphs: int = 0
    turns_found: int = 0
    turns_trained: int = 0
    turns_dropped: Counter[str] = field(default_factory=Counter)
    samples_written: int = 0
    samples_dropped: Counter[str] = field(default_factory=Counter)
    samples_by_split: Counter[str] = field(default_factory=Counter)
    cuts: Counter[str] = field(default_factory=Counter)
    flags: Counter[str] = field(default_factory=Counter)
    tokens: int = 0
    trained_tokens: int = 0
    engine_tokens: int = 0
    by_policy: dict[str, Counter[str]] = field(default_factory=dict)
    by_source: dict[str, Counter[str]] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    tokenizer: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "files": {"read": self.files_read, "ignored": self.files_ignored},
            "records": {
                "read": self.records_read,
                "converted": self.records_converted,
                "rejected": sum(self.records_rejected.values()),
                "skipped": sum(self.records_skipped.values()),
                "rejected_by_reason": dict(sorted(self.records_rejected.items())),
                "skipped_by_reason": dict(sorted(self.records_skipped.items())),
            },
            "graphs": self.graphs,
            "turns": {
                "found": self.turns_found,
                "trained": self.turns_trained,
                "dropped": sum(self.turns_dropped.values()),
                "dropped_by_reason": dict(sorted(self.turns_dropped.items())),
            },
            "samples": {
                "written": self.samples_written,
                "by_split": dict(sorted(self.samples_by_split.items())),
                "dropped_by_reason": dict(sorted(self.samples_dropped.items())),
            },
            "cuts_by_reason": dict(sorted(self.cuts.items())),
            "flags": dict(sorted(self.flags.items())),
            "tokens": {
                "total": self.tokens,
                "trained": self.trained_tokens,
                "engine": self.engine_tokens,
                "rendered": self.tokens - self.engine_tokens,
                "engine_share": round(self.engine_tokens / self.tokens, 6) if self.tokens else 0.0,
            },
            "by_policy": {k: dict(sorted(v.items())) for k, v in sorted(self.by_policy.items())},
            "by_source": {k: dict(sorted(v.items())) for k, v in sorted(self.by_source.items())},
            "tokenizer": self.tokenizer,
            "outputs": self.outputs,
        }


def check_accounting(report: dict[str, Any]) -> None:
    """The two identities every run must satisfy; raises AssertionError naming the broken one."""
    r = report["records"]
    assert r["read"] == r["converted"] + r["rejected"] + r["skipped"], f"records do not add up: {r}"
    assert (
        sum(r["rejected_by_reason"].values()) == r["rejected"] and sum(r["skipped_by_reason"].values()) == r["skipped"]
    )
    t = report["turns"]
    assert t["found"] == t["trained"] + t["dropped"], f"turns do not add up: {t}"
    assert sum(t["dropped_by_reason"].values()) == t["dropped"]


def discover_inputs(inputs: list[str]) -> tuple[list[Path], list[str]]:
    """Expand files and directories (recursive, sorted, hidden files skipped). Returns (files, ignored)."""
    files: list[Path] = []
    ignored: list[str] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            for f in sorted(p.rglob("*")):
                if not f.is_file() or any(part.startswith(".") for part in f.relative_to(p).parts):
                    continue
                if f.suffix.lower() in LOG_SUFFIXES:
                    files.append(f)
                else:
                    ignored.append(str(f))
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigError(f"input {item!r} does not exist", hint="pass log files or directories")
    return files, ignored


class RejectSink:
    """Appends rejects as JSONL (source, record, graph, reason code, message, hint, bounded excerpt)."""

    def __init__(self, path: Path):
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.count = 0

    def add(self, source: SourceRef, error: MsgtrainError, excerpt: str = "", graph: str | None = None) -> None:
        rec = {
            "file": source.file,
            "record": source.record,
            "graph": graph,
            "reason": error.code,
            "message": error.message,
            "where": error.where,
            "hint": error.hint,
            "excerpt": excerpt,
        }
        self._f.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")
        self.count += 1

    def close(self) -> None:
        self._f.close()


def _tmp_sibling(out: Path, tag: str) -> Path:
    return out.parent / f".{out.name}.{tag}-{os.getpid()}"


def publish(tmp: Path, out: Path) -> None:
    """Atomically replace OUT with TMP (rename; the previous dataset is removed only after the swap)."""
    old = None
    if out.exists():
        old = _tmp_sibling(out, "old")
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


ProgressHook = Callable[[str, dict[str, Any]], None]


def convert(cfg: Any, progress: ProgressHook | None = None) -> dict[str, Any]:
    """Run a conversion described by ``cfg`` (a :class:`msgtrain.run.config.ConvertConfig`); return the report."""
    from msgtrain.export.split import SplitAssigner
    from msgtrain.export.writer import DatasetWriter

    started = time.perf_counter()
    out = Path(cfg.output)
    if out.exists() and not out.is_dir():
        raise OutputError(f"output {out} exists and is not a directory", hint="choose another -o")
    out.parent.mkdir(parents=True, exist_ok=True)
    files, ignored = discover_inputs(list(cfg.inputs))
    tok = load_tokenizer(cfg.tokenizer, cfg.chat_template)
    renderer = Renderer(tok, cfg.render_date)
    opts = LinearizeOptions(policies=frozenset(cfg.policies), render_date=cfg.render_date)
    report = RunReport(files_ignored=ignored)
    report.tokenizer = {
        "name": tok.name,
        "fingerprint": tok.fingerprint,
        "demo": tok.name == DEMO_TOKENIZER,
        "boundary_reuse": tok.boundary_reuse,
    }
    tmp = _tmp_sibling(out, "tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    rejects = RejectSink(Path(cfg.rejects) if cfg.rejects else tmp / "rejects.jsonl")
    splitter = SplitAssigner(cfg.split)
    writer = DatasetWriter(tmp, format=cfg.format, target=cfg.target, decode=tok.decode, **_writer_kwargs(cfg))
    try:
        for fi, path in enumerate(files):
            if progress:
                progress("file", {"index": fi, "total": len(files), "path": str(path)})
            _convert_file(path, cfg, tok, renderer, opts, report, rejects, splitter, writer, progress)
            report.files_read += 1
            _check_reject_rate(cfg, report)
        report.outputs = writer.close()
    except BaseException:
        rejects.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    rejects.close()
    report.seconds = round(time.perf_counter() - started, 3)
    data = report.to_json()
    data["outputs"]["rejects"] = str(rejects.path) if rejects.count else None
    check_accounting(data)
    (tmp / "report.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    publish(tmp, out)
    if data["outputs"].get("rejects") and not cfg.rejects:
        data["outputs"]["rejects"] = str(out / "rejects.jsonl")
    return data


def _writer_kwargs(cfg: Any) -> dict[str, Any]:
    kw: dict[str, Any] = {}
    for name in ("pack_length", "rows_per_shard", "row_group_size"):
        if hasattr(cfg, name) and getattr(cfg, name) is not None:
            kw[name] = getattr(cfg, name)
    return kw


def _check_reject_rate(cfg: Any, report: RunReport) -> None:
    limit = getattr(cfg, "max_reject_rate", None)
    rejected = sum(report.records_rejected.values())
    if limit is not None and report.records_read >= 20 and rejected / report.records_read > limit:
        raise MsgtrainError(
            f"{rejected} of {report.records_read} records rejected ({rejected / report.records_read:.1%}), above"
            f" --max-reject-rate {limit:.1%}; stopping",
            hint="look at the rejects file; the inputs may be the wrong format",
            code="reject_rate",
        )


def _read_events(path: Path, cfg: Any) -> Iterator[Any]:
    reader = get_reader(cfg.input_format) if cfg.input_format else detect_format(path)
    yield from reader.read(path)


def _convert_file(
    path: Path,
    cfg: Any,
    tok: Any,
    renderer: Renderer,
    opts: LinearizeOptions,
    report: RunReport,
    rejects: RejectSink,
    splitter: Any,
    writer: Any,
    progress: ProgressHook | None,
) -> None:
    from msgtrain.export.length import apply_length_policy

    try:
        events = list(_read_events(path, cfg)) if cfg.strict else _read_events(path, cfg)
        for ev in events:
            if isinstance(ev, ReadReject):
                report.records_read += 1
                report.records_rejected[ev.error.code] += 1
                rejects.add(ev.source, ev.error, ev.excerpt)
                if cfg.strict:
                    raise ev.error
            elif isinstance(ev, ReadSkip):
                report.records_read += ev.count
                report.records_skipped[ev.reason] += ev.count
            elif isinstance(ev, ReadGraph):
                report.records_read += ev.records
                report.records_converted += ev.records
                report.graphs += 1
                _linearize_and_write(ev, tok, renderer, opts, report, splitter, writer, cfg, apply_length_policy)
                if progress:
                    progress("graph", {"samples": report.samples_written, "tokens": report.tokens})
    except MsgtrainError as e:
        if cfg.strict:
            raise
        # The file as a whole could not be read (unknown format, unreadable): one reject for the file.
        report.records_read += 1
        report.records_rejected[e.code] += 1
        rejects.add(SourceRef(str(path), "file"), e)
    except OSError as e:
        if cfg.strict:
            raise
        report.records_read += 1
        report.records_rejected["unreadable_file"] += 1
        rejects.add(SourceRef(str(path), "file"), MsgtrainError(str(e), code="unreadable_file"))


def _linearize_and_write(
    ev: ReadGraph,
    tok: Any,
    renderer: Renderer,
    opts: LinearizeOptions,
    report: RunReport,
    splitter: Any,
    writer: Any,
    cfg: Any,
    apply_length_policy: Any,
) -> None:
    res = linearize_graph(ev.graph, tok, options=opts, source=str(ev.source), extras=ev.extras, renderer=renderer)
    report.turns_found += len(res.turns)
    report.turns_dropped.update(res.drops)
    report.flags.update(res.flags)
    if not res.samples:
        return
    table = samples_to_table(res.samples)
    table, sample_drops, turn_drops = apply_length_policy(
        table, max_length=cfg.max_length, overflow=cfg.overflow, allow_partial_turns=cfg.allow_partial_turns
    )
    report.samples_dropped.update(sample_drops)
    report.turns_dropped.update(turn_drops)
    trained_turns = sum(len(r) for r in table.column("turn_ids").to_pylist())
    report.turns_trained += trained_turns
    report.cuts.update(c for c in table.column("cut_reason").to_pylist() if c != "start")
    if table.num_rows == 0:
        return
    split = splitter.split_of(ev.graph.graph_id)
    writer.write(split, table)
    n_tokens = int(sum(table.column("num_tokens").to_pylist()))
    n_trained = int(sum(table.column("num_trained_tokens").to_pylist()))
    report.samples_written += table.num_rows
    report.samples_by_split[split] += table.num_rows
    report.tokens += n_tokens
    report.trained_tokens += n_trained
    report.engine_tokens += int(sum(table.column("engine_tokens").to_pylist()))
    for key, bucket in ((ev.graph.policy, report.by_policy), (ev.source.file, report.by_source)):
        c = bucket.setdefault(key, Counter())
        c["samples"] += table.num_rows
        c["tokens"] += n_tokens
        c["trained_tokens"] += n_trained
        c["turns"] += trained_turns


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
