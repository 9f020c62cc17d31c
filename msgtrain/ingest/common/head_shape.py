"""Cheap structural sniffing of a file's first bytes, for format detectors.

Detectors only see the first 64 KiB of a file, which is usually a *truncated* JSON document (a pretty-printed
array of records) or a few lines of JSONL. :func:`head_shape` scans that prefix once with a tolerant
tokenizer and records which key paths occur and which short string values they hold, so each detector can ask
structural questions ("is there a ``conversations[].from``?") without parsing the whole file.

Invariants:
- Never raises on any input: a truncated or invalid head just yields fewer paths.
- Paths are written relative to one *record*: for a top-level array the record is an element (``[]`` is
  stripped), for JSONL or a single object it is the top-level object. ``.a[].b`` means key ``b`` of the
  objects in the list under ``a``. Only paths up to :data:`MAX_DEPTH` containers deep are kept (at most
  :data:`MAX_PATHS`), and at most :data:`MAX_VALUES` short string values per path, so the result stays small
  for any file.
- The result is cached per head (detectors of every registered reader ask about the same bytes).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache

MAX_DEPTH = 8
MAX_PATHS = 4096
MAX_VALUES = 32
MAX_VALUE_CHARS = 120

# One JSON token: a complete string, a structural character, or a bare literal. A string cut off by the end of
# the head does not match, which ends the scan (the unrolled-loop pattern keeps long strings linear-time).
_TOKEN = re.compile(r'\s*(?:"([^"\\]*(?:\\.[^"\\]*)*)"|([{}\[\]:,])|([^\s{}\[\]:,"]+))', re.S)


@dataclass(frozen=True)
class HeadShape:
    """What the head of a file looks like.

    ``layout`` is ``"array"`` (top-level ``[``), ``"object"`` (one top-level object), ``"jsonl"`` (two or
    more top-level values) or ``"other"`` (not JSON). ``paths`` are record-relative key paths; ``values``
    maps a path to the short string values seen there.
    """

    layout: str
    paths: frozenset[str] = frozenset()
    values: dict[str, frozenset[str]] = field(default_factory=dict)

    def has(self, *paths: str) -> bool:
        """True if every one of ``paths`` occurs."""
        return all(p in self.paths for p in paths)

    def values_at(self, path: str) -> frozenset[str]:
        return self.values.get(path, frozenset())

    def any_value(self, path: str, allowed: set[str] | frozenset[str]) -> bool:
        """True if some string value at ``path`` is in ``allowed``."""
        return bool(self.values_at(path) & allowed)


def head_shape(head: bytes) -> HeadShape:
    return _cached_shape(bytes(head))


@lru_cache(maxsize=8)
def _cached_shape(head: bytes) -> HeadShape:
    text = head.decode("utf-8", "ignore").lstrip("\ufeff")
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{":
        return HeadShape("other")
    return _scan(text)


def _scan(text: str) -> HeadShape:
    paths: set[str] = set()
    values: dict[str, set[str]] = {}
    # Each frame: [is_object, current_key, expecting_key]; the path of a value is read off the frames.
    frames: list[list[object]] = []
    top_values = 0
    first_char = ""
    pos = 0
    n = len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            break
        pos = m.end()
        string, punct = m.group(1), m.group(2)
        if punct in ("{", "["):
            if not frames:
                top_values += 1
                first_char = first_char or punct
            frames.append([punct == "{", None, punct == "{"])
            continue
        if punct in ("}", "]"):
            if frames:
                frames.pop()
            continue
        if punct == ",":
            if frames and frames[-1][0]:
                frames[-1][2] = True
            continue
        if punct == ":":
            continue
        if not frames:
            top_values += 1  # a bare scalar at top level: not a record, but counts for the layout
            continue
        top = frames[-1]
        if string is not None and top[0] and top[2]:
            key = _unescape(string)
            top[1] = key
            top[2] = False
            if len(frames) <= MAX_DEPTH and len(paths) < MAX_PATHS:
                paths.add(_path(frames, key))
            continue
        if string is not None and len(frames) <= MAX_DEPTH and len(string) <= MAX_VALUE_CHARS:
            where = _value_path(frames)
            bucket = values.setdefault(where, set())
            if len(bucket) < MAX_VALUES:
                bucket.add(_unescape(string))
    layout = "jsonl" if top_values >= 2 else ("array" if first_char == "[" else "object")
    if layout == "array":
        paths = {p[2:] for p in paths if p.startswith("[]")}
        values = {k[2:]: v for k, v in values.items() if k.startswith("[]")}
    return HeadShape(layout, frozenset(paths), {k: frozenset(v) for k, v in values.items()})


def _path(frames: list[list[object]], key: str) -> str:
    """Path of ``key`` inside the innermost object."""
    return _value_path(frames[:-1]) + "." + key


def _value_path(frames: list[list[object]]) -> str:
    """Path of the value position inside the innermost container."""
    out = []
    for is_object, key, _ in frames:
        out.append(f".{key}" if is_object else "[]")
    return "".join(out)


def _unescape(raw: str) -> str:
    if "\\" not in raw:
        return raw
    try:
        return str(json.loads(f'"{raw}"'))
    except json.JSONDecodeError:
        return raw
