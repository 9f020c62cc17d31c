"""The storage interface as readers see it: where an input is (its *location*) and the files beside it.

A reader opens its input at the local path it is handed, and any other file only through :func:`input_files`:
``open_sibling(path, location)`` for a file it consults beside its input (a Claude Code sub-agent's parent session,
which names the sub-agent's type), ``sibling_copy(path, location)`` for one it reads as a local file (a batch
input file of hundreds of MiB, streamed line by line), and ``folder(path)`` for the files of the input's own
folder (a batch output finds its input file among them). A reader *declares* those files with an optional method
``siblings(location) -> list[PurePosixPath]`` (locations computed from the input's own location alone, never by
listing), so that the run stage can fold their bytes into the part's key (:func:`msgtrain.run.units.input_digest`):
a part converted before its sibling arrived, or when the sibling changed, is converted again under ``--resume``.

Invariants:
- A location is a :class:`~pathlib.PurePosixPath`: a local file's path as given, or an object's ``/bucket/key``
  (its URL without the scheme). Siblings are computed on locations, so a local run and an object-store run of the
  same tree consult the same files and give the same rows.
- Outside a run (validate, inspect, the Python API) the active files are the local disk.
- This module imports no other ingest module: every reader may use it.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol


class InputFiles(Protocol):
    """Where a reader's input is, and how a file beside it is opened (local disk, or an object store)."""

    def location(self, path: Path) -> PurePosixPath:
        """The location of the input a reader was handed at ``path`` (a local copy's original, for an object)."""
        ...

    def open_sibling(self, path: Path, sibling: PurePosixPath) -> BinaryIO | None:
        """``sibling`` (a location beside the input at ``path``) opened for reading, or None when there is none."""
        ...

    def sibling_copy(self, path: Path, sibling: PurePosixPath) -> AbstractContextManager[Path | None]:
        """``sibling`` as a local file while the context is open (the file itself on the disk, a temporary copy of
        an object), or None when there is none."""
        ...

    def folder(self, path: Path) -> list[PurePosixPath]:
        """The locations of the files directly in the folder of the input at ``path`` (the input's own included),
        sorted: one listing, not a walk."""
        ...


class LocalFiles:
    """The local disk: a location is the path itself."""

    def location(self, path: Path) -> PurePosixPath:
        return PurePosixPath(path.as_posix())

    def open_sibling(self, path: Path, sibling: PurePosixPath) -> BinaryIO | None:
        local = Path(sibling)
        try:
            return open(local, "rb") if local.is_file() else None
        except OSError:  # unreadable: as if absent (the part key says so too: msgtrain.run.units)
            return None

    def sibling_copy(self, path: Path, sibling: PurePosixPath) -> AbstractContextManager[Path | None]:
        local = Path(sibling)
        return nullcontext(local if local.is_file() else None)

    def folder(self, path: Path) -> list[PurePosixPath]:
        parent = Path(self.location(path)).parent
        try:
            return sorted(PurePosixPath(p.as_posix()) for p in parent.iterdir() if p.is_file())
        except OSError:  # an unlistable folder: only the input itself is known to be there
            return [self.location(path)]


class BytesSibling(io.BytesIO):
    """A sibling read whole (from an object store): a binary file object like a local one."""


_FILES: ContextVar[InputFiles | None] = ContextVar("msgtrain_input_files", default=None)
_LOCAL = LocalFiles()


def input_files() -> InputFiles:
    """The files readers reach their inputs' siblings through (the local disk unless a run says otherwise)."""
    return _FILES.get() or _LOCAL


@contextmanager
def reading_through(files: InputFiles) -> Iterator[None]:
    """While active, readers open siblings through ``files`` (the run stage's object-store view of an input)."""
    token = _FILES.set(files)
    try:
        yield
    finally:
        _FILES.reset(token)
