"""Per-item recovery of a JSON array document that does not parse as a whole.

A conversation dataset is often one JSON array of hundreds of records. One invalid byte anywhere makes
``json.loads`` refuse the whole file; read strictly, every record is lost for one bad one. When strict parsing fails,
:func:`recover_array_items` reads the array item by item instead: each item is parsed on its own
(``JSONDecoder.raw_decode``), and an item that does not parse is skipped by a structural scan (strings and nesting
tracked, so a bad byte inside a string or a number costs only its item) and stands in the list as the
:class:`~msgtrain.errors.ParseError` that rejects it.

Invariants:
- Only a document whose top level is an array is recovered; the strict parse decides every other document.
- The list has one entry per item the document holds, in order: the parsed value, or a ``ParseError`` (code
  ``bad_json``, or ``bad_utf8`` for an item holding bytes that are not UTF-8) whose location names the item
  (``item 3``). Readers reject such an entry as they reject any item that is not a record, under its own index.
- Where the array's structure itself is broken (a lost quote or bracket that the scan cannot see past), the rest of
  the document is one last ``ParseError`` entry: the items before it are kept, and nothing is guessed.
- Invalid UTF-8 is decoded with ``surrogateescape`` so that it can be located; no escaped byte reaches a value.
"""

from __future__ import annotations

import json
import re
from typing import Any

from msgtrain.errors import ParseError

_WS = re.compile(r"[ \t\n\r]*")
_STRUCTURE = re.compile(r'["\[\]{}]')  # what changes the nesting outside strings
_STRING_END = re.compile(r'["\\]')  # inside a string: its end, or an escape
_SCALAR_END = re.compile(r"[,\]}]")
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")  # an invalid UTF-8 byte, as surrogateescape decodes it


def recover_array_items(raw: bytes, where: str) -> list[Any] | None:
    """The items of the top-level JSON array in ``raw`` (see the module docstring), or None when the document is
    not an array."""
    text = raw.decode("utf-8", "surrogateescape").removeprefix("\ufeff")
    pos = _skip(text, 0)
    if not text.startswith("[", pos):
        return None
    decoder = json.JSONDecoder()
    items: list[Any] = []
    pos = _skip(text, pos + 1)
    if text.startswith("]", pos):
        return items
    opening: re.Pattern[str] | None = None  # how the items of this array begin: `, {"first key":`
    while True:
        index = len(items)
        ref = f"{where} (item {index})"
        if pos >= len(text):
            items.append(ParseError("the document ends inside its array (truncated file)", where=ref, code="bad_json"))
            return items
        if opening is None:
            opening = _opening(text, pos)
        value, end = _item(decoder, text, pos, ref)
        if isinstance(value, ParseError) and opening is not None:
            # Skip to the next item that begins as the others do and parses: a lost quote or bracket inside the bad
            # item cannot then swallow or split the items after it.
            resync = _next_item(decoder, text, pos, opening)
            if resync is not None:
                items.append(value)
                pos = resync
                continue
        items.append(value)
        pos = _skip(text, end)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
            continue
        if text.startswith("]", pos) or pos >= len(text):  # (a file cut right after an item lost no item)
            return items
        resync = _next_item(decoder, text, pos, opening) if opening is not None else None
        if resync is not None:  # junk between two items: the item it follows is suspect, and rejected
            items[-1] = ParseError(f"unexpected text after the item at character {pos}", where=ref, code="bad_json")
            pos = resync
            continue
        items.append(
            ParseError(
                f"the array's structure is lost at character {pos}; the rest of the document is not read",
                where=f"{where} (item {index + 1})",
                code="bad_json",
            )
        )
        return items


_FIRST_KEY = re.compile(r'\{[ \t\n\r]*("(?:[^"\\\n]|\\.){0,200}")[ \t\n\r]*:')


def _opening(text: str, pos: int) -> re.Pattern[str] | None:
    """How the items of the array begin, read off the item at ``pos`` (its first key, as written): `, {"key":`;
    None when that item does not begin as an object with a key."""
    match = _FIRST_KEY.match(text, pos)
    if match is None:
        return None
    return re.compile(r",[ \t\n\r]*(\{[ \t\n\r]*" + re.escape(match.group(1)) + r"[ \t\n\r]*:)")


def _item(decoder: json.JSONDecoder, text: str, start: int, ref: str) -> tuple[Any, int]:
    """(the item starting at ``start``, or the ParseError rejecting it; where it ends)."""
    try:
        value, end = decoder.raw_decode(text, start)
    except (ValueError, RecursionError) as e:
        return ParseError(f"invalid JSON: {getattr(e, 'msg', e)}", where=ref, code="bad_json"), _value_end(text, start)
    at = _ESCAPED_BYTE.search(text, start, end)
    if at is not None:
        return ParseError(f"invalid UTF-8 at character {at.start()}", where=ref, code="bad_utf8"), end
    return value, end


def _next_item(decoder: json.JSONDecoder, text: str, after: int, opening: re.Pattern[str]) -> int | None:
    """The start of the first item after ``after`` that begins like the array's items, parses, and is followed by
    ``,`` or ``]``; None when there is none."""
    for match in opening.finditer(text, after):
        start = match.start(1)
        try:
            _, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        follow = _skip(text, end)
        if follow >= len(text) or text[follow] in ",]":
            return start
    return None


def _skip(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    return match.end() if match else pos


def _value_end(text: str, start: int) -> int:
    """Where the value starting at ``start`` ends, by its structure alone (strings skipped, brackets counted); the
    end of the text when it never closes."""
    if text[start] not in '[{"':
        match = _SCALAR_END.search(text, start)
        return match.start() if match else len(text)
    depth = 0
    pos = start
    while True:
        match = _STRUCTURE.search(text, pos)
        if match is None:
            return len(text)
        char, pos = match.group(), match.end()
        if char == '"':
            pos = _string_end(text, pos)
            if depth == 0:
                return pos
        elif char in "[{":
            depth += 1
        else:
            depth -= 1
            if depth <= 0:
                return pos


def _string_end(text: str, pos: int) -> int:
    """The position after the string whose body starts at ``pos``."""
    while True:
        match = _STRING_END.search(text, pos)
        if match is None:
            return len(text)
        if match.group() == '"':
            return match.end()
        pos = match.end() + 1  # an escape: skip the escaped character
