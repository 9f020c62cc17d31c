"""The structural reader: conversations found by their shape in JSON / JSONL / YAML no specific reader claims.

It is the fallback: detection offers it a file only when no other reader claims it (``fallback = True``, see
:func:`msgtrain.ingest.detect.detect_format`), or when the user forces it (``--input-format structural``) or gives
a mapping (``--map``, :mod:`msgtrain.ingest.structure.mapping`).

What it finds in each record (a JSONL line, an item of a top-level array, or the whole document), searching nested
objects and lists (outermost first, never inside a conversation it found):

- **messages**: a list of message-like objects (:mod:`msgtrain.ingest.common.shapes`: a role-like and a content-like
  key, roles through one vocabulary, tool calls in OpenAI / Anthropic / Gemini shapes), or a list of items each
  wrapping one message under the same key (:func:`~msgtrain.ingest.common.shapes.wrapped_messages`);
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
- **roles** through the table of :mod:`msgtrain.ingest.common.shapes` (case-insensitive, shaped roles, boolean role
flags);
- **gaps**: a message that cannot be read ends the conversation for training (:class:`Gap`): replies before it are
  trained, replies after it kept as context the log does not hold; a conversation with nothing trainable before its
  first bad message is rejected as a whole;
- **context**: a system prompt beside the messages, in a settings object beside them or in an enclosing object, and
  tools kept by an enclosing object (those it names by ``tool_ids`` when it does), are the conversation's; of several
  interleaved system messages each reply sees the latest before it (``append_steps`` in conversation_files);
- **trees**: nested ``children`` / ``replies``, ``parentMessageId``-style links, messages keyed by id: each branch a
  sample, siblings versions of one context;
- with a mapping, paths may step into list items (``steps[].input``) and trees (``children[]*``):
  :mod:`msgtrain.ingest.structure.mapping_paths`.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from msgtrain.errors import MsgtrainError, ParseError, ValidationError
from msgtrain.ingest.common.conversation_files import (
    Step,
    append_steps,
    base_graph_id,
    check_pairing,
    content_graph_id,
    iter_raw_records,
    logged_reply,
    mark_last_reply,
)
from msgtrain.ingest.common.head_shape import head_shape
from msgtrain.ingest.common.media_columns import MEDIA_COLUMNS, MediaColumns
from msgtrain.ingest.common.rendered_prompts import RENDERED_PROMPT_KEY, RenderedPrompt, parse_rendered_prompt
from msgtrain.ingest.common.shapes import (
    CONTENT_KEYS,
    PREFERENCE_KEYS,
    ROLE_FLAGS,
    ROLE_KEYS,
    SHAPED_ROLES,
    MessageNormaliser,
    canonical_role,
    content_key_of,
    is_message_like,
    is_message_list,
    is_wrapper,
    message_like_count,
    named_agents,
    named_agents_error,
    parse_transcript,
    role_of,
    unwrapped,
    wrapped_messages,
)
from msgtrain.ingest.common.tool_schemas import openai_tools
from msgtrain.ingest.core.base import (
    HEAD_BYTES,
    ReadEvent,
    ReadGraph,
    ReadItem,
    ReadReject,
    ReadSkip,
    RecordTask,
    SourceRef,
    excerpt,
)
from msgtrain.ingest.structure.mapping import Mapping, dig, top_fields
from msgtrain.ingest.structure.mapping_paths import mapping_units
from msgtrain.ingest.structure.node_maps import node_map_graph, node_map_key
from msgtrain.ingest.structure.structural_calls import continuation_groups, read_call_items, read_calls
from msgtrain.model.completeness import UNLOGGED_TOOLS, mark_calls_without_tools, mark_context_incomplete
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.message import OptionCallMessage, PartsMessage, TextPart
from msgtrain.model.openai import check_reply_present, from_openai_message

MAX_SEARCH_DEPTH = 6  # containers searched below a record for a conversation
MAX_SEARCH_NODES = 20_000  # objects and lists looked at per record
MAX_EXTRA_JSON = 4096  # sibling objects larger than this (as JSON) are not carried to the rows
MAX_YAML_BYTES = 64 * 1024 * 1024
YAML_SUFFIXES = (".yaml", ".yml")

# Where a record keeps its conversation's system prompt, beside the messages or in an ancestor of them: chat UIs'
# exports (chatbot-ui ``prompt``, LibreChat ``promptPrefix``), Cohere v1's ``preamble``, OpenAI ``instructions``.
_SYSTEM_KEYS = ("system", "system_prompt", "systemPrompt", "instructions", "preamble", "promptPrefix")
# An agent's base system prompt, which its framework extends when it calls the model (AgentScope's ReActAgent state
# ``_sys_prompt``, to which the prompts of its registered skills are added): the system message the calls were sent
# is not in the log, so the conversations under it are marked incomplete for it, never given the base as if exact.
_BASE_SYSTEM_KEYS = ("_sys_prompt",)
# (context, reply) key pairs of one generation: TRL / verifiers prompt + completion, and the input / output of
# eval and tracing tools (a generation span's input messages and its output).
PAIR_KEYS = (
    ("prompt", "completion"),
    ("prompt", "response"),
    ("input", "output"),
    ("input", "completion"),
    ("messages", "completion"),
    ("messages", "response"),
    ("input", "response"),  # agent trajectories' per-step {input: [messages], response: ChatCompletion | Message}
    ("messages", "output"),
    ("history", "response"),
    ("origin_prompt", "prediction"),  # OpenCompass predictions/<model>/<dataset>.json
    ("input_prompt", "output_response"),  # SkyRL evaluation dumps
    ("prompt", "sampled"),  # openai/evals recorder "sampling" events
    ("user_prompt", "judgment"),  # FastChat llm_judge model_judgment lines: the judge's prompt and verdict
    ("messages", "actual_message"),  # OpenAI Swarm eval results: the messages sent, the n replies sampled for them
)
_UNLOGGED_SYSTEM_PAIRS = frozenset({("user_prompt", "judgment")})
# Where a preference record's prompt is (Intel/orca_dpo_pairs writes ``question``; OpenAI ``input.messages``).
_PREFERENCE_PROMPT_KEYS = ("prompt", "input", "question", "instruction", "query")
# A request beside its result, as HELM's scenario_state.json logs each request_state (the chat models' clients send
# the prompt as the user message) and as per-call logs of text-completion APIs do.
_REQUEST_RESULT_PAIRS = (
    ("request.prompt", "result.completions"),
    ("request.messages", "result.completions"),
    # A LangSmith LLM run: its one prompt's messages and the generations they got (batches of one; a batch of more
    # leaves the other prompts beside the pair, which rejects the run as holding replies it does not read).
    ("inputs.messages.0", "outputs.generations.0"),
    # Gateways' and tracers' request/response logs: Helicone's request_body / response_body, W&B Weave calls'
    # inputs / output, bodies under request.body / response.body.
    ("request_body.messages", "response_body"),
    ("inputs.messages", "output"),
    ("input.messages", "output"),  # Langfuse observations as LiteLLM's callback sends them (batch[].body)
    ("request.body.messages", "response.body"),
    # promptfoo eval results (results.results[]): the prompt sent (text, or a chat as JSON text) and the output
    ("prompt.raw", "response.output"),
)
# A judge's pass / fail of a reply, nested in its record (promptfoo's gradingResult): a label like KTO's.
_NESTED_LABEL_KEYS = ("gradingResult.pass",)
_ALPACA_PAIRS = (
    ("instruction", "output"),
    ("instruction", "response"),
    ("question", "response"),
    ("query", "response"),
)
_TOOL_KEYS = ("tools", "functions")
_REWARD_KEYS = ("reward", "score")
_LABEL_KEYS = ("label", "kto_tag")


@dataclass
class Found:
    """A conversation found in a record: where (``path``), in which ``layout``, read through ``mapping``
    (``mapping.columns`` are keys of ``holder``, the object around the conversation)."""

    path: str
    holder: dict[str, Any]
    mapping: Mapping
    node_map: bool = (
        False  # ``mapping.columns["messages"]`` is a node map (msgtrain.ingest.structure.node_maps), not a list
    )
    # the system prompt and tools an ancestor of ``holder`` keeps for it: {"system" | "tools": (JSON path, value)}
    inherited: dict[str, tuple[str, Any]] = field(default_factory=dict)
    unlogged_system: bool = False  # the log format never saves the system message its agent was sent
    # how a preference pair's two sides are judged: chosen / rejected, or a judge's tie (both good, both bad)
    marks: tuple[str | None, str | None] = ("chosen", "rejected")


@dataclass
class Ambiguity:
    """A spot that holds message-like content no layout reads unambiguously."""

    path: str
    message: str
    assistant_messages: int


@dataclass
class _Search:
    nodes: int = 0
    found: list[Found | Ambiguity] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- finding


def locate(value: Any, path: str = "$") -> list[Found | Ambiguity]:
    """Every conversation (or ambiguous spot) in ``value``, outermost first (module docstring)."""
    search = _Search()
    _locate(value, path, 0, search, {})
    return search.found


def _context_here(value: dict[str, Any], path: str, inherited: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """What an object passes down to the conversations inside it: its system prompt and tools (its own keys win
    over its ancestors')."""
    out = dict(inherited)
    # an ancestor's ``prompt`` or ``instructions`` is as often the task as a system prompt: only sibling keys say so
    keys = [k for k in _SYSTEM_KEYS if k != "instructions"]
    system = next((k for k in keys if isinstance(value.get(k), str) and value[k].strip()), None)
    if system is not None:
        out["system"] = (f"{path}.{system}", value[system])
    base = next((k for k in _BASE_SYSTEM_KEYS if isinstance(value.get(k), str) and value[k].strip()), None)
    if base is not None:
        out["base_system"] = (f"{path}.{base}", value[base])
    tools = next((k for k in _TOOL_KEYS if isinstance(value.get(k), list) and value[k]), None)
    if tools is not None:
        out["tools"] = (f"{path}.{tools}", value[tools])
    return out


def _locate(value: Any, path: str, depth: int, search: _Search, inherited: dict[str, tuple[str, Any]]) -> None:
    search.nodes += 1
    if search.nodes > MAX_SEARCH_NODES:
        return
    if isinstance(value, list):
        children = tree_key(value)
        if children is not None:  # nested children arrays (a chat UI's export, a search tree): each branch a sample
            found = Found(
                path, {"messages": value}, Mapping("messages", {"messages": "messages", "children": children})
            )
            search.found.append(_inheriting(found, inherited))
            return
        if is_message_list(value):
            agents = named_agents(value)
            if agents:
                search.found.append(_agents_ambiguity(path, agents, value))
                return
            found = Found(path, {"messages": value}, Mapping("messages", {"messages": "messages"}))
            search.found.append(_inheriting(found, inherited))
            return
        wrapped = wrapped_messages(value)
        if wrapped is not None:  # each item holds its message under one key, beside its own bookkeeping
            key, messages = wrapped
            found = Found(f"{path}[].{key}", {"messages": messages}, Mapping("messages", {"messages": "messages"}))
            search.found.append(_inheriting(found, inherited))
            return
        if depth < MAX_SEARCH_DEPTH:
            for i, item in enumerate(value):
                if isinstance(item, dict | list):
                    _locate(item, f"{path}[{i}]", depth + 1, search, inherited)
        return
    if not isinstance(value, dict):
        return
    hit = record_layout(value, path)
    if hit is not None:
        search.found.append(_inheriting(hit, inherited) if isinstance(hit, Found) else hit)
        return
    scored = candidates(value, path)
    if scored:
        search.found.extend(scored)
        return
    if depth < MAX_SEARCH_DEPTH:
        here = _context_here(value, path, inherited)
        for key, item in value.items():
            if isinstance(item, dict | list):
                _locate(item, f"{path}.{key}", depth + 1, search, here)


# Objects beside a conversation that hold its settings, the system prompt among them (LibreChat's ``options``).
_SETTINGS_KEYS = ("options", "settings", "config", "preset", "conversation_settings")
# A parent id that names no message: the root's (LibreChat writes the nil UUID).
_NO_PARENT = frozenset({"00000000-0000-0000-0000-000000000000", "root", ""})


def _keyed_messages(record: dict[str, Any]) -> dict[str, str] | None:
    """Columns of an object of messages keyed by their ids that name their parents (``{id: {id, parentId, role,
    content}}``), or None."""
    for key, value in record.items():
        if not (isinstance(value, dict) and value and is_message_list(list(value.values()))):
            continue
        links = _tree_keys([(SourceRef("", ""), v) for v in value.values()])
        if links is not None:
            return {"messages": key, "id": links[0], "parent": links[1]}
    return None


def _system_in_settings(record: dict[str, Any]) -> str | None:
    """The path of a system prompt kept in a settings object beside the messages (``options.promptPrefix``)."""
    for key in _SETTINGS_KEYS:
        value = record.get(key)
        if isinstance(value, dict):
            hit = next((k for k in _SYSTEM_KEYS if isinstance(value.get(k), str) and value[k].strip()), None)
            if hit is not None:
                return f"{key}.{hit}"
    return None


TREE_KEYS = ("children", "replies")


def tree_key(value: Any) -> str | None:
    """The key under which the messages of ``value`` (a message list) nest their replies as message lists (chat UI
    exports' ``children``, OpenAssistant's ``replies``), or None."""
    if not is_message_list(value):
        return None
    return next((k for k in TREE_KEYS if any(is_message_list(m.get(k)) for m in value)), None)


def _tree_events(path: Path, ref: SourceRef, found: Found) -> list[ReadEvent]:
    """Nested messages (``children`` of each message, at any depth) as a message tree: each root a graph, each path
    from it a branch, siblings sampled from the same context (a regenerated reply, an edited prompt)."""
    m = found.mapping
    if "parent" in m.columns:
        return _linked_tree_events(path, ref, found)
    key = m.columns["children"]
    roots = m.field_of(found.holder, "messages")
    if isinstance(roots, dict) and is_message_like(roots):  # the tree's one root message (OpenAssistant's prompt)
        roots = [roots]
    _need_list(roots, f"{found.path}.{m.columns['messages']}")
    children: dict[str | None, _Lines] = {}
    stack: list[tuple[Any, str | None, str]] = [
        (node, None, f"{found.path}[{i}]") for i, node in reversed(list(enumerate(roots)))
    ]
    count = 0
    while stack:
        node, parent, where = stack.pop()
        if not isinstance(node, dict):
            raise ValidationError(f"{where} is not a message", code="bad_message")
        node_id = str(count)
        count += 1
        flat = {k: v for k, v in node.items() if k != key} | {"_tree_id": node_id}
        children.setdefault(parent, []).append((SourceRef(ref.file, f"{ref.record} {where}"), flat))
        kids = node.get(key)
        if isinstance(kids, list):
            stack.extend((kid, node_id, f"{where}.{key}[{j}]") for j, kid in reversed(list(enumerate(kids))))
    return _tree_roots(path, ref, found, children, "_tree_id")


def _tree_roots(
    path: Path, ref: SourceRef, found: Found, children: dict[str | None, _Lines], id_key: str
) -> list[ReadEvent]:
    """One graph per root of a message tree, with the system prompt and tools of the record around it."""
    m = found.mapping
    system = m.field_of(found.holder, "system")
    if system is None and "system" in found.inherited:
        system = found.inherited["system"][1]
    logged = m.field_of(found.holder, "tools")
    if logged is None and "tools" in found.inherited:
        logged = _inherited_tools(found)[1]
    tools = openai_tools(logged, where=f"{found.path}.tools") if logged else []
    out: list[ReadEvent] = []
    for n, (root_ref, root) in enumerate(children.get(None, [])):
        (event,) = _tree_graph(path, root_ref if n else ref, root, children, id_key, m, tools)
        assert isinstance(event, ReadGraph)
        event.records = 1 if n == 0 else 0  # the tree is one record of the books
        if isinstance(system, str) and system.strip():
            event.graph = _under_system(event.graph, system)
        event.extras = _extras(found.holder, m)
        out.append(event)
    return out


def _under_system(graph: MessageGraph, system: str) -> MessageGraph:
    """``graph`` with ``system`` as the system message above each root (a tree's conversation-level prompt)."""
    from msgtrain.model.message import PartsMessage, TextPart

    if any(n.message.role == "system" for n in graph.nodes.values() if n.parent is None):
        return graph
    head = PartsMessage(parts=(TextPart(text=system),), role_hint_for_llm="system", policy="system")
    out = MessageGraph(graph_id=graph.graph_id, metadata=dict(graph.metadata), tools=graph.env.tools)
    top = out.add_node(None, head, origin=Origin.CONTEXT)
    ids: dict[str, str] = {}
    for node in sorted(graph.nodes.values(), key=lambda n: n.depth):
        parent = ids[node.parent] if node.parent is not None else top
        ids[node.id] = out.add_node(parent, node.message, origin=node.origin, generation=graph.generations.get(node.id))
    out.graph_id = content_graph_id(graph.graph_id.rsplit(":", 1)[0], out)
    return out


def _linked_tree_events(path: Path, ref: SourceRef, found: Found) -> list[ReadEvent]:
    """Messages that name their parent (``parentMessageId``) as a message tree (see :func:`_tree_events`)."""
    m = found.mapping
    id_key, parent_key = m.columns["id"], m.columns["parent"]
    messages = m.field_of(found.holder, "messages")
    if isinstance(messages, dict):  # keyed by id: the ids are in the messages too
        messages = list(messages.values())
    _need_list(messages, f"{found.path}.{m.columns['messages']}")
    known = {str(v.get(id_key)) for v in messages if isinstance(v, dict)}
    children: dict[str | None, _Lines] = {}
    for i, value in enumerate(messages):
        where = f"{found.path}.{m.columns['messages']}[{i}]"
        if not isinstance(value, dict) or id_key not in value:
            raise ValidationError(f"{where} has no {id_key!r}", code="bad_message")
        parent = value.get(parent_key)
        parent = None if parent is None or str(parent) in _NO_PARENT else str(parent)
        if parent is not None and parent not in known:
            raise ValidationError(
                f"{where}: its parent {parent!r} is not in the conversation: the context it was written in is unknown",
                code="orphan_message",
            )
        children.setdefault(parent, []).append((SourceRef(ref.file, f"{ref.record} {where}"), value))
    return _tree_roots(path, ref, found, children, id_key)


def _inherited_tools(found: Found) -> tuple[str, Any]:
    """(path, tools) an enclosing object keeps for ``found``: when the conversation's object names the tools it has
    by id (``tool_ids``: Letta's agents, each given some of the file's tools), only those, in its order."""
    where, tools = found.inherited["tools"]
    ids = found.holder.get("tool_ids")
    if not (isinstance(ids, list) and all(isinstance(i, str) for i in ids) and isinstance(tools, list)):
        return where, tools
    by_id = {t.get("id"): t for t in tools if isinstance(t, dict)}
    if not set(ids) <= set(by_id):
        missing = sorted(set(ids) - set(by_id))
        raise ValidationError(
            f"tool_ids name tools {missing[:3]} that {where} does not hold: the tools this conversation was sent are "
            "not all in the file",
            code="context_incomplete",
        )
    return f"{where}[id in tool_ids]", [by_id[i] for i in ids]


def _inheriting(found: Found, inherited: dict[str, tuple[str, Any]]) -> Found:
    """``found`` with the system prompt and tools its ancestors keep for it (where its own record has none)."""
    found.inherited = {k: v for k, v in inherited.items() if k not in found.mapping.columns}
    return found


def record_layout(record: dict[str, Any], path: str) -> Found | Ambiguity | None:
    """The layout of one object, if it holds a conversation directly (not in a nested object)."""
    tree = node_map_key(record)
    if tree is not None:  # a chat UI's message tree (ChatGPT's mapping): msgtrain.ingest.structure.node_maps
        return Found(path, record, Mapping("messages", {"messages": tree}), node_map=True)
    numbered = _numbered_messages(record)
    if numbered is not None:  # message_1, message_2, ... (CAMEL role-playing records): one list, in number order
        return numbered_layout(record, path, *numbered)
    keyed = _keyed_messages(record)
    if keyed is not None:  # messages keyed by their ids, each naming its parent (Open WebUI's chat.history)
        return Found(path, record, Mapping("messages", keyed))
    lists = [k for k, v in record.items() if is_message_list(v)]
    if lists and is_message_like(record):  # a message tree (OpenAssistant ``replies``): each branch a conversation
        if len(lists) > 1:
            count = _assistant_count(record)
            return Ambiguity(path, f"a message tree nested under several keys ({', '.join(lists)})", count)
        return Found(path, {"messages": [record]}, Mapping("messages", {"messages": "messages", "children": lists[0]}))
    columns: dict[str, str] = {}
    for key in _SYSTEM_KEYS:
        if isinstance(record.get(key), str) or _text_blocks(record.get(key)) is not None:
            columns["system"] = key
            break
    for key in _TOOL_KEYS:
        if record.get(key):
            columns["tools"] = key
            break
    for key in _REWARD_KEYS:
        value = record.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            columns["reward"] = key
            break
    for key in (*_LABEL_KEYS, *_NESTED_LABEL_KEYS):
        if isinstance(dig(record, key), bool):
            columns["kto_tag"] = key
            break
    unreadable = _unreadable_replies(record)
    if unreadable is not None:
        return Ambiguity(path, unreadable[0], unreadable[1])
    if _batch_result(record):
        return Ambiguity(
            path,
            "a Batch API result: the reply without the request it answers (the requests are in the batch input "
            "file: the batch reader joins the two by custom_id when they share a folder)",
            max(_assistant_count(record), 1),
        )
    judged = _judged_pair(record)
    if judged is not None:
        found = _preference_layout(record, path, columns, judged[0], lists)
        if isinstance(found, Found):
            found.marks = judged[1]
        return found
    pair = next((p for p in PREFERENCE_KEYS if _replies(record.get(p[0])) and _replies(record.get(p[1]))), None)
    if pair is not None:
        return _preference_layout(record, path, columns, pair, lists)
    alpaca = _alpaca_columns(record, lists)
    if alpaca is not None:
        return Found(path, record, Mapping("alpaca", columns | alpaca))
    for prompt_key, completion_key in (*PAIR_KEYS, *_suffixed_pairs(record), *_REQUEST_RESULT_PAIRS):
        prompt, completion = dig(record, prompt_key), dig(record, completion_key)
        if prompt is not None and _replies(completion) and _prompt_like(prompt):
            columns |= {"prompt": prompt_key, "completion": completion_key}
            request = prompt_key.rpartition(".")[0]
            tools = next((f"{request}.{k}" for k in _TOOL_KEYS if request and dig(record, f"{request}.{k}")), None)
            if tools is not None and "tools" not in columns:
                columns["tools"] = tools  # the tools the logged request sent, beside its messages
            # a judge's system prompt is in the judge_prompts file, not in its judgment lines
            unlogged = (prompt_key, completion_key) in _UNLOGGED_SYSTEM_PAIRS
            return Found(path, record, Mapping("prompt_completion", columns), unlogged_system=unlogged)
    longest = _longest_holding_the_others(record, lists)
    if longest is not None and named_agents(record[longest]):
        return _agents_ambiguity(f"{path}.{longest}", named_agents(record[longest]), record[longest])
    if longest is not None:  # one list, or a transcript beside its own prefixes (NeMo-Gym's input_message_log)
        columns["messages"] = longest
        children = tree_key(record[longest])
        if children is not None:  # its messages nest their replies: a tree
            columns["children"] = children
        links = _tree_keys([(SourceRef("", ""), v) for v in record[longest] if isinstance(v, dict)])
        if children is None and links is not None:  # its messages name their parents: a tree
            columns |= {"id": links[0], "parent": links[1]}
        if "system" not in columns:
            beside = _system_in_settings(record)
            if beside is not None:
                columns["system"] = beside
        if "system" not in columns and isinstance(record.get("prompt"), str) and record["prompt"].strip():
            columns["system"] = "prompt"  # a chat UI's conversation: its system prompt beside its messages
        return Found(path, record, Mapping("messages", columns))
    if len(lists) > 1:
        shown = ", ".join(f"{path}.{k}" for k in lists)
        count = max(_assistant_count(record[k]) for k in lists)
        return Ambiguity(path, f"several message lists side by side ({shown}): which is the conversation?", count)
    return None


_NUMBERED_KEY = re.compile(r"^(?P<stem>.*?)_?(?P<n>\d+)$")
# CAMEL's RoleType names, as its messages' ``to_dict`` writes them: which agent spoke, whatever the OpenAI role.
CAMEL_ROLE_TYPES = {"USER": "user", "ASSISTANT": "assistant"}


def _numbered_messages(record: dict[str, Any]) -> tuple[str, list[str]] | None:
    """(stem, keys in number order) when the record's message-like values are all under numbered keys of one stem
    (``message_1``, ``message_2``, ...), at least two of them; else None."""
    keys = [k for k, v in record.items() if is_message_like(v)]
    if len(keys) < 2:
        return None
    matches = [_NUMBERED_KEY.match(k) for k in keys]
    if not all(matches) or len({m.group("stem") for m in matches if m}) != 1:
        return None
    numbers = sorted((int(m.group("n")), k) for m, k in zip(matches, keys, strict=True) if m)
    if len({n for n, _ in numbers}) != len(numbers):
        return None
    return matches[0].group("stem") if matches[0] else "", [k for _, k in numbers]


def numbered_layout(record: dict[str, Any], path: str, stem: str, keys: list[str]) -> Found:
    """A record of numbered messages as one message list (``{stem}_*``, in number order). Messages that name their
    agent with CAMEL's ``role_type`` (``USER`` / ``ASSISTANT``) are read by it: in a CAMEL role-playing session both
    agents are models, and the log writes each reply's OpenAI role as its own agent saw it; the ASSISTANT agent's
    view is the one read (its replies trained, the AI user's instructions its user turns), and its system message,
    which the record does not save, is marked missing."""
    column = f"{stem}_*"  # the mapping reads the numbered fields in number order (Mapping.field_of)
    camel = all(record[k].get("role_type") in CAMEL_ROLE_TYPES for k in keys)
    mapping = Mapping("messages", {"messages": column})
    if camel:
        mapping = Mapping("messages", {"messages": column}, role_key="role_type", roles=dict(CAMEL_ROLE_TYPES))
    return Found(path, record, mapping, unlogged_system=camel)


def _agents_ambiguity(path: str, agents: list[str], messages: list[Any]) -> Ambiguity:
    """A transcript among named agents (AutoGen): refused, with the mapping that would train one of them."""
    error = named_agents_error(agents, path)
    return Ambiguity(path, f"{error.message} ({error.hint})", _assistant_count(messages))


def _alpaca_columns(record: dict[str, Any], lists: list[str]) -> dict[str, str] | None:
    """Columns of an instruction record: alpaca's ``instruction`` (+ ``input``) + ``output``, and the variants
    instruction datasets write beside no message list (databricks-dolly ``instruction`` + ``context`` +
    ``response``, OpenOrca ``question`` + ``response``, MetaMathQA ``query`` + ``response``). Beside a message list
    (Magpie repeats its conversation as ``instruction`` + ``response``), the list is the conversation."""
    prompt: str | None = None
    response: str | None = None
    if isinstance(record.get("instruction"), str) and isinstance(record.get("output"), str):
        prompt, response = "instruction", "output"
    elif not lists:
        prompt = next((k for k in ("instruction", "question", "query") if _prompt_like(record.get(k))), None)
        response = next((k for k in ("output", "response") if isinstance(record.get(k), str)), None)
    if prompt is None or response is None:
        return None
    columns = {"prompt": prompt, "response": response}
    query = next((k for k in ("input", "context") if isinstance(record.get(k), str) and k != prompt), None)
    if query is not None:
        columns["query"] = query
    if isinstance(record.get("history"), list):
        columns["history"] = "history"
    return columns


def _preference_layout(
    record: dict[str, Any], path: str, columns: dict[str, str], pair: tuple[str, str], lists: list[str]
) -> Found | Ambiguity:
    """A preference record: its two replies and where their shared context is (module docstring).

    Conversations that hold their own context (the messages both sides share, or two role-labelled text
    transcripts) need no prompt column: a ``prompt`` / ``messages`` beside them repeats it and is carried to the
    rows. Bare replies need exactly one prompt; with none, the context they were sampled in is not in the record."""
    chosen_key, rejected_key = pair
    columns |= {"chosen": chosen_key, "rejected": rejected_key}
    chosen, rejected = record[chosen_key], record[rejected_key]
    if _holds_context(chosen) and _holds_context(rejected):
        return Found(path, record, Mapping("preference", columns))
    prompts: list[tuple[str, str]] = []  # (column, path in the record)
    for key in dict.fromkeys((*_PREFERENCE_PROMPT_KEYS, *lists)):
        value = record.get(key)
        if key in pair or value is None:
            continue
        if isinstance(value, dict) and is_message_list(value.get("messages")):  # OpenAI preference fine-tuning
            prompts.append(("messages", f"{key}.messages"))
            if value.get("tools") and "tools" not in columns:
                columns["tools"] = f"{key}.tools"
        elif _prompt_like(value):
            prompts.append(("messages" if isinstance(value, list) else "prompt", key))
    if len(prompts) > 1:
        shown = ", ".join(p for _, p in prompts)
        return Ambiguity(path, f"preference pair with several prompts ({shown})", _assistant_count(record))
    if not prompts:
        return Ambiguity(
            path,
            f"preference pair ({chosen_key} / {rejected_key}) with no prompt: the context its replies were "
            "sampled in is not in the record",
            _assistant_count(record) or 2,
        )
    column, key = prompts[0]
    columns[column] = key
    return Found(path, record, Mapping("preference", columns))


# A judge's verdict on two replies: (side a, side b, the verdict's key, its values for a and for b). LMSYS Chatbot
# Arena battles (conversation_a / conversation_b, winner model_a | model_b | tie | tie (bothbad)) and PKU-SafeRLHF
# pairs (response_0 / response_1, better_response_id 0 | 1).
_JUDGED_PAIRS = (
    ("conversation_a", "conversation_b", "winner", "model_a", "model_b"),
    ("response_0", "response_1", "better_response_id", 0, 1),
)
# A judge's verdict on a scale from one side to the other: AlpacaEval annotations (instruction, output_1 / output_2,
# preference 1 = output_1 preferred, 2 = output_2, 1.5 a draw; the weighted annotators write the probability-weighted
# value between them, read by which side of 1.5 it falls on).
_SCALED_PAIRS = (("output_1", "output_2", "preference"),)
# Verdicts that prefer neither side: LMSYS writes "tie" (both good) and "tie (bothbad)".
_TIE_MARKS: dict[Any, tuple[str | None, str | None]] = {"tie": (None, None), "tie (bothbad)": ("rejected", "rejected")}


# Candidate replies to one instruction, each with its own score: UltraFeedback's ``completions`` ({model,
# response, overall_score, custom_system_prompt}), distilabel's ``generations`` + ``ratings``. Each candidate is
# its own conversation (its system prompt may differ), its score its reward; the best-scored are labelled good,
# the others bad (trained only with --train-negative, as any reply marked bad).
# berkeley-nest/Nectar: ``answers`` [{answer, model, rank}], rank 1 the best (a rank, not a score: lower is better)
_CANDIDATE_LISTS = ("completions", "generations", "candidates", "answers")
_CANDIDATE_TEXT = ("response", "text", "completion", "output", "answer")
_CANDIDATE_SCORE = ("overall_score", "score", "reward", "rating")
_CANDIDATE_SYSTEM = ("custom_system_prompt", "system_prompt", "system")
_PARALLEL_SCORES = ("ratings", "scores", "rewards")


def candidates(record: dict[str, Any], path: str) -> list[Found]:
    """One prompt-completion conversation per scored candidate of a record (see above), or none."""
    prompt_key = next((k for k in ("instruction", "prompt", "question") if _prompt_like(record.get(k))), None)
    if prompt_key is None:
        return []
    for key in _CANDIDATE_LISTS:
        items = record.get(key)
        if not isinstance(items, list) or not items:
            continue
        holders = _candidate_holders(record, key, items)
        if holders is None:
            continue
        out = []
        ranked = all("reward" not in h for h in holders)  # ranks: 1 the best; scores: the highest the best
        best = min(h["rank"] for h in holders) if ranked else max(h["reward"] for h in holders)
        for i, extra in enumerate(holders):
            # the best-judged candidates are the desirable replies; the others were judged worse than one of them,
            # so they are trained only with --train-negative (each keeps its score as reward, or its rank, either way)
            judged = extra["rank"] if ranked else extra["reward"]
            holder = {**extra, "prompt": record[prompt_key], "label": judged == best}
            columns = {"prompt": "prompt", "completion": "completion", "kto_tag": "label"}
            columns |= {c: c for c in ("system", "reward") if c in holder}
            out.append(Found(f"{path}.{key}[{i}]", holder, Mapping("prompt_completion", columns)))
        return out
    return []


def _candidate_holders(record: dict[str, Any], key: str, items: list[Any]) -> list[dict[str, Any]] | None:
    """Each candidate as {completion, reward?, system?, other scalar fields}; None unless every one is a scored
    reply (a list of anything else is no candidate list)."""
    if all(isinstance(t, str) for t in items):
        scores = next((record[k] for k in _PARALLEL_SCORES if isinstance(record.get(k), list)), None)
        if scores is None or len(scores) != len(items):
            return None
        values = [s.get("score") if isinstance(s, dict) else s for s in scores]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            return None
        return [{"completion": t, "reward": v} for t, v in zip(items, values, strict=True)]
    holders = []
    for item in items:
        if not isinstance(item, dict):
            return None
        text = next((item[k] for k in _CANDIDATE_TEXT if isinstance(item.get(k), str)), None)
        score = next((item[k] for k in _CANDIDATE_SCORE if k in item), None)
        judged = {"reward": score} if score is not None else {"rank": item.get("rank")}
        value = next(iter(judged.values()))
        if text is None or not (isinstance(value, int | float) and not isinstance(value, bool)):
            return None
        holder = {k: v for k, v in item.items() if not isinstance(v, dict | list) and k not in _CANDIDATE_TEXT}
        holder |= {"completion": text, **judged}
        system = next((item[k] for k in _CANDIDATE_SYSTEM if isinstance(item.get(k), str) and item[k]), None)
        if system is not None:
            holder["system"] = system
        holders.append(holder)
    return holders if len({"reward" in h for h in holders}) == 1 else None  # scores or ranks, never a mix


def _text_blocks(value: Any) -> str | None:
    """A system prompt logged as one text block (``[{"text": ...}]``: Bedrock Converse and its fine-tuning files,
    Anthropic's Messages API). Several blocks are not read: how the API joined them is not in the log."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        block = value[0]
        if isinstance(block.get("text"), str) and block.get("type", "text") == "text":
            return block["text"]
    return None


def _unreadable_replies(record: dict[str, Any]) -> tuple[str, int] | None:
    """(why, how many replies) for records that hold replies no context can be built for, so they are rejected
    and counted instead of being passed over as holding no conversation."""
    completions, labels = record.get("completions"), record.get("labels")
    if (
        _prompt_like(record.get("prompt"))
        and isinstance(completions, list)
        and _text_samples(completions)
        and isinstance(labels, list)
        and len(labels) == len(completions)
        and all(isinstance(v, bool) for v in labels)
    ):  # TRL stepwise supervision: the steps of one reply, a label each
        return (
            "stepwise supervision (completions = the steps of one reply, labels per step): how the steps join into "
            "the reply is the trainer's setting (TRL's step_separator); map it with --map once joined",
            1,
        )
    choices = record.get("choices")
    if (
        isinstance(choices, list)
        and choices
        and all(isinstance(c, dict) and _text_samples(c.get("turns")) for c in choices)
        and not any(_prompt_like(record.get(k)) for k in ("prompt", "question", "turns", "messages"))
    ):  # FastChat MT-bench model_answer: each choice's replies, turn by turn
        return (
            "replies logged without the questions they answer (FastChat MT-bench model answers: the mt_bench reader "
            "joins them by question_id with the question.jsonl beside them or one folder up)",
            sum(len(c["turns"]) for c in choices),
        )
    return None


def _batch_result(record: dict[str, Any]) -> bool:
    """A line of an OpenAI Batch API output file (``{custom_id, response: {status_code, body}}``) or of Anthropic
    Message Batches results (``{custom_id, result: {type, message}}``): replies whose requests are elsewhere."""
    if "custom_id" not in record:
        return False
    response, result = record.get("response"), record.get("result")
    return (isinstance(response, dict) and isinstance(response.get("body"), dict)) or (
        isinstance(result, dict) and isinstance(result.get("message"), dict)
    )


def _judged_pair(record: dict[str, Any]) -> tuple[tuple[str, str], tuple[str | None, str | None]] | None:
    """((chosen key, rejected key), marks) of a record holding two replies and a judge's verdict on them."""
    for a, b, key, a_wins, b_wins in _JUDGED_PAIRS:
        if not (_replies(record.get(a)) and _replies(record.get(b))) or key not in record:
            continue
        verdict = record[key]
        if isinstance(verdict, bool):
            continue
        if verdict == a_wins:
            return (a, b), ("chosen", "rejected")
        if verdict == b_wins:
            return (b, a), ("chosen", "rejected")
        if isinstance(verdict, str) and verdict in _TIE_MARKS:
            return (a, b), _TIE_MARKS[verdict]
    for a, b, key in _SCALED_PAIRS:
        verdict = record.get(key)
        if not (_replies(record.get(a)) and _replies(record.get(b))) or isinstance(verdict, bool):
            continue
        if isinstance(verdict, int | float) and 1 <= verdict <= 2:
            if verdict == 1.5:  # a draw: neither side preferred, both trained as LMSYS ties are
                return (a, b), (None, None)
            return ((a, b) if verdict < 1.5 else (b, a)), ("chosen", "rejected")
    return None


def _holds_context(value: Any) -> bool:
    """A preference side that is a whole conversation: messages before its reply, or a text transcript."""
    if isinstance(value, str):
        return parse_transcript(value) is not None
    if not is_message_list(value) or len(value) < 2:
        return False
    first = role_of(value[0])
    return first is not None and canonical_role(first[1]) not in ("assistant", "call")


def _longest_holding_the_others(record: dict[str, Any], lists: list[str]) -> str | None:
    """The message list that every other one is a prefix of (same roles and contents, in order), or None."""
    if not lists:
        return None
    longest = max(lists, key=lambda k: len(record[k]))
    return longest if all(_is_prefix(record[key], record[longest]) for key in lists) else None


def _is_prefix(short: list[Any], long: list[Any]) -> bool:
    """``short`` says what the start of ``long`` says (same roles and contents, in order)."""

    def said(message: Any) -> tuple[Any, str]:
        hit = role_of(message)
        return (hit[1] if hit else None), json.dumps(message.get(content_key_of(message) or ""), sort_keys=True)

    return len(short) <= len(long) and [said(m) for m in short] == [said(m) for m in long[: len(short)]]


def _suffixed_pairs(record: dict[str, Any]) -> list[tuple[str, str]]:
    """``raw_input_<step>`` + ``raw_output_<step>`` pairs: what a distilabel pipeline step sent its model and the text
    it got back (``distilabel_metadata``), the exact context of the generation beside it."""
    return [
        (key, f"raw_output_{key[len('raw_input_') :]}")
        for key in record
        if isinstance(key, str) and key.startswith("raw_input_") and f"raw_output_{key[len('raw_input_') :]}" in record
    ]


def _replies(value: Any) -> bool:
    if isinstance(value, dict) and _choice_messages(value) is not None:
        return True
    if _text_samples(value):
        return True
    return isinstance(value, str) or is_message_list(value) or (isinstance(value, dict) and is_message_like(value))


def _text_samples(value: Any) -> bool:
    """A list of generated texts for one context (OpenAI evals' ``sampled``, n > 1 completions; HELM's and legacy
    completions APIs' ``[{"text": ...}]``)."""
    return isinstance(value, list) and bool(value) and all(_sample_text(v) is not None for v in value)


def _sample_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("text"), str) and role_of(value) is None:
        return value["text"]
    return None


# (list key, message key) of a response body's samples: OpenAI's choices, Gemini's candidates
_SAMPLE_LISTS = (("choices", "message"), ("candidates", "content"))


def _choice_messages(value: dict[str, Any]) -> list[Any] | None:
    """The reply of a response body logged as a completion: OpenAI's (``{"choices": [{"message": ...}]}``) or
    Gemini's (``{"candidates": [{"content": {"role": "model", "parts"}}]}``)."""
    for key, inner in _SAMPLE_LISTS:
        samples = value.get(key)
        if not (isinstance(samples, list) and samples and all(isinstance(c, dict) for c in samples)):
            continue
        messages = [c.get(inner) for c in samples]
        if all(isinstance(m, dict) and is_message_like(m) for m in messages):
            return messages
    return None


def _prompt_like(value: Any) -> bool:
    """A context: text or a message list. An empty one is not (the context is elsewhere, e.g. CAMEL's
    ``{"instruction", "instances": [{"input": "", "output"}]}``: reading ``input`` as the prompt would train the
    output after a context the policy never saw)."""
    return (isinstance(value, str) and value.strip() != "") or is_message_list(value)


def _assistant_count(value: Any, budget: list[int] | None = None) -> int:
    """How many assistant-like messages ``value`` holds anywhere (bounded search)."""
    budget = budget if budget is not None else [MAX_SEARCH_NODES]
    budget[0] -= 1
    if budget[0] < 0:
        return 0
    if isinstance(value, list):
        return sum(_assistant_count(v, budget) for v in value if isinstance(v, dict | list))
    if not isinstance(value, dict):
        return 0
    own = 0
    hit = role_of(value)
    if hit is not None and canonical_role(hit[1]) in ("assistant", "call"):
        own = 1
        if is_wrapper(value):
            return own
    return own + sum(_assistant_count(v, budget) for v in value.values() if isinstance(v, dict | list))


# --------------------------------------------------------------------------------------------- converting


@dataclass
class Gap:
    """Where a conversation stops being trainable: the first message that cannot be read (an unknown role, a result
    answering no call, content in no shape). Replies before it are trained; replies after it were sampled in a
    context that held it, which the log cannot give, so they are context only (``context_unknown``), never trained
    as if it had not been there (that would stitch the two sides of the gap together)."""

    where: str
    error: MsgtrainError
    turns: int  # the assistant turns the unreadable message held (lost with it)
    after: int = 0  # replies after it, kept as context the log does not hold
    unread: int = 0  # replies after it that could not be read either (lost)


def _assistant_like(value: Any) -> bool:
    hit = role_of(value)
    return hit is not None and canonical_role(hit[1]) in ("assistant", "call")


@dataclass
class _Builder:
    """Normalised messages → steps, with JSON-path errors."""

    norm: MessageNormaliser
    steps: list[Step] = field(default_factory=list)
    call_names: dict[str, str] = field(default_factory=dict)

    def add(self, raw: Any, where: str, *, trained: bool = True, metadata: dict[str, Any] | None = None) -> None:
        normalised = self.norm.normalise(raw, where)
        # What is logged beside the message (usage, model) belongs to one reply: a message that stands for several
        # (a UI message's steps) cannot say which.
        beside = unwrapped(raw) if sum(d["role"] == "assistant" for d in normalised) <= 1 else None
        for data in normalised:
            weight = data.pop("weight", None)
            if data["role"] == "assistant" and weight != 0:
                check_reply_present(data, where)
            msg = _located(lambda d=data: from_openai_message(d, call_names=self.call_names), where)
            if isinstance(msg, OptionCallMessage):
                self.call_names.update({c.invocation_id: c.option_name for c in msg.calls})
            origin: Origin | None = None
            msg, generation = logged_reply(msg, beside)  # usage beside the message, inside its wrapper
            if msg.role == "assistant":
                if metadata:
                    msg = msg.model_copy(update={"metadata": {**msg.metadata, **metadata}})
                if not trained:
                    origin = Origin.INJECTED
                elif weight == 0:
                    origin = Origin.CARRIED
            if self._merges(raw, msg):
                continue
            self.steps.append(Step(msg, origin=origin, generation=generation, index=len(self.steps)))

    def _merges(self, raw: Any, msg: Any) -> bool:
        """Append a shaped-role message read as text (smolagents' ``tool-call`` / ``tool-response``) to the message
        before it when both are text of the same role: smolagents' model classes send consecutive messages of one
        role as one, their texts joined by a newline, so the two were one turn of the model's context."""
        hit = role_of(raw)
        if hit is None or not isinstance(hit[1], str) or hit[1].strip().lower() not in SHAPED_ROLES or not self.steps:
            return False
        prev = self.steps[-1].message
        if not (isinstance(prev, PartsMessage) and isinstance(msg, PartsMessage) and prev.role == msg.role):
            return False
        if not (
            prev.parts and isinstance(prev.parts[-1], TextPart) and msg.parts and isinstance(msg.parts[0], TextPart)
        ):
            return False
        joined = TextPart(text=f"{prev.parts[-1].text}\n{msg.parts[0].text}")
        merged = prev.model_copy(update={"parts": (*prev.parts[:-1], joined, *msg.parts[1:])})
        self.steps[-1] = Step(merged, self.steps[-1].origin, self.steps[-1].generation, self.steps[-1].index)
        return True

    def add_until_gap(self, raw: list[Any], where: str, places: list[str] | None = None) -> Gap | None:
        """A conversation's messages, up to the first one that cannot be read (see :class:`Gap`): the messages
        before it are added as usual; of the messages after it, the assistant ones are added as context the log
        does not hold (``carried``, dropped as ``context_unknown``), the rest left out (nothing after the gap is
        trained, so nothing after it needs its context)."""
        for i, item in enumerate(raw):
            at = places[i] if places is not None else f"{where}[{i}]"
            try:
                self.add(item, at)
            except ValidationError as e:
                if not any(s.message.role == "assistant" and s.origin is None for s in self.steps):
                    raise  # nothing trainable before it: the conversation's reject, as it always was
                gap = Gap(at, e, message_like_count(item)[1] or int(_assistant_like(item)))
                for j, later in enumerate(raw[i + 1 :], start=i + 1):
                    self._add_after_gap(later, places[j] if places is not None else f"{where}[{j}]", gap)
                return gap
        return None

    def _add_after_gap(self, raw: Any, where: str, gap: Gap) -> None:
        hit = role_of(raw)
        if hit is None or canonical_role(hit[1], self.norm.roles) not in ("assistant", "call"):
            return
        try:
            data = MessageNormaliser(roles=self.norm.roles, content_key=self.norm.content_key).normalise(raw, where)
            messages = [from_openai_message({**d, "tool_calls": None} if d["role"] == "assistant" else d) for d in data]
        except MsgtrainError:
            gap.unread += 1
            return
        why = f"after an unreadable message at {gap.where}: the context it was sampled in is not in the log"
        for msg in messages:
            if msg.role == "assistant":
                msg = msg.model_copy(update={"metadata": {**msg.metadata, "why_not_trained": why}})
                self.steps.append(Step(msg, origin=Origin.CARRIED, index=len(self.steps)))
                gap.after += 1

    def add_list(self, raw: Any, where: str, *, trained: bool = True) -> None:
        if isinstance(raw, str):
            self.add({"role": "user" if not trained else "assistant", "content": raw}, where, trained=trained)
        elif isinstance(raw, dict):
            self.add(raw, where, trained=trained)
        else:
            for i, item in enumerate(raw or []):
                self.add(item, f"{where}[{i}]", trained=trained)


def _located(make: Any, where: str) -> Any:
    try:
        return make()
    except MsgtrainError as e:  # the model's errors say ``message``; the user needs the JSON path
        raise type(e)(e.message, where=where, hint=e.hint, code=e.code) from e


def convert_found(path: Path, ref: SourceRef, found: Found) -> list[ReadEvent]:
    """One conversation → a graph (raises :class:`ValidationError` naming the JSON path on anything ambiguous)."""
    if found.node_map:
        return [node_map_graph(path, ref, found.holder, found.mapping.columns["messages"], found.path)]
    if "children" in found.mapping.columns or "parent" in found.mapping.columns:
        return _tree_events(path, ref, found)
    m, holder, at = found.mapping, found.holder, found.path
    norm = MessageNormaliser(roles=m.roles or None, role_key=m.role_key, content_key=m.content_key)
    builder = _Builder(norm)
    system = m.field_of(holder, "system")
    inherited_system = found.inherited.get("system", (None, None))[1] if system is None else None
    system = _text_blocks(system) if isinstance(system, list) else system
    if system is not None and not isinstance(system, str):
        raise ValidationError(
            f"the system prompt at {at}.{m.columns.get('system', '(an enclosing object) system')} is not text",
            code="bad_content",
        )
    label = _label(m, holder, at)
    branches: list[tuple[list[Step], str]] = []
    gap: Gap | None = None
    if m.layout == "messages":
        messages = m.field_of(holder, "messages")
        _need_list(messages, f"{at}.{m.columns['messages']}")
        gap = builder.add_until_gap(messages, f"{at}.{m.columns['messages']}")
        mark_last_reply(builder.steps, label)
    elif m.layout == "prompt_completion":
        rendered = _prompt_steps(builder, m.field_of(holder, "prompt"), f"{at}.{m.columns['prompt']}")
        start = len(builder.steps)
        meta = _reply_metadata({"label": label} if label is not None else None, rendered)
        completion = m.field_of(holder, "completion")
        if _text_samples(completion):
            completion = [_sample_text(v) for v in completion]
        completion = _logged_reply_text(completion, rendered)
        if _text_samples(completion) and len(completion) > 1:  # n samples of one context: sibling replies
            branches = _text_branches(builder, completion, f"{at}.{m.columns['completion']}", meta)
        else:
            completion = completion[0] if _text_samples(completion) else completion
            _add_replies(builder, completion, f"{at}.{m.columns['completion']}", meta)
        if not branches and not any(s.message.role == "assistant" for s in builder.steps[start:]):
            raise ValidationError(
                f"the completion at {at}.{m.columns['completion']} holds no assistant message",
                code="ambiguous_structure",
            )
    elif m.layout == "alpaca":
        _alpaca(builder, holder, m, at)
        mark_last_reply(builder.steps, label)
    else:
        branches = _preference(builder, holder, m, at, found.marks)
    _check_speakers(norm, at)
    _check_nothing_beside(holder, m, at)
    steps = MediaColumns(holder).place(builder.steps)
    if inherited_system is not None and not any(s.message.role == "system" for s in steps):
        system = inherited_system  # an enclosing object's system prompt, for a conversation that holds none
    steps = _with_system(steps, system, at, m)
    tools_value, tools_at = m.field_of(holder, "tools"), f"{at}.{m.columns.get('tools', 'tools')}"
    if tools_value is None and "tools" in found.inherited:
        tools_at, tools_value = _inherited_tools(found)
    tools = openai_tools(tools_value, where=tools_at)
    base = base_graph_id(path, ref) + ("" if at == "$" else f"@{at[2:]}")
    check_pairing(steps + [s for b, _ in branches for s in b])
    graph = MessageGraph(graph_id=base, tools=tools, metadata={"source_format": "structural", "layout": m.layout})
    ids = append_steps(graph, steps) if not branches else [graph.append(s.message, origin=s.origin) for s in steps]
    for branch, _ in branches:
        parent = ids[-1] if ids else None
        for s in branch:
            parent = graph.add_node(parent, s.message, origin=s.origin)
    mark_calls_without_tools(graph, UNLOGGED_TOOLS)
    if found.unlogged_system and not any(s.message.role == "system" for s in steps):
        mark_context_incomplete(graph, ["system_prompt"], "the record does not save its agent's system message")
    elif _base_system_at(found, m, holder, at) and not any(s.message.role == "system" for s in steps):
        where = _base_system_at(found, m, holder, at)
        why = f"the log holds the agent's base system prompt ({where}), not the one its framework sent with each call"
        mark_context_incomplete(graph, ["system_prompt"], why)
    graph.graph_id = content_graph_id(base, graph)
    out: list[ReadEvent] = [ReadGraph(graph, ref, records=1, extras=_extras(holder, m))]
    if gap is not None:
        out.append(gap_reject(ref, gap))
    return out


def _base_system_at(found: Found, m: Mapping, holder: dict[str, Any], at: str) -> str | None:
    """Where the conversation's agent keeps its base system prompt (:data:`_BASE_SYSTEM_KEYS`, or a mapping's
    ``base_system`` column), or None."""
    if "base_system" in found.inherited:
        return found.inherited["base_system"][0]
    value = m.field_of(holder, "base_system")
    return f"{at}.{m.columns['base_system']}" if isinstance(value, str) and value.strip() else None


def gap_reject(ref: SourceRef, gap: Gap) -> ReadReject:
    """The books' line for a gap: the unreadable message (and the replies after it that could not be read either)
    as turns lost, in no record of their own (the conversation is the record, converted up to the gap)."""
    error = gap.error.located(str(ref) if gap.error.where else f"{ref} {gap.where}")
    note = f"; the conversation is trained up to it, {gap.after} later replies kept as context only"
    error = type(error)(error.message + note, where=error.where, hint=error.hint, code=error.code)
    return ReadReject(ref, error, "", count=0, turns=gap.turns + gap.unread)


def _need_list(value: Any, where: str) -> None:
    if not isinstance(value, list):
        raise ValidationError(
            f"{where} is not a message list", code="ambiguous_structure", hint="fix the mapping's messages column"
        )


def _as_prompt(value: Any) -> Any:
    return {"role": "user", "content": value} if isinstance(value, str) else value


def _prompt_steps(builder: _Builder, value: Any, where: str) -> RenderedPrompt | None:
    """A prompt's messages into ``builder`` as context: a text a chat template rendered is parsed back into its
    messages (:mod:`msgtrain.ingest.common.rendered_prompts`; returned, so the replies keep the logged text), any other
    text is one user message."""
    rendered = parse_rendered_prompt(value)
    chat = _json_chat(value) if rendered is None else None
    builder.add_list(rendered.messages if rendered is not None else chat or _as_prompt(value), where, trained=False)
    return rendered


def _json_chat(value: Any) -> list[Any] | None:
    """A prompt logged as the JSON text of a message list (promptfoo's ``prompt.raw`` of a chat prompt): the list."""
    if not isinstance(value, str) or not value.lstrip().startswith("["):
        return None
    try:
        decoded = json.loads(value)
    except (ValueError, RecursionError):
        return None
    return decoded if is_message_list(decoded) else None


def _reply_metadata(metadata: dict[str, Any] | None, rendered: RenderedPrompt | None) -> dict[str, Any] | None:
    """A reply's metadata, with the rendered prompt it was sampled after (the exact context, as logged)."""
    if rendered is None:
        return metadata
    return {**(metadata or {}), RENDERED_PROMPT_KEY: rendered.metadata()}


def _logged_reply_text(value: Any, rendered: RenderedPrompt | None) -> Any:
    """Replies logged as text after a rendered prompt, without the stop token the engine left at their end."""
    if rendered is None:
        return value
    if isinstance(value, str):
        return rendered.reply_text(value)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [rendered.reply_text(v) for v in value]
    return value


def _add_replies(builder: _Builder, value: Any, where: str, metadata: dict[str, Any] | None) -> None:
    if isinstance(value, str):
        value = {"role": "assistant", "content": value}
    elif isinstance(value, dict) and (choices := _choice_messages(value)) is not None:
        if len(choices) > 1:  # n > 1 samples of one context: siblings, which one list cannot say
            raise ValidationError(
                f"{where} holds {len(choices)} choices: read them as siblings with a per-call reader",
                code="ambiguous_structure",
                hint="log one choice per record, or use the calls format ({request, response})",
            )
        key, inner = next((k, i) for k, i in _SAMPLE_LISTS if isinstance(value.get(k), list))
        value, where = choices[0], f"{where}.{key}[0].{inner}"
    items = value if isinstance(value, list) else [value]
    for i, item in enumerate(items):
        builder.add(item, f"{where}[{i}]" if isinstance(value, list) else where, metadata=metadata)


def _label(m: Mapping, holder: dict[str, Any], at: str) -> bool | None:
    if "kto_tag" not in m.columns:
        return None
    value = m.field_of(holder, "kto_tag")
    if isinstance(value, bool) or value is None:
        return value
    if value in (0, 1):
        return bool(value)
    raise ValidationError(
        f"the label at {at}.{m.columns['kto_tag']} is {json.dumps(value, default=str)}, not true or false",
        code="ambiguous_structure",
        hint="a KTO label says whether the reply is desirable: true or false",
    )


def _alpaca(builder: _Builder, holder: dict[str, Any], m: Mapping, at: str) -> None:
    """LLaMA-Factory's alpaca reading: history pairs, then ``prompt`` (+ "\\n" + ``query``) → ``response``."""
    history = m.field_of(holder, "history") or []
    for i, pair in enumerate(history if isinstance(history, list) else []):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(t, str) for t in pair)):
            raise ValidationError(f"{at}.history[{i}] is not a [query, response] pair", code="ambiguous_structure")
        builder.add({"role": "user", "content": pair[0]}, f"{at}.history[{i}][0]")
        builder.add({"role": "assistant", "content": pair[1]}, f"{at}.history[{i}][1]")
    prompt = m.field_of(holder, "prompt")
    query = m.field_of(holder, "query")
    text = "\n".join(t for t in (prompt, query) if isinstance(t, str) and t)
    builder.add({"role": "user", "content": text}, f"{at}.{m.columns['prompt']}")
    builder.add({"role": "assistant", "content": m.field_of(holder, "response")}, f"{at}.{m.columns['response']}")


def _preference(
    builder: _Builder,
    holder: dict[str, Any],
    m: Mapping,
    at: str,
    marks: tuple[str | None, str | None] = ("chosen", "rejected"),
) -> list[tuple[list[Step], str]]:
    """Prompt steps into ``builder``; returns the chosen and the rejected branch (see the module docstring), each
    reply marked as ``marks`` say (a tie marks both sides alike, or neither)."""
    prompt_col = "prompt" if "prompt" in m.columns else ("messages" if "messages" in m.columns else None)
    chosen, rejected = m.field_of(holder, "chosen"), m.field_of(holder, "rejected")
    if prompt_col is None and isinstance(chosen, str) and isinstance(rejected, str):
        chosen = parse_transcript(chosen) or chosen  # Anthropic HH-RLHF: both sides are whole transcripts
        rejected = parse_transcript(rejected) or rejected
    shared_prefix = prompt_col is None and isinstance(chosen, list) and isinstance(rejected, list)
    if shared_prefix:
        shared = 0  # implicit prompt: the messages the two conversations share
        while shared < min(len(chosen), len(rejected)) - 1 and chosen[shared] == rejected[shared]:
            shared += 1
        builder.add_list(chosen[:shared], f"{at}.chosen", trained=False)
        chosen, rejected = chosen[shared:], rejected[shared:]
    rendered = None
    if prompt_col is not None and not (isinstance(chosen, list) and isinstance(rejected, list) and shared_prefix):
        rendered = _prompt_steps(builder, m.field_of(holder, prompt_col), f"{at}.{m.columns[prompt_col]}")
    out: list[tuple[list[Step], str]] = []
    for value, side, mark in ((chosen, "chosen", marks[0]), (rejected, "rejected", marks[1])):
        branch = _Builder(_fork(builder.norm), call_names=dict(builder.call_names))
        branch.steps = []
        meta = _reply_metadata({"preference": mark} if mark else None, rendered)
        _add_replies(branch, _logged_reply_text(value, rendered), f"{at}.{m.columns[side]}", meta)
        if not any(s.message.role == "assistant" for s in branch.steps):
            raise ValidationError(f"the {side} reply at {at}.{m.columns[side]} holds no assistant message")
        out.append((branch.steps, side))
    return out


def _text_branches(
    builder: _Builder, texts: list[str], where: str, metadata: dict[str, Any] | None
) -> list[tuple[list[Step], str]]:
    """One branch per generated text, each a reply sampled in the context ``builder`` holds. A sample logged as the
    text of a null (``None``: Python's ``str(None)``, as OpenAI Swarm's evals write a sample that called a function
    instead of answering) is not what the model wrote: kept as context, in the books with the reason, never
    trained."""
    out: list[tuple[list[Step], str]] = []
    for i, text in enumerate(texts):
        branch = _Builder(_fork(builder.norm), call_names=dict(builder.call_names))
        branch.steps = []
        raw: dict[str, Any] = {"role": "assistant", "content": text}
        meta = metadata
        if text.strip() in _NULL_TEXTS:
            raw["weight"] = 0
            meta = {**(metadata or {}), "why_not_trained": _NULL_WHY.format(text=text.strip())}
        branch.add(raw, f"{where}[{i}]", metadata=meta)
        out.append((branch.steps, "sample"))
    return out


_NULL_TEXTS = frozenset({"None", "null"})
_NULL_WHY = "the sample was logged as {text!r}, a null written as text: what the model returned is not in the log"


def _fork(norm: MessageNormaliser) -> MessageNormaliser:
    return MessageNormaliser(
        roles=norm.roles, role_key=norm.role_key, content_key=norm.content_key, open_calls=list(norm.open_calls)
    )


def _check_nothing_beside(holder: dict[str, Any], m: Mapping, at: str) -> None:
    """Refuse a conversation whose record holds more replies beside it (ranked completions, a second transcript):
    reading one part and dropping the rest would lose those turns without a word."""
    used = {f for v in m.columns.values() for f in top_fields(holder, v)}
    # copies of a conversation read (UltraFeedback's ``messages`` beside ``chosen``) or of its prefixes (NeMo-Gym's
    # ``input_message_log``) hold no other reply
    read = [holder[c] for c in (m.columns.get(k) for k in ("messages", "chosen", "rejected")) if c in holder]
    read = [conv for conv in read if is_message_list(conv)]
    used |= {k for k, v in holder.items() if is_message_list(v) and any(_is_prefix(v, conv) for conv in read)}
    beside = {k: message_like_count(v)[1] for k, v in holder.items() if k not in used and isinstance(v, dict | list)}
    beside = {k: n for k, n in beside.items() if n}
    if beside:
        shown = ", ".join(f"{at}.{k} ({n})" for k, n in sorted(beside.items()))
        raise ValidationError(
            f"assistant messages beside the conversation, in {shown}: which of them were sampled, and in which "
            "context, is ambiguous",
            code="ambiguous_structure",
            hint="write a mapping (--map) naming the messages, prompt/completion or chosen/rejected fields",
        )


def _check_speakers(norm: MessageNormaliser, at: str) -> None:
    if len(norm.names) > 1:
        shown = ", ".join(sorted(norm.names)[:5])
        raise ValidationError(
            f"assistant messages at {at} come from {len(norm.names)} named speakers ({shown}): which one is the "
            "policy, and how it saw the others' messages, is ambiguous",
            code="ambiguous_structure",
            hint="convert one speaker's own view of the conversation, or map the others to user with --map (roles)",
        )


def _with_system(steps: list[Step], system: str | None, at: str, m: Mapping) -> list[Step]:
    if not system:
        return steps
    own = [s for s in steps if s.message.role == "system"]
    if own:
        texts = {"".join(getattr(p, "text", "") for p in getattr(s.message, "parts", ())) for s in own}
        if texts == {system} or all(t.startswith(system) for t in texts):
            return steps  # the conversation's system message is the one beside it, rendered with more: it was sent
        beside = m.columns.get("system", "system")
        raise ValidationError(
            f"{at}.{beside} and the system message in the conversation differ: which one the policy saw is ambiguous",
            code="ambiguous_structure",
            hint="drop one of them, or map the system column away with --map",
        )
    from msgtrain.model.message import PartsMessage, TextPart

    first = Step(PartsMessage(parts=(TextPart(text=system),), role_hint_for_llm="system", policy="system"))
    return [first, *steps]


def _extras(holder: dict[str, Any], m: Mapping) -> dict[str, Any]:
    """Sibling fields carried to the rows: scalars and small objects; the mapped reward as ``reward``."""
    used = {f for k, v in m.columns.items() if k not in ("reward", "kto_tag") for f in top_fields(holder, v)}
    used |= set(MEDIA_COLUMNS)
    extras: dict[str, Any] = {}
    for key, value in holder.items():
        if key in used or not isinstance(key, str):
            continue
        if isinstance(value, dict | list):
            try:
                if len(json.dumps(value, ensure_ascii=False)) > MAX_EXTRA_JSON:
                    continue
            except (TypeError, ValueError):
                continue
        extras[key] = value
    reward = m.field_of(holder, "reward")
    if isinstance(reward, int | float) and not isinstance(reward, bool):
        extras["reward"] = reward
    label = m.field_of(holder, "kto_tag")
    if isinstance(label, bool):
        extras["label"] = label
    return extras


# --------------------------------------------------------------------------------------------- the reader


def _records(path: Path) -> Iterator[tuple[SourceRef, Any, Any]]:
    """(ref, value or the parse error, raw for excerpts) per record: JSONL lines, a top-level array's items (unless
    the array is itself one conversation), or the whole document; YAML files are one document."""
    if path.suffix.lower() in YAML_SUFFIXES:
        yield SourceRef(str(path), "file"), _load_yaml(path), None
        return
    for rec in iter_raw_records(path):
        value = rec.value
        if rec.ref.record == "file" and isinstance(value, list) and not is_message_list(value):
            for i, item in enumerate(value):
                yield SourceRef(str(path), f"item {i}"), item, item
            continue
        yield rec.ref, value, rec.raw if rec.raw is not None else value


def _load_yaml(path: Path) -> Any:
    from msgtrain.ingest.core.yaml_documents import load_yaml_bounded

    if path.stat().st_size > MAX_YAML_BYTES:
        return ParseError("YAML document too large", where=str(path), code="record_too_large")
    try:
        with open(path, encoding="utf-8") as f:
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
        shape = head_shape(head)
        if shape.layout == "other":
            return False
        for p in shape.paths:
            stem, _, key = p.rpartition(".")
            listed = stem.endswith("[]") or stem == "" or stem.rpartition(".")[0].endswith("[]")  # items, wrapped
            role_like = key in ROLE_KEYS or key in ROLE_FLAGS
            if role_like and listed and any(f"{stem}.{c}" in shape.paths for c in CONTENT_KEYS):
                return True
            owner = p.removesuffix(".parts[].part_kind")
            if owner != p and (owner == "" or owner.endswith("[]")) and shape.any_value(f"{owner}.kind", _PAI):
                return True  # pydantic-ai ModelMessages: kind request / response, parts with a part_kind
        numbered: dict[tuple[str, str], int] = {}  # numbered messages (message_1, message_2, ...): per stem
        for p in shape.paths:
            stem, _, key = p.rpartition(".")
            parent, _, last = stem.rpartition(".")
            hit = _NUMBERED_KEY.match(last) if key in ROLE_KEYS else None
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
            *_ALPACA_PAIRS,
            *((a, b) for a, b, *_ in _JUDGED_PAIRS),
            *((a, b) for a, b, _ in _SCALED_PAIRS),
            *((p, c) for p in ("instruction", "prompt") for c in _CANDIDATE_LISTS),
            ("prompt", "labels"),  # stepwise supervision and MT-bench answers: rejected, counted
            ("question_id", "choices"),
            ("custom_id", "response.body"),  # Batch API results: rejected, saying where their requests are
            ("custom_id", "result.message"),
        )
        return any(shape.has(f".{a}", f".{b}") for a, b in pairs)

    def read(self, path: Path) -> Iterator[ReadItem]:
        records = _records(path)
        first = next(records, None)
        if first is None:
            return
        if self.mapping is None and first[0].record.startswith("line ") and _session_header(first[1]):
            # A session header line (goose: working_dir, token counts), then one message per line.
            second = next(records, None)
            if second is not None and _lone_message(second[1]):
                yield ReadSkip(first[0], "session_header")
                first = second
            elif second is not None:
                records = itertools.chain([second], records)
        stream: Iterator[tuple[SourceRef, Any, Any]] = itertools.chain([first], records)
        if self.mapping is None and first[0].record.startswith("line ") and _lone_message(first[1]):
            yield from _message_lines(path, stream)
            return
        if self.mapping is None and first[0].record == "file" and isinstance(first[1], list):
            items = [(SourceRef(str(path), f"item {i}"), v) for i, v in enumerate(first[1])]
            if is_message_list(first[1]) and _tree_keys(items) is not None:  # a JSON array of message rows, a tree
                yield from _message_lines(path, ((ref, v, v) for ref, v in items))
                return
        stream, chained = _call_log_file(stream, self.mapping)
        calls: list[tuple[SourceRef, Found, list[Any]]] = []
        for ref, value, raw in stream:
            if isinstance(value, MsgtrainError):
                yield ReadReject(ref, value, excerpt(raw) if isinstance(raw, bytes) else "")
                continue
            one = _one_call(value, self.mapping) if chained else None
            if one is not None:  # kept until the file ends: later records may continue it
                calls.append((ref, one, one.mapping.field_of(one.holder, "prompt")))
                continue
            yield from self._record(path, ref, value, raw)
        for group in continuation_groups([prompt for _, _, prompt in calls]):
            items = [(calls[i][0], calls[i][1]) for i in group]
            task = partial(read_call_items, path, items[0][0], items, None, convert_found)
            yield RecordTask(items[0][0], task, records=len(items), raw=calls[group[0]][1].holder)

    def _record(self, path: Path, ref: SourceRef, value: Any, raw: Any) -> Iterator[ReadItem]:
        if self.mapping is not None:
            if not isinstance(value, dict):
                err = ValidationError("record is not an object the mapping can read", code="mapping_mismatch")
                yield ReadReject(ref, err.located(str(ref)), excerpt(raw))
                return
            try:
                units = mapping_units(self.mapping, value)
            except MsgtrainError as e:
                yield ReadReject(ref, e.located(str(ref)), excerpt(raw), turns=message_like_count(value)[1])
                return
            found: list[Found | Ambiguity] = [Found(where, holder, m) for where, holder, m in units]
            if not found:
                yield ReadSkip(ref, "no_conversation")
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
            yield RecordTask(sub, _task(path, sub, item, raw), records=1, raw=raw)


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


def _call_log_file(
    stream: Iterator[tuple[SourceRef, Any, Any]], mapping: Mapping | None
) -> tuple[Iterator[tuple[SourceRef, Any, Any]], bool]:
    """(the stream, whether the file is a call log): its first two records are each one call, the second
    re-sending the first one's messages and more (an agent's calls logged one per line). Only then are its calls
    kept until the file ends and joined into conversations; any other file streams record by record."""
    head = list(itertools.islice(stream, 2))
    stream = itertools.chain(head, stream)
    if len(head) < 2 or any(isinstance(v, MsgtrainError) for _, v, _ in head):
        return stream, False
    first, second = (_one_call(v, mapping) for _, v, _ in head)
    if first is None or second is None:
        return stream, False
    a, b = (f.mapping.field_of(f.holder, "prompt") for f in (first, second))
    return stream, isinstance(a, list) and isinstance(b, list) and len(a) < len(b) and b[: len(a)] == a


def _is_call(found: Found | Ambiguity) -> bool:
    """A prompt / completion find whose prompt is a message list: a model call (what it sent, what it got)."""
    if not isinstance(found, Found) or found.mapping.layout != "prompt_completion":
        return False
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


# (id key, parent key) of messages logged one per line as a tree (OpenAssistant rows, chat UIs' exports).
_TREE_KEYS = (
    ("messageId", "parentMessageId"),  # LibreChat exports
    ("id", "parentMessageId"),
    ("message_id", "parent_id"),
    ("user_message_id", "parent_message_id"),
    ("message_id", "parent_message_id"),
    ("id", "parent_message_id"),
    ("id", "parent_id"),
    ("id", "parentId"),
    ("id", "parent"),
    ("uuid", "parentUuid"),
)
_Lines = list[tuple[SourceRef, dict[str, Any]]]


def _session_header(value: Any) -> bool:
    """A record that holds nothing message-like: a session's header line, when one message per line follows."""
    return isinstance(value, dict) and message_like_count(value)[0] == 0


def _writer_marker(value: Any) -> str | None:
    """The role of a line the log's writer keeps for itself among the messages, or None: a role outside the
    vocabulary that starts with ``_`` (Kimi CLI's ``_checkpoint`` and ``_usage`` lines), never sent to the model."""
    hit = role_of(value) if isinstance(value, dict) else None
    if hit is None or not isinstance(hit[1], str) or canonical_role(hit[1]) is not None:
        return None
    return hit[1] if hit[1].startswith("_") else None


def _lone_message(value: Any) -> bool:
    """A record that is one message (message-per-line JSONL), not a record holding conversations."""
    return isinstance(value, dict) and is_message_like(value) and not any(is_message_list(v) for v in value.values())


def _message_lines(path: Path, stream: Iterator[tuple[SourceRef, Any, Any]]) -> Iterator[ReadItem]:
    """Message-per-line JSONL: one conversation of all lines, or, when the lines carry parent ids, one graph per
    root of the tree they form (each path a branch, siblings sampled from the same context)."""
    lines: _Lines = []
    for ref, value, raw in stream:
        marker = _writer_marker(value)
        if isinstance(value, MsgtrainError):
            yield ReadReject(ref, value, excerpt(raw) if isinstance(raw, bytes) else "")
        elif marker is not None:
            yield ReadSkip(ref, f"writer_marker:{marker}")
        elif not _lone_message(value):
            err = ValidationError("not a message, in a file of one message per line", code="ambiguous_structure")
            yield ReadReject(ref, err.located(str(ref)), excerpt(raw), turns=message_like_count(value)[1])
        else:
            lines.append((ref, value))
    if not lines:
        return
    keys = _tree_keys(lines)
    if keys is None:
        yield RecordTask(lines[0][0], partial(_linear_lines, path, lines), records=len(lines), raw=lines[0][1])
        return
    known = {str(v[keys[0]]) for _, v in lines}
    children: dict[str | None, _Lines] = {}
    for ref, v in lines:
        parent = v.get(keys[1])
        parent_key = str(parent) if parent is not None else None
        if parent_key is not None and parent_key not in known:
            err = ValidationError(
                f"its parent {parent_key!r} is not in the file: the context it was written in is unknown",
                code="orphan_message",
            )
            yield ReadReject(ref, err.located(str(ref)), excerpt(v), turns=message_like_count(v)[1])
            continue
        children.setdefault(parent_key, []).append((ref, v))
    for root_ref, root in children.get(None, []):
        size = _subtree_size(str(root[keys[0]]), children, keys[0])
        yield RecordTask(
            root_ref, partial(_tree_graph, path, root_ref, root, children, keys[0]), records=size, raw=root
        )


def _tree_keys(lines: _Lines) -> tuple[str, str] | None:
    """The (id, parent) keys of message rows that form a tree: every row has the id, some have a parent."""
    return next(
        (k for k in _TREE_KEYS if all(k[0] in v for _, v in lines) and any(v.get(k[1]) for _, v in lines)), None
    )


def _subtree_size(node_id: str, children: dict[str | None, _Lines], id_key: str) -> int:
    size, stack = 0, [node_id]
    while stack:
        size += 1
        stack.extend(str(v[id_key]) for _, v in children.get(stack.pop(), []))
    return size


# Keys a chat UI writes on the replies it generated (SillyTavern: ``gen_started``); in a log that writes them, an
# assistant message without one was not sampled (a character card's scripted greeting): context, never a turn.
GENERATION_MARKS = ("gen_started",)
# A message the UI keeps in the log but never sends to the model (SillyTavern's hidden ``is_system`` notes).
HIDDEN_FLAGS = ("is_system",)
# Alternative replies kept with the one shown (SillyTavern's ``swipes``): each was sampled in the same context.
SWIPE_KEYS = ("swipes",)


def _linear_lines(path: Path, lines: _Lines) -> list[ReadEvent]:
    """One message per line, one conversation: cut at a line that cannot be read (a gap, :class:`Gap`); lines the
    UI hides from the model left out; alternative replies (swipes) added as siblings of the one shown; in a log that
    marks generated replies, an unmarked assistant message is context (scripted), not a turn."""
    shown = [(ref, v) for ref, v in lines if not any(v.get(k) is True for k in HIDDEN_FLAGS)]
    marked = any(any(k in v for k in GENERATION_MARKS) for _, v in shown)
    builder = _Builder(MessageNormaliser())
    gap = builder.add_until_gap([v for _, v in shown], "$", places=[f"{ref} $" for ref, _ in shown])
    _check_speakers(builder.norm, "$")
    graph = MessageGraph(graph_id=base_graph_id(path, lines[0][0]), metadata={"source_format": "structural"})
    for step, (_, raw) in zip(builder.steps, shown, strict=False):
        origin = step.origin
        if (
            marked
            and step.message.role == "assistant"
            and origin is None
            and not any(k in raw for k in GENERATION_MARKS)
        ):
            origin = Origin.INJECTED
        parent = graph.head[-1] if graph.head else None
        node = graph.append(step.message, origin=origin)
        if origin is None and step.message.role == "assistant":
            _add_swipes(graph, parent, node, raw)
    mark_calls_without_tools(graph, UNLOGGED_TOOLS)
    graph.graph_id = content_graph_id(graph.graph_id, graph)
    events: list[ReadEvent] = [ReadGraph(graph, lines[0][0], records=len(lines))]
    return events + ([gap_reject(lines[0][0], gap)] if gap is not None else [])


def _add_swipes(graph: MessageGraph, parent: str | None, shown: str, raw: dict[str, Any]) -> None:
    """The alternative replies a line keeps beside the one shown, each a sibling sampled in the same context."""
    text = graph.nodes[shown].message
    current = "".join(getattr(p, "text", "") for p in getattr(text, "parts", ()))
    for key in SWIPE_KEYS:
        swipes = raw.get(key)
        if not (isinstance(swipes, list) and all(isinstance(t, str) for t in swipes)):
            continue
        for alternative in dict.fromkeys(swipes):
            if alternative != current and alternative.strip():
                reply = PartsMessage(parts=(TextPart(text=alternative),), role_hint_for_llm="assistant")
                graph.add_node(parent, reply, origin=Origin.SAMPLED)


def _tree_graph(
    path: Path,
    root_ref: SourceRef,
    root: dict[str, Any],
    children: dict[str | None, _Lines],
    id_key: str,
    mapping: Mapping | None = None,
    tools: Any = (),
) -> list[ReadEvent]:
    """One root's tree: each message added under its parent, tool pairing carried down each branch."""
    base = base_graph_id(path, root_ref)
    graph = MessageGraph(graph_id=base, metadata={"source_format": "structural", "layout": "tree"}, tools=tools)
    names: set[str] = set()
    m = mapping or Mapping()
    norm = MessageNormaliser(roles=m.roles or None, role_key=m.role_key, content_key=m.content_key)
    stack: list[tuple[SourceRef, dict[str, Any], str | None, MessageNormaliser, dict[str, str]]] = [
        (root_ref, root, None, norm, {})
    ]
    size = 0
    while stack:
        ref, value, parent, norm, call_names = stack.pop()
        size += 1
        builder = _Builder(norm, call_names=call_names)
        builder.add(value, f"{ref} $")
        names |= norm.names
        node = parent
        for step in builder.steps:
            node = graph.add_node(node, step.message, origin=step.origin)
        for child_ref, child in reversed(children.get(str(value[id_key]), [])):
            stack.append((child_ref, child, node, _fork(norm), dict(builder.call_names)))
    _check_speakers(MessageNormaliser(names=names), "$")
    mark_calls_without_tools(graph, UNLOGGED_TOOLS)
    graph.graph_id = content_graph_id(base, graph)
    return [ReadGraph(graph, root_ref, records=size)]


# Top-level fields that name a generated reply in eval and dataset rows (output, response_1, model_answer,
# generated_text, ...): what a file nothing could read still held, when it holds no message-like object.
_REPLY_FIELD = re.compile(
    r"^(?:model_)?(?:output|response|completion|answer|prediction|generation|reply|generated_text|sampled|judgment)"
    r"(?:_?(?:\d+|[ab]))?s?$"
)


def _reply_fields(value: Any) -> int:
    """Generated replies a record holds as text under reply-like fields (:data:`_REPLY_FIELD`)."""
    if not isinstance(value, dict):
        return 0
    count = 0
    for key, item in value.items():
        if not isinstance(key, str) or _REPLY_FIELD.match(key.lower()) is None:
            continue
        if isinstance(item, str) and item.strip():
            count += 1
        elif isinstance(item, list) and item and all(isinstance(t, str) for t in item):
            count += len(item)
    return count


def file_assistant_turns(path: Path) -> int:
    """An estimate of the assistant turns a whole file holds (for the books of a file nothing could read): its
    assistant-like messages, record by record, else its replies under reply-like fields (``output``,
    ``response_1``...; an eval's rows hold no message objects); 0 for a file that is not JSON / JSONL / YAML or too
    large."""
    from msgtrain.ingest.common.shapes import MAX_COUNT_BYTES, assistant_turns_in

    try:
        if path.is_dir() or path.stat().st_size > MAX_COUNT_BYTES:
            return 0
        values = [value for _, value, _ in _records(path) if not isinstance(value, Exception)]
        return sum(assistant_turns_in(v) for v in values) or sum(map(_reply_fields, values))
    except Exception:  # an estimate for the books never becomes a fault of its own
        return 0
