"""Huge JSONL objects on a store, cut into chunks that workers read with range requests.

A local file above ``--chunk-mb`` is cut into chunks of whole conversations (:mod:`msgtrain.ingest.core.chunks`); an
object is cut the same way: one task (:func:`plan_object`) reads the object once and plans its chunks exactly as
the local planner plans the same bytes, and each chunk's worker then fetches only the byte ranges it needs
(:func:`masked_copy`) instead of the whole object.

Invariants:
- Same plan, same parts: the plan is :func:`msgtrain.run.units.plan_file` of the object's bytes, so the chunks
  (their runs, byte offsets and line numbers) and the part keys are those of the same file on disk, and the
  assembled output is the unsplit object's.
- The worker's local view of the object (:class:`ObjectView`) has the object's size, byte offsets and line
  numbers: the chunk's lines and the head (what format detection reads: :data:`~msgtrain.ingest.core.base.HEAD_BYTES`
  and at least the first two non-blank lines) are the object's bytes at their offsets; every other line is
  replaced by a blank line of the same length. Readers read only the chunk's lines; detection sees the real head;
  the fault boundary's re-plan (:func:`msgtrain.ingest.core.chunks.chunk_without`) finds every kept line at its line
  number, and blank lines carry no conversation key.
- Bytes fetched per chunk: its runs plus the head, in concurrent range requests; nothing else.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msgtrain.ingest.core.base import HEAD_BYTES, bounded_lines, line_size
from msgtrain.ingest.core.chunks import Chunk
from msgtrain.run.storage import Store


@dataclass(frozen=True)
class ObjectView:
    """What a chunk's worker needs besides the chunk to rebuild its local view of the object."""

    size: int
    head_end: int  # bytes [0, head_end) are copied: whole lines covering what detection reads
    lines: int  # lines in the object (a last line without a newline counts)


def _view_of(path: Path) -> ObjectView:
    head_end, nonblank, lines, pos = 0, 0, 0, 0
    with open(path, "rb") as f:
        for raw in bounded_lines(f):
            pos += line_size(raw)
            lines += 1
            if raw.strip():
                nonblank += 1
            if head_end == 0 and pos >= HEAD_BYTES and nonblank >= 2:
                head_end = pos
    return ObjectView(size=pos, head_end=head_end or pos, lines=lines)


def plan_object(url: str, settings: Any, chunk_bytes: int) -> tuple[list[Chunk], ObjectView | None]:
    """Chunks of an object (a task: one pass over a local copy), as :func:`plan_file` plans the same file; ``[]``
    when it stays one unit of work."""
    from msgtrain.run.units import plan_file

    with tempfile.TemporaryDirectory(prefix="msgtrain-plan-") as tmp:
        local = Path(tmp) / url.rpartition("/")[2]
        Store.of(url).download(url, local)
        chunks = plan_file(local, settings, chunk_bytes)
        if any(c.items for c in chunks):  # (an object's view is of lines: a JSON array's items stay one unit)
            return [], None
        return chunks, (_view_of(local) if chunks else None)


def masked_copy(url: str, chunk: Chunk, view: ObjectView, dest: Path) -> None:
    """Write ``dest``: the object's head and the chunk's lines at their offsets, every other line blank."""
    spans = sorted([(0, view.head_end, 1), *chunk.runs])
    merged: list[list[int]] = []  # [start, end, first line], overlapping or touching spans joined
    for start, end, first in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end, first])
    store = Store.of(url)
    path = store._path(url)
    blobs = store.fs.cat_ranges([path] * len(merged), [s for s, _, _ in merged], [e for _, e, _ in merged])
    with open(dest, "wb") as out:
        pos, line = 0, 1  # the next byte to write, and its line number
        for (start, end, first), blob in zip(merged, blobs, strict=True):
            if isinstance(blob, Exception):
                raise blob
            out.write(_blank_lines(start - pos, first - line))
            out.write(blob)
            assert len(blob) == end - start, (url, start, end, len(blob))
            pos, line = end, first + blob.count(b"\n")
        out.write(_blank_lines(view.size - pos, view.lines - line + 1, trailing=True))


def _blank_lines(size: int, count: int, trailing: bool = False) -> bytes:
    """``count`` blank lines in exactly ``size`` bytes (every line has at least its newline, so size >= count); at
    the end of the object, the last of them may lack its newline (the object's last line did)."""
    if size <= 0:
        return b""
    if trailing:  # only the byte count matters after the last kept line; keep the line count when it fits
        count = min(max(count, 1), size)
        return b" " * (size - count) + b"\n" * count
    assert size >= count >= 0, (size, count)
    return b" " * (size - count) + b"\n" * count
