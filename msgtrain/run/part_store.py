"""Where a run keeps its parts: a local directory (:class:`LocalParts`) or a prefix on an object store
(:class:`StoreParts`), behind one :class:`PartsStore` protocol. Which one is chosen once, where OUT is resolved
(:attr:`msgtrain.run.outputs.Output.parts`); planning, the executors' workers and assembly call the protocol and
never ask where the parts are. An implementation is a small value (a path or a URL) that a worker process or a Ray
task receives as it is.

A part is a folder (a prefix on a store) named by its key, holding ``samples.arrow`` (its canonical samples, an
Arrow IPC file), ``rejects.jsonl`` (in file order) and ``part.json`` (the job's meta, the part's counters and the
checksums of the other two files).

Invariants:
- Complete or absent. Locally a part is written into a temporary folder and published with one rename; a store has
  no rename, so ``part.json`` is uploaded last and its presence marks a complete part (a worker killed mid-upload
  leaves no marker; a retry overwrites its files).
- Checksums: no part whose files differ from the checksums in its ``part.json`` (a disk error, a hand edit, an
  object overwritten on the store) is ever assembled, and ``--resume`` recomputes it. A part this run wrote is not
  read back; a part a run finds is checked in :meth:`~PartsStore.reuse`, so it is recomputed in the same run:

  * :class:`LocalParts` reads and hashes its files (reading a local part costs no transfer);
  * :class:`StoreParts` never downloads a part to check it at reuse (that would download every reused part once
    more than assembly does): it compares the MD5s ``part.json`` records with those the store keeps of the
    objects (S3's ETag of an object written with one PUT, GCS ``md5Hash``, Azure ``Content-MD5``), as the listing
    that found the complete parts shows them (no request of its own; one metadata request per file where the
    listing shows another hash), and checks the files themselves only when the part moved (it is then copied
    anyway to rewrite its sources). Where the store keeps no MD5 (an S3 multipart or SSE-KMS upload, another store), the
    check is deferred: assembly checks every part it copies from the store (:meth:`~PartsStore.reading`,
    :meth:`~PartsStore.rejects`), and a part that does not match is removed and the run stops before anything is
    published (``corrupt_part``); the next ``--resume`` recomputes it.

  A part without checksums (an older msgtrain's) is not trusted.
- Relocation: a part reused for content that moved to another folder is rewritten to name where it is now
  (:func:`relocate`), exactly as converting it there would have written it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.ipc as ipc
import xxhash

from msgtrain.errors import OutputError
from msgtrain.export.schema import CANONICAL_SCHEMA, Sample, samples_to_table
from msgtrain.run.parts import PartStats, reusable
from msgtrain.run.storage import Store, join

SAMPLES_FILE = "samples.arrow"
PART_FILE = "part.json"
REJECTS_FILE = "rejects.jsonl"
CHECKED_FILES = (SAMPLES_FILE, REJECTS_FILE)
CHECKSUMS = "checksums"
# A store part's files' MD5s too: the hash S3 (an object written with one PUT), GCS and Azure keep of an object, so
# that reuse can compare them with the store's metadata without downloading the files.
STORE_CHECKSUMS = "md5"
PartData = tuple[dict[str, Any], pa.Table, str]  # a part's ``part.json``, samples and rejects (JSON lines)
ReadGroup = Callable[[Sequence[str]], list[PartData]]


class PartsStore(Protocol):
    """Where a run's parts are kept, one per key (see the module for the checksum contract)."""

    def reset(self, resume: bool) -> None:
        """Ready the parts for a run: a fresh run (not ``resume``) starts without any."""
        ...

    def complete(self) -> Callable[[str], bool]:
        """Whether a part (by key) is complete, as the parts are now."""
        ...

    def write(
        self, key: str, meta: dict[str, Any], samples: list[Sample], stats: PartStats, rejects: list[str]
    ) -> None:
        """Write part ``key``: complete or absent, whatever kills the writer."""
        ...

    def reuse(self, key: str, meta: dict[str, Any]) -> bool:
        """Make the complete part ``key`` fit for a job whose ``meta`` names where its content is now (its sources
        rewritten when the content moved); False when it cannot be reused (corrupt, unreadable): recompute it."""
        ...

    def reading(self) -> contextlib.AbstractContextManager[ReadGroup]:
        """Read the parts of one input file at a time (tables memory-mapped; a group's tables stay valid after the
        next group is read)."""
        ...

    def rejects(self, key: str) -> str:
        """The rejects of part ``key`` (JSON lines, in file order)."""
        ...

    def footprint(self) -> tuple[int, int]:
        """How many complete parts there are and the bytes all parts take (what an interrupted run leaves)."""
        ...


@dataclass(frozen=True)
class LocalParts:
    """Parts in a local (or mounted) directory."""

    root: Path

    def __str__(self) -> str:
        return str(self.root)

    def reset(self, resume: bool) -> None:
        if not resume:
            shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True, exist_ok=True)
        for stray in self.root.glob(".tmp-*"):  # left by killed writers
            shutil.rmtree(stray, ignore_errors=True)

    def complete(self) -> Callable[[str], bool]:
        return lambda key: is_complete(self.root / key)

    def write(
        self, key: str, meta: dict[str, Any], samples: list[Sample], stats: PartStats, rejects: list[str]
    ) -> None:
        write_part(self.root, key, meta, samples, stats, rejects)

    def reuse(self, key: str, meta: dict[str, Any]) -> bool:
        return _reuse_local(self.root, key, meta)

    @contextlib.contextmanager
    def reading(self) -> Iterator[ReadGroup]:
        yield lambda group: [read_part(self.root / key) for key in group]

    def rejects(self, key: str) -> str:
        return (self.root / key / REJECTS_FILE).read_text(encoding="utf-8")

    def footprint(self) -> tuple[int, int]:
        if not self.root.is_dir():
            return 0, 0
        parts = sum(1 for p in self.root.iterdir() if (p / PART_FILE).is_file())
        return parts, sum(f.stat().st_size for f in self.root.rglob("*") if f.is_file())

    def keep_only(self, keys: set[str]) -> None:
        """Remove every part but ``keys``."""
        for part in self.root.iterdir():
            if part.name not in keys:
                shutil.rmtree(part, ignore_errors=True)


class StoreParts:
    """Parts under a prefix of an object store, written and read through local copies."""

    def __init__(self, url: str) -> None:
        self.url = url
        # The content hashes of the parts' files as the last listing (:meth:`complete`) showed them: reuse compares
        # them with ``part.json`` at no further request. The driver's alone: a worker's copy starts without them.
        self.listed: dict[str, str | None] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "listed": {}}

    def __str__(self) -> str:
        return self.url

    def reset(self, resume: bool) -> None:
        if not resume:
            Store.of(self.url).remove(self.url)

    def complete(self) -> Callable[[str], bool]:
        # Which parts are complete is one listing, not a request per part: the keys whose part.json (written last)
        # is there.
        self.listed = Store.of(self.url).listed_hashes(self.url)
        marker = "/" + PART_FILE
        return {url[: -len(marker)].rpartition("/")[2] for url in self.listed if url.endswith(marker)}.__contains__

    def footprint(self) -> tuple[int, int]:
        files = Store.of(self.url).list_files(self.url)
        return sum(1 for url, _ in files if url.endswith("/" + PART_FILE)), sum(size for _, size in files)

    def write(
        self, key: str, meta: dict[str, Any], samples: list[Sample], stats: PartStats, rejects: list[str]
    ) -> None:
        with tempfile.TemporaryDirectory(prefix="msgtrain-part-") as tmp:
            part = write_part(Path(tmp), key, meta, samples, stats, rejects, md5=True)
            Store.of(self.url).upload_tree(part, join(self.url, key), last=(PART_FILE,))

    def reuse(self, key: str, meta: dict[str, Any]) -> bool:
        store = Store.of(self.url)
        try:
            recorded = json.loads(store.read_bytes(join(self.url, key, PART_FILE)))
        except (OSError, ValueError):
            return False
        if not isinstance(recorded, dict) or not reusable(recorded):
            return False
        if recorded.get("source") == meta["source"]:
            return self._unchanged(key, recorded)
        with tempfile.TemporaryDirectory(prefix="msgtrain-part-") as tmp:
            try:
                fetched = self.fetch(key, Path(tmp))
            except OSError:  # unreadable, or corrupt (and removed)
                return False
            if not _reuse_local(fetched.parent, key, meta, md5=True):
                return False
            store.upload_tree(fetched, join(self.url, key), last=(PART_FILE,))
        return True

    def _unchanged(self, key: str, recorded: dict[str, Any]) -> bool:
        """Whether part ``key``'s files still match ``recorded`` (its ``part.json``) as far as the store's own
        content hashes tell, without a download: a file whose MD5 differs makes the part corrupt (it is removed,
        to be recomputed); a missing file makes it incomplete. A store that keeps no MD5 of an object (an S3
        multipart or SSE-KMS upload, a store of another hash), or a part without MD5s, leaves the check to
        assembly."""
        md5s = recorded.get(STORE_CHECKSUMS)
        if not isinstance(md5s, dict):
            return True
        store = Store.of(self.url)
        for name in CHECKED_FILES:
            url, want = join(self.url, key, name), f"md5:{md5s.get(name)}"
            if self.listed.get(url) == want:
                continue  # as the listing showed it: no request
            try:  # not listed, or listed with another hash, which may not be an MD5 (a listing shows no encryption)
                known = store.metadata_hash(url)
            except OSError:
                return False
            if known is not None and known.startswith("md5:") and known != want:
                store.remove(join(self.url, key))
                return False
        return True

    @contextlib.contextmanager
    def reading(self) -> Iterator[ReadGroup]:
        with tempfile.TemporaryDirectory(prefix="msgtrain-assemble-") as scratch:
            cache = Path(scratch) / "parts"

            def read_group(group: Sequence[str]) -> list[PartData]:
                # The previous group's copies are no longer needed (tables already written keep their mapping).
                shutil.rmtree(cache, ignore_errors=True)
                return [read_part(self.fetch(key, cache)) for key in group]

            yield read_group

    def rejects(self, key: str) -> str:
        store = Store.of(self.url)
        recorded = store.read_bytes(join(self.url, key, PART_FILE))
        data = store.read_bytes(join(self.url, key, REJECTS_FILE))
        try:
            sums = json.loads(recorded).get(CHECKSUMS)
        except (ValueError, AttributeError):
            sums = None
        if not isinstance(sums, dict) or _bytes_hash(data) != sums.get(REJECTS_FILE):
            self._corrupt(key)
        return data.decode("utf-8")

    def fetch(self, key: str, dest: Path) -> Path:
        """Copy part ``key`` into ``dest/key`` (to memory-map it like a local part), checked against its checksums:
        a part that does not match is removed and the run stops (:class:`OutputError`)."""
        store = Store.of(self.url)
        for name in (PART_FILE, SAMPLES_FILE, REJECTS_FILE):
            store.download(join(self.url, key, name), dest / key / name)
        if not verify_part(dest / key):
            self._corrupt(key)
        return dest / key

    def _corrupt(self, key: str) -> None:
        Store.of(self.url).remove(join(self.url, key))
        raise OutputError(
            f"part {key} does not match its checksums (changed on the store since it was written); it was removed",
            where=join(self.url, key),
            hint="run the same command with --resume to recompute it",
            code="corrupt_part",
        )


# ------------------------------------------------------------------------------------------------- a part's files
def write_part(
    parts_dir: Path,
    key: str,
    meta: dict[str, Any],
    samples: list[Sample],
    stats: PartStats,
    rejects: list[str],
    md5: bool = False,
) -> Path:
    """Publish a part into the local directory ``parts_dir`` atomically (complete directory, then one rename); with
    ``md5``, ``part.json`` also holds its files' MD5s (:data:`STORE_CHECKSUMS`)."""
    table = samples_to_table(samples) if samples else CANONICAL_SCHEMA.empty_table()
    return _write_part_table(parts_dir, key, meta, table, stats, "".join(rejects), md5)


def _write_part_table(
    parts_dir: Path, key: str, meta: dict[str, Any], table: pa.Table, stats: PartStats, rejects: str, md5: bool
) -> Path:
    final = parts_dir / key
    tmp = parts_dir / f".tmp-{key}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    with pa.OSFile(str(tmp / SAMPLES_FILE), "wb") as sink, ipc.new_file(sink, CANONICAL_SCHEMA) as w:
        w.write_table(table)
    (tmp / REJECTS_FILE).write_text(rejects, encoding="utf-8")
    # The checksums let a later run tell a part it can reuse from one a disk or a hand changed (verify_part).
    sums = {name: _file_hash(tmp / name) for name in CHECKED_FILES}
    record = {**meta, "stats": stats.to_json(), CHECKSUMS: sums}
    if md5:
        record[STORE_CHECKSUMS] = {name: _file_hash(tmp / name, hashlib.md5) for name in CHECKED_FILES}
    (tmp / PART_FILE).write_text(json.dumps(record, sort_keys=True), encoding="utf-8")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def _file_hash(path: Path, new: Callable[[], Any] = xxhash.xxh3_128) -> str:
    """The checksum of a part's file: XXH3-128 (~20 GB/s; blake2b's 0.9 GB/s was 0.2 s of CPU over the Qwen3
    benchmark's 144 MB of parts). A checksum tells a part a disk or a hand changed, no adversary: a hash made for
    that. file_digest reads into one buffer it reuses (a new bytes object per block cost 10 % more CPU)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, new).hexdigest()


def _bytes_hash(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def verify_part(part: Path) -> bool:
    """True when the part's files hold exactly the bytes its worker wrote (their checksums in ``part.json``). A
    part without checksums (an older msgtrain's) is not trusted."""
    try:
        sums = json.loads((part / PART_FILE).read_text(encoding="utf-8")).get(CHECKSUMS)
        return isinstance(sums, dict) and all(_file_hash(part / name) == sums.get(name) for name in CHECKED_FILES)
    except (OSError, ValueError, AttributeError):
        return False


def relocate(table: pa.Table, rejects: str, old: str, new: str) -> tuple[pa.Table, str]:
    """A part's samples and rejects as if converted from ``new`` instead of ``old`` (the same bytes, moved): every
    ``source`` that names ``old`` names ``new``, and so does every mention of it in the rejects (file, location,
    message), as a conversion of ``new`` would have written them."""
    if old == new:
        return table, rejects
    sources = [new + s[len(old) :] if s.startswith(old) else s for s in table.column("source").to_pylist()]
    index = table.schema.get_field_index("source")
    table = table.set_column(index, table.schema.field(index), pa.array(sources, type=pa.string()))
    return table, rejects.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])


def _reuse_local(parts_dir: Path, key: str, meta: dict[str, Any], md5: bool = False) -> bool:
    """:meth:`PartsStore.reuse` of a part in the local directory ``parts_dir``: checked, then relocated."""
    part = parts_dir / key
    if not verify_part(part):
        return False
    recorded, table, rejects = read_part(part)
    if not reusable(recorded):
        return False
    if recorded.get("source") == meta["source"]:
        return True
    table, rejects = relocate(table, rejects, recorded["source"], meta["source"])
    stats = PartStats.from_json(recorded["stats"])
    _write_part_table(parts_dir, key, meta, table, stats, rejects, md5)
    return True


def read_part(part: Path) -> PartData:
    meta = json.loads((part / PART_FILE).read_text(encoding="utf-8"))
    with pa.memory_map(str(part / SAMPLES_FILE)) as src:
        table = ipc.open_file(src).read_all()
    return meta, table, (part / REJECTS_FILE).read_text(encoding="utf-8")


def is_complete(part: Path) -> bool:
    """True when ``part`` can be assembled: its metadata parses and its samples file is a whole Arrow file of the
    canonical schema (a truncated or corrupt part, e.g. from a full disk or a hand edit, is recomputed)."""
    try:
        meta = json.loads((part / PART_FILE).read_text(encoding="utf-8"))
        if not isinstance(meta, dict) or not isinstance(meta.get("stats"), dict) or "source" not in meta:
            return False
        PartStats.from_json(meta["stats"])
        if not (part / REJECTS_FILE).is_file():
            return False
        with pa.memory_map(str(part / SAMPLES_FILE)) as src:
            return bool(ipc.open_file(src).schema.equals(CANONICAL_SCHEMA))
    except (OSError, ValueError, TypeError, AttributeError, pa.ArrowException):
        return False
