"""Context the user supplies for a graph whose log does not hold it: a system prompt and tool schemas.

A coding assistant's session log keeps the conversation, not the request the assistant built around it; a user
who knows what that request held (the assistant's system prompt, its tool schemas) supplies them, and
:func:`supply_context` puts them into the graph, through the model's own types, before it is linearized.

Invariants:
- What the log holds wins. The system prompt goes only before a root that is not a system message (a branch
  that starts with its own system message keeps it); the tools only into a graph none of whose environments
  offers any tool (a log that records tool schemas somewhere keeps exactly what it recorded).
- The graph is rebuilt, not patched: node ids are content hashes of the parent (the environment at a root), so a
  new root and new environments give every node a new id. Structure is kept one for one: each node's origin,
  generation and message, each version edge (ids mapped; an edge whose two runs now hang from the same new system
  message is anchored there), the head.
- Sub-agent graphs nested in tool results are left alone: a sub-agent was sent its own prompt and tools.
- What is supplied clears those parts of the graph's ``context_incomplete`` mark
  (:mod:`msgtrain.model.completeness`) and is recorded under :data:`CONTEXT_SUPPLIED` in the graph's metadata:
  part → the label of what supplied it (a file name), which the linearizer turns into the sample flags of
  :data:`SUPPLIED_FLAGS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from msgtrain.model.completeness import CONTEXT_INCOMPLETE, missing_context
from msgtrain.model.graph import Env, MessageGraph, ParallelEdge
from msgtrain.model.message import text_message

CONTEXT_SUPPLIED = "context_supplied"
SUPPLIED_FLAGS = {"system_prompt": "system_prompt_supplied", "tools": "tools_supplied"}


def supply_context(
    graph: MessageGraph,
    *,
    system_prompt: str | None = None,
    tools: Sequence[Any] | None = None,
    labels: dict[str, str] | None = None,
) -> MessageGraph:
    """``graph`` with ``system_prompt`` and ``tools`` (OpenAI function schemas) put where its log lacks them; the
    same graph when it lacks neither. ``labels`` name what supplied each part (``{"tools": "tools.json"}``)."""
    roots = graph.children.get(None, [])
    give_system = system_prompt is not None and any(graph.nodes[r].message.role != "system" for r in roots)
    give_tools = bool(tools) and not any(env.tools for env in graph.envs.values())
    if not (give_system or give_tools):
        return graph
    supplied = [part for part, given in (("system_prompt", give_system), ("tools", give_tools)) if given]

    def new_env(env: Env) -> Env:
        return Env.make(tools, env.kwargs) if give_tools else env

    out = MessageGraph(
        graph_id=graph.graph_id,
        policy=graph.policy,
        metadata=_metadata_after(graph, supplied, labels or {}),
        tools=new_env(graph.env).tools,
        template_kwargs=graph.env.kwargs,
    )
    envs = {env_id: new_env(env) for env_id, env in graph.envs.items()}
    system_nodes: dict[str, str] = {}  # new env id -> the supplied system message at the root under it

    def root_parent(env: Env) -> str:
        if env.id not in system_nodes:
            assert system_prompt is not None
            message = text_message("system", system_prompt, policy=graph.policy)
            system_nodes[env.id] = out.add_node(None, message, env=env)
        return system_nodes[env.id]

    ids: dict[str, str] = {}
    # Nodes are kept in creation order, a parent always before its children.
    for node in graph.nodes.values():
        env = envs[node.env_id]
        if node.parent is not None:
            parent: str | None = ids[node.parent]
        else:
            parent = root_parent(env) if give_system and node.message.role != "system" else None
        ids[node.id] = out.add_node(
            parent, node.message, origin=node.origin, env=env, generation=graph.generations.get(node.id)
        )
    for edge in graph.edges:
        out.record_edge(edge.kind, [ids[n] for n in edge.old], [ids[n] for n in edge.new], _anchor(edge, ids, out))
    if graph.head:
        out.head = [n.id for n in out.path(ids[graph.head[-1]])]
    out.env = envs[graph.env.id]
    return out


def supplied_context(graph: MessageGraph) -> dict[str, str]:
    """What was supplied for ``graph``: part → label (empty when nothing was)."""
    mark: Any = graph.metadata.get(CONTEXT_SUPPLIED)
    return {k: str(v) for k, v in mark.items() if k in SUPPLIED_FLAGS} if isinstance(mark, dict) else {}


def _metadata_after(graph: MessageGraph, supplied: list[str], labels: dict[str, str]) -> dict[str, Any]:
    metadata = dict(graph.metadata)
    metadata[CONTEXT_SUPPLIED] = {**supplied_context(graph), **{p: labels.get(p, "supplied") for p in supplied}}
    still_missing = [p for p in missing_context(graph) if p not in supplied]
    if still_missing:
        metadata[CONTEXT_INCOMPLETE] = {**metadata[CONTEXT_INCOMPLETE], "missing": still_missing}
    else:
        metadata.pop(CONTEXT_INCOMPLETE, None)
    return metadata


def _anchor(edge: ParallelEdge, ids: dict[str, str], out: MessageGraph) -> str | None:
    """The new anchor of a version edge: its old anchor mapped, or, for runs that started at a root and now both
    hang from the supplied system message, that message."""
    if edge.anchor is not None:
        return ids[edge.anchor]
    parents = {out.nodes[ids[run[0]]].parent for run in (edge.old, edge.new) if run}
    return parents.pop() if len(parents) == 1 else None
