"""Shipped mappings: formats msgtrain reads as data, a mapping file each, listed by the catalogue like readers.

A format a mapping can state needs no reader module (docs/formats.md, "Why each reader is code"): it is a file
``msgtrain/ingest/mappings/<name>.yaml`` holding

- ``name``, ``description``, ``example``: what ``msgtrain formats`` lists, as a reader's;
- ``marks``: texts one of which the file's head holds (:class:`~msgtrain.ingest.core.marks.Marks`), and ``names``
  (path patterns), so detection stays lazy: the catalogue holds them, and the mapping is loaded only for a file its
  marks admit;
- ``detect``: the head shapes that claim a file, any one of them, in the paths of
  :func:`~msgtrain.ingest.common.head_shape.head_shape` (``.conversations[].from``): a list of paths that must all
  occur, or an object of ``has`` (paths that all occur), ``lacks`` (paths none of which occurs), ``some`` (paths at
  one of which a value is seen), ``within`` (path → values: every value seen there is listed) and ``holds`` (path →
  patterns: a value seen there matches one, ``fnmatch``, and none written ``!pattern``); ``unless``: shapes that
  refuse a file first (the same forms);
- ``mapping``: the mapping (:mod:`msgtrain.ingest.structure.mapping`, either form) the structural reader reads every
  file of the format with; or a list of mappings, each record read by the first that names a conversation in it
  (:meth:`~msgtrain.ingest.structure.mapping.Mapping.names_a_conversation_in`: LLaMA-Factory's ranking records hold
  ``chosen`` / ``rejected`` beside ``conversations``), else by the last.

The registry names a shipped mapping ``msgtrain.ingest.mappings:<name>`` in its table, in detection order among the
readers.

Invariants:
- A shipped mapping reads exactly as ``--map`` with its ``mapping`` does (:class:`ShippedReader` is the structural
  reader with that mapping), behind the same fault boundary: a record's faults and rejects are the structural
  reader's; only the graphs' ``source_format`` names the format.
- ``detect`` decides from the head alone, as readers' detectors do; its marks are a necessary condition of it (a
  shape's paths and values hold, in the head text, one of the marks: ``tests/test_lazy_detection.py``).
- A mapping file that does not parse, or names a key outside this list, is an error naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from msgtrain.errors import ConfigError
from msgtrain.ingest.common.head_shape import HeadShape, head_shape
from msgtrain.ingest.common.message_like import is_message_list
from msgtrain.ingest.core.base import ReadEvent, ReadGraph, ReadItem, RecordTask, SourceRef
from msgtrain.ingest.core.chunks import ChunkKey, KeyFunction
from msgtrain.ingest.core.marks import Marks
from msgtrain.ingest.structure.mapping import parse_mapping
from msgtrain.ingest.structure.structural import StructuralReader
from msgtrain.ingest.structure.trees import lone_message

MAPPINGS = Path(__file__).resolve().parents[1] / "mappings"
PREFIX = "msgtrain.ingest.mappings:"  # how the registry's table names a shipped mapping
_KEYS = frozenset({"name", "description", "example", "marks", "names", "detect", "unless", "mapping"})


@dataclass(frozen=True)
class Shape:
    """One head shape (module docstring, ``detect``)."""

    has: tuple[str, ...] = ()
    lacks: tuple[str, ...] = ()
    some: tuple[str, ...] = ()
    within: tuple[tuple[str, frozenset[str]], ...] = ()
    holds: tuple[tuple[str, frozenset[str]], ...] = ()

    def seen_in(self, shape: HeadShape) -> bool:
        return (
            all(p in shape.paths for p in self.has)
            and not any(p in shape.paths for p in self.lacks)
            and (not self.some or any(shape.values_at(p) for p in self.some))
            and all(shape.values_at(p) <= allowed for p, allowed in self.within)
            and all(_seen(shape.values_at(p), wanted) for p, wanted in self.holds)
        )


def _seen(values: frozenset[str], patterns: frozenset[str]) -> bool:
    """Whether a value matches one of ``patterns`` (``fnmatch``: ``tool-*``) and none of those written ``!pattern``."""
    wanted = [p for p in patterns if not p.startswith("!")]
    unwanted = [p[1:] for p in patterns if p.startswith("!")]
    return any(any(fnmatchcase(v, p) for p in wanted) and not any(fnmatchcase(v, p) for p in unwanted) for v in values)


class ShippedReader(StructuralReader):
    """The structural reader with a shipped mapping, under the format's name (module docstring)."""

    fallback = False  # a format of its own: detected like any reader, not only when none claims a file
    chunk_items = True  # a huge JSON array of records is cut into chunks of records, as a reader's is

    def __init__(self, spec: dict[str, Any], where: str) -> None:
        unknown = sorted(set(spec) - _KEYS)
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r} in a shipped mapping", where=where, code="bad_mapping")
        for key in ("name", "description", "example", "mapping"):
            if key not in spec:
                raise ConfigError(f"a shipped mapping needs {key!r}", where=where, code="bad_mapping")
        given = spec["mapping"] if isinstance(spec["mapping"], list) else [spec["mapping"]]
        if not given or not all(isinstance(m, dict) for m in given):
            raise ConfigError("mapping is a mapping or a list of mappings", where=where, code="bad_mapping")
        mappings = [parse_mapping(m, f"{where}: mapping[{i}]") for i, m in enumerate(given)]
        super().__init__(mappings[-1])
        self.by_record = [StructuralReader(m) for m in mappings[:-1]]
        self.name: str = spec["name"]
        self.description: str = spec["description"]
        self.example: str = spec["example"]
        self.marks = Marks(texts=tuple(spec.get("marks", ())), names=tuple(spec.get("names", ())))
        self.shapes = _shapes(spec.get("detect"), f"{where}: detect")
        self.refusals = _shapes(spec.get("unless") or [], f"{where}: unless")
        messages = self.mapping.alternatives.get("messages") if self.mapping else None
        self._message_keys = messages or ((self.mapping.columns.get("messages"),) if self.mapping else ())

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        if any(s.seen_in(shape) for s in self.refusals):
            return False
        return any(s.seen_in(shape) for s in self.shapes)

    def _record(self, path: Path, ref: SourceRef, value: Any, raw: Any) -> Iterator[ReadItem]:
        """A record, by the first of the mappings that names a conversation in it (module docstring)."""
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

    def chunk_keys(self, path: Path) -> KeyFunction:
        """Records stand alone (each holds its conversation); a message line stays with the line before it."""
        del path
        return self._chunk_key

    def _chunk_key(self, value: Any) -> ChunkKey:
        if lone_message(value):
            return None
        if is_message_list(value) or (isinstance(value, dict) and any(k in value for k in self._message_keys)):
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


_SHAPE_KEYS = frozenset({"has", "lacks", "some", "within", "holds"})


def _shapes(data: Any, where: str) -> tuple[Shape, ...]:
    if not isinstance(data, list) or (not data and not where.endswith("unless")):
        raise ConfigError("detect lists the head shapes that claim a file", where=where, code="bad_mapping")
    return tuple(_shape(item, f"{where}[{i}]") for i, item in enumerate(data))


def _shape(item: Any, where: str) -> Shape:
    if isinstance(item, list):
        item = {"has": item}
    if not isinstance(item, dict) or not item or set(item) - _SHAPE_KEYS:
        raise ConfigError(
            f"a shape is a list of paths or an object of {', '.join(sorted(_SHAPE_KEYS))}",
            where=where,
            code="bad_mapping",
        )

    def paths(key: str) -> tuple[str, ...]:
        value = item.get(key, [])
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            raise ConfigError(f"{key} lists paths", where=where, code="bad_mapping")
        return tuple(value)

    def values(key: str) -> tuple[tuple[str, frozenset[str]], ...]:
        value = item.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, list) for v in value.values()):
            raise ConfigError(f"{key} maps paths to lists of values", where=where, code="bad_mapping")
        return tuple((p, frozenset(map(str, v))) for p, v in value.items())

    return Shape(paths("has"), paths("lacks"), paths("some"), values("within"), values("holds"))


@cache
def shipped_reader(name: str) -> ShippedReader:
    """The reader of the shipped mapping ``name`` (``msgtrain/ingest/mappings/<name>.yaml``)."""
    path = MAPPINGS / f"{name}.yaml"
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read the shipped mapping: {e}", where=str(path), code="bad_mapping") from e
    if not isinstance(spec, dict) or spec.get("name") != name:
        raise ConfigError(f"a shipped mapping names itself as its file does ({name!r})", where=str(path))
    return ShippedReader(spec, str(path))
