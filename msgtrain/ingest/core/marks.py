"""What a reader's detector needs to see in a file, as plain data: lets detection import only the readers that could
claim a file (:mod:`msgtrain.ingest.registry`), not all of them.

A reader declares ``marks = Marks(texts=..., names=...)``: a file whose head holds none of ``texts`` and whose path
matches none of ``names`` is one its ``detect`` refuses. The registry's catalogue holds every reader's marks
(:mod:`msgtrain.ingest.catalog`), so they are read without importing the reader.

Invariants:
- Marks are a necessary condition, never a sufficient one: ``detect`` still decides. A reader whose ``detect``
  accepts a head that its marks do not admit is a bug in its marks (``tests/test_lazy_detection.py`` checks every
  reader against every record of every sample and real log).
- A text mark is looked for, ignoring case, in the head decoded as UTF-8 and, where the head holds a backslash, in
  the head with every JSON string escape decoded as well (``"\\u0072ole"`` is the key ``role``). A head that is
  not plain UTF-8 text (a NUL byte, an invalid byte: a SQLite database, a zip archive, UTF-16) is not looked at: every
  reader is a candidate for it, since detectors decode leniently.
- A name mark is an ``fnmatch`` pattern matched, ignoring case, against ``/`` + the path's POSIX form (``*`` also
  matches ``/``): ``*.yaml``, ``*/subagents/*``.
- No marks (``marks = None``, the default) means any file; empty marks mean none (a directory reader's ``detect``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cached_property
from pathlib import PurePath

# A JSON string escape: the six one-character ones, or \uXXXX.
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|([\"\\/bfnrt]))")
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


@dataclass(frozen=True)
class Marks:
    """Texts a file's head holds, or patterns its path matches, one of which a reader's ``detect`` needs."""

    texts: tuple[str, ...] = ()
    names: tuple[str, ...] = ()

    def admits(self, path: PurePath, text: str | None, quoted: Quoted | None = None) -> bool:
        """Whether a file at ``path`` whose head is ``text`` (:func:`head_text`; None: not plain text) may be one the
        reader detects. ``quoted``: :func:`quoted_texts` of ``text``, where a mark that is a quoted text is looked up
        (the same answer as looking for it in ``text``, without scanning the head once per mark)."""
        if text is None:
            return True
        for mark, inner in self._lowered:
            if inner is not None and quoted is not None:
                if inner in quoted:
                    return True
            elif mark in text:
                return True
        return self.matches_name(path)

    @cached_property
    def _lowered(self) -> tuple[tuple[str, str | None], ...]:
        """Each text mark lowercased, with what its quotes hold when it is ``"..."`` with no quote inside."""
        marks = (t.lower() for t in self.texts)
        return tuple(
            (m, m[1:-1] if len(m) >= 2 and m[0] == m[-1] == '"' and '"' not in m[1:-1] else None) for m in marks
        )

    def matches_name(self, path: PurePath) -> bool:
        if not self.names:
            return False
        where = ("/" + path.as_posix()).lower()
        return any(fnmatchcase(where, pattern.lower()) for pattern in self.names)

    def as_data(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return (self.texts, self.names)


def head_text(head: bytes) -> str | None:
    """The text marks are looked for in (module docstring): the head as UTF-8 (a character cut by the head's end left
    out), and with JSON escapes decoded when it holds any, lowercased; None when the head is not plain UTF-8 text."""
    if b"\x00" in head:
        return None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.end != len(head) or e.reason != "unexpected end of data":
            return None
        text = head[: e.start].decode("utf-8")
    if "\\" in text:
        text += "\n" + _ESCAPE.sub(_unescape, text)
    return text.lower()


Quoted = frozenset[str]


def quoted_texts(text: str) -> Quoted:
    """What each pair of consecutive ``"`` in ``text`` encloses. A mark ``"x"`` (``x`` holding no ``"``) is in
    ``text`` exactly when ``x`` is one of these: where the mark is, its first quote is followed by ``x`` and then by
    the next quote of the text, and where ``x`` lies between consecutive quotes, the mark is there."""
    return frozenset(text.split('"')[1:-1])


def _unescape(m: re.Match[str]) -> str:
    if m.group(1) is not None:
        return chr(int(m.group(1), 16))
    return _SIMPLE[m.group(2)]


def quoted(values: Iterable[str]) -> tuple[str, ...]:
    """Text marks for JSON keys or string values, each with its quotes (``"role"``), sorted."""
    return tuple(sorted(f'"{v}"' for v in values))
