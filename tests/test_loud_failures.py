"""A nightly run is loud about what it could not do: unreadable inputs are counted on screen and exit 3, a Ray
address that answers nothing fails in seconds with a hint, a dead object store is named with its endpoint, Ctrl-C
at any moment prints no worker traceback, and the lock holds even when its file is deleted by hand."""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from msgtrain.run.lock import LockedError, exclusive_lock
from tests.test_nightly_safety import ENV, ROOT, make_logs, report

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def _without_file_permission_override() -> None:  # pragma: no cover - runs in the child, before exec
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def obeying_permissions() -> Callable[[], None] | None:
    """A ``preexec_fn`` under which ``chmod 000`` really denies reading: root reads anything unless its
    capabilities to override file permissions are dropped (from the bounding set, before exec); any other user
    needs nothing. Skips the test where neither is possible."""
    if os.geteuid() != 0:
        return None
    if not sys.platform.startswith("linux"):
        pytest.skip("root ignores chmod 000 and dropping its capabilities needs Linux")
    probe = subprocess.run(
        [sys.executable, "-c", "import os; os.stat('/')"], preexec_fn=_without_file_permission_override, check=False
    )
    if probe.returncode != 0:
        pytest.skip("running as root and the capabilities that ignore chmod 000 cannot be dropped here")
    return _without_file_permission_override


def test_unreadable_files_and_folders_are_counted_on_screen_and_exit_3(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 2)
    locked_dir = logs / "locked"
    locked_dir.mkdir()
    (locked_dir / "hidden.jsonl").write_text((logs / "calls-000.jsonl").read_text())
    locked_file = logs / "calls-001.jsonl"
    out = tmp_path / "out"
    preexec = obeying_permissions()
    locked_dir.chmod(0)
    locked_file.chmod(0)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "msgtrain.cli", "convert", str(logs), "-o", str(out)],
            capture_output=True,
            text=True,
            env=ENV,
            cwd=ROOT,
            preexec_fn=preexec,
            check=False,
        )
    finally:
        locked_dir.chmod(0o755)
        locked_file.chmod(0o644)
    assert proc.returncode == 3, proc.stderr
    assert "2 inputs could not be read" in proc.stderr and "Traceback" not in proc.stderr
    assert "unreadable" in proc.stderr + proc.stdout
    data = report(out)
    assert data["files"]["unreadable"] == 2 and data["files"]["read"] == 1
    reasons = {Path(i["path"]).name: i["reason"] for i in data["files"]["ignored"]}
    assert reasons["locked"].startswith("unreadable directory") and reasons["calls-001.jsonl"].startswith("unreadable")


def test_a_readable_run_still_exits_0_and_shows_zero_unreadable(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 1)
    proc = subprocess.run(
        [sys.executable, "-m", "msgtrain.cli", "convert", str(logs), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert report(tmp_path / "out")["files"]["unreadable"] == 0


# ------------------------------------------------------------------------------------------------ the lock
def test_the_lock_holds_when_its_file_is_deleted_by_hand(tmp_path: Path) -> None:
    state = tmp_path / ".out.msgtrain-state"
    with exclusive_lock(state):
        (state / "lock").unlink()
        with pytest.raises(LockedError), exclusive_lock(state):
            pass
        # Deleted again after a failed attempt recreated it: still held.
        with contextlib.suppress(FileNotFoundError):
            (state / "lock").unlink()
        with pytest.raises(LockedError), exclusive_lock(state):
            pass
    with exclusive_lock(state):  # released: the next run takes it
        pass
