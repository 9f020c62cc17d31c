"""The manifest of OUT's state: which part (by key) came from which input, and with which settings.

The manifest is what ``--keep-missing`` publishes from and how parts are ordered and grouped at assembly. Parts
themselves are found by key (content + settings), so a lost manifest costs nothing but the parts of earlier
inputs that ``--keep-missing`` would have kept.

Invariants:
- Linear in parts. The manifest is written whole (:func:`save_manifest`: one atomic rename locally, one PUT on a
  store) at most a fixed number of times per run, never once per part; what a run learns while parts convert (the
  chunks of a file planned by a worker) is appended to a journal (:data:`JOURNAL`, one JSON line per part), which
  :func:`load_manifest` replays over the snapshot (:data:`MANIFEST`) and the next :func:`save_manifest` folds in.
- Crash-safe. A run killed at any instant leaves a snapshot that parses (it is replaced by one rename) and a
  journal whose lines each parse, except perhaps a last line cut mid-write, which is ignored.
- Tolerant. A missing, truncated or foreign manifest or journal counts as empty (its parts are recomputed or
  found again by key), never as an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgtrain.run.storage import append_if_possible, child, read_if_present, remove_file, replace_whole

MANIFEST = "manifest.json"
JOURNAL = "manifest.jsonl"
REQUIRED = frozenset({"source", "digest", "settings"})

Manifest = dict[str, dict[str, Any]]


def _valid(entries: Any) -> Manifest:
    if not isinstance(entries, dict):
        return {}
    return {k: m for k, m in entries.items() if isinstance(k, str) and isinstance(m, dict) and set(m) >= REQUIRED}


def load_manifest(state: Path | str) -> Manifest:
    """The parts earlier runs recorded: the snapshot, then the journal's entries over it."""
    try:
        data = json.loads(read_if_present(child(state, MANIFEST)) or b"{}")
    except (OSError, ValueError):
        data = {}
    manifest = _valid(data.get("parts") if isinstance(data, dict) else None)
    manifest.update(_replay(child(state, JOURNAL)))
    return manifest


def _replay(journal: Path | str) -> Manifest:
    entries: Manifest = {}
    try:
        text = (read_if_present(journal) or b"").decode("utf-8", errors="replace")
    except OSError:
        return entries
    for line in text.split("\n"):
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash
        if isinstance(entry, dict):
            entries.update(_valid({entry.get("key"): entry.get("meta")}))
    return entries


def save_manifest(state: Path | str, manifest: Manifest) -> None:
    """Write the whole manifest (and empty the journal, whose entries it now holds)."""
    data = {"format": "msgtrain.state", "version": 2, "parts": manifest}
    text = json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"
    replace_whole(child(state, MANIFEST), text.encode())  # the previous manifest or this one, never half of one
    # After the snapshot is in place: a crash in between leaves entries in both, which replay alike.
    remove_file(child(state, JOURNAL))


def append_manifest(state: Path | str, entries: Manifest, manifest: Manifest) -> None:
    """Record ``entries`` (already merged into ``manifest``): one appended line each locally; a store, which has
    no append, gets the whole manifest (this happens once per planned file, not per part)."""
    if not entries:
        return
    lines = "".join(json.dumps({"key": k, "meta": m}, sort_keys=True) + "\n" for k, m in entries.items())
    if not append_if_possible(child(state, JOURNAL), lines.encode()):
        save_manifest(state, manifest)
