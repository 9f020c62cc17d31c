"""The structural reader: conversations found by their shape in JSON / JSONL / YAML no specific reader claims.

It is the fallback: detection offers it a file only when no other reader claims it (``fallback = True``, see
:func:`msgtrain.ingest.detect.detect_format`), or when the user forces it (``--input-format structural``) or gives
a mapping (``--map``, :mod:`msgtrain.ingest.structure.mapping`).

What it finds in each record (a JSONL line, an item of a top-level array, or the whole document), searching nested
objects and lists (outermost first, never inside a conversation it found):

- **messages**: a list of message-like objects (:mod:`msgtrain.ingest.common.message_like`: a role-like and a
  content-like key, roles through one vocabulary, tool calls in OpenAI / Anthropic / Gemini shapes), or a list of
  items each wrapping one message under the same key (:func:`~msgtrain.ingest.common.message_like.wrapped_messages`);
- **prompt_completion**: ``prompt`` + ``completion`` (strings, one message each, or message lists as
  PrimeIntellect verifiers and TRL write them), and the other pairs of :data:`PAIR_KEYS` (``input`` + ``output`` of
  eval and tracing tools...); a reply may be an OpenAI response body (``{"choices": [{"message"}]}``, one
  choice). Only the completion is trained: assistant messages of the prompt are context (``injected``); a prompt
  that is the text a chat template rendered is parsed back into its messages
  (:mod:`~msgtrain.ingest.common.rendered_prompts`), the replies keeping the logged text as their exact prompt;
- **preference**: ``chosen`` + ``rejected`` (with a ``prompt``, a LLaMA-Factory ``conversations`` list, or an
  implicit prompt: the common prefix of the two). One graph, the prompt then two sibling branches; the chosen
  reply is trained, the rejected reply is marked ``preference: rejected`` (dropped as ``negative_label``
  unless asked for);
- **alpaca**: ``instruction`` (+ ``input``) + ``output`` (+ ``system``, ``history``), as LLaMA-Factory reads it.

One message per line (JSONL) is one conversation; a first line that holds nothing message-like is the session's
header (goose writes its working directory and token counts there): a skip (``session_header``).

Sibling fields of the conversation are carried to the rows: scalars (``reward``, ``score``, ``label``, ids,
``model``...) and small objects; ``reward`` (else a numeric ``score``) is the rows' reward; a boolean ``label``
(KTO) marks the trained reply (``label: false`` is never trained as a positive example unless asked for);
``tools`` / ``functions`` are the tools the policy saw; ``system`` / ``system_prompt`` is the system prompt when
the messages hold none.

It is conservative: a turn is trained only where its context is unambiguous. Anything else is a reject naming the
JSON path and what was ambiguous (``ambiguous_structure``): two message lists side by side, assistant messages of
several named speakers (which one is the policy, and how it saw the others?), a system prompt both in the
messages and beside them that differ (unless the one beside starts the one inside: a template the messages hold
rendered, as Letta agent files keep ``system`` and the compiled system message). A role outside the vocabulary
(``unknown_role``) cuts the conversation there (a gap, below). A record that holds message-like objects in no
trainable layout is a reject saying how many assistant messages it saw; a record with none is a skip
(``no_conversation``).

Each conversation found is one record of the books (a document holding several counts several).

The rules every conversation follows (docs/formats.md, "The structural reader's rules"):

- **calls**: a record holding several message lists each beside the reply sampled for it (an agent's steps, a search
  tree's nodes) is read as a call log (:mod:`msgtrain.ingest.structure.structural_calls`): each reply after exactly its
  own messages, calls sharing a prefix sharing nodes; replies may be OpenAI, Anthropic or Gemini response bodies;
- **roles** through the table of :mod:`msgtrain.ingest.common.message_like` (case-insensitive, shaped roles, boolean
  role flags);
- **gaps**: a message that cannot be read ends the conversation for training
  (:class:`~msgtrain.ingest.structure.steps.Gap`): replies before it are trained, replies after it kept as context the
  log does not hold; a conversation with nothing trainable before its first bad message is rejected as a whole;
- **context** (:mod:`msgtrain.ingest.structure.context`): a system prompt beside the messages, in a settings object
  beside them or in an enclosing object, and tools kept by an enclosing object (those it names by ``tool_ids`` when it
  does), are the conversation's; of several interleaved system messages each reply sees the latest before it
  (``append_steps`` in conversation_files);
- **trees** (:mod:`msgtrain.ingest.structure.trees`): nested ``children`` / ``replies``, ``parentMessageId``-style
  links, messages keyed by id: each branch a sample, siblings versions of one context;
- with a mapping, paths may step into list items (``steps[].input``) and trees (``children[]*``):
  :mod:`msgtrain.ingest.structure.mapping_paths`.

The reader is split along those seams; each module states its own invariants:

- :mod:`~msgtrain.ingest.structure.found`: what a search finds (``Found``, ``Ambiguity``) and the value shapes it
  judges by;
- :mod:`~msgtrain.ingest.structure.locate`: the search, record by record (which layout an object holds);
- :mod:`~msgtrain.ingest.structure.context`: a conversation's system prompt and tools, from beside or above it;
- :mod:`~msgtrain.ingest.structure.steps`: messages into steps, cut at a gap; the checks every conversation passes;
- :mod:`~msgtrain.ingest.structure.trees`: message trees and message-per-line files;
- :mod:`~msgtrain.ingest.structure.convert`: one found conversation → its graph, layout by layout;
- this module: records of a file, detection, the reader (call logs across records, the fault boundary's tasks).
"""

from __future__ import annotations

import io
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from msgtrain.errors import MsgtrainError, ParseError, ValidationError
from msgtrain.ingest.common.conversation_files import iter_raw_records
from msgtrain.ingest.common.head_shape import HeadShape, head_shape
from msgtrain.ingest.common.json_bodies import archive_entries, decoded_bodies, head_with_bodies
from msgtrain.ingest.common.message_like import (
    CALL_KEYS,
    CONTENT_KEYS,
    PREFERENCE_KEYS,
    ROLE_FLAGS,
    ROLE_KEYS,
    ROLE_VOCABULARY,
    TAGGED_ROLES,
    canonical_role,
    content_key_of,
    is_message_list,
    message_like_count,
    unwrapped,
)
from msgtrain.ingest.core.base import (
    HEAD_BYTES,
    PARSED_TEXT_GROWTH,
    ReadEvent,
    ReadItem,
    ReadReject,
    ReadSkip,
    RecordTask,
    SourceRef,
    excerpt,
    head_objects,
)
from msgtrain.ingest.structure.convert import convert_found
from msgtrain.ingest.structure.found import (
    SCORE_LIST_KEYS,
    Ambiguity,
    Found,
    assistant_like,
    choice_messages,
    link_keys,
)
from msgtrain.ingest.structure.locate import (
    ALPACA_PAIRS,
    CANDIDATE_LISTS,
    JUDGED_PAIRS,
    NUMBERED_KEY,
    PAIR_KEYS,
    SAMPLE_LISTS,
    SAMPLE_PROMPT_KEYS,
    SCALED_PAIRS,
    locate,
)
from msgtrain.ingest.structure.mapping import BARE_LIST, NEEDED, Mapping
from msgtrain.ingest.structure.mapping_paths import mapping_units, unit_prefix
from msgtrain.ingest.structure.structural_calls import (
    choice_calls,
    continuation_groups,
    logged_dialogue,
    logged_opening,
    paired_halves,
    read_call_items,
    read_calls,
)
from msgtrain.ingest.structure.trees import lone_message, message_lines, session_runs

YAML_SUFFIXES = (".yaml", ".yml")


def file_records(path: Path) -> Iterator[tuple[SourceRef, Any, Any]]:
    """(ref, value or the parse error, raw for excerpts) per record: JSONL lines, a top-level array's items (unless
    the array is itself one conversation), or the whole document; YAML files are one document."""
    if path.suffix.lower() in YAML_SUFFIXES:
        yield SourceRef(str(path), "file"), _load_yaml(path), None
        return
    for rec in iter_raw_records(path):
        value = json_in_string(rec.value)
        entries = archive_entries(value) if rec.ref.record == "file" else None
        if entries is not None:  # an HTTP archive: each exchange a record, as the items of an array are
            for i, entry in enumerate(entries):
                ref = SourceRef(str(path), f"entry {i}")
                try:
                    yield ref, decoded_bodies(entry), entry
                except MsgtrainError as e:
                    yield ref, e.located(str(ref)), entry
            continue
        try:
            value = decoded_bodies(value)
        except MsgtrainError as e:  # a logged stream that failed: the call produced nothing (a reject, counted)
            value = e.located(str(rec.ref))
        if rec.ref.record == "file" and isinstance(value, list) and not is_message_list(value):
            for i, item in enumerate(value):
                yield SourceRef(str(path), f"item {i}"), item, item
            continue
        rows = table_rows(value) if rec.ref.record == "file" else None
        if rows is not None:  # a table saved as columns and rows: each row a record, as the items of an array are
            for i, row in enumerate(rows):
                yield SourceRef(str(path), f"row {i}"), row, row
            continue
        yield rec.ref, value, rec.raw if rec.raw is not None else value


def table_rows(value: Any) -> list[dict[str, Any]] | None:
    """The rows of a table saved as a header and rows (a W&B ``Table``'s JSON, ``{"_type": "table", "columns",
    "data"}``, as TRL's trainers log sampled completions; pandas' ``to_json(orient="split")``), each a record keyed by
    the columns; None for anything else: the columns distinct strings, every row a list as long as they are."""
    if not isinstance(value, dict):
        return None
    columns, data = value.get("columns"), value.get("data")
    if not (isinstance(columns, list) and columns and all(isinstance(c, str) for c in columns)):
        return None
    if len(set(columns)) != len(columns) or not (isinstance(data, list) and data):
        return None
    if not all(isinstance(row, list) and len(row) == len(columns) for row in data):
        return None
    return [dict(zip(columns, row, strict=True)) for row in data]


def _parsed_size_bound(path: Path) -> int | None:
    """An upper bound of the compact JSON text of any value :func:`file_records` parses from a JSON / JSONL file (its
    size times :data:`~msgtrain.ingest.core.events.PARSED_TEXT_GROWTH`: every record is parsed from the file's own
    text, a string's JSON text from a part of it); None for YAML, whose aliases repeat nodes."""
    if path.suffix.lower() in YAML_SUFFIXES:
        return None
    try:
        return PARSED_TEXT_GROWTH * path.stat().st_size
    except OSError:
        return None


def json_in_string(value: Any) -> Any:
    """The object a record saved as a JSON string holding JSON text stands for (LlamaIndex's
    ``SimpleChatStore.persist`` writes ``json.dump`` of the store's JSON text: the file is one string literal), or the
    value as it is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            inner = json.loads(value)
        except (ValueError, RecursionError):
            return value
        if isinstance(inner, dict | list):
            return inner
    return value


def _head_in_string(head: bytes) -> bytes:
    """The head of the JSON text a file's first string literal holds (see :func:`json_in_string`), for detection; the
    head as it is when it does not open with such a literal. A literal cut by the end of the head is read up to its
    last whole escape."""
    text = head.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    if not text.startswith(('"{', '"[')):
        return head
    try:
        inner, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        inner = None
        for cut in range(len(text), max(len(text) - 8, 1), -1):  # an escape cut in two: drop its start
            try:
                inner = json.loads(text[:cut] + '"')
                break
            except ValueError:
                continue
    return inner.encode("utf-8") if isinstance(inner, str) else head


def _load_yaml(path: Path) -> Any:
    from msgtrain.ingest.core.base import check_whole_file, open_input
    from msgtrain.ingest.core.yaml_documents import load_yaml_bounded

    try:
        check_whole_file(path.stat().st_size, str(path), "YAML document", "split it into several files")
        with io.TextIOWrapper(open_input(path), encoding="utf-8") as f:
            return load_yaml_bounded(f, str(path))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        return ParseError(f"not valid YAML: {e}", where=str(path), code="bad_yaml")
    except MsgtrainError as e:
        return e


def _sub_ref(ref: SourceRef, found_path: str, several: bool) -> SourceRef:
    if not several or found_path == "$":
        return ref
    return SourceRef(ref.file, f"{ref.record} {found_path}" if ref.record != "file" else found_path)


_PAI = frozenset({"request", "response"})
# a top-level key whose value opens as a list of [text, text] pairs
_PAIR_HISTORY = re.compile(rb'^\s*\{.*?"[^"\\]+"\s*:\s*\[\s*\[\s*"(?:[^"\\]|\\.)*"\s*,\s*"', re.S)
_ROLES = frozenset(ROLE_VOCABULARY)  # a ``sender`` naming one of them is a role (Claude.ai's export)
_FRAGMENT_TYPES = ("REQUEST", "RESPONSE")  # the typed fragments of a DeepSeek export's messages


def _pair_in(shape: HeadShape, context: str, reply: str) -> bool:
    """True if a record, or an object directly under one of its keys, holds both keys of a (context, reply) pair
    (openai/evals logs each sample as ``{"type": "sampling", "data": {"prompt", "sampled"}}``). Deeper pairs (a
    report's ``steps[].input`` / ``output`` with the prompt never logged) do not make a file a conversation log."""
    tail = f".{context}"
    return any(
        p.endswith(tail)
        and (owner := p[: -len(tail)]).count(".") <= 1
        and "[" not in owner
        and f"{owner}.{reply}" in shape.paths
        for p in shape.paths
    )


def _scored_samples_in(shape: HeadShape) -> bool:
    """True if a record, or the items of a list under one of its keys (LMFlow's ``{"type", "instances": [...]}``,
    which RLHFlow's best-of-n files use), holds a prompt and n samples with their rewards, beside them or in each
    (:func:`~msgtrain.ingest.structure.locate.scored_samples`)."""
    for p in shape.paths:
        owner, _, key = p.rpartition(".")
        if (
            key in SAMPLE_LISTS
            and owner.count(".") <= 1
            and owner.count("[") <= 1
            and (f"{p}[].reward" in shape.paths or any(f"{owner}.{k}" in shape.paths for k in SCORE_LIST_KEYS))
            and any(f"{owner}.{k}" in shape.paths for k in SAMPLE_PROMPT_KEYS)
        ):
            return True
    return False


# A string field opening the JSON text of a message list: ``"[{\"role\": ...`` (the quotes escaped in the field).
_JSON_TEXT_MESSAGES = re.compile(rb'"\[\s*\{\s*\\"(?:role|from)\\"\s*:')


class StructuralReader:
    name = "structural"
    description = (
        "fallback for any JSON / JSONL / YAML: message lists (role/from/author/speaker + content/value/text/parts), "
        "prompt/completion, chosen/rejected, alpaca; found by shape (see `msgtrain formats --explain FILE`)"
    )
    example = "sample_logs/structural/chat_export.jsonl"
    fallback = True  # offered a file only when no specific reader claims it (msgtrain.ingest.detect)

    def __init__(self, mapping: Mapping | None = None):
        self.mapping = mapping

    def detect(self, path: Path, head: bytes) -> bool:
        if path.suffix.lower() in YAML_SUFFIXES:
            try:
                value = _load_yaml(path) if path.stat().st_size <= 4 * HEAD_BYTES else None
            except OSError:
                return False
            return value is not None and not isinstance(value, MsgtrainError) and message_like_count(value)[0] > 0
        shape = head_shape(head_with_bodies(_head_in_string(head)))
        if shape.layout == "other":
            return False
        if _JSON_TEXT_MESSAGES.search(head):
            return True  # a field holding the JSON text of a message list (a dataset's messages column)
        for p in shape.paths:
            stem, _, key = p.rpartition(".")
            listed = stem.endswith("[]") or stem == "" or stem.rpartition(".")[0].endswith("[]")  # items, wrapped
            role_like = key in ROLE_KEYS or key in ROLE_FLAGS or (key == "sender" and shape.any_value(p, _ROLES))
            if role_like and listed and any(f"{stem}.{c}" in shape.paths for c in CONTENT_KEYS):
                return True
            if role_like and listed and shape.has(f"{stem}.blocks", f"{stem}.additional_kwargs"):
                return True  # LlamaIndex ChatMessages: their content in typed blocks
            if key == "role" and listed and shape.has(f"{stem}.role.value") and shape.has(f"{stem}.contents"):
                return True  # Agent Framework ChatMessages: a role enum object, typed contents
            owner, _, tag = stem.rpartition(".")
            if key == "content" and tag in TAGGED_ROLES and owner.endswith("[]"):
                return True  # messages as Rust enum variants ({"User": {"content": [...]}}: Zed's threads)
            owner = p.removesuffix(".parts[].part_kind")
            if owner != p and (owner == "" or owner.endswith("[]")) and shape.any_value(f"{owner}.kind", _PAI):
                return True  # pydantic-ai ModelMessages: kind request / response, parts with a part_kind
        numbered: dict[tuple[str, str], int] = {}  # numbered messages (message_1, message_2, ...): per stem
        for p in shape.paths:
            stem, _, key = p.rpartition(".")
            parent, _, last = stem.rpartition(".")
            hit = NUMBERED_KEY.match(last) if key in ROLE_KEYS else None
            if hit is not None and any(f"{stem}.{c}" in shape.paths for c in CONTENT_KEYS):
                numbered[parent, hit.group("stem")] = numbered.get((parent, hit.group("stem")), 0) + 1
        if any(n >= 2 for n in numbered.values()):
            return True
        for p in shape.paths:  # LangChain's serialised messages (dumpd's constructors, {"type", "data"}), opencode's
            # {"info", "parts"}
            for wrapper, marker in ((".kwargs.content", ".lc"), (".data.content", ".type"), (".info.role", ".parts")):
                owner = p.removesuffix(wrapper)
                if owner != p and owner.endswith("[]") and f"{owner}{marker}" in shape.paths:
                    return True
            owner = p.removesuffix(".fragments[].type")  # DeepSeek's messages: typed fragments, the role in them
            if owner != p and shape.any_value(p, frozenset(_FRAGMENT_TYPES)):
                return True
            owner = p.removesuffix(".step_id")  # ATIF trajectories: steps of {step_id, source, message}
            if owner != p and owner.endswith("[]") and shape.has(f"{owner}.source", f"{owner}.message"):
                return True
            owner = p.removesuffix(".message.content")  # memory records: the message beside its role at the backend
            if owner != p and (owner == "" or owner.endswith("[]")) and f"{owner}.role_at_backend" in shape.paths:
                return True
        if shape.layout == "object" and _PAIR_HISTORY.search(head):
            return True  # a chat history of [user, reply] pairs (text-generation-webui's saved chats)
        for p in shape.paths:  # a node map: {id: {message: {author/role...}, parent}} (ChatGPT's mapping)
            stem, _, key = p.rpartition(".")
            if key in ROLE_KEYS and stem.endswith(".message") and f"{stem[: -len('.message')]}.parent" in shape.paths:
                return True
        if any(p.endswith(".request.prompt") for p in shape.paths) and any(
            p.endswith(".result.completions[].text") for p in shape.paths
        ):
            return True  # HELM request states, wherever the document keeps them
        if any(p.endswith("[].prompt.raw") for p in shape.paths) and any(
            p.endswith("[].response.output") for p in shape.paths
        ):
            return True  # promptfoo eval results (results.results[])
        pairs = (
            *PAIR_KEYS,
            *PREFERENCE_KEYS,
            *ALPACA_PAIRS,
            *((a, b) for a, b, *_ in JUDGED_PAIRS),
            *((a, b) for a, b, _ in SCALED_PAIRS),
            *((p, c) for p in ("instruction", "prompt") for c in CANDIDATE_LISTS),
            ("prompt", "labels"),  # stepwise supervision and MT-bench answers: rejected, counted
            ("question_id", "choices"),
            ("custom_id", "response.body"),  # Batch API results: rejected, saying where their requests are
            ("custom_id", "result.message"),
        )
        return any(_pair_in(shape, a, b) for a, b in pairs) or _scored_samples_in(shape) or _rendered_rollouts(head)

    def read(self, path: Path) -> Iterator[ReadItem]:
        records = file_records(path)
        first = next(records, None)
        if first is None:
            return
        if self.mapping is None and first[0].record.startswith("line ") and _session_header(first[1]):
            # A session header line (goose: working_dir, token counts), then one message per line.
            second = next(records, None)
            if second is not None and lone_message(second[1]):
                yield ReadSkip(first[0], "session_header")
                first = second
            elif second is not None:
                records = itertools.chain([second], records)
        stream: Iterator[tuple[SourceRef, Any, Any]] = itertools.chain([first], records)
        if self.mapping is not None and self.mapping.reads_bare_lists:
            yield from self._message_runs(path, stream)
            return
        if self.mapping is None and first[0].record.startswith("line ") and lone_message(first[1]):
            yield from message_lines(path, stream)
            return
        if self.mapping is None and first[0].record == "file" and isinstance(first[1], list):
            items = [(SourceRef(str(path), f"item {i}"), v) for i, v in enumerate(first[1])]
            if is_message_list(first[1]) and link_keys(items) is not None:  # a JSON array of message rows, a tree
                yield from message_lines(path, ((ref, v, v) for ref, v in items))
                return
        if self.mapping is None:
            stream = paired_halves(stream)  # calls logged as a request record, then a response record
        stream, chained = _call_log_file(stream, self.mapping)
        bound = _parsed_size_bound(path)
        calls: list[tuple[SourceRef, Found, list[Any]]] = []
        texts: list[tuple[SourceRef, Any, Any, Found]] = []  # text prompt / reply records of a call log
        for ref, value, raw in stream:
            if isinstance(value, MsgtrainError):
                yield ReadReject(ref, value, excerpt(raw) if isinstance(raw, bytes) else "")
                continue
            one = _one_call(value, self.mapping) if chained else None
            if one is not None:  # kept until the file ends: later records may continue it
                calls.append((ref, one, one.mapping.field_of(one.holder, "prompt")))
                continue
            text = _text_pair(value) if chained and self.mapping is None else None
            if text is not None:  # kept until the file ends: it may be a summary of calls (below)
                texts.append((ref, value, raw, text))
                continue
            for item in self._record(path, ref, value, raw):
                yield replace(item, size_bound=bound) if bound is not None and isinstance(item, RecordTask) else item
        said = [_call_texts(found) for _, found, _ in calls]
        for ref, value, raw, text in texts:
            if _summary_of_calls(text, said):
                yield ReadSkip(ref, "summary_of_calls")
            else:
                yield from self._record(path, ref, value, raw)
        for group in continuation_groups([prompt for _, _, prompt in calls]):
            items = [(calls[i][0], calls[i][1]) for i in group]
            task = partial(read_call_items, path, items[0][0], items, None, convert_found)
            yield RecordTask(items[0][0], task, records=len(items), raw=calls[group[0]][1].holder)

    def _message_runs(self, path: Path, stream: Iterator[tuple[SourceRef, Any, Any]]) -> Iterator[ReadItem]:
        """A mapped read whose messages may be the record itself (``$``): a run of records that are each one message
        is one conversation (a file of one message per line is one run), ended by a record holding a conversation; a
        record that is neither is its own reject and cuts the run there (the replies after it were sampled in a
        context the file no longer holds whole: context, never trained), as does one before the run starts."""
        assert self.mapping is not None
        run: list[tuple[SourceRef, Any]] = []
        cut: int | None = None
        rejected_before = False
        for ref, value, raw in stream:
            if not isinstance(value, MsgtrainError) and lone_message(value):
                cut = 0 if not run and rejected_before else cut
                run.append((ref, value))
                continue
            holds = isinstance(value, list) or (isinstance(value, dict) and self.mapping.names_a_conversation_in(value))
            if holds:
                if run:
                    yield from session_runs(path, run, cut)
                run, cut, rejected_before = [], None, False
            elif run:
                cut = len(run) if cut is None else cut
            else:
                rejected_before = True
            if isinstance(value, MsgtrainError):
                yield ReadReject(ref, value, excerpt(raw) if isinstance(raw, bytes) else "")
            else:
                yield from self._record(path, ref, value, raw)
        if run:
            yield from session_runs(path, run, cut)

    def _record(self, path: Path, ref: SourceRef, value: Any, raw: Any) -> Iterator[ReadItem]:
        if self.mapping is not None:
            if isinstance(value, list) and self.mapping.reads_bare_lists:
                value = {BARE_LIST: value}  # the record is the message list the mapping's ``$`` names
            if not isinstance(value, dict):
                err = ValidationError(
                    "record is not an object the mapping can read",
                    code="not_a_conversation",
                    hint="a mapping reads objects; `$` among the messages paths reads a record that is a message list",
                )
                yield ReadReject(ref, err.located(str(ref)), excerpt(raw))
                return
            if unit_prefix(self.mapping) is None and not self.mapping.names_a_conversation_in(value):
                named = sorted({p for c in NEEDED[self.mapping.layout] for p in self.mapping.paths_of(c)})
                err = ValidationError(
                    f"record holds none of the mapping's conversation fields ({', '.join(named)})",
                    code="not_a_conversation",
                    hint="each record holds one of those fields; fix the mapping's columns, or the record",
                )
                yield ReadReject(ref, err.located(str(ref)), excerpt(raw), turns=message_like_count(value)[1])
                return
            try:
                units = mapping_units(self.mapping, value)
            except MsgtrainError as e:
                yield ReadReject(ref, e.located(str(ref)), excerpt(raw), turns=message_like_count(value)[1])
                return
            empty = [u for u in units if u[2].layout == "messages" and u[2].field_of(u[1], "messages") == []]
            found: list[Found | Ambiguity] = [Found(w, h, m) for w, h, m in units if not any(u[1] is h for u in empty)]
            if not found:
                yield ReadSkip(ref, "empty_conversation" if empty else "no_conversation")
                return
        else:
            found = locate(value)
        if not found:
            messages, assistants = message_like_count(value)
            if messages:
                err = ValidationError(
                    f"holds {messages} message-like objects ({assistants} from an assistant) in no layout msgtrain "
                    "reads unambiguously",
                    code="ambiguous_structure",
                    hint="write a mapping (--map) naming the messages field; `msgtrain formats --explain FILE`",
                )
                yield ReadReject(ref, err.located(str(ref)), excerpt(raw), turns=assistants)
            else:
                yield ReadSkip(ref, "no_conversation")
            return
        calls = [f for f in found if _is_call(f)]
        if (
            len(calls) > 1
        ):  # several calls in one record: read as a call log (msgtrain.ingest.structure.structural_calls)
            found = [f for f in found if not any(f is c for c in calls)]
            copies = [f for f in found if _copy_of_calls(f, calls)]
            if copies:  # a run tree's chain runs, a span's state: the calls' messages again, no reply of their own
                found = [f for f in found if not any(f is c for c in copies)]
                yield ReadSkip(ref, "copy_of_calls", count=len(copies))
            yield RecordTask(
                ref, partial(read_calls, path, ref, calls, raw, convert_found), records=len(calls), raw=raw
            )
        several = len(found) > 1 or len(calls) > 1
        for item in found:
            sub = _sub_ref(ref, item.path, several)
            if isinstance(item, Ambiguity):
                err = ValidationError(
                    f"{item.path}: {item.message} ({item.assistant_messages} assistant messages not trained)",
                    code="ambiguous_structure",
                    hint="say which with a mapping (--map); `msgtrain formats --explain FILE` prints one to edit",
                )
                yield ReadReject(sub, err.located(str(sub)), excerpt(raw), turns=item.assistant_messages)
                continue
            if len(choice_calls(item)) > 1:  # n > 1 choices of one call: sibling samples (structural_calls)
                yield RecordTask(sub, partial(read_calls, path, sub, [item], raw, convert_found), records=1, raw=raw)
                continue
            yield RecordTask(sub, _task(path, sub, item, raw), records=1, raw=raw)


def _text_pair(value: Any) -> Found | None:
    """The one text prompt / reply pair a record is (a trace's root span: the user's question, the final answer),
    or None."""
    found = locate(value) if isinstance(value, dict) else []
    if len(found) != 1 or not isinstance(found[0], Found) or found[0].mapping.layout != "prompt_completion":
        return None
    return found[0] if isinstance(found[0].mapping.field_of(found[0].holder, "prompt"), str) else None


def _text_of(message: Any) -> str | None:
    inner = unwrapped(message)
    if isinstance(inner, str):
        return inner
    content = inner.get(content_key_of(inner) or "content") if isinstance(inner, dict) else None
    return content if isinstance(content, str) else None


def _call_texts(call: Found) -> tuple[set[str], set[str]]:
    """(the texts of a call's replies, the texts of the messages it sent)."""
    replies = {t for m in _sampled(call) if (t := _text_of(m))}
    prompt = call.mapping.field_of(call.holder, "prompt")
    sent = {t for m in (prompt if isinstance(prompt, list) else []) if (t := _text_of(m))}
    return replies, sent


def _summary_of_calls(text: Found, calls: list[tuple[set[str], set[str]]]) -> bool:
    """Whether a text prompt / reply record of a call log says what one of its calls says: the reply that call
    sampled, after a prompt that call sent among more messages (a trace's root span beside its LLM spans: Braintrust's
    and Weave's span rows). Read, it would train the reply a second time, after a context without the system prompt,
    the calls and results the model saw."""
    completion = text.mapping.field_of(text.holder, "completion")
    reply = completion if isinstance(completion, str) else _text_of(completion)
    prompt = text.mapping.field_of(text.holder, "prompt")
    if not reply or not isinstance(prompt, str):
        return False
    return any(reply in replies and prompt in sent for replies, sent in calls)


def _copy_of_calls(found: Found | Ambiguity, calls: list[Found | Ambiguity]) -> bool:
    """Whether a conversation found beside a record's calls holds no reply but theirs: each of its assistant
    messages says what a call's sampled reply says, message and calls alike (none at all: the messages a call was
    sent). A run tree's chain runs (LangSmith: a graph node's input and output state), a parent span's input and
    output, hold the calls' messages again; read, they would train the calls' replies twice, the second time in a
    context that lacks what the call was sent (its system prompt)."""
    if not isinstance(found, Found) or found.mapping.layout not in ("messages", "prompt_completion"):
        return False
    replies = {_reply_said(m) for c in calls if isinstance(c, Found) for m in _sampled(c)}
    columns = ("messages",) if found.mapping.layout == "messages" else ("prompt", "completion")
    messages = [m for col in columns for m in _as_messages(found.mapping.field_of(found.holder, col))]
    return all(_reply_said(m) in replies for m in messages if assistant_like(m))


def _sampled(call: Found) -> list[Any]:
    """The reply messages a call's completion holds."""
    return [m for m in _as_messages(call.mapping.field_of(call.holder, "completion")) if assistant_like(m)]


def _as_messages(value: Any) -> list[Any]:
    """A message, a response body, a list of them (LangChain's generations: a list per prompt) as messages."""
    if isinstance(value, dict):
        return choice_messages(value) or [value]
    if isinstance(value, list):
        return [m for v in value for m in (_as_messages(v) if isinstance(v, list) else [v])]
    return []


def _reply_said(message: Any) -> str:
    """What a reply says and calls, to tell a copy of a reply from another reply."""
    inner = unwrapped(message)
    if not isinstance(inner, dict):
        return json.dumps(inner, sort_keys=True, default=str)
    key = content_key_of(inner)
    calls = [inner.get(k) for k in CALL_KEYS if inner.get(k)]
    named = [
        [c.get("name") or (c.get("function") or {}).get("name") for c in group if isinstance(c, dict)]
        for group in calls
        if isinstance(group, list)
    ]
    return json.dumps([inner.get(key) if key is not None else None, named], sort_keys=True, default=str)


def _one_call(value: Any, mapping: Mapping | None) -> Found | None:
    """The one call a record is (a message list beside its reply, nothing else found in it), or None."""
    if not isinstance(value, dict):
        return None
    if mapping is not None:
        try:
            units = mapping_units(mapping, value)
        except MsgtrainError:
            return None
        found: list[Found | Ambiguity] = [Found(w, h, m) for w, h, m in units]
    else:
        found = locate(value)
    return found[0] if len(found) == 1 and isinstance(found[0], Found) and _is_call(found[0]) else None


# Records looked at to decide whether a file is a call log: enough to see a session's second call when several
# sessions' calls are interleaved, few enough that the sniff costs a bounded amount of reading.
CALL_LOG_SAMPLE = 64


def _call_log_file(
    stream: Iterator[tuple[SourceRef, Any, Any]], mapping: Mapping | None
) -> tuple[Iterator[tuple[SourceRef, Any, Any]], bool]:
    """(the stream, whether the file is a call log): among its first :data:`CALL_LOG_SAMPLE` records, one that is
    one call re-sends an earlier call's messages and more (an agent's calls logged one per line, several sessions
    interleaved or not; records that cannot be parsed are passed over). Only then are its calls kept until the file
    ends and joined into conversations (which calls are one conversation is the call log's rule, whatever decided
    this); a file whose records are independent conversations streams record by record."""
    head = list(itertools.islice(stream, CALL_LOG_SAMPLE))
    stream = itertools.chain(head, stream)
    # earlier calls' dialogues by their first message: a call that continues one re-sends it, the first one included
    # (its system prompt may have changed since); an export sorted newest first logs the continuing call before
    earlier: dict[str, list[list[Any]]] = {}
    for _, value, _ in head:
        one = None if isinstance(value, MsgtrainError) else _one_call(value, mapping)
        prompt = one.mapping.field_of(one.holder, "prompt") if one is not None else None
        if not isinstance(prompt, list) or not prompt:
            continue
        dialogue = logged_dialogue(prompt)
        same = earlier.setdefault(logged_opening(prompt), [])
        if any(_prefix(a, dialogue) or _prefix(dialogue, a) for a in same):
            return stream, True
        same.append(dialogue)
    return stream, False


def _prefix(shorter: list[Any], longer: list[Any]) -> bool:
    return 0 < len(shorter) < len(longer) and longer[: len(shorter)] == shorter


def _is_call(found: Found | Ambiguity) -> bool:
    """A prompt / completion find whose prompt is a message list: a model call (what it sent, what it got)."""
    if not isinstance(found, Found) or found.mapping.layout != "prompt_completion" or found.group is not None:
        return False  # one of n rollouts of one context is a rollout of its own, never joined with the others
    return is_message_list(found.mapping.field_of(found.holder, "prompt"))


def _task(path: Path, ref: SourceRef, found: Found, raw: Any) -> Any:
    def parse() -> list[ReadEvent]:
        try:
            return convert_found(path, ref, found)
        except MsgtrainError as e:  # ``file:line $.messages[3]``: the record, then the JSON path inside it
            turns = max(_replies_in(found), message_like_count(found.holder)[1])
            return [ReadReject(ref, e.located(str(ref)), excerpt(raw), turns=turns)]

    return parse


def _replies_in(found: Found) -> int:
    """The replies a found conversation would have trained: what its reject costs the books, text replies too
    (a string completion is no message-like object the generic estimate could count)."""
    m, holder = found.mapping, found.holder
    if m.layout == "preference":
        return 2
    if m.layout == "alpaca":
        history = m.field_of(holder, "history")
        return 1 + (len(history) if isinstance(history, list) else 0)
    if m.layout == "prompt_completion":
        completion = m.field_of(holder, "completion")
        return message_like_count(completion)[1] if isinstance(completion, list) else 1
    return message_like_count(m.field_of(holder, "messages"))[1]


READER = StructuralReader()


def _rendered_rollouts(head: bytes) -> bool:
    """Whether the head's first whole records hold whole conversations a chat template rendered (an RL group's
    rollouts, :func:`~msgtrain.ingest.structure.locate.rendered_transcripts`): texts the key paths of a head do not
    show (they keep short values only)."""
    if not any(m in head for m in (b"<|", "｜".encode(), b"<start_of_turn>", b"[/INST]")):
        return False  # no family's control text: nothing to parse
    return any(isinstance(f, Found) and f.rendered for record in head_objects(head, limit=4) for f in locate(record))


def _session_header(value: Any) -> bool:
    """A record that holds nothing message-like: a session's header line, when one message per line follows."""
    return isinstance(value, dict) and message_like_count(value)[0] == 0


# Top-level fields that name a generated reply in eval and dataset rows (output, response_1, model_answer,
# generated_text, NeMo Gym's policy_response, DeepEval's actual_output / actualOutput, ...): what a file nothing could
# read still held, when it holds no message-like object.
_REPLY_FIELD = re.compile(
    r"^(?:(?:model|policy|assistant|agent|llm|actual)_?)?"
    r"(?:output|response|completion|answer|prediction|generation|reply|generated_text|sampled|judgment)"
    r"(?:_?(?:\d+|[ab]))?s?$"
)


def _reply_fields(value: Any, depth: int = 0) -> int:
    """Generated replies a record holds as text under reply-like fields (:data:`_REPLY_FIELD`); a record with none
    of its own, those of the rows it lists (a test run's ``testCases``: DeepEval's test run file), one level down."""
    if not isinstance(value, dict):
        return 0
    own = _own_reply_fields(value)
    if own or depth:
        return own
    rows = (row for item in value.values() if isinstance(item, list) for row in item if isinstance(row, dict))
    return sum(_reply_fields(row, depth + 1) for row in rows)


def _own_reply_fields(value: dict[str, Any]) -> int:
    count = 0
    for key, item in value.items():
        if not isinstance(key, str) or _REPLY_FIELD.match(key.lower()) is None:
            continue
        if isinstance(item, str) and item.strip():
            count += 1
        elif isinstance(item, list) and item and all(isinstance(t, str) for t in item):
            count += len(item)
    return count


def _assistant_rows(value: Any) -> int:
    """Objects a record holds that say an assistant spoke (a role key naming it) but keep what it said elsewhere
    (Cherry Studio's backup: each message names the ``blocks`` its text is kept in, in another table), counted with
    a bounded walk: replies a file nothing could read still held."""
    stack, seen, count = [value], 0, 0
    while stack and seen < _MAX_ROW_WALK:
        item = stack.pop()
        seen += 1
        if isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, dict | list))
        elif isinstance(item, dict):
            role = item.get("role")
            if isinstance(role, str) and canonical_role(role) == "assistant":
                count += 1
                continue
            stack.extend(v for v in item.values() if isinstance(v, dict | list))
    return count


_MAX_ROW_WALK = 100_000


def file_assistant_turns(path: Path) -> int:
    """An estimate of the assistant turns a whole file holds (for the books of a file nothing could read): its
    assistant-like messages, record by record, else its replies under reply-like fields (``output``,
    ``response_1``...; an eval's rows hold no message objects); 0 for a file that is not JSON / JSONL / YAML or too
    large."""
    from msgtrain.ingest.common.message_like import MAX_COUNT_BYTES, assistant_turns_in

    try:
        if path.is_dir() or path.stat().st_size > MAX_COUNT_BYTES:
            return 0
        values = [value for _, value, _ in file_records(path) if not isinstance(value, Exception)]
        return (
            sum(assistant_turns_in(v) for v in values)
            or sum(map(_reply_fields, values))
            or sum(map(_assistant_rows, values))
        )
    except Exception:  # an estimate for the books never becomes a fault of its own
        return 0
