"""URLs of every supported protocol, the error for a missing protocol package, and where each store's content
hash comes from. No server: ``s3://`` and ``gs://`` are exercised against local servers in
``test_object_store.py`` and ``test_gcs_store.py``; ``az://`` and ``hf://`` have none here (no Azure Blob API
server installs from PyPI, and the Hub cannot be reached offline), so this is what is checked of them."""

from __future__ import annotations

import base64
import hashlib
import importlib
import sys

import pytest

from msgtrain.errors import ConfigError
from msgtrain.run import pipeline
from msgtrain.run.config import ConvertConfig
from msgtrain.run.storage import _metadata_hash, is_remote, join, local_path, protocol


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://bucket/logs/", "s3"),
        ("gs://bucket/logs", "gs"),
        ("gcs://bucket/logs", "gcs"),
        ("az://container/logs", "az"),
        ("abfs://container@account.dfs.core.windows.net/logs", "abfs"),
        ("hf://datasets/org/agent-logs/2026", "hf"),
        ("file:///data/logs", None),
        ("/data/logs", None),
        ("C:/logs", None),  # a drive letter is not a protocol: a URL has "://"
    ],
)
def test_each_url_names_its_protocol_and_local_paths_name_none(url: str, expected: str | None) -> None:
    assert protocol(url) == expected
    assert is_remote(url) is (expected is not None)


def test_file_urls_are_local_paths_and_join_keeps_one_slash() -> None:
    assert str(local_path("file:///data/logs")) == "/data/logs"
    assert join("hf://datasets/org/repo/", "/_state/", "parts") == "hf://datasets/org/repo/_state/parts"


@pytest.mark.parametrize(
    ("scheme", "module", "extra"),
    [("gs", "gcsfs", "gcs"), ("az", "adlfs", "azure"), ("abfs", "adlfs", "azure"), ("hf", "huggingface_hub", "hf")],
)
def test_a_missing_protocol_package_is_one_config_error_naming_the_extra(
    scheme: str, module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = importlib.import_module("fsspec.registry")  # the module (fsspec.registry is also a mapping)
    monkeypatch.setitem(sys.modules, module, None)  # makes `import <module>` raise ImportError
    # Empty fsspec's registry in place: ``fsspec.registry.registry`` is a read-only view of this very dict, so a
    # class registered by an earlier test (gcsfs, once imported) would otherwise still be found.
    for name in list(registry._registry):
        monkeypatch.delitem(registry._registry, name)
    url = f"{scheme}://container/logs"
    with pytest.raises(ConfigError, match=rf"{module}.*msgtrain\[{extra}\]"):
        pipeline.convert(ConvertConfig(inputs=(url,), output=f"{scheme}://container/out"))


def test_an_hf_url_is_parsed_into_the_repo_path_the_hub_filesystem_uses() -> None:
    pytest.importorskip("huggingface_hub", reason="needs huggingface_hub: pip install 'msgtrain[hf]'")
    from msgtrain.run.storage import Store

    store = Store.of("hf://datasets/org/agent-logs")  # constructing the filesystem needs no network
    assert store.protocol == "hf"
    assert store._path("hf://datasets/org/agent-logs/2026/a.jsonl") == "datasets/org/agent-logs/2026/a.jsonl"
    assert store.url("datasets/org/agent-logs/x.jsonl") == "hf://datasets/org/agent-logs/x.jsonl"


def test_content_hashes_come_from_each_stores_metadata_only_when_it_is_a_hash_of_the_bytes() -> None:
    data = b"some log bytes\n"
    md5 = hashlib.md5(data)
    assert _metadata_hash("s3", {"ETag": f'"{md5.hexdigest()}"'}) == f"md5:{md5.hexdigest()}"
    assert _metadata_hash("s3", {"ETag": '"0123456789abcdef0123456789abcdef-3"'}) is None  # multipart
    assert _metadata_hash("s3", {"ETag": f'"{md5.hexdigest()}"', "ServerSideEncryption": "aws:kms"}) is None
    assert _metadata_hash("gs", {"md5Hash": base64.b64encode(md5.digest()).decode()}) == f"md5:{md5.hexdigest()}"
    assert _metadata_hash("gs", {"crc32c": "AAAAAA=="}) is None  # a composite object: read instead
    settings = {"content_md5": bytearray(md5.digest())}
    assert _metadata_hash("az", {"content_settings": settings}) == f"md5:{md5.hexdigest()}"
    assert _metadata_hash("az", {"content_settings": {"content_md5": None}}) is None
    sha = hashlib.sha256(data).hexdigest()
    assert _metadata_hash("hf", {"lfs": {"sha256": sha}, "blob_id": "x"}) == f"sha256:{sha}"
    assert _metadata_hash("hf", {"blob_id": "9fa3"}) == "gitblob:9fa3"
