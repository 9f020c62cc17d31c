"""msgtrain's on-disk memos: facts that cost a library import to compute and never change for the same inputs.

Each memo is keyed by everything its value depends on (file contents, library versions), written atomically
(temporary file or directory, then one rename), and recomputed when unreadable. ``MSGTRAIN_CACHE=0`` turns them all
off; ``MSGTRAIN_CACHE_DIR`` (else ``$XDG_CACHE_HOME/msgtrain``, else ``~/.cache/msgtrain``) says where they live.
"""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path


def cache_dir(kind: str) -> Path | None:
    """The directory of one kind of memo (not created here), or None when memos are off."""
    if os.environ.get("MSGTRAIN_CACHE", "1") == "0":
        return None
    explicit = os.environ.get("MSGTRAIN_CACHE_DIR")
    if explicit:
        return Path(explicit) / kind
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):  # no home directory (a bare container user): no memos, not an error
            return None
    return Path(base) / "msgtrain" / kind


def version(dist: str) -> str:
    """An installed distribution's version, without importing it ("-" when not installed)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"
