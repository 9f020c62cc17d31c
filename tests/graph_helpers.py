"""Helpers for tests that look at the graphs a reader yields."""

from __future__ import annotations

from msgtrain.ingest.core.events import ReadGraph


def said(graph: ReadGraph) -> list[tuple[str, str, str]]:
    """(role, text, origin) of every node, in insertion order."""
    out = []
    for node in graph.graph.nodes.values():
        text = "".join(getattr(p, "text", "") for p in getattr(node.message, "parts", ()))
        out.append((node.message.role, text, node.origin.value))
    return out
