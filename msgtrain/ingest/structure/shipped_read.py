"""A shipped mapping's reading: the structural reader with the format's mappings, its graphs named after the format
(:mod:`msgtrain.ingest.structure.shipped` is the light part detection loads; this module is loaded when a file of the
format is read).

Invariants: a record is read by the first mapping that names a conversation in it, else by the last (the last is the
reader's own ``mapping``: its call-log sniff and its message lines); the events are the structural reader's, behind
the same fault boundary, with only the graphs' ``source_format`` set to the format's name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from msgtrain.ingest.common.message_like import is_message_list
from msgtrain.ingest.core.base import ReadEvent, ReadGraph, ReadItem, RecordTask, SourceRef
from msgtrain.ingest.core.chunks import ChunkKey
from msgtrain.ingest.structure.mapping import parse_mapping
from msgtrain.ingest.structure.structural import StructuralReader
from msgtrain.ingest.structure.trees import lone_message


class MappedReader(StructuralReader):
    """The structural reader with a shipped format's mappings (module docstring)."""

    fallback = False

    def __init__(self, name: str, mappings: list[dict[str, Any]], where: str) -> None:
        parsed = [parse_mapping(m, f"{where}: mapping[{i}]") for i, m in enumerate(mappings)]
        super().__init__(parsed[-1])
        self.name = name
        self.by_record = [StructuralReader(m) for m in parsed[:-1]]
        last = parsed[-1]
        self.message_keys = {p for c in ("messages",) for p in last.paths_of(c)}

    def _record(self, path: Path, ref: SourceRef, value: Any, raw: Any) -> Iterator[ReadItem]:
        """A record, by the first of the mappings that names a conversation in it, else by the last."""
        for reader in self.by_record:
            if isinstance(value, dict) and reader.mapping is not None and reader.mapping.names_a_conversation_in(value):
                yield from StructuralReader._record(reader, path, ref, value, raw)
                return
        yield from super()._record(path, ref, value, raw)

    def read(self, path: Path) -> Iterator[ReadItem]:
        for item in super().read(path):
            if isinstance(item, RecordTask):
                item = replace(item, parse=_named(item.parse, self.name))
            elif isinstance(item, ReadGraph):
                item.graph.metadata["source_format"] = self.name
            yield item

    def chunk_key(self, value: Any) -> ChunkKey:
        """Records stand alone (each holds its conversation); a message line stays with the line before it."""
        if lone_message(value):
            return None
        if is_message_list(value) or (isinstance(value, dict) and any(k in value for k in self.message_keys)):
            return ()
        return None


def _named(parse: Callable[[], Iterable[ReadEvent]], name: str) -> Callable[[], list[ReadEvent]]:
    def run() -> list[ReadEvent]:
        events = list(parse())
        for event in events:
            if isinstance(event, ReadGraph):
                event.graph.metadata["source_format"] = name
        return events

    return run
