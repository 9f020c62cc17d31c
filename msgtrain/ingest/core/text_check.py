"""Text that cannot be written: lone UTF-16 surrogates in what a reader built.

A JSON ``"\\ud800"`` escape without its pair, or a byte that is not UTF-8 decoded with ``surrogateescape`` (a file
name, a header), gives a Python string holding a lone surrogate. No tokenizer encodes it, and neither Arrow nor a
UTF-8 file can store it, so a graph holding one is rejected at ingest (``invalid_text``), naming the field, before
linearization or export ever see it; nothing is silently replaced in training text.

Invariants:
- Two places reject: :func:`line_error` a JSONL line (only when its bytes hold a surrogate escape; the line alone is
  rejected, as a bad line is), :func:`graph_reject` any graph at the fault boundary (documents, YAML, file names).
- :func:`graph_reject` looks at every string a :class:`~msgtrain.ingest.core.base.ReadGraph` carries to the output
  — the graph's id, policy and metadata, every message (content, names, tool calls and their arguments, dict keys),
  engine records, tools and template arguments, the per-graph extras, and the source (file name) — and never raises.
- Cost: one C-speed serialization of the graph's values (``json.dumps`` without ASCII escapes, then a UTF-8 encode,
  which fails exactly when some string holds a surrogate); only a graph that fails it, or holds a value JSON cannot
  take, is walked in Python to name the field. The walk skips homogeneous number sequences (token ids, logprobs) in
  C and clears an ASCII string by ``str.isascii``. What the graph already encoded is not serialized again: a
  message's canonical JSON, encoded as UTF-8 when its node id was hashed
  (:attr:`~msgtrain.model.graph.MessageGraph.unicode_identities`; only what it does not show as it is,
  :func:`~msgtrain.model.message.identity_blind_spots`, is serialized), and an environment's tools and template
  arguments, encoded when its id was hashed (:attr:`~msgtrain.model.graph.Env.text_is_unicode`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from msgtrain.errors import MsgtrainError, ParseError
from msgtrain.ingest.core.events import ReadGraph, ReadReject, excerpt
from msgtrain.model.message import identity_blind_spots

INVALID_TEXT_HINT = (
    "the log has a \\uD800-\\uDFFF escape without its pair (a writer that cut a string between the two halves of"
    " a character) or bytes decoded with surrogateescape; fix the writer, or repair the record (e.g. replace it"
    " with U+FFFD) and convert again"
)

_SURROGATE = re.compile("[\ud800-\udfff]")
_NUMBERS = frozenset({int, float, bool, type(None)})


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in ``text``, or None."""
    if text.isascii():
        return None
    m = _SURROGATE.search(text)
    return m.start() if m else None


def lone_surrogate_field(roots: Iterator[tuple[str, Any]]) -> tuple[str, str, int] | None:
    """(field path, the string, index) of the first string under ``roots`` (named values) that holds a lone
    surrogate, as a dict key or a value; None when there is none."""
    for name, value in roots:
        found = _search(value, name)
        if found is not None:
            return found
    return None


def _as_json(value: Any) -> Any:
    """``json.dumps``'s ``default`` for :func:`surely_clean`: the same children :func:`_children` walks; a leaf the
    walk ignores (a date, an array) becomes ``None``, so it is ignored here too."""
    if isinstance(value, BaseModel):
        return value.__dict__
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    return None


def surely_clean(values: list[Any]) -> bool:
    """True when no string under ``values`` (dict keys included) holds a lone surrogate, decided at C speed; False
    when one may (then :func:`lone_surrogate_field` finds it, or finds that the value was something JSON cannot
    hold, such as a dict keyed by tuples)."""
    try:
        json.dumps(values, ensure_ascii=False, default=_as_json).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError, RecursionError):
        return False
    return True


def _children(value: Any) -> Iterator[tuple[str, Any]] | None:
    """(path step, child) of a container value, or None for a leaf."""
    if isinstance(value, dict):
        return ((f".{k}" if isinstance(k, str) else f"[{k!r}]", v) for k, v in value.items())
    if isinstance(value, list | tuple):
        if set(map(type, value)) <= _NUMBERS:
            return None
        return ((f"[{i}]", v) for i, v in enumerate(value))
    if isinstance(value, BaseModel):
        return ((f".{k}", v) for k, v in value.__dict__.items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ((f".{f.name}", getattr(value, f.name, None)) for f in dataclasses.fields(value))
    return None


def _search(root: Any, root_path: str) -> tuple[str, str, int] | None:
    """Depth-first, with an explicit stack (no recursion limit on deep values)."""
    stack: list[tuple[str, Any]] = [(root_path, root)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            at = lone_surrogate(value)
            if at is not None:
                return path, value, at
            continue
        if isinstance(value, dict):
            for key in value:
                if isinstance(key, str) and lone_surrogate(key) is not None:
                    return f"{path} (a key)", key, lone_surrogate(key) or 0
        children = _children(value)
        if children is not None:
            stack.extend(reversed([(path + step, child) for step, child in children]))
    return None


def line_error(value: Any, where: str) -> ParseError | None:
    """The ``invalid_text`` error of a JSONL line whose value holds a lone surrogate (a ``\\ud800`` escape without its
    pair), naming the field: the line is rejected on its own, as a bad line is, and the rest of its conversation
    or session is still read. Pairs (an emoji written ``\\ud83d\\ude00``) are whole characters and pass."""
    found = lone_surrogate_field(iter([("", value)]))
    if found is None:
        return None
    field_path, text, at = found
    field_path = field_path.lstrip(".") or "the record"
    return ParseError(
        f"lone UTF-16 surrogate U+{ord(text[at]):04X} at character {at} of {field_path}: text that is not Unicode"
        " cannot be tokenized or written",
        where=f"{where} {field_path}",
        code="invalid_text",
        hint=INVALID_TEXT_HINT,
    )


def _graph_values(event: ReadGraph) -> Iterator[tuple[str, Any]]:
    """Every value of a read graph that reaches the output, named as a reject names it."""
    g = event.graph
    yield "the file name", event.source.file
    yield "the graph id", g.graph_id
    yield "the policy", g.policy
    yield "metadata", g.metadata
    index: dict[str, int] = {}
    for i, node in enumerate(g.nodes.values()):
        index[node.id] = i
        yield f"message[{i}] id", node.id
        yield f"message[{i}]", node.message
    for node_id, generation in g.generations.items():
        yield f"message[{index.get(node_id, '?')}] generation", generation
    for env in g.envs.values():
        yield "tools", env.tools
        yield "template kwargs", env.template_kwargs
    yield "extras", event.extras


def _graph_surely_clean(event: ReadGraph) -> bool:
    """:func:`surely_clean` of every value :func:`_graph_values` names, without serializing again what the graph
    encoded already (module docstring): a message whose node id hashed its canonical JSON as valid Unicode adds only
    what that JSON does not show as it is, an environment found valid when its id was hashed adds nothing."""
    g = event.graph
    checked = getattr(g, "unicode_identities", None) or {}
    values: list[Any] = [event.source.file, g.graph_id, g.policy, g.metadata]
    for node in g.nodes.values():
        message = node.message
        values.append(node.id)
        if checked.get(node.id) is message:
            values.extend(identity_blind_spots(message))
        else:
            values.append(message)
    values.append(g.generations)
    for env in g.envs.values():
        if not env.text_is_unicode:
            return False
    values.append(event.extras)
    return surely_clean(values)


def graph_reject(event: ReadGraph) -> ReadReject | None:
    """The ``invalid_text`` reject of a graph holding a lone surrogate (see :mod:`msgtrain.ingest.core.text_check`)."""
    try:
        if _graph_surely_clean(event):
            return None
        named = list(_graph_values(event))
        found = lone_surrogate_field(iter(named))
    except Exception:  # the check is a guard, not a new way to fail: an odd value is judged further down
        return None
    if found is None:
        return None
    field_path, text, at = found
    err = MsgtrainError(
        f"lone UTF-16 surrogate U+{ord(text[at]):04X} at character {at} of {field_path}: text that is not Unicode"
        " cannot be tokenized or written",
        where=f"{event.source} {field_path}",
        code="invalid_text",
        hint=INVALID_TEXT_HINT,
    )
    return ReadReject(event.source, err, excerpt(text[max(at - 200, 0) : at + 200]), count=event.records)
