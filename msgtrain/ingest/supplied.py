"""Supplied context: per source, the system prompt and tool schemas a log does not record, from the user's files.

Configured as ``context:`` in a convert config (a list of entries), and for the one-off case as ``system_prompt``
/ ``tools`` (``--system-prompt FILE`` / ``--tools FILE``), which apply to every file no entry supplies::

    context:
      - format: claude_code                   # a reader name, or a list of them; omitted = any
        glob: "**/.claude/projects/**"        # a glob on the input path, or a list; omitted = any
        system_prompt: prompts/claude-code.txt
        tools: prompts/claude-code-tools.json

Invariants:
- Files are read once, when the settings are made (:func:`context_text`): the settings then carry their content
  (canonical JSON), so a worker on another machine needs no access to them and a changed file changes the part key
  (a resumed run reconverts).
- A system prompt file is UTF-8 text, taken verbatim except for one final line break (``\\n`` or ``\\r\\n``),
  which editors add and prompts rarely end with. A tools file is JSON: a list of tool schemas, or an object with a
  ``tools`` list (a saved request body); OpenAI function tools, Anthropic ``input_schema`` tools and the other
  shapes of :mod:`msgtrain.ingest.common.tool_schemas` are normalised to OpenAI function tools.
- Each part is taken from the first entry that matches the file and gives that part, then from the top-level
  ``system_prompt`` / ``tools``; what the log holds is kept (:func:`msgtrain.model.supply.supply_context`).
- A glob without a leading ``/`` (or a URL scheme) matches the end of the path at a folder boundary, as if it
  began with ``**/``; ``*`` and ``?`` stay within a folder, ``**`` spans folders. It is matched against the path
  as the input was named and against its absolute form.
- Every mistake is a :class:`ConfigError` naming the entry (``context[1].tools``), the file and what to fix.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from msgtrain.errors import ConfigError, MsgtrainError
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.core.events import ReadEvent, ReadGraph
from msgtrain.model.supply import SUPPLIED_FLAGS, supply_context

_ENTRY_KEYS = ("format", "glob", "system_prompt", "tools")


@dataclass(frozen=True)
class ContextRule:
    """One entry: which files it matches, and what it supplies (``None`` where it supplies nothing)."""

    formats: tuple[str, ...] = ()
    globs: tuple[str, ...] = ()
    system_prompt: str | None = None
    system_prompt_file: str | None = None
    tools: tuple[Any, ...] | None = None
    tools_file: str | None = None

    @cached_property
    def _patterns(self) -> list[re.Pattern[str]]:
        return [glob_pattern(g) for g in self.globs]

    def matches(self, reader: str, source: str) -> bool:
        """Whether this entry applies to a file read by ``reader``, named ``source``."""
        if self.formats and reader not in self.formats:
            return False
        return not self.globs or any(glob_matches(p, source) for p in self._patterns)

    def to_data(self) -> dict[str, Any]:
        return {
            "formats": list(self.formats),
            "globs": list(self.globs),
            "system_prompt": None if self.system_prompt is None else [self.system_prompt_file, self.system_prompt],
            "tools": None if self.tools is None else [self.tools_file, list(self.tools)],
        }

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> ContextRule:
        prompt, tools = data.get("system_prompt"), data.get("tools")
        return cls(
            formats=tuple(data.get("formats", ())),
            globs=tuple(data.get("globs", ())),
            system_prompt=prompt[1] if prompt else None,
            system_prompt_file=prompt[0] if prompt else None,
            tools=tuple(tools[1]) if tools else None,
            tools_file=tools[0] if tools else None,
        )


def check_entries(entries: Any) -> list[dict[str, Any]]:
    """The ``context:`` entries of a config, their shape checked (files are read later, by :func:`context_text`).
    Raises :class:`ConfigError` naming the entry and key."""
    if entries is None:
        return []
    if not isinstance(entries, list | tuple):
        raise ConfigError(
            f"context must be a list of entries, got {type(entries).__name__}",
            hint="write context: [{format: claude_code, system_prompt: FILE, tools: FILE}, ...]",
        )
    from msgtrain.ingest.catalog import FORMATS  # the registry's names, without importing every reader

    names = [name for name, _, _ in FORMATS]
    out = []
    for i, entry in enumerate(entries):
        where = f"context[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} is not a mapping", hint=f"an entry has the keys {', '.join(_ENTRY_KEYS)}")
        entry = {str(k).replace("-", "_"): v for k, v in entry.items()}
        for key in entry:
            if key not in _ENTRY_KEYS:
                close = difflib.get_close_matches(key, _ENTRY_KEYS, n=1)
                raise ConfigError(
                    f"{where}: unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
                    hint=f"an entry has the keys {', '.join(_ENTRY_KEYS)}",
                )
        if entry.get("system_prompt") is None and entry.get("tools") is None:
            raise ConfigError(
                f"{where} supplies nothing", hint="give it system_prompt: FILE and/or tools: FILE, or remove it"
            )
        for key in ("format", "glob"):
            values = entry.get(key)
            values = [values] if isinstance(values, str) else values
            if values is not None and not (isinstance(values, list) and all(isinstance(v, str) for v in values)):
                raise ConfigError(f"{where}.{key} must be a string or a list of strings, got {values!r}")
            entry[key] = values or []
        for name in entry["format"]:
            if name not in names:
                close = difflib.get_close_matches(name, names, n=1)
                raise ConfigError(
                    f"{where}.format: unknown input format {name!r}"
                    + (f" (did you mean {close[0]!r}?)" if close else ""),
                    hint=f"choose among: {', '.join(names)} (msgtrain formats lists them)",
                )
        for key in ("system_prompt", "tools"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                raise ConfigError(f"{where}.{key} must be a file path, got {entry[key]!r}")
        out.append(entry)
    return out


def load_rules(
    entries: Sequence[dict[str, Any]], system_prompt: str | Path | None = None, tools: str | Path | None = None
) -> list[ContextRule]:
    """The rules of checked ``context:`` entries and of the top-level ``system_prompt`` / ``tools`` (last, matching
    every file), their files read. Raises :class:`ConfigError` for a file that cannot be read or is not what it
    should be."""
    rules = []
    for i, entry in enumerate(check_entries(list(entries))):
        rules.append(
            _rule(entry["format"], entry["glob"], entry.get("system_prompt"), entry.get("tools"), f"context[{i}]")
        )
    if system_prompt is not None or tools is not None:
        rules.append(_rule([], [], system_prompt, tools, ""))
    return rules


def context_text(
    entries: Sequence[dict[str, Any]] | None, system_prompt: str | Path | None = None, tools: str | Path | None = None
) -> str | None:
    """The supplied context as canonical JSON text (None when there is none): what settings carry across processes
    and into the part key."""
    rules = load_rules(entries or [], system_prompt, tools)
    return json.dumps([r.to_data() for r in rules], sort_keys=True, ensure_ascii=False) if rules else None


@lru_cache(maxsize=4)
def rules_from_text(text: str | None) -> tuple[ContextRule, ...]:
    """The rules of :func:`context_text`'s text; parsed once per process (a run of many small files reads the same
    settings for each)."""
    return tuple(ContextRule.from_data(d) for d in json.loads(text)) if text else ()


def with_supplied_context(
    events: Iterable[ReadEvent], rules: Sequence[ContextRule], reader: str, source: str
) -> Iterator[ReadEvent]:
    """The events of one file read by ``reader`` (named ``source``), each graph given the context the rules supply
    where its log lacks it; the file's other events unchanged."""
    matching = [r for r in rules if r.matches(reader, source)]
    if not matching:
        yield from events
        return
    prompt_rule = next((r for r in matching if r.system_prompt is not None), None)
    tools_rule = next((r for r in matching if r.tools is not None), None)
    labels = {
        part: label
        for part, rule, label in (
            ("system_prompt", prompt_rule, prompt_rule and prompt_rule.system_prompt_file),
            ("tools", tools_rule, tools_rule and tools_rule.tools_file),
        )
        if rule is not None and label
    }
    for ev in events:
        if isinstance(ev, ReadGraph):
            graph = supply_context(
                ev.graph,
                system_prompt=prompt_rule.system_prompt if prompt_rule else None,
                tools=tools_rule.tools if tools_rule else None,
                labels=labels,
            )
            if graph is not ev.graph:
                supplied = graph.metadata.get("context_supplied", {})
                ev = ReadGraph(graph, ev.source, ev.records, {**ev.extras, "context_supplied": supplied})
        yield ev


def unmatched_globs(rules: Sequence[ContextRule], files: Iterable[Path | str]) -> list[str]:
    """The globs of ``rules`` that match none of ``files`` (the run's inputs): each is a warning, since an entry
    that matches nothing supplies nothing."""
    names = [str(f) for f in files]
    return [
        g
        for r in rules
        for g, p in zip(r.globs, r._patterns, strict=True)
        if not any(glob_matches(p, n) for n in names)
    ]


# ------------------------------------------------------------------------------------------------------------ globs


def glob_pattern(glob: str) -> re.Pattern[str]:
    """A compiled glob: ``**`` spans folders, ``*`` / ``?`` / ``[...]`` stay within one; a relative glob matches the
    end of a path at a folder boundary."""
    anchored = glob.startswith("/") or "://" in glob
    out = [] if anchored else ["(?:^|.*/)"]
    i = 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := glob.find("]", i + 2)) != -1:
            body = glob[i + 1 : end]
            negate, body = body[0] in "!^", body[1:] if body[0] in "!^" else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\").replace("^", "\\^") + "]")
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + "/?$")


def glob_matches(pattern: re.Pattern[str], source: str) -> bool:
    given = source[2:] if source.startswith("./") else source
    if pattern.match(given):
        return True
    return "://" not in source and bool(pattern.match(os.path.abspath(source)))


# ------------------------------------------------------------------------------------------------------------ files


def _rule(
    formats: list[str], globs: list[str], prompt_file: str | Path | None, tools_file: str | Path | None, where: str
) -> ContextRule:
    return ContextRule(
        formats=tuple(formats),
        globs=tuple(globs),
        system_prompt=_read_prompt(prompt_file, f"{where}.system_prompt" if where else "--system-prompt")
        if prompt_file is not None
        else None,
        system_prompt_file=str(prompt_file) if prompt_file is not None else None,
        tools=tuple(_read_tools(tools_file, f"{where}.tools" if where else "--tools"))
        if tools_file is not None
        else None,
        tools_file=str(tools_file) if tools_file is not None else None,
    )


def _read_text(path: str | Path, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{what}: file not found",
            where=str(path),
            hint="check the path (relative paths are from the current folder)",
        ) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what}: not UTF-8 text ({e.reason} at byte {e.start})", where=str(path)) from None
    except OSError as e:
        raise ConfigError(f"{what}: cannot read the file: {e.strerror or e}", where=str(path)) from None


def _read_prompt(path: str | Path, what: str) -> str:
    text = _read_text(path, what)
    for ending in ("\r\n", "\n"):
        if text.endswith(ending):
            return text[: -len(ending)]
    return text


def _read_tools(path: str | Path, what: str) -> list[Any]:
    text = _read_text(path, what)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{what}: not valid JSON: {e.msg}",
            where=f"{path}:{e.lineno}:{e.colno}",
            hint="a tools file is a JSON list of tool schemas (OpenAI function tools or Anthropic input_schema ones)",
        ) from None
    if isinstance(data, dict) and isinstance(data.get("tools"), list):
        data = data["tools"]
    if not isinstance(data, list):
        raise ConfigError(
            f"{what}: a tools file holds a JSON list of tool schemas (or an object with a tools list), "
            f"got a JSON {type(data).__name__}",
            where=str(path),
            hint='write [{"type": "function", "function": {"name": ..., "parameters": {...}}}, ...]',
        )
    try:
        tools = openai_tools(data, where=str(path))
    except MsgtrainError as e:
        raise ConfigError(f"{what}: {e.message}", where=str(path), hint=e.hint) from None
    if not tools:
        raise ConfigError(f"{what}: the file holds no tool schema", where=str(path), hint="remove it or fill it")
    for i, tool in enumerate(tools):
        function = tool.get("function") if tool.get("type") == "function" else None
        # A provider's built-in tool (web search...) has a type of its own; anything else must be a named function.
        if (function is None and "type" not in tool) or (function is not None and not function.get("name")):
            raise ConfigError(
                f"{what}: tool {i} has no name",
                where=str(path),
                hint="each tool is a function schema with a name and parameters (OpenAI or Anthropic shape)",
            )
    return tools


def supplied_report(
    entries: Sequence[dict[str, Any]],
    system_prompt: str | None,
    tools: str | None,
    sources: Iterable[str],
    flags: dict[str, int],
) -> dict[str, Any] | None:
    """``report.json``'s ``context_supplied`` block (None without supplied context): the samples whose system
    prompt or tools were supplied (their flags' counts), the entries, and the globs that matched none of the run's
    ``sources`` (each a warning: an entry that matches nothing supplies nothing). Reads no file."""
    rules = [
        ContextRule(
            formats=tuple(e["format"]),
            globs=tuple(e["glob"]),
            system_prompt_file=e.get("system_prompt"),
            tools_file=e.get("tools"),
        )
        for e in check_entries(list(entries))
    ]
    if system_prompt is not None or tools is not None:
        rules.append(ContextRule(system_prompt_file=system_prompt, tools_file=tools))
    if not rules:
        return None
    return {
        "samples": {part: flags.get(flag, 0) for part, flag in SUPPLIED_FLAGS.items()},
        "entries": [
            {
                "format": list(r.formats),
                "glob": list(r.globs),
                "system_prompt": r.system_prompt_file,
                "tools": r.tools_file,
            }
            for r in rules
        ],
        "unmatched_globs": unmatched_globs(rules, sources),
    }
