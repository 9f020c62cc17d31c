"""The msgtrain command line: a thin layer over the stage modules.

It parses options, builds a config, calls the stages, and turns msgtrain's own exceptions into one red,
actionable line and a non-zero exit code, in one place (:func:`main`). Nothing imports this module.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape

from msgtrain.errors import ConfigError, MsgtrainError, os_error_line

app = typer.Typer(
    name="msgtrain",
    help="Turn logged LLM-agent conversations into token-exact SFT / RL training data.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)

# The exit codes of every command (README, "Exit codes"): one table, mapped here and nowhere else but the
# commands' own "finished, with problems" (3).
EXIT_OK = 0
EXIT_FATAL = 1
EXIT_USAGE = 2
EXIT_PROBLEMS = 3  # convert finished with rejects; validate found problems; audit-template found a failing property
EXIT_INTERRUPTED = 130
EXIT_WITH_REJECTS = EXIT_PROBLEMS
# msgtrain's errors that are the caller's to fix, besides ConfigError: an input that does not exist, an option
# that needs an optional extra this installation lacks.
USAGE_CODES = frozenset({"missing_input", "missing_dependency"})


def _print_version(value: bool) -> None:
    if value:
        from msgtrain import __version__

        typer.echo(f"msgtrain {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print msgtrain's version and exit.", is_eager=True, callback=_print_version
    ),
) -> None:
    """Turn logged LLM-agent conversations into token-exact SFT / RL training data."""


_registered = False


def _register_commands() -> None:
    """Attach every command to ``app`` (once; the command modules stay importable on their own)."""
    global _registered
    if _registered:
        return
    from msgtrain import cli_convert, cli_tools

    cli_convert.register(app)
    cli_tools.register(app)
    _registered = True


def _click_exceptions() -> tuple[type[Exception], ...]:
    """Usage-error classes: click's, and the copy of click that typer >= 0.20 vendors as ``typer._click``."""
    classes: list[type[Exception]] = []
    try:
        import click

        classes.append(click.ClickException)
    except ImportError:
        pass
    try:
        from typer._click.exceptions import ClickException  # type: ignore[import-not-found,unused-ignore]

        classes.append(ClickException)
    except ImportError:
        pass
    return tuple(classes)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; map msgtrain's errors to one red line and the exit code of the README's table."""
    _register_commands()
    import logging

    # gcsfs logs every exhausted retry with its traceback on stderr; the error that ends the run is said once, below.
    logging.getLogger("gcsfs").setLevel(logging.CRITICAL)
    try:
        # The program's name, whatever runs it (``python -m msgtrain``, a test): completion scripts are keyed by it.
        rv = app(args=argv, prog_name="msgtrain", standalone_mode=False)
    except MsgtrainError as e:
        if e.code == "interrupted":
            err_console.print(f"[yellow]{escape(str(e))}[/]", highlight=False, soft_wrap=True)
            return EXIT_INTERRUPTED
        # escape: messages quote user text and hints like "pip install 'msgtrain[plot]'"; rich would eat "[plot]".
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        _print_notes(e)
        # A bad option or config value, an input that is not there, an option whose extra is not installed, or an
        # OUT that must not be replaced, is the user's call to fix: usage.
        return EXIT_USAGE if isinstance(e, ConfigError) or e.code in USAGE_CODES else EXIT_FATAL
    except typer.Exit as e:
        return int(e.exit_code)
    except SystemExit as e:  # typer's --show-completion / --install-completion end with sys.exit
        return e.code if isinstance(e.code, int) else (EXIT_OK if e.code is None else EXIT_FATAL)
    except (typer.Abort, KeyboardInterrupt) as e:
        from msgtrain.run.signals import what_stopped

        err_console.print(f"[yellow]{what_stopped(e)}[/]")
        return EXIT_INTERRUPTED
    except OSError as e:  # the system refused (disk full, read-only, permission): one line, not a traceback
        err_console.print(f"[bold red]error:[/] {escape(os_error_line(e))}", highlight=False, soft_wrap=True)
        _print_notes(e)
        return EXIT_FATAL
    except Exception as e:  # click's usage errors arrive here in standalone_mode=False
        if isinstance(e, _click_exceptions()):
            e.show()  # type: ignore[attr-defined]
            return EXIT_USAGE
        return _internal_error(e)
    return rv if isinstance(rv, int) else EXIT_OK


def _internal_error(e: Exception) -> int:
    """A bug escaped every stage: one red line pointing at the traceback, which goes to the debug log, never to
    the terminal."""
    import traceback

    from msgtrain.ingest.faults import default_debug_log

    log = default_debug_log()
    try:
        with open(log, "a", encoding="utf-8", errors="replace") as f:
            f.write(f"--- internal error\n{traceback.format_exc()}")
        where = f"traceback in {log}"
    except OSError:
        where = "the traceback could not be written"
    text = f"internal error: {type(e).__name__}: {e} ({where}; please report it with the input that caused it)"
    err_console.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)
    return EXIT_FATAL


def _print_notes(e: BaseException) -> None:
    """What a stage added to the error that ends the run (``add_note``: e.g. where a failed run's parts are kept)."""
    for note in getattr(e, "__notes__", ()):
        err_console.print(escape(str(note)), highlight=False, soft_wrap=True)


def run() -> None:
    """The console script: :func:`main`, then an exit without tearing the interpreter down.

    A ``convert`` has imported transformers, pyarrow and datasets (with pandas), some 1,500 modules; tearing them
    down at exit cost 0.45 s after all work was done (a third of a small conversion's wall time). When ``main`` has
    returned, every output is closed and published, so this runs what was registered with :mod:`atexit` (logging,
    multiprocessing, temporary directories, Ray), flushes standard output and error, and leaves with ``os._exit``.
    Where a non-daemon thread still runs, the normal exit (which waits for it) is taken instead. Before ``main``,
    the process's allocators are tuned to give freed large buffers back (:mod:`msgtrain.run.allocators`).
    """
    from msgtrain.run.allocators import tune_allocators

    tune_allocators()
    code = main()
    import atexit
    import contextlib
    import os
    import threading

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # A closed pipe (``msgtrain ... | head``): nothing more can be written.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
