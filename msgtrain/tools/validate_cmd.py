"""``validate``: run the readers and the model's validation rules over logs, without converting anything.

Invariants:
- Every input file is looked at: its format is detected (or forced), its reader runs to the end, and every record
  is accounted for as part of a graph, a reject, or a skip, exactly as ``convert`` would count it.
- Every problem is reported, not only the first: a reject from a reader (bad JSON, unknown role, unpaired tool
  result...), a rule broken inside a graph that did load (:func:`msgtrain.model.validate.validate_graph`), or a
  file no reader can read. Each carries file:line, where inside the record (graph, branch, ``message[i]``), a
  stable reason code, the message and a fix hint.
- By default (``lin``, the CLI's default) every graph is linearized exactly as ``convert`` does — the same
  tokenizer resolution, options, config file and per-graph function
  (:func:`msgtrain.run.parts.linearize_read_graph`) and length policy — so validate has a problem exactly when
  convert would reject a record or drop a turn or sample, and its counts are convert's
  (:meth:`ValidationReport.convert_counts`). ``--structure-only`` runs the readers and the structural rules only.
- Warnings (a graph with no sampled assistant turn: nothing in it would be trained; a structural rule broken by a
  graph convert trains anyway) are listed but are not problems: they do not change the exit code.
- Directories are walked like ``convert`` walks them (recursive, sorted, hidden files skipped).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.text import Text

from msgtrain.errors import printable
from msgtrain.ingest.boundary import open_reader, read_events
from msgtrain.ingest.core.base import Reader, ReadGraph, ReadReject, ReadSkip
from msgtrain.ingest.faults import default_debug_log, log_traceback
from msgtrain.model.validate import validate_graph

if TYPE_CHECKING:
    from msgtrain.run.config import ConvertConfig


@dataclass(frozen=True)
class Finding:
    """One problem (or warning), located."""

    source: str  # file:line, or "file (record)" for non-line records
    where: str  # inside the record: graph, branch, message index ("" when the source says it all)
    code: str
    message: str
    hint: str = ""

    def __post_init__(self) -> None:
        # A source is a file name, which may hold surrogate-escaped bytes; findings are printed and written as UTF-8.
        for name in ("source", "where", "message", "hint"):
            object.__setattr__(self, name, printable(getattr(self, name)))

    def __str__(self) -> str:
        inner = f" {self.where}:" if self.where else ""
        fix = f" (fix: {self.hint})" if self.hint else ""
        return f"{self.source}:{inner} [{self.code}] {self.message}{fix}"


@dataclass
class ValidationReport:
    """What validate found. ``records``, ``skipped`` and ``rejected`` count input records as convert does; with
    linearization (``linearized``) so do ``converted``, ``converted_graphs``, the turn counts and the drops, which
    equal convert's report for the same inputs and options."""

    files: list[str] = field(default_factory=list)
    formats: Counter[str] = field(default_factory=Counter)
    ignored: list[str] = field(default_factory=list)  # files in walked directories with no log suffix
    graphs: int = 0  # graphs read (convert's ``graphs`` is ``converted_graphs``: those it did not reject)
    records: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)  # records, by reason
    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    linearized: bool = False
    converted: int = 0
    converted_graphs: int = 0
    turns_found: int = 0
    turns_trained: int = 0
    turns_dropped: Counter[str] = field(default_factory=Counter)
    samples_dropped: Counter[str] = field(default_factory=Counter)
    turns_lost: int = 0  # estimated assistant turns in rejected records, as convert counts them
    history_copies: int = 0  # replies held as the history a group of rollouts started from, as convert counts them
    # The turns trained so far, by digest: a later copy is a duplicate, as convert counts it (msgtrain.export.dedupe).
    once: Any = field(default=None, repr=False, compare=False)  # a TrainedOnce, made at the first linearized graph

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": self.ok,
            "linearized": self.linearized,
            "files": self.files,
            "formats": dict(sorted(self.formats.items())),
            "ignored": self.ignored,
            "graphs": self.graphs,
            "records": self.records,
            "rejected_by_reason": dict(sorted(self.rejected.items())),
            "skipped_by_reason": dict(sorted(self.skipped.items())),
            "problems": [asdict(p) for p in self.problems],
            "problems_by_code": dict(sorted(Counter(p.code for p in self.problems).items())),
            "warnings": [asdict(w) for w in self.warnings],
        }
        if self.linearized:
            out["convert"] = self.convert_counts()
        return out

    def convert_counts(self) -> dict[str, Any]:
        """The counts of convert's report.json this validation predicts (records, graphs, turns, sample drops)."""
        from msgtrain.run.parts import accounting_report

        return {
            **accounting_report(
                self.records,
                self.converted,
                self.rejected,
                self.skipped,
                self.converted_graphs,
                self.turns_found,
                self.turns_trained,
                self.turns_dropped,
                self.turns_lost,
                self.history_copies,
            ),
            "samples": {"dropped_by_reason": dict(sorted(self.samples_dropped.items()))},
        }


def _locate(where: str | None, source: str, path: str) -> tuple[str, str]:
    """(file:line, inner location) of an error found while reading ``source``.

    ``where`` may repeat the source (``file:3``), point at a more precise line of the same record (``file:12``
    inside a graph whose records start at line 3: that line wins), or add an inner location (``file:3
    message[2]``, ``graph g message[1]``).
    """
    if not where or where == source:
        return source, ""
    if where.startswith(source + " "):
        return source, where[len(source) + 1 :]
    if where.startswith(path + ":"):
        line, _, tail = where[len(path) + 1 :].partition(" ")
        if line.isdigit():
            return f"{path}:{line}", tail
    if where.startswith(path + " "):
        return source, where[len(path) + 1 :]
    return source, where


@dataclass
class Linearization:
    """What ``validate`` linearizes with: the tokenizer, renderer, options and length policy ``convert`` would use
    for the same options (:meth:`from_config` resolves them exactly as ``convert`` does)."""

    tok: Any
    renderer: Any
    options: Any
    max_length: int | None = None
    overflow: str = "drop"
    allow_partial_turns: bool = False
    context: str | None = None  # supplied context (msgtrain.ingest.supplied), as convert's settings carry it

    @classmethod
    def from_config(cls, cfg: ConvertConfig) -> Linearization:
        """From a :class:`msgtrain.run.config.ConvertConfig`: convert's tokenizer (the embedded demo one when none
        is given, no network), its checked ``--chat-template``, render date, policies and length policy."""
        from msgtrain.linearize.render import Renderer
        from msgtrain.run.parts import linearize_options, settings_from_config
        from msgtrain.run.plan import load_tokenizer_checked

        tok = load_tokenizer_checked(cfg)
        settings = settings_from_config(cfg)
        return cls(
            tok,
            Renderer(tok, settings.render_date, settings.content_format),
            linearize_options(settings),
            max_length=cfg.max_length,
            overflow=cfg.overflow,
            allow_partial_turns=cfg.allow_partial_turns,
            context=settings.context,
        )

    @classmethod
    def load(cls, tokenizer: str | None, chat_template: str | None, render_date: str | None) -> Linearization:
        from msgtrain.run.config import ConvertConfig

        return cls.from_config(ConvertConfig(tokenizer=tokenizer, chat_template=chat_template, render_date=render_date))


def _linearize_findings(ev: ReadGraph, lin: Linearization, report: ValidationReport) -> bool:
    """Run convert's own per-graph linearization and length policy; what it would reject or drop is a problem.
    Counts what convert counts. Returns whether convert would keep the graph (not reject it)."""
    from msgtrain.export.dedupe import DUPLICATE, DuplicateCount, TrainedOnce
    from msgtrain.export.length import apply_length_policy
    from msgtrain.export.schema import samples_to_table
    from msgtrain.linearize.plan import NOT_FAILURES
    from msgtrain.run.parts import linearize_read_graph

    source = str(ev.source)
    where = f"graph {ev.graph.graph_id}"
    res, error = linearize_read_graph(ev, lin.tok, lin.options, lin.renderer)
    if error is not None:
        report.rejected[error.code] += ev.records
        report.turns_lost += sum(n.is_assistant for n in ev.graph.sampled_nodes())
        report.problems.append(Finding(source, where, error.code, error.message, error.hint or ""))
        return False
    assert res is not None
    report.converted += ev.records
    report.converted_graphs += 1
    report.turns_found += len(res.turns)
    report.history_copies += res.history_copies
    trained = sum(len(s.turn_ids) for s in res.samples)
    drops = Counter(res.drops)
    sample_drops: Counter[str] = Counter()
    table = samples_to_table(res.samples) if res.samples else None
    if table is not None:
        dupes = DuplicateCount()
        report.once = report.once or TrainedOnce()
        table = report.once.apply(source, table, 0, dupes, [])
        trained -= dupes.turns
        drops.update({DUPLICATE: dupes.turns} if dupes.turns else {})
        sample_drops.update({DUPLICATE: dupes.dropped_samples} if dupes.dropped_samples else {})
    if lin.max_length is not None and table is not None and table.num_rows:
        kept = apply_length_policy(
            table,
            max_length=lin.max_length,
            overflow=lin.overflow,
            allow_partial_turns=lin.allow_partial_turns,
        )
        drops.update(kept.dropped_turns)
        sample_drops.update(kept.dropped_samples)
        trained -= sum(kept.dropped_turns.values())
    report.turns_trained += trained
    report.turns_dropped.update(drops)
    report.samples_dropped.update(sample_drops)
    for reason, n in sorted(drops.items()):
        (report.warnings if reason in NOT_FAILURES else report.problems).append(
            Finding(
                source,
                where,
                f"dropped_{reason}",
                f"{n} sampled turn{'s' if n != 1 else ''} would not be trained ({reason})",
                "see the drop reasons in README's token-exactness section; convert reports them under turns.dropped",
            )
        )
    for reason, n in sorted(sample_drops.items()):
        if reason == DUPLICATE:  # trained once already: not a loss
            continue
        report.problems.append(
            Finding(
                source,
                where,
                f"dropped_sample_{reason}",
                f"{n} sample{'s' if n != 1 else ''} would not be written ({reason})",
                "raise --max-length, or use --overflow split/truncate; convert reports them under samples.dropped",
            )
        )
    return True


def validate_file(
    path: Path, reader: Reader | None, report: ValidationReport, lin: Linearization | None = None
) -> None:
    """Read one file with ``reader`` (or the detected one) and add what it finds to ``report``; with ``lin``,
    also linearize each graph as ``convert`` does and report what it would reject or drop.

    With ``lin`` the verdict on a graph is convert's: its reject or its drops are problems, and a structural rule
    the graph breaks is a warning when convert trains the graph anyway. Without it (``--structure-only``) the
    structural rules are the problems."""
    report.files.append(str(path))
    opened = open_reader(path, reader)
    if isinstance(opened, ReadReject):
        _add_reject(report, opened, str(path))
        return
    report.formats[opened.name] += 1
    events = read_events(opened, path, reader is not None)
    if lin is not None and lin.context:
        from msgtrain.ingest.supplied import rules_from_text, with_supplied_context

        events = with_supplied_context(events, rules_from_text(lin.context), opened.name, str(path))
    for ev in events:
        source = str(ev.source)
        if isinstance(ev, ReadReject):
            _add_reject(report, ev, str(path))
        elif isinstance(ev, ReadSkip):
            report.records += ev.count
            report.skipped[ev.reason] += ev.count
        elif isinstance(ev, ReadGraph):
            report.records += ev.records
            report.graphs += 1
            structural = [Finding(source, p.where, p.code, p.message, p.hint) for p in validate_graph(ev.graph)]
            if lin is None:
                report.problems.extend(structural)
            elif _linearize_findings(ev, lin, report):
                report.warnings.extend(structural)
            if not ev.graph.sampled_nodes():
                report.warnings.append(
                    Finding(
                        source,
                        f"graph {ev.graph.graph_id}",
                        "no_sampled_turns",
                        "no assistant message in this graph was sampled by a policy: nothing in it is trained",
                        "assistant turns re-sent as history are 'carried'; log the calls that produced them",
                    )
                )


def _add_reject(report: ValidationReport, ev: ReadReject, path: str) -> None:
    report.records += ev.count
    report.rejected[ev.error.code] += ev.count
    report.turns_lost += ev.turns
    err = ev.error
    # A reject of the whole file is located at the file itself (``path:``), like convert's "file" record.
    at, where = _locate(err.where, path if ev.source.record == "file" else str(ev.source), path)
    report.problems.append(Finding(at, where, err.code, err.message, err.hint or ""))
    if ev.detail:
        log_traceback(default_debug_log(), ev)


NOTHING_FOUND_HINT = "pass log files or folders; force a reader for a file of another suffix with --input-format"


def validate_inputs(
    inputs: Sequence[str | Path],
    input_format: str | None = None,
    lin: Linearization | None = None,
    mapping: str | None = None,
) -> ValidationReport:
    """Validate files and directories; ``input_format`` forces one reader for every file; ``lin`` also linearizes
    every graph as convert does and checks what it would reject or drop (the ``validate`` command's default; without
    it, as ``validate --structure-only``, only the readers and the structural rules run)."""
    from msgtrain.run.plan import NOT_A_LOG, discover_inputs

    files, ignored = discover_inputs([str(i) for i in inputs], forced=bool(input_format or mapping))
    from msgtrain.ingest.registry import forced_reader

    reader = forced_reader(input_format, mapping)
    report = ValidationReport(
        ignored=[i["path"] for i in ignored if i["reason"].startswith(NOT_A_LOG)], linearized=lin is not None
    )
    for path in files:
        validate_file(path, reader, report, lin)
    if not files:  # what convert refuses as "read nothing": a problem here too, named
        from msgtrain.run.empty_result import nothing_found

        report.problems.append(
            Finding(", ".join(map(str, inputs)), "", "nothing_read", nothing_found(ignored), NOTHING_FOUND_HINT)
        )
    return report


def render_validation(report: ValidationReport) -> Group:
    """Problems one per line (file:line: where: [code] message (fix: hint)), then a one-line summary."""
    lines: list[Text] = []
    for p in report.problems:
        lines.append(_finding_text(p, "red"))
    for w in report.warnings:
        lines.append(_finding_text(w, "yellow", prefix="warning: "))
    formats = ", ".join(f"{k}={v}" for k, v in sorted(report.formats.items())) or "none"
    summary = Text(
        f"{_n(len(report.files), 'file')} ({formats}), {_n(report.records, 'record')}, {_n(report.graphs, 'graph')}: "
    )
    if report.ok:
        summary.append("no problems", style="bold green")
    else:
        codes = Counter(p.code for p in report.problems)
        summary.append(_n(len(report.problems), "problem"), style="bold red")
        summary.append(" (" + ", ".join(f"{c}={n}" for c, n in codes.most_common()) + ")")
    if report.warnings:
        summary.append(", " + _n(len(report.warnings), "warning"), style="yellow")
    if report.linearized:
        counts = report.convert_counts()
        records, turns = counts["records"], counts["turns"]
        summary.append(
            f"; convert would: {records['converted']} converted + {records['rejected']} rejected +"
            f" {records['skipped']} skipped, {turns['trained']} turns trained, {turns['dropped']} dropped"
            + (f", {sum(report.samples_dropped.values())} samples dropped" if report.samples_dropped else "")
        )
    else:
        summary.append("; structure only (not linearized)", style="dim")
    if report.ignored:
        summary.append(f"; {_n(len(report.ignored), 'file')} without a log suffix ignored", style="dim")
    return Group(*lines, summary)


def _finding_text(f: Finding, colour: str, prefix: str = "") -> Text:
    t = Text(prefix, style=colour)
    t.append(f.source, style="bold")
    t.append(":")
    if f.where:
        t.append(f" {f.where}:", style="cyan")
    t.append(f" [{f.code}]", style=colour)
    t.append(f" {f.message}")
    if f.hint:
        t.append(f" (fix: {f.hint})", style="dim")
    return t


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")
