"""``--tokenizer`` mistakes fail fast and say what is wrong (msgtrain.linearize.tokenizer_source).

Every test here runs in about a second: a path that looks local never reaches the hub, offline mode and an
unreachable hub are detected with one probe instead of the hub client's retries.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from msgtrain.cli import main
from msgtrain.errors import ConfigError, TokenizerError
from msgtrain.linearize.tokenizer import _build_demo_tokenizer, _load_hf
from msgtrain.linearize.tokenizer_source import looks_local, resolve_tokenizer
from msgtrain.tools.tokenizer import load_hf_tokenizer

REPO = Path(__file__).resolve().parent.parent
FAST = 8.0  # seconds: the hub client's retries took 55-64 s offline


@pytest.fixture
def empty_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache, so that no cached tokenizer of the machine answers."""
    import huggingface_hub.constants

    cache = tmp_path / "hub-cache"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    return cache


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("value", "local"),
    [
        ("Qwen/Qwen3-8B", False),
        ("gpt2", False),
        ("./models/Qwen3-8B", True),
        ("../Qwen3-8B", True),
        ("/models/Qwen3-8B", True),
        ("~/models/Qwen3-8B", True),
        ("models/org/Qwen3-8B", True),  # more than one separator: not ORG/NAME
        ("my model", True),  # not a valid hub id
        ("org/../name", True),
    ],
)
def test_a_value_is_a_folder_when_it_looks_like_a_path(value: str, local: bool) -> None:
    assert looks_local(value) is local


def test_an_org_name_whose_first_part_exists_here_is_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert not looks_local("models/Qwen3-8B")
    (tmp_path / "models").mkdir()
    assert looks_local("models/Qwen3-8B")


def test_a_mistyped_local_folder_is_named_as_not_found_with_what_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "Qwen3-4B").mkdir(parents=True)
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"tokenizer folder not found: \./models/Qwen3-8B") as err:
        _load_hf("./models/Qwen3-8B", None)
    assert "models exists and holds: Qwen3-4B/" in str(err.value)
    assert "Repo id" not in str(err.value)
    code = main(["convert", str(REPO / "sample_logs"), "-o", str(tmp_path / "out"), "--tokenizer", "./models/Qwen3-8B"])
    assert code == 2  # a bad option value: usage
    assert "tokenizer folder not found" in capsys.readouterr().err
    assert time.monotonic() - started < FAST
    assert not (tmp_path / "out").exists()


def test_a_file_is_refused_with_its_folder_as_the_fix(tmp_path: Path) -> None:
    file = tmp_path / "tokenizer.json"
    file.write_text("{}", encoding="utf-8")
    with pytest.raises(ConfigError, match="must be a folder, not a file") as err:
        resolve_tokenizer(str(file), download=True)
    assert f"--tokenizer {tmp_path}" in (err.value.hint or "")


def test_a_folder_without_a_vocabulary_names_the_files_expected(tmp_path: Path) -> None:
    folder = tmp_path / "template-only"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text('{"chat_template": "x"}', encoding="utf-8")
    for load in (lambda: _load_hf(str(folder), None), lambda: load_hf_tokenizer(folder)):
        with pytest.raises(ConfigError, match="holds no tokenizer vocabulary") as err:
            load()
        assert "expected one of: tokenizer.json" in str(err.value)
        assert "it holds: tokenizer_config.json" in str(err.value)
        assert "--chat-template" in (err.value.hint or "")


def test_a_vocabulary_transformers_cannot_read_names_the_files_and_the_missing_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    import msgtrain.linearize.tokenizer_source as source

    # sentencepiece is installed wherever the mistral extra is: the check is told it is not (transformers then
    # fails on the model below either way, for want of the package or for its bytes).
    real = source._find_spec
    monkeypatch.setattr(source, "_find_spec", lambda module: None if module == "sentencepiece" else real(module))
    folder = tmp_path / "sp"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(b"not a sentencepiece model")
    (folder / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "LlamaTokenizer", "chat_template": "x"}', encoding="utf-8"
    )
    with pytest.raises(TokenizerError, match="cannot read the tokenizer in") as err:
        _load_hf(str(folder), None)
    assert "found: tokenizer.model" in str(err.value)
    assert "expected one of: tokenizer.json" in str(err.value)
    assert "pip install sentencepiece" in (err.value.hint or "")


def test_offline_mode_fails_at_once_naming_the_cache_and_the_variable(
    empty_hub_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(TokenizerError, match="not in the local Hugging Face cache") as err:
        _load_hf("acme/never-downloaded", None)
    assert time.monotonic() - started < FAST
    assert "HF_HUB_OFFLINE is set" in str(err.value)
    assert "hf download acme/never-downloaded --local-dir" in (err.value.hint or "")


def test_an_unreachable_hub_is_detected_with_one_probe_not_retries(
    empty_hub_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    started = time.monotonic()
    with pytest.raises(TokenizerError, match="cannot be reached"):
        _load_hf("acme/never-downloaded", None)
    assert time.monotonic() - started < FAST


def test_a_cached_hub_tokenizer_loads_offline_from_its_snapshot(
    empty_hub_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cache layout huggingface_hub writes: models--ORG--NAME/{refs/main, snapshots/<revision>/}.
    repo = empty_hub_cache / "models--acme--tiny-chat"
    snapshot = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    _build_demo_tokenizer().save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(snapshot.name, encoding="utf-8")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_tokenizer("acme/tiny-chat", download=True).folder == snapshot
    assert resolve_tokenizer("acme/tiny-chat", download=False).folder == snapshot  # the tools' path
    hf = _load_hf("acme/tiny-chat", None)
    assert hf.encode("hi") == _build_demo_tokenizer().encode("hi")


def test_the_tools_never_ask_the_hub_for_an_uncached_id(empty_hub_cache: Path) -> None:
    assert "HF_HUB_OFFLINE" not in os.environ
    started = time.monotonic()
    with pytest.raises(TokenizerError, match="tools read only local tokenizers"):
        load_hf_tokenizer("acme/never-downloaded")
    assert time.monotonic() - started < FAST
