"""Where a run's parts are kept, and how a part is written, checked, reused and read.

A part is a folder (a prefix on a store) named by its key, holding ``samples.arrow`` (its canonical samples, an
Arrow IPC file), ``rejects.jsonl`` (in file order) and ``part.json`` (the job's meta, the part's counters and the
checksums of the other two files).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from msgtrain.errors import OutputError
from msgtrain.export.schema import CANONICAL_SCHEMA, Sample, samples_to_table
from msgtrain.run.parts import PartStats
from msgtrain.run.storage import Store, child, join, read_location

SAMPLES_FILE = "samples.arrow"
PART_FILE = "part.json"
REJECTS_FILE = "rejects.jsonl"
CHECKED_FILES = (SAMPLES_FILE, REJECTS_FILE)
CHECKSUMS = "checksums"
ReadGroup = Callable[[list[str]], list[tuple[dict[str, Any], pa.Table, str]]]


def write_part(
    parts_dir: Path, key: str, meta: dict[str, Any], samples: list[Sample], stats: PartStats, rejects: list[str]
) -> Path:
    """Publish a part atomically (complete directory, then one rename)."""
    table = samples_to_table(samples) if samples else CANONICAL_SCHEMA.empty_table()
    return _write_part_table(parts_dir, key, meta, table, stats, "".join(rejects))


def _write_part_table(
    parts_dir: Path, key: str, meta: dict[str, Any], table: pa.Table, stats: PartStats, rejects: str
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
    (tmp / PART_FILE).write_text(json.dumps(record, sort_keys=True), encoding="utf-8")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def _file_hash(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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


def reuse_part(parts: Path | str, key: str, meta: dict[str, Any]) -> bool:
    """Make the finished part ``key`` fit for reuse by a job whose ``meta`` names where its content is now: checked
    against its checksums (False: corrupt, recompute it), and its sources rewritten when the content moved (a
    renamed, rotated or moved log). On a store only ``part.json`` is read unless the part moved; its files are
    checked when assembly fetches them (:func:`fetch_part`)."""
    if isinstance(parts, str):
        store = Store.of(parts)
        try:
            recorded = json.loads(store.read_bytes(join(parts, key, PART_FILE)))
        except (OSError, ValueError):
            return False
        if recorded.get("source") == meta["source"]:
            return True
        with tempfile.TemporaryDirectory(prefix="msgtrain-part-") as tmp:
            try:
                local = fetch_part(parts, key, Path(tmp) / "fetched")
            except OSError:
                return False
            if not _relocate_local(local.parent, key, meta):
                return False
            moved = Path(tmp) / "fetched" / key
            store.upload_tree(moved, join(parts, key), last=(PART_FILE,))
        return True
    return _relocate_local(parts, key, meta)


def _relocate_local(parts_dir: Path, key: str, meta: dict[str, Any]) -> bool:
    part = parts_dir / key
    if not verify_part(part):
        return False
    recorded, table, rejects = read_part(part)
    if recorded.get("source") == meta["source"]:
        return True
    table, rejects = relocate(table, rejects, recorded["source"], meta["source"])
    stats = PartStats.from_json(recorded["stats"])
    _write_part_table(parts_dir, key, meta, table, stats, rejects)
    return True


def write_part_to(
    parts: Path | str, key: str, meta: dict[str, Any], samples: list[Sample], stats: PartStats, rejects: list[str]
) -> None:
    """:func:`write_part` into a local directory, or onto a store: the same files, ``part.json`` uploaded last so
    its presence marks a complete part (a store has no rename; a worker killed mid-upload leaves no marker)."""
    if not isinstance(parts, str):
        write_part(parts, key, meta, samples, stats, rejects)
        return
    with tempfile.TemporaryDirectory(prefix="msgtrain-part-") as tmp:
        part = write_part(Path(tmp), key, meta, samples, stats, rejects)
        Store.of(parts).upload_tree(part, join(parts, key), last=(PART_FILE,))


def fetch_part(parts: str, key: str, dest: Path) -> Path:
    """Copy a part from a store into ``dest/key`` (to memory-map it like a local part), checked against its
    checksums: a part changed on the store is removed (the next ``--resume`` recomputes it) and the run stops."""
    store = Store.of(parts)
    for name in (PART_FILE, SAMPLES_FILE, REJECTS_FILE):
        store.download(join(parts, key, name), dest / key / name)
    if not verify_part(dest / key):
        store.remove(join(parts, key))
        raise OutputError(
            f"part {key} does not match its checksums (changed on the store since it was written); it was removed",
            where=join(parts, key),
            hint="run the same command with --resume to recompute it",
            code="corrupt_part",
        )
    return dest / key


def read_part(part: Path) -> tuple[dict[str, Any], pa.Table, str]:
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


# ------------------------------------------------------------------------------------------------ reading parts
@contextlib.contextmanager
def group_reader(parts: Path | str) -> Iterator[ReadGroup]:
    """Reads a group's parts from a local directory, or from a store through a scratch copy (one group at a time:
    the previous group's copies are dropped; tables already handed out keep their memory map)."""
    if isinstance(parts, Path):
        yield lambda group: [read_part(parts / key) for key in group]
        return
    with tempfile.TemporaryDirectory(prefix="msgtrain-assemble-") as scratch:
        cache = Path(scratch) / "parts"

        def read_group(group: list[str]) -> list[tuple[dict[str, Any], pa.Table, str]]:
            # The previous group's copies are no longer needed (tables already written keep their mapping).
            shutil.rmtree(cache, ignore_errors=True)
            return [read_part(fetch_part(parts, key, cache)) for key in group]

        yield read_group


def read_rejects(parts: Path | str, key: str) -> str:
    return read_location(child(parts, f"{key}/{REJECTS_FILE}")).decode("utf-8")
