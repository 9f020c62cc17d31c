"""``inspect``: a graph as a tree, then its samples with trained tokens highlighted — from logs or a dataset.

Two inputs, one view:
- *Logs* (files or directories any reader reads): the chosen graph is read, linearized on the fly with the given
  tokenizer (the embedded demo tokenizer by default), and shown as an annotated tree followed by every sample it
  produced (or ``--sample N`` of them). Each sampled turn in the tree says which sample trains it or why it
  was dropped.
- *An exported dataset* (``OUT`` of any ``--target`` and ``--format``, :mod:`msgtrain.tools.dataset`):
  ``--sample N`` (sample index; row index for ``tree``) or ``--sample ID`` (a sample id prefix) is read back
  and decoded with ``--tokenizer`` (default: the tokenizer ``OUT/report.json`` names). Without ``--sample``,
  the rows are listed. The graph structure is not stored in a dataset, so there
  is no tree.

Invariants:
- Both paths build the same :class:`~msgtrain.tools.sample_view.SampleView` from canonical columns, so the
  same sample looks the same whether it was linearized now or read back.
- Reading a canonical Parquet dataset never loads the token lists of files it does not show: the row is located
  from Parquet metadata and the ``sample_id`` column, and only its file is read (its samples of the same graph
  give the cut point). ``packed`` rows are cut back into their samples, so ``--sample N`` counts samples.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from msgtrain.errors import ConfigError
from msgtrain.ingest.boundary import open_reader, read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject, ReadSkip
from msgtrain.ingest.registry import get_reader
from msgtrain.tools.bounds import DEFAULT_MAX_CHARS, DEFAULT_MAX_TURNS
from msgtrain.tools.dataset import DataFile, data_files, is_dataset, report_of, sample_table, samples_per_row, target_of
from msgtrain.tools.sample_view import UNKNOWN, Decode, SampleView, mark_cuts, plural
from msgtrain.tools.tree import TreeLine, TurnNote, graph_lines
from msgtrain.tools.tree_row_view import TREE_ROW_COLUMNS, TreeRowView, tree_row_view

LISTING_ROWS = 50
VIEW_COLUMNS = (
    "sample_id",
    "graph_id",
    "source",
    "policy",
    "input_ids",
    "logprobs",
    "turn_ids",
    "turn_spans",
    "cut_reason",
    "engine_tokens",
    "flags",
)


@dataclass
class Inspection:
    """Everything a renderer (terminal or HTML) shows."""

    title: str
    decode: Decode
    control_ids: set[int]
    trees: list[list[TreeLine]] = field(default_factory=list)
    views: list[SampleView] = field(default_factory=list)
    total: int = 0  # samples of the graph (logs) or rows of the dataset
    notes: list[str] = field(default_factory=list)
    listing: list[dict[str, Any]] = field(default_factory=list)  # dataset rows, when no sample was asked for
    tree_rows: list[TreeRowView] = field(default_factory=list)  # a --target tree row, segments under parents
    # How much of the samples is shown (msgtrain.tools.bounds; None: no bound).
    max_turns: int | None = DEFAULT_MAX_TURNS
    max_chars: int | None = DEFAULT_MAX_CHARS

    def turn_budget(self) -> list[int | None]:
        """Per view, how many of its trained turns to show (0: listed, not shown): ``max_turns`` over all of them,
        in order."""
        if self.max_turns is None:
            return [None] * len(self.views)
        left, out = self.max_turns, []
        for v in self.views:
            out.append(min(left, len(v.turn_spans)) if len(v.turn_spans) else (None if left else 0))
            left -= min(left, len(v.turn_spans))
        return out

    def not_shown(self) -> str | None:
        """The note for views the turn budget leaves out, or None."""
        hidden = [v.index for v, n in zip(self.views, self.turn_budget(), strict=True) if n == 0]
        if not hidden:
            return None
        return (
            f"{plural(len(hidden), 'more sample')} not shown ({', '.join(map(str, hidden[:20]))}"
            f"{', …' if len(hidden) > 20 else ''}): past --max-turns {self.max_turns}; show one with --sample N,"
            " or all with --max-turns 0"
        )


def inspect_input(
    input_path: str | Path,
    *,
    graph: str | None = None,
    sample: str | None = None,
    tokenizer: str | None = None,
    chat_template: str | None = None,
    input_format: str | None = None,
    context: str | None = None,
) -> Inspection:
    """``context``: supplied context (:func:`msgtrain.ingest.supplied.context_text`), put into the graph as convert
    puts it."""
    path = Path(input_path)
    if not path.exists():
        raise ConfigError(f"input {path} does not exist", hint="pass a log file, a directory of logs, or a dataset OUT")
    if is_dataset(path):
        if graph is not None:
            raise ConfigError(
                "--graph selects a graph in logs; a dataset is inspected by --sample",
                hint=f"msgtrain inspect {path} --sample N",
            )
        return inspect_dataset(path, sample=sample, tokenizer=tokenizer, chat_template=chat_template)
    return inspect_logs(
        path,
        graph=graph,
        sample=sample,
        tokenizer=tokenizer,
        chat_template=chat_template,
        input_format=input_format,
        context=context,
    )


# ---------------------------------------------------------------------- logs
@dataclass
class _Found:
    event: ReadGraph
    ids: list[str]  # ids of every graph read
    rejects: int
    unread_files: int  # files not opened: the graph was found before them


def _find_graph(path: Path, graph: str | None, input_format: str | None, context: str | None = None) -> _Found:
    """The graph with id ``graph`` (or a unique id prefix; the first graph when None).

    Files are read in ``convert``'s order and reading stops after the file where the choice is settled (the
    first graph, or an exact id), so inspecting a large directory does not read all of it.
    """
    from msgtrain.run.plan import discover_inputs

    files, _ = discover_inputs([str(path)])
    reader = get_reader(input_format) if input_format else None
    chosen: list[ReadGraph] = []
    ids: list[str] = []
    rejects = 0
    skipped: Counter[str] = Counter()
    read = 0
    for f in files:
        read += 1
        opened = open_reader(f, reader)
        events = iter([opened]) if isinstance(opened, ReadReject) else read_events(opened, f)
        if context and not isinstance(opened, ReadReject):
            from msgtrain.ingest.supplied import rules_from_text, with_supplied_context

            events = with_supplied_context(events, rules_from_text(context), opened.name, str(f))
        for ev in events:
            if isinstance(ev, ReadReject):
                rejects += ev.count
            elif isinstance(ev, ReadSkip):
                skipped[ev.reason] += ev.count
            elif isinstance(ev, ReadGraph):
                ids.append(ev.graph.graph_id)
                if graph is None and not chosen:
                    chosen.append(ev)
                elif graph is not None and ev.graph.graph_id == graph:
                    chosen.insert(0, ev)  # an exact id wins over prefix matches
                elif graph is not None and ev.graph.graph_id.startswith(graph):
                    chosen.append(ev)
        if chosen and (graph is None or chosen[0].graph.graph_id == graph):
            break
    known = ", ".join(ids[:20]) + (f" … (+{len(ids) - 20})" if len(ids) > 20 else "")
    if not chosen:
        what = f"no graph with id {graph!r}" if graph is not None else "no conversation"
        if ids:
            hint = f"graphs in it: {known}"
        elif skipped and not rejects:
            hint = "its records carry no conversation (skipped: " + ", ".join(f"{k}={v}" for k, v in skipped.items())
            hint += "); inspect the file that holds the conversation"
        else:
            hint = "run `msgtrain validate` on it to see why nothing was read"
        raise ConfigError(f"{what} in {path}", hint=hint)
    if graph is not None and len(chosen) > 1 and chosen[0].graph.graph_id != graph:
        matches = ", ".join(ev.graph.graph_id for ev in chosen[:10])
        raise ConfigError(
            f"graph id prefix {graph!r} matches {len(chosen)} graphs", hint=f"be more specific: {matches}"
        )
    return _Found(chosen[0], ids, rejects, len(files) - read)


def inspect_logs(
    path: Path,
    *,
    graph: str | None,
    sample: str | None,
    tokenizer: str | None,
    chat_template: str | None,
    input_format: str | None,
    context: str | None = None,
) -> Inspection:
    from msgtrain.linearize import linearize_graph
    from msgtrain.tools.tokenizer import load_bundle

    found = _find_graph(path, graph, input_format, context)
    ev = found.event
    tok = load_bundle(tokenizer, chat_template)
    res = linearize_graph(ev.graph, tok, source=str(ev.source), extras=ev.extras)
    views = []
    for i, s in enumerate(res.samples):
        views.append(
            SampleView(
                index=i,
                sample_id=s.sample_id,
                graph_id=s.graph_id,
                source=s.source,
                policy=s.policy,
                input_ids=s.input_ids.astype("int64"),
                turn_spans=list(s.turn_spans),
                turn_ids=list(s.turn_ids),
                cut_reason=s.cut_reason,
                engine_tokens=s.engine_tokens,
                logprobs=s.logprobs,
                flags=list(s.flags),
            )
        )
    mark_cuts(views)
    notes: dict[str, TurnNote] = {}
    for v in views:
        for t, nid in enumerate(v.turn_ids):
            notes[nid] = TurnNote(True, v.index, t)
    for outcome in res.turns:
        if outcome.status == "dropped":
            notes[outcome.node_id] = TurnNote(False, reason=outcome.reason)
    out = Inspection(
        title=f"msgtrain inspect {path} · graph {ev.graph.graph_id} ({ev.source})",
        decode=tok.decode,
        control_ids=set(tok.special_ids) | set(tok.added_ids.tolist()),
        trees=[graph_lines(ev.graph, notes)],
        total=len(views),
    )
    out.views = _select(views, sample)
    if tok.name == _demo_name():
        out.notes.append(
            "tokenized with the embedded demo tokenizer (byte-level ChatML): pass --tokenizer for a model's tokens"
        )
    others = [i for i in found.ids if i != ev.graph.graph_id]
    if others:
        shown = ", ".join(others[:10]) + (" …" if len(others) > 10 else "")
        out.notes.append(f"{plural(len(others), 'other graph')} read (pick one with --graph ID): {shown}")
    if found.unread_files:
        out.notes.append(f"{plural(found.unread_files, 'more file')} not read: pass --graph ID to look further")
    if found.rejects:
        out.notes.append(f"{found.rejects} records could not be read (see `msgtrain validate {path}`)")
    dropped = [o for o in res.turns if o.status == "dropped"]
    for o in dropped:
        out.notes.append(f"dropped turn {o.node_id}: {o.reason}" + (f" ({o.message})" if o.message else ""))
    return out


def _select(views: list[SampleView], sample: str | None) -> list[SampleView]:
    if sample is None:
        return views
    if not sample.isdigit():
        chosen = [v for v in views if v.sample_id.startswith(sample)]
        if not chosen:
            raise ConfigError(f"no sample with id {sample!r}", hint="ids: " + ", ".join(v.sample_id for v in views))
        return chosen
    n = int(sample)
    if n >= len(views):
        raise ConfigError(
            f"--sample {n} is out of range: the graph has {len(views)} samples",
            hint=f"use 0..{len(views) - 1}" if views else "no turn of this graph was trained",
        )
    return [views[n]]


def _demo_name() -> str:
    from msgtrain.linearize import DEMO_TOKENIZER

    return DEMO_TOKENIZER


# ---------------------------------------------------------------------- datasets
def inspect_dataset(path: Path, *, sample: str | None, tokenizer: str | None, chat_template: str | None) -> Inspection:
    from msgtrain.tools.tokenizer import load_bundle

    files = data_files(path)
    target = target_of(files[0].names)
    counts = [int(samples_per_row(f, target).sum()) if target == "packed" else f.num_rows for f in files]
    total = sum(counts)
    report = report_of(path) or {}
    logged = report.get("tokenizer") or {}
    notes: list[str] = []
    if tokenizer is None and not logged.get("demo") and logged.get("name"):
        tokenizer = str(logged["name"])
    tok = load_bundle(tokenizer, chat_template)
    if logged.get("fingerprint") and logged["fingerprint"] != tok.fingerprint:
        notes.append(
            f"warning: this tokenizer ({tok.name}) is not the one that wrote the dataset "
            f"({logged.get('name')}): decoded text may be wrong"
        )
    if target == "tree":
        notes.append("a --target tree dataset: each row is a prefix tree of samples (--sample N shows row N)")
    else:
        notes.append("a dataset stores samples, not graphs: inspect the source log to see the tree")
    if target in ("labels", "trl", "packed"):
        unpacked = " (packed rows are shown sample by sample)" if target == "packed" else ""
        notes.append(
            f"--target {target} rows store no turn spans: turns shown are the runs of trained tokens{unpacked}"
        )
    out = Inspection(
        title=f"msgtrain inspect {path}",
        decode=tok.decode,
        control_ids=set(tok.special_ids) | set(tok.added_ids.tolist()),
        total=total,
        notes=notes,
    )
    if target == "tree":
        return _inspect_tree_rows(out, files, counts, sample)
    if sample is None:
        out.listing = _listing(files, target)
        if not out.listing:
            out.notes.append("the dataset holds no samples")
        return out
    file_index, row = _locate(files, counts, sample, target)
    samples = sample_table(files[file_index].read(), target)
    gid = samples["graph_id"][row].as_py()
    # The other samples of its graph in the same file locate the cut point; a target without graph ids has none.
    positions = [row] if gid is None else [i for i, g in enumerate(samples["graph_id"].to_pylist()) if g == gid]
    global_index = sum(counts[:file_index])
    rows = samples.take(positions).to_pylist()
    views = [SampleView.from_row(global_index + p, r) for p, r in zip(positions, rows, strict=True)]
    mark_cuts(views)
    out.views = [v for v in views if v.index == global_index + row]
    return out


def _inspect_tree_rows(out: Inspection, files: list[DataFile], counts: list[int], sample: str | None) -> Inspection:
    """Tree rows are addressed by row index; without one, the rows are listed."""
    if sample is None:
        cols = ["num_tokens", "num_flat_tokens", "num_samples", "num_segments", "num_trained_tokens"]
        for f in files:
            for r in f.read(cols).to_pylist():
                if len(out.listing) < LISTING_ROWS:
                    out.listing.append({"index": len(out.listing), **r})
        return out
    if not sample.isdigit():
        raise ConfigError(
            f"--sample {sample!r}: tree rows are addressed by row index", hint="pass --sample N (see the listing)"
        )
    file_index, row = _locate(files, counts, sample, "tree")
    data = files[file_index].read(list(TREE_ROW_COLUMNS)).slice(row, 1).to_pylist()[0]
    out.tree_rows = [tree_row_view(int(sample), data, out.decode)]
    return out


def _sample_ids(file: DataFile, target: str) -> pa.Array | None:
    """The file's sample ids in sample order (None: the target stores none)."""
    if target == "packed":
        return pc.list_flatten(file.read(["sample_ids"])["sample_ids"])
    if "sample_id" not in file.names:
        return None
    return file.read(["sample_id"])["sample_id"]


def _locate(files: list[DataFile], counts: list[int], sample: str, target: str) -> tuple[int, int]:
    """(file index, sample in file) of a sample index or a sample id prefix."""
    total = sum(counts)
    if sample.isdigit():
        n = int(sample)
        if n >= total:
            what = "rows" if target == "tree" else "samples"
            raise ConfigError(
                f"--sample {n} is out of range: the dataset has {total} {what}",
                hint=f"use 0..{total - 1}" if total else "the dataset is empty",
            )
        for i, c in enumerate(counts):
            if n < c:
                return i, n
            n -= c
    matches: list[tuple[int, int]] = []
    for i, f in enumerate(files):
        col = _sample_ids(f, target)
        if col is None:
            raise ConfigError(
                f"--sample {sample!r}: --target {target} rows store no sample ids",
                hint="pass a sample index (see `msgtrain inspect OUT`)",
            )
        hits = pc.indices_nonzero(pc.starts_with(col, sample)).to_pylist()
        matches.extend((i, int(h)) for h in hits)
    if len(matches) != 1:
        what = "no sample" if not matches else f"{len(matches)} samples"
        raise ConfigError(
            f"{what} with an id starting with {sample!r}",
            hint="pass a row index or a longer sample id prefix (see `msgtrain inspect OUT`)",
        )
    return matches[0]


LISTING_COLUMNS = ["sample_id", "graph_id", "num_tokens", "num_trained_tokens", "num_turns", "cut_reason", "source"]


def _listing(files: list[DataFile], target: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for f in files:
        need = LISTING_ROWS - len(rows)
        if need <= 0:
            break
        if f.format == "parquet" and all(c in f.names for c in LISTING_COLUMNS):
            batch = next(pq.ParquetFile(f.path).iter_batches(batch_size=need, columns=LISTING_COLUMNS), None)
            if batch is not None:
                rows.extend(batch.to_pylist())
        else:
            rows.extend(sample_table(f.read(), target).select(LISTING_COLUMNS).slice(0, need).to_pylist())
    for i, r in enumerate(rows):
        r["index"] = i
    return rows


# ---------------------------------------------------------------------- terminal rendering
def render_inspection(ins: Inspection) -> Any:
    from rich.console import Group
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    from msgtrain.tools.sample_view import TURN_STYLES, render_sample
    from msgtrain.tools.tree import rich_lines

    parts: list[Any] = [Text(ins.title, style="bold")]
    parts.extend(Text(n, style="yellow" if n.startswith(("warning", "dropped")) else "dim") for n in ins.notes)
    for tree in ins.trees:
        parts.append(rich_lines(tree, list(TURN_STYLES)))
    if ins.listing and "num_flat_tokens" in ins.listing[0]:
        t = Table(title=f"{ins.total} tree rows · show one with --sample N", title_justify="left")
        for col in ("#", "tokens", "flat tokens", "samples", "segments", "trained"):
            t.add_column(col, justify="right")
        for r in ins.listing:
            t.add_row(
                *(str(r[k]) for k in ("index", "num_tokens", "num_flat_tokens", "num_samples", "num_segments")),
                str(r["num_trained_tokens"]),
            )
        parts.append(t)
    elif ins.listing:
        t = Table(
            title=f"{ins.total} samples"
            + (f" (first {len(ins.listing)})" if ins.total > len(ins.listing) else "")
            + " · show one with --sample N",
            title_justify="left",
        )
        for col in ("#", "sample_id", "graph", "tokens", "trained", "turns", "cut", "source"):
            t.add_column(col, overflow="fold")
        for r in ins.listing:
            t.add_row(
                *(
                    UNKNOWN if r[k] is None else str(r[k])
                    for k in ("index", "sample_id", "graph_id", "num_tokens", "num_trained_tokens", "num_turns")
                ),
                UNKNOWN if r["cut_reason"] is None else str(r["cut_reason"]),
                UNKNOWN if r["source"] is None else str(r["source"]),
            )
        parts.append(t)
    for v, turns in zip(ins.views, ins.turn_budget(), strict=True):
        if turns == 0:
            continue
        parts.append(Rule(style="dim"))
        parts.append(render_sample(v, ins.total, ins.decode, ins.control_ids, turns=turns, max_chars=ins.max_chars))
    if ins.not_shown():
        parts.append(Text(str(ins.not_shown()), style="yellow"))
    for tree_row in ins.tree_rows:
        from msgtrain.tools.tree_row_view import render_tree_row

        parts.append(Rule(style="dim"))
        parts.append(render_tree_row(tree_row))
    return Group(*parts)


def write_html(ins: Inspection, path: str | Path) -> Path:
    from msgtrain.tools.html_page import write_page

    notes = list(ins.notes)
    if ins.listing:
        notes.append(f"{ins.total} samples; pick one with --sample N to see its tokens")
    budget = ins.turn_budget()
    shown = [(v, n) for v, n in zip(ins.views, budget, strict=True) if n != 0]
    if ins.not_shown():
        notes.append(str(ins.not_shown()))
    return write_page(
        path,
        ins.title,
        ins.trees,
        [v for v, _ in shown],
        ins.total,
        ins.decode,
        ins.control_ids,
        notes,
        turns=[n for _, n in shown],
        max_chars=ins.max_chars,
    )
