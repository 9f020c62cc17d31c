"""Human-readable rendering of graphs in the seed-004 style: ``[System]``, ``[Human]``, ``[AI]``, ``[Tool: …]``.

Branches print as a tree rooted at the first message; siblings are versions or alternative samples.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msgtrain.model.message import AnyMessage, OptionCallMessage, OptionResultMessage
from msgtrain.model.openai import arguments_text, result_text

if TYPE_CHECKING:
    from msgtrain.model.graph import MessageGraph

_LABEL = {"system": "System", "user": "Human", "assistant": "AI"}


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def message_line(message: AnyMessage, width: int = 100) -> str:
    if isinstance(message, OptionResultMessage):
        r = message.result
        tag = f"[Tool: {r.option_name} (call_id={r.invocation_id})]" + (" ERROR" if r.is_error else "")
        return f"{tag} {_short(result_text(r), width)}"
    label = f"[{_LABEL.get(message.role, message.role)}]"
    body = _short(message.text, width)
    if message.reasoning:
        body = f"<thinking {len(message.reasoning)} chars> " + body
    if isinstance(message, OptionCallMessage):
        calls = ", ".join(f"{c.option_name}({_short(arguments_text(c), 40)})" for c in message.calls)
        body = (body + " " if body else "") + f"-> {calls}"
    return f"{label} {body}".rstrip()


def _node_line(g: MessageGraph, nid: str, width: int) -> str:
    node = g.nodes[nid]
    bits = []
    if node.message.role == "assistant":
        bits.append(node.origin.value)
    if node.message.step_num is not None:
        bits.append(f"step {node.message.step_num}")
    if node.message.policy not in ("policy", "user", "system", "runtime"):
        bits.append(f"policy={node.message.policy}")
    suffix = f"  ({', '.join(bits)})" if bits else ""
    return message_line(node.message, width) + suffix


def format_graph(g: MessageGraph, width: int = 100) -> str:
    lines = [f"MessageGraph {g.graph_id} ({len(g.nodes)} nodes, {len(g.leaves())} branches, {len(g.edges)} versions)"]
    edge_of = g._edge_index()

    def walk(nid: str, prefix: str, last: bool, depth_siblings: bool) -> None:
        connector = ("└─ " if last else "├─ ") if depth_siblings else ""
        mark = f"[{edge_of[nid].kind.value}] " if nid in edge_of else ""
        lines.append(prefix + connector + mark + _node_line(g, nid, width))
        kids = g.children.get(nid, [])
        child_prefix = prefix + (("   " if last else "│  ") if depth_siblings else "")
        for i, k in enumerate(kids):
            walk(k, child_prefix, i == len(kids) - 1, len(kids) > 1)

    roots = g.children.get(None, [])
    for i, r in enumerate(roots):
        walk(r, "", i == len(roots) - 1, len(roots) > 1)
    return "\n".join(lines)


def rich_tree(g: MessageGraph) -> Any:
    """The same tree as :func:`format_graph`, as a rich Tree: a chain stays flat, each fork opens branches."""
    from rich.markup import escape
    from rich.tree import Tree

    tree = Tree(f"[bold]MessageGraph[/] {escape(g.graph_id)}")
    edge_of = g._edge_index()

    def label(nid: str) -> str:
        mark = f"[magenta]{escape(f'[{edge_of[nid].kind.value}]')}[/] " if nid in edge_of else ""
        return mark + escape(_node_line(g, nid, 100))

    # Iterative walk (long conversations must not hit the recursion limit).
    stack: list[tuple[str, Any, bool]] = [(r, tree, True) for r in reversed(g.children.get(None, []))]
    while stack:
        nid, holder, own_branch = stack.pop()
        container = holder.add(label(nid)) if own_branch else holder
        if not own_branch:
            container.add(label(nid))
        kids = g.children.get(nid, [])
        fork = len(kids) > 1
        stack.extend((k, container, fork) for k in reversed(kids))
    return tree
