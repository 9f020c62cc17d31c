"""Shipped mappings: formats msgtrain reads as data, a mapping file each, listed by the catalogue like readers.

A format a mapping can state needs no reader module (docs/formats.md, "Why each reader is code"): it is a JSON file
``msgtrain/ingest/mappings/<name>.json`` holding

- ``name``, ``description``, ``example``: what ``msgtrain formats`` lists, as a reader's;
- ``marks``: texts one of which the file's head holds (:class:`~msgtrain.ingest.core.marks.Marks`), and ``names``
  (path patterns), so detection stays lazy: the catalogue holds them, and the mapping is loaded only for a file its
  marks admit;
- ``detect``: the head shapes that claim a file, any one of them, in the paths of
  :func:`~msgtrain.ingest.common.head_shape.head_shape` (``.conversations[].from``): a list of paths that must all
  occur, or an object of ``has`` (paths that all occur), ``lacks`` (paths none of which occurs), ``some`` (paths at
  one of which a value is seen), ``within`` (path → values: every value seen there is listed) and ``holds`` (path →
  patterns: a value seen there matches one, ``fnmatch``, and none written ``!pattern``); ``unless``: shapes that
  refuse a file first (the same forms); ``explain``: ``{at, when}``, the paths whose values the ``unknown_format``
  hint speaks of (a file holding them elsewhere, or other values there), and the values that make a path worth it;
- ``mapping``: the mapping (:mod:`msgtrain.ingest.structure.mapping`, either form) the structural reader reads every
  file of the format with; or a list of mappings, each record read by the first that names a conversation in it
  (:meth:`~msgtrain.ingest.structure.mapping.Mapping.names_a_conversation_in`: LLaMA-Factory's ranking records hold
  ``chosen`` / ``rejected`` beside ``conversations``), else by the last;
- ``notes``: what the file reads and why (JSON has no comments).

The registry names a shipped mapping ``msgtrain.ingest.mappings:<name>`` in its table, in detection order among the
readers.

Invariants:
- A shipped mapping reads exactly as ``--map`` with its ``mapping`` does (:class:`ShippedReader` is the structural
  reader with that mapping), behind the same fault boundary: a record's faults and rejects are the structural
  reader's; only the graphs' ``source_format`` names the format.
- ``detect`` decides from the head alone, as readers' detectors do; its marks are a necessary condition of it (a
  shape's paths and values hold, in the head text, one of the marks: ``tests/test_lazy_detection.py``).
- Light: detecting a file imports neither the structural reader nor YAML (a shipped mapping is a candidate for many
  files: ``"role"`` is in every chat log); the structural reader is built when a file is read
  (:mod:`msgtrain.ingest.structure.shipped_read`).
- A mapping file that does not parse, or names a key outside this list, is an error naming the file and the key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from msgtrain.errors import ConfigError
from msgtrain.ingest.common.head_shape import HeadShape, head_shape
from msgtrain.ingest.core.base import ReadItem
from msgtrain.ingest.core.chunks import KeyFunction
from msgtrain.ingest.core.marks import Marks

MAPPINGS = Path(__file__).resolve().parents[1] / "mappings"
PREFIX = "msgtrain.ingest.mappings:"  # how the registry's table names a shipped mapping
_KEYS = frozenset(
    {"name", "description", "example", "notes", "marks", "names", "detect", "unless", "explain", "mapping"}
)


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


class ShippedReader:
    """A shipped mapping as a reader (module docstring): detection from its data; reading by the structural reader
    with its mapping, built the first time a file is read."""

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
        self.name: str = spec["name"]
        self.description: str = spec["description"]
        self.example: str = spec["example"]
        self.marks = Marks(texts=tuple(spec.get("marks", ())), names=tuple(spec.get("names", ())))
        self.shapes = _shapes(spec.get("detect"), f"{where}: detect")
        self.refusals = _shapes(spec.get("unless") or [], f"{where}: unless")
        self.mappings: list[dict[str, Any]] = given
        self.where = where
        explained = spec.get("explain") or {}
        at, when = explained.get("at", []), explained.get("when", [])
        if not (isinstance(at, list) and isinstance(when, list) and all(isinstance(x, str) for x in at + when)):
            raise ConfigError(
                "explain is {at: [paths detect reads values at], when: [values that make a path worth naming]}",
                where=where,
                code="bad_mapping",
            )
        self.explained = tuple(at)
        self.explained_when = frozenset(when)
        # the ``explain`` trait (msgtrain.ingest.registry.TRAITS): only a mapping that names paths to explain has it
        self.explain = self._explain if self.explained else None

    def _explain(self, path: Path, head: bytes) -> str | None:
        """Why a file holding the values :attr:`explained` paths read, elsewhere or other ones, is not read (the
        ``unknown_format`` hint): the first path of the head with the same last key holding one of the ``when``
        values (else of the values detect allows there), and where the mapping reads them."""
        del path
        shape = head_shape(head)
        allowed = frozenset().union(*(v for sh in self.shapes for p, v in sh.within if p in self.explained))
        key = self.explained[0].rpartition(".")[2]
        for where in sorted(p for p in shape.values if p.rpartition(".")[2] == key):
            seen = shape.values_at(where)
            if not seen & (self.explained_when or allowed):
                continue
            if where in self.explained:
                unknown = sorted(seen - allowed)
                if unknown:
                    return f"{key}s {', '.join(map(repr, unknown))} at `{where[1:]}` are not among those it reads"
                continue
            place = where[1:].removesuffix(f".{key}").removesuffix("[]")
            return f"messages are under `{place}`, not {_places(self.explained, key)}"
        return None

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        if any(s.seen_in(shape) for s in self.refusals):
            return False
        return any(s.seen_in(shape) for s in self.shapes)

    @cached_property
    def structural(self) -> Any:
        """The structural reader with the mappings (:class:`~msgtrain.ingest.structure.shipped_read.MappedReader`);
        raises :class:`ConfigError` naming the file for a mapping that does not parse."""
        from msgtrain.ingest.structure.shipped_read import MappedReader

        return MappedReader(self.name, self.mappings, self.where)

    def read(self, path: Path) -> Iterator[ReadItem]:
        reader = self.structural
        yield from reader.read(path)

    def chunk_keys(self, path: Path) -> KeyFunction:
        """Records stand alone (each holds its conversation); a message line stays with the line before it."""
        del path
        return self.structural.chunk_key


def _places(paths: tuple[str, ...], key: str) -> str:
    """Where ``paths`` (``.role``, ``[].role``, ``.messages[].role``) read values, in words: ``at the top or under
    `messages```."""
    owners = dict.fromkeys(p.removesuffix(f".{key}").removesuffix("[]").lstrip(".") for p in paths)
    under = " / ".join(f"`{o}`" for o in owners if o)
    top = "at the top" if "" in owners else ""
    return " or ".join(x for x in (top, f"under {under}" if under else "") if x)


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
    """The reader of the shipped mapping ``name`` (``msgtrain/ingest/mappings/<name>.json``)."""
    path = MAPPINGS / f"{name}.json"
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the shipped mapping: {e}", where=str(path), code="bad_mapping") from e
    if not isinstance(spec, dict) or spec.get("name") != name:
        raise ConfigError(f"a shipped mapping names itself as its file does ({name!r})", where=str(path))
    return ShippedReader(spec, str(path))
