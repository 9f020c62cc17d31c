"""How much of its samples ``inspect`` shows, in the terminal and in ``--html``: bounded by default.

One real agent session holds hundreds of turns whose contexts repeat a long system prompt and tool outputs; shown
whole it printed 39k lines and wrote a 33 MB page. Two bounds, both 0 for "everything":

- ``--max-turns N``: at most N trained turns are shown over the whole inspection, samples in order; a sample is
  shown up to the end of its last turn within the budget, and samples past it are listed, not shown.
- ``--max-chars C``: a stretch of tokens shown alike (the context between two turns, or one turn) longer than C
  characters shows its first and last C/2 characters, its middle elided (and never decoded: a bounded view of a
  sample of a million tokens costs what it shows).

Invariants: what is shown is whole tokens, in order, each as unbounded (same colour, same title; its text decoded
after the same window of earlier tokens); every elision is marked in place with how many tokens it hides and the
option that shows them, so a bounded view never looks complete when it is not.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI reads the defaults at start-up: no numpy or rich for that
    import numpy as np

    from msgtrain.tools.sample_view import SampleView

DEFAULT_MAX_TURNS = 20
DEFAULT_MAX_CHARS = 2000


def limit(value: int | None) -> int | None:
    """A CLI bound: 0 (or None) is no bound."""
    return value if value else None


# Decodes the pieces of tokens a:b of one sample as the unbounded view shows them (sample_view.range_pieces).
PiecesOf = Callable[[int, int], list[str]]


def _head(pieces_of: PiecesOf, a: int, b: int, chars: int, pieces: list[str]) -> int:
    """Decode from ``a`` until ``chars`` characters are in (at most to ``b``); return where that ends."""
    total, at, step = 0, a, max(64, chars)
    while at < b:
        chunk = pieces_of(at, min(b, at + step))
        for k, piece in enumerate(chunk):
            pieces[at + k] = piece
            total += len(piece)
            if total >= chars:
                return at + k + 1
        at += len(chunk)
    return b


def _tail(pieces_of: PiecesOf, a: int, b: int, chars: int, pieces: list[str]) -> int:
    """Decode back from ``b`` until ``chars`` characters are in (at most to ``a``); return where that starts."""
    total, at, step = 0, b, max(64, chars)
    while at > a:
        lo = max(a, at - step)
        chunk = pieces_of(lo, at)
        for k in range(len(chunk) - 1, -1, -1):
            pieces[lo + k] = chunk[k]
            total += len(chunk[k])
            if total >= chars:
                return lo + k
        at = lo
    return a


def turn_of_tokens(n: int, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """Per token: the index of the turn span holding it, or -1 (context)."""
    import numpy as np

    out = np.full(n, -1, dtype=np.int64)
    for t, (a, b) in enumerate(spans):
        out[a:b] = t
    return out


def bounded_pieces(
    view: SampleView, pieces_of: PiecesOf, turns: int | None, max_chars: int | None
) -> tuple[list[str], list[tuple[int, int]]]:
    """The pieces of ``view``'s tokens that are shown ("" for the others, which are never decoded, so a bounded
    view of a huge sample costs what it shows) and the token ranges shown (sorted, disjoint): up to the end of
    its ``turns``-th trained turn, each stretch cut to its first and last ``max_chars / 2`` characters when
    something lies between them."""
    n = view.num_tokens
    pieces = [""] * n
    end = n
    if turns is not None and turns < len(view.turn_spans):
        end = view.turn_spans[turns - 1][1] if turns > 0 else 0
    owner = turn_of_tokens(n, view.turn_spans)[:end]
    bounds = [0, *(int(i) + 1 for i in (owner[1:] != owner[:-1]).nonzero()[0]), end] if end else [0]
    ranges: list[tuple[int, int]] = []
    for a, b in itertools.pairwise(bounds):
        if max_chars is None:
            pieces[a:b] = pieces_of(a, b)
            ranges.append((a, b))
            continue
        head = _head(pieces_of, a, b, max_chars // 2, pieces)
        tail = _tail(pieces_of, head, b, max_chars // 2, pieces) if head < b else b
        ranges.extend([(a, head), (tail, b)])
    merged: list[tuple[int, int]] = []
    for a, b in ranges:
        if merged and merged[-1][1] == a:
            merged[-1] = (merged[-1][0], b)
        elif a < b:
            merged.append((a, b))
    return pieces, merged


def gap_note(view: SampleView, a: int, b: int) -> str:
    """The marker for tokens ``a:b`` not shown: what they are and the option that shows them."""
    if b == view.num_tokens and any(start >= a for start, _ in view.turn_spans):
        hidden = sum(1 for start, _ in view.turn_spans if start >= a)
        return f" … {b - a} tokens more, {hidden} trained turn{'s' * (hidden != 1)} (--max-turns 0 shows all) … "
    return f" … {b - a} tokens elided (--max-chars 0 shows all) … "


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
