"""Encoding a long text in bounded pieces, with the ids of the whole-text encoding.

One ``encode`` of a long text by the ``tokenizers`` library holds, per token, the token's string, its offsets, its
word index and masks, besides the pre-tokenizer's words with their offsets: 100–200 bytes per input byte at its
peak (4 MB of prose: +550 MB with Qwen3, +780 MB with a byte-level vocabulary). Encoded ``PIECE_CHARS`` characters
at a time, a text costs that much for one piece only, and 4 bytes per id for the rest.

Why the ids are the same: a piece boundary is a space between two letters (``"word| word"``), and a text is cut
there only for tokenizers whose structure makes that a boundary no token crosses (:func:`splits_at_spaces`):

- a BPE model (no dropout) over a pre-tokenizer that cuts words with the GPT-2 family's regular expressions
  (GPT-2's own through ``ByteLevel(use_regex=True)``; Qwen2/3's and Llama 3's / cl100k's as a ``Split`` before a
  ``ByteLevel`` without a regex). In each of them, a match that takes a letter takes a run of letters (optionally
  after one non-letter, non-digit, non-newline character) or an English contraction that ends in a letter; none
  takes a space after a letter, and none looks behind. So the match holding the letter before the space ends at
  the space, the next match starts at the space whatever came before it, and BPE merges only inside a match;
- or a byte-level BPE without merges (msgtrain's demo tokenizer): one token per byte, any boundary;
- with no normalizer, or NFC (a space is a starter that composes with nothing before it).

Added tokens are cut out of the text before the pre-tokenizer runs: no piece boundary falls inside one's text.
Each tokenizer is also checked once against whole-text encoding of a probe (:func:`pieces_agree`); a tokenizer
that fails it is encoded whole. ``tests/test_bounded_pieces.py`` compares both encodings on seeded random texts.

The same tokenizers also never cross a line break followed by a non-space character (``"user\n|Hello"``,
:data:`LINE_START`), which :meth:`TokenizerBundle.encode_segments` cuts segments at: in each pattern, only
whitespace alternatives hold a ``\r`` or ``\n`` (the optional character before a word or a run of punctuation is a
space or any non-letter, non-digit, non-newline character; a run of punctuation may end in line breaks), and a
whitespace match cannot take the non-space character after it, so the match holding the line break ends there; the
next match starts at the non-space character whatever came before it. NFC composes nothing with a line break.
Checked once per tokenizer on a probe as well (:func:`lines_agree`).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# A text longer than this is encoded about this many characters to a call of the library, in PIECES_PER_CALL pieces:
# what the library holds per token in flight (~130 bytes for a byte-level vocabulary) stays ~2 MiB. (Four pieces of
# 16 K characters to a call held ~8 MiB, the largest transient of a 1 MB record. One piece to a call would hold as
# little, but a call of the batch encoder with one text cost twice the CPU of four texts a quarter as long, with
# Qwen3 on a 4 MB record, one thread: 1.6 s against 0.7-0.9 s.)
PIECE_CHARS = 1 << 14
PIECES_PER_CALL = 4

# GPT-2's pattern (ByteLevel's own), Qwen2/3's, and Llama 3's / cl100k's, as tokenizer.json spells them.
_QWEN_TAIL = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_WORD_PATTERNS = frozenset(
    {
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}" + _QWEN_TAIL,
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}" + _QWEN_TAIL,
    }
)
# A space between two letters. ``[^\W\d_]`` is a letter for Python (str.isalpha) or a non-decimal numeral; either
# ends its match at the space in every pattern above.
_BOUNDARY = re.compile(r"(?<=[^\W\d_]) (?=[^\W\d_])")
# A line break followed by a non-space character: its end is a place no token crosses (see the module's reasons).
LINE_START = re.compile(r"[\r\n](?=\S)")
_PROBE = (
    "It's   a test: naïve café, 12345 items; they'll go.\n\n  Indented\tline ¼ done — ok?!\r\n"
    "日本語のテキスト and Ελληνικά words, e\u0301 combining, ÅNGSTRÖM \u00a0nbsp x" * 3
)


def pipeline_spec(backend: Any) -> dict[str, Any] | None:
    """What :func:`splits_at_spaces` reads of a tokenizer's ``tokenizer.json`` (its model's type and dropout, its
    pre-tokenizer and normalizer), from the backend's components: serializing the whole tokenizer and parsing it back
    took 0.3 s for Qwen3's vocabulary and merges, in every process. None where the components do not say it all (a
    byte-level pre-tokenizer without its regular expression, whose verdict rests on the merges): then the caller
    gives the whole ``tokenizer.json`` text."""
    try:
        model, pre, norm = backend.model, backend.pre_tokenizer, backend.normalizer
        spec = {
            "model": {"type": type(model).__name__, "dropout": getattr(model, "dropout", None)},
            "pre_tokenizer": None if pre is None else json.loads(pre.__getstate__()),
            "normalizer": None if norm is None else json.loads(norm.__getstate__()),
        }
    except (AttributeError, TypeError, ValueError):
        return None
    pre_spec = spec["pre_tokenizer"]
    if isinstance(pre_spec, dict) and pre_spec.get("type") == "ByteLevel" and not pre_spec.get("use_regex", True):
        return None
    return spec


def splits_at_spaces(backend_json: str | dict[str, Any]) -> bool:
    """Whether a tokenizer (its ``tokenizer.json`` text, or the parts :func:`pipeline_spec` gives) is one whose ids
    never cross a space between two letters (the module's reasons)."""
    if isinstance(backend_json, dict):
        spec = backend_json
    else:
        try:
            spec = json.loads(backend_json)
        except ValueError:
            return False
    model, pre, norm = spec.get("model") or {}, spec.get("pre_tokenizer"), spec.get("normalizer")
    if model.get("type") != "BPE" or model.get("dropout") not in (None, 0, 0.0):
        return False
    if norm is not None and norm.get("type") != "NFC":
        return False
    if not isinstance(pre, dict):
        return False
    if pre.get("type") == "ByteLevel" and not pre.get("add_prefix_space"):
        return bool(pre.get("use_regex", True)) or not model.get("merges")
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    if not steps or len(steps) != 2:
        return False
    split, byte_level = steps
    return (
        split.get("type") == "Split"
        and (split.get("pattern") or {}).get("Regex") in _WORD_PATTERNS
        and split.get("behavior") == "Isolated"
        and not split.get("invert")
        and byte_level.get("type") == "ByteLevel"
        and not byte_level.get("add_prefix_space")
        and not byte_level.get("use_regex", True)
    )


def piece_bounds(text: str, piece_chars: int, added: re.Pattern[str]) -> list[int]:
    """Where to cut ``text`` into pieces of about ``piece_chars`` characters: at spaces between two letters outside
    every added token's text, the first one at or after each multiple of ``piece_chars`` from the last cut (a text
    without such a space is one piece). Ends with ``len(text)``."""
    taken = [(m.start(), m.end()) for m in added.finditer(text)] if added.pattern != "(?!)" else []
    cuts: list[int] = []
    start = 0
    while len(text) - start > piece_chars:
        at = start + piece_chars
        m = _BOUNDARY.search(text, at)
        while m is not None and any(a < m.start() < b for a, b in taken):
            m = _BOUNDARY.search(text, m.start() + 1)
        if m is None:
            break
        cuts.append(m.start())
        start = m.start()
    return [*cuts, len(text)]


def grow_unwritten(array: np.ndarray, n: int) -> None:
    """Grow ``array`` (owned, nothing views it) to ``n`` items in place (``ndarray.resize``, a ``realloc``: a long
    array is its own mapping, moved without a copy), leaving the new room unwritten: numpy zeroes it only in a
    writeable array, and pages nothing writes are never resident (zeroed, the room of a long array was resident until
    it was used or cut off). A numpy that refuses to resize a read-only array grows it writeable, zeroed."""
    array.flags.writeable = False
    try:
        array.resize(n, refcheck=False)
    except ValueError:
        array.flags.writeable = True
        array.resize(n, refcheck=False)
    array.flags.writeable = True


def encode_in_pieces(
    batch: Callable[[list[str]], Sequence[Sequence[int]]], text: str, piece_chars: int, added: re.Pattern[str]
) -> np.ndarray:
    """The ids of ``text``, encoded by ``batch`` (texts → id lists) :data:`PIECES_PER_CALL` pieces of about
    ``piece_chars // PIECES_PER_CALL`` characters at a time (``piece_chars`` to a call), as int32.

    The ids go into one array grown in place (``ndarray.resize``, a ``realloc``: with the command line's allocator
    settings a long array is its own mapping, moved without a copy), sized by the ids per character so far, and cut
    to its length at the end: concatenating the pieces' arrays held the record's ids twice."""
    bounds = piece_bounds(text, max(piece_chars // PIECES_PER_CALL, 1), added)
    out = np.zeros(0, dtype=np.int32)
    n = start = 0
    for i in range(0, len(bounds), PIECES_PER_CALL):
        group = bounds[i : i + PIECES_PER_CALL]
        texts = []
        for end in group:
            texts.append(text[start:end])
            start = end
        for ids in batch(texts):
            m = len(ids)
            if n + m > out.shape[0]:
                # the ids per character so far, over the whole text, and an eighth more
                grow_unwritten(out, max(n + m, (n + m) * len(text) // max(start, 1) * 9 // 8 + 1024))
            out[n : n + m] = ids
            n += m
    out.resize(n, refcheck=False)
    return out


def pieces_agree(batch: Callable[[list[str]], Sequence[Sequence[int]]], added: re.Pattern[str]) -> bool:
    """Whether encoding the probe in small pieces gives the ids of encoding it whole (checked once per tokenizer)."""
    whole = np.asarray(batch([_PROBE])[0], dtype=np.int32)
    return bool(np.array_equal(encode_in_pieces(batch, _PROBE, 16, added), whole))


_LINE_PROBE = (
    "user\nHello there\n\nNew paragraph.\n- item 1\n-item\r\n(x) 12\n345 \n\tTabbed\n  spaced\n'll do\n's\n"
    '\u0301combining\n\u00a0nbsp\n日本語\n{"a": 1}\n</x>\n\n\n!!\n?\nend'
)


def lines_agree(batch: Callable[[list[str]], Sequence[Sequence[int]]], added: re.Pattern[str]) -> bool:
    """Whether a probe encoded in parts cut at every :data:`LINE_START` (outside added tokens' text) gives the ids of
    the probe encoded whole (checked once per tokenizer)."""
    text = _LINE_PROBE
    taken = [(m.start(), m.end()) for m in added.finditer(text)]
    cuts = [m.end() for m in LINE_START.finditer(text) if not any(a < m.end() < b for a, b in taken)]
    bounds = [0, *cuts, len(text)]
    parts = [text[a:b] for a, b in itertools.pairwise(bounds)]
    whole = [int(i) for i in batch([text])[0]]
    return whole == [int(i) for ids in batch(parts) for i in ids]


def fast_batch(backend: Any) -> Callable[[list[str]], list[list[int]]]:
    """The backend's batch encoder without offsets (tokenizers >= 0.21; else the plain one), as texts → id lists."""
    encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
    return lambda texts: [out.ids for out in encode(texts, add_special_tokens=False)]
