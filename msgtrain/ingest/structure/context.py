"""A conversation's context beside its messages: its system prompt and its tools.

Where a record keeps them: a system prompt beside the messages (:data:`SYSTEM_KEYS`), in a settings object beside
them (LibreChat's ``options.promptPrefix``), or in an enclosing object (passed down the search by
:func:`context_here`); tools under :data:`TOOL_KEYS`, or an enclosing object's (only those the conversation names by
``tool_ids`` when it does).

Invariants:
- The nearest holder wins: a conversation's own keys over its ancestors', an ancestor's over the file's.
- A system prompt is put in only where the conversation holds none; when both hold one, they must agree (the one
  beside may start the one inside: a template rendered with more), else the conversation is ambiguous, never
  silently given one of the two.
- An agent's base system prompt (``_sys_prompt``), which its framework extends when it calls the model, is never
  given as the system message: the conversation is marked incomplete for it instead.
- A chat UI's export (messages that name their side by ``sender`` or a user flag, not by an API role) records the
  conversation shown, not the request the product built: without a system message of its own it is marked
  incomplete for the system prompt (:func:`mark_ui_export`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.conversation_files import Step, content_graph_id
from msgtrain.ingest.common.message_like import names_ui_side
from msgtrain.ingest.common.tool_schemas import calls_not_schemas, schemas_as_such
from msgtrain.ingest.structure.found import Found
from msgtrain.ingest.structure.mapping import Mapping
from msgtrain.model.completeness import mark_context_incomplete
from msgtrain.model.graph import MessageGraph, Origin

# Where a record keeps its conversation's system prompt, beside the messages or in an ancestor of them: chat UIs'
# exports (chatbot-ui ``prompt``, LibreChat ``promptPrefix``), Cohere v1's ``preamble``, OpenAI ``instructions``.
SYSTEM_KEYS = ("system", "system_prompt", "systemPrompt", "instructions", "preamble", "promptPrefix")
# An agent's base system prompt, which its framework extends when it calls the model (AgentScope's ReActAgent state
# ``_sys_prompt``, to which the prompts of its registered skills are added): the system message the calls were sent
# is not in the log, so the conversations under it are marked incomplete for it, never given the base as if exact.
_BASE_SYSTEM_KEYS = ("_sys_prompt",)
TOOL_KEYS = ("tools", "functions", "tool_definitions")


UI_EXPORT_SYSTEM = "a chat UI's export records the conversation shown, not the system prompt the product sent with it"


def mark_ui_export(graph: MessageGraph, messages: Iterable[Any]) -> None:
    """Mark ``graph`` incomplete for its system prompt when its logged ``messages`` are a chat UI's export (they
    name their side as the UI does: Claude.ai's ``sender``, ``isCreatedByUser``, ``is_user``) and no system message
    reached the graph: the product (Claude.ai, a character card in SillyTavern) sent one, which the export never
    held, as a ChatGPT export's node map never does."""
    if any(n.message.role == "system" for n in graph.nodes.values()):
        return
    if any(names_ui_side(m) for m in messages):
        mark_context_incomplete(graph, ["system_prompt"], UI_EXPORT_SYSTEM)


def context_here(value: dict[str, Any], path: str, inherited: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """What an object passes down to the conversations inside it: its system prompt and tools (its own keys win
    over its ancestors')."""
    out = dict(inherited)
    # an ancestor's ``prompt`` or ``instructions`` is as often the task as a system prompt: only sibling keys say so
    keys = [k for k in SYSTEM_KEYS if k != "instructions"]
    system = next((k for k in keys if isinstance(value.get(k), str) and value[k].strip()), None)
    if system is not None:
        out["system"] = (f"{path}.{system}", value[system])
    base = next((k for k in _BASE_SYSTEM_KEYS if isinstance(value.get(k), str) and value[k].strip()), None)
    if base is not None:
        out["base_system"] = (f"{path}.{base}", value[base])
    tools = next(
        (k for k in TOOL_KEYS if isinstance(value.get(k), list) and value[k] and not calls_not_schemas(value[k])),
        None,
    )
    if tools is not None:
        out["tools"] = (f"{path}.{tools}", value[tools])
    return out


# Objects beside a conversation that hold its settings, the system prompt among them (LibreChat's ``options``; Open
# WebUI's ``chat.params``, whose ``system`` it sends as the system message).
_SETTINGS_KEYS = ("options", "settings", "config", "preset", "conversation_settings", "params")


def system_in_settings(record: dict[str, Any]) -> str | None:
    """The path of a system prompt kept in a settings object beside the messages (``options.promptPrefix``)."""
    for key in _SETTINGS_KEYS:
        value = record.get(key)
        if isinstance(value, dict):
            hit = next((k for k in SYSTEM_KEYS if isinstance(value.get(k), str) and value[k].strip()), None)
            if hit is not None:
                return f"{key}.{hit}"
    return None


def tools_in_settings(record: dict[str, Any]) -> str | None:
    """The path of the tools kept in an object beside the messages that describes the agent or its settings (an ATIF
    trajectory's ``agent.tool_definitions`` beside its ``steps``), or in the metadata a tracing SDK logs a call's
    parameters other than its messages in (Braintrust's wrapped clients: ``input`` the messages, ``metadata`` the
    model, tools and sampling settings): a non-empty list of tool objects; in the metadata, a bag of anything, only
    objects that are schemas by their own keys (:func:`schemas_as_such`)."""
    for key in ("agent", *_SETTINGS_KEYS, "metadata"):
        value = record.get(key)
        if isinstance(value, dict):
            test = schemas_as_such if key == "metadata" else _tool_list
            hit = next((k for k in TOOL_KEYS if test(value.get(k))), None)
            if hit is not None:
                return f"{key}.{hit}"
    return None


def _tool_list(value: Any) -> bool:
    dicts = isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)
    return dicts and not calls_not_schemas(value)


def under_system(graph: MessageGraph, system: str) -> MessageGraph:
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


def inherited_tools(found: Found) -> tuple[str, Any]:
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


def inheriting(found: Found, inherited: dict[str, tuple[str, Any]]) -> Found:
    """``found`` with the system prompt and tools its ancestors keep for it (where its own record has none)."""
    found.inherited = {k: v for k, v in inherited.items() if k not in found.mapping.columns}
    return found


def text_blocks(value: Any) -> str | None:
    """A system prompt logged as one text block (``[{"text": ...}]``: Bedrock Converse and its fine-tuning files,
    Anthropic's Messages API). Several blocks are not read: how the API joined them is not in the log."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        block = value[0]
        if isinstance(block.get("text"), str) and block.get("type", "text") == "text":
            return block["text"]
    return None


def base_system_at(found: Found, m: Mapping, holder: dict[str, Any], at: str) -> str | None:
    """Where the conversation's agent keeps its base system prompt (:data:`_BASE_SYSTEM_KEYS`, or a mapping's
    ``base_system`` column), or None."""
    if "base_system" in found.inherited:
        return found.inherited["base_system"][0]
    value = m.field_of(holder, "base_system")
    return f"{at}.{m.columns['base_system']}" if isinstance(value, str) and value.strip() else None


def with_system(steps: list[Step], system: str | None, at: str, m: Mapping) -> list[Step]:
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
