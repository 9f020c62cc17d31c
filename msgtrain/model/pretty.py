"""Human-readable rendering of graphs in the seed-004 style: ``[System]``, ``[Human]``, ``[AI]``, ``[Tool: …]``.

Branches print as a tree rooted at the first message; siblings are versions or alternative samples.
"""

from __future__ import annotations

from typing import Any

from msgtrain.model.graph import MessageGraph, format_graph, message_line, node_line

__all__ = ["format_graph", "message_line", "rich_tree"]


def rich_tree(g: MessageGraph) -> Any:
    """The same tree as :func:`format_graph`, as a rich Tree: a chain stays flat, each fork opens branches."""
    from rich.markup import escape
    from rich.tree import Tree

    tree = Tree(f"[bold]MessageGraph[/] {escape(g.graph_id)}")
    edge_of = g._edge_index()

    def label(nid: str) -> str:
        mark = f"[magenta]{escape(f'[{edge_of[nid].kind.value}]')}[/] " if nid in edge_of else ""
        return mark + escape(node_line(g, nid, 100))

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
