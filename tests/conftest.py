"""Shared test fixtures: the ../shared materials (skipped with a reason where absent) and tokenizers."""

from __future__ import annotations

import os
from pathlib import Path

# Every rendering that replays loop iterations of an earlier one is also rendered in full and compared
# (msgtrain.linearize.render.VERIFY_REPLAY): the whole suite doubles as an oracle for replay. Set before msgtrain is
# imported; subprocesses inherit it.
os.environ.setdefault("MSGTRAIN_VERIFY_REPLAY", "1")

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SAMPLE_LOGS = ROOT / "sample_logs"


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test with a reason when the materials are not present."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(
            f"../shared/{'/'.join(parts)} not present (it ships beside the checkout in CI, not with the package)"
        )
    return p


# name -> (tokenizer folder, chat template override or None)
TEMPLATES = {
    "qwen3": ("tokenizers/qwen3", None),
    "qwen2.5": ("tokenizers/qwen3", "tokenizers/qwen2.5-instruct/tokenizer_config.json"),
    "phi3": ("tokenizers/phi-3-mini-instruct", None),
    "gpt-oss": ("tokenizers/gpt-oss", None),
}


def load_named_tokenizer(name: str):  # type: ignore[no-untyped-def]
    from msgtrain.linearize import load_tokenizer

    if name == "demo":
        return load_tokenizer(None)
    folder, template = TEMPLATES[name]
    return load_tokenizer(str(shared_path(folder)), str(shared_path(template)) if template else None)
