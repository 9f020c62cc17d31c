"""The test assets from llama-cpp-python's sdist (tests/assets.py): located, unpacked once, absent → skip."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from tests import assets


def _fake_sdist(folder: Path) -> None:
    """An sdist in the shape of llama-cpp-python's: vendor/llama.cpp/{models,LICENSE,src} under one top folder."""
    top = f"llama_cpp_python-{assets.LLAMA_CPP_PYTHON}"
    files = {
        f"{top}/vendor/llama.cpp/models/ggml-vocab-tiny.gguf": b"GGUF",
        f"{top}/vendor/llama.cpp/models/ggml-vocab-tiny.gguf.inp": b"a\n__ggml_vocab_test__\n b\n__ggml_vocab_test__\n",
        f"{top}/vendor/llama.cpp/models/ggml-vocab-tiny.gguf.out": b" 1\n 2 3\n",
        f"{top}/vendor/llama.cpp/models/templates/Tiny-Chat.jinja": b"{{ messages }}",
        f"{top}/vendor/llama.cpp/LICENSE": b"MIT",
        f"{top}/vendor/llama.cpp/src/llama.cpp": b"int main;",
        f"{top}/llama_cpp/__init__.py": b"",
    }
    with tarfile.open(folder / assets.SDIST, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_without_the_sdist_every_lookup_is_none_and_require_skips_with_the_command_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MSGTRAIN_TEST_ASSETS", str(tmp_path))
    assert assets.models_dir() is None
    assert assets.llama_cpp_template("Tiny-Chat") is None
    assert assets.gguf_vocab("tiny") is None
    assert assets.llama_cpp_templates() == []
    with pytest.raises(pytest.skip.Exception, match="make install-test"):
        assets.require_gguf_vocab("tiny")


def test_the_sdist_is_unpacked_once_and_only_its_models_and_license(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MSGTRAIN_TEST_ASSETS", str(tmp_path))
    _fake_sdist(tmp_path)
    models = assets.models_dir()
    assert models is not None
    root = models.parent
    unpacked = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert unpacked == [
        "LICENSE",
        "models/ggml-vocab-tiny.gguf",
        "models/ggml-vocab-tiny.gguf.inp",
        "models/ggml-vocab-tiny.gguf.out",
        "models/templates/Tiny-Chat.jinja",
    ]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".unpack-")] == []  # no temporary left over
    (models / "templates" / "Tiny-Chat.jinja").write_text("kept", encoding="utf-8")
    assert assets.llama_cpp_template("Tiny-Chat.jinja") == "kept"  # not unpacked a second time
    assert assets.llama_cpp_templates() == ["Tiny-Chat"]
    assert assets.gguf_vocab("tiny") == models / "ggml-vocab-tiny.gguf"
    assert assets.vocab_test_strings("tiny") == [("a", [1]), (" b", [2, 3])]
    with pytest.raises(KeyError, match="Tiny-Chat"):
        assets.llama_cpp_template("Missing")
    with pytest.raises(KeyError, match="tiny"):
        assets.gguf_vocab("missing")


def test_the_pinned_sdist_ships_the_templates_and_test_strings_the_oracle_reads() -> None:
    assets.require_models_dir()
    names = set(assets.llama_cpp_templates())
    for family in (
        "CohereForAI-c4ai-command-r-plus-tool_use",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
        "google-gemma-4-31B-it",
        "GLM-4.6",
        "ibm-granite-granite-3.3-2B-Instruct",
        "meta-llama-Llama-3.1-8B-Instruct",
        "Qwen3-Coder",
        "deepseek-ai-DeepSeek-V3.1",
        "moonshotai-Kimi-K2",
    ):
        assert family in names
    for vocab in ("command-r", "gemma-4", "llama-bpe", "qwen2", "phi-3"):
        strings = assets.vocab_test_strings(vocab)
        assert strings is not None and len(strings) >= 40, vocab
