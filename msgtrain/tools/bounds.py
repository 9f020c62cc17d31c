"""How much of its samples ``inspect`` shows, in the terminal and in ``--html``: bounded by default.

One real agent session holds hundreds of turns whose contexts repeat a long system prompt and tool outputs; shown
whole it printed 39k lines and wrote a 33 MB page. Two bounds, both 0 for "everything":

- ``--max-turns N``: at most N trained turns are shown over the whole inspection, samples in order; a sample is
  shown up to the end of its last turn within the budget, and samples past it are listed, not shown.
- ``--max-chars C``: a stretch of tokens shown alike (the context between two turns, or one turn) longer than C
  characters shows its first and last C/2 characters, its middle elided.

Invariants: what is shown is whole tokens, in order, each exactly as unbounded (same colour, same title); every
elision is marked in place with how many tokens and characters it hides and the option that shows them, so a
bounded view never looks complete when it is not.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the CLI reads the defaults at start-up: no numpy or rich for that
    from msgtrain.tools.sample_view import SampleView

DEFAULT_MAX_TURNS = 20
DEFAULT_MAX_CHARS = 2000


def limit(value: int | None) -> int | None:
    """A CLI bound: 0 (or None) is no bound."""
    return value if value else None


def _head(pieces: Sequence[str], a: int, b: int, chars: int) -> int:
    """The end of the shortest run of tokens from ``a`` holding at least ``chars`` characters (at most ``b``)."""
    total = 0
    for i in range(a, b):
        total += len(pieces[i])
        if total >= chars:
            return i + 1
    return b


def _tail(pieces: Sequence[str], a: int, b: int, chars: int) -> int:
    """The start of the shortest run of tokens ending at ``b`` holding at least ``chars`` characters."""
    total = 0
    for i in range(b - 1, a - 1, -1):
        total += len(pieces[i])
        if total >= chars:
            return i
    return a


def turn_of_tokens(n: int, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """Per token: the index of the turn span holding it, or -1 (context)."""
    out = np.full(n, -1, dtype=np.int64)
    for t, (a, b) in enumerate(spans):
        out[a:b] = t
    return out


def visible_ranges(
    view: SampleView, pieces: Sequence[str], turns: int | None, max_chars: int | None
) -> list[tuple[int, int]]:
    """The token ranges of ``view`` to show (sorted, disjoint): up to the end of its ``turns``-th trained turn,
    each stretch longer than ``max_chars`` characters cut to its head and tail."""
    end = view.num_tokens
    if turns is not None and turns < len(view.turn_spans):
        end = view.turn_spans[turns - 1][1] if turns > 0 else 0
    owner = turn_of_tokens(view.num_tokens, view.turn_spans)[:end]
    bounds = [0, *(int(i) + 1 for i in (owner[1:] != owner[:-1]).nonzero()[0]), end] if end else [0]
    ranges: list[tuple[int, int]] = []
    for a, b in itertools.pairwise(bounds):
        if max_chars is None or sum(len(p) for p in pieces[a:b]) <= max_chars:
            ranges.append((a, b))
            continue
        head, tail = _head(pieces, a, b, max_chars // 2), _tail(pieces, a, b, max_chars // 2)
        ranges.extend([(a, head), (tail, b)] if head < tail else [(a, b)])
    merged: list[tuple[int, int]] = []
    for a, b in ranges:
        if merged and merged[-1][1] == a:
            merged[-1] = (merged[-1][0], b)
        elif a < b:
            merged.append((a, b))
    return merged


def gap_note(view: SampleView, pieces: Sequence[str], a: int, b: int) -> str:
    """The marker for tokens ``a:b`` not shown: what they are and the option that shows them."""
    chars = sum(len(p) for p in pieces[a:b])
    if b == view.num_tokens and any(start >= a for start, _ in view.turn_spans):
        hidden = sum(1 for start, _ in view.turn_spans if start >= a)
        return f" … {b - a} tokens more, {hidden} trained turn{'s' * (hidden != 1)} (--max-turns 0 shows all) … "
    return f" … {b - a} tokens, {chars} characters elided (--max-chars 0 shows all) … "


def gaps(ranges: Sequence[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """The token ranges of ``0:n`` that ``ranges`` leave out."""
    out, at = [], 0
    for a, b in ranges:
        if a > at:
            out.append((at, a))
        at = b
    if at < n:
        out.append((at, n))
    return out
