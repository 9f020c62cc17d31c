"""plan: the first step of a run. Which inputs there are (local files and folders, objects under URLs), what
each is keyed by, how each is cut into units of work, and which of them a resumed run already has.

Invariants:
- Discovery is deterministic: sorted, hidden entries skipped, each real file once, OUT and its hidden siblings
  never inputs; what is passed over is listed with its reason.
- A part's key is its content digest (siblings a reader consults included) + linearization settings + tokenizer +
  file name + chunk (:func:`~msgtrain.run.parts.part_key`), never the folder: the same bytes under another name are
  converted once per run, and a moved file is reused by ``--resume``.
- The manifest is saved once, before any part is converted: a killed run resumes from its parts, found by key
  (:mod:`msgtrain.run.journal`); the chunks of a file its workers plan are appended as they are known.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgtrain import __version__
from msgtrain.errors import ConfigError, MsgtrainError
from msgtrain.ingest.core.chunks import Chunk
from msgtrain.ingest.detect import looks_like_a_log, passed_over_reason
from msgtrain.ingest.registry import directory_reader
from msgtrain.linearize import load_tokenizer
from msgtrain.run.config import ConvertConfig, ProgressHook
from msgtrain.run.journal import Manifest, append_manifest, load_manifest, save_manifest
from msgtrain.run.object_chunks import ObjectView, plan_object
from msgtrain.run.parts import Job, LinearizeSettings, part_key, settings_from_config
from msgtrain.run.storage import HIDDEN_DIRECTORY, LOG_SUFFIXES, NOT_A_LOG, Stamp, base_name, cut_by, discover, identity
from msgtrain.run.units import PartnerViews, chunkable, plan_file, stable_digest

if TYPE_CHECKING:
    from msgtrain.run.execute import Executor
    from msgtrain.run.outputs import Output
    from msgtrain.run.part_store import PartsStore

__all__ = ["HIDDEN_DIRECTORY", "LOG_SUFFIXES", "NOT_A_LOG", "RunPlan", "discover_inputs", "plan_run"]


# ---------------------------------------------------------------------------------------------------- the step
@dataclass
class RunPlan:
    """What a run converts and publishes: the jobs still to convert, the parts of this run in registration order
    (exactly what is published), and the manifest recording where each part came from."""

    tok: Any
    settings: LinearizeSettings
    skey: str  # the linearization settings and tokenizer, as part keys carry them
    state: Path | str
    parts: PartsStore
    resume: bool
    chunk_bytes: int
    complete: Callable[[str], bool]
    recheck: Callable[[], Callable[[str], bool]]  # completeness as the parts are now (after conversion)
    manifest: Manifest
    ignored: list[dict[str, str]]
    jobs: list[Job] = field(default_factory=list)
    plans: list[tuple[Path, str]] = field(default_factory=list)  # local files their workers cut into chunks
    run_keys: dict[str, None] = field(default_factory=dict)
    run_digests: set[str] = field(default_factory=set)
    run_paths: set[str] = field(default_factory=set)
    stamps: dict[Path | str, Stamp | None] = field(default_factory=dict)  # each input's as it was hashed
    partners: dict[str, str | None] = field(default_factory=dict)  # content digest → its partners' (units.py)
    reused: int = 0
    converted: int = 0
    total_parts: int = 0

    def add_jobs(self, f: Path | str, digest: str, chunks: list[Chunk], view: ObjectView | None = None) -> list[Job]:
        """Register the parts of one input (whole, or its chunks); return those still to convert."""
        units: list[Chunk | None] = [*chunks] or [None]
        todo = []
        for chunk in units:
            label = f"{chunk.index}/{chunk.count}/{self.chunk_bytes}" if chunk is not None else ""
            key = part_key(digest, self.skey, label, name=base_name(f))
            meta: dict[str, Any] = {
                "source": str(f),
                "real": identity(f),
                "digest": digest,
                "settings": self.skey,
                "version": __version__,
            }
            if chunk is not None:
                meta["chunk"] = [chunk.index, chunk.count]
            self.manifest[key] = meta
            self.run_keys[key] = None
            self.total_parts += 1
            if self.resume and self.complete(key) and self.parts.reuse(key, meta):
                self.reused += 1
            else:
                todo.append(
                    Job(
                        f,
                        key,
                        meta,
                        chunk,
                        view if chunk is not None else None,
                        self.stamps.get(f),
                        self.partners.get(digest),
                    )
                )
        self.converted += len(todo)
        return todo

    def add_planned(self, f: Path, digest: str, chunks: list[Chunk]) -> list[Job]:
        """Register the chunks of a file a worker planned while others converted, and journal them."""
        known = set(self.run_keys)
        todo = self.add_jobs(f, digest, chunks)
        append_manifest(self.state, {k: self.manifest[k] for k in self.run_keys if k not in known}, self.manifest)
        return todo


def plan_run(
    cfg: ConvertConfig, output: Output, executor: Executor, progress: ProgressHook | None, shared: str | None = None
) -> RunPlan:
    """Discover, hash and cut the inputs of ``cfg`` and key their parts; with ``--resume`` a complete part is
    reused. The manifest is saved before returning. ``shared``: the directory where the run's workers on this
    machine share the indexes of files that answer each other (:class:`msgtrain.ingest.core.files.SharedIndex`)."""
    forced = bool(cfg.input_format or cfg.mapping)
    files, ignored = discover_locations([str(p) for p in cfg.inputs], output.exclude(), forced)
    if progress:  # the total is known from here on: a progress display needs no "?"
        progress("listed", {"files": len(files)})
    tok = load_tokenizer_checked(cfg)
    settings = settings_from_config(cfg, debug_log=output.debug_log(), shared=shared)
    manifest: Manifest = load_manifest(output.state) if cfg.resume else {}
    complete = output.reset(cfg.resume)
    chunk_bytes = int(cfg.chunk_mb * (1 << 20))
    plan = RunPlan(
        tok=tok,
        settings=settings,
        skey=settings.key(tok.fingerprint),
        state=output.state,
        parts=output.parts,
        resume=cfg.resume,
        chunk_bytes=chunk_bytes,
        complete=complete,
        recheck=output.complete,
        manifest=manifest,
        ignored=ignored,
    )
    # With a local worker pool, huge files are planned by the workers (planning is a pass over the file), while
    # other files convert; otherwise here.
    in_workers = executor.plans_in_workers()
    objects: list[tuple[str, str]] = []
    first_with_digest: dict[str, Path | str] = {}
    views = PartnerViews()  # each folder listed, each file's head read, once per run
    for index, f in enumerate(files):
        if progress:
            progress("hash", {"index": index, "total": len(files)})
        try:
            # The file's bytes and those of the files a reader joins it with (its partners). An object on a store
            # is hashed by the store (its metadata, or a read); a folder log by its objects. Taken while it did not
            # change, with the stamp a worker checks before and after reading it (a part is keyed by the bytes it read).
            keyed, plan.stamps[f] = stable_digest(f, views)
        except OSError as e:
            ignored.append({"path": str(f), "reason": f"unreadable: {e.strerror or e}"})
            continue
        digest = keyed.content
        if digest in first_with_digest:  # the same bytes under another name: converted once
            ignored.append({"path": str(f), "reason": f"same content as {first_with_digest[digest]}"})
            continue
        first_with_digest[digest] = f
        plan.partners[digest] = keyed.partners
        plan.run_digests.add(digest)
        plan.run_paths.add(identity(f))
        cut = cut_by(f, chunk_bytes)
        if cut == "store":
            objects.append((str(f), digest))
        elif cut == "whole":
            plan.jobs += plan.add_jobs(f, digest, [])
        elif in_workers and chunkable(Path(f), settings, chunk_bytes):
            plan.plans.append((Path(f), digest))
        else:
            plan.jobs += plan.add_jobs(f, digest, plan_file(Path(f), settings, chunk_bytes))
    # Huge objects: planned by a task each (a pass over the object) before conversion; their chunks' workers then
    # fetch only their byte ranges.
    planned = executor.run_tasks([(plan_object, (url, settings, chunk_bytes)) for url, _ in objects])
    for (url, digest), (chunks, view) in zip(objects, planned, strict=True):
        plan.jobs += plan.add_jobs(url, digest, chunks, view)
    # Once, before any part: a killed run resumes from its parts, found by key (journal.py: never once per part).
    save_manifest(output.state, manifest)
    if progress:
        progress("planned", {"total": plan.total_parts + len(plan.plans), "reused": plan.reused})
    return plan


def _check_chat_template(tok: Any, source: str) -> None:
    """A --chat-template that does not render a conversation is a usage error, found before any work."""
    probe = [{"role": "user", "content": "msgtrain-probe-user"}, {"role": "assistant", "content": "msgtrain-probe-ok"}]
    try:
        text = tok.render(probe, add_generation_prompt=False)  # as apply_chat_template renders it
    except Exception as e:  # a template that fails on the simplest conversation is not a chat template
        raise ConfigError(
            f"--chat-template {source} does not render a conversation: {type(e).__name__}: {e}",
            hint="pass a .jinja chat template or a tokenizer_config.json with a chat_template",
            code="bad_chat_template",
        ) from None
    if not isinstance(text, str) or "msgtrain-probe-user" not in text or "msgtrain-probe-ok" not in text:
        raise ConfigError(
            f"--chat-template {source} is not a chat template (it does not print the messages)",
            hint="pass a .jinja chat template or a tokenizer_config.json with a chat_template",
            code="bad_chat_template",
        )


def load_tokenizer_checked(cfg: ConvertConfig) -> Any:
    """The tokenizer of a config, its ``--chat-template`` checked to render a conversation (a usage error if not)."""
    if cfg.chat_template is None:
        return load_tokenizer(cfg.tokenizer, None)
    try:
        tok = load_tokenizer(cfg.tokenizer, cfg.chat_template)
    except MsgtrainError:
        raise
    except (ValueError, AttributeError, TypeError, OSError) as e:  # not JSON, not a mapping, not UTF-8...
        raise ConfigError(
            f"--chat-template {cfg.chat_template} cannot be read as a chat template: {type(e).__name__}: {e}",
            hint="pass a .jinja chat template or a tokenizer_config.json with a chat_template",
            code="bad_chat_template",
        ) from None
    _check_chat_template(tok, cfg.chat_template)
    return tok


# --------------------------------------------------------------------------------------------------- discovery
def discover_locations(
    inputs: list[str], exclude: Sequence[Path] = (), forced: bool = False
) -> tuple[list[Path | str], list[dict[str, str]]]:
    """:func:`discover_inputs`, and URLs: an object, or every object under a prefix (sorted; hidden names and
    names without a log suffix listed likewise). Returns (files and object URLs, ignored)."""
    files: list[Path | str] = []
    ignored: list[dict[str, str]] = []
    walk = partial(_discover_one, exclude=exclude, forced=forced)
    for item in inputs:
        found, skipped = discover(item, walk)
        files += found
        ignored += skipped
    return files, ignored


def _discover_one(item: str, exclude: Sequence[Path], forced: bool) -> tuple[list[Path], list[dict[str, str]]]:
    return discover_inputs([item], exclude, forced)


def discover_inputs(
    inputs: Sequence[str | Path], exclude: Sequence[Path] = (), forced: bool = False
) -> tuple[list[Path], list[dict[str, str]]]:
    """Expand files and directories: recursive, sorted, hidden directories listed and not searched (hidden files are
    files like any other), each real file once (overlapping
    inputs such as ``logs`` and ``logs/sub`` name it once), symlinked directories followed once.

    A directory that a reader takes as one log (:func:`~msgtrain.ingest.core.base.directory_reader`, e.g. an OpenHands
    V1 conversation folder) is one input, handed over whole; the files inside it are not inputs of their own.

    A file without a log suffix is an input when it holds JSON a reader recognises
    (:func:`~msgtrain.ingest.detect.looks_like_a_log`: a Letta ``.af`` agent file, JSON lines in a ``.log``).

    Returns (inputs, ignored): ``ignored`` lists what was passed over, each with its reason (no log suffix and no
    recognised JSON, unreadable directory, dangling link, symlink loop). Paths under ``exclude`` (OUT and its
    hidden siblings) are never inputs. With ``forced`` (a reader forced by ``--input-format`` or ``--map``), a
    file named as an input is read whatever its suffix; files found by walking a directory still need a log suffix
    or recognised JSON.
    """
    walk = _Walk({os.path.realpath(p) for p in exclude})
    files: list[Path] = []
    for item in inputs:
        p = Path(item)
        if os.path.realpath(p) in walk.skip:
            continue
        if p.is_dir():
            found: list[Path] = []
            walk.directory(p, (os.path.realpath(p),), found)
            files.extend(sorted(found))
        elif p.is_file():
            walk.add_file(p, files, unit=forced)
        else:
            raise MsgtrainError(
                f"input {str(item)!r} does not exist", hint="pass log files or directories", code="missing_input"
            )
    return files, walk.ignored


class _Walk:
    """One discovery's walk: what it has seen (each real file once) and what it passed over."""

    def __init__(self, skip: set[str]) -> None:
        self.skip = skip
        self.seen: set[str] = set()
        self.ignored: list[dict[str, str]] = []

    def add_file(self, f: Path, found: list[Path], unit: bool = False) -> None:
        real = os.path.realpath(f)
        if real in self.seen or real in self.skip:
            return
        self.seen.add(real)
        if unit or f.suffix.lower() in LOG_SUFFIXES or looks_like_a_log(f):
            found.append(f)
        else:
            self.ignored.append({"path": str(f), "reason": passed_over_reason(f.name, NOT_A_LOG)})

    def directory(self, directory: Path, active: tuple[str, ...], found: list[Path]) -> None:
        try:
            if directory_reader(directory) is not None:
                self.add_file(directory, found, unit=True)
                return
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as e:
            self.ignored.append({"path": str(directory), "reason": f"unreadable directory: {e.strerror or e}"})
            return
        for entry in entries:
            self.entry(entry, active, found)

    def entry(self, entry: os.DirEntry[str], active: tuple[str, ...], found: list[Path]) -> None:
        path = Path(entry.path)
        real = os.path.realpath(path)
        if real in self.skip:
            return
        if entry.name.startswith(".") and _is_dir(entry):
            # .git, .venv, caches: listed, not searched; a hidden *file* is a file like any other (aider's
            # .aider.chat.history.md is read, a hidden .jsonl log too).
            self.ignored.append({"path": str(path), "reason": HIDDEN_DIRECTORY})
            return
        try:
            is_dir, is_file = entry.is_dir(), entry.is_file()
        except OSError as e:
            loop = e.errno == errno.ELOOP
            reason = "symlink loop" if loop else str(e.strerror)
            self.ignored.append({"path": str(path), "reason": f"unreadable: {reason}"})
            return
        if entry.is_symlink() and not os.path.exists(path):
            # Nothing can be read through it: unreadable, counted and listed on screen, not only in the report.
            reason = "symlink loop" if _is_link_loop(path) else f"dangling symlink (to {os.readlink(path)})"
            self.ignored.append({"path": str(path), "reason": f"unreadable: {reason}"})
        elif is_dir:
            if real in active:  # a link back to a directory being walked
                self.ignored.append({"path": str(path), "reason": "symlink loop"})
            else:
                self.directory(path, (*active, real), found)
        elif is_file:
            self.add_file(path, found)
        else:
            self.ignored.append({"path": str(path), "reason": f"unreadable: {_special_kind(path)}, not a regular file"})


def _special_kind(path: Path) -> str:
    """What a file that is neither a regular file nor a directory is (reading a FIFO would block the run)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "a special file"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file"


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _is_link_loop(path: Path) -> bool:
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python < 3.13 reports a loop as RuntimeError
        return True
    except OSError as e:
        return e.errno == errno.ELOOP
    return False
