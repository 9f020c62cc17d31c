"""Tokenizer bundle: one loaded tokenizer + chat template, with exact and injection-safe encoding.

Invariants:
- ``encode(text)`` equals ``hf.encode(text, add_special_tokens=False)`` — the ids ``apply_chat_template`` produces
  for a rendered text — whenever no *content* carries added-token text.
- ``encode_from(base, text)`` reuses the ids of an already-encoded text up to the last added-token boundary they
  share and encodes only the rest. HF tokenizers split on added tokens before anything else, so ids never cross
  such a boundary; ``_check_boundary_split`` verifies that property once per tokenizer and disables reuse if the
  tokenizer breaks it (e.g. a normalizer that looks across tokens).
- ``encode_marked(text)`` encodes a rendering whose log strings were marked (:meth:`TokenizerBundle.mark_content`):
  the template's own control tokens stay control tokens, and every stretch between two of them that holds
  content's added-token text is encoded as that stretch's plain text (every added token split, SentencePiece
  word-start rules as at that position), so content never becomes a control token and the text is unchanged.
  Marker characters a log holds are escaped, so they come back as themselves. Templates that split a marker pair
  leave lone markers, which only break the text.
- The embedded demo tokenizer is built in code (byte-level, ChatML): no files, no network. It exists so a fresh
  offline machine can run the pipeline end to end; it is not a model's tokenizer.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import json
import os
import re
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from msgtrain.errors import TokenizerError
from msgtrain.linearize.hf_load import auto_tokenizer
from msgtrain.linearize.pieces import (
    LINE_START,
    PIECE_CHARS,
    encode_in_pieces,
    fast_batch,
    grow_unwritten,
    lines_agree,
    pieces_agree,
    pipeline_spec,
    splits_at_spaces,
)
from msgtrain.linearize.tokenizer_source import (
    load_from_hub,
    resolve_tokenizer,
    unreadable_vocabulary,
)

if TYPE_CHECKING:
    from msgtrain.linearize.template import RenderTrace

DEMO_TOKENIZER = "msgtrain-demo-bytes-chatml"
# Private markers in a marked rendering (see :meth:`TokenizerBundle.mark_content`). A log may hold these characters
# too: in marked strings every one of them is escaped (MARK_ESC + the character), so a marker in a rendering is
# always msgtrain's and a logged one always comes back as itself.
MARK_START = "\ue000"
MARK_END = "\ue001"
MARK_ESC = "\ue002"
_MARKER_CHARS = re.compile("[\ue000-\ue002]")


def has_markers(text: str) -> bool:
    """Whether ``text`` holds a marker character (``_MARKER_CHARS``): three substring tests, which pass over a text of
    narrower characters at once and scan any other with ``memchr``, where the regular expression looked at every
    character (170 us for a 20 K character rendering)."""
    return MARK_START in text or MARK_END in text or MARK_ESC in text


# One item of marked text: an escaped character, a marked pair (content's added-token text), or a lone marker (a
# template cut a pair or an escape: the marker is dropped, the text is kept).
_MARKUP = re.compile("\ue002(.)|\ue000([^\ue000-\ue002]*)\ue001|[\ue000-\ue002]", re.S)
# Assistant fields that are the policy's own text: templates parse them (inline ``<think>`` split at ``</think>``),
# and what the policy wrote as control tokens it generated as control tokens, so they are never wrapped.
_GENERATED_FIELDS = frozenset({"content", "reasoning_content", "thinking", "reasoning"})


# A template that escapes non-ASCII text (``tojson(ensure_ascii=True)``, as Python's json.dumps does by default)
# prints the markers as ``\ue000`` text; an escaped marker before an escaped marker character is a log's own
# character, printed as the template prints it.
_ESCAPED_MARKS = re.compile(r"\\u[eE]002(\\u[eE]00[0-2])|\\u[eE]00([01])")


def restore_escaped_marks(text: str) -> str:
    r"""A marked rendering with the markers a template escaped put back: ``\ue000`` / ``\ue001`` text becomes the
    marker pair again (so content's added-token text stays plain text and the markers never reach the tokens), and
    an escaped log character (``\ue002`` then ``\ue00N``) becomes what the template printed for that character.
    Text without an escaped marker is returned as it is."""
    if "\\u" not in text:
        return text

    def back(m: re.Match[str]) -> str:
        return m.group(1) if m.group(1) is not None else chr(0xE000 + int(m.group(2)))

    return _ESCAPED_MARKS.sub(back, text)


def unmark(text: str) -> tuple[str, bool]:
    """The text a marked rendering stands for, and whether it held a marked pair (content's added-token text)."""
    if not has_markers(text):
        return text, False
    pairs = False

    def plain(m: re.Match[str]) -> str:
        nonlocal pairs
        if m.group(1) is not None:
            return m.group(1)
        if m.group(2) is not None:
            pairs = True
            return m.group(2)
        return ""

    return _MARKUP.sub(plain, text), pairs


CHATML_TEMPLATE = (
    "{%- if tools -%}"
    "{{ '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{ messages[0].content + '\\n\\n' }}{% endif -%}"
    "{{ '# Tools\\n' }}{%- for tool in tools %}{{ tool | tojson + '\\n' }}{% endfor -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' -%}"
    "{{ '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if not (message.role == 'system' and loop.first) -%}"
    "{{ '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.role == 'assistant' and message.reasoning_content -%}"
    "{{ '<think>\\n' + message.reasoning_content + '\\n</think>\\n' }}"
    "{%- endif -%}"
    "{%- if message.content is string -%}{{ message.content }}"
    "{%- elif message.content -%}{%- for part in message.content -%}"
    "{%- if part.type == 'text' %}{{ part.text }}{% else %}{{ '<' + part.type + '>' }}{% endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- for call in message.tool_calls or [] -%}"
    "{{ '\\n<tool_call>' + {'name': call.function.name, 'arguments': call.function.arguments} | tojson"
    " + '</tool_call>' }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif -%}"
)


DEMO_EOS, DEMO_PAD, DEMO_START = "<|im_end|>", "<|endoftext|>", "<|im_start|>"


def _demo_tokenizer() -> Any:
    """The embedded demo tokenizer (256 byte tokens, ChatML) built with ``tokenizers`` alone: the backend, added
    tokens and facts :func:`_build_demo_tokenizer` gets through transformers (tests/test_startup.py compares them),
    so a run on it never imports transformers; anything else is asked of transformers' tokenizer, built on first
    use."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    from msgtrain.linearize.snapshot import SnapshotTokenizer

    byte_chars = pre_tokenizers.ByteLevel.alphabet()
    backend = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(sorted(byte_chars))}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B:1", special_tokens=[])
    specials = (DEMO_EOS, DEMO_PAD, DEMO_START)  # in the order transformers adds them: eos, pad, additional
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    flags = {"special": True, "lstrip": False, "rstrip": False, "normalized": False, "single_word": False}
    ids: dict[str, int] = {t: backend.token_to_id(t) or 0 for t in specials}  # added just above: never None
    facts = {
        "chat_template": CHATML_TEMPLATE,
        "added_tokens": {str(ids[t]): {"content": t, **flags} for t in specials},
        "all_special_ids": sorted(ids.values()),
        "eos_token_id": ids[DEMO_EOS],
        "special_tokens_map": {"eos_token": DEMO_EOS, "pad_token": DEMO_PAD},
        "len": backend.get_vocab_size(with_added_tokens=True),
    }

    class DemoTokenizer(SnapshotTokenizer):
        def _transformers(self) -> Any:
            return _build_demo_tokenizer()

        def as_transformers(self) -> Any:
            """transformers' build of this tokenizer (with this one's chat template), made once."""
            if self._hf is None:
                self._hf = self._transformers()
            self._hf.chat_template = self.chat_template
            return self._hf

    return DemoTokenizer(Path(DEMO_TOKENIZER), facts, backend, backend.to_str())


def _build_demo_tokenizer() -> Any:
    """The embedded demo tokenizer through transformers (what :func:`_demo_tokenizer` stands for)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_chars = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(byte_chars))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=DEMO_EOS, pad_token=DEMO_PAD, additional_special_tokens=[DEMO_START]
    )
    hf.chat_template = CHATML_TEMPLATE
    hf.name_or_path = DEMO_TOKENIZER
    return hf


def _load_and_snapshot(name: str, folder: Path, files: Any = None) -> Any:
    """The tokenizer of a checked local folder through transformers, stored as a snapshot when it may be (see
    :mod:`msgtrain.linearize.snapshot`), so the next process restores it without transformers.

    With snapshots on, transformers loads exactly the bytes the snapshot is keyed by (``files``, the folder read once,
    :func:`msgtrain.linearize.snapshot.read_folder`; read here when not given)."""
    from msgtrain.linearize import snapshot

    caching = snapshot.cache_root() is not None
    if caching and files is None:
        files = snapshot.read_folder(folder)
    try:
        hf = files.load_transformers() if caching and files is not None else auto_tokenizer(str(folder))
    except Exception as e:  # transformers raises OSError/ValueError/HF errors; all mean "cannot read this folder"
        raise unreadable_vocabulary(folder, name, e) from e
    if caching and files is not None:
        # A snapshot is an optimisation: whatever taking one raises (a tokenizer class with an unusual
        # surface), the tokenizer transformers loaded is used as it is.
        try:
            spec = snapshot.snapshotable(hf, backend_decodes_alike(hf))
            if spec is not None:
                snapshot.save(files, hf, spec)
        except Exception:
            pass
    return hf


def backend_decodes_alike(hf: Any) -> bool:
    """Whether ``hf.decode`` is its backend's decode and nothing else: transformers' fast tokenizer class with its
    own ``decode`` and ``_decode`` (not a subclass's) and no clean-up of tokenization spaces, or a snapshot of such
    a tokenizer. Then the backend can be called directly."""
    if getattr(type(hf), "decodes_like_backend", False):
        return True
    try:
        from transformers import PreTrainedTokenizerFast as fast
    except ImportError:
        return False
    cls = type(hf)
    return (
        isinstance(hf, fast)
        and cls.decode is fast.decode
        and cls._decode is fast._decode
        and getattr(hf, "_tokenizer", None) is hf.backend_tokenizer
        and getattr(hf, "clean_up_tokenization_spaces", None) is False
    )


def _load_hf(name: str | None, chat_template: str | None) -> Any:
    if name is None or name == DEMO_TOKENIZER:
        hf = _demo_tokenizer()
    else:
        source = resolve_tokenizer(name, download=True)
        if source.folder is None:
            assert source.hub_id is not None
            hf = load_from_hub(source.hub_id, auto_tokenizer)
        else:
            from msgtrain.linearize import snapshot

            files = snapshot.read_folder(source.folder) if snapshot.cache_root() is not None else None
            hf = snapshot.load(source.folder, files)
            if hf is None:
                hf = _load_and_snapshot(name, source.folder, files)
    if chat_template is not None:
        path = Path(chat_template)
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            if path.suffix == ".json":
                text = json.loads(text).get("chat_template", text)
            hf.chat_template = text
        else:
            raise TokenizerError(
                f"chat template file {chat_template!r} not found",
                hint="pass a .jinja or tokenizer_config.json",
            )
    if not getattr(hf, "chat_template", None):
        raise TokenizerError(
            f"tokenizer {name!r} has no chat template",
            hint="pass --chat-template FILE (a .jinja file or a tokenizer_config.json with chat_template)",
        )
    return hf


# The test suite sets MSGTRAIN_VERIFY_REPLAY=1: then the checkpoints encode_segments derives from its segments are
# also found the slow way (TokenizerBundle._marks) and any difference fails.
VERIFY_MARKS = os.environ.get("MSGTRAIN_VERIFY_REPLAY") == "1"


def _check_marks(fast: tuple[np.ndarray, np.ndarray], slow: tuple[np.ndarray, np.ndarray]) -> None:
    if not (np.array_equal(fast[0], slow[0]) and np.array_equal(fast[1], slow[1])):
        raise AssertionError(f"segment checkpoints {fast} differ from the text's {slow}")


# At most this many characters start the added tokens for :meth:`TokenizerBundle.has_added_text` to look for them
# before it runs the pattern.
_FEW_FIRSTS = 8

# A segment's ids this large, cached while an encoding is made of it and others, are then held as a view of that
# encoding's copy of them (a long message is held once in its conversation's cache and its rendering's encoding).
REBIND_BYTES = 1 << 20

# A segment this long is keyed in the segment caches by a digest of its text (blake2b of its UTF-8, a block at a time,
# and its length), not by the text: a long message is then not held once more, as a key, beside its renderings.
_DIGEST_CHARS = 1 << 16
_DIGEST_BLOCK = 1 << 20

# A long encoding's ids are made in a buffer with room after them (address space only: pages nothing writes are
# never resident), so an encoding that extends it (the joint rendering after its prompt, the next turn after that)
# writes its new ids there rather than copying the whole prefix into an array of its own. Per buffer, the end of the
# ids some encoding holds: only an encoding that ends there may extend it, so no two write the same room.
_ROOM_ENDS: dict[int, int] = {}
_ROOM_LOCK = threading.Lock()


def _with_room(n: int) -> np.ndarray:
    """An int32 buffer for ``n`` ids and a quarter more (and 64 K), its first ``n`` claimed."""
    buf = np.empty(n + n // 4 + (1 << 16), dtype=np.int32)
    key = id(buf)
    with _ROOM_LOCK:
        _ROOM_ENDS[key] = n
    weakref.finalize(buf, _ROOM_ENDS.pop, key, None)
    return buf


def _extended(base: np.ndarray, t: int, rest: np.ndarray) -> np.ndarray | None:
    """``base[:t]`` + ``rest`` as a read-only view of ``base``'s buffer, the ids past ``base`` written in its room,
    when ``base`` ends where the buffer's claimed ids end, ``rest`` starts with ``base[t:]`` and fits; else None."""
    buf = base.base
    if not isinstance(buf, np.ndarray) or id(buf) not in _ROOM_ENDS or rest.dtype != np.int32:
        return None
    n = base.shape[0]
    m = t + rest.shape[0]
    if base.dtype != np.int32 or not base.flags.c_contiguous or m <= n:
        return None
    start, rem = divmod(base.ctypes.data - buf.ctypes.data, base.itemsize)
    if rem or start + m > buf.shape[0]:
        return None
    block = 1 << 16
    if not all(
        np.array_equal(base[i : min(i + block, n)], rest[i - t : min(i + block, n) - t]) for i in range(t, n, block)
    ):
        return None
    with _ROOM_LOCK:
        if _ROOM_ENDS.get(id(buf)) != start + n:
            return None
        _ROOM_ENDS[id(buf)] = start + m
    buf[start + n : start + m] = rest[n - t :]
    out = buf[start : start + m]
    out.flags.writeable = False
    return out


def _grown_around(parts: list[np.ndarray], fresh: list[np.ndarray]) -> np.ndarray | None:
    """``parts`` concatenated in a buffer with room (as :func:`_with_room` makes it) that is the one long part's own
    array grown in place, when exactly one part is long (:data:`REBIND_BYTES` or more), was just encoded (in
    ``fresh``: the encoder's own array, owned, nothing views it) and appears once: its ids are moved up past the
    parts before it and the others written around them, so the long message's ids are never held twice (its
    array and the buffer they were copied into, 8 bytes per token at the linearizing peak). Else None.

    The growth (:func:`~msgtrain.linearize.pieces.grow_unwritten`) moves no ids and leaves the room unwritten (pages
    nothing writes are never resident), as :func:`_with_room`'s."""
    longs = [i for i, a in enumerate(parts) if a.nbytes >= REBIND_BYTES]
    if len(longs) != 1:
        return None
    i = longs[0]
    part = parts[i]
    if not any(part is f for f in fresh) or sum(a is part for a in parts) != 1:
        return None
    if part.base is not None or not (part.flags.owndata and part.flags.c_contiguous and part.flags.writeable):
        return None
    n = part.shape[0]
    before = sum(a.shape[0] for a in parts[:i])
    total = before + n + sum(a.shape[0] for a in parts[i + 1 :])
    grow_unwritten(part, total + total // 4 + (1 << 16))
    if before:
        block = 1 << 16
        for end in range(n, 0, -block):  # from the end: a block moved never overwrites one still to move
            start = max(end - block, 0)
            part[before + start : before + end] = part[start:end]
    at = 0
    for a in parts:
        if a is not part:
            part[at : at + a.shape[0]] = a
            at += a.shape[0]
        else:
            at += n
    key = id(part)
    with _ROOM_LOCK:
        _ROOM_ENDS[key] = total
    weakref.finalize(part, _ROOM_ENDS.pop, key, None)
    return part[:total]


def _count_in(ids: np.ndarray, table: np.ndarray) -> int:
    """How many of ``ids`` are members of ``table`` (:func:`in_table`), a block at a time (a whole long array's
    lookup held a mask as long as the array)."""
    block = 1 << 16
    return sum(int(np.count_nonzero(in_table(table, ids[i : i + block]))) for i in range(0, ids.shape[0], block))


SegmentKey = tuple[bool, str | bytes]  # (starts the input, the segment's text or, when long, its digest)


def segment_key(first: bool, text: str, start: int, end: int) -> SegmentKey:
    """The cache key of the segment ``text[start:end]``: its text, or past :data:`_DIGEST_CHARS` characters its
    digest (bytes, so never equal to a text key; UTF-8 with lone surrogates passed through is one-to-one, so equal
    digests mean equal texts but for a blake2b collision)."""
    if end - start < _DIGEST_CHARS:
        return first, text[start:end]
    h = hashlib.blake2b(digest_size=32)
    for i in range(start, end, _DIGEST_BLOCK):
        h.update(text[i : min(i + _DIGEST_BLOCK, end)].encode("utf-8", "surrogatepass"))
    h.update((end - start).to_bytes(8, "little"))
    return first, h.digest()


@dataclass
class Encoded:
    """A text with its ids and the (char_end, token_end) checkpoints after each added token in it."""

    text: str
    ids: np.ndarray
    char_marks: np.ndarray  # int64, sorted
    tok_marks: np.ndarray  # int64, aligned with char_marks


# What the run-wide segment cache of one tokenizer (:class:`SegmentCache`) may hold, per process: texts and ids with
# their objects' overhead. 128 MiB keeps a day's distinct system prompts, tool schemas and histories of a busy agent;
# beyond it the least recently used go first, so memory stays flat however many logs a run reads.
SEGMENT_CACHE_BYTES = 128 << 20
# A memo entry over 1/LARGEST_ENTRY of its memo's bound is never kept (4 MiB of the 128 MiB memos; a sixteenth
# before): a 1 MB message with a byte-level vocabulary (1 MB of text, 4 MB of ids) was kept in two memos for the
# rest of the run, ~10 MiB of a 1 MB record's ~20 MiB over the base. An entry under it (a Qwen3 text up to ~2 MB,
# any usual system prompt or history) is kept as before.
LARGEST_ENTRY = 32
# What one entry costs besides its text and ids: the key tuple, the dict entry and the ndarray object.
_ENTRY_OVERHEAD = 200


class SegmentCache:
    """Segment ids (see :meth:`TokenizerBundle.encode_segments`) kept for the whole run by the tokenizer that made
    them, least recently used first out once the entries pass ``max_bytes``.

    Renderings repeat whole segments: the same conversation's history at every turn, the system prompt and tool
    schemas of an agent in every conversation, the prompt of every rollout of an RL group, tool outputs. A
    segment's ids depend only on its text and on whether it starts the input (both are the key; see
    :meth:`TokenizerBundle.encode_segments` for why nothing else can matter), so the cache cannot change any
    output, and the encoder sees each distinct segment once while it stays cached. The bound counts the text
    (``sys.getsizeof``), the ids and a fixed overhead per entry; an entry over 1/:data:`LARGEST_ENTRY` of the
    bound is never kept. ``stored_chars`` (characters of the segments put) and ``evicted`` let a benchmark tell
    encoder work from distinct text: with nothing evicted, the segments stored are the distinct segments seen.
    """

    def __init__(self, max_bytes: int = SEGMENT_CACHE_BYTES):
        self.max_bytes = max_bytes
        self._ids: OrderedDict[SegmentKey, np.ndarray] = OrderedDict()
        self._sizes: dict[SegmentKey, int] = {}
        self.bytes = 0
        self.hits = 0
        self.stored_chars = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, key: SegmentKey) -> np.ndarray | None:
        ids = self._ids.get(key)
        if ids is not None:
            self._ids.move_to_end(key)
            self.hits += 1
        return ids

    def put(self, key: SegmentKey, ids: np.ndarray, chars: int | None = None, held: int | None = None) -> None:
        """Keep ``ids`` under ``key``; ``chars``: the segment's length in characters when the key is a digest;
        ``held``: the bytes the entry keeps alive when more than its ids' (a view of a longer encoding's ids)."""
        if key in self._ids:
            return
        size = sys.getsizeof(key[1]) + (ids.nbytes if held is None else held) + _ENTRY_OVERHEAD
        if size > self.max_bytes // LARGEST_ENTRY:
            return
        self._ids[key] = ids
        self._sizes[key] = size
        self.bytes += size
        self.stored_chars += len(key[1]) if chars is None else chars
        while self.bytes > self.max_bytes:
            old, _ = self._ids.popitem(last=False)
            self.bytes -= self._sizes.pop(old)
            self.evicted += 1

    def clear(self) -> None:
        self._ids.clear()
        self._sizes.clear()
        self.bytes = 0


# What the run-wide memo of whole encodings (:attr:`TokenizerBundle.encodings`) may hold per process.
ENCODED_CACHE_BYTES = 128 << 20


class EncodedCache:
    """Encodings of whole rendered texts (ids and checkpoints), kept for the run by the tokenizer that made them,
    least recently used first out past ``max_bytes`` (text, arrays and a fixed overhead per entry); an entry over
    1/:data:`LARGEST_ENTRY` of the bound is never kept. Keyed by the text alone: an encoding is a function of its
    text (its ids are ``encode(text)``, its checkpoints are found in the text), so a rendering seen again (the same
    context in a copied log, the prompt of every rollout of a group) is not encoded again. Its arrays are read-only:
    they are shared by every turn that gets them."""

    def __init__(self, max_bytes: int = ENCODED_CACHE_BYTES):
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, Encoded] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self.bytes = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, text: str) -> Encoded | None:
        enc = self._items.get(text)
        if enc is not None:
            self._items.move_to_end(text)
            self.hits += 1
        return enc

    def clear(self) -> None:
        self._items.clear()
        self._sizes.clear()
        self.bytes = 0

    def holds(self, enc: Encoded) -> bool:
        """Whether ``enc`` itself is an entry (not looked up: the order of use is left as it is)."""
        return self._items.get(enc.text) is enc

    def put(self, enc: Encoded) -> None:
        size = sys.getsizeof(enc.text) + enc.ids.nbytes + enc.char_marks.nbytes + enc.tok_marks.nbytes
        size += _ENTRY_OVERHEAD * 3
        if enc.text in self._items or size > self.max_bytes // LARGEST_ENTRY:
            return
        for array in (enc.ids, enc.char_marks, enc.tok_marks):
            array.flags.writeable = False
        self._items[enc.text] = enc
        self._sizes[enc.text] = size
        self.bytes += size
        while self.bytes > self.max_bytes:
            old, _ = self._items.popitem(last=False)
            self.bytes -= self._sizes.pop(old)


_INT32 = np.dtype(np.int32)
_UINT32 = np.dtype(np.uint32)
_UNSIGNED: dict[np.dtype[Any], np.dtype[Any]] = {_INT32: _UINT32, np.dtype(np.int64): np.dtype(np.uint64)}
# At most this many ids are looked up by one ``take``, which copies its indices to intp first (8 bytes per id: a
# long encoding's ids twice over); longer arrays are indexed, which converts them a buffer at a time.
_TAKE_IDS = 1 << 16


def membership_table(ids: Iterable[int], size: int) -> np.ndarray:
    """A boolean table for :func:`in_table`: True at each of ``ids`` (every one below ``size``), False elsewhere,
    with one False entry past ``size`` that ids beyond the table are clipped to."""
    table = np.zeros(size + 1, dtype=bool)
    table[np.fromiter(ids, dtype=np.int64)] = True
    return table


def in_table(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``table[ids]`` for a table made by :func:`membership_table` (``np.isin`` by lookup: a handful of ids tested
    against every completion, every turn); ids outside the table are not members.

    Up to :data:`_TAKE_IDS` int32 ids (every encoding's) in one call: seen unsigned, a negative id is larger than any
    table, and ``take`` clips an id past the table to its last entry, which is False. Otherwise every id inside the
    table is told by one reduction, and the rest are bounded first."""
    if ids.dtype is _INT32 and ids.shape[0] <= _TAKE_IDS:
        return table.take(ids.view(_UINT32), mode="clip")
    unsigned = _UNSIGNED.get(ids.dtype)
    if ids.shape[0] == 0 or (unsigned is not None and int(ids.view(unsigned).max()) < table.shape[0]):
        return table[ids]
    inside = (ids >= 0) & (ids < table.shape[0])
    out = np.zeros(ids.shape[0], dtype=bool)
    out[inside] = table[ids[inside]]
    return out


class TokenizerBundle:
    """A loaded HF tokenizer plus everything the linearizer needs from it."""

    # Whether the bundle encodes whole conversations itself (``encode_messages``, no chat template): Mistral's
    # tokenizers through mistral-common (:mod:`msgtrain.linearize.mistral`).
    encodes_messages = False

    def __init__(self, hf: Any, name: str):
        self.base = hf  # what the linearizer reads: the loaded tokenizer (a snapshot, the embedded one, transformers')
        self.name = name
        # Named templates (tokenizer_config's list of {name, template}: Command R+, Hermes) are chosen per rendering
        # as apply_chat_template chooses: ``tool_use`` when tools are offered and it exists, else ``default``.
        self.named_templates: dict[str, str] = dict(hf.chat_template) if isinstance(hf.chat_template, dict) else {}
        self.chat_template: str = self._default_template(hf.chat_template)
        self.reads_clock = any("strftime_now" in t for t in self.template_texts())
        self._fast: Any = None
        self._kwargs_cache: dict[str, dict[str, Any]] = {}  # before _stop_ids(), which renders probes
        self.backend = hf.backend_tokenizer
        added = hf.added_tokens_encoder  # content -> id, special and non-special added tokens
        self.added_strings = sorted(added, key=len, reverse=True)
        self.added_ids = np.array(sorted(added.values()), dtype=np.int64)
        # ids -> "is an added token" by one gather (np.isin sorts on every call)
        self._is_added = membership_table(self.added_ids, max(len(hf), int(self.added_ids.max(initial=0)) + 1))
        self._added_set = frozenset(int(i) for i in self.added_ids)
        self.special_ids = {int(i) for i in hf.all_special_ids}
        self._added_re = re.compile("|".join(map(re.escape, self.added_strings)) or "(?!)")
        # The characters added tokens start with, when they are a few (every Qwen, Llama 3 or ChatML token starts
        # with "<"): a text holding none of them holds no added token, told by substring tests, not the pattern.
        firsts = sorted({t[0] for t in self.added_strings if t})
        self._added_firsts: tuple[str, ...] | None = tuple(firsts) if len(firsts) <= _FEW_FIRSTS else None
        self.stop_ids = self._stop_ids()
        self.whitespace_ids = self._whitespace_ids()
        self.boundary_reuse = self._check_boundary_split()
        self._pieces: bool | None = None  # whether long texts are encoded in pieces: decided at the first one
        self._lines: bool | None = None  # whether segments are cut after line breaks: decided at the first one
        self._decode_direct = self._backend_decodes_alike()
        self.encode_calls = 0
        self.encoded_chars = 0
        self.encoded_tokens = 0
        self.renders = 0  # chat template renderings of every Renderer on this tokenizer (a run's count, for benchmarks)
        # Segment ids for the whole run (every file and conversation this process converts with this tokenizer).
        self.segment_cache = SegmentCache()
        self.encodings = EncodedCache()  # whole renderings' encodings, for the run likewise
        self._plain: dict[str, Any] = {}
        # added-token text -> whether the tokenizer strips whitespace before it (lstrip) / after it (rstrip)
        decoder = hf.added_tokens_decoder.values()
        self._strips: tuple[dict[str, bool], dict[str, bool]] = (
            {t.content: bool(t.lstrip) for t in decoder},
            {t.content: bool(t.rstrip) for t in decoder},
        )

    def clear_run_memos(self) -> None:
        """Forget what the run memoized with this tokenizer (segment ids, encodings, renderings): a measurement of
        one conversation's own work starts here."""
        for memo in (self.segment_cache, self.encodings, self.__dict__.get("_render_cache")):
            if memo is not None:
                memo.clear()

    def encode_messages(self, messages: Sequence[dict[str, Any]], tools: Sequence[Any], *, final: bool) -> np.ndarray:
        """The ids of a conversation, for bundles that :attr:`encodes_messages`; this one renders a template."""
        raise TypeError(f"tokenizer {self.name} renders a chat template: render, then encode the text")

    def encodes_media(self, modality: str, url: str) -> bool:
        """Whether a bundle that :attr:`encodes_messages` encodes this media part (else it leaves it out)."""
        return False

    # -------------------------------------------------------------- facts
    @property
    def hf(self) -> Any:
        """The tokenizer as transformers gives it (a trainer's ``processing_class``, ``save_pretrained``): the loaded
        one, or for the embedded tokenizer (built without transformers) transformers' build of it, on first use."""
        as_transformers = getattr(self.base, "as_transformers", None)
        return as_transformers() if as_transformers is not None else self.base

    @hf.setter
    def hf(self, value: Any) -> None:
        self.base = value

    def _stop_ids(self) -> set[int]:
        """Tokens that end a sampled turn: EOS, generation-config EOS ids, and the token the template writes
        right after an assistant message's content (found by probing the template, not per model)."""
        ids: set[int] = set()
        if self.base.eos_token_id is not None:
            ids.add(int(self.base.eos_token_id))
        folder = Path(str(getattr(self.base, "name_or_path", "")))
        gen_cfg = folder / "generation_config.json"
        if gen_cfg.is_file():
            try:
                eos = json.loads(gen_cfg.read_text()).get("eos_token_id")
                ids.update(int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None)
            except (ValueError, OSError):
                pass
        self.declared_stop_ids = frozenset(ids)
        declared = [str(t) for t in self.base.convert_ids_to_tokens(sorted(ids)) if t in self.base.added_tokens_encoder]
        texts = template_stop_texts(
            lambda msgs, tools: self.render(msgs, tools=tools, add_generation_prompt=False), self._added_re, declared
        )
        ids.update(int(self.base.added_tokens_encoder[t]) for t in texts)
        return ids

    @functools.cached_property
    def eos_stop_text(self) -> str | None:
        """The text of EOS when it is a stop token written as an added token (what a turn the template marks no end
        of stopped on), else None."""
        eos = self.base.eos_token_id
        if eos is None or int(eos) not in self.stop_ids or int(eos) not in self._added_set:
            return None
        return self.decode([int(eos)])

    @functools.cached_property
    def stop_pattern(self) -> re.Pattern[str] | None:
        """Whitespace then the text of one stop token that is an added token (what
        :func:`msgtrain.linearize.completion.sampled_stop` looks for after a message), or None."""
        return stop_pattern(self.decode([i]) for i in sorted(self.stop_ids) if i in self._added_set)

    def _whitespace_ids(self) -> set[int]:
        out = set()
        for s in (" ", "\n", "\n\n", "\t", "  ", "\r\n", " \n"):
            enc = self.base.encode(s, add_special_tokens=False)
            if len(enc) == 1:
                out.add(int(enc[0]))
        return out

    @functools.cached_property
    def fingerprint(self) -> str:
        """A hash of everything of the tokenizer that can change a sample's bytes (it keys resumed parts): the
        vocabulary (the backend's serialization), the chat template, the special tokens the template is given
        (``bos_token``, ...), the added tokens and their flags, the ids that end a turn (EOS and
        ``generation_config.json``), the bytes of every file in the tokenizer's folder (weights excluded: whatever
        transformers reads from it) and the versions of the libraries that tokenize and render. Made on first use
        (serializing a 150k-vocabulary tokenizer takes a third of a second): the process that plans a run needs it,
        its workers do not."""
        h = hashlib.blake2b(digest_size=12)
        # A restored snapshot knows its serialization (checked equal to ``to_str()`` when it was restored).
        known = getattr(self.base, "backend_json", None) if self.backend is self.base.backend_tokenizer else None
        h.update((known if isinstance(known, str) else self.backend.to_str()).encode())
        for text in self.template_texts():
            h.update(b"\0" + text.encode())
        h.update(b"\0" + json.dumps(self._key_facts(), sort_keys=True, default=str).encode())
        return h.hexdigest()

    def _key_facts(self) -> dict[str, Any]:
        """What :attr:`fingerprint` covers besides the vocabulary and the template."""
        from msgtrain.cache import version
        from msgtrain.linearize.snapshot import snapshot_key

        added = sorted(
            (int(i), t.content, bool(t.special), bool(t.lstrip), bool(t.rstrip), bool(t.normalized))
            for i, t in self.base.added_tokens_decoder.items()
        )
        folder = Path(str(getattr(self.base, "name_or_path", "") or ""))
        return {
            "special_tokens_map": self.base.special_tokens_map,
            "added_tokens": added,
            "stop_ids": sorted(self.stop_ids),
            "files": snapshot_key(folder) if folder.is_dir() else None,
            "libraries": [version(name) for name in ("tokenizers", "transformers", "jinja2")],
        }

    def _check_boundary_split(self) -> bool:
        """Whether a text's ids are its segments' ids end to end (segments: up to and including each added token).

        The tokenizers library finds added tokens in the raw text first and encodes every stretch between two of
        them on its own, so this holds when the boundary is only that: no added token takes whitespace from the
        stretch after it (``rstrip``) or must stand as a whole word (``single_word``: decided by its neighbours), and
        none is matched in normalized text (found after a normalizer ran, where the raw text's matches need not
        be). ``lstrip`` takes whitespace before the token, inside its own segment. Then the samples are checked."""
        normalizer = getattr(self.backend, "normalizer", None)
        for t in self.base.added_tokens_decoder.values():
            if t.rstrip or t.single_word or (t.normalized and normalizer is not None):
                return False
        samples = [
            "<|im_start|>user\nHello world<|im_end|>\n<|im_start|>assistant\n Sure, here it is.",
            "alpha beta" + (self.added_strings[0] if self.added_strings else "") + "\n  gamma delta  \n",
        ]
        for text in samples:
            whole = self.base.encode(text, add_special_tokens=False)
            for m in self._added_re.finditer(text):
                left = self.base.encode(text[: m.end()], add_special_tokens=False)
                right = self.base.encode(text[m.end() :], add_special_tokens=False)
                if left + right != whole:
                    return False
        return True

    # -------------------------------------------------------------- rendering
    def render(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool,
        template_kwargs: dict[str, Any] | None = None,
        prepared: bool = False,
    ) -> str:
        """Apply the chat template (transformers' sandboxed Jinja environment) and return text.

        ``prepared``: ``messages`` and ``tools`` already went through :meth:`prepare` (the Renderer does that once
        per node), so the per-call deep copy ``apply_chat_template`` makes is skipped; the text is the same.
        """
        fast = self._fast_render()
        if fast is None:
            out = self.base.apply_chat_template(
                list(messages),
                tools=list(tools) if tools else None,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **(template_kwargs or {}),
            )
            return str(out)
        compile_template, plain, _ = fast
        # Looked up per call (a cached hit): the same object whose globals render._pinned_date patches.
        compiled = compile_template(self.template_for(tools))
        chat = list(messages) if prepared else self.prepare(messages)
        schemas = (list(tools) if prepared else plain(list(tools))) if tools else None
        from msgtrain.linearize.template import render_template

        variables = {"messages": chat, **self._variables(schemas, add_generation_prompt, template_kwargs)}
        return render_template(compiled, variables)

    def render_traced(
        self,
        messages: list[dict[str, Any]],
        ids: list[str],
        ref: RenderTrace | None,
        *,
        tools: list[Any] | None,
        add_generation_prompt: bool,
        template_kwargs: dict[str, Any] | None = None,
    ) -> tuple[str, RenderTrace] | None:
        """:meth:`render` of prepared ``messages`` that replays what an earlier rendering ``ref`` (same tools,
        kwargs and generation flag; ``ids`` name the messages) allows (see ``msgtrain.linearize.template``), with
        the trace of this rendering. None when this template or transformers cannot be traced."""
        fast = self._fast_render()
        if fast is None:
            return None
        from msgtrain.linearize.template import compile_traced_template, render_traced

        template = compile_traced_template(self.template_for(tools))
        if template is None:
            return None
        variables = self._variables(tools or None, add_generation_prompt, template_kwargs)
        return render_traced(template, messages, ids, ref, variables)

    def template_for(self, tools: Sequence[Any] | None) -> str:
        """The template a rendering with these tools uses: the ``tool_use`` one of named templates when tools are
        offered (``transformers``' ``get_chat_template``), else the default."""
        if tools and "tool_use" in self.named_templates:
            return self.named_templates["tool_use"]
        return self.chat_template

    def template_texts(self) -> list[str]:
        """Every template this tokenizer may render with (the default first)."""
        return [self.chat_template, *(t for n, t in sorted(self.named_templates.items()) if t != self.chat_template)]

    @staticmethod
    def _default_template(template: Any) -> str:
        if not isinstance(template, dict):
            return template
        if "default" in template:
            return str(template["default"])
        if len(template) == 1:
            return str(next(iter(template.values())))
        raise TokenizerError(
            f"the tokenizer has several chat templates ({', '.join(sorted(template))}) and none named 'default'",
            hint="pass the one the model was served with: --chat-template FILE (a .jinja file)",
        )

    def _variables(
        self, tools: list[Any] | None, add_generation_prompt: bool, template_kwargs: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Everything but ``messages`` a template is rendered with, as ``apply_chat_template`` passes it."""
        return {
            "tools": tools,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
            **self._template_kwargs(template_kwargs),
        }

    def _template_kwargs(self, template_kwargs: dict[str, Any] | None) -> dict[str, Any]:
        """Special tokens and template kwargs as the template sees them, made once per kwargs (envs repeat)."""
        key = json.dumps(template_kwargs, sort_keys=True, default=repr) if template_kwargs else ""
        out = self._kwargs_cache.get(key)
        if out is None:
            fast = self._fast_render()
            merged = {**self.base.special_tokens_map, **(template_kwargs or {})}
            out = fast[1](merged) if fast is not None else merged
            if len(self._kwargs_cache) > 64:
                self._kwargs_cache.clear()
            self._kwargs_cache[key] = out
        return out

    def prepare(self, values: Sequence[Any]) -> list[Any]:
        """Messages (or tool schemas) as ``apply_chat_template`` hands them to the template: plain JSON copies,
        reasoning under each name templates read. Templates run in an immutable sandbox, so copies can be shared."""
        fast = self._fast_render()
        if fast is None:
            return list(values)
        _, plain, alias = fast
        return list(alias(plain(list(values))))

    def _fast_render(self) -> tuple[Any, Any, Any] | None:
        """transformers' template compiler and data helpers, when this transformers has them (else None: then
        rendering goes through ``apply_chat_template``)."""
        if self._fast is None:
            try:
                from msgtrain.linearize.hf_chat import chat_template_helper
                from msgtrain.linearize.template import compile_chat_template

                plain, alias = (
                    chat_template_helper("_plain_template_data"),
                    chat_template_helper("_alias_reasoning_fields"),
                )
                compile_chat_template(self.chat_template)  # ImportError here too when transformers lacks it
                self._fast = (compile_chat_template, plain, alias)
            except ImportError:
                self._fast = False
        return self._fast or None

    # -------------------------------------------------------------- encoding
    def is_added(self, ids: np.ndarray) -> np.ndarray:
        """Which of ``ids`` are added (control) tokens; ids outside the vocabulary are not."""
        return in_table(self._is_added, ids)

    def _unsplit(self) -> None:
        # transformers 5 leaves ``encode_special_tokens`` set on the shared backend after any call with
        # ``split_special_tokens=True`` (audit code, a user's own call): then no control token would be found.
        if self.backend.encode_special_tokens:
            self.backend.encode_special_tokens = False

    def has_added_text(self, text: str) -> bool:
        firsts = self._added_firsts
        if firsts is not None and (firsts[0] not in text if len(firsts) == 1 else not any(c in text for c in firsts)):
            return False
        return self._added_re.search(text) is not None

    def encode(self, text: str) -> np.ndarray:
        self.encode_calls += 1
        self._unsplit()
        self.encoded_chars += len(text)
        if len(text) > PIECE_CHARS and self._in_pieces():
            ids = self._batch_ids([text])[0]
        else:
            ids = np.asarray(self.backend.encode(text, add_special_tokens=False).ids, dtype=np.int32)
        self.encoded_tokens += int(ids.shape[0])
        return ids

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        self.encode_calls += 1
        self._unsplit()
        self.encoded_chars += sum(map(len, texts))
        arrays = self._batch_ids(texts)
        self.encoded_tokens += sum(int(a.shape[0]) for a in arrays)
        return arrays

    def _cuts_lines(self) -> bool:
        """Whether segments may be cut after a line break followed by text (:data:`LINE_START`), decided once:
        for the tokenizers whose long texts may be cut at spaces (the same pre-tokenizers make both cuts exact,
        :mod:`msgtrain.linearize.pieces`), checked on a probe."""
        if self._lines is None:
            self._lines = self._in_pieces() and lines_agree(fast_batch(self.backend), self._added_re)
        return self._lines

    def _in_pieces(self) -> bool:
        """Whether a long text may be encoded in bounded pieces (:mod:`msgtrain.linearize.pieces`), decided once."""
        if self._pieces is None:
            spec = pipeline_spec(self.backend)
            self._pieces = splits_at_spaces(spec if spec is not None else self.backend.to_str()) and pieces_agree(
                fast_batch(self.backend), self._added_re
            )
        return self._pieces

    def _batch_ids(self, texts: list[str]) -> list[np.ndarray]:
        """The ids of each text (no offsets); a text over ``PIECE_CHARS`` in bounded pieces where that is exact,
        so a long text costs the library's per-token overhead for one piece at a time, not for all of it."""
        return [np.asarray(ids, dtype=np.int32) for ids in self._id_lists(texts)]

    def _id_lists(self, texts: list[str]) -> list[list[int] | np.ndarray]:
        """:meth:`_batch_ids` as the encoder gives them: a list of ints per text (an array for a long text encoded in
        pieces), for callers that look at each id in Python."""
        batch = fast_batch(self.backend)
        long = [i for i, t in enumerate(texts) if len(t) > PIECE_CHARS] if self._in_pieces() else []
        if not long:
            return list(batch(texts))
        out: list[list[int] | np.ndarray | None] = [None] * len(texts)
        for i in long:
            out[i] = encode_in_pieces(batch, texts[i], PIECE_CHARS, self._added_re)
        short = [i for i in range(len(texts)) if out[i] is None]
        for i, ids in zip(short, batch([texts[i] for i in short]) if short else [], strict=True):
            out[i] = ids
        return [a for a in out if a is not None]

    def _control_matches(self, text: str) -> list[re.Match[str]]:
        """The template's own control tokens in a marked rendering: added-token text outside marked pairs, up to the
        first lone start marker (a template that cut a pair leaves one; a later text may close it, so nothing
        after it is a safe boundary)."""
        if not has_markers(text):
            return list(self._added_re.finditer(text))
        owned: list[tuple[int, int]] = []  # marked pairs, in order
        limit = len(text)
        for m in _MARKUP.finditer(text):
            if m.group(2) is not None:
                owned.append((m.start(), m.end()))
            elif m.group(1) is None and m.group(0) == MARK_START:
                limit = m.start()
                break
        starts = [a for a, _ in owned]
        out = []
        for m in self._added_re.finditer(text, 0, limit):
            i = bisect.bisect_right(starts, m.start()) - 1
            if i < 0 or m.start() >= owned[i][1]:
                out.append(m)
        return out

    def _marks(
        self, text: str, ids: np.ndarray, char_offset: int = 0, tok_offset: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        # Only the template's own control tokens are boundaries: content's added-token text is plain text.
        pos = np.flatnonzero(self.is_added(ids)).astype(np.int64) + 1
        every = self._control_matches_all(text)
        if len(every) != pos.shape[0]:
            # Added-token text that did not become an added id (or vice versa): no safe checkpoints here.
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        # Without marker characters both lists are every added-token match: the text is searched once.
        owned = every if not has_markers(text) else self._control_matches(text)
        ends = np.fromiter((m.end() for m in owned), dtype=np.int64, count=len(owned))
        return ends + char_offset, pos[: ends.shape[0]] + tok_offset

    def encode_segments(
        self,
        text: str,
        cache: dict[SegmentKey, np.ndarray],
        at_start: bool,
        shared: SegmentCache | None = None,
        offsets: tuple[int, int] = (0, 0),
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        """``encode(text)``, a segment at a time through ``cache``, new segments in one batched call; with the text's
        (char_end, token_end) checkpoints after each added token when the segments give them (else None: then
        :meth:`_marks` finds them).

        A segment is the text up to and including the next added token (the last one: the rest). HF tokenizers
        split on added tokens before anything else, so a text's ids are its segments' ids end to end — the same
        fact :meth:`encode_from` relies on, and only used when :attr:`boundary_reuse` confirmed it for this
        tokenizer. Each newly encoded segment is checked to hold exactly the added token it ends with (none for
        the rest); otherwise the whole text is encoded at once. So every segment that ends with an added token ends
        with its id, and the checkpoints are the segments' ends, in characters and in tokens: exactly what
        :meth:`_marks` finds for a text without marker characters. ``at_start``: the text starts a rendering (its
        first segment is cached apart: some tokenizers treat the start of the input specially). So a segment's ids
        are a function of its text and of ``at_start`` alone, whatever precedes it, and any cache keyed by both is
        exact. Where the tokenizer's pre-tokenizer never crosses a line break followed by a non-space character
        (:data:`LINE_START`, :meth:`_cuts_lines`), a segment is cached as two parts, cut after its first such line
        break: a message's text then costs one encoding however the template introduces it. The cache lives as
        long as its owner wants (the linearizer keeps one per conversation, whose renderings repeat segments: a
        template that re-renders history, a prompt and the same prompt with the turn); ``shared`` (the run-wide
        :attr:`segment_cache`) is looked up for what ``cache`` lacks and learns every segment encoded here. ``offsets``:
        (characters, tokens) added to the checkpoints (``text`` continues an encoding that long)."""
        if not self.boundary_reuse:
            return self.encode(text), None
        found = list(self._added_re.finditer(text))
        matched = len(found)  # the first ``matched`` segments end with an added token
        cuts = [m.end() for m in found]
        plain_ends = [m.start() for m in found]  # where each segment's text before its added token ends
        if not cuts or cuts[-1] != len(text):
            cuts.append(len(text))
            plain_ends.append(len(text))
        line = LINE_START if self._cuts_lines() else None
        keys: list[SegmentKey] = []
        parts: list[np.ndarray | None] = []  # per key, its ids (None until a new part is encoded)
        last_parts: list[int] = []  # per segment, the index in ``keys`` of its last part
        # new part -> (whether it ends with an added token's text, where it starts and ends in ``text``)
        missing: dict[SegmentKey, tuple[bool, int, int]] = {}
        known = shared.get if shared is not None else None
        start = 0
        for i, end in enumerate(cuts):
            ends_added = i < matched
            first = at_start and start == 0
            # A segment is cut once more after its first line break followed by text (a role header, the blank
            # line after a reasoning block): the same message text then has the same part whatever the template
            # wrote before it (Qwen3 renders the latest reply after its reasoning and older ones without).
            m = line.search(text, start, plain_ends[i]) if line is not None else None
            spans = (
                ((first, start, end, ends_added),)
                if m is None
                else (
                    (first, start, m.end(), False),
                    (False, m.end(), end, ends_added),
                )
            )
            for part_first, lo, hi, key_ends_added in spans:
                key = (part_first, text[lo:hi]) if hi - lo < _DIGEST_CHARS else segment_key(part_first, text, lo, hi)
                keys.append(key)
                ids = cache.get(key)
                if ids is None and known is not None:
                    ids = known(key)
                    if ids is not None:
                        cache[key] = ids
                if ids is None:
                    missing[key] = (key_ends_added, lo, hi)
                parts.append(ids)
            last_parts.append(len(keys) - 1)
            start = end
        fresh: list[np.ndarray] = []  # the long parts just encoded (the encoder's own arrays)
        if missing:
            encoded = self._encode_missing(text, missing, cache)
            if encoded is None:
                return self.encode(text), None
            fresh = encoded
            parts = [cache[k] if ids is None else ids for k, ids in zip(keys, parts, strict=True)]
        arrays = [ids for ids in parts if ids is not None]  # every one, by now
        del parts
        if not arrays:
            return np.zeros(0, dtype=np.int32), None
        lengths = [a.shape[0] for a in arrays]  # before a long part grows in place into the whole encoding
        rebound: dict[SegmentKey, int] = {}  # long segments held as views of ``ids``: the bytes they keep alive
        if len(arrays) == 1:  # one segment (a long text): its cached ids, read-only, not a copy of them
            ids = arrays[0].view()
            ids.flags.writeable = False
        else:
            total = sum(lengths)
            if total * 4 >= REBIND_BYTES and all(a.dtype == np.int32 for a in arrays):
                # room for an encoding extending it; a long segment just encoded becomes that buffer itself
                grown = _grown_around(arrays, fresh) if fresh else None
                ids = grown if grown is not None else np.concatenate(arrays, out=_with_room(total)[:total])
            else:
                ids = np.concatenate(arrays)
            if ids.nbytes >= REBIND_BYTES:  # else no part is as large
                at = 0
                for key, part, n in zip(keys, arrays, lengths, strict=True):
                    if n * part.itemsize >= REBIND_BYTES and cache.get(key) is part:
                        view = ids[at : at + n]
                        view.flags.writeable = False
                        cache[key] = view  # the copy just made, not a second array of the same ids
                        rebound[key] = ids.base.nbytes if isinstance(ids.base, np.ndarray) else ids.nbytes
                    at += n
            ids.flags.writeable = False
        if shared is not None:
            # After the rebinding: the run-wide cache keeps a long segment as the view its conversation keeps,
            # charged the whole encoding it keeps alive (its own array beside it was a second copy of a long
            # message's ids for the rest of the run; one over the cache's entry bound is not kept).
            for key, (_, lo, hi) in missing.items():
                shared.put(key, cache[key], hi - lo, rebound.get(key))
        if has_markers(text):
            return ids, None  # marker characters: only :meth:`_marks` tells the template's tokens from content's
        # A handful of checkpoints: summed in Python, not by numpy calls whose overhead is most of their cost.
        token_ends = list(itertools.accumulate(lengths))
        if len(last_parts) != len(keys):
            token_ends = [token_ends[i] for i in last_parts]
        chars, tokens = offsets
        return ids, (
            np.array([c + chars for c in cuts[:matched]], dtype=np.int64),
            np.array([t + tokens for t in token_ends[:matched]], dtype=np.int64),
        )

    def _encode_missing(
        self,
        text: str,
        missing: dict[SegmentKey, tuple[bool, int, int]],
        cache: dict[SegmentKey, np.ndarray],
    ) -> list[np.ndarray] | None:
        """Encode the parts of ``text`` :meth:`encode_segments` found in no cache (key -> whether it ends with an
        added token's text, its start and end) in one batched call, into ``cache``, and give the long ones' arrays
        (the encoder's own, kept as they are); None (nothing kept) when they do not split as expected: then the text
        is encoded whole."""
        spans = list(missing.values())
        self.encode_calls += 1
        self.encoded_chars += sum(hi - lo for _, lo, hi in spans)
        self._unsplit()
        # The fast batch encoder (tokenizers >= 0.21) skips offsets, which ids do not depend on. A short segment's ids
        # come as Python ints, gathered into one int32 array whose views are the segments' ids; a long text encoded in
        # pieces comes as one int32 array, kept as it is (its ids as a Python list would cost 8 to 36 bytes each,
        # beside the array).
        id_lists = self._id_lists([text[lo:hi] for _, lo, hi in spans])
        lengths = list(map(len, id_lists))
        self.encoded_tokens += sum(lengths)
        if 0 in lengths:
            return None  # an empty segment encoding: no shortcut here
        # Each new segment must hold exactly the added token its text ends with (none for the rest), as its last id.
        # Checked for the whole batch at once: the last id of every segment that ends with an added token's text is
        # added, and the batch holds no other added id.
        is_added = self._added_set.__contains__
        expected = 0
        for ids_of, (ends_added, _, _) in zip(id_lists, spans, strict=True):
            if ends_added:
                if not is_added(int(ids_of[-1])):
                    return None  # a segment that does not split as expected: no shortcut
                expected += 1
        short = [ids_of for ids_of in id_lists if not isinstance(ids_of, np.ndarray)]
        flat = np.fromiter(itertools.chain.from_iterable(short), dtype=np.int32, count=sum(map(len, short)))
        added_seen = int(np.count_nonzero(self.is_added(flat)))
        if len(short) < len(id_lists):
            added_seen += sum(_count_in(a, self._is_added) for a in id_lists if isinstance(a, np.ndarray))
        if added_seen != expected:
            return None
        at = 0
        for key, ids_of in zip(missing, id_lists, strict=True):
            if isinstance(ids_of, np.ndarray):
                cache[key] = ids_of  # the encoder's own array, not copied beside it
            else:
                cache[key] = flat[at : at + len(ids_of)]
                at += len(ids_of)
        return [ids_of for ids_of in id_lists if isinstance(ids_of, np.ndarray)]

    def encode_full(
        self,
        text: str,
        marked: bool = False,
        segments: dict[SegmentKey, np.ndarray] | None = None,
        shared: SegmentCache | None = None,
    ) -> Encoded:
        marks = None
        if marked:
            ids = self.encode_marked(text)
        elif segments is None:
            ids = self.encode(text)
        else:
            ids, marks = self.encode_segments(text, segments, True, shared)
        cm, tm = self._marks(text, ids) if marks is None or VERIFY_MARKS else marks
        if VERIFY_MARKS and marks is not None:
            _check_marks(marks, (cm, tm))
        return Encoded(text, ids, cm, tm)

    def encode_from(
        self,
        base: Encoded | None,
        text: str,
        marked: bool = False,
        lcp: int | None = None,
        segments: dict[SegmentKey, np.ndarray] | None = None,
        shared: SegmentCache | None = None,
    ) -> Encoded:
        """Encode ``text`` reusing ``base``'s ids up to the last added-token boundary of their common prefix.

        With ``marked`` the text is a rendering with marked content (see :meth:`encode_marked`); boundaries are
        then the template's own control tokens only, which always lie outside marked content. ``lcp``, when the
        caller already knows it, is the length of the common prefix of ``base.text`` and ``text``. ``segments``:
        a cache for :meth:`encode_segments` (unmarked text only), ``shared`` its shared second level.
        """
        if base is None or not self.boundary_reuse or base.char_marks.shape[0] == 0:
            return self.encode_full(text, marked, segments, shared)
        if lcp is None:
            lcp = common_prefix_len(base.text, text)
        k = bisect.bisect_right(base.char_marks, lcp)  # np.searchsorted's dispatch cost more than the search
        if k == 0:
            return self.encode_full(text, marked, segments, shared)
        c, t = int(base.char_marks[k - 1]), int(base.tok_marks[k - 1])
        rest = text[c:]
        marks = None
        if marked:
            rest_ids = self.encode_marked(rest, after=self.control_ending_at(text, c))
        elif segments is None:
            rest_ids = self.encode(rest)
        else:
            rest_ids, marks = self.encode_segments(rest, segments, False, shared, (c, t))
        if marks is None or VERIFY_MARKS:
            cm, tm = self._marks(rest, rest_ids, c, t)
            if marks is not None:
                _check_marks(marks, (cm, tm))
        else:
            cm, tm = marks
        ids = _extended(base.ids, t, rest_ids)
        if ids is None:
            ids = np.concatenate([base.ids[:t], rest_ids])
        return Encoded(text, ids, np.concatenate([base.char_marks[:k], cm]), np.concatenate([base.tok_marks[:k], tm]))

    @property
    def added_pattern(self) -> re.Pattern[str]:
        """Matches any added token's text (longest first, as the tokenizer matches them)."""
        return self._added_re

    def control_starts(self, text: str) -> list[int]:
        """Offsets in ``text`` where added-token text starts."""
        return [m.start() for m in self._added_re.finditer(text)]

    def control_ending_at(self, text: str, end: int) -> str | None:
        for s in self.added_strings:  # longest first, as the tokenizer matches
            if text.startswith(s, end - len(s)) and end >= len(s):
                return s
        return None

    def _plain_tokenizer(self, sentinel: str) -> Any:
        """The same tokenizer with one added token only, ``sentinel``: control-token text is ordinary text. Encoding
        ``sentinel + text`` encodes ``text`` as a stretch that follows a control token, the way the tokenizer encodes
        what follows one (SentencePiece word-start rules apply to the start of the input only); a text without the
        sentinel encodes as with no added token at all, so one tokenizer serves both.

        Built around the backend's own model, normalizer, pre-tokenizer, post-processor and decoder (shared, not
        copied: the vocabulary is neither serialized nor rebuilt, which took about a second for 150k tokens and held
        a second copy of it); it serializes exactly as the backend's JSON with its added tokens replaced by the
        sentinel would (tests/test_linearize_shortcuts.py)."""
        tok = self._plain.get(sentinel)
        if tok is None:
            from tokenizers import AddedToken, Tokenizer

            backend = self.backend
            tok = Tokenizer(backend.model)
            tok.normalizer = backend.normalizer
            tok.pre_tokenizer = backend.pre_tokenizer
            tok.post_processor = backend.post_processor
            tok.decoder = backend.decoder
            tok.add_special_tokens([AddedToken(sentinel, special=True, normalized=False)])
            self._plain[sentinel] = tok
        return tok

    def encode_plain(self, text: str, *, initial: bool) -> np.ndarray:
        """``text`` encoded with every added token split (plain text), as a stretch that begins the input
        (``initial``) or that follows a control token."""
        self.encode_calls += 1
        self.encoded_chars += len(text)
        if not text:
            return np.zeros(0, dtype=np.int32)
        k = 0
        while (sentinel := f"\ue003{k}\ue003") in text:
            k += 1
        tok = self._plain_tokenizer(sentinel)
        ids = tok.encode(text if initial else sentinel + text, add_special_tokens=False).ids
        return np.asarray(ids if initial else ids[1:], dtype=np.int32)

    def encode_marked(self, text: str, after: str | None = None) -> np.ndarray:
        """Encode a rendering whose content strings were marked (:meth:`mark_content`).

        The rendering is split at the template's own control tokens (added-token text outside marked pairs). A
        stretch between two of them that holds content's added-token text is encoded as plain text
        (:meth:`encode_plain`: every added token split, the stretch's position respected), without the whitespace
        a neighbouring control token strips; every other stretch is encoded as usual. Content thus never becomes a
        control token, and a rendering without such text encodes exactly as :meth:`encode` does. ``after``: the
        control token that precedes ``text`` (``text`` continues an encoding cut after it), None when ``text``
        begins the input.
        """
        if not has_markers(text):
            return self.encode(text)
        out: list[np.ndarray] = []
        buf: list[str] = []  # stretches encoded as usual, joined (each after a control token or at the start)
        pos = 0
        prev = after
        for m in [*self._control_matches_all(text), None]:
            end = m.start() if m is not None else len(text)
            clean, pairs = unmark(text[pos:end])
            if pairs:
                if buf:
                    out.append(self.encode("".join(buf)))
                    buf = []
                if prev is not None and self._strips[1].get(prev):
                    clean = clean.lstrip()
                if m is not None and self._strips[0].get(m.group(0)):
                    clean = clean.rstrip()
                out.append(self.encode_plain(clean, initial=prev is None and pos == 0))
            elif clean:
                buf.append(clean)
            if m is not None:
                buf.append(m.group(0))
                prev = m.group(0)
                pos = m.end()
        if buf:
            out.append(self.encode("".join(buf)))
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int32)

    def _control_matches_all(self, text: str) -> list[re.Match[str]]:
        """Every template control token of a marked rendering (lone markers only break the text, not this)."""
        if not has_markers(text):
            return list(self._added_re.finditer(text))
        owned = [(m.start(), m.end()) for m in _MARKUP.finditer(text) if m.group(2) is not None]
        starts = [a for a, _ in owned]
        out = []
        for m in self._added_re.finditer(text):
            i = bisect.bisect_right(starts, m.start()) - 1
            if i < 0 or m.start() >= owned[i][1]:
                out.append(m)
        return out

    def mark_content(self, value: Any, *, wrap: bool = True) -> Any:
        """A log's value (a string, or lists and dicts of them — keys included) made safe to render: marker
        characters escaped and, with ``wrap``, added-token text wrapped in MARK_START/MARK_END so
        :meth:`encode_marked` keeps it plain text."""
        if isinstance(value, str):
            if has_markers(value):
                value = _MARKER_CHARS.sub(lambda m: MARK_ESC + m.group(0), value)
            if wrap:
                value = self._added_re.sub(lambda m: f"{MARK_START}{m.group(0)}{MARK_END}", value)
            return value
        if isinstance(value, dict):
            return {self.mark_content(k, wrap=wrap): self.mark_content(v, wrap=wrap) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.mark_content(v, wrap=wrap) for v in value]
        return value

    def mark_message(self, message: dict[str, Any]) -> dict[str, Any]:
        """:meth:`mark_content` of one template message: an assistant's own text (content, reasoning) has its
        marker characters escaped but its added-token text left as is — the policy generated it, and templates
        parse it (``content.split('</think>')``); everything else from the log is wrapped, names, ids, tool-call
        arguments and their keys included."""
        if message.get("role") != "assistant":
            return dict(self.mark_content(message))
        return {self.mark_content(k): self.mark_content(v, wrap=k not in _GENERATED_FIELDS) for k, v in message.items()}

    def content_has_control_text(self, value: Any, *, assistant: bool = False) -> bool:
        """Whether a log's value carries added-token text where :meth:`mark_message` would wrap it."""
        if isinstance(value, str):
            return self.has_added_text(value)
        if isinstance(value, dict):
            return any(self.has_added_text(k) if isinstance(k, str) else False for k in value) or any(
                self.content_has_control_text(v) for k, v in value.items() if not (assistant and k in _GENERATED_FIELDS)
            )
        if isinstance(value, list | tuple):
            return any(self.content_has_control_text(v) for v in value)
        return False

    # -------------------------------------------------------------- decoding
    def decode(self, ids: Iterable[int]) -> str:
        if self._decode_direct:
            return str(self.backend.decode(list(map(int, ids)), skip_special_tokens=False))
        return str(self.base.decode(list(map(int, ids)), skip_special_tokens=False))

    def _backend_decodes_alike(self) -> bool:
        return self.backend is self.base.backend_tokenizer and backend_decodes_alike(self.base)

    def decode_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.decode([i]) for i in ids]


_PROBE = "msgtrainprobe"
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "probe_fn",
            "description": "A probe.",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string", "description": "a probe"}},
                "required": ["q"],
            },
        },
    }
]


def template_stop_texts(render: Any, added: re.Pattern[str], declared: Iterable[str] = ()) -> set[str]:
    """The added tokens a template writes right after an assistant message (found by rendering probe conversations
    with ``render(messages, tools) -> str``; renderings that fail are skipped). ``declared`` are the texts of the
    stop tokens the folder declares (EOS, ``generation_config.json``'s ``eos_token_id``).

    - after a text message's content (Qwen's ``<|im_end|>``), unless the message's rendering goes on after that
      token: to a declared stop with only control tokens between (Command A's ``<|END_TEXT|>`` before
      ``<|END_OF_TURN_TOKEN|>``: the model sampled both), or with more text (Kimi K3's ``<|close|>response<|sep|>``
      closes a section, not the turn), where the turn ends at the control token that ends the message's rendering;
    - where text turns have no end token of their own: the token right after the content once a user turn follows
      (GLM's ``<|user|>``, the next role's header);
    - after a message's tool calls: the last added token of the message's rendering after its last call, unless
      the template writes it after every call (Qwen's ``</tool_call>``): Gemma 4's ``<|tool_response>``, Llama
      3.1's ``<|eom_id|>``. Where text turns have no end token of their own, the token the template writes right
      after the calls once a tool result follows (GLM's ``<|observation|>``)."""
    user = {"role": "user", "content": "q"}
    declared = set(declared)
    probe = {"role": "assistant", "content": _PROBE}
    out: set[str] = set()
    alone = _first_rendering(render, [user, probe])
    followed = _first_rendering(render, [user, probe, {"role": "user", "content": "r"}])
    own = False  # whether text turns end with a token of their own (not only the next role's header)
    for text in (alone, followed):
        if text is None or own:  # a template that cannot render the probe: nothing learned from it
            continue
        pos = text.find(_PROBE)
        m = added.search(text, pos + len(_PROBE)) if pos >= 0 else None
        if m is None or text[pos + len(_PROBE) : m.start()].strip() != "":
            continue
        if text is followed:
            out.add(m.group(0))
            continue
        own = True
        if followed is not None and followed.startswith(text[: m.end()]):
            # Between turns, the template writes a declared stop after it with only control tokens between:
            # this token closes a section, the turn ends at the declared one.
            between = followed[m.end() :]
            after = next((t for t in added.finditer(between) if t.group(0) in declared), None)
            if after is not None and added.sub("", between[: after.start()]).strip() == "":
                continue
        rest = list(added.finditer(text, m.end()))
        if added.sub("", text[m.end() :]).strip() and rest and text[rest[-1].end() :].strip() == "":
            out.add(rest[-1].group(0))  # the message's rendering goes on with text: it ends at its last token
            continue
        out.add(m.group(0))
    out.update(_call_stop_texts(render, added, user, follow_result=not own))
    return out


def _first_rendering(render: Any, messages: list[dict[str, Any]]) -> str | None:
    """``messages`` rendered without tools, else with the probe tool (templates that iterate over the tool list)."""
    for tools in (None, _PROBE_TOOLS):
        try:
            return str(render(messages, tools))
        except Exception:
            continue
    return None


def _call_stop_texts(render: Any, added: re.Pattern[str], user: dict[str, Any], *, follow_result: bool) -> set[str]:
    """The stop token after an assistant message's tool calls (see :func:`template_stop_texts`)."""
    for n in (2, 1):  # two calls first, to tell a per-call closing token; one for templates that take one
        # The OpenAI shape, with the flat name / arguments some templates read (gpt-oss), as messages carry them.
        args = [{"q": f"{_PROBE}{i}"} for i in range(n)]
        calls = [
            {
                "id": f"call0000{i}",
                "type": "function",
                "name": "probe_fn",
                "arguments": a,
                "function": {"name": "probe_fn", "arguments": a},
            }
            for i, a in enumerate(args)
        ]
        message = {"role": "assistant", "content": "", "tool_calls": calls}
        try:
            alone = str(render([user], _PROBE_TOOLS))
            text = str(render([user, message], _PROBE_TOOLS))
        except Exception:
            continue
        first, last = text.find(f"{_PROBE}0"), text.rfind(f"{_PROBE}{n - 1}")
        if first < 0:
            return set()  # the template drops tool calls: nothing of them ends a turn
        if last < 0:
            continue  # it renders one call per message (gpt-oss)
        # The message's rendering ends where the context's own rendering resumes (a closing instruction).
        end = len(text) if text.startswith(alone) else max(last, len(text) - common_prefix_len(alone[::-1], text[::-1]))
        tokens = list(added.finditer(text, last, end))
        if tokens and text[tokens[-1].end() : end].strip() == "":
            token = tokens[-1].group(0)
            if n == 1 or token not in text[first:last]:
                return {token}
        if not follow_result:
            return set()
        results = [{"role": "tool", "tool_call_id": c["id"], "name": "probe_fn", "content": "r"} for c in calls]
        try:
            followed = str(render([user, message, *results], _PROBE_TOOLS))
        except Exception:
            return set()
        m = added.search(followed, end)
        if followed[:end] == text[:end] and m is not None and followed[end : m.start()].strip() == "":
            return {m.group(0)}
        return set()
    return set()


def stop_pattern(stop_texts: Iterable[str]) -> re.Pattern[str] | None:
    """Whitespace then one stop token's text (longest first, as a tokenizer matches added tokens)."""
    texts = sorted({t for t in stop_texts if t}, key=len, reverse=True)
    if not texts:
        return None
    return re.compile(r"\s*(?:" + "|".join(map(re.escape, texts)) + ")")


def common_prefix_len(a: str, b: str) -> int:
    """Length of the longest common prefix, by galloping + binary search over C-level slice compares."""
    # The usual case, one text extending the other, compared in place (a slice would copy the text first).
    if len(a) <= len(b) and b.startswith(a):
        return len(a)
    if len(b) < len(a) and a.startswith(b):
        return len(b)
    n = min(len(a), len(b))
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    step = 256
    while step < hi and b.startswith(a[:step]):
        lo = step
        step *= 4
    hi = min(hi, step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if b.startswith(a[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    return lo
