"""CLI command ``convert``: logs → token-exact training data (options → ConvertConfig → run.pipeline)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from msgtrain.errors import ConfigError

EXIT_WITH_REJECTS = 3


def _summary(data: dict[str, Any], console: Console, output: str) -> None:
    t = Table(title="msgtrain convert", show_header=False, title_justify="left")
    t.add_column()
    t.add_column(overflow="fold")  # a long output path is folded, never cut
    r, tu, s, tok = data["records"], data["turns"], data["samples"], data["tokens"]
    published = data.get("published")
    where = f"{published['path']} (version {published['version']})" if published else output
    config = data.get("config", {})
    t.add_row("output", f"{where} · {config.get('target', 'canonical')} target, {config.get('format', 'parquet')}")
    resume = data.get("resume")
    elapsed = f"{data['seconds']:.1f} s" if "seconds" in data else "?"
    if resume and resume["reused"]:
        n = resume["parts"]
        parts = f"{n} part{'s' * (n != 1)}: {resume['reused']} reused (--resume), {resume['converted']} converted"
    elif resume:
        parts = f"{resume['converted']} part{'s' * (resume['converted'] != 1)} converted"
    t.add_row("time", f"{elapsed} · {parts}" if resume else elapsed)
    t.add_row(
        "records",
        f"{r['read']} read = {r['converted']} converted + {r['rejected']} rejected + {r['skipped']} skipped",
    )
    t.add_row("graphs", str(data["graphs"]))
    lost = tu.get("in_rejected_records", 0)
    more = f"; about {lost} more in rejected records" if lost else ""
    copies = tu.get("history_copies", 0)
    more += f"; {copies} history copies, context" if copies else ""
    t.add_row("turns", f"{tu['found']} found = {tu['trained']} trained + {tu['dropped']} dropped{more}")
    t.add_row("samples", f"{s['written']} " + " ".join(f"{k}={v}" for k, v in s["by_split"].items()))
    t.add_row("tokens", f"{tok['total']} total, {tok['trained']} trained, engine share {tok['engine_share']:.1%}")
    packing = data.get("outputs", {}).get("packing")
    if packing:
        t.add_row(
            "packing",
            f"{packing['efficiency']:.1%} of {packing['rows']} rows × {packing['pack_length']} tokens filled"
            f" ({packing['samples']} samples)",
        )
    tree = data.get("outputs", {}).get("tree")
    if tree:
        t.add_row(
            "tree",
            f"{tree['tokens']} tokens written for {tree['flat_tokens']} flat "
            f"({tree['flat_per_tree_token']}x fewer; trie {tree['trie_tokens']}), {tree['rows']} rows",
        )
    for title, key in (
        ("cuts", "cuts_by_reason"),
        ("rejected", None),
        ("dropped turns", None),
        ("dropped samples", None),
    ):
        if key:
            items = data[key]
        elif title == "rejected":
            items = r["rejected_by_reason"]
        elif title == "dropped turns":
            items = tu["dropped_by_reason"]
        else:
            items = s["dropped_by_reason"]
        if items:
            listed = data["outputs"].get("drops") if title == "dropped samples" else None
            t.add_row(
                title, ", ".join(f"{k}={v}" for k, v in items.items()) + (f" (listed in {listed})" if listed else "")
            )
    incomplete = data.get("flags", {}).get("context_incomplete", 0)
    if incomplete:
        # Not exact whatever the tokenizer: the log lacks part of what the model was sent (see docs/formats.md).
        t.add_row(
            "context",
            f"[yellow]{incomplete} samples context-incomplete (system prompt, tools or files not in the log; "
            "see report.json flags)[/]",
        )
    supplied = data.get("context_supplied")
    if supplied:
        counts = supplied["samples"]
        text = f"{counts['system_prompt']} samples with a supplied system prompt, {counts['tools']} with supplied tools"
        unmatched = supplied["unmatched_globs"]
        if unmatched:
            text += f"; [yellow]glob matching no input: {escape(', '.join(unmatched))}[/]"
        t.add_row("supplied", text)
    contradicted = data.get("flags", {}).get("usage_mismatch", 0)
    if contradicted:
        # The log's own API usage says the model saw another prompt than the one built (the tokenizer is its own).
        t.add_row(
            "usage",
            f"[yellow]{contradicted} samples whose logged prompt size contradicts the context built[/]",
        )
    unrendered = data.get("flags", {}).get("media_not_rendered", 0)
    if unrendered:
        # A text-only template on multimodal logs: the tokens hold the text around the media, not the media.
        t.add_row(
            "media",
            f"[yellow]{unrendered} samples with media the chat template does not render (see report.json flags)[/]",
        )
    # Always shown: a nightly job's operator looks for this number (readers that failed on input, see README).
    faults = r["rejected_by_reason"].get("reader_error", 0)
    debug_log = data["outputs"].get("debug_log")
    t.add_row("reader errors", f"{faults}" + (f" (tracebacks in {debug_log})" if faults and debug_log else ""))
    # Always shown too: an input msgtrain could not open is data missing from the dataset (exit code 3).
    unreadable = data["files"].get("unreadable", 0)
    t.add_row("unreadable", f"[yellow]{unreadable} inputs[/]" if unreadable else "0")
    if data["tokenizer"].get("demo"):
        t.add_row(
            "tokenizer",
            "[yellow]embedded demo tokenizer (byte-level ChatML) — pass --tokenizer for real data[/]",
        )
    else:
        t.add_row("tokenizer", str(data["tokenizer"].get("name")))
    console.print(t)
    from msgtrain.run.report_hints import next_step

    hint = next_step(data)
    if hint:
        console.print(f"[cyan]next:[/] {escape(hint)}", highlight=False)


class ConvertProgress:
    """The progress display of a conversion: counts against a known total from the moment the inputs are listed
    (files being hashed, then parts converted, reused parts counted as done), an ETA once a part has landed, and the
    assembly's samples and tokens."""

    def __init__(self, console: Console) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.table import Column

        self.started = time.perf_counter()
        self.planned = 0
        self.progress = Progress(
            TextColumn("{task.description:<9}"),
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            # The counts and the file name take what is left of the line, cut rather than squeezing the counts.
            TextColumn("{task.fields[info]}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
            console=console,
            transient=True,
            expand=True,
        )
        self.read = self.progress.add_task("list", total=None, info="", unit="files")
        self.write = self.progress.add_task("write", total=None, info="", unit="parts", visible=False, start=False)

    def __enter__(self) -> ConvertProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)  # type: ignore[arg-type]

    def hook(self, kind: str, info: dict[str, Any]) -> None:
        bar, read = self.progress, self.read
        if kind == "listed":
            bar.update(read, description="tokenizer", total=info["files"], completed=0, info="loading")
        elif kind == "hash":
            bar.update(read, description="hash", total=info["total"], completed=info["index"], info="")
        elif kind == "planned":
            self.planned = info["total"]
            reused = f"{info['reused']} reused (--resume) · " if info["reused"] else ""
            bar.reset(
                read,
                description="linearize",
                total=info["total"],
                completed=info["reused"],
                unit="parts",
                info=f"{reused}{info['total'] - info['reused']} to convert",
            )
        elif kind == "file":
            bar.update(
                read,
                description="linearize",
                total=max(self.planned, info["total"]),
                completed=info["index"],
                info=f"{info['records']} records, {info['turns']} turns, {info['rejected']} rejected"
                f" · {Path(info['path']).name}",
            )
        else:
            if not bar.tasks[self.write].started:
                bar.start_task(self.write)
                self.started = time.perf_counter()
            rate = info["tokens"] / max(time.perf_counter() - self.started, 1e-9)
            bar.update(
                self.write,
                total=info["total"],
                completed=info["index"],
                visible=True,
                info=f"{info['samples']} samples, {info['tokens']} tokens ({rate:,.0f} tokens/s)",
            )


def register(app: typer.Typer) -> None:
    @app.command()
    def convert(
        inputs: list[str] = typer.Argument(
            None, help="Log files or directories (searched recursively), or URLs (s3://bucket/logs/)."
        ),
        output: str = typer.Option(
            None, "-o", "--output", help="Output directory or URL (s3://bucket/dataset), published atomically."
        ),
        tokenizer: str = typer.Option(
            None, "--tokenizer", help="Local HF tokenizer folder or hub id; default: embedded demo."
        ),
        chat_template: str = typer.Option(
            None, "--chat-template", help="A .jinja file or tokenizer_config.json to use."
        ),
        policy: list[str] = typer.Option(None, "--policy", help="Train only these policies (repeatable); default all."),
        input_format: str = typer.Option(None, "--input-format", help="Force a reader (see `msgtrain formats`)."),
        mapping: Path = typer.Option(
            None,
            "--map",
            help="Read every file with this mapping (LLaMA-Factory columns/tags or axolotl keys; see `msgtrain"
            " formats --explain FILE`).",
        ),
        system_prompt: Path = typer.Option(
            None,
            "--system-prompt",
            help="A text file: the system prompt of every conversation whose log holds none (config: context:"
            " per format or glob).",
        ),
        tools: Path = typer.Option(
            None,
            "--tools",
            help="A JSON file of tool schemas (OpenAI or Anthropic shape): the tools of every conversation whose log"
            " records none.",
        ),
        fmt: str = typer.Option(None, "--format", help="parquet (default) | hf | jsonl"),
        target: str = typer.Option(
            None, "--target", help="canonical (default) | labels | trl | packed | rl | tree | dpo | kto"
        ),
        max_length: int = typer.Option(None, "--max-length", help="Longest sample in tokens."),
        overflow: str = typer.Option(None, "--overflow", help="drop (default) | truncate | split"),
        split: list[str] = typer.Option(None, "--split", help="e.g. validation=0.05 (by conversation)."),
        pack_length: int = typer.Option(None, "--pack-length", help="Row length for --target packed / tree."),
        tree_scope: str = typer.Option(
            None, "--tree-scope", help="--target tree: graph (default, a trie per graph) | split (merge graphs)."
        ),
        group_by: str = typer.Option(
            None, "--group-by", help="--target rl: group trajectories by a metadata KEY (example_id) or @prompt."
        ),
        group_size: int = typer.Option(
            None, "--group-size", help="--target rl with --group-by: keep groups of exactly N (rest dropped)."
        ),
        rejects: Path = typer.Option(None, "--rejects", help="Where bad records go (default OUT/rejects.jsonl)."),
        strict: bool = typer.Option(None, "--strict/--no-strict", help="Fail on the first bad record."),
        max_reject_rate: float = typer.Option(
            None, "--max-reject-rate", help="Abort when more records than this are bad."
        ),
        render_date: str = typer.Option(
            None, "--render-date", help="YYYY-MM-DD for templates that print today's date."
        ),
        content_special_tokens: str = typer.Option(
            None,
            "--content-special-tokens",
            help="Control-token text in log content: plain (default, encoded as text) | parse (as a serving engine"
            " does; samples flagged).",
        ),
        allow_partial_turns: bool = typer.Option(
            None,
            "--allow-partial-turns/--no-allow-partial-turns",
            help="With --overflow truncate, train a cut turn's start.",
        ),
        train_negative: bool = typer.Option(
            None,
            "--train-negative/--no-train-negative",
            help="Train replies the log marks bad (KTO label false, rejected of a pair), flagged; default: dropped.",
        ),
        engine_ids_mismatch: str = typer.Option(
            None,
            "--engine-ids-mismatch",
            help="Logged engine ids that do not decode to the logged text: drop (default) | render | keep (flagged).",
        ),
        train_dropped: bool = typer.Option(
            None,
            "--train-dropped/--no-train-dropped",
            help="Train turns whose template dropped their tool calls or text, flagged; default: dropped.",
        ),
        content_format: str = typer.Option(
            None,
            "--content-format",
            help="How list content reaches the chat template: auto (default, detected as vLLM does) | string (text"
            " parts joined) | openai (parts as logged).",
        ),
        max_graph_tokens: int = typer.Option(
            None,
            "--max-graph-tokens",
            help="Reject a conversation whose samples hold more tokens (default 16000000; 0 = no cap).",
        ),
        max_graph_samples: int = typer.Option(
            None,
            "--max-graph-samples",
            help="Reject a conversation that gives more samples (default 100000; 0 = no cap).",
        ),
        max_graph_state_mb: float = typer.Option(
            None,
            "--max-graph-state-mb",
            help="Reject a conversation whose rows take more MiB (default 512; 0 = no cap).",
        ),
        max_record_mb: float = typer.Option(
            None,
            "--max-record-mb",
            help="Reject a record (a JSONL line, a list item, a file read whole such as a JSON document or a "
            "cassette), or a decoded HTTP body, larger than this many MiB (default 64); a worker's memory is about "
            "its start plus ten times the largest record (docs/performance.md).",
        ),
        rows_per_shard: int = typer.Option(None, "--rows-per-shard", help="Rows per output file (default 100000)."),
        row_group_size: int = typer.Option(None, "--row-group-size", help="Rows per Parquet row group (default 1000)."),
        workers: int = typer.Option(
            None, "--workers", "-j", help="Worker processes (default 1; one per core is best)."
        ),
        chunk_mb: float = typer.Option(
            None,
            "--chunk-mb",
            help="Cut a JSONL log larger than this (MiB) into chunks of whole conversations (default 32; 0 = never).",
        ),
        resume: bool = typer.Option(
            None, "--resume/--no-resume", help="Reuse files already converted with the same settings."
        ),
        keep_missing: bool = typer.Option(
            None,
            "--keep-missing/--no-keep-missing",
            help="With --resume, keep publishing earlier inputs that are gone (rotated logs).",
        ),
        overwrite: bool = typer.Option(
            None, "--overwrite", help="Replace an OUT that msgtrain did not write (deletes its files)."
        ),
        allow_empty: bool = typer.Option(
            None,
            "--allow-empty",
            help="Publish an empty result: when the run read nothing, or over a dataset that has samples.",
        ),
        engine: str = typer.Option(None, "--engine", help="local (default) | ray"),
        config: Path = typer.Option(None, "--config", help="YAML config; CLI flags override it."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars, no summary."),
    ) -> int:
        """Convert agent logs into token-exact training samples (Parquet by default)."""
        from msgtrain.export.split import parse_split_spec
        from msgtrain.run import parts
        from msgtrain.run.config import load_config_data, merge_cli
        from msgtrain.run.pipeline import convert as run_convert

        parts.SETTLE_HEAP = True  # this process is a conversion, whose start-up objects live until it exits

        given: dict[str, Any] = {
            "inputs": list(inputs) if inputs else None,
            "output": output,
            "tokenizer": tokenizer,
            "chat_template": chat_template,
            "policies": list(policy) if policy else None,
            "input_format": input_format,
            "mapping": str(mapping) if mapping is not None else None,
            "system_prompt": str(system_prompt) if system_prompt is not None else None,
            "tools": str(tools) if tools is not None else None,
            "format": fmt,
            "target": target,
            "max_length": max_length,
            "overflow": overflow,
            "split": parse_split_spec(",".join(split)) if split else None,
            "pack_length": pack_length,
            "tree_scope": tree_scope,
            "group_by": group_by,
            "group_size": group_size,
            "rejects": str(rejects) if rejects is not None else None,
            "strict": strict,
            "max_reject_rate": max_reject_rate,
            "render_date": render_date,
            "content_special_tokens": content_special_tokens,
            "train_negative": train_negative,
            "engine_ids_mismatch": engine_ids_mismatch,
            "content_format": content_format,
            "train_dropped": train_dropped,
            "max_graph_tokens": max_graph_tokens,
            "max_graph_samples": max_graph_samples,
            "max_graph_state_mb": max_graph_state_mb,
            "max_record_mb": max_record_mb,
            "quiet": quiet or None,
            "allow_partial_turns": allow_partial_turns,
            "rows_per_shard": rows_per_shard,
            "row_group_size": row_group_size,
            "workers": workers,
            "chunk_mb": chunk_mb,
            "resume": resume,
            "keep_missing": keep_missing,
            "overwrite": overwrite,
            "allow_empty": allow_empty,
            "engine": engine,
        }
        cfg = merge_cli(load_config_data(config) if config is not None else None, given)
        if cfg.output is None or not cfg.inputs:
            raise ConfigError(
                "convert needs inputs and an output", hint="pass INPUT... -o OUT (or set them in --config)"
            )
        console = Console(stderr=True)
        from msgtrain.run.signals import terminate_on_sigterm

        terminate_on_sigterm()
        if cfg.engine == "local":  # this process runs msgtrain alone (Ray's driver may hold pandas objects)
            from msgtrain.export.without_pandas import skip_pandas

            skip_pandas()
        show = not cfg.quiet and sys.stderr.isatty()
        if show:
            with ConvertProgress(console) as bar:
                report = run_convert(cfg, progress=bar.hook)
        else:
            report = run_convert(cfg)
        if not cfg.quiet:
            from msgtrain.run.storage import is_remote

            where = str(cfg.output) if is_remote(str(cfg.output)) else os.path.abspath(cfg.output)
            _summary(report, Console(stderr=True) if not sys.stdout.isatty() else Console(), where)
        turns = report["turns"]
        if turns["found"] and not turns["trained"]:
            # A run that trains nothing is never a quiet success: say why each turn was dropped (the exit code
            # follows the books below, as validate's does: drops that are failures exit 3).
            reasons = ", ".join(f"{k}={v}" for k, v in turns["dropped_by_reason"].items())
            console.print(
                f"[bold red]no sampled turn was trained: {turns['dropped']} dropped ({reasons});"
                " see report.json and msgtrain validate for each turn's reason[/]"
            )
        unreadable = report["files"].get("unreadable", 0)
        if report["records"]["rejected"] or unreadable:
            if not cfg.quiet and report["records"]["rejected"]:
                n_rejected, where = report["records"]["rejected"], report["outputs"].get("rejects")
                console.print(f"[yellow]{n_rejected} records rejected: see {where}[/]")
            if not cfg.quiet and unreadable:
                console.print(
                    f"[yellow]{unreadable} inputs could not be read (also under files.ignored in the dataset's"
                    " report.json):[/]"
                )
                listed = [i for i in report["files"]["ignored"] if str(i.get("reason", "")).startswith("unreadable")]
                for item in listed[:20]:
                    console.print(
                        f"  {escape(item['path'])}: {escape(item['reason'])}", highlight=False, soft_wrap=True
                    )
                if len(listed) > 20:
                    console.print(f"  ... and {len(listed) - 20} more (report.json)")
            raise typer.Exit(EXIT_WITH_REJECTS)
        lost = lost_in_run(report)
        if lost:
            if not cfg.quiet:
                console.print(f"[yellow]{lost}: see report.json[/]")
            raise typer.Exit(EXIT_WITH_REJECTS)
        return 0


def lost_in_run(report: dict[str, Any]) -> str:
    """What a run lost besides rejected records (turns dropped by failure, samples dropped by the length policy),
    as one phrase, or ``""``. ``validate`` counts exactly these as problems, so both commands exit 3 on the same
    input; drops that are the user's choice or the log's own limit (:data:`NOT_FAILURES`) are not losses."""
    from msgtrain.export.groups import GROUP_DROPS
    from msgtrain.linearize.plan import NOT_FAILURES

    chosen = NOT_FAILURES | GROUP_DROPS  # --group-size drops what does not fill a group: the user's choice
    turns = sum(n for r, n in report["turns"]["dropped_by_reason"].items() if r not in chosen)
    samples = sum(n for r, n in report["samples"].get("dropped_by_reason", {}).items() if r not in chosen)
    parts = [f"{turns} turns dropped"] * bool(turns) + [f"{samples} samples dropped"] * bool(samples)
    return " and ".join(parts)
