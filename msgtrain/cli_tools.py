"""CLI commands for looking at data: inspect, stats, validate, audit-template, formats.

Each command parses its options, calls one function of :mod:`msgtrain.tools`, prints what it returns (rich for a
terminal, ``--json`` for machines) and maps the outcome to an exit code. msgtrain's own errors propagate to
:func:`msgtrain.cli.main`, which prints them as one red line.

Exit codes (README, "Exit codes"): 0 fine; 1 a fatal error; 2 a usage error; 3 a check that found problems
(``validate`` found problems in the input, as ``convert`` exits 3 when it rejected records; ``audit-template``
found a property training relies on failing).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from msgtrain.errors import printable
from msgtrain.tools.bounds import DEFAULT_MAX_CHARS, DEFAULT_MAX_TURNS

EXIT_PROBLEMS = 3


def _console() -> Console:
    # Wide enough that token windows and file:line locations do not wrap mid-token when piped to a file.
    return Console(width=None if sys.stdout.isatty() else 140, highlight=False, soft_wrap=False)


def _print_json(data: Any) -> None:
    # Paths and quoted input may hold lone surrogates, which no UTF-8 stream takes.
    sys.stdout.write(printable(json.dumps(data, indent=2, ensure_ascii=False, default=str)) + "\n")


def register(app: typer.Typer) -> None:
    """Add the tool commands to the app."""

    @app.command("audit-template")
    def audit_template_cmd(
        tokenizer: str = typer.Option(..., "--tokenizer", "-t", help="Local tokenizer folder (or a cached hub id)."),
        chat_template: Path = typer.Option(
            None,
            "--chat-template",
            help="A .jinja file or a tokenizer_config.json whose template replaces the tokenizer's.",
        ),
        feature: list[str] = typer.Option(
            None, "--feature", "-f", help="Probe only these features (repeatable); default: all of them."
        ),
        template_kwarg: list[str] = typer.Option(
            None, "--template-kwarg", help="KEY=VALUE handed to the template (JSON values), e.g. enable_thinking=false."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    ) -> None:
        """Probe a chat template: prefix stability per feature, end-of-turn training, masks, special-token safety.

        Exits 3 when a property training relies on fails (not prefix-stable, no trained end-of-turn token,
        content control-token text not kept plain).
        """
        from msgtrain.tools.audit import parse_template_kwargs, render_audit
        from msgtrain.tools.audit_cmd import audit_template

        report = audit_template(
            tokenizer,
            chat_template,
            features=list(feature or ()),
            template_kwargs=parse_template_kwargs(template_kwarg or ()),
        )
        if as_json:
            _print_json(report.to_json())
        else:
            _console().print(render_audit(report))
        if not report.ok:
            raise typer.Exit(EXIT_PROBLEMS)

    @app.command("validate")
    def validate_cmd(
        inputs: list[str] = typer.Argument(
            None, help="Log files or directories (searched recursively), or one dataset OUT (also s3:// / gs://)."
        ),
        input_format: str = typer.Option(None, "--input-format", help="Force a reader (see `msgtrain formats`)."),
        as_json: bool = typer.Option(False, "--json", help="Print the problems as JSON."),
        structure_only: bool = typer.Option(
            False,
            "--structure-only",
            help="Only run the readers and the structural rules (fast; no tokenizer): misses what linearization "
            "would reject or drop.",
        ),
        tokenizer: str = typer.Option(
            None, "--tokenizer", help="Tokenizer to linearize with, as convert: default the embedded demo one."
        ),
        chat_template: str = typer.Option(None, "--chat-template", help="Chat template override, as convert."),
        render_date: str = typer.Option(None, "--render-date", help="Date templates print, as convert."),
        policy: list[str] = typer.Option(None, "--policy", help="Train only these policies, as convert."),
        content_special_tokens: str = typer.Option(
            None, "--content-special-tokens", help="plain (default) | parse, as convert."
        ),
        max_length: int = typer.Option(None, "--max-length", help="Longest sample in tokens, as convert."),
        overflow: str = typer.Option(None, "--overflow", help="drop (default) | truncate | split, as convert."),
        allow_partial_turns: bool = typer.Option(
            None, "--allow-partial-turns/--no-allow-partial-turns", help="As convert (with --overflow truncate)."
        ),
        train_negative: bool = typer.Option(
            None, "--train-negative/--no-train-negative", help="Train replies marked bad, as convert."
        ),
        content_format: str = typer.Option(
            None, "--content-format", help="auto (default) | string | openai, as convert."
        ),
        train_dropped: bool = typer.Option(
            None, "--train-dropped/--no-train-dropped", help="Train turns a template dropped parts of, as convert."
        ),
        mapping: Path = typer.Option(None, "--map", help="Read every file with this mapping, as convert."),
        system_prompt: Path = typer.Option(
            None, "--system-prompt", help="The system prompt of conversations whose log holds none, as convert."
        ),
        tools: Path = typer.Option(None, "--tools", help="The tools of conversations whose log has none, as convert."),
        config: Path = typer.Option(
            None, "--config", help="convert's YAML config: its inputs and settings (flags override it)."
        ),
    ) -> None:
        """Check logs without converting: every problem with file:line, message index, reason code and fix.

        Given convert's OUT instead (any target and format), checks the dataset against its own invariants.

        By default every graph is linearized exactly as convert would (same tokenizer resolution, options and
        config file), so validate exits 3 whenever convert would reject a record or drop a turn or sample.
        --structure-only checks only the readers and the structural rules.
        """
        from msgtrain.errors import ConfigError
        from msgtrain.run.config import load_config_data, merge_cli
        from msgtrain.run.storage import is_remote
        from msgtrain.tools.dataset import is_dataset, readable_dataset
        from msgtrain.tools.validate_cmd import Linearization, render_validation, validate_inputs

        one = inputs[0] if inputs and len(inputs) == 1 and config is None else None
        if one is not None and (is_remote(one) or is_dataset(Path(one))):
            # An exported dataset (convert's OUT): checked against its own invariants, not read as logs.
            from msgtrain.tools.validate_dataset import render_dataset_validation, validate_dataset

            with readable_dataset(one) as local:
                result = validate_dataset(local)
            if as_json:
                _print_json(result.to_json())
            else:
                _console().print(render_dataset_validation(result), soft_wrap=True)
            if not result.ok:
                raise typer.Exit(EXIT_PROBLEMS)
            return
        given: dict[str, Any] = {
            "inputs": [str(i) for i in inputs] if inputs else None,
            "input_format": input_format,
            "tokenizer": tokenizer,
            "chat_template": chat_template,
            "render_date": render_date,
            "policies": list(policy) if policy else None,
            "content_special_tokens": content_special_tokens,
            "max_length": max_length,
            "overflow": overflow,
            "allow_partial_turns": allow_partial_turns,
            "train_negative": train_negative,
            "content_format": content_format,
            "train_dropped": train_dropped,
            "mapping": str(mapping) if mapping is not None else None,
            "system_prompt": str(system_prompt) if system_prompt is not None else None,
            "tools": str(tools) if tools is not None else None,
        }
        cfg = merge_cli(load_config_data(config) if config is not None else None, given)
        if not cfg.inputs:
            raise ConfigError("validate needs inputs", hint="pass INPUT... (or set inputs in --config)")
        lin = None if structure_only else Linearization.from_config(cfg)
        from msgtrain.ingest.structure.mapping import mapping_text

        report = validate_inputs(list(cfg.inputs), cfg.input_format, lin, mapping_text(cfg.mapping))
        if as_json:
            _print_json(report.to_json())
        else:
            _console().print(render_validation(report), soft_wrap=True)  # one line per problem, for grep
        if not report.ok:
            raise typer.Exit(EXIT_PROBLEMS)

    @app.command("formats")
    def formats_cmd(
        as_json: bool = typer.Option(False, "--json", help="Print the formats as JSON."),
        explain: Path = typer.Option(
            None,
            "--explain",
            help="Say which reader reads this file, what the structural reading finds in it and the mapping it "
            "used (ready to edit and pass with --map).",
        ),
    ) -> None:
        """List the input formats msgtrain reads, in detection order, with an example file for each."""
        from rich.table import Table

        if explain is not None:
            from msgtrain.tools.explain_cmd import explain_file

            exp = explain_file(explain)
            if as_json:
                _print_json({k: v for k, v in exp.__dict__.items() if not isinstance(v, set)})
            else:
                print(exp.render())
            return

        # The registry's listing as plain data: importing every reader (and the message model) to print a table
        # would cost most of a second.
        from msgtrain.ingest.catalog import FORMATS

        rows = [
            {"name": name, "description": description, "example": example} for name, description, example in FORMATS
        ]
        if as_json:
            _print_json(rows)
            return
        table = Table(title="input formats (detection order)", title_justify="left")
        for col in ("name", "description", "example"):
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(row["name"], row["description"], row["example"])
        _console().print(table)

    @app.command("stats")
    def stats_cmd(
        out: str = typer.Argument(
            ..., help="An exported dataset (msgtrain convert -o OUT): a directory, or an s3:// / gs:// prefix."
        ),
        plot: Path = typer.Option(None, "--plot", help="Also write length histograms to this PNG (needs matplotlib)."),
        as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON."),
        overwrite: bool = typer.Option(
            False, "--overwrite", help="Replace an existing --plot file msgtrain did not write."
        ),
    ) -> None:
        """Samples, tokens, trained tokens, turns, cut and drop reasons, engine share, per policy and source."""
        from msgtrain.run.own_files import check_own_file
        from msgtrain.tools.stats import dataset_stats, plot_stats, render_stats

        if plot is not None:
            check_own_file(plot, "--plot", overwrite=overwrite)
        from msgtrain.tools.dataset import readable_dataset

        with readable_dataset(out) as local:
            stats = dataset_stats(local)
        stats["dataset"] = out
        if plot is not None:
            stats["plot"] = str(plot_stats(stats, plot))
        if as_json:
            _print_json(stats)
        else:
            console = _console()
            console.print(render_stats(stats))
            if plot is not None:
                console.print(f"plot written to {stats['plot']}")

    @app.command("inspect")
    def inspect_cmd(
        input_path: str = typer.Argument(
            ..., help="A log file, a directory of logs, or an exported dataset OUT (a directory, or s3:// / gs://)."
        ),
        graph: str = typer.Option(None, "--graph", "-g", help="Graph id (or a unique prefix); default: the first."),
        tokenizer: str = typer.Option(
            None,
            "--tokenizer",
            "-t",
            help="Local tokenizer folder; default: the embedded demo tokenizer (logs) or the dataset's (OUT).",
        ),
        chat_template: Path = typer.Option(None, "--chat-template", help="A .jinja file or tokenizer_config.json."),
        sample: str = typer.Option(
            None, "--sample", "-s", help="Show only sample N (index) or the sample with this id."
        ),
        html: Path = typer.Option(None, "--html", help="Also write the view as a self-contained HTML page."),
        overwrite: bool = typer.Option(
            False, "--overwrite", help="Replace an existing --html file msgtrain did not write."
        ),
        input_format: str = typer.Option(None, "--input-format", help="Force a reader (see `msgtrain formats`)."),
        system_prompt: Path = typer.Option(
            None, "--system-prompt", help="The system prompt of conversations whose log holds none, as convert."
        ),
        tools: Path = typer.Option(None, "--tools", help="The tools of conversations whose log has none, as convert."),
        max_turns: int = typer.Option(
            DEFAULT_MAX_TURNS, "--max-turns", min=0, help="Show at most this many trained turns in all (0: all)."
        ),
        max_chars: int = typer.Option(
            DEFAULT_MAX_CHARS,
            "--max-chars",
            min=0,
            help="Elide the middle of a context or turn longer than this many characters (0: never).",
        ),
    ) -> None:
        """Show a graph as a tree and its samples with trained tokens highlighted per turn and cuts marked.

        Bounded by default (terminal and --html alike): --max-turns and --max-chars; every elision is marked.
        """
        from msgtrain.ingest.supplied import context_text
        from msgtrain.run.own_files import check_own_file
        from msgtrain.tools.bounds import limit
        from msgtrain.tools.inspect_cmd import inspect_input, render_inspection, write_html

        if html is not None:
            check_own_file(html, "--html", overwrite=overwrite)
        from msgtrain.tools.dataset import readable_dataset

        with readable_dataset(input_path) as local:
            ins = inspect_input(
                local,
                graph=graph,
                sample=sample,
                tokenizer=tokenizer,
                chat_template=str(chat_template) if chat_template is not None else None,
                input_format=input_format,
                context=context_text(None, system_prompt, tools),
            )
        ins.max_turns, ins.max_chars = limit(max_turns), limit(max_chars)
        console = _console()
        console.print(render_inspection(ins))
        if html is not None:
            console.print(f"HTML written to {write_html(ins, html)}")
