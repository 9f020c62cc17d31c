"""Plan a conversion: which inputs there are (local files and folders, objects under URLs) and how each is cut
into units of work (a huge JSON-lines log into chunks of whole conversations).

Invariants:
- Discovery is deterministic: sorted, hidden entries skipped, each real file once, OUT and its hidden siblings
  never inputs; what is passed over is listed with its reason.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from msgtrain.errors import ConfigError, MsgtrainError
from msgtrain.ingest.detect import looks_like_a_log
from msgtrain.ingest.registry import directory_reader
from msgtrain.linearize import load_tokenizer
from msgtrain.run.config import ConvertConfig
from msgtrain.run.parts import PART_FILE, is_complete
from msgtrain.run.storage import Store, is_remote, iter_parts_complete, unit_prefixes

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


def real_location(f: Path | str) -> str:
    """A location's identity for --keep-missing: a local file's real path, an object's URL."""
    return f if isinstance(f, str) else os.path.realpath(f)


def clear_parts(parts_dir: Path | str) -> None:
    if isinstance(parts_dir, str):
        Store.of(parts_dir).remove(parts_dir)
    elif parts_dir.exists():
        shutil.rmtree(parts_dir)


def completeness(parts_dir: Path | str) -> Callable[[str], bool]:
    """Whether a part (by key) is complete: its marker is there."""
    if isinstance(parts_dir, str):
        done = set(iter_parts_complete(Store.of(parts_dir), parts_dir, PART_FILE))
        return done.__contains__
    return lambda key: is_complete(parts_dir / key)
