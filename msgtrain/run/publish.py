"""Where OUT's files live, what OUT may be, and how a finished dataset replaces the previous one.

Layout beside OUT (all hidden siblings, all written only under OUT's lock, :mod:`msgtrain.run.lock`)::

    OUT -> .OUT.msgtrain-versions/<version>        a symlink, swapped by one rename
    .OUT.msgtrain-versions/<version>/              published datasets (the current one and the one before it)
    .OUT.msgtrain-versions/.tmp-<version>/         the dataset being assembled
    .OUT.msgtrain-state/                           parts, manifest, lock

Invariants:
- OUT exists at every instant. A new dataset is assembled in a staging directory, renamed to a version
  directory, and OUT (a relative symlink) is repointed with one ``rename`` of a new symlink over it, which POSIX
  makes atomic: a reader resolves OUT to the previous version or to the new one, never to nothing or a partial
  one. The previous version is kept until the next publish, so a reader that resolved OUT just before the swap
  can finish reading it.
- Fallback (:data:`RENAME`): where symlinks cannot be made (some network or FAT file systems, Windows without the
  privilege) or ``MSGTRAIN_PUBLISH=rename`` asks for it, OUT is a plain directory replaced by two renames (old
  aside, new in). OUT is then missing between the two renames (microseconds); a run killed exactly there leaves
  the previous dataset as ``.OUT.old-PID``, which the next run puts back before doing anything else.
- msgtrain replaces only what it wrote: a directory holding its marker (:data:`MARKER`, or a ``report.json`` of
  an older msgtrain), an empty directory, or a symlink into its own versions directory. Anything else at OUT is
  refused (:class:`UnsafeOutputError`) unless ``overwrite``. OUT is never ``.``, ``/``, an input or a directory
  holding an input.
- Anything beside OUT that matches this layout and is not the current or previous version is litter of a dead
  run (a live run would hold the lock) and :func:`clean_litter` removes it.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from msgtrain.errors import ConfigError, OutputError

MARKER = ".msgtrain"
SYMLINK = "symlink"
RENAME = "rename"
PUBLISH_ENV = "MSGTRAIN_PUBLISH"


class UnsafeOutputError(ConfigError):
    """OUT names something msgtrain must not replace (a user's directory, an input, ``.``, ``/``)."""

    code = "unsafe_output"


def state_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.msgtrain-state"


def versions_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.msgtrain-versions"


def _siblings(out: Path, tag: str) -> list[Path]:
    return [Path(p) for p in glob.glob(str(out.parent / f".{glob.escape(out.name)}.{tag}-*"))]


def hidden_siblings(out: Path) -> list[Path]:
    """Every path msgtrain keeps beside OUT (excluded from input discovery)."""
    return [state_dir(out), versions_dir(out), *(p for t in ("tmp", "old", "link") for p in _siblings(out, t))]


def absolute(path: Path) -> Path:
    """``path`` made absolute with its parent's symlinks resolved but not its own last component (OUT itself
    is a symlink msgtrain manages: comparing through it would compare its target)."""
    path = Path(os.path.abspath(path))
    return path.parent.resolve() / path.name if path.name else path


def is_msgtrain_output(path: Path) -> bool:
    """True for a dataset directory msgtrain wrote (its marker, or the report.json of an older msgtrain)."""
    if (path / MARKER).is_file():
        return True
    try:
        report = json.loads((path / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and "msgtrain_version" in report


def write_marker(dataset: Path) -> None:
    (dataset / MARKER).write_text(json.dumps({"format": "msgtrain.dataset", "version": 1}) + "\n", encoding="utf-8")


def _own_link(out: Path) -> bool:
    """OUT is a symlink into its own versions directory."""
    try:
        target = Path(os.readlink(out))
    except OSError:
        return False
    return not target.is_absolute() and target.parent == Path(versions_dir(out).name)


def check_output(out: Path, inputs: Iterable[Path], *, overwrite: bool) -> None:
    """Refuse an OUT that would destroy something msgtrain did not write or that is one of the inputs."""
    out_abs = absolute(out)
    cwd = Path.cwd().resolve()
    if (
        out.name in ("", ".", "..")
        or out_abs == Path(out_abs.anchor)
        or out_abs == cwd
        or out_abs in cwd.parents
        or out_abs == Path.home().resolve()
    ):
        raise UnsafeOutputError(
            f"-o {out} is the root, the home, the current directory or one above it: msgtrain replaces OUT as a whole",
            hint="pass a new directory for the dataset, e.g. -o out/sft",
        )
    for item in inputs:
        inp = Path(os.path.abspath(item)).resolve()
        if inp == out_abs or out_abs in inp.parents or inp == out_abs.resolve():
            raise UnsafeOutputError(
                f"-o {out} is or contains the input {item}: publishing would delete the logs",
                hint="write the dataset outside the input folders, e.g. -o out/sft",
            )
    for ancestor in out_abs.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise OutputError(f"cannot create {out}: {ancestor} is a file", hint="choose another -o")
            break
    if overwrite or not (out.exists() or out.is_symlink()):
        return
    if out.is_symlink():
        if _own_link(out):
            return
        raise UnsafeOutputError(
            f"-o {out} is a symlink msgtrain did not make",
            hint="choose another -o, or pass --overwrite to replace the link (its target is left alone)",
        )
    if not out.is_dir():
        raise UnsafeOutputError(
            f"-o {out} is a file", hint="choose another -o, or pass --overwrite to replace it with the dataset"
        )
    if is_msgtrain_output(out) or not any(out.iterdir()):
        return
    raise UnsafeOutputError(
        f"-o {out} is a directory msgtrain did not write (no {MARKER} marker); refusing to replace it",
        hint="choose a new or empty directory, or pass --overwrite to replace it and delete its files",
    )


def previous_report(out: Path) -> dict[str, Any] | None:
    """The report.json of the dataset OUT shows now, if any."""
    try:
        data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _rmtree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def clean_litter(out: Path) -> None:
    """Under OUT's lock: put back a dataset a killed fallback publish left aside, then remove what dead runs left."""
    aside = sorted(_siblings(out, "old"), key=lambda p: p.stat().st_mtime if p.exists() else 0)
    if not (out.exists() or out.is_symlink()):
        for old in reversed(aside):
            if old.is_dir() and is_msgtrain_output(old):
                os.replace(old, out)
                break
    for tag in ("tmp", "old", "link"):
        for p in _siblings(out, tag):
            _rmtree(p)
    versions = versions_dir(out)
    if versions.is_dir():
        current = os.readlink(out) if _own_link(out) else None
        kept = [Path(current).name] if current else []
        finished = sorted((p for p in versions.iterdir() if not p.name.startswith(".")), reverse=True)
        # Keep the newest other version too: a reader may have resolved OUT to it just before the last swap.
        kept += [p.name for p in finished if p.name not in kept][:1]
        for p in versions.iterdir():
            if p.name not in kept:
                _rmtree(p)


def staging_dir(out: Path) -> Path:
    """A fresh directory to assemble the next dataset in (inside the versions directory, so publishing is a
    rename on one file system)."""
    version = f"{time.time_ns():020d}-{os.getpid()}"
    path = versions_dir(out) / f".tmp-{version}"
    path.mkdir(parents=True)
    return path


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def publish_mode() -> str:
    return RENAME if os.environ.get(PUBLISH_ENV, "").lower() == RENAME else SYMLINK


def publish(staged: Path, out: Path) -> str:
    """Make the dataset in ``staged`` (from :func:`staging_dir`) what OUT shows; return the mode used."""
    write_marker(staged)
    versions = versions_dir(out)
    final = versions / staged.name.removeprefix(".tmp-")
    os.replace(staged, final)
    if publish_mode() == SYMLINK:
        link = out.parent / f".{out.name}.link-{os.getpid()}"
        link.unlink(missing_ok=True)
        try:
            os.symlink(Path(versions.name) / final.name, link, target_is_directory=True)
        except (OSError, NotImplementedError):
            link = None  # type: ignore[assignment]
        if link is not None:
            old = None
            if out.is_dir() and not out.is_symlink():
                # A plain directory (an older msgtrain's OUT, or the fallback's) cannot be swapped for a link in
                # one rename: this once, move it aside first.
                old = out.parent / f".{out.name}.old-{os.getpid()}"
                os.replace(out, old)
            os.replace(link, out)
            _fsync_dir(out.parent)
            if old is not None:
                _rmtree(old)
            clean_litter(out)
            return SYMLINK
    _publish_by_rename(final, out)
    return RENAME


def _publish_by_rename(final: Path, out: Path) -> None:
    old = None
    if out.is_symlink() or out.is_file():
        out.unlink()
    elif out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.replace(out, old)
    os.replace(final, out)
    _fsync_dir(out.parent)
    if old is not None:
        _rmtree(old)
    clean_litter(out)
