"""Loading a tokenizer folder without AutoTokenizer (no torch import) gives what AutoTokenizer gives."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import shared_path

FOLDERS = ["qwen3", "gpt-oss", "phi-3-mini-instruct"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_direct_class_load_equals_auto_tokenizer(folder: str) -> None:
    from transformers import AutoTokenizer

    from msgtrain.linearize.tokenizer import auto_tokenizer

    path = str(shared_path("tokenizers", folder))
    ours, reference = auto_tokenizer(path), AutoTokenizer.from_pretrained(path)
    assert type(ours) is type(reference)
    assert ours.backend_tokenizer.to_str() == reference.backend_tokenizer.to_str()
    assert ours.special_tokens_map == reference.special_tokens_map
    assert ours.added_tokens_encoder == reference.added_tokens_encoder
    assert ours.chat_template == reference.chat_template
    messages = [{"role": "user", "content": "Hi <|im_start|> there"}, {"role": "assistant", "content": "ok"}]
    assert ours.apply_chat_template(messages, tokenize=True, return_dict=False) == reference.apply_chat_template(
        messages, tokenize=True, return_dict=False
    )


def test_loading_a_tokenizer_folder_does_not_import_torch() -> None:
    path = str(shared_path("tokenizers", "qwen3"))
    code = (
        "import sys; from msgtrain.linearize import load_tokenizer; load_tokenizer(sys.argv[1]); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr[-2000:]
