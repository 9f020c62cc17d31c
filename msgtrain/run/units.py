"""Units of work: what an input's parts are keyed by (its content digest, its partners' included) and how a huge
JSON-lines log is cut into chunks of whole conversations.

Invariants:
- A plan depends only on the bytes, the reader and the chunk size: reruns give the same chunks.
- A digest covers every byte a reader reads for the input: the input's own, and those of the files a reader
  declares it joins the input with (its *partners*, absent ones included: :mod:`msgtrain.ingest.core.files`), named by
  their path relative to the input's folder (never the folder itself: a moved tree is reused).
- Planning a run reads each folder's listing, each file's head and each partner's digest once
  (:class:`PartnerView`), so a folder of N files that answer each other is planned in O(N) reads.
- A local input's stamp (what a worker checks before and after reading it) covers its partners too: a partner
  rewritten between planning and the end of the reading is a ``changed_while_reading`` reject, as the input is.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import time
from collections.abc import Callable, Hashable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from msgtrain.errors import MsgtrainError
from msgtrain.ingest.core.base import record_limit
from msgtrain.ingest.core.chunks import Chunk, KeyFunction, is_jsonl, key_function, plan_chunks
from msgtrain.ingest.core.json_stream import read_item_by_item
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


def _key_function(path: Path, settings: LinearizeSettings, chunk_bytes: int) -> tuple[KeyFunction, bool] | None:
    """The reader's chunk keys for a file above ``chunk_bytes`` that can be cut, and whether it is cut into items:
    a JSONL log (cut at lines), or a top-level JSON array its reader reads item by item (cut at items, when the
    reader says so: ``chunk_items``); None when the file stays one unit of work.

    A file that cannot be looked at (no reader recognises it, unreadable) is left whole: its worker reports it.
    """
    try:
        if chunk_bytes <= 0 or path.is_dir() or path.stat().st_size <= chunk_bytes:
            return None
        items = False
        if not is_jsonl(path):
            if not read_item_by_item(path):
                return None
            items = True
        reader = get_reader(settings.input_format) if settings.input_format else detect_format(path)
        if items and not getattr(reader, "chunk_items", False):
            return None
        keys = key_function(reader, path)
        return (keys, items) if keys is not None else None
    except (MsgtrainError, OSError):
        return None


def chunkable(path: Path, settings: LinearizeSettings, chunk_bytes: int) -> bool:
    with record_limit(settings.max_record_bytes):  # (what is read item by item depends on it)
        return _key_function(path, settings, chunk_bytes) is not None


def plan_file(path: Path, settings: LinearizeSettings, chunk_bytes: int) -> list[Chunk]:
    """Chunks of a JSONL log (or a JSON array read item by item) above ``chunk_bytes`` whose reader can key its
    records; [] = one unit of work."""
    with record_limit(settings.max_record_bytes):  # items are read as the workers read them
        found = _key_function(path, settings, chunk_bytes)
        if found is None:
            return []
        keys, items = found
        try:
            return plan_chunks(path, keys, chunk_bytes, items)
        except (MsgtrainError, OSError):
            return []


STABLE_TRIES = 3  # hashes of an input that keeps changing while it is hashed before it is given up
# Seconds waited before each try after the first: a file written in place (rsync --inplace, a sync tool, an editor)
# is usually whole again a moment later, so a busy machine does not give it up after three back-to-back hashes.
STABLE_PAUSES = (0.0, 0.2, 1.0)


def stable_digest(f: Path | str, views: PartnerViews | None = None) -> tuple[InputDigest, Stamp | None]:
    """:func:`input_digest` of ``f`` taken while ``f`` did not change (its :func:`~msgtrain.run.storage.input_stamp`
    the same before and after hashing), with that stamp: a worker that finds the same stamp before and after reading
    read the bytes of the digest. Raises :class:`InputChangedError` when ``f`` changed during every try."""
    for pause in STABLE_PAUSES[:STABLE_TRIES]:
        time.sleep(pause)
        before = input_stamp(f)
        digest = input_digest(f, views, before)
        if before is None or input_stamp(f) == before:
            return digest, before + digest.stamps if before is not None else None
    raise InputChangedError(f"{f} changed while it was hashed, {STABLE_TRIES} times")


# A partner's entry in its input's stamp is named by this prefix and its location (no file name holds a NUL).
PARTNER = "\0partner\0"
StampEntry = tuple[str, int, int, int, int]


def partner_entry(location: PurePosixPath) -> StampEntry:
    """A local partner's part of its input's stamp (-1s when it is absent: its arrival is a change too)."""
    name = PARTNER + str(location)
    try:
        st = os.stat(location)
    except OSError:
        return (name, -1, -1, -1, -1)
    return (name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def reading_stamp(f: Path | str, planned: Stamp | None) -> Stamp | None:
    """``f``'s stamp now, with the partners ``planned`` (a stamp :func:`stable_digest` gave) names: equal to
    ``planned`` only when neither ``f`` nor any of those partners changed since."""
    own = input_stamp(f)
    if own is None:
        return None
    partners = [PurePosixPath(e[0][len(PARTNER) :]) for e in planned or () if e[0].startswith(PARTNER)]
    return own + tuple(partner_entry(p) for p in partners)


class InputChangedError(OSError):
    """An input kept changing while msgtrain read it."""


class InputDigest(NamedTuple):
    """What a part of an input is keyed by: ``content`` covers the input's bytes and its partners'; ``partners``
    the partners' alone (None when the input has none), the key of the indexes a run's workers share for them."""

    content: str
    partners: str | None
    # The local partners' stamp entries as they were when hashed (:func:`partner_entry`), in declaration order
    stamps: tuple[StampEntry, ...] = ()


class PartnerView:
    """The files beside a run's inputs as readers' partner declarations see them
    (:class:`msgtrain.ingest.core.files.Beside`), on the local disk or on one store: each folder listed once, each
    file's head and each partner's digest read once, per run."""

    def __init__(self, scheme_of: str | None):
        self.scheme_of = scheme_of  # a URL of the store, or None for the local disk
        self._listings: dict[PurePosixPath, list[PurePosixPath]] = {}
        self._heads: dict[PurePosixPath, bytes] = {}
        self._digests: dict[PurePosixPath, str] = {}
        self._stamps: dict[PurePosixPath, StampEntry] = {}
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
            if self.scheme_of is not None:
                self._digests[location] = location_digest(self.scheme_of, location) if there else "absent"
                return self._digests[location]
            # On the disk, hashed while it did not change (as an input is), with the stamp that says so.
            for pause in STABLE_PAUSES[:STABLE_TRIES]:
                time.sleep(pause)
                before = partner_entry(location)
                digest = location_digest(None, location) if there else "absent"
                if partner_entry(location) == before:
                    break
            self._digests[location], self._stamps[location] = digest, before
        return self._digests[location]

    def stamp(self, location: PurePosixPath) -> StampEntry | None:
        """A local partner's stamp entry as it was when :meth:`digest` hashed it (None on a store)."""
        return self._stamps.get(location)

    def known(self, location: PurePosixPath, digest: str, stamp: Stamp | None = None) -> None:
        """``digest`` is the content digest of ``location`` (an input of the run, just hashed, ``stamp`` its stamp
        then)."""
        self._digests[location] = digest
        if stamp is not None and len(stamp) == 1 and stamp[0][0] == "":
            self._stamps[location] = (PARTNER + str(location), *stamp[0][1:])

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


def input_digest(f: Path | str, views: PartnerViews | None = None, stamp: Stamp | None = None) -> InputDigest:
    """The content digest a part of ``f`` is keyed by: ``f``'s bytes (a store hashes an object from its metadata; a
    folder log hashes its files), and, when a reader declares partners of ``f``
    (:func:`~msgtrain.ingest.registry.declared_partners`), theirs too, absent ones included: a sub-agent converted
    before its parent session arrived, a batch output after its input file changed, answers after their
    ``question.jsonl`` changed, are converted again (under ``--resume`` as in a clean run). ``stamp``: ``f``'s stamp
    taken before hashing it. Raises OSError when ``f`` cannot be read."""
    own = content_digest(f)
    view = (views if views is not None else PartnerViews()).of(f)
    location = reader_location(f)
    view.known(location, own, stamp)  # an input that is another's partner is not read twice
    partners = declared_partners(location, view)
    if not partners:
        return InputDigest(own, None)
    combined = view.combined(location.parent, partners)
    stamps = tuple(e for e in map(view.stamp, partners) if e is not None)
    return InputDigest(hashlib.blake2b(f"{own}\0{combined}".encode(), digest_size=16).hexdigest(), combined, stamps)
