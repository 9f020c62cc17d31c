"""The storage interface as readers see it: where an input is (its *location*) and the files beside it.

A reader opens its input at the local path it is handed, and any other file only through :func:`input_files`:
``open_sibling(path, location)`` for a file it consults beside its input (a Claude Code sub-agent's parent session,
which names the sub-agent's type), ``sibling_copy(path, location)`` for one it reads as a local file (a
``question.jsonl`` beside MT-bench answers), ``kept_copy`` for one it reads again by offset for as long as the run
lasts (a batch input file of hundreds of MiB), ``listing(folder)`` and ``head(location)`` to find which files of a
folder it joins, and ``shared_index(path, name, build)`` for an index of those files built once per folder and run
and shared by every worker (:class:`SharedIndex`).

The reader protocol's rule for files that answer each other: a reader that consults any file other than its input
*declares* it, with an optional method ``partners(location, beside) -> list[PurePosixPath]`` (:class:`Beside`: the
folder listings and the files' first bytes, each read once per run, never a whole file). The run stage folds the
declared files' content digests into the part's key (:func:`msgtrain.run.units.input_digest`), absent ones
included, so changing either side of a join (a corrected batch input file, an edited ``question.jsonl``, a parent
session that arrives the next night) converts again under ``--resume`` exactly the parts that used it, and an
unrelated change converts none.

Invariants:
- A location is a :class:`~pathlib.PurePosixPath`: a local file's path as given, or an object's ``/bucket/key``
  (its URL without the scheme). Partners are computed on locations, listings and heads, so a local run and an
  object-store run of the same tree declare the same files and give the same rows.
- Outside a run (validate, inspect, the Python API) the active files are the local disk, and a shared index is
  built for the read that asks for it.
- This module imports no other ingest module: every reader may use it.
"""

from __future__ import annotations

import atexit
import hashlib
import io
import os
import shutil
import tempfile
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol, TypeVar

from msgtrain.ingest.core.text_input import open_input

T = TypeVar("T")
HEAD_BYTES = 64 * 1024  # what :meth:`Beside.head` gives: the bytes format detection sees


class Beside(Protocol):
    """What a reader may look at to declare the files it joins its input with (its optional ``partners``): which
    files a folder holds and each file's first bytes. A run reads each at most once (the plan's view caches them)."""

    def listing(self, folder: PurePosixPath) -> list[PurePosixPath]:
        """The locations of the files directly in ``folder``, sorted (one listing, not a walk; [] when none)."""
        ...

    def head(self, location: PurePosixPath) -> bytes:
        """The first :data:`HEAD_BYTES` of the file at ``location`` (``b""`` when it is absent or unreadable)."""
        ...

    def remember(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, once per ``key`` for as long as this view lives (a run's plan: a folder's files sorted by
        kind once, not once per file of the folder)."""
        ...


class InputFiles(Beside, Protocol):
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

    def kept_copy(self, path: Path, sibling: PurePosixPath) -> AbstractContextManager[Path | None]:
        """:meth:`sibling_copy` for a file the run's workers read again and again (a batch input file an index
        points into): in a run on an object store, one copy per machine and run, shared by its workers."""
        ...

    def shared_index(self, path: Path, name: str, build: Callable[[Path], None]) -> AbstractContextManager[Path]:
        """The file ``build(dest)`` writes from the partners of the input at ``path`` (``name`` says which index),
        built once per folder and run: keyed by the folder and the partners' content digest as the run hashed them
        (:class:`SharedIndex`), reused by every worker of the run that reads a file of that folder. Outside a run,
        built for this read."""
        ...


class SharedIndex:
    """Files built once and shared by a run's workers on one machine: under ``directory``, each named by its key,
    built under a lock by the first worker that asks for it and renamed into place whole (a reader never sees a
    partial one; a worker killed mid-build leaves only a temporary file). The run removes the directory."""

    _process: SharedIndex | None = None

    def __init__(self, directory: Path):
        self.directory = directory

    @classmethod
    def of_run(cls, directory: str | None) -> SharedIndex:
        """The run's shared directory when this machine has it (the driver's and its local workers'), else this
        process's own (:meth:`of_process`: a Ray task on another node builds each index once per worker process)."""
        if directory is not None and Path(directory).is_dir():
            return cls(Path(directory))
        return cls.of_process()

    @classmethod
    def of_process(cls) -> SharedIndex:
        """A directory of this process's own, removed when it exits."""
        if cls._process is None:
            directory = Path(tempfile.mkdtemp(prefix="msgtrain-shared-"))
            atexit.register(shutil.rmtree, directory, ignore_errors=True)
            cls._process = cls(directory)
        return cls._process

    def get(self, key: str, build: Callable[[Path], None]) -> Path:
        """The file (or directory) ``build(dest)`` writes, built by the first worker that asks for it."""
        target = self.directory / key
        if target.exists():
            return target
        self.directory.mkdir(parents=True, exist_ok=True)
        with _locked(self.directory / f".{key}.lock"):
            if not target.exists():
                partial = self.directory / f".{key}.{os.getpid()}.partial"
                try:
                    build(partial)
                    os.replace(partial, target)
                finally:
                    if partial.is_dir():
                        shutil.rmtree(partial, ignore_errors=True)
                    else:
                        partial.unlink(missing_ok=True)
        return target


@contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """An exclusive lock between the processes of this machine (none where the platform has no ``flock``: two
    workers may then both build an index, and the last rename wins with the same bytes)."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    with open(lock, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def index_key(name: str, folder: PurePosixPath, partners: str | None) -> str:
    """The name of a shared index: which index, of which folder, over which partner bytes."""
    text = f"{name}\0{folder}\0{partners or ''}"
    return f"{name}-{hashlib.blake2b(text.encode('utf-8', 'surrogatepass'), digest_size=16).hexdigest()}"


@contextmanager
def built_once(build: Callable[[Path], None]) -> Iterator[Path]:
    """An index built for one read (outside a run), removed after it."""
    with tempfile.TemporaryDirectory(prefix="msgtrain-index-") as tmp:
        dest = Path(tmp) / "index"
        build(dest)
        yield dest


class LocalFiles:
    """The local disk: a location is the path itself. In a run, ``shared`` holds the indexes its workers share and
    ``partners`` the content digest of the files the run declared the input's partners (its part key's)."""

    def __init__(self, shared: SharedIndex | None = None, partners: str | None = None):
        self.shared, self.partners = shared, partners

    def location(self, path: Path) -> PurePosixPath:
        return PurePosixPath(path.as_posix())

    def listing(self, folder: PurePosixPath) -> list[PurePosixPath]:
        try:
            return sorted(PurePosixPath(p.as_posix()) for p in Path(folder).iterdir() if p.is_file())
        except OSError:  # an unlistable or absent folder: no file is known to be there
            return []

    def head(self, location: PurePosixPath) -> bytes:
        try:
            with open_input(Path(location)) as f:
                return f.read(HEAD_BYTES)
        except OSError:
            return b""

    def remember(self, key: Hashable, compute: Callable[[], T]) -> T:
        return compute()  # the disk as it is now: a long-lived process must see files change

    def open_sibling(self, path: Path, sibling: PurePosixPath) -> BinaryIO | None:
        local = Path(sibling)
        try:
            return open_input(local) if local.is_file() else None
        except OSError:  # unreadable: as if absent (the part key says so too: msgtrain.run.units)
            return None

    def sibling_copy(self, path: Path, sibling: PurePosixPath) -> AbstractContextManager[Path | None]:
        local = Path(sibling)
        return nullcontext(local if local.is_file() else None)

    def kept_copy(self, path: Path, sibling: PurePosixPath) -> AbstractContextManager[Path | None]:
        return self.sibling_copy(path, sibling)

    def shared_index(self, path: Path, name: str, build: Callable[[Path], None]) -> AbstractContextManager[Path]:
        if self.shared is None:
            return built_once(build)
        key = index_key(name, self.location(path).parent, self.partners)
        return nullcontext(self.shared.get(key, build))


class BytesSibling(io.BytesIO):
    """A sibling read whole (from an object store): a binary file object like a local one."""


_FILES: ContextVar[InputFiles | None] = ContextVar("msgtrain_input_files", default=None)
_LOCAL = LocalFiles()


def input_files() -> InputFiles:
    """The files readers reach their inputs' siblings through (the local disk unless a run says otherwise)."""
    return _FILES.get() or _LOCAL


@contextmanager
def reading_through(files: InputFiles) -> Iterator[None]:
    """While active, readers open siblings through ``files`` (the run stage's view of an input: its object store,
    the indexes its workers share)."""
    token = _FILES.set(files)
    try:
        yield
    finally:
        _FILES.reset(token)
