"""One run at a time per OUT: an exclusive lock on OUT's state directory.

Invariants:
- Everything a run changes beside OUT (parts, manifest, the staging and version directories, OUT itself) is
  changed only while the lock is held, so anything found there that no live run holds is litter of a dead run
  and may be removed by the next one.
- The lock file names its holder (``pid`` and host); a second run fails with :class:`LockedError` naming that PID.
- A dead holder never blocks: with ``fcntl.flock`` (POSIX) the kernel drops the lock when the holder dies, even by
  SIGKILL; where ``fcntl`` is missing, a lock file whose PID no longer runs on this host is taken over.
- The lock is on the state directory itself (``flock`` on a descriptor of the directory, held open), so it holds
  even when the lock file is deleted by hand; the lock file, locked too (what older versions lock), only names the
  holder. Where a file system refuses ``flock`` on a directory, the lock file alone is locked.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from msgtrain.errors import MsgtrainError

LOCK_FILE = "lock"

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class LockedError(MsgtrainError):
    """Another live run holds OUT's lock."""

    code = "locked"


def _holder(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _locked_error(path: Path) -> LockedError:
    holder = _holder(path)
    pid = holder.get("pid", "unknown")
    host = holder.get("host")
    where = f" on {host}" if host and host != socket.gethostname() else ""
    return LockedError(
        f"another msgtrain run (PID {pid}{where}) is writing this output",
        where=str(path.parent),
        hint=f"wait for PID {pid} to finish, or stop it; a lock of a dead run is taken over automatically",
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def _write_holder(f: IO[str]) -> None:
    f.seek(0)
    f.truncate()
    f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}) + "\n")
    f.flush()


@contextlib.contextmanager
def exclusive_lock(state: Path) -> Iterator[None]:
    """Hold OUT's lock (``STATE/lock``) for the ``with`` body; raise :class:`LockedError` if a live run holds it."""
    state.mkdir(parents=True, exist_ok=True)
    path = state / LOCK_FILE
    if fcntl is None:  # pragma: no cover - Windows: a PID file, taken over when its PID is gone
        yield from _pid_file_lock(path)
        return
    with _directory_lock(state, path):
        yield from _file_lock(path)


BUSY = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)


@contextlib.contextmanager
def _directory_lock(state: Path, path: Path) -> Iterator[None]:
    """``flock`` the directory ``state`` for the ``with`` body (nothing where the file system refuses it)."""
    assert fcntl is not None
    try:
        fd = os.open(state, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))  # not inherited by workers (PEP 446)
    except OSError:
        fd = None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in BUSY:
                    raise _locked_error(path) from None
                # ENOLCK, EINVAL, EBADF: no flock on directories here (some network file systems): the file lock
                # alone stays.
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing the last descriptor releases the lock


def _file_lock(path: Path) -> Iterator[None]:
    assert fcntl is not None
    f = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the lock's lifetime
    try:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in BUSY:
                raise _locked_error(path) from None
            raise
        _write_holder(f)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                f.seek(0)
                f.truncate()
                f.flush()
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    finally:
        f.close()


def _pid_file_lock(path: Path) -> Iterator[None]:  # pragma: no cover - exercised where fcntl is missing
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            holder = _holder(path)
            pid = holder.get("pid")
            same_host = holder.get("host") in (None, socket.gethostname())
            if isinstance(pid, int) and same_host and not _pid_alive(pid):
                path.unlink(missing_ok=True)  # stale: its run is dead
                continue
            raise _locked_error(path) from None
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            _write_holder(f)
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
        return
    raise _locked_error(path)
