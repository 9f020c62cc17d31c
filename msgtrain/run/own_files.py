"""Files msgtrain writes outside OUT (``convert --rejects``, ``inspect --html``, ``stats --plot``): it never
replaces one it did not write.

Invariants:
- A file msgtrain wrote has a marker beside it, ``.NAME.msgtrain``, holding the SHA-256 of the bytes it wrote.
  The file at the path is msgtrain's while its bytes still match the marker; a file the user edited, appended to
  or put there since is theirs.
- Anything else at the path (a user's file, a log of another day, a symlink to anything, even a dangling one) is
  refused before any work starts (:func:`check_own_file`) unless ``--overwrite``; a directory is refused always.
  A character device or a FIFO (``/dev/null``, a pipe to another program) holds no stored bytes to lose: it is
  written through, as named.
- A write replaces the path whole, never through it: the bytes go to a temporary file beside it, the marker is
  written, then one ``rename`` puts the file in place (a symlink at the path is replaced, its target untouched).
  A failed write leaves the previous file as it was.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from msgtrain.errors import OutputError
from msgtrain.run.publish import UnsafeOutputError

_MARK = "written_by"


def marker_path(path: Path) -> Path:
    """Where the marker of a file msgtrain writes at ``path`` lives."""
    return path.parent / f".{path.name}.msgtrain"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _is_stream(mode: int) -> bool:
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def is_own_file(path: Path) -> bool:
    """True when ``path`` is a regular file (not a link) whose bytes are the ones msgtrain last wrote there."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        mark = json.loads(marker_path(path).read_text(encoding="utf-8"))
        return isinstance(mark, dict) and mark.get(_MARK) == "msgtrain" and mark.get("sha256") == _digest(path)
    except (OSError, ValueError):
        return False


def check_own_file(path: Path, flag: str, *, overwrite: bool) -> None:
    """Refuse ``path`` as the target of ``flag`` when something msgtrain did not write is there (see the module
    docstring); ``overwrite`` allows a file or a link, never a directory."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise OutputError(f"cannot write {flag} {path}: {e.strerror or e}", where=str(path)) from e
    if stat.S_ISDIR(mode):
        raise UnsafeOutputError(f"{flag} {path} is a directory", hint=f"pass a file name to {flag}")
    if _is_stream(mode) or overwrite or is_own_file(path):
        return
    what = "a symlink" if stat.S_ISLNK(mode) else "a file" if stat.S_ISREG(mode) else "a special file"
    raise UnsafeOutputError(
        f"{flag} {path} is {what} msgtrain did not write; refusing to replace it",
        hint=f"choose a new file for {flag}, or pass --overwrite to replace it",
    )


@contextlib.contextmanager
def own_file(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write into; on a normal exit it replaces ``path`` (marker first,
    then one rename), on an exception it is removed and ``path`` is left alone."""
    try:
        stream = _is_stream(os.lstat(path).st_mode)
    except OSError:
        stream = False
    if stream:
        yield path
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.msgtrain-tmp-{os.getpid()}"
    try:
        yield tmp
        try:
            mark = {_MARK: "msgtrain", "sha256": _digest(tmp)}
            marker_path(path).write_text(json.dumps(mark) + "\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError as e:
            raise OutputError(f"cannot write {path}: {e.strerror or e}", where=str(path)) from e
    finally:
        tmp.unlink(missing_ok=True)
