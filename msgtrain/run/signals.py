"""Ctrl-C with worker processes: the main process alone handles it, at every moment of a worker's life.

A terminal's Ctrl-C sends SIGINT to every process of the job, workers included. A worker ignores it once its
initializer has run, but a worker that is still starting (the interpreter importing msgtrain, the tokenizer
loading) would die of it with a ``KeyboardInterrupt`` traceback on the terminal.

Invariants:
- A worker process is started with SIGINT blocked (:func:`sigint_deferred` around the calls that start workers:
  the signal mask is inherited through fork and exec), and unblocks it only after ignoring it
  (:func:`ignore_sigint_in_worker`, the first thing its initializer does). So no SIGINT ever reaches a worker's
  Python code, whenever it arrives.
- The main process defers a SIGINT that arrives while it starts a worker to the end of that call (milliseconds);
  it is then delivered and handled as usual (workers stopped, finished parts kept).
- SIGTERM to the main process raises :class:`Terminated`, a ``KeyboardInterrupt``: every stage unwinds as for
  Ctrl-C (workers killed and reaped, staging removed, finished parts kept for ``--resume``, exit 130), and the
  line printed names SIGTERM.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop, ``kill``), unwinding the run as Ctrl-C does."""


def what_stopped(e: BaseException) -> str:
    """How the line about an interrupted run starts."""
    return "stopped by SIGTERM" if isinstance(e, Terminated) else "interrupted"


def terminate_on_sigterm() -> None:
    """In the main process: SIGTERM raises :class:`Terminated` (where a handler can be set: the main thread)."""

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise Terminated

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, terminate)


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """For the ``with`` body: processes started in it inherit SIGINT blocked, and a SIGINT that arrives meanwhile
    is acted on when the body ends (the handler in place then runs: ``KeyboardInterrupt`` by default).

    Both are needed: the mask is per thread (a process-wide SIGINT is delivered to another thread of this process
    when this one blocks it, and Python runs its handler here anyway), and the started process copies the mask of
    the thread that starts it."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, FrameType | None]] = []
    previous_handler = signal.signal(signal.SIGINT, lambda signum, frame: caught.append((signum, frame)))
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        signal.signal(signal.SIGINT, previous_handler)
        if caught and callable(previous_handler):
            previous_handler(*caught[0])
        elif caught and previous_handler == signal.SIG_DFL:
            raise KeyboardInterrupt


def ignore_sigint_in_worker() -> None:
    """In a worker process: ignore SIGINT, then unblock it (a SIGINT pending since the worker started is dropped)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
