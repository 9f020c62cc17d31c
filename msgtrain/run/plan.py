"""Plan a conversion: which inputs there are (local files and folders, objects under URLs) and how each is cut
into units of work (a huge JSON-lines log into chunks of whole conversations).

Invariants:
- Discovery is deterministic: sorted, hidden entries skipped, each real file once, OUT and its hidden siblings
  never inputs; what is passed over is listed with its reason.
- A plan depends only on the bytes, the reader and the chunk size: reruns give the same chunks.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from msgtrain.errors import ConfigError, MsgtrainError
from msgtrain.ingest.chunks import Chunk, KeyFunction, is_jsonl, key_function, plan_chunks
from msgtrain.ingest.detect import detect_format, looks_like_a_log
from msgtrain.ingest.registry import declared_siblings, directory_reader, get_reader
from msgtrain.run.storage import Store, file_digest, is_remote, location_of, unit_prefixes, url_of

if TYPE_CHECKING:
    from msgtrain.run.parts import LinearizeSettings

LOG_SUFFIXES = (".jsonl", ".json", ".yaml", ".yml", ".traj", ".ndjson", ".eval")


def discover_locations(
    inputs: list[str], exclude: Sequence[Path] = (), forced: bool = False
) -> tuple[list[Path | str], list[dict[str, str]]]:
    """:func:`discover_inputs`, and URLs: an object, or every object under a prefix (sorted; hidden names and
    names without a log suffix listed likewise). Returns (files and object URLs, ignored)."""
    files: list[Path | str] = []
    ignored: list[dict[str, str]] = []
    for item in inputs:
        if not is_remote(item):
            local, skipped = discover_inputs([item], exclude, forced)
            files += local
            ignored += skipped
            continue
        found = Store.of(item).list_files(item)
        if not found:
            raise ConfigError(f"input {item!r} names no object", hint="check the bucket and prefix")
        # A folder a directory reader takes as one log is one input, as locally; its objects are not inputs.
        units = unit_prefixes(item, [url for url, _ in found])
        hidden_seen: set[str] = set()
        inside = set(units)
        mine: list[str] = list(units)
        for url, _ in found:
            parents = url.split("/")
            if any("/".join(parents[:k]) in inside for k in range(len(parents) - 1, 3, -1)):
                continue
            rel = url[len(item.rstrip("/")) :].strip("/").split("/")
            hidden = next((k for k, part in enumerate(rel[:-1]) if part.startswith(".")), None)
            if hidden is not None:  # the hidden folder is listed once, as a local walk lists it
                folder = item.rstrip("/") + "/" + "/".join(rel[: hidden + 1])
                if folder not in hidden_seen:
                    hidden_seen.add(folder)
                    ignored.append({"path": folder, "reason": HIDDEN_DIRECTORY})
                continue
            name = url.rpartition("/")[2]
            suffix = "." + name.rpartition(".")[2].lower() if "." in name else ""
            if suffix in LOG_SUFFIXES or url == item.rstrip("/"):
                mine.append(url)
            else:
                ignored.append({"path": url, "reason": NOT_A_LOG})
        files += sorted(mine)
    return files, ignored


NOT_A_LOG = "not a log file suffix"
HIDDEN_DIRECTORY = "hidden directory, not searched"


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def discover_inputs(
    inputs: Sequence[str | Path], exclude: Sequence[Path] = (), forced: bool = False
) -> tuple[list[Path], list[dict[str, str]]]:
    """Expand files and directories: recursive, sorted, hidden directories listed and not searched (hidden files are
    files like any other), each real file once (overlapping
    inputs such as ``logs`` and ``logs/sub`` name it once), symlinked directories followed once.

    A directory that a reader takes as one log (:func:`~msgtrain.ingest.base.directory_reader`, e.g. an OpenHands
    V1 conversation folder) is one input, handed over whole; the files inside it are not inputs of their own.

    A file without a log suffix is an input when it holds JSON a reader recognises
    (:func:`~msgtrain.ingest.detect.looks_like_a_log`: a Letta ``.af`` agent file, JSON lines in a ``.log``).

    Returns (inputs, ignored): ``ignored`` lists what was passed over, each with its reason (no log suffix and no
    recognised JSON, unreadable directory, dangling link, symlink loop). Paths under ``exclude`` (OUT and its
    hidden siblings) are never inputs. With ``forced`` (a reader forced by ``--input-format`` or ``--map``), a
    file named as an input is read whatever its suffix; files found by walking a directory still need a log suffix
    or recognised JSON.
    """
    files: list[Path] = []
    ignored: list[dict[str, str]] = []
    seen_files: set[str] = set()
    skip = {os.path.realpath(p) for p in exclude}

    def add_file(f: Path, found: list[Path], unit: bool = False) -> None:
        real = os.path.realpath(f)
        if real in seen_files or real in skip:
            return
        seen_files.add(real)
        if unit or f.suffix.lower() in LOG_SUFFIXES or looks_like_a_log(f):
            found.append(f)
        else:
            ignored.append({"path": str(f), "reason": NOT_A_LOG})

    def walk(directory: Path, active: tuple[str, ...], found: list[Path]) -> None:
        try:
            if directory_reader(directory) is not None:
                add_file(directory, found, unit=True)
                return
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as e:
            ignored.append({"path": str(directory), "reason": f"unreadable directory: {e.strerror or e}"})
            return
        for entry in entries:
            path = Path(entry.path)
            real = os.path.realpath(path)
            if real in skip:
                continue
            if entry.name.startswith(".") and _is_dir(entry):
                # .git, .venv, caches: listed, not searched; a hidden *file* is a file like any other (aider's
                # .aider.chat.history.md is listed below, a hidden .jsonl log is read).
                ignored.append({"path": str(path), "reason": HIDDEN_DIRECTORY})
                continue
            try:
                is_dir, is_file = entry.is_dir(), entry.is_file()
            except OSError as e:
                loop = e.errno == errno.ELOOP
                ignored.append({"path": str(path), "reason": "symlink loop" if loop else f"unreadable: {e.strerror}"})
                continue
            if entry.is_symlink() and not os.path.exists(path):
                reason = "symlink loop" if _is_link_loop(path) else "dangling symlink"
                ignored.append({"path": str(path), "reason": reason})
            elif is_dir:
                if real in active:  # a link back to a directory being walked
                    ignored.append({"path": str(path), "reason": "symlink loop"})
                else:
                    walk(path, (*active, real), found)
            elif is_file:
                add_file(path, found)
            else:
                ignored.append({"path": str(path), "reason": "not a regular file"})

    for item in inputs:
        p = Path(item)
        if os.path.realpath(p) in skip:
            continue
        if p.is_dir():
            found: list[Path] = []
            walk(p, (os.path.realpath(p),), found)
            files.extend(sorted(found))
        elif p.is_file():
            add_file(p, files, unit=forced)
        else:
            raise MsgtrainError(
                f"input {str(item)!r} does not exist", hint="pass log files or directories", code="missing_input"
            )
    return files, ignored


def _is_link_loop(path: Path) -> bool:
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python < 3.13 reports a loop as RuntimeError
        return True
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


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


def _object_chunkable(url: str, chunk_bytes: int) -> bool:
    """An object worth planning (:mod:`msgtrain.run.object_chunks`): a JSON-lines name, above ``chunk_bytes``.
    Whether its reader can cut it is decided by the plan, as for a local file."""
    name = url.rpartition("/")[2].lower()
    if chunk_bytes <= 0 or not name.endswith((".jsonl", ".ndjson")):
        return False
    return Store.of(url).size(url) > chunk_bytes


def _chunkable(path: Path, settings: LinearizeSettings, chunk_bytes: int) -> bool:
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


def input_digest(f: Path | str) -> str:
    """The content digest a part of ``f`` is keyed by: ``f``'s bytes (a store hashes an object from its metadata; a
    folder log hashes its files), and, when a reader declares files it consults beside ``f``
    (:func:`~msgtrain.ingest.registry.declared_siblings`), theirs too, absent ones included: a sub-agent converted
    before its parent session arrived is converted again once it has (under ``--resume`` as in a clean run).
    Raises OSError when ``f`` cannot be read."""
    own = Store.of(f).content_hash(f) if isinstance(f, str) else file_digest(f)
    siblings = declared_siblings(location_of(f) if isinstance(f, str) else PurePosixPath(f.as_posix()))
    if not siblings:
        return own
    h = hashlib.blake2b(own.encode(), digest_size=16)
    for sibling in siblings:
        h.update(f"\0{sibling.name}\0{_sibling_digest(f, sibling)}".encode())
    return h.hexdigest()


def _sibling_digest(f: Path | str, sibling: PurePosixPath) -> str:
    """A sibling's content digest, or ``absent`` (missing or unreadable: the reader cannot consult it either)."""
    try:
        if isinstance(f, str):
            url = url_of(f, sibling)
            store = Store.of(url)
            return store.content_hash(url) if store.exists(url) else "absent"
        local = Path(sibling)
        return file_digest(local) if local.is_file() else "absent"
    except OSError:
        return "absent"
