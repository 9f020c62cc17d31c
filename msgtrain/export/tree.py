"""Prefix-tree rows (``--target tree``): each graph's samples as one token trie, every shared prefix once.

Canonical samples repeat the conversation before every cut, so a trainer forwards the shared prefixes again and
again. A tree row holds the trie of a set of samples instead, serialized depth-first: each *segment* is a run
of tokens between two branch points, written once, followed by its children's subtrees. A token may attend to
exactly the tokens on its root path, and its position id is its depth, i.e. its position in its flat sample.

Row layout (per token, all aligned with ``input_ids``):

- ``position_ids``: depth in the tree = position in the flat sample.
- ``parent_index``: row index of the previous token on the root path (-1 at a root): the position whose logits
  predict this token. Inside a segment it is ``i - 1``; at a segment start it is the parent segment's last token.
- ``subtree_end``: exclusive end of the contiguous range of tokens that descend from this token's segment.
  Mask rule: query ``q`` sees key ``k`` iff ``k <= q < subtree_end[k]`` (O(tokens) to store, FlexAttention
  friendly); this is exactly "k is on q's root path".
- ``loss_mask`` / ``logprobs`` / ``turn_index``: 1 / the engine logprob / the index into ``turn_ids`` on the
  tokens this row trains.

Invariants (tested structurally on real logs and oracle corpora, numerically with a small random model):

- Context equality: for every trained token, the tokens it may see (by the mask rule) with their position ids
  are exactly its canonical sample's tokens before it, with their positions.
- Each trained turn of the canonical rows is trained exactly once, in one row, with all its tokens; tokens
  trained by no sample are never trained. Two samples training the same trie tokens (identical completions at
  the same context) go to different trees rather than merging, so the summed loss is unchanged.
- A tree larger than ``pack_length`` is cut into *blocks*: consecutive runs of segments in depth-first order,
  each preceded by a copy of the root path it needs (copies are context only), the runs chosen to copy the
  fewest tokens. Blocks and small trees are packed into rows of at most ``pack_length`` tokens by best-fit
  decreasing; blocks of one tree that share a row become one block holding their root paths once; blocks of
  different trees in one row never see each other. :func:`tokens_lower_bound` bounds what any cut can reach.
- Deterministic: the output depends only on the rows and their order (buffers are cut by row and token counts).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from msgtrain.errors import ConfigError, OutputError
from msgtrain.export import arrays
from msgtrain.export.buffer import RowBuffer
from msgtrain.export.schema import SPAN

TREE_SCOPES: tuple[str, ...] = ("graph", "split")

TREE_SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.int32())),
        ("position_ids", pa.list_(pa.int32())),
        ("parent_index", pa.list_(pa.int32())),
        ("subtree_end", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float32())),
        ("turn_index", pa.list_(pa.int32())),
        ("segment_starts", pa.list_(pa.int32())),
        ("segment_parents", pa.list_(pa.int32())),
        ("sample_ids", pa.list_(pa.string())),
        ("graph_ids", pa.list_(pa.string())),
        ("group_ids", pa.list_(pa.string())),
        ("reward", pa.list_(pa.float64())),
        ("sample_last_index", pa.list_(pa.int32())),
        ("turn_ids", pa.list_(pa.string())),
        ("turn_group_ids", pa.list_(pa.string())),
        ("turn_sample_ids", pa.list_(pa.string())),
        ("turn_spans", pa.list_(SPAN)),
        ("turn_last_index", pa.list_(pa.int32())),
        ("num_samples", pa.int32()),
        ("num_segments", pa.int32()),
        ("num_tokens", pa.int32()),
        ("num_trained_tokens", pa.int32()),
        ("num_flat_tokens", pa.int64()),
    ]
)

_TREE_INPUT = [
    "sample_id",
    "graph_id",
    "group_id",
    "reward",
    "input_ids",
    "loss_mask",
    "logprobs",
    "turn_ids",
    "turn_spans",
    "turn_group_ids",
]


@dataclass
class _Rows:
    """One buffer of canonical rows taken apart: flat token arrays plus per-sample Python lists."""

    offsets: np.ndarray
    ids: np.ndarray
    logprobs: np.ndarray
    sample_id: list[str]
    graph_id: list[str]
    group_id: list[str]
    reward: list[float | None]
    turn_ids: list[list[str]]
    turn_spans: list[list[dict[str, int]]]
    turn_group_ids: list[list[str]]

    @classmethod
    def of(cls, table: pa.Table) -> _Rows:
        return cls(
            offsets=arrays.offsets_of(table["input_ids"]),
            ids=arrays.flat_values(table["input_ids"], np.int32),
            logprobs=arrays.flat_values(table["logprobs"], np.float32),
            **{
                name: table[name].to_pylist()
                for name in _TREE_INPUT
                if name not in ("input_ids", "logprobs", "loss_mask")
            },
        )

    def seq(self, j: int) -> np.ndarray:
        return self.ids[self.offsets[j] : self.offsets[j + 1]]

    def length(self, j: int) -> int:
        return int(self.offsets[j + 1] - self.offsets[j])


@dataclass
class _Trie:
    """A compressed trie over some samples. Node 0 is a virtual root of depth 0 with no tokens; node ``n``
    holds the tokens ``seq(rep[n])[start[n]:end[n]]`` at depths ``start[n]..end[n]-1``."""

    start: list[int] = field(default_factory=lambda: [0])
    end: list[int] = field(default_factory=lambda: [0])
    rep: list[int] = field(default_factory=lambda: [-1])
    parent: list[int] = field(default_factory=lambda: [-1])
    leaf_of: dict[int, int] = field(default_factory=dict)

    def add(self, start: int, end: int, rep: int, parent: int) -> int:
        self.start.append(start)
        self.end.append(end)
        self.rep.append(rep)
        self.parent.append(parent)
        return len(self.start) - 1

    def path(self, node: int) -> list[int]:
        """Nodes from the top (excluding the virtual root) down to ``node``."""
        out = []
        while node > 0:
            out.append(node)
            node = self.parent[node]
        return out[::-1]


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.shape[0], b.shape[0])
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def build_trie(rows: _Rows, members: list[int]) -> _Trie:
    """The compressed trie of ``members`` (non-empty samples), built from their sorted order and the longest
    common prefix of neighbours (a stack walk over samples; token work is numpy compares only)."""
    keys = {j: rows.seq(j).astype(">u4").tobytes() for j in members}  # big-endian bytes sort like the ids
    order = sorted(members, key=lambda j: (keys[j], j))
    trie = _Trie()
    stack = [0]
    previous: np.ndarray | None = None
    for j in order:
        seq = rows.seq(j)
        lcp = 0 if previous is None else _common_prefix(previous, seq)
        last = -1
        while trie.end[stack[-1]] > lcp:
            last = stack.pop()
        top = stack[-1]
        if trie.end[top] < lcp:  # the popped node continues past the branch point: split it there
            mid = trie.add(trie.start[last], lcp, trie.rep[last], top)
            trie.start[last] = lcp
            trie.parent[last] = mid
            stack.append(mid)
            top = mid
        if seq.shape[0] > lcp:
            leaf = trie.add(lcp, seq.shape[0], j, top)
            stack.append(leaf)
            trie.leaf_of[j] = leaf
        else:  # a duplicate of the previous sample
            trie.leaf_of[j] = top
        previous = seq
    return trie


def _trained_keys(rows: _Rows, trie: _Trie, j: int) -> np.ndarray:
    """(node, depth) of every token sample ``j`` trains, as one int64 key per token."""
    spans = rows.turn_spans[j]
    if not spans:
        return np.zeros(0, dtype=np.int64)
    path = trie.path(trie.leaf_of[j])
    starts = np.array([trie.start[n] for n in path], dtype=np.int64)
    depths = np.concatenate([np.arange(s["start"], s["end"], dtype=np.int64) for s in spans])
    nodes = np.asarray(path, dtype=np.int64)[np.searchsorted(starts, depths, side="right") - 1]
    return nodes * (1 << 32) + depths


def build_forest(rows: _Rows, members: list[int]) -> list[tuple[_Trie, list[int]]]:
    """Tries over ``members`` such that no trie token is trained by two samples.

    Two samples train the same trie token only when two sampled turns have identical tokens after an
    identical context (e.g. equal completions in an n>1 group). Merging them would train the token once
    instead of twice; such samples are moved to another trie, first come first kept.
    """
    out = []
    pending = members
    while pending:
        trie = build_trie(rows, pending)
        keys = [_trained_keys(rows, trie, j) for j in pending]
        flat = np.concatenate(keys) if keys else np.zeros(0, np.int64)
        if np.unique(flat).shape[0] == flat.shape[0]:
            out.append((trie, pending))
            return out
        seen: set[int] = set()
        kept, deferred = [], []
        for j, k in zip(pending, keys, strict=True):
            values = k.tolist()
            if seen.isdisjoint(values):
                seen.update(values)
                kept.append(j)
            else:
                deferred.append(j)
        out.append((build_trie(rows, kept), kept))
        pending = deferred
    return out


@dataclass
class _Block:
    """A tree or a piece of one: ``path`` (ancestors copied as context) and ``nodes`` (the segments it owns:
    trains and lists samples of). Serialized in depth-first order (``rank``) of ``path`` ∪ ``nodes``."""

    trie: _Trie
    root: int
    path: list[int]
    nodes: list[int]
    rank: dict[int, int]  # node -> depth-first rank in its tree (shared by the tree's blocks)
    offset: dict[int, int] = field(default_factory=dict)  # node -> first row index inside the block
    size: int = 0
    samples: list[int] = field(default_factory=list)
    turns: list[tuple[int, int]] = field(default_factory=list)  # (sample, turn number)

    def __post_init__(self) -> None:
        self.size = sum(self.trie.end[n] - self.trie.start[n] for n in self.path + self.nodes)

    def sequence(self) -> list[int]:
        return sorted(self.path + self.nodes, key=self.rank.__getitem__)


def _preorder(root: int, children: dict[int, list[int]]) -> list[int]:
    out, stack = [], [root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(children.get(node, [])))
    return out


def cut_blocks(rows: _Rows, trie: _Trie, pack_length: int | None) -> list[_Block]:
    """One block per top-level tree, or for a tree larger than ``pack_length`` consecutive depth-first runs of
    segments, each after a copy of its first segment's ancestors (every later segment of the run descends from
    one of those ancestors or from the run itself, so the copy is all the context the run needs).

    On the benchmark data this is at the lower bound of :func:`tokens_lower_bound`; other sibling orders (light
    or heavy subtrees first) were tried and gave no fewer tokens."""
    children: dict[int, list[int]] = {}
    for node in range(1, len(trie.start)):
        children.setdefault(trie.parent[node], []).append(node)
    for kids in children.values():  # branch tokens differ, so this orders siblings deterministically
        kids.sort(key=lambda n: int(rows.seq(trie.rep[n])[trie.start[n]]))
    blocks = []
    for root in children.get(0, []):
        order = _preorder(root, children)
        rank = {n: i for i, n in enumerate(order)}
        lengths = [trie.end[n] - trie.start[n] for n in order]
        if pack_length is None or sum(lengths) <= pack_length:
            blocks.append(_Block(trie, root, [], order, rank))
            continue
        for i, k in _cut_points(order, lengths, [trie.start[n] for n in order], pack_length):
            blocks.append(_Block(trie, root, trie.path(order[i])[:-1], order[i:k], rank))
    return blocks


def _cut_points(order: list[int], lengths: list[int], depths: list[int], capacity: int) -> list[tuple[int, int]]:
    """Cut the depth-first run of segments into ranges ``[i, k)`` that each fit ``capacity`` together with
    the copy of their first segment's root path (``depths[i]`` tokens), minimising the copied tokens and then
    the number of ranges (a shortest path over cut positions; each range spans at most ``capacity`` tokens,
    so the work is bounded by segments × segments per range)."""
    n = len(order)
    inf = (float("inf"), 0)
    best: list[tuple[float, int]] = [(0, 0)] + [inf] * n
    came_from = [0] * (n + 1)
    for i in range(n):
        if best[i] == inf:
            continue
        cost = depths[i] + lengths[i]
        if cost > capacity:
            raise OutputError(
                f"a sample of at least {cost} tokens cannot fit a tree row of {capacity}",
                hint="convert drops such samples (--pack-length implies --max-length); from Python, pass the rows "
                "through msgtrain.export.length.apply_length_policy(table, max_length=pack_length) first",
                code="sample_longer_than_pack",
            )
        reached = (best[i][0] + depths[i], best[i][1] + 1)
        k = i + 1
        while True:
            if reached < best[k]:
                best[k], came_from[k] = reached, i
            if k == n or cost + lengths[k] > capacity:
                break
            cost += lengths[k]
            k += 1
    cuts, k = [], n
    while k > 0:
        cuts.append((came_from[k], k))
        k = came_from[k]
    return cuts[::-1]


def pack_blocks(blocks: list[_Block], capacity: int) -> tuple[list[_Block], np.ndarray, np.ndarray]:
    """Pack blocks into rows of ``capacity`` tokens, best-fit decreasing, sharing copies: blocks of one tree in
    one row become one block whose copied root paths are held once (a segment another block of the row owns or
    copies is not copied again). A block goes to a row holding its tree when that saves tokens and fits (the
    largest saving; ties: the fullest row), else to the fullest row it fits whole, else to a new row.

    Returns the row blocks (merged), their row numbers and their order within rows (rank)."""
    order = sorted(range(len(blocks)), key=lambda b: -blocks[b].size)  # stable: ties keep input order
    free: list[tuple[int, int]] = []  # (room, row), sorted: bisect finds the fullest row that fits
    room: list[int] = []
    # A tree is (trie, top-level node): blocks of one tree share segments, blocks of different trees share none.
    members: list[dict[tuple[int, int], list[int]]] = []  # row -> tree -> blocks
    held: list[dict[tuple[int, int], set[int]]] = []  # row -> tree -> segments in the row
    by_tree: dict[tuple[int, int], list[int]] = {}  # tree -> rows holding it
    for b in order:
        block = blocks[b]
        key = (id(block.trie), block.root)
        segments = set(block.path) | set(block.nodes)
        lengths = block.trie.end, block.trie.start
        chosen, best = -1, (0, 0)
        for r in by_tree.get(key, []):
            saved = sum(lengths[0][n] - lengths[1][n] for n in segments & held[r][key])
            if saved > 0 and block.size - saved <= room[r] and (saved, -room[r]) > best:
                chosen, best = r, (saved, -room[r])
        need = block.size - best[0]
        if chosen < 0:
            at = bisect.bisect_left(free, (need, -1))
            if at < len(free):
                chosen = free[at][1]
            else:
                chosen = len(room)
                room.append(capacity)
                members.append({})
                held.append({})
                free.insert(bisect.bisect_left(free, (capacity, chosen)), (capacity, chosen))
        free.remove((room[chosen], chosen))
        room[chosen] -= need
        bisect.insort(free, (room[chosen], chosen))
        if key not in members[chosen]:
            members[chosen][key] = []
            held[chosen][key] = set()
            by_tree.setdefault(key, []).append(chosen)
        members[chosen][key].append(b)
        held[chosen][key] |= segments
    merged: list[_Block] = []
    row_of: list[int] = []
    for r, tries in enumerate(members):
        for parts in tries.values():
            merged.append(_merge([blocks[b] for b in parts]))
            row_of.append(r)
    rank = np.arange(len(merged))
    return merged, np.asarray(row_of, dtype=np.int64), rank


def _merge(parts: list[_Block]) -> _Block:
    if len(parts) == 1:
        return parts[0]
    owned = [n for p in parts for n in p.nodes]
    copied = sorted({n for p in parts for n in p.path} - set(owned), key=parts[0].rank.__getitem__)
    return _Block(parts[0].trie, parts[0].root, copied, sorted(owned, key=parts[0].rank.__getitem__), parts[0].rank)


def _repeated_below(trie: _Trie, children: dict[int, list[int]], top: int, capacity: int, leaves: int = 8) -> int:
    """Tokens of ``top``'s subtree (below ``trie.start[top]``) that every partition into rows of ``capacity``
    must hold twice, from the deepest ``leaves`` leaves.

    The row that trains leaf ``L`` holds ``L``'s root path (depth ``D``) and room for at most ``capacity - D``
    other tokens, so at least ``W + start - capacity`` tokens of the subtree (``W`` tokens) lie in other rows;
    each such row also holds the part of ``L``'s path above the point where that token's path leaves it. With
    tokens sorted by that branch depth, the smallest depth ``b`` reached after ``W + start - capacity`` tokens
    gives ``b - start`` tokens of the subtree in two rows."""
    nodes = _preorder(top, children)
    weight = sum(trie.end[n] - trie.start[n] for n in nodes)
    need = weight + trie.start[top] - capacity
    if need <= 0:
        return 0
    best = 0
    for leaf in sorted((n for n in nodes if n not in children), key=lambda n: -trie.end[n])[:leaves]:
        on_path = set(trie.path(leaf))
        branch: dict[int, int] = {}
        for n in nodes:  # preorder: a parent's branch depth is known before its children's
            if n not in on_path:
                branch[n] = trie.start[n] if trie.parent[n] in on_path else branch[trie.parent[n]]
        got = 0
        for depth, n in sorted((d, n) for n, d in branch.items()):
            got += trie.end[n] - trie.start[n]
            if got >= need:
                best = max(best, depth - trie.start[top])
                break
    return best


def tokens_lower_bound(table: pa.Table, pack_length: int, scope: str = "graph") -> int:
    """A lower bound on the tokens of any tree rows of at most ``pack_length`` tokens holding ``table``'s samples
    (all of at most ``pack_length`` tokens): the trie tokens plus, per tree larger than a row, the larger of

    - the root path bound of :func:`_repeated_below` on the whole tree, and
    - ``(k - 1) × r`` for the root segment (``r`` tokens, in every row of the tree; ``k`` rows at least, each with
      ``pack_length - r`` tokens of room) plus the bounds of the root's child subtrees (tokens of different
      subtrees, so they add up).

    Used by ``benchmarks/tree.py`` to show how far a cut is from the best possible one (a bound, not always
    reachable)."""
    rows = _Rows.of(table.select(_TREE_INPUT))
    total = 0
    for members in _groups(rows, table.num_rows, scope):
        for trie, _ in build_forest(rows, members):
            children: dict[int, list[int]] = {}
            for node in range(1, len(trie.start)):
                children.setdefault(trie.parent[node], []).append(node)
            total += sum(trie.end[k] - trie.start[k] for k in range(1, len(trie.start)))
            for root in children.get(0, []):
                weight = sum(trie.end[n] - trie.start[n] for n in _preorder(root, children))
                if weight <= pack_length:
                    continue
                r = trie.end[root] - trie.start[root]
                rows_needed = -(-(weight - r) // max(pack_length - r, 1))
                by_children = (rows_needed - 1) * r + sum(
                    _repeated_below(trie, children, c, pack_length) for c in children.get(root, [])
                )
                total += max(_repeated_below(trie, children, root, pack_length), by_children)
    return total


@dataclass
class _BlockArrays:
    ids: np.ndarray
    positions: np.ndarray
    parent_index: np.ndarray
    subtree_end: np.ndarray
    segment_starts: np.ndarray
    segment_parents: np.ndarray
    loss: np.ndarray
    logprobs: np.ndarray
    turn_index: np.ndarray


def _serialize(rows: _Rows, block: _Block) -> _BlockArrays:
    trie = block.trie
    sequence = block.sequence()
    pos = 0
    index_of = {}
    for i, node in enumerate(sequence):
        block.offset[node] = pos
        index_of[node] = i
        pos += trie.end[node] - trie.start[node]
    block.size = pos
    n_seg = len(sequence)
    seg_start = np.fromiter((block.offset[n] for n in sequence), dtype=np.int64, count=n_seg)
    seg_len = np.fromiter((trie.end[n] - trie.start[n] for n in sequence), dtype=np.int64, count=n_seg)
    seg_parent = np.fromiter((index_of.get(trie.parent[n], -1) for n in sequence), dtype=np.int64, count=n_seg)
    # Subtree ends: in depth-first order a segment's subtree ends where the next non-descendant begins.
    seg_end = np.full(n_seg, pos, dtype=np.int64)
    open_: list[int] = []
    for i in range(n_seg):
        while open_ and open_[-1] != seg_parent[i]:
            seg_end[open_.pop()] = seg_start[i]
        open_.append(i)
    ids = (
        np.concatenate([rows.seq(trie.rep[n])[trie.start[n] : trie.end[n]] for n in sequence])
        if sequence
        else np.zeros(0, np.int32)
    )
    token_seg = np.repeat(np.arange(n_seg), seg_len)
    within = np.arange(pos, dtype=np.int64) - seg_start[token_seg]
    depth0 = np.fromiter((trie.start[n] for n in sequence), dtype=np.int64, count=n_seg)
    parent_index = np.arange(pos, dtype=np.int64) - 1
    first = seg_start
    has_parent = seg_parent >= 0
    parent_last = np.where(has_parent, seg_start[seg_parent] + seg_len[seg_parent] - 1, -1)
    parent_index[first] = parent_last
    return _BlockArrays(
        ids=ids.astype(np.int32, copy=False),
        positions=(depth0[token_seg] + within).astype(np.int32),
        parent_index=parent_index,
        subtree_end=seg_end[token_seg],
        segment_starts=seg_start,
        segment_parents=seg_parent,
        loss=np.zeros(pos, np.int8),
        logprobs=np.full(pos, np.nan, np.float32),
        turn_index=np.full(pos, -1, np.int64),
    )


def _place_training(
    rows: _Rows, trie: _Trie, members: list[int], blocks: list[_Block], data: list[_BlockArrays]
) -> None:
    """Put each trained turn's loss in the block holding the turn's last token, on that block's copy of the
    turn's root path; list each sample in the block holding its last token."""
    range_block: dict[int, int] = {}
    for b, block in enumerate(blocks):
        for node in block.nodes:
            range_block[node] = b
    for j in members:
        leaf = trie.leaf_of[j]
        blocks[range_block[leaf]].samples.append(j)
        spans = rows.turn_spans[j]
        if not spans:
            continue
        path = trie.path(leaf)
        starts = np.array([trie.start[n] for n in path], dtype=np.int64)
        base = rows.offsets[j]
        for t, span in enumerate(spans):
            s, e = span["start"], span["end"]
            depths = np.arange(s, e, dtype=np.int64)
            at = np.searchsorted(starts, depths, side="right") - 1
            b = range_block[path[int(at[-1])]]
            block, arr = blocks[b], data[b]
            node_offset = np.array([block.offset[n] for n in path[: int(at[-1]) + 1]], dtype=np.int64)
            where = node_offset[at] + depths - starts[at]
            arr.loss[where] = 1
            arr.logprobs[where] = rows.logprobs[base + s : base + e]
            arr.turn_index[where] = len(block.turns)
            block.turns.append((j, t))


@dataclass
class TreeStats:
    samples: int = 0
    skipped_empty: int = 0
    trees: int = 0
    blocks: int = 0
    rows: int = 0
    tokens: int = 0
    flat_tokens: int = 0
    trie_tokens: int = 0
    trained_tokens: int = 0
    split_trees: int = 0

    def to_dict(self, pack_length: int | None, scope: str) -> dict[str, Any]:
        return {
            "pack_length": pack_length,
            "scope": scope,
            "samples": self.samples,
            "skipped_empty": self.skipped_empty,
            "trees": self.trees,
            "split_trees": self.split_trees,
            "blocks": self.blocks,
            "rows": self.rows,
            "tokens": self.tokens,
            "flat_tokens": self.flat_tokens,
            "trie_tokens": self.trie_tokens,
            "trained_tokens": self.trained_tokens,
            "flat_per_tree_token": round(self.flat_tokens / self.tokens, 4) if self.tokens else 0.0,
            "tree_per_trie_token": round(self.tokens / self.trie_tokens, 4) if self.trie_tokens else 0.0,
        }


def _groups(rows: _Rows, n: int, scope: str) -> list[list[int]]:
    nonempty = [j for j in range(n) if rows.length(j) > 0]
    if scope == "split":
        return [nonempty] if nonempty else []
    by_graph: dict[str, list[int]] = {}
    for j in nonempty:
        by_graph.setdefault(rows.graph_id[j], []).append(j)
    return list(by_graph.values())


def tree_table(
    table: pa.Table, pack_length: int | None, scope: str = "graph", stats: TreeStats | None = None
) -> pa.Table:
    """Turn one buffer of canonical rows into :data:`TREE_SCHEMA` rows."""
    stats = stats if stats is not None else TreeStats()
    rows = _Rows.of(table)
    n = table.num_rows
    cut: list[_Block] = []
    forest: list[tuple[_Trie, list[int]]] = []
    for members in _groups(rows, n, scope):
        for trie, kept in build_forest(rows, members):
            pieces = cut_blocks(rows, trie, pack_length)
            roots = [b.root for b in pieces]
            stats.trees += len(set(roots))
            stats.split_trees += len({r for r in roots if roots.count(r) > 1})
            stats.trie_tokens += sum(trie.end[k] - trie.start[k] for k in range(1, len(trie.start)))
            cut.extend(pieces)
            forest.append((trie, kept))
    stats.samples += sum(rows.length(j) > 0 for j in range(n))
    stats.skipped_empty += sum(rows.length(j) == 0 for j in range(n))
    stats.flat_tokens += int(rows.offsets[-1])
    if not cut:
        return TREE_SCHEMA.empty_table()
    if pack_length is None:
        blocks, row_of, rank = cut, np.arange(len(cut)), np.arange(len(cut))
    else:
        blocks, row_of, rank = pack_blocks(cut, pack_length)
    data = [_serialize(rows, b) for b in blocks]
    by_trie: dict[int, list[int]] = {}
    for i, b in enumerate(blocks):
        by_trie.setdefault(id(b.trie), []).append(i)
    for trie, kept in forest:
        mine = by_trie[id(trie)]
        _place_training(rows, trie, kept, [blocks[i] for i in mine], [data[i] for i in mine])
    order = np.lexsort((rank, row_of)).tolist()
    out = _assemble_rows(rows, blocks, data, row_of, order)
    stats.blocks += len(blocks)
    stats.rows += out.num_rows
    stats.tokens += sum(b.size for b in blocks)
    stats.trained_tokens += int(sum(int(d.loss.sum()) for d in data))
    return out


def _assemble_rows(
    rows: _Rows, blocks: list[_Block], data: list[_BlockArrays], row_of: np.ndarray, order: list[int]
) -> pa.Table:
    tok: dict[str, list[np.ndarray]] = {k: [] for k in ("ids", "pos", "par", "end", "loss", "lp", "turn")}
    seg_starts, seg_parents, sample_last, turn_last, sample_index = [], [], [], [], []
    row_tokens, row_segments, row_samples, row_turns = [], [], [], []
    strings: dict[str, list[Any]] = {
        k: []
        for k in (
            "sample_ids",
            "graph_ids",
            "group_ids",
            "reward",
            "turn_ids",
            "turn_group_ids",
            "turn_sample_ids",
            "turn_spans",
        )
    }
    current, shift, segs_shift, turns_shift = -1, 0, 0, 0
    counts = [0, 0, 0, 0]
    for b in order:
        if row_of[b] != current:
            if current >= 0:
                row_tokens.append(counts[0])
                row_segments.append(counts[1])
                row_samples.append(counts[2])
                row_turns.append(counts[3])
            current, shift, segs_shift, turns_shift = int(row_of[b]), 0, 0, 0
            counts = [0, 0, 0, 0]
        block, arr = blocks[b], data[b]
        tok["ids"].append(arr.ids)
        tok["pos"].append(arr.positions)
        tok["par"].append(np.where(arr.parent_index >= 0, arr.parent_index + shift, -1))
        tok["end"].append(arr.subtree_end + shift)
        tok["loss"].append(arr.loss)
        tok["lp"].append(arr.logprobs)
        tok["turn"].append(np.where(arr.turn_index >= 0, arr.turn_index + turns_shift, -1))
        seg_starts.append(arr.segment_starts + shift)
        seg_parents.append(np.where(arr.segment_parents >= 0, arr.segment_parents + segs_shift, -1))
        trie = block.trie
        for j in block.samples:
            leaf = trie.leaf_of[j]
            sample_last.append(shift + block.offset[leaf] + trie.end[leaf] - trie.start[leaf] - 1)
            sample_index.append(j)
            strings["sample_ids"].append(rows.sample_id[j])
            strings["graph_ids"].append(rows.graph_id[j])
            strings["group_ids"].append(rows.group_id[j])
            strings["reward"].append(rows.reward[j])
        for j, t in block.turns:
            span = rows.turn_spans[j][t]
            path = trie.path(trie.leaf_of[j])
            node = next(n for n in path if trie.start[n] < span["end"] <= trie.end[n])
            turn_last.append(shift + block.offset[node] + span["end"] - 1 - trie.start[node])
            strings["turn_ids"].append(rows.turn_ids[j][t])
            strings["turn_group_ids"].append(rows.turn_group_ids[j][t])
            strings["turn_sample_ids"].append(rows.sample_id[j])
            strings["turn_spans"].append(span)
        shift += block.size
        segs_shift += arr.segment_starts.shape[0]
        turns_shift += len(block.turns)
        counts[0] += block.size
        counts[1] += arr.segment_starts.shape[0]
        counts[2] += len(block.samples)
        counts[3] += len(block.turns)
    row_tokens.append(counts[0])
    row_segments.append(counts[1])
    row_samples.append(counts[2])
    row_turns.append(counts[3])

    def offsets(lengths: list[int]) -> np.ndarray:
        return np.concatenate(([0], np.cumsum(np.asarray(lengths, dtype=np.int64))))

    tok_off, seg_off, smp_off, trn_off = (offsets(x) for x in (row_tokens, row_segments, row_samples, row_turns))
    loss = np.concatenate(tok["loss"])
    columns: dict[str, pa.Array] = {
        "input_ids": arrays.build_list(tok_off, np.concatenate(tok["ids"]), pa.int32()),
        "position_ids": arrays.build_list(tok_off, np.concatenate(tok["pos"]), pa.int32()),
        "parent_index": arrays.build_list(tok_off, np.concatenate(tok["par"]), pa.int32()),
        "subtree_end": arrays.build_list(tok_off, np.concatenate(tok["end"]), pa.int32()),
        "loss_mask": arrays.build_list(tok_off, loss, pa.int8()),
        "logprobs": arrays.build_list(tok_off, np.concatenate(tok["lp"]), pa.float32(), nan_to_null=True),
        "turn_index": arrays.build_list(tok_off, np.concatenate(tok["turn"]), pa.int32()),
        "segment_starts": arrays.build_list(seg_off, np.concatenate(seg_starts), pa.int32()),
        "segment_parents": arrays.build_list(seg_off, np.concatenate(seg_parents), pa.int32()),
        "sample_last_index": arrays.build_list(smp_off, np.asarray(sample_last, np.int64), pa.int32()),
        "turn_last_index": arrays.build_list(trn_off, np.asarray(turn_last, np.int64), pa.int32()),
    }
    for name in ("sample_ids", "graph_ids", "group_ids", "reward"):
        typ = TREE_SCHEMA.field(name).type.value_type
        columns[name] = pa.ListArray.from_arrays(pa.array(smp_off.astype(np.int32)), pa.array(strings[name], type=typ))
    for name in ("turn_ids", "turn_group_ids", "turn_sample_ids", "turn_spans"):
        typ = TREE_SCHEMA.field(name).type.value_type
        columns[name] = pa.ListArray.from_arrays(pa.array(trn_off.astype(np.int32)), pa.array(strings[name], type=typ))
    columns["num_samples"] = pa.array(row_samples, pa.int32())
    columns["num_segments"] = pa.array(row_segments, pa.int32())
    columns["num_tokens"] = pa.array(row_tokens, pa.int32())
    columns["num_trained_tokens"] = pa.array(arrays.per_row_sum(loss.astype(np.int64), tok_off), pa.int32())
    flat = np.diff(rows.offsets)[np.asarray(sample_index, dtype=np.int64)]
    columns["num_flat_tokens"] = pa.array(arrays.per_row_sum(flat, smp_off), pa.int64())
    return pa.Table.from_arrays([columns[f.name] for f in TREE_SCHEMA], schema=TREE_SCHEMA)


class TreeConverter:
    """Stateful tree-target converter: buffers canonical rows (bounded by rows and tokens) and turns each
    buffer into tree rows. A graph whose samples straddle two buffers becomes two trees (still exact)."""

    def __init__(
        self,
        pack_length: int | None,
        scope: str = "graph",
        buffer_rows: int = 16384,
        buffer_tokens: int = 32 * 1024 * 1024,
    ) -> None:
        if scope not in TREE_SCOPES:
            raise ConfigError(
                f"unknown tree scope {scope!r}", hint=f"choose one of: {', '.join(TREE_SCOPES)}", code="unknown_scope"
            )
        if pack_length is not None and pack_length < 1:
            raise OutputError(f"pack_length must be positive, got {pack_length}")
        self.pack_length = pack_length
        self.scope = scope
        self._buffer = RowBuffer(buffer_rows, max(buffer_tokens, pack_length or 1))
        self._stats = TreeStats()

    def convert(self, table: pa.Table) -> pa.Table:
        self._buffer.add(table.select(_TREE_INPUT))
        return self._drain(final=False)

    def flush(self) -> pa.Table:
        return self._drain(final=True)

    def _drain(self, final: bool) -> pa.Table:
        done = []
        while (chunk := self._buffer.take(final)) is not None:
            done.append(tree_table(chunk, self.pack_length, self.scope, self._stats))
        return pa.concat_tables(done) if done else TREE_SCHEMA.empty_table()

    def stats(self) -> dict[str, Any]:
        return self._stats.to_dict(self.pack_length, self.scope)
