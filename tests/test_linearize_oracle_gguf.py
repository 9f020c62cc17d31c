"""Token-exactness on real vocabularies: tokenizers rebuilt from llama.cpp's vocab-only GGUF files, each checked
against the test strings shipped beside it, with the families' own chat templates (tests/gguf_vocab.py), replayed
through the oracle of tests/test_linearize_oracle.py in engine mode (every call logged with its ids) and rendered
mode (none: msgtrain renders the template).

Families: Command R+ (tool-use template, Cohere's vocabulary), Llama 3.1 and 3.2 and Hermes 3 (Llama 3's vocabulary),
Gemma 4, Qwen3.5 (SUITE; Llama 3.2 too in the wide sweep over many seeds, ``python -m tests.oracle_sweep``).
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from tests import assets, gguf_vocab
from tests.conftest import load_named_tokenizer
from tests.gguf_vocab import GGUF_FAMILIES
from tests.test_linearize_oracle import check_rows, run_per_call

MODES = {"engine": 1.0, "rendered": 0.0}
TOKENIZER_PARAM = "family"  # the tests of one vocabulary run one after another (tests/conftest.py)
# In the suite: one family per vocabulary, and Hermes 3 (ChatML on Llama 3's vocabulary); all of GGUF_FAMILIES,
# many seeds, in `python -m tests.oracle_sweep`. Loading a 256k vocabulary costs seconds, so the suite loads few.
# Command R7B: its template renders the generation prompt after every conversation and parts from history inside
# a control token's text.
SUITE = ["command-r-plus", "command-r7b", "llama3.1", "hermes3", "gemma4", "qwen3.5"]


@pytest.mark.parametrize("family", [f for f in SUITE if f not in ("hermes3", "command-r7b")])
def test_each_rebuilt_vocabulary_encodes_every_test_string_shipped_beside_it(family: str) -> None:
    """The tokenizer the oracle runs on (its family's renamed and added tokens included) encodes every string the
    GGUF file's vocabulary is checked with to the ids listed for it."""
    gguf_vocab.require_family_folder(family)
    strings = assets.vocab_test_strings(GGUF_FAMILIES[family].vocab)
    assert strings is not None and len(strings) >= 40
    hf = load_named_tokenizer(family).hf
    bad = [(text, want) for text, want in strings if hf.encode(text, add_special_tokens=False) != want]
    assert bad == []


def test_a_rebuild_that_fails_its_test_strings_is_refused_naming_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Qwen3.5's tokenizer does not normalize to NFC (Qwen2's does): rebuilt with NFC, the decomposed accents of its
    test strings come out composed, and the rebuild is not used."""
    from tokenizers import Tokenizer

    gguf = assets.require_gguf_vocab("qwen35")
    strings = assets.vocab_test_strings("qwen35")
    assert strings is not None
    monkeypatch.setitem(gguf_vocab.NORMALIZER, "qwen35", "NFC")
    spec = gguf_vocab.tokenizer_spec(gguf_vocab.read_gguf_metadata(gguf), "qwen35")
    bad = gguf_vocab.check_test_strings(Tokenizer.from_str(json.dumps(spec)), strings)
    failing = [strings[int(b[1 : b.index(" ")])][0] for b in bad]
    assert failing and all(unicodedata.normalize("NFC", text) != text for text in failing), bad
    monkeypatch.setenv("MSGTRAIN_TEST_ASSETS", str(tmp_path))
    (tmp_path / assets.SDIST).symlink_to(gguf.parents[2] / assets.SDIST)
    with pytest.raises(ValueError, match=r"qwen35: the rebuilt vocabulary fails \d+ of its test strings"):
        gguf_vocab.rebuilt_tokenizer_json("qwen35")


def test_gguf_metadata_is_read_as_llama_cpp_writes_it() -> None:
    meta = gguf_vocab.read_gguf_metadata(assets.require_gguf_vocab("command-r"))
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "command-r"
    assert len(meta["tokenizer.ggml.tokens"]) == len(meta["tokenizer.ggml.token_type"]) == 256000
    assert meta["tokenizer.ggml.tokens"][meta["tokenizer.ggml.eos_token_id"]] == "<|END_OF_TURN_TOKEN|>"
    assert meta["tokenizer.ggml.add_bos_token"] is True
    assert "tool_use" in meta["tokenizer.chat_templates"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", SUITE)
def test_real_vocabulary_families_train_every_sampled_turn_once_after_exactly_its_prompt(
    family: str, mode: str, tmp_path: Path
) -> None:
    gguf_vocab.require_family_folder(family)
    seed = 7 if mode == "engine" else 8
    rows, expected = run_per_call(family, seed, tmp_path, MODES[mode], n_turns=10)
    assert len(expected) >= 5
    check_rows(rows, expected, engine_logprobs=True)
