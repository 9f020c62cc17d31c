"""Where OUT lives: a local directory (:class:`LocalOutput`) or a prefix on an object store (:class:`StoreOutput`),
behind one :class:`Output` protocol. The run's steps never ask which: they hold OUT through :meth:`Output.held`,
keep their state and parts where :attr:`Output.state` and :attr:`Output.parts` say, assemble into
:meth:`Output.staging` and make the result current with :meth:`Output.publish`.

Invariants:
- One run at a time per OUT: a local OUT is checked (:func:`~msgtrain.run.publish.check_output`) and held under its
  lock (:mod:`msgtrain.run.lock`), starting with the litter of dead runs; a store OUT under a lease object with a
  heartbeat (:mod:`msgtrain.run.lease`), which must still be held at the moment of publishing.
- Nothing is visible until :meth:`Output.publish`: a local dataset is staged in a hidden directory and swapped in
  with one rename (:func:`~msgtrain.run.publish.publish`); a store dataset is uploaded to a fresh version prefix
  that one small pointer object, written last, makes current (:func:`~msgtrain.run.storage.publish_pointer`).
- A staged dataset that fails before publishing is removed (locally; on a store the next publish removes versions
  no pointer names).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from msgtrain.errors import ConfigError
from msgtrain.ingest.faults import default_debug_log
from msgtrain.run.config import ConvertConfig
from msgtrain.run.journal import Manifest, save_manifest
from msgtrain.run.lease import StoreLease, store_lock
from msgtrain.run.lock import exclusive_lock
from msgtrain.run.own_files import check_own_file
from msgtrain.run.part_store import LocalParts, PartsStore, StoreParts
from msgtrain.run.publish import (
    check_output,
    clean_litter,
    hidden_siblings,
    previous_report,
    publish,
    staging_dir,
    state_dir,
    versions_dir,
)
from msgtrain.run.storage import (
    Store,
    current_version,
    is_remote,
    join,
    new_version,
    publish_pointer,
    version_url,
)

DEBUG_LOG = "debug.log"  # in the state directory: tracebacks of reader_error rejects (never printed)
STATE_PREFIX = "_state"  # an object-store OUT keeps its state under OUT/_state/ (no sibling to hide it in)
REJECTS = "rejects.jsonl"  # in the dataset, unless --rejects names a file of its own


class Output(Protocol):
    """Where a run keeps its state and parts and publishes its dataset."""

    @property
    def state(self) -> Path | str:
        """Where the manifest is kept (and, locally, the lock and the debug log)."""
        ...

    @property
    def parts(self) -> PartsStore:
        """Where the parts are, one per key, written by the executor's workers."""
        ...

    def held(self) -> contextlib.AbstractContextManager[None]:
        """Hold OUT for the ``with`` body (its lock or lease); refuse an OUT or options it cannot take."""
        ...

    def exclude(self) -> list[Path]:
        """Paths that are never inputs (OUT and everything msgtrain keeps beside it)."""
        ...

    def debug_log(self) -> str:
        """Where the workers write tracebacks of reader errors."""
        ...

    def reset(self, resume: bool) -> Callable[[str], bool]:
        """Ready the parts for a run (a fresh run starts without any) and return whether a part (by key) is
        complete: its marker is there."""
        ...

    def complete(self) -> Callable[[str], bool]:
        """Whether a part (by key) is complete, as the parts are now."""
        ...

    def previous_samples(self) -> int:
        """The samples of the dataset OUT shows now (0 when none): an empty result may not replace them."""
        ...

    def staging(self) -> contextlib.AbstractContextManager[Path | str]:
        """A fresh location to assemble the dataset into; removed if the body fails."""
        ...

    def rejects(self, staged: Path | str) -> Path | str:
        """Where the rejects of a dataset staged at ``staged`` go."""
        ...

    def publish(self, staged: Path | str, data: dict[str, Any]) -> None:
        """Make the dataset at ``staged`` what OUT shows (``data``: its report, completed in place)."""
        ...

    def forget(self, manifest: Manifest, published: list[str]) -> None:
        """Drop from the state the parts the published dataset does not use."""
        ...


def output_for(cfg: ConvertConfig) -> Output:
    """The :class:`Output` that ``-o`` names."""
    if cfg.output is None:
        raise ConfigError("no output directory", hint="pass -o OUT")
    return StoreOutput(cfg, str(cfg.output)) if is_remote(str(cfg.output)) else LocalOutput(cfg, Path(cfg.output))


class LocalOutput:
    """OUT on a local (or mounted) file system: a symlink to its current version, state in ``.OUT.msgtrain-state``."""

    def __init__(self, cfg: ConvertConfig, out: Path) -> None:
        self.cfg, self.out = cfg, out
        self.state: Path = state_dir(out)
        self.parts = LocalParts(self.state / "parts")

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        cfg = self.cfg
        inputs = [Path(p) for p in cfg.inputs if not is_remote(str(p))]
        rejects = Path(cfg.rejects) if cfg.rejects is not None else None
        check_output(self.out, inputs, overwrite=cfg.overwrite, rejects=rejects)
        if rejects is not None:
            check_own_file(rejects, "--rejects", overwrite=cfg.overwrite)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        fresh = not (self.state.exists() or versions_dir(self.out).exists())
        failed = False
        try:
            with exclusive_lock(self.state):
                clean_litter(self.out)
                try:
                    yield
                except Exception as e:
                    # An interrupt keeps its parts for --resume (and says so); any other failure of a run that
                    # made OUT's folders and published nothing leaves none of them behind (its parts, its lock);
                    # one that keeps them (OUT was there before) says where they are and how large.
                    failed = getattr(e, "code", None) != "interrupted"
                    if failed and not fresh:
                        e.add_note(kept_parts_note(self.state / "parts"))
                    raise
        finally:
            if failed and fresh and not (self.out.exists() or self.out.is_symlink()):
                shutil.rmtree(self.state, ignore_errors=True)
                with contextlib.suppress(OSError):
                    versions_dir(self.out).rmdir()  # only when empty (staging is removed on failure)

    def exclude(self) -> list[Path]:
        return [self.out, *hidden_siblings(self.out)]

    def debug_log(self) -> str:
        return str(self.state / DEBUG_LOG)

    def reset(self, resume: bool) -> Callable[[str], bool]:
        if not resume:
            (self.state / DEBUG_LOG).unlink(missing_ok=True)
        self.parts.reset(resume)
        return self.complete()

    def complete(self) -> Callable[[str], bool]:
        return self.parts.complete()

    def previous_samples(self) -> int:
        return int(((previous_report(self.out) or {}).get("samples") or {}).get("written") or 0)

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        tmp = staging_dir(self.out)
        try:
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def rejects(self, staged: Path | str) -> Path:
        return Path(self.cfg.rejects) if self.cfg.rejects else Path(staged) / REJECTS

    def publish(self, staged: Path | str, data: dict[str, Any]) -> None:
        publish(Path(staged), self.out)
        outputs = data["outputs"]
        outputs["rejects"] = str(self.cfg.rejects) if self.cfg.rejects else str(self.out / REJECTS)
        outputs["drops"] = str(self.out / outputs["drops"]) if outputs.get("drops") else None

    def forget(self, manifest: Manifest, published: list[str]) -> None:
        # The state now describes exactly the published dataset; other parts are garbage.
        kept = set(published)
        for key in [k for k in manifest if k not in kept]:
            del manifest[key]
        save_manifest(self.state, manifest)
        self.parts.keep_only(kept)


class StoreOutput:
    """OUT on an object store: versions under ``OUT/_versions/``, the current one named by ``OUT/_latest``, state
    under ``OUT/_state/``."""

    def __init__(self, cfg: ConvertConfig, out: str) -> None:
        self.cfg, self.out = cfg, out
        self.state: str = join(out, STATE_PREFIX)
        self.parts = StoreParts(join(self.state, "parts"))
        self.lease: StoreLease | None = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        if self.cfg.rejects is not None:
            raise ConfigError(
                "--rejects cannot be used with an object-store OUT",
                hint="the rejects are published with the dataset (OUT/_versions/<version>/rejects.jsonl)",
            )
        with store_lock(self.state) as lease:  # a store has no flock: a lease object with a heartbeat
            self.lease = lease
            try:
                yield
            finally:
                self.lease = None

    def exclude(self) -> list[Path]:
        return []

    def debug_log(self) -> str:
        # The workers' tracebacks stay on the machine that hit them (a local temp file).
        return str(default_debug_log())

    def reset(self, resume: bool) -> Callable[[str], bool]:
        self.parts.reset(resume)
        return self.complete()

    def complete(self) -> Callable[[str], bool]:
        return self.parts.complete()

    def previous_samples(self) -> int:
        version = current_version(self.out)
        if version is None:
            return 0
        store, report = Store.of(self.out), join(version_url(self.out, version), "report.json")
        try:
            data = json.loads(store.read_bytes(report)) if store.exists(report) else {}
        except (OSError, ValueError):
            return 0
        return int(((data if isinstance(data, dict) else {}).get("samples") or {}).get("written") or 0)

    @contextlib.contextmanager
    def staging(self) -> Iterator[str]:
        # A version nothing points to yet; one left by a failed run is removed by the next publish.
        yield version_url(self.out, new_version())

    def rejects(self, staged: Path | str) -> str:
        return join(str(staged), REJECTS)

    def publish(self, staged: Path | str, data: dict[str, Any]) -> None:
        if self.lease is not None:
            self.lease.check()  # a run that lost its lease (stalled past its expiry) must not publish
        version = str(staged).rstrip("/").rpartition("/")[2]
        publish_pointer(self.out, version)
        data["published"] = {"version": version, "path": str(staged)}
        outputs = data["outputs"]
        outputs["rejects"] = join(str(staged), REJECTS)
        outputs["drops"] = join(str(staged), outputs["drops"]) if outputs.get("drops") else None

    def forget(self, manifest: Manifest, published: list[str]) -> None:
        """Parts on a store are kept (the manifest says which belong to which input; ``--resume`` reuses them)."""


def kept_parts_note(parts: Path) -> str:
    """What a failed run leaves in ``parts`` (a local OUT's parts folder): how many parts, how large, what to do."""
    count = size = 0
    for root, dirs, files in os.walk(parts):
        count += len(dirs) if root == str(parts) else 0
        size += sum(os.path.getsize(os.path.join(root, name)) for name in files)
    amount = f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 1024:.1f} KiB"
    return (
        f"the run's {count} parts ({amount}) are kept in {parts}: rerun with --resume to reuse them, or delete "
        f"{parts.parent} to free the space"
    )
