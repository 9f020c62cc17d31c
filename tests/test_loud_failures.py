"""A nightly run is loud about what it could not do: unreadable inputs are counted on screen and exit 3, a Ray
address that answers nothing fails in seconds with a hint, a dead object store is named with its endpoint, Ctrl-C
at any moment prints no worker traceback, and the lock holds even when its file is deleted by hand."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from msgtrain.run.lock import LockedError, exclusive_lock
from tests.conftest import as_a_terminal_job
from tests.test_nightly_safety import ENV, ROOT, make_logs, report

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def convert_cli(
    *args: str, env: dict[str, str] = ENV, preexec: Callable[[], None] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """``msgtrain convert ARGS`` as a user runs it: a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "msgtrain.cli", "convert", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        preexec_fn=preexec,
        timeout=timeout,
        check=False,
    )


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
        proc = convert_cli(str(logs), "-o", str(out), preexec=preexec)
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
    from msgtrain.cli import main

    # In this process: what is checked is the exit code and the count (the run above needs a process of its own
    # only to drop root's capabilities to override permissions).
    logs = make_logs(tmp_path, 1)
    assert main(["convert", str(logs), "-o", str(tmp_path / "out"), "-q"]) == 0
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


# ------------------------------------------------------------------------------------------------ Ctrl-C
def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found += [int(x) for x in task.read_text().split()]
    return found


def _starting_worker(pid: int) -> bool:
    """A worker process of ``pid`` has been exec'd and is starting (importing, before its initializer)."""
    for child in _children(pid):
        with contextlib.suppress(OSError):
            if b"multiprocessing" in Path(f"/proc/{child}/cmdline").read_bytes():
                return True
    return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc to see worker processes start")
@pytest.mark.parametrize("delay", [0.0, 0.1, 0.3])
def test_ctrl_c_while_workers_start_prints_no_traceback(tmp_path: Path, delay: float) -> None:
    logs = make_logs(tmp_path, 12)
    proc = subprocess.Popen(
        [sys.executable, "-m", "msgtrain.cli", "convert", str(logs), "-o", str(tmp_path / "out"), "-j", "2", "-q"],
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
        start_new_session=True,  # its own process group, as a terminal's job
        preexec_fn=as_a_terminal_job,
    )
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and not _starting_worker(proc.pid):
        time.sleep(0.002)
    assert proc.poll() is None, "the run ended before its workers started"
    time.sleep(delay)  # the worker is importing msgtrain (about a second)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches every process of the terminal's job
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert proc.returncode == 130, err
    assert "--resume" in err


# ------------------------------------------------------------------------------------------------ Ray, stores
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_without_ray_address_a_new_local_ray_is_started_never_one_found_in_rays_temp_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'msgtrain[ray]')")
    from msgtrain.run.ray_engine import ray_session

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    asked: list[object] = []

    def init(address: object = None, **kwargs: object) -> None:
        asked.append(address)
        raise RuntimeError("not started in this test")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(RuntimeError), ray_session():
        pass
    # None would let Ray attach to the address a dead `ray start` left in /tmp/ray, and retry it for minutes.
    assert asked == ["local"]


def test_a_ray_address_that_answers_nothing_fails_in_seconds_with_a_hint(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray is not installed (pip install 'msgtrain[ray]')")
    logs = make_logs(tmp_path, 1)
    address = f"127.0.0.1:{_closed_port()}"
    started = time.time()
    # timeout: the bug was Ray retrying such an address for minutes
    proc = convert_cli(
        str(logs), "-o", str(tmp_path / "out"), "--engine", "ray", env={**ENV, "RAY_ADDRESS": address}, timeout=90
    )
    assert proc.returncode == 2, proc.stderr
    assert f"no Ray cluster answers at {address}" in proc.stderr and "unset it" in proc.stderr
    assert "Traceback" not in proc.stderr and time.time() - started < 60


def test_an_object_store_that_cannot_be_reached_is_named_with_its_endpoint(tmp_path: Path) -> None:
    pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'msgtrain[s3]')")
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    env = {**ENV, "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    env["AWS_MAX_ATTEMPTS"] = "1"  # botocore's retries only make the test slower
    for args in (["s3://bucket/logs", "-o", str(tmp_path / "out")], [str(make_logs(tmp_path, 1)), "-o", "s3://b/o"]):
        proc = convert_cli(*args, "-q", env=env, timeout=120)
        assert proc.returncode == 1, proc.stderr
        assert f"cannot connect to the s3:// store at {endpoint}" in proc.stderr, proc.stderr
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
