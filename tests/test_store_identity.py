"""A local run and an object-store run of the same log tree give the same rows, every column but ``source`` (which
names where each run read the file): readers reach every file they consult through the storage interface, so a
reader that opens more than one file (a Claude Code sub-agent's parent session, an OpenHands V1 conversation
folder of one file per event) reads the same files from a bucket as from the disk.

One conversion each (module-scoped): ``sample_logs/`` and, where it ships beside the checkout, ``../shared/real_logs``
(every folder, new ones included), copied into one tree that is converted from the disk and from a local S3 server.

Every reader that opens more than one file (it declares ``siblings``, its unit is a folder: ``detect_directory``, or its
module reaches files beside its input through ``input_files``)
has a case of its own in :data:`MULTI_FILE_CASES`, on the sample log that ships with the checkout and on the real
logs where they are present; a new such reader without a case fails
:func:`test_every_reader_that_opens_more_than_one_file_has_a_case`.
"""

from __future__ import annotations

import inspect
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from msgtrain.ingest.registry import REGISTRY
from msgtrain.run import pipeline
from msgtrain.run.config import ConvertConfig
from msgtrain.run.storage import Store, current_version, join, version_url
from tests.conftest import SAMPLE_LOGS, SHARED, shared_path
from tests.store_helpers import moto_s3

pytest.importorskip("moto.server", reason="needs moto's server mode: pip install 'msgtrain[store-test]'")
pytest.importorskip("s3fs", reason="needs s3fs: pip install 'msgtrain[store-test]'")

BUCKET = "msgtrain-identity"
Rows = dict[str, dict[str, Any]]

# reader → (folder of sample_logs/, folders of ../shared/real_logs/, what only reading the other files gives: a test of
# the sample's rows read from the bucket)
MULTI_FILE_CASES: dict[str, tuple[str, tuple[str, ...], Callable[[Rows], bool]]] = {
    # a sub-agent's type is in its parent session, the file beside its folder
    "claude_code": (
        "sample_logs/claude_code",
        ("real_logs/claude_code_spotter",),
        lambda rows: "subagent:Explore" in {row["policy"] for row in rows.values()},
    ),
    # a conversation folder: base_state.json + events/event-NNNNN-*.json, one event per file
    "openhands_v1": (
        "sample_logs/openhands_v1",
        ("real_logs/openhands_v1_sdk",),
        lambda rows: "openhands" in {row["policy"] for row in rows.values()},
    ),
    # a session folder: session.json + agents/agent_<id>/agent.json and messages/message_<n>.json, one per message
    "strands": ("sample_logs/strands", (), lambda rows: "strands" in {row["policy"] for row in rows.values()}),
    # a transcript's replies that the LLM history beside it holds are trained there (the sample has none beside it)
    "aider": ("sample_logs/aider", (), bool),
    # a storage folder: session/<project>/<id>.json, message/<session>/<id>.json, part/<message>/<id>.json
    "opencode": ("sample_logs/opencode", (), lambda rows: "opencode" in {row["policy"] for row in rows.values()}),
    # a task folder: api_conversation_history.json + ui_messages.json (each request's tokens), task_metadata.json
    "cline_task": ("sample_logs/cline_task", (), lambda rows: "cline" in {row["policy"] for row in rows.values()}),
    # an output file's replies have their context only in the input file beside it (found by listing the folder)
    "batch": ("sample_logs/batch", (), bool),
    # answers have their questions only in question.jsonl one folder up
    "mt_bench": ("sample_logs/mt_bench", (), bool),
}


def _rows(tables: list[pa.Table]) -> dict[str, Rows]:
    """Rows by the folder of their source below the copied tree (``sample_logs/claude_code``,
    ``real_logs/tau_bench``), each keyed by sample id, without ``source``."""
    out: dict[str, Rows] = {}
    for table in tables:
        for row in table.to_pylist():
            folder = "/".join(row.pop("source").split("/logs/", 1)[1].split("/", 2)[:2])
            out.setdefault(folder, {})[row["sample_id"]] = row
    return out


def _under(rows: dict[str, Rows], prefix: str) -> Rows:
    """The rows of every folder at or below ``prefix`` (``sample_logs``, ``sample_logs/claude_code``)."""
    return {k: row for folder, r in rows.items() if (folder + "/").startswith(prefix + "/") for k, row in r.items()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Rows], dict[str, Rows]]]:
    root = tmp_path_factory.mktemp("identity")
    logs = root / "logs"
    shutil.copytree(SAMPLE_LOGS, logs / "sample_logs")
    if (SHARED / "real_logs").is_dir():
        shutil.copytree(SHARED / "real_logs", logs / "real_logs")
    local = pipeline.convert(ConvertConfig(inputs=(logs,), output=root / "out", quiet=True))
    local_rows = _rows([pq.read_table(f) for f in sorted((root / "out" / "data").glob("*.parquet"))])
    with moto_s3(BUCKET) as store:
        prefix = f"s3://{BUCKET}/logs"
        store.upload_tree(logs, prefix)
        out = f"s3://{BUCKET}/out"
        remote = pipeline.convert(ConvertConfig(inputs=(prefix,), output=out, quiet=True))
        store_rows = _rows(_published_tables(store, out))
    assert remote["records"] == local["records"]
    yield local_rows, store_rows


def _published_tables(store: Store, out: str) -> list[pa.Table]:
    version = current_version(out)
    assert version is not None
    data = join(version_url(out, version), "data")
    return [pq.read_table(pa.BufferReader(store.read_bytes(url))) for url, _ in sorted(store.list_files(data))]


def _assert_same(local: Rows, remote: Rows) -> None:
    assert local, "the local run wrote no rows"
    assert sorted(local) == sorted(remote)
    for sample_id, row in local.items():
        assert remote[sample_id] == row, f"sample {sample_id} ({row['policy']}) differs"


def test_sample_logs_give_the_same_rows_from_a_bucket_as_from_the_disk(runs: Any) -> None:
    local, remote = runs
    _assert_same(_under(local, "sample_logs"), _under(remote, "sample_logs"))


def test_real_logs_give_the_same_rows_from_a_bucket_as_from_the_disk(runs: Any) -> None:
    shared_path("real_logs")
    local, remote = runs
    _assert_same(_under(local, "real_logs"), _under(remote, "real_logs"))


def test_every_reader_that_opens_more_than_one_file_has_a_case() -> None:
    multi_file = {
        name
        for name, reader in REGISTRY.items()
        if hasattr(reader, "siblings")
        or hasattr(reader, "detect_directory")
        or "input_files" in inspect.getsource(sys.modules[type(reader).__module__])
    }
    assert multi_file == set(MULTI_FILE_CASES), "add a case to MULTI_FILE_CASES (a sample log, the real logs)"


@pytest.mark.parametrize("reader", sorted(MULTI_FILE_CASES))
def test_a_reader_that_opens_more_than_one_file_reads_them_from_a_bucket_as_from_the_disk(
    runs: Any, reader: str
) -> None:
    local, remote = runs
    sample, real, evidence = MULTI_FILE_CASES[reader]
    folders = [sample, *(f for f in real if (SHARED / f).is_dir())]
    for folder in folders:
        _assert_same(_under(local, folder), _under(remote, folder))
    # What the reader can know only from its other files is in the rows read from the bucket.
    assert evidence(_under(remote, sample))
