"""``gs://`` inputs and OUT against a real GCS API server started here: gcp-storage-emulator (pure Python) on
127.0.0.1, reached by gcsfs through ``STORAGE_EMULATOR_HOST`` as it would reach Google's endpoint.

Checked: bucket to bucket, content hashes from GCS's ``md5Hash`` (a rerun with ``--resume`` converts nothing and
publishes the same bytes), a huge object cut into chunks read with GCS range requests (same bytes as unsplit), and
the lease on a store without conditional writes here (write, settle, read back).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import corpus as gen
from msgtrain.run import pipeline
from msgtrain.run.config import ConvertConfig
from msgtrain.run.storage import Store, current_version, join, version_url

pytest.importorskip("gcp_storage_emulator", reason="needs gcp-storage-emulator: pip install 'msgtrain[store-test]'")
pytest.importorskip("gcsfs", reason="needs gcsfs: pip install 'msgtrain[store-test]'")

BUCKET = "msgtrain-gcs-test"


@pytest.fixture(scope="module")
def gcs() -> Iterator[Store]:
    import fsspec
    import gcsfs.core
    from gcp_storage_emulator.server import create_server

    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    server.start()
    env = {
        "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}",
        "NO_GCE_CHECK": "true",  # no probe of a GCE metadata server: credentials fall through to anonymous
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    # gcsfs's default class asks a gRPC control API for the bucket layout (zonal / hierarchical buckets), which
    # the emulator does not serve; the plain JSON-API class is what talks to it.
    previous = fsspec.registry.get("gs")
    fsspec.register_implementation("gs", gcsfs.core.GCSFileSystem, clobber=True)
    gcsfs.core.GCSFileSystem.clear_instance_cache()
    try:
        yield Store.of(f"gs://{BUCKET}")
    finally:
        if previous is not None:
            fsspec.register_implementation("gs", previous, clobber=True)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        gcsfs.core.GCSFileSystem.clear_instance_cache()
        server.stop()


def _published(store: Store, out: str) -> dict[str, bytes]:
    version = current_version(out)
    assert version is not None
    prefix = version_url(out, version)
    return {url[len(prefix) + 1 :]: store.read_bytes(url) for url, _ in store.list_files(prefix)}


def test_bucket_to_bucket_on_gcs_with_hashes_from_the_store(gcs: Store, tmp_path: Path) -> None:
    root = tmp_path / "logs"
    root.mkdir()
    convs = gen.make_conversations(gen.synthetic_pool(5), 4, 6, reasoning=True, seed=5)
    for k, group in enumerate(gen.spread(convs, 3)):
        gen.write_calls(root / f"calls-{k}.jsonl", group, model="policy")
    for p in sorted(root.iterdir()):
        gcs.upload(p, f"gs://{BUCKET}/logs/{p.name}")
    first = root / "calls-0.jsonl"
    assert gcs.content_hash(f"gs://{BUCKET}/logs/calls-0.jsonl") == "md5:" + hashlib.md5(first.read_bytes()).hexdigest()

    out = f"gs://{BUCKET}/out"
    cfg = ConvertConfig(inputs=(f"gs://{BUCKET}/logs",), output=out, workers=1, quiet=True)
    report = pipeline.convert(cfg)
    assert report["files"]["read"] == 3 and report["samples"]["written"] > 0
    tree = _published(gcs, out)
    assert {"report.json", "dataset_info.json"} <= set(tree) and any(n.startswith("data/train-") for n in tree)
    assert not gcs.exists(join(out, "_state", "lock"))  # the lease is released

    again = pipeline.convert(cfg.model_copy(update={"resume": True}))
    assert again["resume"] == {"parts": 3, "reused": 3, "converted": 0}
    assert _published(gcs, out) == tree


def test_the_lease_on_gcs_gives_one_holder_of_two_racing_runs(gcs: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from msgtrain.run import lease as lease_mod
    from msgtrain.run.lease import StoreLease
    from tests.store_helpers import race

    monkeypatch.setattr(lease_mod, "SETTLE_SECONDS", 0.3)
    url = f"gs://{BUCKET}/leased/_state/lock"
    leases = [StoreLease(url, ttl=30) for _ in range(2)]
    outcome = race(leases)
    winners = [i for i, error in outcome.items() if error is None]
    assert len(winners) == 1, outcome
    assert leases[winners[0]].run in str(outcome[1 - winners[0]])
    leases[winners[0]].release()
    assert not gcs.exists(url)


def test_a_huge_object_on_gcs_is_read_in_ranges_with_the_unsplit_output(gcs: Store, tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    convs = gen.make_conversations(gen.synthetic_pool(6), 4, 8, reasoning=True, seed=6)
    gen.write_calls(big, convs, model="policy")
    gcs.upload(big, f"gs://{BUCKET}/huge/logs/big.jsonl")
    logs = f"gs://{BUCKET}/huge/logs"
    whole = pipeline.convert(ConvertConfig(inputs=(logs,), output=f"gs://{BUCKET}/huge/a", chunk_mb=0, quiet=True))
    tiny = big.stat().st_size / 4 / (1 << 20)
    split = pipeline.convert(
        ConvertConfig(inputs=(logs,), output=f"gs://{BUCKET}/huge/b", workers=1, chunk_mb=tiny, quiet=True)
    )
    assert whole["resume"]["parts"] == 1 and split["resume"]["parts"] >= 3
    assert _published(gcs, f"gs://{BUCKET}/huge/b") == _published(gcs, f"gs://{BUCKET}/huge/a")


def test_a_missing_gcs_bucket_is_one_line_naming_it(
    gcs: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from msgtrain.cli import main

    logs = tmp_path / "logs"
    logs.mkdir()
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    (logs / "c.jsonl").write_text(json.dumps(chat) + "\n")
    capsys.readouterr()
    assert main(["convert", str(logs), "-o", "gs://no-such-bucket/sft", "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the bucket no-such-bucket does not exist" in err[0], err
