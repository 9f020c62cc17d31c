"""Lazy detection (msgtrain/ingest/registry.py, msgtrain/ingest/core/marks.py) decides exactly what importing every
reader decides, and imports only the readers a file's head admits.

- Each reader's marks are a necessary condition of its ``detect``: checked on the head and on every record of the
  head (what the vote shows a detector) of every sample log, every test fixture and every real log of ``../shared``,
  also on the first KiB (what input discovery looks at) and on copies whose JSON strings are written with ``\\u``
  escapes (seeded).
- ``detect_format`` names the same reader as the vote over every registered reader, on the same files.
- Not timed: a fresh interpreter that detects a per-call log holds no reader module beyond those its candidates import.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from msgtrain.errors import MsgtrainError
from msgtrain.ingest import registry
from msgtrain.ingest.core.base import read_head
from msgtrain.ingest.core.marks import Marks, head_text
from msgtrain.ingest.detect import _accepts, _majority_reader, detect_format, head_records, specific_readers
from msgtrain.ingest.registry import REGISTRY

from .conftest import shared_path

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {"__pycache__", ".git"}


def _files(root: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        found.extend(Path(dirpath) / f for f in sorted(filenames) if not f.endswith((".py", ".pyc")))
    return found


def _eager(path: Path) -> str | None:
    """The reader every registered reader's vote picks (detection before it was lazy), or None."""
    head = read_head(path)
    specific = specific_readers()
    voted = _majority_reader(path, head, specific)
    if voted is not None:
        return voted.name
    for reader in [*specific, *(REGISTRY[e.name] for e in registry.entries() if "fallback" in e.traits)]:
        if _accepts(reader, path, head):
            return reader.name
    return None


def _lazy(path: Path) -> str | None:
    try:
        return detect_format(path).name
    except MsgtrainError:
        return None


def _unsound(path: Path, head: bytes) -> list[str]:
    """Readers whose detect accepts ``head`` (or a record of it) while their marks do not admit it."""
    wrong: list[str] = []
    for entry in registry.entries():
        if entry.marks is None:
            continue
        reader = REGISTRY[entry.name]
        for shown in (head, head[:1024], *head_records(head)):
            if _accepts(reader, path, shown) and not entry.marks.admits(path, head_text(shown)):
                wrong.append(f"{entry.name} on {path} ({len(shown)} bytes)")
    return wrong


def _check(files: list[Path]) -> None:
    assert files
    unsound: list[str] = []
    differ: list[str] = []
    for path in files:
        unsound += _unsound(path, read_head(path))
        if (eager := _eager(path)) != (lazy := _lazy(path)):
            differ.append(f"{path}: {eager} by every reader, {lazy} lazily")
    assert not unsound, "a reader detects a file its marks do not admit (fix its marks):\n" + "\n".join(unsound)
    assert not differ, "\n".join(differ)


@pytest.mark.parametrize("where", ["sample_logs", "tests"])
def test_lazy_detection_equals_every_reader_on_the_repository_logs(where: str) -> None:
    files = _files(ROOT / where)
    if where == "tests":  # the fixtures: data files, not the test modules or their outputs
        files = [f for f in files if f.suffix.lower() in {".json", ".jsonl", ".yaml", ".yml", ".md", ".traj", ".db"}]
    _check(files)


def test_lazy_detection_equals_every_reader_on_the_real_logs() -> None:
    _check(_files(shared_path("real_logs")))


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _escaped(text: str, rng: random.Random) -> str:
    """``text`` (JSON) with about half of the letters of its strings written as ``\\u`` escapes."""

    def one(m: re.Match[str]) -> str:
        out, chars, i = [], m.group(0), 0
        while i < len(chars):
            c = chars[i]
            if c == "\\":
                out.append(chars[i : i + 2])
                i += 2
                continue
            out.append(f"\\u{ord(c):04x}" if c.isascii() and c.isalpha() and rng.random() < 0.5 else c)
            i += 1
        return "".join(out)

    return _STRING.sub(one, text)


def test_marks_see_through_json_escapes(tmp_path: Path) -> None:
    rng = random.Random(37)
    files = []
    for path in _files(ROOT / "sample_logs"):
        if path.suffix not in (".json", ".jsonl") or path.stat().st_size > 256 * 1024:
            continue
        copy = tmp_path / path.relative_to(ROOT).as_posix().replace("/", "__")
        copy.write_text(_escaped(path.read_text(encoding="utf-8"), rng), encoding="utf-8")
        files.append(copy)
    assert len(files) > 20
    _check(files)


def test_marks_of_text_that_is_not_plain_utf8_admit_every_reader() -> None:
    assert head_text(b'{"a": 1}\x00') is None
    assert head_text(b'\xff\xfe{\x00"\x00') is None
    assert head_text(b'{"\xc3') == '{"'  # a character cut by the head's end
    assert (head_text(b'{"r\\u006fle": 1}') or "").endswith('{"role": 1}')
    marks = Marks(texts=('"role"',))
    assert marks.admits(Path("x.json"), None)
    assert not marks.admits(Path("x.json"), head_text(b'{"rolex": 1}'))
    assert Marks(names=("*/subagents/*",)).admits(Path("a/subagents/b.jsonl"), "")
    assert not Marks().admits(Path("a.json"), "")


PROBE = """
import json, sys
from pathlib import Path
import msgtrain.cli  # noqa: F401 - what a convert imports before it reads
from msgtrain.ingest import registry
from msgtrain.ingest.core.base import read_head
from msgtrain.ingest.detect import detect_format
path = Path(sys.argv[1])
before = {e.module for e in registry.entries() if e.module in sys.modules}
name = detect_format(path).name
found = [e.module for e in registry.candidates(path, read_head(path)) if "fallback" not in e.traits]
after = sorted(e.module for e in registry.entries() if e.module in sys.modules)
print(json.dumps({"name": name, "before": sorted(before), "candidates": found, "after": after}))
"""

ALONE = """
import json, sys
from msgtrain.ingest import registry
for m in sys.argv[1:]:
    registry.load_reader(m)
print(json.dumps(sorted(e.module for e in registry.entries() if e.module in sys.modules)))
"""


def _python(code: str, *argv: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_detecting_a_file_imports_only_its_candidate_readers() -> None:
    path = ROOT / "sample_logs" / "calls" / "agent_calls.jsonl"
    seen = json.loads(_python(PROBE, str(path)))
    assert seen["name"] == "calls"
    assert seen["before"] == [], "importing the command line imported readers"
    # The readers in the process are exactly those the candidates import (with what they import themselves).
    alone = json.loads(_python(ALONE, *seen["candidates"]))
    assert seen["after"] == alone
    assert "msgtrain.ingest.structure.structural" not in seen["after"]  # the fallback: only when no reader claims
    assert len(seen["after"]) <= len(registry.MODULES) // 2, seen["after"]


def test_a_stale_catalogue_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader added to the registry without regenerating the catalogue is still found: every reader is imported."""
    from msgtrain.ingest import catalog

    monkeypatch.setattr(catalog, "READERS", catalog.READERS[:-1])
    registry.entries.cache_clear()
    registry._by_name.cache_clear()
    try:
        found = registry.entries()
        assert [e.module for e in found] == list(registry.MODULES)
        assert found[-1].name == "structural" and "fallback" in found[-1].traits
        assert detect_format(ROOT / "sample_logs" / "calls" / "agent_calls.jsonl").name == "calls"
    finally:
        registry.entries.cache_clear()
        registry._by_name.cache_clear()
