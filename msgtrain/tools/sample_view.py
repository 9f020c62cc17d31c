"""One training sample as text people can read: tokens decoded, trained tokens highlighted per turn, cuts marked.

Invariants:
- A :class:`SampleView` is built from canonical columns only (``input_ids``, ``turn_spans``, ``cut_reason``...),
  so a sample linearized on the fly and a row read back from an exported dataset render identically. A column
  the dataset's target does not store shows as ``-`` (turns are then the runs of trained tokens).
- Token ``i`` is trained exactly when it lies in a turn span (the canonical invariant ``loss_mask == spans``);
  its colour is its turn's index in the sample.
- Token texts concatenate to the tokenizer's decoding of the sample: each token's text is what decoding it adds
  after its predecessors (a window of earlier tokens gives SentencePiece spaces and split UTF-8 bytes their
  context); bytes that only become a character with the next token are shown on that token.
- The cut point of a sample that was cut (any reason but ``start``) is the first token where it differs from the
  other samples of its graph that it could have continued (the longest prefix it shares with one of them); it is
  marked there with the sample's cut reason.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rich.text import Text

from msgtrain.tools.bounds import bounded_pieces, gap_note, gaps, turn_of_tokens

Decode = Callable[[list[int]], str]

# Per-turn highlight colours (terminal); html_page has the same palette as CSS.
TURN_STYLES = (
    "black on green3",
    "black on deep_sky_blue1",
    "black on gold1",
    "black on orchid1",
    "black on dark_orange",
    "black on aquamarine1",
    "black on light_pink1",
    "black on khaki1",
)
CUT_TEXT = {
    "start": "first sample of its conversation: nothing was cut",
    "fork": "continues a prefix another sample trains (a branch, or n>1 samples)",
    "edit": "an earlier message was edited after it was seen",
    "compaction": "earlier messages were replaced by a summary",
    "delete": "earlier messages were deleted",
    "env_change": "the tools or template kwargs changed",
    "rewind": "the agent rewound to an earlier point",
    "template_rerender": "the chat template renders earlier turns differently once later ones exist",
    "token_drift": "the same text tokenizes differently at a turn boundary",
    "logged_ids_differ": "the engine's logged ids disagree with the later prompt",
}
# What a dataset row shows for a column its target does not store (``labels`` rows keep ids and labels only).
UNKNOWN = "-"
CUT_TEXT[UNKNOWN] = "not stored by this target (inspect the canonical output or the log for it)"
_WINDOW = 4  # earlier tokens decoded with each token, for spaces and multi-byte characters


@dataclass
class SampleView:
    """The columns of one canonical row that the viewer needs (ids as numpy, spans as (start, end) pairs)."""

    index: int
    sample_id: str
    graph_id: str
    source: str
    policy: str
    input_ids: np.ndarray
    turn_spans: list[tuple[int, int]]
    turn_ids: list[str]
    cut_reason: str
    engine_tokens: int | None  # None: not stored by the dataset's target
    logprobs: np.ndarray | None = None
    flags: list[str] = field(default_factory=list)
    cut_at: int | None = None  # token index of the cut point; None when nothing was cut

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_trained(self) -> int:
        return sum(b - a for a, b in self.turn_spans)

    @classmethod
    def from_row(cls, index: int, row: dict[str, Any]) -> SampleView:
        """From a canonical row as ``Table.to_pylist()`` or a :class:`~msgtrain.export.schema.Sample` gives it."""
        spans = [
            (int(s["start"]), int(s["end"])) if isinstance(s, dict) else (int(s[0]), int(s[1]))
            for s in row["turn_spans"]
        ]
        lp = row.get("logprobs")
        logprobs = None if lp is None else np.asarray([np.nan if x is None else x for x in lp], dtype=np.float32)
        turn_ids = row.get("turn_ids")
        engine = row.get("engine_tokens")
        return cls(
            index=index,
            sample_id=_text(row.get("sample_id")),
            graph_id=_text(row.get("graph_id")),
            source=_text(row.get("source")),
            policy=_text(row.get("policy")),
            input_ids=np.asarray(row["input_ids"], dtype=np.int64),
            turn_spans=spans,
            turn_ids=[UNKNOWN] * len(spans) if turn_ids is None else [str(t) for t in turn_ids],
            cut_reason=_text(row.get("cut_reason")),
            engine_tokens=None if engine is None else int(engine),
            logprobs=logprobs,
            flags=list(row.get("flags") or []),
        )


def _text(value: Any) -> str:
    return UNKNOWN if value is None else str(value)


def mark_cuts(views: Sequence[SampleView]) -> None:
    """Set ``cut_at`` on every view whose cut reason is not ``start`` (see module invariants).

    The cut point is the longest prefix shared with another sample of the same graph that leaves that sample
    before this one's first trained turn: a sample that continues or forks *this* one shares more than that and
    says nothing about where this one was cut.
    """
    by_graph: dict[str, list[SampleView]] = {}
    for v in views:
        by_graph.setdefault(v.graph_id, []).append(v)
    for group in by_graph.values():
        for v in group:
            if v.cut_reason in ("start", UNKNOWN):
                continue
            first_trained = v.turn_spans[0][0] if v.turn_spans else v.num_tokens
            shared = [common_prefix(v.input_ids, o.input_ids) for o in group if o is not v]
            before = [n for n in shared if n < first_trained]
            v.cut_at = max(before) if before else None


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.shape[0], b.shape[0])
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def token_pieces(decode: Decode, ids: Sequence[int]) -> list[str]:
    """Each token's share of the decoded text (see module invariants); ``"".join`` gives the decoded text."""
    ids = [int(i) for i in ids]
    pieces: list[str] = []
    start = 0  # first token whose text has not been emitted yet
    for i in range(len(ids)):
        ctx = max(0, start - _WINDOW)
        before = decode(ids[ctx:start]) if ctx < start else ""
        full = decode(ids[ctx : i + 1])
        if full.endswith("\ufffd") and i + 1 < len(ids) and i + 1 - start < 8:
            pieces.append("")  # an incomplete UTF-8 sequence: the next token completes the character
            continue
        pieces.append(full[len(before) :] if full.startswith(before) else full)
        start = i + 1
    return pieces


def range_pieces(decode: Decode, ids: Sequence[int]) -> Callable[[int, int], list[str]]:
    """``pieces_of(a, b)``: the pieces of tokens ``a:b`` as :func:`token_pieces` gives them for all of ``ids``,
    decoded after the same window of earlier tokens (as ``audit`` decodes a stretch)."""

    def pieces_of(a: int, b: int) -> list[str]:
        ctx = max(0, a - _WINDOW)
        return token_pieces(decode, ids[ctx:b])[a - ctx :]

    return pieces_of


def shown_pieces(
    decode: Decode, view: SampleView, turns: int | None, max_chars: int | None
) -> tuple[list[str], list[tuple[int, int]] | None]:
    """The pieces of ``view``'s tokens and the token ranges shown (None: all of them, nothing bounded); a bounded
    view decodes only what it shows (:func:`msgtrain.tools.bounds.bounded_pieces`)."""
    ids = view.input_ids.tolist()
    if turns is None and max_chars is None:
        return token_pieces(decode, ids), None
    return bounded_pieces(view, range_pieces(decode, ids), turns, max_chars)


@dataclass
class Segment:
    """A run of tokens shown alike: same turn (-1 = context), both control tokens or both not."""

    text: str
    turn: int
    control: bool
    start: int  # token index of the first token
    end: int


def segments(view: SampleView, pieces: Sequence[str], control_ids: set[int]) -> list[Segment]:
    turns = turn_of_tokens(view.num_tokens, view.turn_spans)
    ctrl = (
        np.isin(view.input_ids, np.fromiter(control_ids, dtype=np.int64))
        if control_ids
        else np.zeros(view.num_tokens, dtype=bool)
    )
    # Boundaries: where the turn or the control flag changes, and at the cut point.
    change = np.flatnonzero((turns[1:] != turns[:-1]) | (ctrl[1:] != ctrl[:-1])) + 1
    cuts = {view.cut_at} if view.cut_at is not None and 0 < view.cut_at < view.num_tokens else set()
    bounds = sorted({0, view.num_tokens, *change.tolist(), *cuts})
    return [Segment("".join(pieces[a:b]), int(turns[a]), bool(ctrl[a]), a, b) for a, b in itertools.pairwise(bounds)]


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def describe_cut(reason: str) -> str:
    return CUT_TEXT.get(reason, reason)


def header_text(view: SampleView, total: int) -> Text:
    t = Text()
    t.append(
        f"sample {view.index} (of {total}) · {view.sample_id} · graph {view.graph_id} · policy {view.policy}\n",
        style="bold",
    )
    t.append(
        f"{view.num_tokens} tokens, {view.num_trained} trained in {plural(len(view.turn_spans), 'turn')} · "
        f"engine tokens {_text(view.engine_tokens)} · source {view.source}"
    )
    if view.flags:
        t.append(f" · flags {', '.join(view.flags)}", style="yellow")
    t.append("\ncut: ", style="bold")
    t.append(view.cut_reason, style="bold red" if view.cut_reason not in ("start", "fork") else "bold")
    t.append(f" — {describe_cut(view.cut_reason)}")
    if view.cut_at is not None:
        t.append(f" (at token {view.cut_at}, where it leaves the other samples of this graph)")
    return t


def legend_text(view: SampleView) -> Text:
    t = Text("turns: ")
    for k, ((a, b), nid) in enumerate(zip(view.turn_spans, view.turn_ids, strict=True)):
        t.append(f" turn {k} ", style=TURN_STYLES[k % len(TURN_STYLES)])
        t.append(f" {nid[:12]} tokens {a}–{b - 1}  ")
    t.append(" context ", style="dim")
    t.append(" control token ", style="bold magenta")
    return t


def clip_segments(
    view: SampleView, segs: Sequence[Segment], pieces: Sequence[str], ranges: Sequence[tuple[int, int]]
) -> list[Segment | str]:
    """``segs`` cut to the token ``ranges`` shown, with a marker (a string) for each stretch left out."""
    hidden = gaps(ranges, view.num_tokens)
    out: list[Segment | str] = []
    for a, b in sorted([*ranges, *hidden]):
        if (a, b) in hidden:
            out.append(gap_note(view, a, b))
            continue
        for s in segs:
            lo, hi = max(a, s.start), min(b, s.end)
            if lo < hi:
                out.append(Segment("".join(pieces[lo:hi]), s.turn, s.control, lo, hi))
    return out


def tokens_text(view: SampleView, segs: Sequence[Segment | str]) -> Text:
    t = Text()
    for s in segs:
        if isinstance(s, str):  # tokens left out by a bound
            t.append(s, style="italic white on grey23")
            continue
        if view.cut_at is not None and s.start == view.cut_at:
            t.append(f"✂ {view.cut_reason} ", style="bold white on red")
        if s.turn >= 0:
            style = TURN_STYLES[s.turn % len(TURN_STYLES)] + (" bold" if s.control else "")
        else:
            style = "bold magenta" if s.control else "dim"
        t.append(s.text, style=style)
    return t


def render_sample(
    view: SampleView,
    total: int,
    decode: Decode,
    control_ids: set[int],
    *,
    turns: int | None = None,
    max_chars: int | None = None,
) -> Text:
    """Header, turn legend and the token text of one sample, for a terminal: up to its ``turns``-th trained turn,
    stretches longer than ``max_chars`` elided in the middle (:mod:`msgtrain.tools.bounds`; None: no bound)."""
    pieces, ranges = shown_pieces(decode, view, turns, max_chars)
    plain = segments(view, pieces, control_ids)
    segs: Sequence[Segment | str] = plain if ranges is None else clip_segments(view, plain, pieces, ranges)
    out = header_text(view, total)
    out.append("\n")
    out.append_text(legend_text(view))
    out.append("\n")
    out.append_text(tokens_text(view, segs))
    return out
