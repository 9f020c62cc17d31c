"""The catalogue step of adding a reader (docs/architecture.md, "Where things plug in"): every registered reader names
an example input kept in the repository (under ``sample_logs/`` or the tests' fixtures) that it detects, has a section
of docs/formats.md whose heading names it, and lives where ingest's layout says readers live (a kind under
``msgtrain/ingest/formats/``, or the structural reader under ``msgtrain/ingest/structure/``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from msgtrain.ingest.core.base import read_head
from msgtrain.ingest.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
FORMATS_DOC = ROOT / "docs" / "formats.md"
EXAMPLE_ROOTS = ("sample_logs/", "tests/")
KINDS = ("api", "sessions", "chats", "traces", "harnesses")


def documented_names(doc: str) -> set[str]:
    """Reader names a heading of ``doc`` names: in backticks (``## Per-call API logs (`calls`)``) or as the heading's
    first word (``### lm_eval — EleutherAI ...``)."""
    names: set[str] = set()
    for line in doc.splitlines():
        if not line.startswith("#"):
            continue
        names.update(re.findall(r"`([a-z0-9_]+)`", line))
        first = re.match(r"#+\s+([a-z0-9_]+)\s+—", line)
        if first:
            names.add(first.group(1))
    return names


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registered_reader_has_an_example_it_detects_a_documented_section_and_its_place(name: str) -> None:
    reader = REGISTRY[name]
    example = ROOT / reader.example
    assert reader.example.startswith(EXAMPLE_ROOTS) and example.exists(), (
        f"reader {name!r} names the example {reader.example!r}, which is not a file or folder under"
        f" {' or '.join(EXAMPLE_ROOTS)}: add a small example input there (hand-written, modeled on a real log) and"
        " name it in the reader's `example`"
    )
    if example.is_file():
        assert reader.detect(example, read_head(example)), f"reader {name!r} does not detect its own example {example}"
    assert name in documented_names(FORMATS_DOC.read_text(encoding="utf-8")), (
        f"reader {name!r} has no section in docs/formats.md: add a heading naming it (`{name}`) with what it reads,"
        " where its example is and what it does with the shape's quirks"
    )
    module = type(reader).__module__
    placed = module.startswith(tuple(f"msgtrain.ingest.formats.{k}." for k in KINDS)) or module.startswith(
        "msgtrain.ingest.structure."
    )
    assert placed, (
        f"reader {name!r} is defined in {module}: a format reader lives in its kind's package under"
        f" msgtrain/ingest/formats/ ({', '.join(KINDS)})"
    )


def test_the_documented_names_are_read_from_headings_only() -> None:
    doc = "## Per-call API logs (`calls`)\n### lm_eval — a harness\nthe `structural` reader, in a sentence\n"
    assert documented_names(doc) == {"calls", "lm_eval"}
