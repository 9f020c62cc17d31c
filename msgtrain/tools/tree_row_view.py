"""One ``--target tree`` row as text: its segments indented under their parent, trained tokens highlighted.

Invariants:
- Built from the row's own columns only (``input_ids``, ``segment_starts``, ``segment_parents``,
  ``position_ids``, ``loss_mask``, ``turn_index``, ``sample_last_index``): what is shown is what a trainer reads.
- Segments appear in row order (depth-first), each indented by its depth; a segment's first line says its
  token range in the row, its depth range (the position ids of its tokens) and which samples end in it.
- Long segments are shortened in the middle (``max_chars``); the trained runs are decoded on their own, so the
  highlighting follows ``loss_mask`` exactly.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from msgtrain.tools.sample_view import Decode

TREE_ROW_COLUMNS = (
    "input_ids",
    "position_ids",
    "loss_mask",
    "turn_index",
    "segment_starts",
    "segment_parents",
    "sample_ids",
    "sample_last_index",
    "turn_ids",
    "num_tokens",
    "num_flat_tokens",
    "num_samples",
    "num_segments",
    "num_trained_tokens",
)


@dataclass(frozen=True)
class SegmentView:
    depth: int
    start: int
    end: int
    first_position: int
    runs: list[tuple[str, int]]  # (text, turn index or -1)
    ends_samples: list[str]


@dataclass(frozen=True)
class TreeRowView:
    index: int
    num_tokens: int
    num_flat_tokens: int
    num_samples: int
    num_trained_tokens: int
    segments: list[SegmentView]


def _shorten(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    return f"{text[:half]} … {text[-half:]}"


def tree_row_view(index: int, row: dict[str, Any], decode: Decode, max_chars: int = 400) -> TreeRowView:
    ids = np.asarray(row["input_ids"], dtype=np.int64)
    loss = np.asarray(row["loss_mask"], dtype=np.int8)
    turn = np.asarray(row["turn_index"], dtype=np.int64)
    starts = [*list(row["segment_starts"]), len(ids)]
    parents = row["segment_parents"]
    depth: list[int] = []
    for p in parents:
        depth.append(depth[p] + 1 if p >= 0 else 0)
    ends_at: dict[int, list[str]] = {}
    for sid, last in zip(row["sample_ids"], row["sample_last_index"], strict=True):
        ends_at.setdefault(int(last), []).append(sid)
    segments = []
    for s in range(len(parents)):
        a, b = starts[s], starts[s + 1]
        runs: list[tuple[str, int]] = []
        edges = [a, *(a + 1 + np.flatnonzero(np.diff(turn[a:b]) != 0)).tolist(), b]
        for lo, hi in itertools.pairwise(edges):
            t = int(turn[lo]) if loss[lo] else -1
            runs.append((_shorten(decode(ids[lo:hi].tolist()), max_chars), t))
        samples = [sid for q in range(a, b) for sid in ends_at.get(q, [])]
        segments.append(SegmentView(depth[s], a, b, int(row["position_ids"][a]), runs, samples))
    return TreeRowView(
        index=index,
        num_tokens=int(row["num_tokens"]),
        num_flat_tokens=int(row["num_flat_tokens"]),
        num_samples=int(row["num_samples"]),
        num_trained_tokens=int(row["num_trained_tokens"]),
        segments=segments,
    )


def render_tree_row(view: TreeRowView) -> Any:
    from rich.console import Group
    from rich.text import Text

    from msgtrain.tools.sample_view import TURN_STYLES

    head = Text(
        f"row {view.index}: {view.num_tokens} tokens for {view.num_samples} samples of {view.num_flat_tokens} "
        f"flat tokens ({view.num_flat_tokens / max(view.num_tokens, 1):.2f}x), "
        f"{view.num_trained_tokens} trained, {len(view.segments)} segments",
        style="bold",
    )
    parts: list[Any] = [head]
    for seg in view.segments:
        indent = "  " * seg.depth
        label = (
            f"{indent}└ segment [{seg.start}, {seg.end}) positions {seg.first_position}"
            f"–{seg.first_position + seg.end - seg.start - 1}"
        )
        if seg.ends_samples:
            label += f" · ends sample {', '.join(s[:12] for s in seg.ends_samples)}"
        parts.append(Text(label, style="dim"))
        body = Text(indent + "  ")
        for text, t in seg.runs:
            body.append(text, style=TURN_STYLES[t % len(TURN_STYLES)] if t >= 0 else "")
        parts.append(body)
    return Group(*parts)
