"""One input file (or one chunk of a huge file) → one *part*: its canonical samples, its accounting, its rejects.
The unit of work and of resume.

Invariants:
- A part depends only on the file's bytes (and which chunk of it: :mod:`msgtrain.ingest.core.chunks`), the
  linearization settings (policies, render date, forced input format, msgtrain version) and the tokenizer's
  fingerprint (vocabulary, template, special tokens, stop ids, every file of its folder:
  :attr:`~msgtrain.linearize.tokenizer.TokenizerBundle.fingerprint`); its key is a hash of exactly those, so a rerun
  with the same key can reuse it and any change recomputes it. Of the path, a part depends on the file's name
  (readers name graphs after it), which is in the key, and on its folder only through its ``source`` strings: a
  part reused for content moved to another folder is rewritten to name where it is now
  (:meth:`~msgtrain.run.part_store.PartsStore.reuse`), exactly as converting it there would have. Export settings
  (target, length policy, splits) are applied later, at assembly, and never invalidate parts.
- Where parts are kept, how they are written (complete or absent) and when their checksums are checked is
  :mod:`msgtrain.run.part_store`'s business: a part whose files do not match them is never assembled.
- Order: a part's rejects are in file order (:func:`reject_order`); its samples are in the reader's order, which
  for every reader that can be cut into chunks is the order of each conversation's first line. So a file's chunks
  merge back into exactly the whole file's part (:func:`merge_chunk_tables`, :func:`merge_chunk_rejects`).
- Accounting inside a part already satisfies: records read = converted + rejected + skipped and
  turns found = trained + dropped (trained counted before the length policy).
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from msgtrain import __version__
from msgtrain.errors import MsgtrainError, printable, reject_hint
from msgtrain.export.schema import Sample
from msgtrain.ingest.boundary import open_reader, read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject, ReadSkip, SourceRef, record_limit
from msgtrain.ingest.core.chunks import Chunk, reading_chunk
from msgtrain.ingest.core.files import SharedIndex
from msgtrain.ingest.faults import log_traceback
from msgtrain.ingest.registry import forced_reader
from msgtrain.ingest.supplied import context_text, rules_from_text, with_supplied_context
from msgtrain.limits import DEFAULT_MAX_RECORD_MB
from msgtrain.linearize import LinearizeOptions, linearize_graph, load_tokenizer
from msgtrain.linearize.budget import (
    DEFAULT_MAX_GRAPH_SAMPLES,
    DEFAULT_MAX_GRAPH_STATE_BYTES,
    DEFAULT_MAX_GRAPH_TOKENS,
)
from msgtrain.linearize.plan import LinearizeResult
from msgtrain.linearize.render import Renderer, alarm_handler
from msgtrain.run.config import ConvertConfig
from msgtrain.run.storage import input_size, readable_input

MAX_GRAPH_NODES = 50_000  # a conversation larger than this is rejected as absurd (rendering is per turn)


@dataclass(frozen=True)
class LinearizeSettings:
    """Everything that changes what a file linearizes to."""

    tokenizer: str | None
    chat_template: str | None
    policies: tuple[str, ...]
    render_date: str | None
    input_format: str | None
    strict: bool = False
    content_special_tokens: str = "plain"
    train_negative: bool = False
    engine_ids_mismatch: str = "drop"
    content_format: str = "auto"
    train_dropped: bool = False
    mapping: str | None = None  # a --map mapping, as canonical JSON (msgtrain.ingest.structure.mapping.mapping_text)
    context: str | None = None  # supplied context, files' content included (msgtrain.ingest.supplied.context_text)
    # Per-graph caps (msgtrain.linearize.budget); None = no cap.
    max_graph_tokens: int | None = DEFAULT_MAX_GRAPH_TOKENS
    max_graph_samples: int | None = DEFAULT_MAX_GRAPH_SAMPLES
    max_graph_state_bytes: int | None = DEFAULT_MAX_GRAPH_STATE_BYTES
    max_record_bytes: int = DEFAULT_MAX_RECORD_MB << 20  # --max-record-mb: records and decoded bodies
    # Where reader_error tracebacks are appended (the state directory's debug log); not part of the key.
    debug_log: str | None = None
    # Where the run's workers share indexes of files that answer each other (msgtrain.ingest.core.files.SharedIndex);
    # not part of the key.
    shared: str | None = None

    def key(self, tokenizer_fingerprint: str) -> str:
        data: dict[str, Any] = {
            "tokenizer": tokenizer_fingerprint,
            "policies": sorted(self.policies),
            "render_date": self.render_date,
            "content_special_tokens": self.content_special_tokens,
            "train_negative": self.train_negative,
            "engine_ids_mismatch": self.engine_ids_mismatch,
            "content_format": self.content_format,
            "train_dropped": self.train_dropped,
            "mapping": self.mapping,
            "context": self.context,
            "caps": [self.max_graph_tokens, self.max_graph_samples, self.max_graph_state_bytes],
            "input_format": self.input_format,
            "version": __version__,
        }
        if self.max_record_bytes != DEFAULT_MAX_RECORD_MB << 20:  # the default keeps the keys parts had before it
            data["max_record_bytes"] = self.max_record_bytes
        return hashlib.blake2b(json.dumps(data, sort_keys=True).encode(), digest_size=12).hexdigest()


def _mapping_text(mapping: Any) -> str | None:
    """A ``--map`` mapping as its canonical JSON (the mapping module, and YAML with it, only when there is one)."""
    if mapping is None:
        return None
    from msgtrain.ingest.structure.mapping import mapping_text

    return mapping_text(mapping)


def settings_from_config(
    cfg: ConvertConfig, debug_log: str | None = None, shared: str | None = None
) -> LinearizeSettings:
    """The linearize settings of a :class:`msgtrain.run.config.ConvertConfig` (``convert`` and ``validate`` alike)."""
    return LinearizeSettings(
        tokenizer=cfg.tokenizer,
        chat_template=cfg.chat_template,
        policies=tuple(cfg.policies),
        render_date=cfg.render_date,
        input_format=cfg.input_format,
        content_special_tokens=cfg.content_special_tokens,
        train_negative=cfg.train_negative,
        engine_ids_mismatch=cfg.engine_ids_mismatch,
        content_format=cfg.content_format,
        train_dropped=cfg.train_dropped,
        mapping=_mapping_text(cfg.mapping),
        context=context_text(cfg.context, cfg.system_prompt, cfg.tools),
        max_graph_tokens=cfg.max_graph_tokens or None,
        max_graph_samples=cfg.max_graph_samples or None,
        max_graph_state_bytes=int(cfg.max_graph_state_mb * 2**20) or None,
        max_record_bytes=int(cfg.max_record_mb * 2**20),
        strict=cfg.strict,
        debug_log=debug_log,
        shared=shared,
    )


def linearize_options(settings: LinearizeSettings) -> LinearizeOptions:
    """The options every graph is linearized with under ``settings``."""
    return LinearizeOptions(
        policies=frozenset(settings.policies),
        render_date=settings.render_date,
        content_special_tokens=settings.content_special_tokens,
        train_negative=settings.train_negative,
        engine_ids_mismatch=settings.engine_ids_mismatch,  # type: ignore[arg-type]
        content_format=settings.content_format,
        train_dropped=settings.train_dropped,
        max_graph_tokens=settings.max_graph_tokens,
        max_graph_samples=settings.max_graph_samples,
        max_graph_state_bytes=settings.max_graph_state_bytes,
    )


def part_key(digest: str, settings_key: str, chunk: str = "", name: str = "") -> str:
    """The key of a part: the file's content digest, the settings, ``chunk`` (the chunk and the plan it came from:
    index, count, target size; empty for a whole file) and the file's own ``name`` (readers name graphs, and so
    sample and group ids, after it: ``conversations.jsonl#3``). Not its folder: the same bytes under the same name
    are one part wherever they are and however the path is spelled (relative, absolute, through a symlink, moved to
    another folder), and only their ``source`` is rewritten on reuse
    (:meth:`~msgtrain.run.part_store.PartsStore.reuse`)."""
    text = f"{digest}\0{settings_key}" + (f"\0{chunk}" if chunk or name else "") + (f"\0{name}" if name else "")
    # A file name the OS gave as undecodable bytes (surrogate escapes) is still a key: hash it losslessly.
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@dataclass(frozen=True)
class Job:
    """One unit of work: a file (a local path, or an object's URL), or one chunk of it, and the part it becomes."""

    path: Path | str
    key: str
    meta: dict[str, Any]
    chunk: Chunk | None = None
    # A chunk of an object: what its worker needs to fetch only the chunk's byte ranges (msgtrain.run.object_chunks)
    view: Any = None
    # A local input's stamp when it was hashed, its partners' included (msgtrain.run.units.stable_digest): the bytes
    # read are those of the key only if the input has the same stamp before and after it is read.
    stamp: Any = None
    # The content digest of the files a reader joins the input with (msgtrain.run.units.InputDigest), None if none
    partners: str | None = None

    @property
    def size(self) -> int:
        """Bytes to convert: the executors hand out the largest jobs first."""
        return self.chunk.bytes if self.chunk is not None else input_size(self.path)


@dataclass
class PartStats:
    """Counters of one part (and, summed, of a run)."""

    records_read: int = 0
    records_converted: int = 0
    records_rejected: Counter[str] = field(default_factory=Counter)
    records_skipped: Counter[str] = field(default_factory=Counter)
    graphs: int = 0
    turns_found: int = 0
    turns_trained: int = 0
    turns_dropped: Counter[str] = field(default_factory=Counter)
    flags: Counter[str] = field(default_factory=Counter)
    turns_lost: int = 0  # estimated assistant turns in rejected records (ReadReject.turns, rejected graphs' turns)
    history_copies: int = 0  # replies held as the history a group of rollouts started from (LinearizeResult)

    def add(self, other: PartStats) -> None:
        for name, value in other.__dict__.items():
            mine = getattr(self, name)
            if isinstance(value, Counter):
                mine.update(value)
            else:
                setattr(self, name, mine + value)

    def to_json(self) -> dict[str, Any]:
        return {k: (dict(sorted(v.items())) if isinstance(v, Counter) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartStats:
        s = cls()
        for k, v in data.items():
            setattr(s, k, Counter(v) if isinstance(getattr(s, k), Counter) else v)
        return s


def accounting_report(
    read: int,
    converted: int,
    rejected: Mapping[str, int],
    skipped: Mapping[str, int],
    graphs: int,
    turns_found: int,
    turns_trained: int,
    turns_dropped: Mapping[str, int],
    turns_lost: int = 0,
    history_copies: int = 0,
) -> dict[str, Any]:
    """The ``records``, ``graphs`` and ``turns`` blocks of ``report.json``: one builder, so that what ``validate``
    predicts has exactly the shape of what ``convert`` reports."""
    return {
        "records": {
            "read": read,
            "converted": converted,
            "rejected": sum(rejected.values()),
            "skipped": sum(skipped.values()),
            "rejected_by_reason": dict(sorted(rejected.items())),
            "skipped_by_reason": dict(sorted(skipped.items())),
        },
        "graphs": graphs,
        "turns": {
            "found": turns_found,
            "trained": turns_trained,
            "dropped": sum(turns_dropped.values()),
            "dropped_by_reason": dict(sorted(turns_dropped.items())),
            # Not part of ``found``: assistant turns in records that were rejected whole (an estimate from their
            # assistant-like messages), so the books show turns lost and not only records.
            "in_rejected_records": turns_lost,
            # Not part of ``found`` either: replies a rollout holds as the history its group was started from, each
            # a copy of a reply sampled before the group (a turn there), context here.
            "history_copies": history_copies,
        },
    }


def _reject_line(source: SourceRef, error: MsgtrainError, excerpt: str = "", graph: str | None = None) -> str:
    rec = {
        "file": source.file,
        "record": source.record,
        "graph": graph,
        "reason": error.code,
        "message": error.message,
        "where": error.where,
        "hint": reject_hint(error),
        "excerpt": excerpt,
    }
    # A file name may hold surrogate-escaped bytes: the line must stay writable as UTF-8 whatever it quotes.
    return printable(json.dumps(rec, ensure_ascii=False, sort_keys=True)) + "\n"


# Set by the command line and in worker processes (library callers keep their heap as it is): see settle_heap.
SETTLE_HEAP = False
_settled = False


def settle_heap() -> None:
    """Once per process, when its tokenizer is loaded: move every object made so far (imported modules, the
    tokenizer's facts, compiled templates) out of the garbage collector's generations (``gc.freeze``).

    A full collection is due when the objects that survived collections since the last one reach a quarter of
    those that survived it, and it walks them all; the start-up objects are hundreds of thousands that never become
    garbage. Frozen, they are skipped by every collection (reference counting still frees them): a Qwen3
    conversion of 3,700 conversations spent 0.36 s in the collector, 0.17 s with them frozen. How many start-up
    objects there are also depends on how the tokenizer was loaded (a snapshot makes far fewer than
    transformers), which frozen they no longer decide. Cycles among them that become garbage later are not
    collected: nothing made at start-up is dropped during a run."""
    global _settled
    if SETTLE_HEAP and not _settled:
        import gc

        _settled = True
        gc.collect()
        gc.freeze()


def _record_limit(settings: LinearizeSettings) -> int | None:
    """``--max-record-mb`` where it is not the default (the readers' own limits, which tests may lower, stand)."""
    return None if settings.max_record_bytes == DEFAULT_MAX_RECORD_MB << 20 else settings.max_record_bytes


def convert_file(
    path: Path, settings: LinearizeSettings, chunk: Chunk | None = None, source: str | None = None
) -> tuple[list[Sample], PartStats, list[str]]:
    """Read and linearize one file, or only the lines of ``chunk``. Never raises for bad content (unless
    ``strict``): it rejects and goes on. ``source`` is the file as the user named it (supplied-context globs match
    it), when ``path`` is a copy or an absolute form."""
    tok = load_tokenizer(settings.tokenizer, settings.chat_template)
    settle_heap()
    renderer = Renderer(tok, settings.render_date, settings.content_format)
    opts = linearize_options(settings)
    stats = PartStats()
    samples: list[Sample] = []
    rejects: list[str] = []
    try:
        forced = forced_reader(settings.input_format, settings.mapping)
        opened = open_reader(path, forced)
        events = iter([opened]) if isinstance(opened, ReadReject) else read_events(opened, path, forced is not None)
        if settings.context and not isinstance(opened, ReadReject):
            events = with_supplied_context(events, rules_from_text(settings.context), opened.name, source or str(path))
        # One render watchdog for the whole file (its conversations' renderings only note their start).
        with reading_chunk(path, chunk), alarm_handler(), record_limit(_record_limit(settings)):
            for ev in events:
                if isinstance(ev, ReadReject):
                    stats.records_read += ev.count
                    if ev.count:  # a gap inside a converted record (count 0) is a line of its own, no record
                        stats.records_rejected[ev.error.code] += ev.count
                    stats.turns_lost += ev.turns
                    rejects.append(_reject_line(ev.source, ev.error, ev.excerpt))
                    if ev.detail:
                        log_traceback(settings.debug_log, ev)
                    if settings.strict:
                        raise ev.error
                elif isinstance(ev, ReadSkip):
                    stats.records_read += ev.count
                    stats.records_skipped[ev.reason] += ev.count
                elif isinstance(ev, ReadGraph):
                    stats.records_read += ev.records
                    res, error = linearize_read_graph(ev, tok, opts, renderer)
                    if res is None:
                        assert error is not None
                        if settings.strict:
                            raise error
                        stats.records_rejected[error.code] += ev.records
                        stats.turns_lost += sum(n.is_assistant for n in ev.graph.sampled_nodes())
                        rejects.append(_reject_line(ev.source, error, graph=ev.graph.graph_id))
                        continue
                    stats.records_converted += ev.records
                    stats.graphs += 1
                    stats.turns_found += len(res.turns)
                    stats.history_copies += res.history_copies
                    stats.turns_dropped.update(res.drops)
                    stats.turns_trained += sum(len(s.turn_ids) for s in res.samples)
                    stats.flags.update(res.flags)
                    samples.extend(res.samples)
    except MsgtrainError as e:
        if settings.strict:
            raise
        # Not a reader's fault (the boundary turns those into rejects): the forced format is unknown, or the
        # tokenizer failed. One reject stands for the file.
        stats.records_read += 1
        stats.records_rejected[e.code] += 1
        rejects.append(_reject_line(SourceRef(str(path), "file"), e))
    except (OSError, RecursionError, MemoryError) as e:
        if settings.strict:
            raise
        stats.records_read += 1
        stats.records_rejected["unreadable_file"] += 1
        rejects.append(
            _reject_line(
                SourceRef(str(path), "file"), MsgtrainError(f"{type(e).__name__}: {e}", code="unreadable_file")
            )
        )
    rejects.sort(key=reject_order)
    return samples, stats, rejects


CHANGED_WHILE_READING = "changed_while_reading"


def _changed(shown: str, settings: LinearizeSettings) -> tuple[list[Sample], PartStats, list[str]]:
    """The part of an input whose bytes changed between hashing and the end of its reading: one reject, no rows (a
    mixture of old and new bytes is never published); such a part is never reused (:func:`reusable`)."""
    error = MsgtrainError(
        "the file changed while msgtrain read it (written in place during the run); none of its rows are kept",
        code=CHANGED_WHILE_READING,
        hint="run again once the file is no longer being written (--resume converts it then)",
    )
    if settings.strict:
        raise error
    stats = PartStats(records_read=1, records_rejected=Counter({CHANGED_WHILE_READING: 1}))
    return [], stats, [_reject_line(SourceRef(shown, "file"), error)]


def _reading_planned_bytes(job: Job) -> Any:
    """The stamp the input must keep while it is read for its bytes to be those its key was made from, or None
    when they no longer are. An input touched without a change of content (same digest, hashed while still) is
    read as planned."""
    from msgtrain.run.units import InputChangedError, reading_stamp, stable_digest

    if reading_stamp(job.path, job.stamp) == job.stamp:
        return job.stamp
    try:
        digest, stamp = stable_digest(job.path)
    except (InputChangedError, OSError):
        return None
    return stamp if digest.content == job.meta.get("digest") and stamp is not None else None


def _stamp_now(path: Path | str, planned: Any) -> Any:
    from msgtrain.run.units import reading_stamp

    return reading_stamp(path, planned)


def reusable(recorded: Mapping[str, Any]) -> bool:
    """Whether a complete part (its ``part.json``) may be reused by ``--resume``: not one whose input changed while
    it was read (its key names bytes it did not read)."""
    stats = recorded.get("stats")
    return not (isinstance(stats, Mapping) and CHANGED_WHILE_READING in (stats.get("records_rejected") or {}))


def convert_job(job: Job, settings: LinearizeSettings) -> tuple[list[Sample], PartStats, list[str]]:
    """:func:`convert_file` for a job, wherever its input is: the readers open a local path
    (:func:`~msgtrain.run.storage.readable_input`: an object is first copied to this worker's disk, a chunk of a
    huge object by its byte ranges), and the samples' sources and the rejects name the input as the user gave it
    (``meta["source"]``: the object's URL, not the copy; a relative path, not the absolute one a Ray task opens)."""
    shown = str(job.meta.get("source", job.path))
    stamp = _reading_planned_bytes(job) if job.stamp is not None else None
    if job.stamp is not None and stamp is None:
        return _changed(shown, settings)
    copy_chunk = partial(_copy_chunk, job.chunk, job.view) if job.chunk is not None and job.view is not None else None
    with contextlib.ExitStack() as stack:
        try:
            shared = SharedIndex.of_run(settings.shared)
            local = stack.enter_context(readable_input(job.path, copy_chunk, shared, job.partners))
        except OSError as e:  # the copy failed (a local path is not read here: convert_file reports it)
            if settings.strict:
                raise
            stats = PartStats(records_read=1, records_rejected=Counter(unreadable_file=1))
            error = MsgtrainError(f"{type(e).__name__}: {e}", code="unreadable_file")
            return [], stats, [_reject_line(SourceRef(shown, "file"), error)]
        samples, stats, rejects = convert_file(local, settings, job.chunk, shown)
    if stamp is not None and _stamp_now(job.path, stamp) != stamp:
        return _changed(shown, settings)
    return _relabelled(samples, stats, rejects, str(local), shown)


def _copy_chunk(chunk: Chunk, view: Any, url: str, dest: Path) -> None:
    """Copy a chunk of a huge object: its byte ranges only (:mod:`msgtrain.run.object_chunks`)."""
    from msgtrain.run.object_chunks import masked_copy

    masked_copy(url, chunk, view, dest)


def _relabelled(
    samples: list[Sample], stats: PartStats, rejects: list[str], name: str, shown: str
) -> tuple[list[Sample], PartStats, list[str]]:
    """The samples and rejects of a file read as ``name``, naming it ``shown`` instead."""
    if name == shown:
        return samples, stats, rejects
    escaped = json.dumps(name)[1:-1]
    samples = [replace(s, source=shown + s.source[len(name) :]) if s.source.startswith(name) else s for s in samples]
    rejects = [line.replace(escaped, json.dumps(shown)[1:-1]) for line in rejects]
    return samples, stats, rejects


def reject_order(line: str) -> tuple[int, int, str]:
    """Rejects of one file in file order: the file itself, then lines (by number), then items and the rest."""
    record = str(json.loads(line).get("record", ""))
    kind, _, number = record.partition(" ")
    if record == "file":
        return 0, 0, ""
    if number.isdigit():
        return (1 if kind == "line" else 2), int(number), kind
    return 3, 0, record


def source_line(source: str) -> int:
    """The line number in a sample's source (``path:17``), or its item's index (``path (item 17)``: an array's
    records); 0 when it names neither."""
    if source.endswith(")"):
        number = source.rpartition(" (item ")[2][:-1]
        return int(number) if number.isdigit() else 0
    tail = source.rpartition(":")[2]
    return int(tail) if tail.isdigit() else 0


def merge_chunk_tables(tables: list[pa.Table], batch_rows: int) -> Iterator[pa.Table]:
    """The samples of a file's chunks (given in chunk order) in the order of the whole file, ``batch_rows`` at a time.

    Converting a whole file gives its conversations in the order of their first line, each conversation's samples
    together; a chunk does the same for its conversations. A stable sort of the chunks' samples by first line
    therefore gives the whole file's order. Only the (memory-mapped) tables' source column is read to sort; rows
    are taken a batch at a time.
    """
    merged = pa.concat_tables(tables)
    lines = np.fromiter(
        (source_line(s) for s in merged.column("source").to_pylist()), dtype=np.int64, count=merged.num_rows
    )
    order = np.argsort(lines, kind="stable")
    for start in range(0, len(order), batch_rows):
        rows = order[start : start + batch_rows]
        # Runs of consecutive rows (a chunk of an array's items is one run) are sliced, which copies nothing; a
        # gather over a table of many chunks first concatenates each column whole.
        cuts = np.concatenate(([0], np.flatnonzero(np.diff(rows) != 1) + 1, [len(rows)]))
        if len(cuts) - 1 <= _MAX_SLICES:
            pieces = [merged.slice(int(rows[a]), int(b - a)) for a, b in pairwise(cuts)]
            yield pa.concat_tables(pieces).combine_chunks()
        else:
            yield merged.take(pa.array(rows))


_MAX_SLICES = 64  # runs of rows in a batch above which a batch is gathered rather than sliced


def merge_chunk_rejects(texts: list[str]) -> Iterator[str]:
    """The rejects of a file's chunks (each in file order) merged into file order."""
    return heapq.merge(*(text.splitlines(keepends=True) for text in texts), key=reject_order)


def linearize_read_graph(
    ev: ReadGraph, tok: Any, opts: LinearizeOptions, renderer: Renderer
) -> tuple[LinearizeResult | None, MsgtrainError | None]:
    """Linearize one graph a reader gave, exactly as ``convert`` does: the result, or the error that rejects it.

    Shared by ``convert`` and ``validate --tokenizer`` so that validate predicts convert's rejects and drops.
    """
    error = _graph_error(ev)
    if error is not None:
        return None, error
    try:
        res = linearize_graph(ev.graph, tok, options=opts, source=str(ev.source), extras=ev.extras, renderer=renderer)
    except MsgtrainError as e:
        return None, e
    except Exception as e:  # a bug or an input nobody foresaw must not end a nightly run
        return None, MsgtrainError(
            f"{type(e).__name__}: {e}",
            code="internal_error",
            hint="please report this with the rejected record",
        )
    return res, None


def _graph_error(ev: ReadGraph) -> MsgtrainError | None:
    n = len(ev.graph.nodes)
    if n > MAX_GRAPH_NODES:
        return MsgtrainError(
            f"conversation has {n} messages, above the {MAX_GRAPH_NODES} limit",
            code="conversation_too_large",
            hint="split the log into conversations",
        )
    return None
