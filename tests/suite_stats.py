"""What the suite costs: pytest's wall time and the peak memory of each process that ran tests, printed at the end.

Under pytest-xdist each worker reads its own peak resident set (``getrusage``) when its session ends and sends it to
the controller in ``workeroutput``; the controller prints one line per worker, and the largest subprocess a worker
waited for (the CLI tests spawn ``msgtrain``), so a suite that grows past its budget names the process that grew.

Each worker's CPU time (its own and that of the subprocesses it waited for) is printed beside its wall time: on a
machine shared with other work the wall time measures the load, while the CPU time is what the suite costs, and the
largest worker's CPU time is about the wall time the suite takes on an idle machine.

With ``MSGTRAIN_TEST_MEMLOG=<path>`` every test also appends one line (``<path>.<worker>``: node id, seconds, CPU
seconds, resident set after the test and the peak so far, in MiB): the trace to find which test file grows a
worker, or costs the most, without rerunning the suite.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import pytest

_MIB = 1024 * 1024
# ru_maxrss is in kibibytes on Linux, in bytes on macOS
_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024
_started: list[float] = []
_workers: dict[str, dict[str, float]] = {}


def _peak_mib(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss * _MAXRSS_UNIT / _MIB


def _cpu_seconds() -> float:
    """CPU seconds of this process and of the subprocesses it waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _resident_mib() -> float:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / _MIB
    except OSError:
        return _peak_mib()


def pytest_sessionstart(session: pytest.Session) -> None:
    _started.append(time.monotonic())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    log = os.environ.get("MSGTRAIN_TEST_MEMLOG")
    start, cpu = time.monotonic(), _cpu_seconds()
    yield
    if log:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        took = f"{time.monotonic() - start:.2f}\t{_cpu_seconds() - cpu:.2f}"
        line = f"{item.nodeid}\t{took}\t{_resident_mib():.0f}\t{_peak_mib():.0f}\n"
        with open(f"{log}.{worker}", "a", encoding="utf-8") as out:
            out.write(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller prints it
        workeroutput["peak_rss_mib"] = _peak_mib()
        workeroutput["peak_child_rss_mib"] = _peak_mib(resource.RUSAGE_CHILDREN)
        workeroutput["cpu_seconds"] = _cpu_seconds()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    output = getattr(node, "workeroutput", None) or {}
    if "peak_rss_mib" in output:
        _workers[node.gateway.id] = output


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if getattr(config, "workeroutput", None) is not None or not _started or config.option.collectonly:
        return
    wall = time.monotonic() - _started[0]
    write = terminalreporter.write_line
    write(f"pytest wall time: {wall:.0f} s ({wall / 60:.1f} min)")
    alone = {
        "peak_rss_mib": _peak_mib(),
        "peak_child_rss_mib": _peak_mib(resource.RUSAGE_CHILDREN),
        "cpu_seconds": _cpu_seconds(),
    }
    rows = _workers or {"the test process": alone}
    for name, output in sorted(rows.items()):
        write(
            f"{name}: peak memory {output['peak_rss_mib'] / 1024:.2f} GiB"
            f" (largest subprocess it waited for: {output['peak_child_rss_mib'] / 1024:.2f} GiB),"
            f" CPU time {output.get('cpu_seconds', 0.0):.0f} s"
        )
    log = os.environ.get("MSGTRAIN_TEST_MEMLOG")
    if log:
        write(f"per-test memory trace: {Path(log).name}.<worker>")
