"""Declarative mappings: which fields of a record hold the conversation, in the conventions users already write.

A mapping is read from YAML or JSON (``--map FILE``, or ``mapping:`` in a config) in either of two forms:

- **LLaMA-Factory** ``dataset_info.json`` entry: ``formatting`` (``sharegpt`` / ``openai`` / ``alpaca``, and
  msgtrain's ``prompt_completion``), ``columns`` (``messages``, ``system``, ``tools``, ``prompt``, ``query``,
  ``response``, ``history``, ``chosen``, ``rejected``, ``kto_tag``; msgtrain adds ``completion`` and
  ``reward``) and ``tags`` (``role_tag``, ``content_tag``, ``user_tag``, ``assistant_tag``,
  ``observation_tag``, ``function_tag``, ``system_tag``). A whole ``dataset_info.json`` with one entry is
  accepted too.
- **axolotl** ``chat_template`` dataset keys: ``field_messages``, ``message_property_mappings`` (``role``,
  ``content``), ``roles`` (canonical role → list of logged values), ``field_system``, ``field_tools``; plus
  msgtrain's ``field_reward`` / ``field_label``.

Both become one :class:`Mapping`, which is also what the structural reader finds by itself and what
``msgtrain formats --explain`` prints (:meth:`Mapping.to_yaml`, LLaMA-Factory form, ready to edit).

Invariants:
- An unknown key is an error naming it (a typo never silently maps nothing).
- Column values are field names, or dotted paths into nested objects (``info.reward``); ``message_*`` names the
  numbered fields ``message_1``, ``message_2``, ... in number order (CAMEL role-playing records).
- A column may list *alternatives* (``messages: [conversations, messages]``): each record is read from the first of
  them that holds a value of the column's kind (a boolean label, a numeric reward, a system text, tools that are not
  empty; for the others anything but null; :meth:`Mapping.for_record`); the others are not read and, named by the
  mapping, not carried to the rows either (a reward's or a label's stay fields like any other); a record none of
  whose alternatives fits lacks an optional column (``kto_tag: [label, kto_tag]`` and ``"label": "math"``: no
  label; ``tools: [tools, functions]`` and ``"tools": []``: the functions, else no tools).
  Alternatives are paths without ``[]``: which unit a record holds is decided before they are.
- ``$`` as a messages path is the record itself, where it is a message list (a JSON array of messages, one
  conversation; a JSONL line holding a list; a file of one message per line is one such list):
  ``messages: [messages, $]``.
- ``extras: all`` carries every field beside the conversation to the rows whatever its size; the default
  (``small``) carries scalars and objects up to :data:`MAX_EXTRA_JSON` bytes of JSON.
- Roles are never guessed beyond :mod:`msgtrain.ingest.common.message_like`' vocabulary: a mapping's tags / roles
  extend it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from msgtrain.errors import ConfigError

LAYOUTS = ("messages", "alpaca", "prompt_completion", "preference")
_FORMATTING = {"sharegpt": "messages", "openai": "messages", "messages": "messages", "alpaca": "alpaca"}
_FORMATTING.update({"prompt_completion": "prompt_completion", "preference": "preference"})
_COLUMNS = (
    "messages",
    "system",
    # msgtrain: an agent's base system prompt its framework extends at call time: the conversations are marked
    # incomplete for their system message, never given the base as if it were that message
    "base_system",
    "tools",
    "prompt",
    "query",
    "response",
    "history",
    "completion",
    "chosen",
    "rejected",
    "kto_tag",
    "reward",
    # msgtrain: messages nest their replies under this key (a tree: each branch a conversation)
    "children",
    # msgtrain: each message's own id and its parent's (a tree written as links)
    "id",
    "parent",
    # LLaMA-Factory media columns are accepted and not read: media paths are not followed (see the README).
    "images",
    "videos",
    "audios",
)
_TAG_ROLES = {
    "user_tag": "user",
    "assistant_tag": "assistant",
    "observation_tag": "tool",
    "function_tag": "call",
    "system_tag": "system",
}
BARE_LIST = "$"  # the messages column's path for a record that is itself the message list
_LF_KEYS = frozenset({"formatting", "columns", "tags", "ranking", "file_name", "split", "num_samples", "load_from"})
# msgtrain's own keys, in either form: which fields beside the conversation reach the rows
_MSGTRAIN_KEYS = frozenset({"extras"})
EXTRAS = ("small", "all")
MAX_EXTRA_JSON = 4096  # with ``extras: small``, sibling objects larger than this (as JSON) are not carried to the rows
_AXOLOTL_KEYS = frozenset(
    {
        "field_messages",
        "message_property_mappings",
        "roles",
        "field_system",
        "field_tools",
        "field_reward",
        "field_label",
        "type",
        "path",
        "ds_type",
        "roles_to_train",
        "train_on_eos",
        "message_field_training",
        "chat_template",
    }
)
_CANONICAL = ("user", "assistant", "system", "developer", "tool", "call")


@dataclass
class Mapping:
    """Where a record keeps its conversation (see the module docstring). ``columns`` maps LLaMA-Factory column
    names to the record's field paths; ``role_key`` / ``content_key`` name the message keys (None: any of
    :data:`msgtrain.ingest.common.message_like.ROLE_KEYS` / ``CONTENT_KEYS``); ``roles`` maps logged role values to
    canonical ones. ``alternatives`` holds, for a column written as a list, every path in order (``columns`` holds
    the first until :meth:`for_record` picks the one a record holds); ``extras`` is ``small`` or ``all`` (module
    docstring)."""

    layout: str = "messages"
    columns: dict[str, str] = field(default_factory=dict)
    role_key: str | None = None
    content_key: str | None = None
    roles: dict[str, str] = field(default_factory=dict)
    alternatives: dict[str, tuple[str, ...]] = field(default_factory=dict)
    extras: str = "small"
    # the alternatives :meth:`for_record` did not pick: fields the mapping names, so never extras of the rows
    passed_over: tuple[str, ...] = ()

    def for_record(self, record: dict[str, Any]) -> Mapping:
        """The mapping with each column's alternatives decided for ``record``: the first path that holds a value of
        the column's kind (:data:`KINDS`: a boolean label, a numeric reward, a text or list for the others; not null).
        Where none does, a column the layout needs keeps its first path (its error names it) and any other column is
        left out (the record has none). A mapping without alternatives is returned as it is."""
        if not self.alternatives:
            return self
        columns = dict(self.columns)
        for column, paths in self.alternatives.items():
            fits = KINDS.get(column, _not_null)
            found = next((p for p in paths if fits(self._value(record, p))), None)
            if found is not None:
                columns[column] = found
            elif column in NEEDED[self.layout]:
                columns[column] = paths[0]
            else:
                del columns[column]
        picked = set(columns.values())
        passed = tuple(p for c, paths in self.alternatives.items() if c not in _EXTRA_COLUMNS for p in paths)
        return replace(self, columns=columns, alternatives={}, passed_over=tuple(p for p in passed if p not in picked))

    @staticmethod
    def _value(record: dict[str, Any], path: str) -> Any:
        if path.endswith("_*") and path not in record:
            return numbered_fields(record, path[:-2])
        return dig(record, path)

    def field_of(self, record: dict[str, Any], column: str) -> Any:
        """The value of ``column`` in ``record`` (a dotted path), or None when the mapping or record lacks it."""
        path = self.columns.get(column)
        if not path:
            return None
        if path.endswith("_*") and path not in record:  # numbered fields (message_1, message_2, ...), in order
            return numbered_fields(record, path[:-2])
        return dig(record, path)

    @property
    def reads_bare_lists(self) -> bool:
        """Whether the messages column names the record itself (``$``): a record that is a message list, and a file
        of one message per line (one list), are read."""
        return BARE_LIST in self.alternatives.get("messages", (self.columns.get("messages"),))

    def paths_of(self, column: str) -> tuple[str, ...]:
        """The paths a column may be read from: its alternatives, or its one path (none when not mapped)."""
        return self.alternatives.get(column) or ((self.columns[column],) if column in self.columns else ())

    def names_a_conversation_in(self, record: dict[str, Any]) -> bool:
        """Whether ``record`` holds one of the columns its layout reads the conversation from (any alternative)."""
        needed = (*NEEDED[self.layout], *(("history",) if self.layout == "alpaca" else ()))  # pairs alone: alpaca
        return any(_holds(record, p) for c in needed for p in self.paths_of(c))

    def to_data(self) -> dict[str, Any]:
        """The mapping in LLaMA-Factory ``dataset_info`` form (the form ``--map`` reads back)."""
        formatting = {"messages": "sharegpt"}.get(self.layout, self.layout)
        columns: dict[str, Any] = {c: list(self.alternatives.get(c, ())) or p for c, p in self.columns.items()}
        data: dict[str, Any] = {"formatting": formatting, "columns": columns}
        if self.layout == "preference":
            data["ranking"] = True
        tags: dict[str, str] = {}
        if self.role_key:
            tags["role_tag"] = self.role_key
        if self.content_key:
            tags["content_tag"] = self.content_key
        by_role: dict[str, list[str]] = {}
        for logged, role in sorted(self.roles.items()):
            by_role.setdefault(role, []).append(logged)
        for tag, role in _TAG_ROLES.items():
            values = by_role.get(role)
            if values:
                tags[tag] = values[0] if len(values) == 1 else values  # type: ignore[assignment]
        if tags:
            data["tags"] = tags
        if self.extras != "small":
            data["extras"] = self.extras
        return data

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_data(), sort_keys=False, allow_unicode=True)


def mapping_text(source: str | Path | dict[str, Any] | None) -> str | None:
    """A mapping (file or parsed dict) as canonical JSON text, or None: what settings carry across processes and
    into the part key (so editing the mapping file reconverts)."""
    if source is None:
        return None
    return json.dumps(load_mapping(source).to_data(), sort_keys=True)


def top_fields(record: dict[str, Any], path: str) -> set[str]:
    """The record's top-level fields a column reads: a dotted path's first step, or every numbered field of a
    ``message_*`` column."""
    if path.endswith("_*") and path not in record:
        stem = path[:-2]
        return {k for k in record if k.startswith(f"{stem}_") and k[len(stem) + 1 :].isdigit()}
    return {path.split(".")[0]}


def numbered_fields(record: dict[str, Any], stem: str) -> list[Any] | None:
    """The values of ``{stem}_1``, ``{stem}_2``, ... in number order (None when there is none): a column written
    ``message_*`` names them."""
    found = sorted(
        (int(k[len(stem) + 1 :]), v)
        for k, v in record.items()
        if k.startswith(f"{stem}_") and k[len(stem) + 1 :].isdigit()
    )
    return [v for _, v in found] or None


def _holds(record: dict[str, Any], path: str) -> bool:
    return Mapping._value(record, path) is not None


# Columns whose fields stay extras of the rows too (the reward and the label are kept under their own names as well).
_EXTRA_COLUMNS = frozenset({"reward", "kto_tag"})


def _not_null(value: Any) -> bool:
    return value is not None


# What a column's alternative must hold to be the one read (:meth:`Mapping.for_record`); any other column: not null.
KINDS = {
    "kto_tag": lambda v: isinstance(v, bool),
    "reward": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "system": lambda v: isinstance(v, str | list),
    "base_system": lambda v: isinstance(v, str | list),
    "tools": bool,  # an empty list or text is no tools: the next alternative is tried
}


def dig(record: Any, path: str) -> Any:
    """``record`` followed along a dotted path (``info.reward``; a number steps into a list: ``inputs.messages.0``);
    None where a step is missing."""
    value = record
    for step in path.split("."):
        if isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        elif isinstance(value, dict) and step in value:
            value = value[step]
        else:
            return None
    return value


def load_mapping(source: str | Path | dict[str, Any]) -> Mapping:
    """A mapping from a YAML / JSON file or an already parsed dict; raises :class:`ConfigError` naming the key."""
    where = "mapping"
    if isinstance(source, dict):
        data: Any = source
    else:
        where = str(source)
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"cannot read the mapping: {e.strerror or e}", where=where, code="bad_mapping") from e
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"the mapping is not YAML or JSON: {e}", where=where, code="bad_mapping") from e
    if not isinstance(data, dict):
        raise ConfigError("a mapping is a YAML / JSON object", where=where, code="bad_mapping", hint=_HINT)
    return parse_mapping(data, where)


_HINT = (
    "write LLaMA-Factory dataset_info keys (formatting, columns, tags) or axolotl keys (field_messages, "
    "message_property_mappings, roles); `msgtrain formats --explain FILE` prints one to start from"
)


def parse_mapping(data: dict[str, Any], where: str = "mapping") -> Mapping:
    """See :func:`load_mapping`."""
    if not (set(data) & (_LF_KEYS | _AXOLOTL_KEYS)) and len(data) == 1:
        only = next(iter(data.values()))
        if isinstance(only, dict) and set(only) & _LF_KEYS:  # a dataset_info.json holding one dataset
            data = only
    unknown = sorted(set(data) - _LF_KEYS - _AXOLOTL_KEYS - _MSGTRAIN_KEYS)
    if unknown:
        raise ConfigError(f"unknown mapping key {unknown[0]!r}", where=where, code="bad_mapping", hint=_HINT)
    mapping = Mapping()
    if set(data) & {"formatting", "columns", "tags"}:
        _read_llamafactory(data, mapping, where)
    if set(data) & {"field_messages", "message_property_mappings", "roles", "field_system", "field_tools"}:
        _read_axolotl(data, mapping, where)
    for key in ("field_reward", "field_label"):
        if key in data:
            _column(mapping, "reward" if key == "field_reward" else "kto_tag", data[key], key, where)
    if not mapping.columns:
        mapping.columns = {"messages": "messages"} if mapping.layout == "messages" else {}
    extras = data.get("extras", "small")
    if extras not in EXTRAS:
        raise ConfigError(
            f"extras must be one of {', '.join(EXTRAS)}, got {json.dumps(extras, default=str)}",
            where=where,
            code="bad_mapping",
            hint="extras: all carries every field beside the conversation to the rows, whatever its size",
        )
    mapping.extras = extras
    _check_layout(mapping, where)
    return mapping


def _read_llamafactory(data: dict[str, Any], mapping: Mapping, where: str) -> None:
    formatting = data.get("formatting", "sharegpt")
    if formatting not in _FORMATTING:
        raise ConfigError(
            f"formatting {formatting!r} is not one of {', '.join(_FORMATTING)}", where=where, code="bad_mapping"
        )
    mapping.layout = _FORMATTING[formatting]
    if data.get("ranking"):
        mapping.layout = "preference"
    columns = data.get("columns") or {}
    if not isinstance(columns, dict):
        raise ConfigError("columns must be an object", where=where, code="bad_mapping")
    for name, value in columns.items():
        if name not in _COLUMNS:
            raise ConfigError(
                f"unknown column {name!r}",
                where=where,
                code="bad_mapping",
                hint=f"columns: {', '.join(_COLUMNS)}",
            )
        _column(mapping, name, value, f"columns.{name}", where)
    tags = data.get("tags") or {}
    if not isinstance(tags, dict):
        raise ConfigError("tags must be an object", where=where, code="bad_mapping")
    for name, value in tags.items():
        if name in ("role_tag", "content_tag"):
            _message_key(mapping, name.removesuffix("_tag"), _string(value, f"tags.{name}", where))
        elif name in _TAG_ROLES:
            for logged in value if isinstance(value, list) else [value]:
                mapping.roles[_string(logged, f"tags.{name}", where)] = _TAG_ROLES[name]
        else:
            raise ConfigError(
                f"unknown tag {name!r}",
                where=where,
                code="bad_mapping",
                hint=f"tags: role_tag, content_tag, {', '.join(_TAG_ROLES)}",
            )


def _read_axolotl(data: dict[str, Any], mapping: Mapping, where: str) -> None:
    for key, column in (("field_messages", "messages"), ("field_system", "system"), ("field_tools", "tools")):
        if key in data:
            _column(mapping, column, data[key], key, where)
    props = data.get("message_property_mappings") or {}
    if not isinstance(props, dict):
        raise ConfigError("message_property_mappings must be an object", where=where, code="bad_mapping")
    for name, value in props.items():
        if name in ("role", "content"):
            _message_key(mapping, name, _string(value, f"message_property_mappings.{name}", where))
        else:
            raise ConfigError(
                f"message_property_mappings.{name} is not read by msgtrain",
                where=where,
                code="bad_mapping",
                hint="map role and content; tool calls and reasoning are read in OpenAI / Anthropic / Gemini shapes",
            )
    roles = data.get("roles") or {}
    if not isinstance(roles, dict):
        raise ConfigError("roles must map a role to a list of logged values", where=where, code="bad_mapping")
    for role, values in roles.items():
        canonical = {"human": "user", "gpt": "assistant", "function": "tool"}.get(role, role)
        if canonical not in _CANONICAL:
            raise ConfigError(
                f"roles.{role}: not a role msgtrain trains with",
                where=where,
                code="bad_mapping",
                hint=f"roles: {', '.join(_CANONICAL)}",
            )
        for logged in values if isinstance(values, list) else [values]:
            mapping.roles[_string(logged, f"roles.{role}", where)] = canonical


def _message_key(mapping: Mapping, which: str, key: str) -> None:
    """The key messages hold their role (``which`` = role) or content in (LLaMA-Factory tags, axolotl mappings)."""
    if which == "role":
        mapping.role_key = key
    else:
        mapping.content_key = key


# The columns each layout reads its conversation from.
NEEDED = {
    "messages": ("messages",),
    "alpaca": ("prompt", "response"),
    "prompt_completion": ("prompt", "completion"),
    "preference": ("chosen", "rejected"),
}


def _check_layout(mapping: Mapping, where: str) -> None:
    missing = [c for c in NEEDED[mapping.layout] if c not in mapping.columns]
    if mapping.layout == "alpaca" and "history" in mapping.columns:
        missing = []  # history pairs alone are a whole conversation
    if missing:
        raise ConfigError(
            f"a {mapping.layout} mapping needs columns.{missing[0]}",
            where=where,
            code="bad_mapping",
            hint=_HINT,
        )


def _column(mapping: Mapping, column: str, value: Any, key: str, where: str) -> None:
    """A column's path, or its alternatives (a list of paths, tried in order; module docstring)."""
    if not isinstance(value, list):
        mapping.columns[column] = _string(value, key, where)
        mapping.alternatives.pop(column, None)
        return
    paths = tuple(_string(v, f"{key}[{i}]", where) for i, v in enumerate(value))
    if not paths:
        raise ConfigError(f"{key} lists no path", where=where, code="bad_mapping", hint="name one field or several")
    if any("[]" in p for p in paths) or column in ("id", "parent", "children"):
        raise ConfigError(
            f"{key}: alternatives are paths without [] (a unit of the record is found before they are tried)",
            where=where,
            code="bad_mapping",
            hint="list alternative fields of one object, or write one path with []",
        )
    mapping.columns[column] = paths[0]
    mapping.alternatives[column] = paths


def _string(value: Any, key: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"{key} must be a field name, got {json.dumps(value, default=str)}", where=where, code="bad_mapping"
        )
    return value
