"""Record-range splitting of huge JSONL logs: one file becomes several *chunks* that convert independently (in
parallel, in bounded memory) and together give exactly the conversations of the whole file.

A chunk is a set of whole lines of the file — byte runs with their original line numbers — and a reader reads
it as if the file held only those lines (:func:`reading_chunk`; :func:`msgtrain.ingest.core.base.iter_json_lines`
honours it), so rejects and sample sources still name the file's real line numbers.

Invariants:
- No conversation is split. A reader that supports splitting says, per record, which conversation keys the record
  carries (``chunk_keys``: session id, first-messages key, graph id, response-id chain links); records sharing
  a key are grouped (union-find, so chains such as ``previous_response_id`` join transitively). A record whose
  meaning depends on the line before it (a message-per-line run, a line after a corrupt one) returns ``None``
  and stays with the previous line's group. A chunk holds whole groups.
- Order: groups are ordered by their first line and cut into consecutive chunks; a chunk's conversations come
  out in first-line order, as the whole file's do, so a stable sort by first line merges the chunks' outputs back
  into the whole file's (``msgtrain.run.parts.merge_chunk_tables``).
- Chunks of a file are disjoint and cover every line (blank lines included): records read add up to the file's.
- The plan depends only on the file's bytes, the reader and the target size: reruns give the same chunks.
- Cost: one pass over the file parsing each line once (no message model, no graph); memory O(lines) integers.
- Only line-oriented files (JSONL) are split, and only by readers that define ``chunk_keys``; any other file is
  one unit of work — except a top-level JSON array read item by item
  (:func:`msgtrain.ingest.core.json_stream.read_item_by_item`) by a reader that also says ``chunk_items``: it is
  split the same way with its items as the records (:func:`item_groups`), a chunk being byte runs of whole items
  with the index of each run's first item (``Chunk.items``), so records keep their ``item i`` names. Such an array
  is not split where its structure is lost (the rest of it is one reject only a whole read gives).
"""

from __future__ import annotations

# The chunk view (what a reader sees of a chunk) lives in msgtrain.ingest.core.base, below the readers; its names are
# re-exported here with the planning.
__all__ = [
    "Chunk",
    "ChunkKey",
    "KeyFunction",
    "active_chunk",
    "chunk_through",
    "chunk_without",
    "is_jsonl",
    "iter_chunk_lines",
    "key_function",
    "line_groups",
    "plan_chunks",
    "reading_chunk",
    "whole_file",
]

import json
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msgtrain.errors import ParseError
from msgtrain.ingest.core.base import (
    Chunk,
    LongLine,
    Reader,
    active_chunk,
    bounded_lines,
    chunk_through,
    is_json_lines,
    iter_chunk_lines,
    line_size,
    reading_chunk,
    whole_file,
)
from msgtrain.ingest.core.text_input import file_encoding, open_input

# What a reader's key function returns: the record's conversation keys (``()``: a record independent of all
# others), or ``None``: keep this record with the line before it.
ChunkKey = tuple[str, ...] | None
KeyFunction = Callable[[Any], ChunkKey]

_BAD_LINE = ParseError("unparseable line", code="bad_json")


def key_function(reader: Reader, path: Path) -> KeyFunction | None:
    """The reader's key function for this file, or None when the reader (or this file) cannot be cut."""
    keys_for = getattr(reader, "chunk_keys", None)
    return keys_for(path) if callable(keys_for) else None


def is_jsonl(path: Path) -> bool:
    """The same rule as the readers (:func:`msgtrain.ingest.core.base.is_json_lines`)."""
    return is_json_lines(path)


class _Groups:
    """Union-find over groups numbered in creation order; the root of a set is its oldest (smallest) group."""

    def __init__(self) -> None:
        self.parent = array("q")

    def new(self) -> int:
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, g: int) -> int:
        parent = self.parent
        root = g
        while parent[root] != root:
            root = parent[root]
        while parent[g] != root:  # path compression keeps later finds O(1)
            parent[g], g = root, parent[g]
        return root

    def union(self, a: int, b: int) -> int:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return ra
        lo, hi = (ra, rb) if ra < rb else (rb, ra)
        self.parent[hi] = lo
        return lo


def line_groups(path: Path, keys: KeyFunction) -> tuple[Any, Any, Any]:
    """One pass over ``path``: (line bounds in bytes, ``len(lines) + 1`` of them; each line's conversation group,
    numbered by the group's first line order; which lines are not blank), as numpy arrays."""
    offsets = array("q")
    line_group = array("q")
    groups = _Groups()
    by_key: dict[str, int] = {}
    prev = -1
    pos = 0
    blank = array("b")
    with open_input(path) as f:
        for raw in bounded_lines(f):
            offsets.append(pos)
            pos += line_size(raw)
            blank.append(0 if raw.strip() else 1)
            if not raw.strip():
                key: ChunkKey = None  # blank lines carry nothing; keep runs unbroken
            elif isinstance(raw, LongLine):
                key = keys(_BAD_LINE)
            else:
                try:
                    value: Any = json.loads(raw)
                except (ValueError, RecursionError):
                    value = _BAD_LINE
                try:
                    key = keys(value)
                except Exception:
                    key = ()  # the reader will reject this record on its own (or the fault boundary will)
            g = _group_of(groups, by_key, key, prev)
            line_group.append(g)
            prev = g
    offsets.append(pos)
    import numpy as np  # here, not at module level: listing formats or --help need no numpy

    nonblank = np.frombuffer(blank, dtype=np.int8) == 0
    return np.frombuffer(offsets, dtype=np.int64), _roots(groups, line_group), nonblank


def _roots(groups: _Groups, record_group: array[int]) -> Any:
    """Every record's group → its root. A root is the oldest group of its set, and groups are created in record
    order, so ordering roots by number orders conversations by their first record."""
    import numpy as np

    parent = np.frombuffer(groups.parent, dtype=np.int64).copy()
    while True:  # pointer jumping until every group points at its root (union-find left short paths)
        grand = parent[parent]
        if np.array_equal(grand, parent):
            break
        parent = grand
    return parent[np.frombuffer(record_group, dtype=np.int64)]


def item_groups(path: Path, keys: KeyFunction) -> tuple[Any, Any] | None:
    """One pass over a top-level JSON array read item by item: (item bounds in bytes — each item's first byte, then
    the file's size: an item's bytes run to the next one's, its comma and blanks included, the last one's to the
    end; each item's conversation group), as numpy arrays; None when the array's structure is lost somewhere (the
    rest of such a file is one reject that only a whole read gives)."""
    from msgtrain.ingest.core.json_stream import LostStructure, iter_array_items

    offsets = array("q")
    item_group = array("q")
    groups = _Groups()
    by_key: dict[str, int] = {}
    prev = -1
    for _, value, start in iter_array_items(path, str(path)):
        if isinstance(value, LostStructure):
            return None
        offsets.append(start)
        try:
            key = keys(value)
        except Exception:
            key = ()  # the reader will reject this record on its own (or the fault boundary will)
        prev = _group_of(groups, by_key, key, prev)
        item_group.append(prev)
    offsets.append(path.stat().st_size)
    import numpy as np

    return np.frombuffer(offsets, dtype=np.int64), _roots(groups, item_group)


def _group_of(groups: _Groups, by_key: dict[str, int], key: ChunkKey, prev: int) -> int:
    """The group of a record with conversation keys ``key`` (``prev``: the record before it's)."""
    if key is None and prev >= 0:
        return prev
    g = groups.new()
    for k in key or ():
        other = by_key.get(k)
        if other is None:
            by_key[k] = g
        else:
            g = groups.union(g, other)
    return g


def chunk_without(
    path: Path, keys: KeyFunction, within: Chunk | None, failed_lines: list[int]
) -> tuple[Chunk | None, dict[int, int]]:
    """The lines of ``within`` (the whole file when None) minus the conversation groups of ``failed_lines``, as a
    chunk (None when no line is left), and for each failed line how many non-blank lines its group loses.

    Used by the fault boundary (:func:`msgtrain.ingest.core.base.read_events`) to read a file again without a group a
    reader failed on: whole groups are left out, exactly as a chunk leaves out the groups of other chunks.
    """
    import numpy as np  # lazily, as in line_groups

    bounds, root, nonblank = line_groups(path, keys)
    n = len(root)
    keep = np.zeros(n, dtype=bool)
    if within is None:
        keep[:] = True
    else:
        for _, end, first in within.runs:
            last = int(np.searchsorted(bounds, end, side="left"))  # lines first-1 .. last-1 lie in this run
            keep[first - 1 : last] = True
    counts: dict[int, int] = {}
    for line in failed_lines:
        group = root[line - 1]
        in_group = keep & (root == group)
        counts[line] = int(np.count_nonzero(in_group & nonblank))
        keep &= root != group
    if not np.any(keep & nonblank):
        return None, counts
    starts = np.flatnonzero(keep & ~np.concatenate(([False], keep[:-1])))
    ends = np.flatnonzero(keep & ~np.concatenate((keep[1:], [False]))) + 1
    runs = tuple((int(bounds[a]), int(bounds[b]), int(a) + 1) for a, b in zip(starts, ends, strict=True))
    return Chunk(0, 1, runs, sum(e - s for s, e, _ in runs)), counts


def plan_chunks(path: Path, keys: KeyFunction, target_bytes: int, items: bool = False) -> list[Chunk]:
    """Cut ``path`` into chunks of about ``target_bytes`` holding whole conversations (see the module docstring);
    ``items``: ``path`` is a top-level JSON array read item by item, cut into whole items (:func:`item_groups`).

    Returns ``[]`` when the file is not worth splitting (at most one chunk would come out), or when it starts with a
    byte-order mark: its text is read through a UTF-8 copy (:mod:`msgtrain.ingest.core.text_input`) whose byte
    offsets are not the file's, and an object's chunks are fetched by the file's byte ranges.
    """
    size = path.stat().st_size
    if target_bytes <= 0 or size <= target_bytes or file_encoding(path) is not None:
        return []
    import numpy as np  # lazily, as in line_groups

    if items:
        grouped = item_groups(path, keys)
        if grouped is None:
            return []
        bounds, root = grouped
    else:
        bounds, root, _ = line_groups(path, keys)
    if not len(root):
        return []
    parent_len = int(root.max()) + 1
    pos = int(bounds[-1] - bounds[0])
    group_bytes = np.bincount(root, weights=np.diff(bounds), minlength=parent_len).astype(np.int64)
    # A conversation goes to the chunk its first byte falls in, on an even grid of the file's bytes (conversations
    # laid end to end in first-line order): chunks end up near the target size unless one conversation is larger
    # (it is never cut).
    count = -(-pos // target_bytes)
    before = np.cumsum(group_bytes) - group_bytes
    chunk_of_group = np.minimum(count - 1, before * count // pos)
    line_chunk = chunk_of_group[root]
    used, line_chunk = np.unique(line_chunk, return_inverse=True)
    if len(used) <= 1:
        return []
    # Runs of consecutive lines in the same chunk become (start byte, end byte, first line number).
    starts = np.flatnonzero(np.diff(line_chunk, prepend=-1))
    ends = np.append(starts[1:], len(line_chunk))
    runs: list[list[tuple[int, int, int]]] = [[] for _ in used]
    sizes = [0] * len(used)
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        c = int(line_chunk[a])
        runs[c].append((int(bounds[a]), int(bounds[b]), a if items else a + 1))
        sizes[c] += int(bounds[b] - bounds[a])
    return [Chunk(k, len(used), tuple(r), sizes[k], items) for k, r in enumerate(runs)]
