"""Nightly safety as users meet it: what -o may replace, OUT during a publish, resume by content, one run at a
time, honest exit codes, and what Ctrl-C / SIGTERM / SIGKILL leave behind. Runs go through the CLI (in process
where no signal is involved, else a subprocess)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from msgtrain.cli import main
from msgtrain.run.assembly import check_accounting
from msgtrain.run.part_store import is_complete
from msgtrain.run.publish import MARKER, clean_litter, publish, staging_dir, versions_dir
from tests.conftest import ROOT, SAMPLE_LOGS, as_a_terminal_job

GOOD_CALLS = (SAMPLE_LOGS / "calls" / "agent_calls.jsonl").read_text().splitlines()
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def run(*args: str) -> int:
    return main(["convert", *args, "-q"])


def report(out: Path) -> dict[str, Any]:
    data = json.loads((out / "report.json").read_text())
    check_accounting(data)
    return data


def samples(out: Path) -> int:
    return sum(pq.read_metadata(f).num_rows for f in (out / "data").glob("*.parquet"))


def make_logs(root: Path, n: int, name: str = "logs") -> Path:
    logs = root / name
    logs.mkdir(parents=True)
    records = [json.loads(line) for line in GOOD_CALLS]
    for i in range(n):
        with open(logs / f"calls-{i:03d}.jsonl", "w") as f:
            for k in range(4):
                for rec in records:
                    f.write(json.dumps({**rec, "session_id": f"{name}-{i}-{k}"}) + "\n")
    return logs


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "msgtrain.cli", "convert", *args, "-q"]


# ------------------------------------------------------------------------------------------------ what OUT may be
def test_a_directory_msgtrain_did_not_write_is_refused_and_kept_unless_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = make_logs(tmp_path, 1)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    assert run(str(logs), "-o", str(mine)) == 2
    err = capsys.readouterr().err
    assert "did not write" in err and "--overwrite" in err and "Traceback" not in err
    assert (mine / "thesis.tex").read_text() == "years of work"
    assert run(str(logs), "-o", str(mine), "--overwrite") == 0
    assert not (mine / "thesis.tex").exists() and samples(mine) > 0
    # Once msgtrain wrote it, it is msgtrain's: the next run replaces it without --overwrite.
    assert run(str(logs), "-o", str(mine)) == 0


def test_an_empty_directory_or_an_older_msgtrain_output_is_replaced(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 1)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(str(logs), "-o", str(empty)) == 0
    legacy = tmp_path / "legacy"  # a plain directory an older msgtrain published: report.json, no marker
    (legacy / "data").mkdir(parents=True)
    (legacy / "report.json").write_text(json.dumps({"msgtrain_version": "0.1.0"}))
    assert run(str(logs), "-o", str(legacy)) == 0
    assert legacy.is_symlink() and (legacy / MARKER).is_file() and samples(legacy) > 0


@pytest.mark.parametrize("where", ["input", "ancestor", "dot", "root", "cwd", "above cwd"])
def test_out_is_never_an_input_an_ancestor_of_one_the_working_directory_or_above_or_the_root(
    tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = make_logs(tmp_path / "work", 1)
    monkeypatch.chdir(tmp_path / "work")
    out = {
        "input": str(logs),
        "ancestor": str(tmp_path / "work"),
        "dot": ".",
        "root": "/",
        "cwd": str(tmp_path / "work"),
        "above cwd": str(tmp_path),
    }[where]
    before = sorted(p.name for p in (tmp_path / "work").iterdir())
    assert run("logs", "-o", out, "--overwrite") == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "Traceback" not in err
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == before  # nothing written, nothing deleted
    assert sorted(p.name for p in logs.iterdir()) == ["calls-000.jsonl"]


def test_an_out_below_a_file_is_one_red_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = make_logs(tmp_path, 1)
    (tmp_path / "afile").write_text("x")
    assert run(str(logs), "-o", str(tmp_path / "afile" / "sub")) == 1
    err = capsys.readouterr().err
    assert "is a file" in err and "Traceback" not in err


# ------------------------------------------------------------------------------------------------ publish
def _staged(out: Path, tag: str) -> Path:
    staged = staging_dir(out)
    (staged / "report.json").write_text(json.dumps({"msgtrain_version": "t", "tag": tag}))
    return staged


@pytest.mark.parametrize("mode", ["symlink", "rename"])
def test_out_exists_at_every_instant_of_repeated_publishes(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MSGTRAIN_PUBLISH", mode)
    out = tmp_path / "out"
    publish(_staged(out, "first"), out)
    missing: list[int] = []
    seen: set[str] = set()
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            try:
                seen.add(json.loads((out / "report.json").read_text())["tag"])
            except (OSError, ValueError):
                missing.append(1)

    poller = threading.Thread(target=poll)
    poller.start()
    for i in range(60):
        publish(_staged(out, f"v{i}"), out)
    stop.set()
    poller.join()
    assert json.loads((out / "report.json").read_text())["tag"] == "v59"
    if mode == "symlink":
        assert out.is_symlink() and not missing, f"OUT was missing {len(missing)} times"
        # The current and the previous version are kept (a reader may still be in the previous one); no more.
        assert len(list(versions_dir(out).iterdir())) == 2
    assert len(seen) > 1


def test_a_fallback_publish_killed_between_its_renames_is_restored_and_litter_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("MSGTRAIN_PUBLISH", "rename")
    first = staging_dir(out)
    (first / "report.json").write_text(json.dumps({"msgtrain_version": "t", "tag": "previous"}))
    publish(first, out)
    second = staging_dir(out)
    (second / "report.json").write_text(json.dumps({"msgtrain_version": "t", "tag": "next"}))
    real_replace = os.replace

    def killed_before_the_second_rename(src: Any, dst: Any) -> None:
        if Path(dst) == out:
            raise KeyboardInterrupt  # the run dies with the previous dataset moved aside, the new one not in
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_before_the_second_rename)
    with pytest.raises(KeyboardInterrupt):
        publish(second, out)
    monkeypatch.setattr(os, "replace", real_replace)
    assert not out.exists() and any(p.name.startswith(".out.old-") for p in tmp_path.iterdir())
    (versions_dir(out) / ".tmp-0-4242").mkdir()  # a staging directory of a run killed while assembling
    clean_litter(out)
    assert json.loads((out / "report.json").read_text())["tag"] == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.msgtrain-state", ".out.msgtrain-versions", "out"]
    assert [p.name for p in versions_dir(out).iterdir()] == [second.name.removeprefix(".tmp-")]


# ------------------------------------------------------------------------------------------------ resume by content
def test_resume_identifies_files_by_content_not_by_spelling_moves_or_overlaps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = make_logs(tmp_path, 3)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert run("logs", "-o", "out", "--resume") == 0
    n = samples(out)
    assert run(str(logs.resolve()), "-o", str(out), "--resume") == 0
    assert samples(out) == n
    assert run("logs", str(logs / "calls-000.jsonl"), "-o", "out", "--resume") == 0  # overlapping inputs
    assert samples(out) == n
    (logs / "moved").mkdir()
    shutil.move(logs / "calls-001.jsonl", logs / "moved" / "renamed.jsonl")
    assert run("logs", "-o", "out", "--resume") == 0
    assert samples(out) == n
    assert report(out)["files"]["read"] == 3
    assert len(list((tmp_path / ".out.msgtrain-state" / "parts").iterdir())) == 3  # one part per content


def test_the_published_dataset_is_this_runs_inputs_unless_keep_missing(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 3)
    out = tmp_path / "out"
    assert run(str(logs), "-o", str(out), "--resume") == 0
    three = samples(out)
    (logs / "calls-002.jsonl").unlink()  # a rotated log
    assert run(str(logs), "-o", str(out), "--resume", "--keep-missing") == 0
    assert samples(out) == three
    assert run(str(logs), "-o", str(out), "--resume") == 0
    assert samples(out) == three * 2 // 3
    assert report(out)["files"]["read"] == 2


def test_corrupt_manifest_and_truncated_parts_are_recomputed_not_fatal(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 3)
    out = tmp_path / "out"
    assert run(str(logs), "-o", str(out), "--resume") == 0
    want = (out / "data" / "train-00000-of-00001.parquet").read_bytes()
    state = tmp_path / ".out.msgtrain-state"
    manifest = state / "manifest.json"
    manifest.write_text(manifest.read_text()[:40])
    parts = sorted((state / "parts").iterdir())
    arrow = parts[0] / "samples.arrow"
    arrow.write_bytes(arrow.read_bytes()[:100])
    (parts[1] / "part.json").write_text("{")
    intact = (parts[2] / "part.json").stat().st_mtime_ns
    assert run(str(logs), "-o", str(out), "--resume") == 0
    assert (out / "data" / "train-00000-of-00001.parquet").read_bytes() == want
    assert all(is_complete(p) for p in parts)
    assert (parts[2] / "part.json").stat().st_mtime_ns == intact  # the intact part was reused


# ------------------------------------------------------------------------------------------------ one run at a time
HOLD_LOCK = """
import sys, time
from pathlib import Path
from msgtrain.run.lock import exclusive_lock
with exclusive_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_run_on_the_same_out_exits_1_naming_the_holder_and_a_dead_holders_lock_is_taken_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = make_logs(tmp_path, 1)
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path / ".out.msgtrain-state")],
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert run(str(logs), "-o", str(out)) == 1
        err = capsys.readouterr().err
        assert f"PID {holder.pid}" in err and "Traceback" not in err
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    # The holder died (SIGKILL) without unlocking; its lock file still names it. The next run takes over.
    assert str(holder.pid) in (tmp_path / ".out.msgtrain-state" / "lock").read_text()
    assert run(str(logs), "-o", str(out)) == 0


# ------------------------------------------------------------------------------------------------ exit codes
@pytest.mark.parametrize(
    "args",
    [
        ["IN"],
        ["-o", "OUT"],
        ["IN", "-o", "OUT", "--workers", "0"],
        ["IN", "-o", "OUT", "--chunk-mb", "-1"],
        ["IN", "-o", "OUT", "--max-length", "-5"],
        ["IN", "-o", "OUT", "--split", "validation=2"],
        ["IN", "-o", "OUT", "--keep-missing"],
        ["IN", "-o", "OUT", "--chat-template", "NOT_A_TEMPLATE"],
        ["IN", "-o", "OUT", "--chat-template", "JSON_LIST"],
        ["IN", "-o", "OUT", "--chat-template", "BINARY"],
    ],
)
def test_usage_errors_exit_2_with_one_line(tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    logs = make_logs(tmp_path, 1)
    (tmp_path / "notes.txt").write_text("just some notes, not a template\n")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "blob.jinja").write_bytes(b"\xff\xfe\x00garbage")
    names = {
        "IN": str(logs),
        "OUT": str(tmp_path / "out"),
        "NOT_A_TEMPLATE": str(tmp_path / "notes.txt"),
        "JSON_LIST": str(tmp_path / "list.json"),
        "BINARY": str(tmp_path / "blob.jinja"),
    }
    assert run(*[names.get(a, a) for a in args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip()
    assert not (tmp_path / "out").exists()


def test_an_empty_result_does_not_replace_a_dataset_unless_asked(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 1)
    out = tmp_path / "out"
    assert run(str(logs), "-o", str(out)) == 0
    n = samples(out)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "bad.jsonl").write_text("{broken\n")
    assert run(str(junk), "-o", str(out)) == 1
    assert samples(out) == n
    assert run(str(junk), "-o", str(out), "--allow-empty") == 3
    assert samples(out) == 0


def test_disk_full_is_one_red_line(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this platform")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "bad.jsonl").write_text("{broken\n" + GOOD_CALLS[0] + "\n")
    # /dev/full answers every write with ENOSPC, as a full disk does.
    proc = subprocess.run(
        cli(str(junk), "-o", str(tmp_path / "out"), "--rejects", "/dev/full"),
        capture_output=True,
        text=True,
        env=ENV,
        cwd=ROOT,
    )
    assert proc.returncode == 1, proc.stderr
    assert "ENOSPC" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2


@pytest.fixture
def small_mount(tmp_path: Path) -> Any:
    """Mount a tmpfs of the given options under tmp_path (real kernel errors: EROFS, ENOSPC); skip where the
    platform does not let the tests mount (not Linux, not root, no mount namespace rights)."""
    mounted: list[Path] = []

    def mount(name: str, options: str) -> Path:
        point = tmp_path / name
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode(errors='replace').strip()})")
        mounted.append(point)
        return point

    if sys.platform != "linux" or os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs Linux and root")
    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def _one_red_line(proc: subprocess.CompletedProcess[str], code: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert code in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2, proc.stderr


def test_a_read_only_out_is_one_red_line(tmp_path: Path, small_mount: Any) -> None:
    read_only = small_mount("ro", "ro,size=1m")
    proc = subprocess.run(
        cli(str(SAMPLE_LOGS / "calls"), "-o", str(read_only / "out")), capture_output=True, text=True, env=ENV, cwd=ROOT
    )
    _one_red_line(proc, "EROFS")


def test_a_disk_that_fills_mid_run_is_one_red_line_and_leaves_no_dataset(tmp_path: Path, small_mount: Any) -> None:
    small = small_mount("small", "size=48k")
    out = small / "out"
    proc = subprocess.run(cli(str(SAMPLE_LOGS), "-o", str(out)), capture_output=True, text=True, env=ENV, cwd=ROOT)
    _one_red_line(proc, "ENOSPC")
    assert not out.exists()  # nothing half-written was published


def test_permission_denied_by_the_kernel_is_one_red_line(tmp_path: Path) -> None:
    # Root passes every permission bit, but sysfs refuses new entries to everyone: a real EPERM from the kernel.
    if not Path("/sys/kernel").is_dir():
        pytest.skip("no sysfs on this platform")
    proc = subprocess.run(
        cli(str(SAMPLE_LOGS / "calls"), "-o", "/sys/msgtrain-out"), capture_output=True, text=True, env=ENV, cwd=ROOT
    )
    assert proc.returncode == 1, proc.stderr
    assert ("EPERM" in proc.stderr or "EACCES" in proc.stderr) and "Traceback" not in proc.stderr, proc.stderr


def test_every_reject_has_a_hint(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = [*GOOD_CALLS, "{broken", '{"request": 7}', "[" * 200 + "]" * 200, '"just a string"']
    (logs / "mixed.jsonl").write_text("\n".join(lines) + "\n")
    (logs / "unknown.json").write_text('{"what": "is this"}')
    (logs / "bad.yaml").write_text("a: [unclosed\n")
    out = tmp_path / "out"
    assert run(str(logs), "-o", str(out)) == 3
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert len(rejects) >= 4
    assert all(r["hint"] for r in rejects), [r for r in rejects if not r["hint"]]


def test_max_reject_rate_is_judged_on_the_run_not_on_a_bad_first_file(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 30)
    bad = [line.replace('"role": "user"', '"role": "hacker"') for line in GOOD_CALLS]
    assert bad != GOOD_CALLS
    (logs / "a-bad.jsonl").write_text("\n".join(bad * 20) + "\n")  # sorted first: converted first
    out = tmp_path / "out"
    assert run(str(logs), "-o", str(out), "--max-reject-rate", "0.2") == 3  # 60 of 420 records: 14%
    assert run(str(logs), "-o", str(out), "--max-reject-rate", "0.1") == 1


def test_unreadable_directories_symlink_loops_and_dangling_links_are_listed_with_a_reason(tmp_path: Path) -> None:
    logs = make_logs(tmp_path, 1)
    (logs / "loop").symlink_to(logs, target_is_directory=True)
    (logs / "self").symlink_to(logs / "self")
    (logs / "dangling.jsonl").symlink_to(tmp_path / "gone.jsonl")
    (logs / "README.txt").write_text("notes")
    locked = logs / "locked"
    locked.mkdir()
    out = tmp_path / "out"
    locked.chmod(0)
    try:
        assert run(str(logs), "-o", str(out)) == 3  # inputs that cannot be read: exit 3, as rejects
    finally:
        locked.chmod(0o755)
    ignored = {Path(i["path"]).name: i["reason"] for i in report(out)["files"]["ignored"]}
    assert ignored["loop"] == "symlink loop"  # a link to a folder being walked: its files are read once
    assert ignored["self"] == "unreadable: symlink loop"
    assert ignored["dangling.jsonl"] == f"unreadable: dangling symlink (to {tmp_path / 'gone.jsonl'})"
    assert ignored["README.txt"] == "not a log file suffix"
    if os.geteuid() != 0:  # root reads any directory
        assert ignored["locked"].startswith("unreadable directory")


# ------------------------------------------------------------------------------------------------ signals
def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(x) for x in task.read_text().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start_with_workers(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    logs = make_logs(tmp_path, 40)
    proc = subprocess.Popen(
        cli(str(logs), "-o", str(tmp_path / "out"), "--resume", "-j", "2"),
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=ROOT,
        preexec_fn=as_a_terminal_job,
    )
    parts = tmp_path / ".out.msgtrain-state" / "parts"
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if parts.exists() and any(not p.name.startswith(".") for p in parts.iterdir()):
            break
        time.sleep(0.02)
    workers = [c for c in _children(proc.pid) if _alive(c)]
    assert proc.poll() is None and workers, "the run finished before the signal: make the input larger"
    return proc, workers


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc to find worker processes")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_with_workers_stops_them_without_tracebacks(tmp_path: Path, sig: signal.Signals) -> None:
    proc, workers = _start_with_workers(tmp_path)
    # A terminal's Ctrl-C reaches the whole process group; a scheduler's SIGTERM only the main process.
    if sig == signal.SIGINT:
        for pid in [proc.pid, *workers]:
            os.kill(pid, sig)
    else:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "--resume" in err
    assert _gone_within(workers, 10)
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc to find worker processes")
def test_sigkill_of_the_main_process_leaves_no_worker_alive(tmp_path: Path) -> None:
    proc, workers = _start_with_workers(tmp_path)
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone_within(workers, 10), "workers outlived the killed run"


# ------------------------------------------------------------------------------------------------ absurd inputs
def _alias_bomb(levels: int) -> str:
    lines = [
        "interactions:",
        "- request:",
        "    method: POST",
        "    uri: https://api.openai.com/v1/chat/completions",
        "    body: &a0 [" + ",".join(['"lol"'] * 9) + "]",
    ]
    lines += [f"    h{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    lines.append(f"  response: {{status: {{code: 200}}, body: *a{levels - 1}}}")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    from msgtrain.run.parts import LinearizeSettings, convert_file

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_alias_bomb(10))  # ~660 bytes naming 9**10 (3.5 billion) strings
    for forced in (None, "cassettes"):
        settings = LinearizeSettings(None, None, (), None, forced)
        started = time.process_time()
        _, stats, rejects = convert_file(bomb, settings)
        assert time.process_time() - started < 10
        assert stats.records_rejected == {"yaml_alias_bomb": 1}, rejects


def test_yaml_with_ordinary_aliases_loads_as_safe_load_does() -> None:
    import io

    import yaml

    from msgtrain.ingest.core.yaml_documents import load_yaml_bounded

    text = "common: &h {accept: json}\na: {headers: *h}\nb: {headers: *h, list: [*h, *h]}\nself: &s [1, 2]\n"
    assert load_yaml_bounded(io.StringIO(text), "t") == yaml.safe_load(text)
    recursive = "a: &r [1, *r]\n"
    with pytest.raises(Exception, match="infinitely many"):
        load_yaml_bounded(io.StringIO(recursive), "t")


def test_a_run_that_reads_nothing_publishes_nothing_and_names_the_first_reject(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "bad.jsonl").write_text("not json\n")
    out = tmp_path / "out"
    assert run(str(junk), "-o", str(out)) == 1
    err = capsys.readouterr().err
    assert "read nothing" in err and "bad.jsonl" in err and "--allow-empty" in err
    assert not out.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(str(empty), "-o", str(out)) == 1
    assert "no log file found" in capsys.readouterr().err
    assert not out.exists()
