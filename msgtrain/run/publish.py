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
- msgtrain touches only OUT's own names. The temporary names a publish makes beside OUT (``.OUT.link-PID``, and
  ``.OUT.old-PID`` in the fallback) are recorded in OUT's state (:data:`NAMES`, appended and synced *before* each is
  made), and :func:`clean_litter` removes exactly the recorded names, never a pattern: a sibling OUT named
  ``OUT.old-jan`` or ``OUT.link-3`` has hidden folders that a glob ``.OUT.old-*`` would match. Inside OUT's own
  versions directory, anything that is not the current or previous version is litter of a dead run (a live run
  would hold the lock).
- No output path (OUT, its hidden siblings, ``--rejects``) is an input, lies under an input folder, or lies inside
  a msgtrain dataset or another OUT's state or versions (:func:`check_output`): writing there would truncate a log,
  be read back as input on the next run, or be deleted by another dataset's publish.
"""

from __future__ import annotations

import contextlib
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
    return out.parent / f".{out.name}{STATE_SUFFIX}"


def versions_dir(out: Path) -> Path:
    return out.parent / f".{out.name}{VERSIONS_SUFFIX}"


NAMES = "publish-names.jsonl"  # in OUT's state: the temporary names beside OUT a publish made (see clean_litter)
STATE_SUFFIX = ".msgtrain-state"
VERSIONS_SUFFIX = ".msgtrain-versions"


def recorded_names(out: Path) -> list[Path]:
    """The temporary paths beside OUT that publishes recorded (made, or about to be made) and did not yet clean."""
    names: list[Path] = []
    try:
        lines = (state_dir(out) / NAMES).read_text(encoding="utf-8").splitlines()
    except OSError:
        return names
    for line in lines:
        try:
            name = json.loads(line).get("name")
        except (ValueError, AttributeError):
            continue  # a line cut by a crash: its name was never made (it is written and synced first)
        # Only a plain name beside OUT, and only one of the shapes publish makes: a hand-edited record cannot make
        # msgtrain delete anything else.
        if (
            isinstance(name, str)
            and "/" not in name
            and name.startswith(f".{out.name}.")
            and name
            not in (
                state_dir(out).name,
                versions_dir(out).name,
            )
        ):
            names.append(out.parent / name)
    return names


def _record_name(out: Path, path: Path) -> Path:
    """Append ``path`` (a name beside OUT) to OUT's record of temporary names, durably, before it is made."""
    state = state_dir(out)
    state.mkdir(parents=True, exist_ok=True)
    with open(state / NAMES, "a", encoding="utf-8") as f:
        f.write(json.dumps({"name": path.name}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return path


def hidden_siblings(out: Path) -> list[Path]:
    """Every path msgtrain keeps beside OUT (excluded from input discovery)."""
    return [state_dir(out), versions_dir(out), *recorded_names(out)]


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


def _dataset_holding(path: Path) -> Path | None:
    """The msgtrain dataset, or OUT's state or versions directory, that ``path`` (absolute, resolved) lies in."""
    for ancestor in path.parents:
        name = ancestor.name
        if name.startswith(".") and name.endswith((STATE_SUFFIX, VERSIONS_SUFFIX)):
            return ancestor
        if ancestor.is_dir() and is_msgtrain_output(ancestor):
            return ancestor
    return None


def _inputs_conflict(label: str, path: Path, inputs: list[tuple[Path, Path]]) -> None:
    """Refuse an output ``path`` (absolute) that is an input or lies under an input folder."""
    real = path.resolve()
    for given, inp in inputs:
        if real == inp or path == inp or inp in real.parents or inp in path.parents:
            raise UnsafeOutputError(
                f"{label} {path} is the input {given} or lies inside it: writing there would change the logs, and"
                " the next run would read it back as input",
                hint="write outputs outside the input folders, e.g. -o out/sft --rejects out/sft-rejects.jsonl",
            )


def check_output(out: Path, inputs: Iterable[Path], *, overwrite: bool, rejects: Path | None = None) -> None:
    """Refuse outputs that would destroy something msgtrain did not write, or that are, lie under, or hold an
    input, or lie inside another msgtrain dataset. ``rejects`` is ``--rejects`` (None: inside OUT)."""
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
    resolved_inputs = [(item, Path(os.path.abspath(item)).resolve()) for item in inputs]
    for item, inp in resolved_inputs:
        if inp == out_abs or out_abs in inp.parents or inp == out_abs.resolve():
            raise UnsafeOutputError(
                f"-o {out} is or contains the input {item}: publishing would delete the logs",
                hint="write the dataset outside the input folders, e.g. -o out/sft",
            )
    outputs = [("-o", out_abs), ("-o", state_dir(out_abs)), ("-o", versions_dir(out_abs))]
    if rejects is not None:
        rejects_abs = absolute(rejects)
        outputs.append(("--rejects", rejects_abs))
        own = (out_abs, state_dir(out_abs), versions_dir(out_abs))
        if any(rejects_abs == p or p in rejects_abs.parents or rejects_abs.resolve() == p.resolve() for p in own):
            raise UnsafeOutputError(
                f"--rejects {rejects} is OUT, lies inside it or in its hidden folders: the next publish replaces them",
                hint="pass a file beside OUT (the default, OUT/rejects.jsonl, is published with the dataset)",
            )
    for label, path in outputs:
        _inputs_conflict(label, path, resolved_inputs)
    for label, path in outputs:
        # OUT's own hidden folders lie beside OUT, not inside a dataset; --rejects inside OUT itself is refused too
        # (the next publish replaces OUT's version directory, and the file with it).
        holder = _dataset_holding(path.parent.resolve() / path.name)
        if holder is not None:
            raise UnsafeOutputError(
                f"{label} {path} lies inside the msgtrain output {holder}: its next publish would delete it",
                hint="write outputs outside every msgtrain dataset and its hidden .msgtrain-* folders",
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
    """Under OUT's lock: put back a dataset a killed fallback publish left aside, then remove what dead runs left
    (the recorded temporary names beside OUT, and unfinished or old versions inside OUT's versions directory)."""
    recorded = recorded_names(out)
    if not (out.exists() or out.is_symlink()):
        aside = [p for p in recorded if p.name.startswith(f".{out.name}.old-") and p.is_dir()]
        for old in sorted(aside, key=lambda p: p.stat().st_mtime, reverse=True):
            if is_msgtrain_output(old):
                os.replace(old, out)
                break
    for p in recorded:
        _rmtree(p)
    (state_dir(out) / NAMES).unlink(missing_ok=True)
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
        link = _record_name(out, out.parent / f".{out.name}.link-{os.getpid()}")
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
                old = _record_name(out, out.parent / f".{out.name}.old-{os.getpid()}")
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
        old = _record_name(out, out.parent / f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(final, out)
    _fsync_dir(out.parent)
    if old is not None:
        _rmtree(old)
    clean_litter(out)
