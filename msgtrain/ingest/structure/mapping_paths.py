"""Mapping paths into nested lists: where a mapping's conversations are, rooted at the record.

A column path may step into the items of a list with ``[]`` (``history[].messages``, ``steps[].input``,
``transitions[].actions[].completion``). The conversation's column (``messages``, ``prompt`` or ``chosen``) decides
the *unit*: its path up to its last ``[]`` names the objects that each hold one conversation (or one call); every
column under the same prefix is read inside each unit, relative to it; a column outside it (``system_prompt``,
``tools`` at the record's top) is read once from the record and given to every unit.

- ``messages: history[].messages``: each item of ``history`` holds one conversation;
- ``messages: history[].message``: each item holds one *message* (a list of wrappers): the items' messages, in
  order, are one conversation;
- ``messages: rollouts[]``: each item is a conversation itself, a list of messages (an RL group's rollouts);
- ``prompt: steps[].input`` + ``completion: steps[].response``: each step is one model call; the calls of a record
  are read as a call log (:mod:`msgtrain.ingest.structure.structural_calls`).

Invariants: a path with no ``[]`` reads the record as before (one unit, the record itself); the units are listed in
document order; a unit that is not an object is named in the error, never skipped silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.message_like import is_message_like, message_like_count
from msgtrain.ingest.structure.mapping import Mapping, dig

# Columns that name keys of each message (a tree's links), not paths in the record.
MESSAGE_KEY_COLUMNS = frozenset({"id", "parent", "children"})
# The column that holds a layout's conversation (its path decides the units).
MAIN_COLUMN = {"messages": "messages", "prompt_completion": "prompt", "alpaca": "prompt", "preference": "chosen"}
ROOT_PREFIX = "$root_"  # a unit's key for a column read once from the record (never a key a log writes)


def unit_prefix(mapping: Mapping) -> str | None:
    """The path of a mapping's units (``steps[]``), or None when its conversation column has no ``[]``."""
    path = mapping.columns.get(MAIN_COLUMN.get(mapping.layout, "messages"), "")
    if "[]" not in path:
        return None
    end = path.rindex("[]") + 2
    return path[: end + 1] if path[end : end + 1] == "*" else path[:end]


def walk(value: Any, path: str, at: str = "$") -> Iterator[tuple[str, Any]]:
    """(JSON path, value) of every place ``path`` names in ``value`` (each ``[]`` steps into every item)."""
    if not path:
        yield at, value
        return
    step, _, rest = path.partition(".")
    if step.endswith("[]*"):  # a tree: the items of ``name``, and of each item's ``name``, at any depth
        name = step[:-3]
        items = dig(value, name)
        if items is None and at != "$":
            return  # a leaf of the tree
        if not isinstance(items, list):
            raise ValidationError(
                f"{at}.{name} is not a list (the mapping steps into its items with {step})", code="mapping_mismatch"
            )
        for i, item in enumerate(items):
            yield from walk(item, rest, f"{at}.{name}[{i}]")
            yield from walk(item, path, f"{at}.{name}[{i}]")
        return
    if step.endswith("[]"):
        name = step[:-2]
        items = dig(value, name) if name else value
        if not isinstance(items, list):
            raise ValidationError(
                f"{at}.{name} is not a list (the mapping steps into its items with {step})",
                code="mapping_mismatch",
                hint="fix the mapping's path, or drop the [] where the field holds one object",
            )
        for i, item in enumerate(items):
            yield from walk(item, rest, f"{at}.{name}[{i}]" if name else f"{at}[{i}]")
        return
    yield from walk(dig(value, step), rest, f"{at}.{step}")


def mapping_units(mapping: Mapping, record: dict[str, Any]) -> list[tuple[str, dict[str, Any], Mapping]]:
    """(JSON path, holder, mapping relative to it) of every conversation or call a mapping names in ``record``
    (module docstring); a column's alternatives are decided for the record first (:meth:`Mapping.for_record`)."""
    mapping = mapping.for_record(record)
    prefix = unit_prefix(mapping)
    if prefix is None:
        return [("$", record, mapping)]
    main = MAIN_COLUMN.get(mapping.layout, "messages")
    keys = {c: p for c, p in mapping.columns.items() if c in MESSAGE_KEY_COLUMNS}
    paths = {c: p for c, p in mapping.columns.items() if c not in keys}
    inside = {c: p[len(prefix) + 1 :] for c, p in paths.items() if p.startswith(prefix + ".")}
    outside = {c: p for c, p in paths.items() if c not in inside}
    if main not in inside and mapping.layout == "messages" and paths.get(main) == prefix:
        return _lists_of_messages(record, mapping, prefix, outside, keys)
    if main not in inside:
        raise ValidationError(f"columns.{main} ends in []: name the field inside each item", code="mapping_mismatch")
    units = list(walk(record, prefix))
    root = {f"{ROOT_PREFIX}{c}": dig(record, p) for c, p in outside.items()}
    columns = {**inside, **{c: f"{ROOT_PREFIX}{c}" for c in outside}, **keys}
    # an item may be a list holding its message at an index (AgentScope's [message, marks] pairs: ``content[].0``)
    values = [dig(u, inside[main]) if isinstance(u, dict | list) else None for _, u in units]
    if mapping.layout == "messages" and units and all(is_message_like(v) for v in values):
        # each item wraps one message: the items' messages, in order, are one conversation
        holder = {"messages": values, **root}
        return [(f"$.{prefix}.{inside[main]}", holder, replace(mapping, columns={**columns, "messages": "messages"}))]
    out = []
    for (where, unit), value in zip(units, values, strict=True):
        if not isinstance(unit, dict):
            raise ValidationError(f"{where} is not an object", code="mapping_mismatch", hint="fix the mapping's path")
        if value is None and message_like_count(unit)[1] == 0:
            continue  # an item without the conversation and without replies (an agent's tool step): nothing to read
        if prefix.endswith("[]*"):  # a tree's node: its children are units of their own, read apart
            unit = {k: v for k, v in unit.items() if k != prefix.rpartition(".")[2][:-3]}
        out.append((where, {**unit, **root}, replace(mapping, columns=dict(columns))))
    return out


def _lists_of_messages(
    record: dict[str, Any], mapping: Mapping, prefix: str, outside: dict[str, str], keys: dict[str, str]
) -> list[tuple[str, dict[str, Any], Mapping]]:
    """``messages: rollouts[]``: each item of the list is a conversation itself, a list of messages (an RL group's
    rollouts); the columns outside it are read once from the record, as for any unit."""
    root = {f"{ROOT_PREFIX}{c}": dig(record, p) for c, p in outside.items() if c != "messages"}
    columns = {**{c: f"{ROOT_PREFIX}{c}" for c in outside if c != "messages"}, **keys, "messages": "messages"}
    out = []
    for where, unit in walk(record, prefix):
        if not isinstance(unit, list):
            raise ValidationError(
                f"{where} is not a message list", code="mapping_mismatch", hint="fix the mapping's path"
            )
        out.append((where, {"messages": unit, **root}, replace(mapping, columns=dict(columns))))
    return out


def rooted(mapping: Mapping, found_path: str, holder: dict[str, Any], inherited: dict[str, tuple[str, Any]]) -> Mapping:
    """A mapping the structural reader found at ``found_path`` (``$.steps[3]``, ``$.output``) for ``holder``, written
    from the record's root (``steps[].input``), with the system prompt and tools an enclosing object gave it: the
    mapping that reads the same conversations when passed with ``--map``. A conversation found as a bare list (or as
    a list of wrappers, ``$.history[].message``) is named by its own path."""
    prefix = re.sub(r"\[\d+\]", "[]", found_path).removeprefix("$").removeprefix(".")
    # a tree's nodes at any depth: children[].children[] ... is one recursive step, children[]*
    prefix = re.sub(r"\b(children|replies)\[\](?:\.\1\[\])*", r"\1[]*", prefix)
    columns: dict[str, str] = {}
    for column, path in mapping.columns.items():
        if column in MESSAGE_KEY_COLUMNS:
            columns[column] = path
            continue
        bare = column == "messages" and path == "messages" and set(holder) <= {"messages"}
        if bare:
            columns[column] = prefix or path
        else:
            columns[column] = f"{prefix}.{path}" if prefix else path
    for column, (path, _) in inherited.items():
        columns.setdefault(column, re.sub(r"\[\d+\]", "[]", path).removeprefix("$").removeprefix("."))
    return replace(mapping, columns=columns)
