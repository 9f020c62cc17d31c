"""The one table of input formats. Adding a format = one new module + one line here.

The registry sits above every reader: readers never import it (nor :mod:`msgtrain.ingest.boundary`).

Order matters for detection: more specific detectors come first; generic ones (plain OpenAI message lists) last.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

from msgtrain.errors import FormatError
from msgtrain.ingest.core.base import Reader
from msgtrain.ingest.core.files import Beside
from msgtrain.ingest.formats.api import (
    anthropic,
    batch_files,
    calls,
    cassettes,
    gemini_api,
    openai_chat,
    openai_responses,
)
from msgtrain.ingest.formats.chats import native, options, sharegpt
from msgtrain.ingest.formats.harnesses import inspect_ai, lm_eval, mt_bench, tau2_bench, toolbench, verifiers
from msgtrain.ingest.formats.sessions import (
    ag2_logs,
    aider,
    autogen,
    claude_code,
    codex,
    copilot_cli,
    gemini_cli,
    go_agent,
    lionagi,
    marsys,
    mini_swe_agent,
    openhands,
    openhands_v1,
    smolagents,
    swe_agent,
)
from msgtrain.ingest.formats.traces import otel
from msgtrain.ingest.structure import structural
from msgtrain.ingest.structure.mapping import parse_mapping

REGISTRY: dict[str, Reader] = {}


def register(reader: Reader) -> Reader:
    if reader.name in REGISTRY:
        raise ValueError(f"reader {reader.name!r} registered twice")
    REGISTRY[reader.name] = reader
    return reader


_READERS: list[Reader] = [
    native.READER,
    # Eval-harness logs: documents with a harness-specific envelope (Inspect's eval spec, zip archives).
    inspect_ai.READER,
    verifiers.READER,
    lm_eval.READER,
    mt_bench.READER,  # answers joined with the question file beside them by question_id
    # Conversation formats with a marker no other format has (kind tags, interactions:, lion_class, MARSYS roles,
    # Go AgentState, Anthropic-only blocks, Responses item types) go before the per-call OpenAI logs.
    options.READER,
    batch_files.READER,  # custom_id lines: a batch's requests or results, joined across the folder
    cassettes.READER,
    lionagi.READER,
    marsys.READER,
    go_agent.READER,
    anthropic.READER,
    openai_responses.READER,
    calls.READER,
    ag2_logs.READER,  # a SQLite database, never JSON: claims nothing another reader would
    gemini_api.READER,
    smolagents.READER,
    autogen.READER,
    # Agent sessions and traces: their detectors key on format-specific fields, so they go before generic lists.
    claude_code.READER,
    codex.READER,
    aider.READER,  # markdown, never JSON: claims nothing another reader would
    copilot_cli.READER,
    gemini_cli.READER,
    swe_agent.READER,
    mini_swe_agent.READER,
    tau2_bench.READER,
    toolbench.READER,
    openhands.READER,
    openhands_v1.READER,
    otel.READER,
    # The generic conversation lists last: ShareGPT turns, then any list of OpenAI-role messages.
    sharegpt.READER,
    openai_chat.READER,
    # The fallback: conversations found by shape, offered a file only when no reader above claims it.
    structural.READER,
]

if not REGISTRY:
    for _reader in _READERS:
        register(_reader)


def get_reader(name: str) -> Reader:
    try:
        return REGISTRY[name]
    except KeyError:
        raise FormatError(f"unknown input format {name!r}", hint=f"known formats: {', '.join(REGISTRY)}") from None


def directory_reader(path: Path) -> Reader | None:
    """The reader whose unit is the directory ``path`` (see ``Reader.detect_directory``), or None."""
    for reader in REGISTRY.values():
        detect_directory = getattr(reader, "detect_directory", None)
        if detect_directory is not None and detect_directory(path):
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
        return structural.StructuralReader(parse_mapping(json.loads(mapping)))
    return get_reader(input_format) if input_format else None


def declared_partners(location: PurePosixPath, beside: Beside) -> list[PurePosixPath]:
    """Every file a reader declares it joins with the input at ``location`` (its optional ``partners`` method,
    :class:`~msgtrain.ingest.core.events.Reader`; never the input itself), sorted: what the run stage folds into the
    part's key. Every reader is asked, so no detection is needed: each returns [] for an input it would not join (by
    its location, or its first bytes through ``beside``). One reader's list is returned as it gave it (a folder's
    files, shared by every file of the folder: no copy, no sort per file)."""
    declared = [found for reader in REGISTRY.values() if (found := _partners_of(reader, location, beside))]
    if len(declared) == 1:
        return declared[0]
    return sorted({p for found in declared for p in found})


def _partners_of(reader: Reader, location: PurePosixPath, beside: Beside) -> list[PurePosixPath]:
    partners = getattr(reader, "partners", None)
    return partners(location, beside) if partners is not None else []
