"""``msgtrain formats --explain FILE``: which reader reads a file, what the structural reading finds in it, and
the mapping it used, printed in the form ``--map`` reads (ready to edit).

Invariants: reads at most :data:`EXPLAIN_RECORDS` records of the file; never raises for the file's content (a file
nothing reads is explained with the ``unknown_format`` hint).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError

EXPLAIN_RECORDS = 200


@dataclass
class Explanation:
    path: str
    reader: str | None
    how: str  # "detected", "fallback", "none"
    records: int = 0
    conversations: Counter[str] = field(default_factory=Counter)  # layout -> count
    places: Counter[str] = field(default_factory=Counter)  # JSON path with indices dropped -> count
    roles: dict[str, str | None] = field(default_factory=dict)  # logged role -> canonical (None: unknown)
    carried: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    mapping_yaml: str = ""
    hint: str = ""

    def render(self) -> str:
        lines = [f"{self.path}"]
        if self.reader is None:
            lines.append(f"  no reader recognises it: {self.hint}")
        elif self.how == "detected":
            lines.append(f"  read by the {self.reader} reader (its own format)")
        else:
            lines.append("  read by the structural reader (no specific reader claims it)")
        if self.records:
            found = ", ".join(f"{n} {layout}" for layout, n in self.conversations.most_common()) or "none"
            lines.append(f"  structural reading of the first {self.records} records: conversations found: {found}")
            for place, n in self.places.most_common(8):
                lines.append(f"    at {place} ({n})")
            if self.roles:
                shown = ", ".join(f"{k!r} -> {v or 'UNKNOWN (rejected)'}" for k, v in sorted(self.roles.items()))
                lines.append(f"  roles: {shown}")
            if self.carried:
                lines.append(f"  carried to the rows' metadata: {', '.join(sorted(self.carried))}")
            for problem in self.problems[:5]:
                lines.append(f"  not read: {problem}")
        if self.mapping_yaml:
            lines.append("  mapping (edit it and pass it with --map FILE, or as mapping: in a config):")
            lines.extend("    " + line for line in self.mapping_yaml.rstrip().splitlines())
        return "\n".join(lines)


def explain_file(path: Path) -> Explanation:
    """See the module docstring."""
    from msgtrain.ingest import registry  # noqa: F401 - registers the readers
    from msgtrain.ingest.core.base import read_head
    from msgtrain.ingest.detect import detect_format, unknown_format_hint

    try:
        reader = detect_format(path)
        how = "fallback" if getattr(reader, "fallback", False) else "detected"
        exp = Explanation(str(path), reader.name, how)
    except MsgtrainError as e:
        exp = Explanation(str(path), None, "none", hint=e.hint or e.message)
    except OSError as e:
        return Explanation(str(path), None, "none", hint=f"cannot read it: {e.strerror or e}")
    try:
        _structural(path, exp)
    except (MsgtrainError, OSError, ValueError) as e:
        exp.problems.append(str(e))
    if exp.reader is None and not exp.hint:
        exp.hint = unknown_format_hint(path, read_head(path))
    return exp


def _structural(path: Path, exp: Explanation) -> None:
    from msgtrain.ingest.common.message_like import canonical_role, message_like_count, role_of
    from msgtrain.ingest.structure.found import Ambiguity, Found
    from msgtrain.ingest.structure.locate import locate
    from msgtrain.ingest.structure.structural import file_records

    first: Found | None = None
    for n, (ref, value, _) in enumerate(file_records(path)):
        if n >= EXPLAIN_RECORDS:
            break
        exp.records += 1
        if isinstance(value, MsgtrainError):
            exp.problems.append(f"{ref}: {value.message}")
            continue
        found = locate(value)
        if not found:
            messages, assistants = message_like_count(value)
            if messages:
                exp.problems.append(f"{ref}: {messages} message-like objects ({assistants} assistant) in no layout")
        for item in found:
            if isinstance(item, Ambiguity):
                exp.problems.append(f"{ref} {item.path}: {item.message}")
                continue
            if item.rendered:  # whole conversations a chat template rendered, each cut in two: no --map form
                exp.conversations["rendered conversation"] += 1
                exp.places[_shape_of(item.path)] += 1
                continue
            if item.assembled:  # a scored sample or candidate beside its prompt: no --map form reads it
                kind = "rollout of n samples of one prompt" if item.group is not None else "scored candidate"
                exp.conversations[kind] += 1
                exp.places[_shape_of(item.path)] += 1
                continue
            if item.threaded:  # a chat session's current and older threads (Chatbox's threads): no --map form
                exp.conversations["thread of a chat session"] += 1
                exp.places[_shape_of(item.path)] += 1
                continue
            if item.node_map:  # a message tree keyed by node id (ChatGPT's mapping): no --map form reads it
                exp.conversations["node map (message tree)"] += 1
                exp.places[_shape_of(item.path) + "." + item.mapping.columns["messages"]] += 1
                continue
            if item.forked:  # branches kept by the message they fork after (Chatbox's forks): no --map form
                exp.conversations["forked message list (message tree)"] += 1
                exp.places[_shape_of(item.path) + "." + item.mapping.columns["messages"]] += 1
                continue
            first = first or item
            exp.conversations[item.mapping.layout] += 1
            exp.places[_shape_of(item.path)] += 1
            _roles(item, exp, canonical_role, role_of)
            exp.carried.update(k for k in item.holder if k not in _used(item))
    if first is not None:
        from msgtrain.ingest.structure.mapping_paths import rooted

        mapping = rooted(_mapping_for(first, exp), first.path, first.holder, first.inherited)
        exp.mapping_yaml = mapping.to_yaml()


def _shape_of(path: str) -> str:
    import re

    return re.sub(r"\[\d+\]", "[]", path)


def _used(found: Any) -> set[str]:
    from msgtrain.ingest.structure.convert import TEMPLATE_KWARGS_KEY
    from msgtrain.ingest.structure.mapping import top_fields

    columns = found.mapping.columns
    used = {f for k, v in columns.items() if k not in ("reward", "kto_tag") for f in top_fields(found.holder, v)}
    return used | {TEMPLATE_KWARGS_KEY}  # the template's arguments, read into the graph, not carried


def _roles(found: Any, exp: Explanation, canonical_role: Any, role_of: Any) -> None:
    for column in ("messages", "prompt", "completion", "chosen", "rejected"):
        value = found.mapping.field_of(found.holder, column)
        items = value if isinstance(value, list) else [value] if isinstance(value, dict) else []
        for item in items:
            key = found.mapping.role_key
            hit = (key, item.get(key)) if key and isinstance(item, dict) else role_of(item)
            if hit is not None and isinstance(hit[1], str) and len(exp.roles) < 32:
                exp.roles.setdefault(hit[1], canonical_role(hit[1], found.mapping.roles or None))


def _mapping_for(found: Any, exp: Explanation) -> Any:
    """The mapping the structural reader used for the first conversation, with the role and content keys and the
    roles it saw written out, so that the user edits a complete mapping."""
    from dataclasses import replace

    from msgtrain.ingest.common.message_like import content_key_of, role_of

    mapping = found.mapping
    value = mapping.field_of(found.holder, "messages") or mapping.field_of(found.holder, "completion")
    sample = next((m for m in value if isinstance(m, dict)), None) if isinstance(value, list) else None
    role_key = content_key = None
    if sample is not None:
        hit = role_of(sample)
        role_key = hit[0] if hit is not None and "." not in hit[0] else None
        content_key = content_key_of(sample)
    roles = {k: v for k, v in exp.roles.items() if v is not None and k != v}
    if mapping.role_key:  # the reading chose its role key (CAMEL's role_type): it is what the mapping must say
        role_key, roles = mapping.role_key, dict(mapping.roles)
    return replace(mapping, role_key=role_key, content_key=content_key, roles=roles)
