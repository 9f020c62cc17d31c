"""The one table of input formats. Adding a format = one new module + one line in :data:`MODULES`, then
``python -m msgtrain.ingest.registry`` (it writes the catalogue, :mod:`msgtrain.ingest.catalog`). A format a mapping
states is a data file instead (``msgtrain/ingest/mappings/<name>.json``, :mod:`msgtrain.ingest.structure.shipped`),
named ``msgtrain.ingest.mappings:<name>`` in the table.

The registry sits above every reader: readers never import it (nor :mod:`msgtrain.ingest.boundary`).

Order matters for detection: more specific detectors come first; generic ones (plain OpenAI message lists) last.

Invariants:
- Lazy: a reader's module is imported when the reader is asked for (by name, or as a candidate for a file), not when
  the registry is. What detection needs to know of every reader without importing it — its name, its traits
  (fallback, text reader, directory reader, partners, explain) and its marks (what its ``detect`` needs to see in a
  file, :mod:`msgtrain.ingest.core.marks`) — is read from the generated catalogue.
- The same answers as importing every reader: a reader whose marks do not admit a file is one whose ``detect``
  refuses it, so leaving it out changes no vote (``tests/test_lazy_detection.py`` compares both over every sample
  and real log). A catalogue that does not list exactly :data:`MODULES` (a reader added without regenerating it) is
  not used: every reader is then imported, as before.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

from msgtrain.errors import FormatError
from msgtrain.ingest import catalog
from msgtrain.ingest.core.base import Reader
from msgtrain.ingest.core.files import Beside
from msgtrain.ingest.core.marks import Marks, Quoted, head_text, quoted_texts

_FORMATS = "msgtrain.ingest.formats."
_SHIPPED = "msgtrain.ingest.mappings:"  # a shipped mapping (msgtrain.ingest.structure.shipped.PREFIX)
# The readers, in detection order: each module's ``READER``.
MODULES: tuple[str, ...] = (
    _FORMATS + "chats.native",
    # Eval-harness logs: documents with a harness-specific envelope (Inspect's eval spec, zip archives).
    _FORMATS + "harnesses.inspect_ai",
    _FORMATS + "harnesses.verifiers",
    _FORMATS + "harnesses.nemo_gym",  # Responses request/response pairs with a reward: before openai_responses
    _FORMATS + "harnesses.lm_eval",
    _FORMATS + "harnesses.mt_bench",  # answers joined with the question file beside them by question_id
    # Conversation formats with a marker no other format has (kind tags, interactions:, lion_class, MARSYS roles,
    # Go AgentState, Anthropic-only blocks, Responses item types) go before the per-call OpenAI logs.
    _FORMATS + "chats.options",
    _FORMATS + "api.batch_files",  # custom_id lines: a batch's requests or results, joined across the folder
    _FORMATS + "api.cassettes",
    _FORMATS + "sessions.lionagi",
    _FORMATS + "sessions.marsys",
    _FORMATS + "sessions.go_agent",
    _FORMATS + "sessions.amp",  # Anthropic-shaped blocks with Amp's tool_result runs: before anthropic
    _FORMATS
    + "sessions.cline_task",  # a task folder, or a history of Anthropic messages with its blocks: before anthropic
    _FORMATS + "api.anthropic",
    _FORMATS + "api.openai_responses",
    _FORMATS + "api.calls",
    _FORMATS + "sessions.ag2_logs",  # a SQLite database, never JSON: claims nothing another reader would
    _FORMATS + "sessions.crush",  # a SQLite database, never JSON: claims nothing another reader would
    _FORMATS + "api.gemini_api",
    _FORMATS + "sessions.smolagents",
    _FORMATS + "sessions.autogen",
    # Agent sessions and traces: their detectors key on format-specific fields, so they go before generic lists.
    _FORMATS + "sessions.claude_code",
    _FORMATS + "sessions.codex",
    _FORMATS + "sessions.aider",  # markdown, never JSON: claims nothing another reader would
    _FORMATS + "sessions.aider_llm",  # aider's text log of requests, never JSON: claims nothing another reader would
    _FORMATS + "sessions.copilot_cli",
    _FORMATS + "sessions.gemini_cli",
    _FORMATS + "sessions.swe_agent",
    _FORMATS + "sessions.mini_swe_agent",
    _FORMATS + "harnesses.tau2_bench",
    _FORMATS + "harnesses.toolbench",
    _FORMATS + "sessions.openhands",
    _FORMATS + "sessions.openhands_v1",
    _FORMATS + "sessions.strands",  # a folder of Converse message files, never a file of its own
    _FORMATS + "sessions.opencode",  # a storage folder of session, message and part files, never a file of its own
    _FORMATS + "traces.otel",
    # The generic conversation lists last (shipped mappings): ShareGPT turns, then any list of OpenAI-role messages.
    _SHIPPED + "sharegpt",
    _SHIPPED + "openai_chat",
    # The fallback: conversations found by shape, offered a file only when no reader above claims it.
    "msgtrain.ingest.structure.structural",
)

# The traits detection asks about, each an optional reader attribute (:class:`~msgtrain.ingest.core.events.Reader`).
TRAITS = ("fallback", "reads_text", "detect_directory", "partners", "explain")


@dataclass(frozen=True)
class Entry:
    """One reader as detection knows it before importing it."""

    name: str
    module: str
    traits: frozenset[str]
    marks: Marks | None  # None: any file
    partner_marks: Marks | None

    def load(self) -> Reader:
        return load_reader(self.module)

    def admits(self, path: Path, text: str | None, quoted: Quoted | None = None) -> bool:
        """Whether the reader may detect the file at ``path`` whose head is ``text`` (:func:`head_text`; ``quoted``:
        :func:`quoted_texts` of it, see :meth:`Marks.admits`)."""
        return self.marks is None or self.marks.admits(path, text, quoted)


def load_reader(module: str) -> Reader:
    """The reader a row of :data:`MODULES` names: a module's ``READER``, or the reader of a shipped mapping."""
    if module.startswith(_SHIPPED):
        from msgtrain.ingest.structure.shipped import shipped_reader

        return shipped_reader(module.removeprefix(_SHIPPED))
    reader: Reader = importlib.import_module(module).READER
    return reader


def _entry_of(module: str, reader: Reader) -> Entry:
    traits = frozenset(t for t in TRAITS if getattr(reader, t, False))
    return Entry(reader.name, module, traits, getattr(reader, "marks", None), getattr(reader, "partner_marks", None))


def _marks(data: Any) -> Marks | None:
    return None if data is None else Marks(tuple(data[0]), tuple(data[1]))


@cache
def entries() -> tuple[Entry, ...]:
    """Every reader, in detection order: from the catalogue, or by importing every reader when the catalogue does not
    list exactly :data:`MODULES`."""
    if tuple(row[1] for row in catalog.READERS) == MODULES:
        return tuple(
            Entry(name, module, frozenset(traits), _marks(marks), _marks(partner_marks))
            for name, module, traits, marks, partner_marks in catalog.READERS
        )
    return tuple(_entry_of(m, load_reader(m)) for m in MODULES)


@cache
def _by_name() -> dict[str, Entry]:
    found: dict[str, Entry] = {}
    for entry in entries():
        if entry.name in found:
            raise ValueError(f"reader {entry.name!r} registered twice")
        found[entry.name] = entry
    return found


class _Registry(Mapping[str, Reader]):
    """The readers by name, in detection order; a reader's module is imported when it is looked up."""

    def __getitem__(self, name: str) -> Reader:
        return _by_name()[name].load()

    def __iter__(self) -> Iterator[str]:
        return iter(_by_name())

    def __len__(self) -> int:
        return len(_by_name())


REGISTRY: Mapping[str, Reader] = _Registry()


def get_reader(name: str) -> Reader:
    try:
        return REGISTRY[name]
    except KeyError:
        raise FormatError(f"unknown input format {name!r}", hint=f"known formats: {', '.join(REGISTRY)}") from None


def with_trait(trait: str) -> list[Reader]:
    """The readers that have ``trait`` (one of :data:`TRAITS`), in registry order: only those are imported."""
    return [e.load() for e in entries() if trait in e.traits]


def candidates(path: Path, head: bytes) -> list[Entry]:
    """The readers that may detect the file at ``path`` whose first bytes are ``head`` (those whose marks admit it),
    in registry order, not imported yet. Detection asks only these: every other reader's ``detect`` refuses the file
    and each of its records (a record is a part of the head)."""
    text = head_text(head)
    quoted = quoted_texts(text) if text is not None else None
    return [e for e in entries() if e.admits(path, text, quoted)]


def directory_reader(path: Path) -> Reader | None:
    """The reader whose unit is the directory ``path`` (see ``Reader.detect_directory``), or None."""
    for reader in with_trait("detect_directory"):
        if reader.detect_directory(path):  # type: ignore[attr-defined]
            return reader
    return None


def unit_directories(root: Path) -> list[Path]:
    """The directories under ``root`` (itself included) that a directory reader claims, sorted.

    The walk does not descend into a claimed directory (its files belong to it) nor into hidden ones.
    """
    found: list[Path] = []
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if directory_reader(here) is not None:
            found.append(here)
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return sorted(found)


def forced_reader(input_format: str | None, mapping: str | None) -> Any:
    """The reader every file is read with when the user says so: the structural reader with a mapping (``--map``,
    given as the JSON text of :meth:`Mapping.to_data`), a reader by name (``--input-format``), or None (detect)."""
    if mapping:
        from msgtrain.ingest.structure import structural
        from msgtrain.ingest.structure.mapping import parse_mapping

        return structural.StructuralReader(parse_mapping(json.loads(mapping)))
    return get_reader(input_format) if input_format else None


def declared_partners(location: PurePosixPath, beside: Beside) -> list[PurePosixPath]:
    """Every file a reader declares it joins with the input at ``location`` (its optional ``partners`` method,
    :class:`~msgtrain.ingest.core.events.Reader`; never the input itself), sorted: what the run stage folds into the
    part's key. Every reader with ``partners`` whose ``partner_marks`` admit the input is asked, so no detection is
    needed: each returns [] for an input it would not join (by its location, or its first bytes through ``beside``).
    One reader's list is returned as it gave it (a folder's files, shared by every file of the folder: no copy, no
    sort per file)."""
    declared = [
        found
        for entry in entries()
        if "partners" in entry.traits
        and _partners_admit(entry.partner_marks, location, beside)
        and (found := entry.load().partners(location, beside))  # type: ignore[attr-defined]
    ]
    if len(declared) == 1:
        return declared[0]
    return sorted({p for found in declared for p in found})


def _partners_admit(marks: Marks | None, location: PurePosixPath, beside: Beside) -> bool:
    """Whether a reader's ``partners`` may return files for ``location``: its path patterns first, then (only if it
    names texts) its head, read through ``beside`` (which reads each file's head once)."""
    if marks is None or marks.matches_name(location):
        return True
    return bool(marks.texts) and marks.admits(location, head_text(beside.head(location)))


def catalog_text() -> str:
    """The catalogue's module text for the readers as they are now (every reader imported)."""
    readers = [(m, load_reader(m)) for m in MODULES]
    source = Path(catalog.__file__).read_text(encoding="utf-8")
    head = source[: source.index("\n" + catalog.TABLE_MARK) + 1]

    def literal(value: Any) -> str:  # JSON string literals are Python ones, in double quotes, as ruff formats them
        return json.dumps(value, ensure_ascii=False)

    def marks(m: Marks | None) -> str:
        return "None" if m is None else repr(m.as_data())

    formats = "".join(
        "    (\n" + "".join(f"        {literal(v)},\n" for v in (r.name, r.description, r.example)) + "    ),\n"
        for _, r in readers
    )
    rows = []
    for module, reader in readers:
        entry = _entry_of(module, reader)
        traits = tuple(t for t in TRAITS if t in entry.traits)
        rows.append(
            f"    ({entry.name!r}, {module!r}, {traits!r}, {marks(entry.marks)}, {marks(entry.partner_marks)}),\n"
        )
    return (
        f"{head}{catalog.TABLE_MARK}\nFORMATS: tuple[tuple[str, str, str], ...] = (\n{formats})\n"
        f"# fmt: off\nREADERS: tuple[Row, ...] = (\n{''.join(rows)})\n# fmt: on\n"
    )


if __name__ == "__main__":
    Path(catalog.__file__).write_text(catalog_text(), encoding="utf-8")
