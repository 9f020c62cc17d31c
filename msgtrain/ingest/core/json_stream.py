"""Item-by-item reading of a JSON document whose top level is an array, never holding the file whole.

A chat dataset or export saved as one JSON array (a ShareGPT / OpenAI-messages dataset, ChatGPT's
``conversations.json``, Claude.ai's export) is often far larger than any one of its records. Such a document larger
than ``--max-record-mb`` is read here in bounded chunks: each item is decoded on its own
(``json.JSONDecoder.raw_decode`` over a sliding text buffer) and handed on with its index, so the record is the
array's item and memory is bounded by the largest item, not by the file.

Invariants:
- :func:`iter_array_items` yields ``(index, value, byte offset)`` per item, in order, one entry per item the document
  holds: the parsed value, or the :class:`~msgtrain.errors.ParseError` that rejects it (located at ``item i``).
- An item larger than :data:`~msgtrain.ingest.core.base.MAX_RECORD_BYTES` (read at call time; its bytes as written
  in the file, indentation included, as a JSONL line's are measured) is never held: it is
  skipped by a structural scan (strings, escapes and nesting tracked across chunk boundaries) and stands as a
  ``record_too_large`` error naming the limit and the option; the items after it are read.
- An item that ends where the structure says but does not parse (a bad token, a bad byte) is a ``bad_json`` /
  ``bad_utf8`` error of its own; the items after it are read.
- Where the array's structure itself is lost (no ``,`` or ``]`` after an item, or the file ends inside the array)
  the rest of the document is one last error entry: the items before it are kept, nothing after it is guessed.
- Nothing is guessed: a lost quote or bracket inside an item shifts the structure the scan sees, so the items after
  it may be read as part of it (then rejected with it); the error says where reading stopped.
- Buffered text grows geometrically while an item is incomplete, so a large item is decoded in linear time.
- A span of the array (``span``: from an item's first byte to the next item's, or to the file's end) reads exactly
  the items a whole read gives there, with the same indexes, values and errors: a chunk of items
  (:mod:`msgtrain.ingest.core.chunks`) is read so.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from msgtrain.errors import ParseError
from msgtrain.ingest.core import base

CHUNK_BYTES = 1 << 20  # what one read takes from the file

_WS = re.compile(r"[ \t\n\r]*")
_STRUCTURE = re.compile(r'["\[\]{}]')  # what changes the nesting outside strings
_STRING_END = re.compile(r'["\\]')  # inside a string: its end, or an escape
_SCALAR_END = re.compile(r"[,\]}\s]")
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")  # an invalid UTF-8 byte, as surrogateescape decodes it


def is_array_document(path: Path) -> bool:
    """Whether the file's first non-blank character (after a byte-order mark) opens an array."""
    with base.open_input(path) as f:
        head = f.read(4096)
    return head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n").startswith(b"[")


def read_item_by_item(path: Path) -> bool:
    """Whether ``iter_raw_records`` (:mod:`msgtrain.ingest.common.conversation_files`) reads ``path`` item by item:
    a JSON document (not JSONL) larger than ``--max-record-mb`` whose top level is an array and whose first line is
    not a whole JSON value. Only such a file is cut into chunks of items
    (:func:`msgtrain.ingest.core.chunks.plan_chunks`)."""
    if path.stat().st_size <= base.MAX_RECORD_BYTES or base.is_json_lines(path) or not is_array_document(path):
        return False
    first, _ = base.first_two_lines(path)
    try:
        json.loads(first.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return True
    except RecursionError:
        return False
    return False


class _Scan:
    """Where the structure of one item ends, found incrementally as text arrives (state kept across chunks)."""

    def __init__(self) -> None:
        self.at = 0  # characters of the item scanned so far (relative to the item's start)
        self.depth = 0
        self.in_string = False
        self.scalar = False
        self.started = False

    def feed(self, text: str, start: int) -> int | None:
        """Scan ``text`` from ``start + self.at``; the end of the item (absolute index) when found, else None."""
        pos = start + self.at
        n = len(text)
        while pos < n:
            if not self.started:
                self.started = True
                ch = text[pos]
                if ch == '"':
                    self.in_string, pos = True, pos + 1
                    continue
                if ch in "[{":
                    self.depth, pos = 1, pos + 1
                    continue
                self.scalar = True
            if self.scalar:
                m = _SCALAR_END.search(text, pos)
                if m is None:
                    pos = n
                    break
                return m.start()
            if self.in_string:
                m = _STRING_END.search(text, pos)
                if m is None:
                    pos = n
                    break
                if m.group() == "\\":
                    if m.end() >= n:  # the escaped character is in the next chunk
                        pos = m.start()
                        break
                    pos = m.end() + 1
                    continue
                self.in_string, pos = False, m.end()
                if self.depth == 0:
                    return pos
                continue
            m = _STRUCTURE.search(text, pos)
            if m is None:
                pos = n
                break
            ch, pos = m.group(), m.end()
            if ch == '"':
                self.in_string = True
            elif ch in "[{":
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth == 0:
                    return pos
        self.at = pos - start
        return None


class _Source:
    """The document's text, read in chunks and decoded incrementally (an invalid UTF-8 byte is kept as an escaped
    surrogate so that the item holding it can be named); ``buf[pos:]`` is what is not consumed yet."""

    def __init__(self, f: BinaryIO | _Bounded, chunk: int) -> None:
        self.f = f
        self.chunk = chunk
        self.decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self.buf = ""
        self.pos = 0
        self.mark = 0  # a position in buf whose byte offset in the file is known...
        self.mark_byte = 0  # ...this one (positions only move forward, so offsets cost linear time)
        self.eof = False
        self.first = True

    def more(self, size: int | None = None) -> bool:
        """Read on (at least one chunk); False at the end of the file."""
        if self.eof:
            return False
        raw = self.f.read(max(size or 0, self.chunk))
        text = self.decoder.decode(raw, final=not raw)
        if self.first and text:  # (open_input already drops a byte-order mark; offsets are of the UTF-8 text)
            text, self.first = text.removeprefix("\ufeff"), False
        if not raw:
            self.eof = True
        if self.pos:  # drop what is consumed before growing the buffer
            self.drop(self.pos)
        self.buf += text
        return bool(raw) or bool(text)

    def skip_ws(self) -> bool:
        """Skip blanks; False when the document ends first."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return True
            if not self.more():
                return False

    def byte_at(self, pos: int) -> int:
        """The byte offset in the file of ``buf[pos]`` (``pos`` at or after the last one asked for)."""
        self.mark_byte += _byte_len(self.buf[self.mark : pos])
        self.mark = pos
        return self.mark_byte

    def drop(self, upto: int) -> None:
        """Forget the text before ``upto`` (consumed, or an item being skipped: never held)."""
        self.byte_at(upto)
        self.buf, self.pos, self.mark = self.buf[upto:], 0, 0


def _byte_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def iter_array_items(
    path: Path, where: str, chunk: int = CHUNK_BYTES, span: tuple[int, int, int] | None = None
) -> Iterator[tuple[int, Any, int]]:
    """(index, value or the error that rejects it, byte offset) per item of the top-level array (module docstring).

    ``span``: ``(start byte, end byte, index)`` — only the items from the one at ``start`` (whose index it is) up to
    ``end`` (a run of a :class:`~msgtrain.ingest.core.base.Chunk` of items), read exactly as reading the whole array
    reads them; a span that ends at the file's end reads the closing bracket too."""
    chunk = min(chunk, max(base.MAX_RECORD_BYTES, 4096))  # (a read never holds more than a record's worth)
    with base.open_input(path) as f:
        if span is not None:
            start, end, first = span
            f.seek(start)
            src = _Source(_Bounded(f, end - start), chunk)
            src.mark_byte, src.first = start, False
            if src.skip_ws():
                yield from _items(src, where, first, cut=end < path.stat().st_size)
            return
        src = _Source(f, chunk)
        if not src.skip_ws() or not src.buf.startswith("[", src.pos):
            yield 0, ParseError("the document is not a JSON array", where=where, code="bad_json"), 0
            return
        src.pos += 1
        if not src.skip_ws():
            yield 0, _lost(where, 0, "the document ends inside its array (truncated file)"), src.byte_at(src.pos)
            return
        if src.buf.startswith("]", src.pos):
            yield from _trailing(src, where, 0)
            return
        yield from _items(src, where, 0, cut=False)


class _Bounded:
    """The bytes of a file up to a limit (a span's end): reading past it gives what a file's end gives."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self.f, self.left = f, size

    def read(self, size: int) -> bytes:
        data = self.f.read(min(size, self.left)) if self.left > 0 else b""
        self.left -= len(data)
        return data


def _items(src: _Source, where: str, index: int, cut: bool) -> Iterator[tuple[int, Any, int]]:
    """The items from ``src.pos`` on (the first one's index ``index``); ``cut``: the text ends after an item or its
    comma where a span of the array ends, not the file (the end of the span, not a truncated file)."""
    decoder = json.JSONDecoder()
    while True:
        start_byte = src.byte_at(src.pos)
        value, ended = _next_item(src, decoder, where, index)
        yield index, value, start_byte
        index += 1
        if not ended:
            return
        if not src.skip_ws():
            if not cut:
                yield index, _lost(where, index, "the document ends inside its array (truncated file)"), src.mark_byte
            return
        ch = src.buf[src.pos]
        if ch == ",":
            src.pos += 1
            if not src.skip_ws():
                if not cut:
                    yield (
                        index,
                        _lost(where, index, "the document ends inside its array (truncated file)"),
                        src.mark_byte,
                    )
                return
            continue
        if ch == "]":
            yield from _trailing(src, where, index)
            return
        at = src.byte_at(src.pos)
        yield (
            index,
            _lost(where, index, f"the array's structure is lost at byte {at} (no , or ] after an item)"),
            at,
        )
        return


def _next_item(src: _Source, decoder: json.JSONDecoder, where: str, index: int) -> tuple[Any, bool]:
    """The item at ``src.pos`` (value or its error) and whether the array goes on after it; ``src.pos`` is moved past
    the item."""
    ref = f"{where} (item {index})"
    scan = _Scan()
    while True:
        start = src.pos
        try:
            value, end = decoder.raw_decode(src.buf, start)
        except json.JSONDecodeError:
            pass
        except RecursionError:
            found = scan.feed(src.buf, start)
            if found is not None:
                src.pos = found
                return base.too_deep_error(ref), True
        else:
            # (a number is whole only where its delimiter is seen: it may go on in the next chunk)
            number = type(value) in (int, float) and not src.eof
            if not number or scan.feed(src.buf, start) == end:
                src.pos = end
                text = src.buf[start:end]
                if _ESCAPED_BYTE.search(text):
                    return _bad_utf8(text, ref), True
                if 2 * len(text) > base.MAX_RECORD_BYTES and _byte_len(text) > base.MAX_RECORD_BYTES:
                    return _too_large(_byte_len(text), ref), True
                return value, True
        found = scan.feed(src.buf, start)
        if found is not None:  # the item is all there and still does not parse
            src.pos = found
            return _bad_item(decoder, src.buf[start:found], ref), True
        held = len(src.buf) - start
        if held > base.MAX_RECORD_BYTES:
            return _skip_large(src, scan, ref)
        if not src.more(held):  # doubling what is held keeps the decoding of a large item linear
            src.pos = len(src.buf)
            return _lost(where, index, "the document ends inside this item (truncated file)"), False


def _skip_large(src: _Source, scan: _Scan, ref: str) -> tuple[Any, bool]:
    """Skip an item larger than the limit without holding it; its error (``record_too_large``) and whether the array
    goes on."""
    size = 0
    while True:
        found = scan.feed(src.buf, src.pos)
        if found is not None:
            size += _byte_len(src.buf[src.pos : found])
            src.pos = found
            break
        keep = src.pos + scan.at  # (an escape cut by the chunk's end is scanned again with its next character)
        size += _byte_len(src.buf[src.pos : keep])
        src.drop(keep)
        scan.at = 0
        if not src.more():
            return _lost_at(ref, "the document ends inside this item (truncated file)"), False
    return _too_large(size, ref), True


def _too_large(size: int, ref: str) -> ParseError:
    return ParseError(
        f"array item of {size} bytes exceeds the {base.limit_text(base.MAX_RECORD_BYTES)}",
        where=ref,
        code="record_too_large",
        hint="raise --max-record-mb if the item is a real record (a worker holds about ten times it), or drop it",
    )


def _bad_item(decoder: json.JSONDecoder, text: str, ref: str) -> ParseError:
    if _ESCAPED_BYTE.search(text):
        return _bad_utf8(text, ref)
    try:
        decoder.raw_decode(text)
    except json.JSONDecodeError as e:
        return ParseError(f"invalid JSON in the item: {e.msg} at character {e.pos}", where=ref, code="bad_json")
    return ParseError("unexpected text in the item", where=ref, code="bad_json")


def _bad_utf8(text: str, ref: str) -> ParseError:
    m = _ESCAPED_BYTE.search(text)
    at = _byte_len(text[: m.start()]) if m else 0
    bad = text.encode("utf-8", "surrogateescape")
    return ParseError(
        f"invalid UTF-8 at byte {at} of the item", where=ref, code="bad_utf8", hint=base.not_utf8_hint(bad)
    )


def _lost(where: str, index: int, what: str) -> ParseError:
    return _lost_at(f"{where} (item {index})", what)


class LostStructure(ParseError):
    """The error where the array's structure is lost: the last entry, standing for the rest of the document."""


def _lost_at(ref: str, what: str) -> ParseError:
    return LostStructure(
        f"{what}; the rest of the document is not read",
        where=ref,
        code="bad_json",
        hint="repair the file, or convert it to JSONL (jq -c '.[]' file.json > file.jsonl): each line is then "
        "read on its own",
    )


def _trailing(src: _Source, where: str, index: int) -> Iterator[tuple[int, Any, int]]:
    """After the closing bracket only blanks may follow."""
    src.pos += 1
    if src.skip_ws():
        at = src.byte_at(src.pos)
        yield index, _lost(where, index, f"unexpected text after the array at byte {at}"), at
