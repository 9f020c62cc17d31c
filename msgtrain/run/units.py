"""Units of work: what an input's parts are keyed by (its content digest, its partners' included) and how a huge
JSON-lines log is cut into chunks of whole conversations.

Invariants:
- A plan depends only on the bytes, the reader and the chunk size: reruns give the same chunks.
- A digest covers every byte a reader reads for the input: the input's own, and those of the files a reader
  declares it joins the input with (its *partners*, absent ones included: :mod:`msgtrain.ingest.core.files`), named by
  their path relative to the input's folder (never the folder itself: a moved tree is reused).
- Planning a run reads each folder's listing, each file's head and each partner's digest once
  (:class:`PartnerView`), so a folder of N files that answer each other is planned in O(N) reads.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable, Hashable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from msgtrain.errors import MsgtrainError
from msgtrain.ingest.core.chunks import Chunk, KeyFunction, is_jsonl, key_function, plan_chunks
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.registry import declared_partners, get_reader
from msgtrain.run.storage import (
    Stamp,
    content_digest,
    folder_locations,
    head_of,
    input_stamp,
    location_digest,
    reader_location,
    store_of,
)

if TYPE_CHECKING:
    from msgtrain.run.parts import LinearizeSettings

T = TypeVar("T")


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


def stable_digest(f: Path | str, views: PartnerViews | None = None) -> tuple[InputDigest, Stamp | None]:
    """:func:`input_digest` of ``f`` taken while ``f`` did not change (its :func:`~msgtrain.run.storage.input_stamp`
    the same before and after hashing), with that stamp: a worker that finds the same stamp before and after reading
    read the bytes of the digest. Raises :class:`InputChangedError` when ``f`` changed during every try."""
    for _ in range(STABLE_TRIES):
        before = input_stamp(f)
        digest = input_digest(f, views)
        if before is None or input_stamp(f) == before:
            return digest, before
    raise InputChangedError(f"{f} changed while it was hashed, {STABLE_TRIES} times")


class InputChangedError(OSError):
    """An input kept changing while msgtrain read it."""


class InputDigest(NamedTuple):
    """What a part of an input is keyed by: ``content`` covers the input's bytes and its partners'; ``partners``
    the partners' alone (None when the input has none), the key of the indexes a run's workers share for them."""

    content: str
    partners: str | None


class PartnerView:
    """The files beside a run's inputs as readers' partner declarations see them
    (:class:`msgtrain.ingest.core.files.Beside`), on the local disk or on one store: each folder listed once, each
    file's head and each partner's digest read once, per run."""

    def __init__(self, scheme_of: str | None):
        self.scheme_of = scheme_of  # a URL of the store, or None for the local disk
        self._listings: dict[PurePosixPath, list[PurePosixPath]] = {}
        self._heads: dict[PurePosixPath, bytes] = {}
        self._digests: dict[PurePosixPath, str] = {}
        self._remembered: dict[Hashable, Any] = {}
        self._combined: dict[int, tuple[list[PurePosixPath], PurePosixPath, str]] = {}

    def listing(self, folder: PurePosixPath) -> list[PurePosixPath]:
        if folder not in self._listings:
            self._listings[folder] = folder_locations(self.scheme_of, folder)
        return self._listings[folder]

    def head(self, location: PurePosixPath) -> bytes:
        if location not in self._heads:
            self._heads[location] = head_of(self.scheme_of, location)
        return self._heads[location]

    def remember(self, key: Hashable, compute: Callable[[], T]) -> T:
        if key not in self._remembered:
            self._remembered[key] = compute()
        return self._remembered[key]

    def digest(self, location: PurePosixPath) -> str:
        """The content digest of a partner (``absent`` when its folder does not hold it)."""
        if location not in self._digests:
            folder = location.parent
            there = location in self.remember(("listed", folder), lambda: frozenset(self.listing(folder)))
            self._digests[location] = location_digest(self.scheme_of, location) if there else "absent"
        return self._digests[location]

    def known(self, location: PurePosixPath, digest: str) -> None:
        """``digest`` is the content digest of ``location`` (an input of the run, just hashed)."""
        self._digests[location] = digest

    def combined(self, folder: PurePosixPath, partners: list[PurePosixPath]) -> str:
        """One digest of ``partners`` as seen from ``folder``: each one's path relative to it, and its digest. The
        files of one folder share one list of partners (a reader declares its folder's list itself), so it is
        recognised by identity, not compared path by path for each file."""
        seen = self._combined.get(id(partners))
        if seen is not None and seen[0] is partners and seen[1] == folder:
            return seen[2]
        h = hashlib.blake2b(digest_size=16)
        for partner in partners:
            relative = posixpath.relpath(partner, folder) if partner.is_absolute() == folder.is_absolute() else ""
            h.update(f"{relative}\0{self.digest(partner)}\0".encode("utf-8", "surrogatepass"))
        self._combined[id(partners)] = (partners, folder, h.hexdigest())  # holds the list: its id stays its own
        return h.hexdigest()


class PartnerViews(dict[str | None, PartnerView]):
    """A run's :class:`PartnerView` for each place its inputs are (the disk, each store)."""

    def of(self, f: Path | str) -> PartnerView:
        place = store_of(f)
        if place not in self:
            self[place] = PartnerView(place)
        return self[place]


def input_digest(f: Path | str, views: PartnerViews | None = None) -> InputDigest:
    """The content digest a part of ``f`` is keyed by: ``f``'s bytes (a store hashes an object from its metadata; a
    folder log hashes its files), and, when a reader declares partners of ``f``
    (:func:`~msgtrain.ingest.registry.declared_partners`), theirs too, absent ones included: a sub-agent converted
    before its parent session arrived, a batch output after its input file changed, answers after their
    ``question.jsonl`` changed, are converted again (under ``--resume`` as in a clean run). Raises OSError when ``f``
    cannot be read."""
    own = content_digest(f)
    view = (views if views is not None else PartnerViews()).of(f)
    location = reader_location(f)
    view.known(location, own)  # an input that is another's partner is not read twice
    partners = declared_partners(location, view)
    if not partners:
        return InputDigest(own, None)
    combined = view.combined(location.parent, partners)
    return InputDigest(hashlib.blake2b(f"{own}\0{combined}".encode(), digest_size=16).hexdigest(), combined)
