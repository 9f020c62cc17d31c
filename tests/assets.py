"""Test assets from the package registry: llama.cpp's vocab-only GGUF files, their test strings, real chat templates.

The ``llama-cpp-python`` source distribution on PyPI vendors llama.cpp, whose ``models/`` folder holds vocab-only
GGUF files (``ggml-vocab-<name>.gguf``: a model's tokenizer and metadata, no weights), beside most of them the
strings llama.cpp checks the vocabulary on (``.gguf.inp``: texts joined by ``\\n__ggml_vocab_test__\\n``;
``.gguf.out``: one line of ids per text, as the model's own Hugging Face tokenizer encodes it without special
tokens), and ``models/templates/*.jinja``: the chat templates of many model families, as their authors ship them.

``make install-test`` runs ``python -m tests.assets``, which downloads the pinned sdist (``pip download``: no build,
no install) into the asset directory and unpacks what the tests read. The directory is ``.cache/test-assets`` in
the checkout (gitignored), or ``$MSGTRAIN_TEST_ASSETS``. Every lookup here returns None when the sdist is absent (a
bare clone that never ran ``make install-test``); ``require_*`` skips the running test with that reason instead,
so tests skip when they run, never at collection.

Invariants: the sdist is unpacked once per version, into a temporary directory renamed into place (a reader never
sees a half-unpacked folder; of two concurrent unpackers one rename wins and the other's copy is discarded). Only
``models/`` and llama.cpp's LICENSE are unpacked. Nothing here reaches the network except ``python -m tests.assets``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# The release the tests are checked with; its llama.cpp snapshot decides which vocabularies and templates exist.
LLAMA_CPP_PYTHON = "0.3.36"
SDIST = f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
ROOT = Path(__file__).resolve().parents[1]
TEST_SEPARATOR = "\n__ggml_vocab_test__\n"


def asset_dir() -> Path:
    """Where the sdist is downloaded to and unpacked: ``$MSGTRAIN_TEST_ASSETS`` or ``.cache/test-assets``."""
    env = os.environ.get("MSGTRAIN_TEST_ASSETS")
    return Path(env) if env else ROOT / ".cache" / "test-assets"


def absent_reason() -> str:
    return (
        f"{SDIST} is not in {asset_dir()} (run `make install-test`, or `python -m tests.assets`, which downloads it "
        "from PyPI)"
    )


def models_dir() -> Path | None:
    """llama.cpp's ``models/`` folder from the sdist, unpacked on first use; None when the sdist is absent."""
    base = asset_dir()
    out = base / f"llama-cpp-python-{LLAMA_CPP_PYTHON}"
    if not out.is_dir():
        sdist = base / SDIST
        if not sdist.is_file():
            return None
        _unpack(sdist, out)
    return out / "models"


def _unpack(sdist: Path, out: Path) -> None:
    vendored = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/"
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=out.parent))
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            for member in tar:
                if not member.isfile() or not member.name.startswith(vendored):
                    continue
                rel = member.name[len(vendored) :]
                if not (rel.startswith("models/") or rel == "LICENSE"):
                    continue
                target = tmp / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                assert src is not None
                with src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        try:
            tmp.rename(out)
        except OSError:
            if not out.is_dir():  # not a lost race with another unpacker: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def llama_cpp_templates() -> list[str]:
    """The names of the chat templates in ``models/templates`` (file names without ``.jinja``); [] when absent."""
    models = models_dir()
    if models is None:
        return []
    return sorted(p.name.removesuffix(".jinja") for p in (models / "templates").glob("*.jinja"))


def llama_cpp_template(name: str) -> str | None:
    """The chat template ``models/templates/<name>.jinja`` (e.g. ``"CohereForAI-c4ai-command-r-plus-tool_use"``),
    or None when the sdist is absent. A name this release does not ship is a KeyError listing those it does."""
    models = models_dir()
    if models is None:
        return None
    path = models / "templates" / f"{name.removesuffix('.jinja')}.jinja"
    if not path.is_file():
        raise KeyError(f"llama.cpp {LLAMA_CPP_PYTHON} ships no template {name!r}; it has {llama_cpp_templates()}")
    return path.read_text(encoding="utf-8")


def gguf_vocab(name: str) -> Path | None:
    """The vocab-only GGUF file ``models/ggml-vocab-<name>.gguf`` (e.g. ``"llama-bpe"``, ``"command-r"``), or None
    when the sdist is absent. A name this release does not ship is a KeyError listing those it does."""
    models = models_dir()
    if models is None:
        return None
    path = models / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        have = sorted(p.name[len("ggml-vocab-") : -len(".gguf")] for p in models.glob("ggml-vocab-*.gguf"))
        raise KeyError(f"llama.cpp {LLAMA_CPP_PYTHON} ships no vocabulary {name!r}; it has {have}")
    return path


def vocab_test_strings(name: str) -> list[tuple[str, list[int]]] | None:
    """The (text, expected ids) pairs shipped beside ``ggml-vocab-<name>.gguf``; None when the sdist is absent or
    the vocabulary ships no test strings. The ids are the model's own tokenizer's, without special tokens."""
    path = gguf_vocab(name)
    if path is None:
        return None
    inp, out = path.with_name(path.name + ".inp"), path.with_name(path.name + ".out")
    if not (inp.is_file() and out.is_file()):
        return None
    # llama.cpp's test-tokenizer-0 reads every text that a separator ends; what follows the last one is not a test.
    texts = inp.read_text(encoding="utf-8").split(TEST_SEPARATOR)[:-1]
    lines = out.read_text(encoding="utf-8").split("\n")
    if len(lines) < len(texts):
        raise ValueError(f"{out}: {len(lines)} lines of ids for {len(texts)} test strings in {inp}")
    return [(text, [int(x) for x in line.split()]) for text, line in zip(texts, lines, strict=False)]


def require_models_dir() -> Path:
    """``models_dir()``, or skip the running test with the reason the sdist is absent."""
    models = models_dir()
    if models is None:
        import pytest

        pytest.skip(absent_reason())
    return models


def require_template(name: str) -> str:
    require_models_dir()
    text = llama_cpp_template(name)
    assert text is not None
    return text


def require_gguf_vocab(name: str) -> Path:
    require_models_dir()
    path = gguf_vocab(name)
    assert path is not None
    return path


def download() -> Path:
    """Fetch the pinned sdist from PyPI into the asset directory (pip skips a file already there) and unpack it."""
    base = asset_dir()
    base.mkdir(parents=True, exist_ok=True)
    if not (base / SDIST).is_file():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
                str(base),
            ],
            check=True,
        )
    models = models_dir()
    assert models is not None, absent_reason()
    return models


if __name__ == "__main__":
    print(f"llama.cpp models from llama-cpp-python {LLAMA_CPP_PYTHON}: {download()}")
