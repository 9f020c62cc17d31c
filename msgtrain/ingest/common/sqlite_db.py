"""SQLite databases readers read (AG2's runtime logs, Crush / Go OpenCode, OpenCode 1.2+): recognised by their
header, opened read-only (``mode=ro``: a reader never writes the user's file)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

SQLITE_HEADER = b"SQLite format 3\x00"


def connect_read_only(path: Path) -> sqlite3.Connection:
    """``path`` opened read-only; the caller closes it (``contextlib.closing``: a connection's own ``with`` only
    commits)."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
