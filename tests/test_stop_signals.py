"""Ctrl-C and SIGTERM stop a run with workers within two seconds: every worker killed and reaped, the state kept
for ``--resume``, exit 130 and one line naming what stopped it. Real processes, real signals, timed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_LOGS, as_a_terminal_job

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
RECORDS = [json.loads(line) for line in (SAMPLE_LOGS / "calls" / "agent_calls.jsonl").read_text().splitlines()]

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc to find the run's processes")


def _busy_logs(root: Path, files: int, sessions: int) -> Path:
    """Files each worker needs seconds to convert, so that a signal finds every worker in the middle of one."""
    logs = root / "logs"
    logs.mkdir()
    for i in range(files):
        with open(logs / f"calls-{i}.jsonl", "w") as f:
            for k in range(sessions):
                f.writelines(json.dumps({**rec, "session_id": f"{i}-{k}"}) + "\n" for rec in RECORDS)
    return logs


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            try:
                kids = [int(x) for x in task.read_text().split()]
            except OSError:
                continue
            found.update(kids)
            todo += kids
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _reading(pid: int, logs: Path) -> bool:
    """Whether ``pid`` holds one of the log files open: a worker past its imports, converting that file."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if Path(os.readlink(fd)).parent == logs:
                return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize("workers", [2, 4])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_every_worker_within_two_seconds_with_one_line(
    tmp_path: Path, workers: int, sig: signal.Signals
) -> None:
    # three files a worker: one that finishes its first file before the others have opened theirs (a loaded machine
    # starts them apart) opens the next, so the moment every worker is converting one comes before the run ends
    logs = _busy_logs(tmp_path, 3 * workers, 1200)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "msgtrain.cli", "convert", str(logs), "-o", str(out), "-q", "-j", str(workers)],
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
        preexec_fn=as_a_terminal_job,
    )
    seen: set[int] = set()
    started: set[int] = set()
    deadline = time.monotonic() + 120
    # Wait until every worker has started converting (past its imports, seen with one of the files open; a file is
    # read in a moment and linearized for seconds after it is closed, and each worker has three): the signal must
    # find them busy.
    while time.monotonic() < deadline and proc.poll() is None:
        seen |= _descendants(proc.pid)
        started |= {p for p in seen if _alive(p) and _reading(p, logs)}
        if len({p for p in started if _alive(p)}) >= workers:
            break
        time.sleep(0.02)
    seen |= _descendants(proc.pid)
    assert proc.poll() is None, "the run finished before the signal: make the input larger"
    names = {p: Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in seen if _alive(p)}
    start = time.monotonic()
    if sig == signal.SIGINT:  # a terminal's Ctrl-C reaches the whole process group
        for pid in [proc.pid, *seen]:
            if _alive(pid):
                os.kill(pid, sig)
    else:  # a scheduler's SIGTERM reaches the main process alone
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - start
    assert proc.returncode == 130, err
    assert took < 2.0, f"the run took {took:.1f} s to stop"
    while any(_alive(p) for p in seen) and time.monotonic() < start + 2.0:
        time.sleep(0.02)
    alive = {p: names.get(p) for p in seen if _alive(p)}
    assert not alive, f"processes of the run still alive 2 s after the signal: {alive}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    said = "stopped by SIGTERM" if sig == signal.SIGTERM else "interrupted"
    assert lines[0].startswith(said) and "--resume" in lines[0], err
    assert "finished parts kept (" in lines[0] and f"MiB in {tmp_path / '.out.msgtrain-state' / 'parts'}" in lines[0], (
        err
    )
    assert not out.exists()
    assert (tmp_path / ".out.msgtrain-state").is_dir()  # kept for --resume
