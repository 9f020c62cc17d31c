"""Logs and datasets on object storage, converted on a Ray cluster, with real components started here: a local
S3-compatible server (moto's server mode on 127.0.0.1) and a Ray cluster of two nodes on this machine.

What is checked: bucket to bucket on two nodes gives the local engine's bytes; a worker killed mid-run is retried
and changes nothing; a driver killed mid-run leaves the published version in place and ``--resume`` finishes with
the same bytes; a second run that adds one log converts one file; a part changed after it was written is never
assembled, on the disk as in a bucket (``--resume`` recomputes it; a kept part of a gone input is dropped and named).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from benchmarks import corpus as gen
from msgtrain.errors import ConfigError, OutputError
from msgtrain.export.schema import CANONICAL_SCHEMA
from msgtrain.run import pipeline, storage
from msgtrain.run.config import ConvertConfig
from msgtrain.run.part_store import PART_FILE, REJECTS_FILE, SAMPLES_FILE, StoreParts
from msgtrain.run.parts import Job, LinearizeSettings, PartStats
from msgtrain.run.publish import state_dir
from msgtrain.run.storage import POINTER, Store, current_version, is_remote, join, version_url
from tests.conftest import ROOT
from tests.store_helpers import moto_s3, race

pytest.importorskip("moto.server", reason="needs moto's server mode: pip install 'msgtrain[store-test]'")
pytest.importorskip("s3fs", reason="needs s3fs: pip install 'msgtrain[store-test]'")

BUCKET = "msgtrain-test"


@pytest.fixture(scope="module")
def s3() -> Iterator[Store]:
    with moto_s3(BUCKET) as store:
        yield store


def _make_logs(root: Path, files: int, seed: int = 0) -> Path:
    """Generated call logs (one with two bad records) and a native graph log."""
    root.mkdir(parents=True)
    convs = gen.make_conversations(gen.synthetic_pool(seed), 6, 3 * files, reasoning=True, seed=seed)
    for k, group in enumerate(gen.spread(convs, files)):
        gen.write_calls(root / f"calls-{k:02d}.jsonl", group, model="policy")
    gen.write_native(root / "graphs.jsonl", convs[:2], model="policy")
    with open(root / "calls-00.jsonl", "a", encoding="utf-8") as f:
        f.write('{"request": {"messages": [{"role": "user"\n{"request": 1, "response": {}}\n')
    (root / "README.txt").write_text("not a log\n", encoding="utf-8")
    return root


def _upload(store: Store, root: Path, url: str) -> str:
    for p in sorted(root.rglob("*")):
        if p.is_file():
            store.upload(p, join(url, *p.relative_to(root).parts))
    return url


def _published(store: Store, out: str) -> dict[str, bytes]:
    """The files of the version ``OUT/_latest`` names, as a reader finds them."""
    version = current_version(out)
    assert version is not None, f"{out} has no published version"
    prefix = version_url(out, version)
    store.fs.invalidate_cache()
    return {url[len(prefix) + 1 :]: store.read_bytes(url) for url, _ in store.list_files(prefix)}


def _complete_parts(store: Store, out: str) -> int:
    store.fs.invalidate_cache()
    return sum(url.endswith("/part.json") for url, _ in store.list_files(join(out, "_state", "parts")))


@pytest.fixture(scope="module")
def logs(s3: Store, tmp_path_factory: pytest.TempPathFactory) -> str:
    return _upload(s3, _make_logs(tmp_path_factory.mktemp("store") / "logs", 5), f"s3://{BUCKET}/logs")


@pytest.fixture(scope="module")
def reference(s3: Store, logs: str) -> dict[str, bytes]:
    """The local engine's conversion of the bucket's logs, published to the bucket."""
    out = f"s3://{BUCKET}/reference"
    report = pipeline.convert(ConvertConfig(inputs=(logs,), output=out, workers=1, quiet=True))
    assert report["samples"]["written"] > 0 and report["records"]["rejected"] == 2
    return _published(s3, out)


def test_bucket_to_bucket_on_two_nodes_is_byte_identical_to_the_local_engine(
    s3: Store, ray_cluster: Any, logs: str, reference: dict[str, bytes]
) -> None:
    out = f"s3://{BUCKET}/ray"
    report = pipeline.convert(ConvertConfig(inputs=(logs,), output=out, engine="ray", quiet=True))
    tree = _published(s3, out)
    assert tree == reference
    assert {"report.json", "dataset_info.json", "rejects.jsonl"} <= set(tree)
    assert any(name.startswith("data/train-") for name in tree)
    # Only logs are read (README.txt is listed as ignored), and bad records name the object they came from.
    assert report["files"]["read"] == 6 and report["files"]["ignored"] == [
        {"path": f"{logs}/README.txt", "reason": "not a log file suffix"}
    ]
    rejects = [json.loads(line) for line in tree["rejects.jsonl"].decode().splitlines()]
    assert {r["file"] for r in rejects} == {f"{logs}/calls-00.jsonl"}
    assert report["outputs"]["rejects"] == join(report["published"]["path"], "rejects.jsonl")
    pointer = json.loads(s3.read_bytes(join(out, POINTER)))
    assert pointer["path"] == report["published"]["path"] == version_url(out, pointer["version"])


def _ray_task_pids(cluster: Any, name: str) -> list[int]:
    """This cluster's worker processes running a task of this name (Ray titles a busy worker ``ray::<task>``;
    workers are children of their node's raylet, listed in its ``/proc/<pid>/task/*/children``: a poll reads those
    few processes, not every process of the machine)."""
    pids = []
    for node in cluster.list_all_nodes():
        raylet = node.all_processes["raylet"][0].process.pid
        for children in Path(f"/proc/{raylet}/task").glob("*/children"):
            try:
                kids = children.read_text().split()
            except OSError:
                continue
            for kid in kids:
                try:
                    cmdline = Path(f"/proc/{kid}/cmdline").read_bytes()
                except OSError:
                    continue
                if cmdline.startswith(f"ray::{name}".encode()):
                    pids.append(int(kid))
    return pids


def test_a_worker_killed_mid_run_is_retried_and_the_output_is_unchanged(
    s3: Store, ray_cluster: Any, logs: str, reference: dict[str, bytes]
) -> None:
    out = f"s3://{BUCKET}/worker-killed"
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["report"] = pipeline.convert(ConvertConfig(inputs=(logs,), output=out, engine="ray", quiet=True))
        except BaseException as e:  # re-raised below, in the test's thread
            result["error"] = e

    driver = threading.Thread(target=run)
    driver.start()
    killed: list[int] = []
    deadline = time.time() + 120
    while not killed and driver.is_alive() and time.time() < deadline:
        for pid in _ray_task_pids(ray_cluster, "_convert_task")[:1]:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        time.sleep(0.005)
    driver.join(300)
    if "error" in result:
        raise result["error"]
    assert killed, "no conversion task was seen running"
    assert result["report"]["resume"]["converted"] == 6
    assert _published(s3, out) == reference


def test_one_task_per_shard_to_the_bucket_survives_a_killed_shard_worker(
    s3: Store, ray_cluster: Any, logs: str
) -> None:
    options: dict[str, Any] = {"rows_per_shard": 3, "split": {"validation": 0.25}, "quiet": True}
    reference = f"s3://{BUCKET}/shards-local"
    pipeline.convert(ConvertConfig(inputs=(logs,), output=reference, workers=1, **options))
    out = f"s3://{BUCKET}/shards-ray"
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["report"] = pipeline.convert(ConvertConfig(inputs=(logs,), output=out, engine="ray", **options))
        except BaseException as e:  # re-raised below, in the test's thread
            result["error"] = e

    driver = threading.Thread(target=run)
    driver.start()
    killed: list[int] = []
    deadline = time.time() + 120
    while not killed and driver.is_alive() and time.time() < deadline:
        for pid in _ray_task_pids(ray_cluster, "write_shard")[:1]:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        time.sleep(0.005)
    driver.join(300)
    if "error" in result:
        raise result["error"]
    assert killed, "no shard task was seen running"
    tree = _published(s3, out)
    assert len([name for name in tree if name.startswith("data/train-")]) >= 3
    assert any(name.startswith("data/validation-") for name in tree)
    assert tree == _published(s3, reference)


def _convert_cmd(logs: str, out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "msgtrain.cli", "convert", logs, "-o", out, "--engine", "ray", "-q", *extra]


def test_a_killed_driver_leaves_the_published_version_and_resume_finishes_with_the_same_bytes(
    s3: Store, ray_cluster: Any, tmp_path: Path
) -> None:
    local_logs = _make_logs(tmp_path / "logs", 8, seed=1)
    logs = _upload(s3, local_logs, f"s3://{BUCKET}/nightly/logs")
    out = f"s3://{BUCKET}/nightly/out"
    first = pipeline.convert(ConvertConfig(inputs=(logs,), output=out, engine="ray", quiet=True))
    last_night = _published(s3, out)
    assert first["resume"]["converted"] == 9

    # A new log arrives; tonight's run (a driver process of its own) is killed part-way.
    extra = _make_logs(tmp_path / "more", 1, seed=2) / "calls-00.jsonl"
    s3.upload(extra, join(logs, "calls-new.jsonl"))
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.address}
    proc = subprocess.Popen(_convert_cmd(logs, out), cwd=ROOT, env=env)
    # Killed once it holds the lease, has cleared last night's parts (no --resume) and finished two new ones.
    deadline = time.time() + 120
    cleared = False
    while time.time() < deadline and proc.poll() is None:
        done = _complete_parts(s3, out)
        cleared = cleared or (done < 2 and s3.exists(join(out, "_state", "lock")))
        if cleared and done >= 2:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed: make the input larger"
    assert cleared, "the run was killed before it started converting"
    assert _published(s3, out) == last_night  # readers still see last night's version, whole
    # Its lease is left behind; its process is gone from this machine, so the next run takes it over at once.
    assert json.loads(s3.read_bytes(join(out, "_state", "lock")))["pid"] == proc.pid

    resumed = pipeline.convert(ConvertConfig(inputs=(logs,), output=out, engine="ray", resume=True, quiet=True))
    assert resumed["resume"]["reused"] >= 2
    assert resumed["resume"]["reused"] + resumed["resume"]["converted"] == 10
    fresh = f"s3://{BUCKET}/nightly/fresh"
    pipeline.convert(ConvertConfig(inputs=(logs,), output=fresh, workers=1, quiet=True))
    assert _published(s3, out) == _published(s3, fresh)

    # The next night: one more log, one file converted, everything else reused.
    s3.upload(_make_logs(tmp_path / "third", 1, seed=3) / "calls-00.jsonl", join(logs, "calls-newer.jsonl"))
    again = pipeline.convert(ConvertConfig(inputs=(logs,), output=out, engine="ray", resume=True, quiet=True))
    assert again["resume"] == {"parts": 11, "reused": 10, "converted": 1}
    # Only the current version and the one before it are kept.
    store_versions = s3.children(join(out, "_versions"))
    assert len(store_versions) == 2 and again["published"]["version"] in store_versions


def _dataset(s3: Store, out: str) -> dict[str, bytes]:
    if is_remote(out):
        return _published(s3, out)
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(Path(out).rglob("*")) if p.is_file()}


@pytest.mark.parametrize("where", ["disk", "bucket", "bucket keeping no MD5"])
def test_a_part_changed_after_it_was_written_is_never_assembled_and_resume_recomputes_it(
    s3: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    logs = _make_logs(tmp_path / "logs", 2)
    out = str(tmp_path / "out") if where == "disk" else f"s3://{BUCKET}/changed-part/{where.replace(' ', '-')}"
    cfg = ConvertConfig(inputs=(str(logs),), output=out, resume=True, quiet=True)
    assert pipeline.convert(cfg)["resume"]["converted"] == 3
    want = _dataset(s3, out)
    _flip_a_byte_of_the_part_of(s3, out, logs / "calls-00.jsonl")
    if where == "bucket keeping no MD5":
        # A store whose metadata holds no MD5 of an object (an S3 multipart or SSE-KMS upload): reuse cannot check
        # the part without downloading it, so assembly does, and the run stops before publishing anything.
        monkeypatch.setattr(storage, "_metadata_hash", lambda protocol, info: None)
        version = current_version(out)
        with pytest.raises(OutputError, match="does not match its checksums") as err:
            pipeline.convert(cfg)
        assert err.value.code == "corrupt_part"
        assert current_version(out) == version and _dataset(s3, out) == want
    # Locally the files are hashed at reuse, on a store their MD5s compared with the store's: recomputed at once.
    assert pipeline.convert(cfg)["resume"] == {"parts": 3, "reused": 2, "converted": 1}
    assert _dataset(s3, out) == want


def _flipped(data: bytes) -> bytes:
    """``data`` (an Arrow file of samples) with a byte inside its token ids flipped: still a valid Arrow file of the
    canonical schema (so only the checksums can tell), with other tokens."""
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0x01
    table = ipc.open_file(pa.BufferReader(bytes(flipped))).read_all()
    assert table.schema.equals(CANONICAL_SCHEMA) and not table.equals(ipc.open_file(pa.BufferReader(data)).read_all())
    return bytes(flipped)


def _flip_a_byte_of_the_part_of(s3: Store, out: str, source: Path) -> None:
    """Flip a byte of the samples of the part converted from ``source`` (:func:`_flipped`)."""
    if is_remote(out):
        s3.fs.invalidate_cache()
        metas = [u for u, _ in s3.list_files(join(out, "_state", "parts")) if u.endswith(f"/{PART_FILE}")]
        meta = next(u for u in metas if json.loads(s3.read_bytes(u))["source"] == str(source))
        url = join(meta.rpartition("/")[0], SAMPLES_FILE)
        s3.put_bytes(url, _flipped(s3.read_bytes(url)))
        return
    metas_on_disk = (state_dir(Path(out)) / "parts").glob(f"*/{PART_FILE}")
    meta_path = next(m for m in metas_on_disk if json.loads(m.read_text())["source"] == str(source))
    path = meta_path.parent / SAMPLES_FILE
    path.write_bytes(_flipped(path.read_bytes()))


@pytest.mark.parametrize("where", ["disk", "bucket"])
def test_a_kept_part_of_a_rotated_log_that_changed_is_never_published_and_the_report_names_it(
    s3: Store, tmp_path: Path, where: str
) -> None:
    logs = _make_logs(tmp_path / "logs", 2)
    out = str(tmp_path / "out") if where == "disk" else f"s3://{BUCKET}/changed-kept-part/out"
    cfg = ConvertConfig(inputs=(str(logs),), output=out, resume=True, keep_missing=True, quiet=True)
    pipeline.convert(cfg)
    rotated = logs / "calls-01.jsonl"
    _flip_a_byte_of_the_part_of(s3, out, rotated)
    rotated.unlink()
    report = pipeline.convert(cfg)
    assert [i["path"] for i in report["files"]["ignored"] if i["reason"].startswith("unreadable")] == [str(rotated)]
    fresh = str(tmp_path / "fresh") if where == "disk" else f"s3://{BUCKET}/changed-kept-part/fresh"
    pipeline.convert(cfg.model_copy(update={"output": fresh, "keep_missing": False}))
    data = {name: blob for name, blob in _dataset(s3, out).items() if name.startswith("data/")}
    assert data == {name: blob for name, blob in _dataset(s3, fresh).items() if name.startswith("data/")}


def test_the_rejects_of_a_store_part_that_changed_are_never_read_and_the_part_is_removed(s3: Store) -> None:
    # The one read of a part that does not copy it whole: the rejects task of a dataset written one shard per task.
    parts = StoreParts(f"s3://{BUCKET}/changed-rejects/parts")
    line = '{"file": "x.jsonl", "reason": "parse_error"}\n'
    parts.write("k", {"source": "x.jsonl"}, [], PartStats(records_read=1), [line])
    assert parts.complete()("k") and parts.rejects("k") == line
    s3.put_bytes(join(parts.url, "k", REJECTS_FILE), line.replace("x.jsonl", "y.jsonl").encode())
    with pytest.raises(OutputError, match="does not match its checksums") as err:
        parts.rejects("k")
    assert err.value.code == "corrupt_part" and not parts.complete()("k")


def test_a_job_on_an_object_has_its_size_so_the_executors_start_the_largest_first(s3: Store) -> None:
    small, big = f"s3://{BUCKET}/sizes/a.jsonl", f"s3://{BUCKET}/sizes/b.jsonl"
    s3.put_bytes(small, b"{}\n")
    s3.put_bytes(big, b"{}\n" * 1000)
    jobs = [Job(url, url, {"source": url}) for url in (small, big)]
    assert [job.size for job in jobs] == [3, 3000]
    assert Job(f"s3://{BUCKET}/sizes/gone.jsonl", "k", {}).size == 0


def test_the_store_hash_is_the_content_md5_and_a_changed_object_changes_it(s3: Store) -> None:
    import hashlib

    a, b, c = (f"s3://{BUCKET}/hash/{name}" for name in ("a.jsonl", "b.jsonl", "c.jsonl"))
    s3.put_bytes(a, b"same bytes\n")
    s3.put_bytes(b, b"same bytes\n")
    s3.put_bytes(c, b"other bytes\n")
    assert s3.content_hash(a) == s3.content_hash(b) == "md5:" + hashlib.md5(b"same bytes\n").hexdigest()
    assert s3.content_hash(c) != s3.content_hash(a)


def test_a_missing_protocol_package_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = importlib.import_module("fsspec.registry")  # the module (fsspec.registry is also a mapping)
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # makes `import gcsfs` raise ImportError
    # Empty fsspec's registry in place: ``fsspec.registry.registry`` is a read-only view of this very dict, so a
    # class registered by an earlier test (gcsfs, once imported) would otherwise still be found.
    for name in list(registry._registry):
        monkeypatch.delitem(registry._registry, name)
    with pytest.raises(ConfigError, match=r"msgtrain\[gcs\]"):
        pipeline.convert(ConvertConfig(inputs=("gs://bucket/logs",), output="gs://bucket/out"))


# ------------------------------------------------------------------------------------------ the lease on OUT
def test_of_two_runs_racing_for_a_bucket_out_exactly_one_gets_the_lease(s3: Store) -> None:
    from msgtrain.run.lease import StoreLease

    for attempt in range(4):
        url = f"s3://{BUCKET}/race-{attempt}/_state/lock"
        leases = [StoreLease(url, ttl=30) for _ in range(2)]
        outcome = race(leases)
        winners = [i for i, error in outcome.items() if error is None]
        assert len(winners) == 1, outcome
        loser = outcome[1 - winners[0]]
        assert loser is not None and leases[winners[0]].run in str(loser)
        leases[winners[0]].release()
        assert not s3.exists(url)  # released: the next run starts at once


def test_a_second_run_on_a_bucket_out_exits_1_naming_the_holder(
    s3: Store, logs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from msgtrain.cli import main
    from msgtrain.run.lease import store_lock

    out = f"s3://{BUCKET}/locked"
    with store_lock(join(out, "_state"), ttl=30) as held:
        code = main(["convert", logs, "-o", out, "-q"])
        assert code == 1
        err = capsys.readouterr().err
        assert f"PID {os.getpid()}" in err and held.run in err
        assert current_version(out) is None  # nothing was written
    pipeline.convert(ConvertConfig(inputs=(logs,), output=out, workers=1, quiet=True))  # released: runs
    assert current_version(out) is not None


def test_the_lease_of_a_dead_run_is_taken_over_once_expired_and_a_live_one_is_kept_by_its_heartbeat(
    s3: Store, logs: str
) -> None:
    from msgtrain.run.lease import StoreLease
    from msgtrain.run.lock import LockedError

    out = f"s3://{BUCKET}/stale"
    lock = join(out, "_state", "lock")
    dead = {"pid": 999999, "host": "gone-node", "run": "dead", "acquired": 0, "expires": time.time() - 1}
    s3.put_bytes(lock, json.dumps(dead).encode())
    report = pipeline.convert(ConvertConfig(inputs=(logs,), output=out, workers=1, quiet=True))
    assert report["samples"]["written"] > 0 and not s3.exists(lock)

    live = StoreLease(lock, ttl=0.6)
    live.acquire()
    try:
        time.sleep(1.5)  # more than twice its time to live: only the heartbeat keeps it
        with pytest.raises(LockedError, match=live.run):
            StoreLease(lock, ttl=0.6).acquire()
    finally:
        live.release()


def test_a_run_that_lost_its_lease_does_not_publish(s3: Store) -> None:
    from msgtrain.run.lease import StoreLease
    from msgtrain.run.lock import LockedError

    lock = f"s3://{BUCKET}/lost/_state/lock"
    mine = StoreLease(lock, ttl=30)
    mine.acquire()
    try:
        # Another run took the lease over (as after this run stalled past its expiry).
        s3.put_bytes(
            lock, json.dumps({"pid": 4242, "host": "other", "run": "thief", "expires": time.time() + 60}).encode()
        )
        mine.renew()
        with pytest.raises(LockedError, match="PID 4242 on other"):
            mine.check()
    finally:
        mine.release()
    assert json.loads(s3.read_bytes(lock))["run"] == "thief"  # a lost lease is not deleted by its loser


def test_an_openhands_v1_folder_in_a_bucket_is_one_log_as_on_disk(s3: Store, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from tests.conftest import shared_path

    folder = next(p for p in shared_path("real_logs", "openhands_v1_sdk").iterdir() if p.is_dir())
    local = tmp_path / "logs"
    (local / "runs").mkdir(parents=True)
    for p in folder.rglob("*"):  # a copy beside a plain log, as a nightly prefix would hold them
        if p.is_file():
            dest = local / "runs" / folder.name / p.relative_to(folder)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(p.read_bytes())
    _make_logs(local / "calls", 1)
    prefix = _upload(s3, local, f"s3://{BUCKET}/oh-v1/logs")

    on_disk = pipeline.convert(ConvertConfig(inputs=(local,), output=tmp_path / "disk", workers=1, quiet=True))
    from_bucket = pipeline.convert(ConvertConfig(inputs=(prefix,), output=tmp_path / "bucket", workers=1, quiet=True))
    assert on_disk["files"]["read"] == from_bucket["files"]["read"] == 3  # the folder, two call logs
    assert from_bucket["records"] == on_disk["records"]
    assert from_bucket["by_policy"]["openhands"]["samples"] > 0

    def rows(root: Path) -> list[tuple[Any, ...]]:
        table = pq.read_table(next((root / "data").glob("train-*.parquet")))
        return sorted(zip(*(table[c].to_pylist() for c in ("sample_id", "input_ids", "loss_mask")), strict=True))

    assert rows(tmp_path / "bucket") == rows(tmp_path / "disk")
    sources = pq.read_table(next((tmp_path / "bucket" / "data").glob("train-*.parquet")))["source"].to_pylist()
    assert any(s.startswith(f"{prefix}/runs/{folder.name}") for s in sources)  # named by the bucket's URL
    assert any(name.startswith(f"{prefix}/runs/{folder.name}") for name in from_bucket["by_source"])


def test_a_huge_object_is_cut_into_byte_ranges_and_gives_the_unsplit_output(
    s3: Store, ray_cluster: Any, tmp_path: Path
) -> None:
    from msgtrain.run import object_chunks

    local = _make_logs(tmp_path / "logs", 6, seed=4)
    big = tmp_path / "big.jsonl"  # one object of many conversations, two bad records in the middle
    big.write_bytes(b"".join(p.read_bytes() for p in sorted(local.glob("calls-*.jsonl"))))
    url = f"s3://{BUCKET}/huge/logs/big.jsonl"
    s3.upload(big, url)
    prefix = url.rpartition("/")[0]

    whole = f"s3://{BUCKET}/huge/whole"
    unsplit = pipeline.convert(ConvertConfig(inputs=(prefix,), output=whole, workers=1, chunk_mb=0, quiet=True))
    assert unsplit["resume"]["parts"] == 1
    tiny = big.stat().st_size / 5 / (1 << 20)
    for engine, out in (("local", "split-local"), ("ray", "split-ray")):
        cfg = ConvertConfig(inputs=(prefix,), output=f"s3://{BUCKET}/huge/{out}", engine=engine, chunk_mb=tiny)
        split = pipeline.convert(cfg.model_copy(update={"workers": 1, "quiet": True}))
        assert split["resume"]["parts"] >= 4, split["resume"]
        assert split["records"] == unsplit["records"] and split["records"]["rejected"] == 2
        assert _published(s3, f"s3://{BUCKET}/huge/{out}") == _published(s3, whole)

    # A chunk's worker fetches its lines and the head, at their offsets; every other line is blank.
    chunks, view = object_chunks.plan_object(url, LinearizeSettings(None, None, (), None, None), 4096)
    assert view is not None and len(chunks) > 2
    masked = tmp_path / "masked.jsonl"
    last = chunks[-1]
    object_chunks.masked_copy(url, last, view, masked)
    original, copy = big.read_bytes(), masked.read_bytes()
    assert len(copy) == len(original) and copy.count(b"\n") == original.count(b"\n")
    kept = [(start, end) for start, end, _ in last.runs] + [(0, view.head_end)]
    assert all(copy[s:e] == original[s:e] for s, e in kept)
    fetched = sum(e - s for s, e in kept)
    assert fetched < len(original) / 2
    pos = 0
    for line in copy.splitlines(keepends=True):
        inside = any(s <= pos < e for s, e in kept)
        assert inside or not line.strip(), (pos, line[:80])
        pos += len(line)


def test_an_empty_result_does_not_replace_a_bucket_dataset_with_samples_unless_asked(s3: Store, tmp_path: Path) -> None:
    from msgtrain.errors import OutputError

    logs = _upload(s3, _make_logs(tmp_path / "logs", 1), f"s3://{BUCKET}/empty-in")
    out = f"s3://{BUCKET}/empty-out"
    assert pipeline.convert(ConvertConfig(inputs=(logs,), output=out, quiet=True))["samples"]["written"] > 0
    version = current_version(out)
    # Records convert, but no turn of this policy exists: no samples (a wrong --policy, a wrong template).
    nobody = ConvertConfig(inputs=(logs,), output=out, policies=("nobody",), quiet=True)
    with pytest.raises(OutputError, match="refusing to replace") as err:
        pipeline.convert(nobody)
    assert err.value.code == "empty_result"
    assert current_version(out) == version
    pipeline.convert(nobody.model_copy(update={"allow_empty": True}))
    assert current_version(out) != version
