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
    from rich.tree import Tree

    tree = Tree(f"[bold]MessageGraph[/] {g.graph_id}")
    edge_of = g._edge_index()
    stack: list[tuple[str, Any]] = [(r, tree) for r in reversed(g.children.get(None, []))]
    while stack:
        nid, parent = stack.pop()
        kids = g.children.get(nid, [])
        mark = f"[magenta][{edge_of[nid].kind.value}][/] " if nid in edge_of else ""
        from rich.markup import escape

        label = mark + escape(_node_line(g, nid, 100))
        # Chains stay flat (one branch per fork) so long conversations do not nest hundreds deep.
        branch = parent.add(label) if len(g.children.get(g.nodes[nid].parent, [])) > 1 or parent is tree else None
        target = branch if branch is not None else parent
        if branch is None:
            parent.add(label)
        stack.extend((k, target) for k in reversed(kids))
    return tree
