"""``ConvertConfig``: every ``msgtrain convert`` option, from a YAML file, CLI flags, or both.

Invariants:
- One frozen, validated object (pydantic, ``extra="forbid"``) holds every option; the CLI and YAML keys share
  the field names (``max_length``; ``max-length`` is accepted in YAML too).
- Every mistake is a :class:`~msgtrain.errors.ConfigError` naming the key, what was wrong, and the valid
  choices: an unknown key lists the valid keys (and the closest one), a bad value says what was expected.
- Precedence: built-in defaults < the config file < CLI flags the user actually gave (:func:`merge_cli`).
- :meth:`ConvertConfig.config_hash` is a stable hash of exactly the settings that change the written data
  (:data:`OUTPUT_SETTINGS`); every field is classified as output-changing or run-only (:data:`RUN_SETTINGS`),
  and a test fails when a new field is in neither set.
- Relative paths are kept as given and resolved against the working directory at run time, like CLI paths.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from msgtrain.errors import ConfigError, MsgtrainError
from msgtrain.export.groups import check_group_key
from msgtrain.export.length import Overflow
from msgtrain.export.split import parse_split_spec
from msgtrain.export.targets import TARGETS
from msgtrain.export.writer import DEFAULT_ROW_GROUP_SIZE, DEFAULT_ROWS_PER_SHARD, Format
from msgtrain.limits import (
    DEFAULT_MAX_GRAPH_SAMPLES,
    DEFAULT_MAX_GRAPH_STATE_BYTES,
    DEFAULT_MAX_GRAPH_TOKENS,
    DEFAULT_MAX_RECORD_MB,
)
from msgtrain.run.storage import normalize_location

CONFIG_VERSION = "msgtrain-convert-config/1"
# What a run tells its caller as it goes (an event name and its figures): the command line draws progress from it.
ProgressHook = Callable[[str, dict[str, Any]], None]


def _location(value: Any) -> Any:
    """A URL stays a string (``Path`` would fold ``s3://b`` into ``s3:/b``); a local path becomes a Path."""
    return normalize_location(value) if isinstance(value, str) else value


class ConvertConfig(BaseModel):
    """All options of ``msgtrain convert``: keyword arguments, :func:`load_config` or :func:`merge_cli`."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    # inputs and outputs
    # A location is a local Path or, for object storage, a URL kept as a string (``s3://bucket/logs/``).
    inputs: tuple[Path | str, ...] = Field((), description="log files or directories (searched recursively), or URLs")
    output: Path | str | None = Field(None, description="output directory or URL, published atomically")
    rejects: Path | None = Field(None, description="where bad records go (default OUT/rejects.jsonl)")
    input_format: str | None = Field(None, description="force a reader instead of detecting per file")
    mapping: str | dict[str, Any] | None = Field(
        None,
        description="a declarative mapping (LLaMA-Factory columns/tags or axolotl field_messages/"
        "message_property_mappings/roles), inline or a YAML/JSON file: read every file with it",
    )
    context: tuple[dict[str, Any], ...] = Field(
        (),
        description="per source, the system prompt and tools a log does not record: a list of entries"
        " {format, glob, system_prompt: FILE, tools: FILE} (README: Supplying what a log does not hold)",
    )
    system_prompt: str | None = Field(
        None, description="a text file: the system prompt of every conversation whose log lacks one"
    )
    tools: str | None = Field(
        None, description="a JSON file of tool schemas: the tools of every conversation whose log records none"
    )
    # tokens
    tokenizer: str | None = Field(None, description="HF tokenizer folder or hub id; None = embedded demo")
    chat_template: str | None = Field(None, description="a .jinja file or tokenizer_config.json")
    render_date: str | None = Field(None, description="YYYY-MM-DD for templates that print today's date")
    policies: tuple[str, ...] = Field((), description="train only these policies; empty = all")
    content_special_tokens: Literal["plain", "parse"] = Field(
        "plain",
        description="control-token text in log content: plain = encoded as plain text (safe); parse = as a serving"
        " engine parses it (control tokens; samples flagged content_special_tokens_parsed)",
    )
    train_negative: bool = Field(
        False,
        description="train replies the log marks bad (KTO label false, rejected side of a preference pair),"
        " flagged label_negative / preference_rejected; default: dropped as negative_label",
    )
    engine_ids_mismatch: Literal["drop", "render", "keep"] = Field(
        "drop",
        description="logged engine ids that do not decode to the logged text: drop the turn (engine_ids_mismatch),"
        " render it from the logged text instead, or keep the ids; render and keep flag the sample",
    )
    train_dropped: bool = Field(
        False,
        description="train turns whose template dropped their tool calls or text, flagged"
        " template_dropped_tool_calls / template_dropped_content; default: dropped with that reason",
    )
    content_format: Literal["auto", "string", "openai"] = Field(
        "auto",
        description="how list content reaches the chat template: auto = detected from the template as vLLM"
        " does; string = text parts joined with a newline (media left out, samples flagged media_not_rendered);"
        " openai = the parts as logged",
    )
    max_graph_tokens: int = Field(
        DEFAULT_MAX_GRAPH_TOKENS,
        ge=0,
        description="reject a conversation whose samples hold more tokens (graph_too_many_tokens); 0 = no cap",
    )
    max_graph_samples: int = Field(
        DEFAULT_MAX_GRAPH_SAMPLES,
        ge=0,
        description="reject a conversation that gives more samples (graph_too_many_samples); 0 = no cap",
    )
    max_record_mb: float = Field(
        DEFAULT_MAX_RECORD_MB,
        gt=0,
        description="reject a record (and a decoded HTTP body) larger than this many MiB (record_too_large)",
    )
    max_graph_state_mb: float = Field(
        DEFAULT_MAX_GRAPH_STATE_BYTES / 2**20,
        ge=0,
        description="reject a conversation whose rows take more MiB (graph_state_too_large); 0 = no cap",
    )
    # what to write
    format: Format = "parquet"
    target: str = Field("canonical", description="one of the export targets")
    max_length: int | None = Field(None, gt=0, description="longest row in tokens")
    overflow: Overflow = "drop"
    allow_partial_turns: bool = Field(False, description="with overflow=truncate, train the first part of a cut turn")
    split: dict[str, float] = Field(default_factory=dict, description="held-out splits, e.g. {validation: 0.05}")
    pack_length: int | None = Field(None, gt=0, description="row length for target=packed (and target=tree)")
    tree_scope: Literal["graph", "split"] = Field(
        "graph", description="target=tree: one trie per graph, or one per split buffer (merges shared prompts)"
    )
    group_by: str | None = Field(
        None,
        description="target=rl: put trajectories whose metadata KEY (example_id, info.task) or @prompt is equal in"
        " one group, across files (docs/rl.md)",
    )
    group_size: int | None = Field(
        None, gt=0, description="target=rl with group_by: keep groups of exactly N trajectories (the rest dropped)"
    )
    rows_per_shard: int = Field(DEFAULT_ROWS_PER_SHARD, gt=0)
    row_group_size: int = Field(DEFAULT_ROW_GROUP_SIZE, gt=0)
    # how to run
    workers: int = Field(1, gt=0)
    chunk_mb: float = Field(
        32,
        ge=0,
        description="cut a JSONL log larger than this (MiB) into chunks of whole conversations; 0 = never",
    )
    engine: Literal["local", "ray"] = "local"
    strict: bool = False
    max_reject_rate: float | None = Field(None, ge=0.0, le=1.0)
    resume: bool = False
    keep_missing: bool = Field(
        False, description="with resume, also publish the parts of earlier inputs that are gone (rotated logs)"
    )
    overwrite: bool = Field(False, description="replace an OUT that msgtrain did not write (its files are deleted)")
    allow_empty: bool = Field(
        False, description="publish an empty result: when the run read nothing, or over a dataset with samples"
    )
    quiet: bool = False

    def __init__(self, **data: Any) -> None:
        # Keyword construction (the CLI's path) reports problems as ConfigError, like load_config does.
        try:
            super().__init__(**data)
        except pydantic.ValidationError as e:
            raise _config_error(e, where=None) from None

    @field_validator("target")
    @classmethod
    def _known_target(cls, value: str) -> str:
        if value not in TARGETS:
            raise ConfigError(f"unknown target {value!r}", hint=f"choose one of: {', '.join(TARGETS)}")
        return value

    @field_validator("input_format")
    @classmethod
    def _known_format(cls, value: str | None) -> str | None:
        # The registry's names without importing every reader (msgtrain.ingest.catalog is its listing).
        from msgtrain.ingest.catalog import FORMATS

        names = [name for name, _, _ in FORMATS]
        if value is not None and value not in names:
            close = difflib.get_close_matches(value, names, n=1)
            raise ConfigError(
                f"unknown input format {value!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
                hint=f"choose one of: {', '.join(names)} (msgtrain formats lists them)",
            )
        return value

    @field_validator("context", mode="before")
    @classmethod
    def _context_entries(cls, value: Any) -> Any:
        from msgtrain.ingest.supplied import check_entries

        return check_entries(value)

    @field_validator("split", mode="before")
    @classmethod
    def _parse_split(cls, value: Any) -> dict[str, float]:
        return parse_split_spec(value)

    @field_validator("render_date", mode="before")
    @classmethod
    def _iso_date(cls, value: Any) -> str | None:
        if value is None or isinstance(value, dt.date):  # YAML reads an unquoted 2025-01-31 as a date
            return value.isoformat() if value is not None else None
        try:
            return dt.date.fromisoformat(str(value)).isoformat()
        except ValueError:
            raise ConfigError(
                f"render_date {value!r} is not a date", hint="write YYYY-MM-DD, e.g. 2025-01-31"
            ) from None

    @field_validator("inputs", "policies", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str | Path) else value

    @field_validator("inputs", mode="before")
    @classmethod
    def _locations(cls, value: Any) -> Any:
        if isinstance(value, str | Path):
            value = [value]
        return [_location(v) for v in value] if isinstance(value, list | tuple) else value

    @field_validator("output", mode="before")
    @classmethod
    def _output_location(cls, value: Any) -> Any:
        return _location(value)

    @model_validator(mode="before")
    @classmethod
    def _derive_pack_and_max_length(cls, data: Any) -> Any:
        # A row of packed or tree rows holds at most pack_length tokens, and a sample (a tree's root path) must
        # fit one row whole: pack_length implies max_length, so samples longer than a row go through the one
        # overflow policy (drop by default, each drop counted and listed) instead of failing the run. Packed
        # rows also need a length, so for them max_length implies pack_length; a tree without pack_length is
        # one row per tree and needs no limit.
        if isinstance(data, dict) and data.get("target") in ("dpo", "kto") and data.get("train_negative") is None:
            # the undesirable replies are half of what these targets are for
            data = {**data, "train_negative": True}
        if isinstance(data, dict) and data.get("target") in ("packed", "tree"):
            data = dict(data)
            if (
                data.get("target") == "packed"
                and data.get("pack_length") is None
                and data.get("max_length") is not None
            ):
                data["pack_length"] = data["max_length"]
            if data.get("max_length") is None and data.get("pack_length") is not None:
                data["max_length"] = data["pack_length"]
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ConvertConfig:
        if self.target == "packed" and self.pack_length is None:
            raise ConfigError(
                "target packed needs a row length",
                hint="set pack_length (or max_length), e.g. --pack-length 4096",
            )
        if self.target not in ("packed", "tree") and self.pack_length is not None:
            raise ConfigError(
                "pack_length only applies to targets packed and tree",
                hint="drop pack_length or use --target packed / --target tree",
            )
        if self.target != "tree" and self.tree_scope != "graph":
            raise ConfigError("tree_scope only applies to target tree", hint="drop tree_scope or use --target tree")
        if self.pack_length is not None and self.max_length is not None and self.max_length > self.pack_length:
            raise ConfigError(
                f"max_length {self.max_length} is longer than pack_length {self.pack_length}",
                hint="a sample longer than a pack cannot be packed; make max_length <= pack_length",
            )
        if (self.group_by is not None or self.group_size is not None) and self.target != "rl":
            raise ConfigError("group_by and group_size only apply to target rl", hint="drop them or use --target rl")
        if self.group_size is not None and self.group_by is None:
            raise ConfigError(
                "group_size needs group_by (what makes trajectories one group)",
                hint="add --group-by KEY, e.g. --group-by example_id",
            )
        if self.group_by is not None:
            check_group_key(self.group_by)
        if self.overflow != "drop" and self.max_length is None:
            raise ConfigError(
                f"overflow {self.overflow!r} needs max_length", hint="set max_length, e.g. --max-length 8192"
            )
        if self.allow_partial_turns and self.overflow != "truncate":
            raise ConfigError(
                "allow_partial_turns only applies to overflow truncate",
                hint="set overflow: truncate or drop the option",
            )
        return self

    def require_io(self) -> None:
        """Raise unless the config names inputs and an output (shipped configs leave both to the CLI)."""
        if not self.inputs:
            raise ConfigError("no inputs", hint="pass log files or directories, or set inputs: in the config")
        if self.output is None:
            raise ConfigError("no output directory", hint="pass -o OUT or set output: in the config")

    def output_settings(self) -> dict[str, Any]:
        """The settings that change the written data, JSON-ready (what :meth:`config_hash` hashes)."""
        data = self.model_dump(mode="json")
        settings = {name: data[name] for name in sorted(OUTPUT_SETTINGS)}
        # Split order decides the hash intervals (parse_split_spec), so it must survive sort_keys; the policy
        # filter is a set, so its order must not count.
        settings["split"] = [[name, fraction] for name, fraction in self.split.items()]
        settings["policies"] = sorted(self.policies)
        return settings

    def config_hash(self) -> str:
        """SHA-256 (hex) of :meth:`output_settings` plus the config version: equal settings, equal hash.

        Inputs, output paths and run-only settings (workers, engine, quiet...) do not enter the hash: the
        manifest records input files by content separately. The tokenizer and chat template enter by name/path
        as given.
        """
        payload = json.dumps({"version": CONFIG_VERSION, **self.output_settings()}, sort_keys=True)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


OUTPUT_SETTINGS = frozenset(
    {
        "input_format",
        "mapping",
        "context",
        "system_prompt",
        "tools",
        "tokenizer",
        "chat_template",
        "render_date",
        "content_special_tokens",
        "train_negative",
        "engine_ids_mismatch",
        "content_format",
        "train_dropped",
        "max_graph_tokens",
        "max_graph_samples",
        "max_graph_state_mb",
        "max_record_mb",
        "policies",
        "format",
        "target",
        "max_length",
        "overflow",
        "allow_partial_turns",
        "split",
        "pack_length",
        "tree_scope",
        "group_by",
        "group_size",
        "rows_per_shard",
        "row_group_size",
    }
)
RUN_SETTINGS = frozenset(
    {
        "inputs",
        "output",
        "rejects",
        "workers",
        "chunk_mb",
        "engine",
        "strict",
        "max_reject_rate",
        "resume",
        "keep_missing",
        "overwrite",
        "allow_empty",
        "quiet",
    }
)


def _field_names() -> list[str]:
    return list(ConvertConfig.model_fields)


def _unknown_key_error(key: str, where: str | None) -> ConfigError:
    names = _field_names()
    close = difflib.get_close_matches(key, names, n=1)
    hint = (f"did you mean {close[0]!r}? " if close else "") + f"valid keys: {', '.join(names)}"
    return ConfigError(f"unknown key {key!r}", where=where, hint=hint, code="unknown_key")


def _config_error(error: pydantic.ValidationError, where: str | None) -> MsgtrainError:
    """The first validation problem as one actionable ConfigError (``key: what was wrong``)."""
    first = error.errors()[0]
    key = ".".join(str(part) for part in first["loc"]) or "config"
    original = (first.get("ctx") or {}).get("error")
    if isinstance(original, MsgtrainError):
        located = " ".join(part for part in (where, ".".join(str(p) for p in first["loc"])) if part) or None
        return type(original)(original.message, where=located, hint=original.hint, code=original.code)
    if first["type"] == "extra_forbidden":
        return _unknown_key_error(key, where)
    if first["type"] == "literal_error":
        expected = (first.get("ctx") or {}).get("expected", "")
        return ConfigError(f"{key}: {first['msg']}", where=where, hint=f"choose one of {expected}")
    return ConfigError(f"{key}: {first['msg']} (got {first.get('input')!r})", where=where)


def _normalise_keys(data: Mapping[str, Any], where: str | None) -> dict[str, Any]:
    names = set(_field_names())
    out: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key).replace("-", "_")
        if key not in names:
            raise _unknown_key_error(str(raw_key), where)
        out[key] = value
    return out


def load_config_data(path: str | Path) -> dict[str, Any]:
    """Read a YAML config into a dict of known keys (unknown keys are a ConfigError listing the valid ones).

    Values are validated when the dict becomes a :class:`ConvertConfig` (:func:`merge_cli`,
    :func:`load_config`).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(
            f"cannot read config: {e.strerror or e}", where=str(path), hint="check the --config path"
        ) from e
    import yaml  # only for a --config file: a convert without one does not import it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"not valid YAML: {getattr(e, 'problem', None) or e}", where=where) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"a config file must be a mapping of option: value, got {type(data).__name__}", where=str(path)
        )
    return _normalise_keys(data, str(path))


def _build(data: Mapping[str, Any], where: str | None) -> ConvertConfig:
    try:
        return ConvertConfig.model_validate(dict(data))
    except pydantic.ValidationError as e:
        raise _config_error(e, where) from None


def load_config(path: str | Path) -> ConvertConfig:
    """Load and validate a YAML config file."""
    return _build(load_config_data(path), str(path))


def merge_cli(file_data: Mapping[str, Any] | ConvertConfig | None, given: Mapping[str, Any]) -> ConvertConfig:
    """Defaults < config file < CLI: ``given`` holds only the flags the user actually passed.

    ``None`` values in ``given`` mean "not given" and never override the file (CLI layers that cannot tell an
    absent flag from its default should pass ``None`` for absent ones).
    """
    if isinstance(file_data, ConvertConfig):
        base: dict[str, Any] = file_data.model_dump(exclude_unset=True)
    else:
        base = dict(file_data or {})
    overrides = _normalise_keys({k: v for k, v in given.items() if v is not None}, "command line")
    return _build({**base, **overrides}, None)
