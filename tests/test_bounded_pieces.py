"""A long text is encoded in bounded pieces with exactly the ids of encoding it whole (msgtrain.linearize.pieces),
on the embedded byte-level tokenizer and a real one (Qwen3), over seeded random texts built to stress the
pre-tokenizer (letters of several scripts, digits, contractions, punctuation, runs of spaces and newlines, combining
marks, control-token text); and what it saves: encoding a long text no longer costs ~150 bytes per input byte."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msgtrain.linearize import load_tokenizer
from msgtrain.linearize.pieces import (
    LINE_START,
    encode_in_pieces,
    fast_batch,
    piece_bounds,
    pipeline_spec,
    splits_at_spaces,
)
from msgtrain.linearize.tokenizer import SegmentCache
from tests.conftest import ROOT, shared_path

ATOMS = [
    "word", "Tokens", "naïve", "café", "日本語", "Ελληνικά", "ÅNGSTRÖM", "e\u0301", "½", "x",
    " ", "  ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0",
    "'s", "'ll", "'T", "it's", "don't", "123", "4", "2024-01-01",
    ".", ",", "!?", "...", "—", "(", ")", "{\"k\": 1}", "<|im_end|>", "<|im_start|>", "`", "_x_",
]  # fmt: skip
TEXTS = st.lists(st.sampled_from(ATOMS), min_size=1, max_size=120).map("".join)


@pytest.fixture(scope="module", params=["demo", "qwen3"])
def bundle(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    if request.param == "demo":
        return load_tokenizer(None, None)
    return load_tokenizer(str(shared_path("tokenizers", "qwen3")), None)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=TEXTS, piece=st.integers(min_value=1, max_value=40))
def test_pieces_give_the_ids_of_the_whole_text(bundle, text: str, piece: int) -> None:  # type: ignore[no-untyped-def]
    assert bundle._in_pieces()
    whole = bundle.backend.encode(text, add_special_tokens=False).ids
    pieces = encode_in_pieces(fast_batch(bundle.backend), text, piece, bundle._added_re)
    assert pieces.tolist() == whole


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=TEXTS)
def test_a_text_cut_after_every_line_break_before_text_gives_the_ids_of_the_whole_text(bundle, text: str) -> None:  # type: ignore[no-untyped-def]
    """The cut encode_segments makes after a segment's first line break followed by a non-space character, made
    here at every such place outside control-token text: the parts' ids end to end are the whole text's."""
    assert bundle._cuts_lines()
    taken = [(m.start(), m.end()) for m in bundle._added_re.finditer(text)]
    cuts = [m.end() for m in LINE_START.finditer(text) if not any(a < m.end() < b for a, b in taken)]
    bounds = [0, *cuts, len(text)]
    parts = [text[a:b] for a, b in itertools.pairwise(bounds)]
    whole = bundle.backend.encode(text, add_special_tokens=False).ids
    assert [i for part in parts for i in bundle.backend.encode(part, add_special_tokens=False).ids] == whole
    ids, marks = bundle.encode_segments(text, {}, True, SegmentCache())
    assert ids.tolist() == whole
    if marks is not None:  # the checkpoints after each control token, as the slow way finds them
        slow = bundle._marks(text, ids)
        assert marks[0].tolist() == slow[0].tolist() and marks[1].tolist() == slow[1].tolist()


def test_a_long_text_is_cut_and_still_encodes_exactly(bundle) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(7)
    text = "".join(rng.choice(ATOMS, size=40_000))
    assert len(piece_bounds(text, 1 << 16, bundle._added_re)) > 1
    assert bundle.encode(text).tolist() == bundle.backend.encode(text, add_special_tokens=False).ids


def test_the_verdict_from_the_tokenizers_parts_is_the_verdict_from_its_whole_json() -> None:
    """pipeline_spec reads the model, pre-tokenizer and normalizer without serializing the vocabulary: on the
    tokenizers tried (the demo's, Qwen3's, Phi-3's) it gives splits_at_spaces the verdict the whole
    ``tokenizer.json`` gives, and the parts it gives are those of the whole text."""
    from tokenizers import Tokenizer

    backends = [load_tokenizer(None, None).backend]
    for name in ("qwen3", "phi-3-mini-instruct"):
        backends.append(Tokenizer.from_file(str(shared_path("tokenizers", name, "tokenizer.json"))))
    verdicts = []
    for backend in backends:
        whole = json.loads(backend.to_str())
        spec = pipeline_spec(backend)
        if spec is not None:
            assert spec["pre_tokenizer"] == whole.get("pre_tokenizer")
            assert spec["normalizer"] == whole.get("normalizer")
            assert spec["model"] == {"type": whole["model"]["type"], "dropout": whole["model"].get("dropout")}
            assert splits_at_spaces(spec) == splits_at_spaces(backend.to_str())
        verdicts.append(splits_at_spaces(spec if spec is not None else backend.to_str()))
    assert verdicts == [True, True, False]  # the demo's from its whole json, Qwen3's and Phi-3's from their parts


def test_tokenizers_whose_words_may_cross_a_space_are_encoded_whole() -> None:
    bpe = {"type": "BPE", "dropout": None, "merges": ["a b"]}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
    assert splits_at_spaces(json.dumps({"model": bpe, "pre_tokenizer": byte_level, "normalizer": None}))
    metaspace = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": False}
    assert not splits_at_spaces(json.dumps({"model": bpe, "pre_tokenizer": metaspace, "normalizer": None}))
    no_regex = {**byte_level, "use_regex": False}  # one word per text: merges may cross spaces
    assert not splits_at_spaces(json.dumps({"model": bpe, "pre_tokenizer": no_regex, "normalizer": None}))
    lowercase = {"type": "Lowercase"}
    assert not splits_at_spaces(json.dumps({"model": bpe, "pre_tokenizer": byte_level, "normalizer": lowercase}))
    odd = {"type": "Split", "pattern": {"Regex": r"\w+ \w+|\s+"}, "behavior": "Isolated", "invert": False}
    seq = {"type": "Sequence", "pretokenizers": [odd, no_regex]}
    assert not splits_at_spaces(json.dumps({"model": bpe, "pre_tokenizer": seq, "normalizer": None}))
    dropout = {**bpe, "dropout": 0.1}
    assert not splits_at_spaces(json.dumps({"model": dropout, "pre_tokenizer": byte_level, "normalizer": None}))


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        # o200k's run of punctuation may end in line breaks and slashes: "!\n/" is one word, across the line start
        ("gpt-oss", "Done!\n/usr/bin", "Done!\n"),
        # SentencePiece without a word-splitting pre-tokenizer: a line break and the word after it may merge
        ("phi-3-mini-instruct", "hi\nthere", "hi\n"),
    ],
)
def test_tokenizers_whose_words_may_cross_a_line_start_encode_each_segment_whole(
    name: str, text: str, line: str
) -> None:
    """The segment cut after a line break (LINE_START) is made only where it is proven: gpt-oss's and Phi-3's ids
    cross it (cut there, these texts would get other ids), so their segments are encoded whole, with the whole
    text's ids, over the seeded random texts too."""
    bundle = load_tokenizer(str(shared_path("tokenizers", name)), None)

    def enc(s: str) -> list[int]:
        return list(bundle.backend.encode(s, add_special_tokens=False).ids)

    assert LINE_START.search(text) and LINE_START.search(text).end() == len(line)  # type: ignore[union-attr]
    assert enc(line) + enc(text[len(line) :]) != enc(text)
    assert not bundle._cuts_lines()
    rng = np.random.default_rng(38)
    cache = SegmentCache()
    for _ in range(200):
        sample = "".join(rng.choice([*ATOMS, text], size=int(rng.integers(1, 60))))
        assert bundle.encode_segments(sample, {}, True, cache)[0].tolist() == enc(sample), sample


PEAK = """
import resource, sys
from msgtrain.linearize import load_tokenizer
tok = load_tokenizer(None, None)
text = " ".join(["words", "of", "prose", "again"] * 150_000)  # 3.1 MB
tok.encode("warm up")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ids = tok.encode(text)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 / len(text), len(ids) - len(text))
"""


def test_encoding_a_long_text_costs_a_small_multiple_of_it() -> None:
    # Whole, the library's encode of these 3 MB took ~200 bytes per byte (token strings, offsets, words).
    out = subprocess.run([sys.executable, "-c", PEAK], capture_output=True, text=True, cwd=ROOT, check=True)
    per_byte, tokens = out.stdout.split()
    assert int(tokens) == 0  # one token per byte
    assert float(per_byte) < 30, f"encoding peaked at {float(per_byte):.0f} bytes per input byte"
