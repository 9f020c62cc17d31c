"""Units of work: what an input's parts are keyed by (its content digest, siblings included) and how a huge
JSON-lines log is cut into chunks of whole conversations.

Invariants:
- A plan depends only on the bytes, the reader and the chunk size: reruns give the same chunks.
- A digest covers every byte a reader reads for the input: the input's own, and those of the files beside it that
  its reader declares it consults (absent ones included).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from msgtrain.errors import MsgtrainError
from msgtrain.ingest.chunks import Chunk, KeyFunction, is_jsonl, key_function, plan_chunks
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.registry import declared_siblings, get_reader
from msgtrain.run.storage import Stamp, content_digest, input_stamp, reader_location, sibling_digest

if TYPE_CHECKING:
    from msgtrain.run.parts import LinearizeSettings


def _key_function(path: Path, settings: LinearizeSettings, chunk_bytes: int) -> KeyFunction | None:
    """The reader's chunk keys for a JSONL log above ``chunk_bytes``; None when the file stays one unit of work.

    A file that cannot be looked at (no reader recognises it, unreadable) is left whole: its worker reports it.
    """
    try:
        if chunk_bytes <= 0 or path.is_dir() or path.stat().st_size <= chunk_bytes or not is_jsonl(path):
            return None
        reader = get_reader(settings.input_format) if settings.input_format else detect_format(path)
        return key_function(reader, path)
    except (MsgtrainError, OSError):
        return None


def chunkable(path: Path, settings: LinearizeSettings, chunk_bytes: int) -> bool:
    return _key_function(path, settings, chunk_bytes) is not None


def plan_file(path: Path, settings: LinearizeSettings, chunk_bytes: int) -> list[Chunk]:
    """Chunks of a JSONL log above ``chunk_bytes`` whose reader can key its records; [] = one unit of work."""
    keys = _key_function(path, settings, chunk_bytes)
    if keys is None:
        return []
    try:
        return plan_chunks(path, keys, chunk_bytes)
    except (MsgtrainError, OSError):
        return []


STABLE_TRIES = 3  # hashes of an input that keeps changing while it is hashed before it is given up


def stable_digest(f: Path | str) -> tuple[str, Stamp | None]:
    """:func:`input_digest` of ``f`` taken while ``f`` did not change (its :func:`~msgtrain.run.storage.input_stamp`
    the same before and after hashing), with that stamp: a worker that finds the same stamp before and after reading
    read the bytes of the digest. Raises :class:`InputChangedError` when ``f`` changed during every try."""
    for _ in range(STABLE_TRIES):
        before = input_stamp(f)
        digest = input_digest(f)
        if before is None or input_stamp(f) == before:
            return digest, before
    raise InputChangedError(f"{f} changed while it was hashed, {STABLE_TRIES} times")


class InputChangedError(OSError):
    """An input kept changing while msgtrain read it."""


def input_digest(f: Path | str) -> str:
    """The content digest a part of ``f`` is keyed by: ``f``'s bytes (a store hashes an object from its metadata; a
    folder log hashes its files), and, when a reader declares files it consults beside ``f``
    (:func:`~msgtrain.ingest.registry.declared_siblings`), theirs too, absent ones included: a sub-agent converted
    before its parent session arrived is converted again once it has (under ``--resume`` as in a clean run).
    Raises OSError when ``f`` cannot be read."""
    own = content_digest(f)
    siblings = declared_siblings(reader_location(f))
    if not siblings:
        return own
    h = hashlib.blake2b(own.encode(), digest_size=16)
    for sibling in siblings:
        h.update(f"\0{sibling.name}\0{sibling_digest(f, sibling)}".encode())
    return h.hexdigest()
