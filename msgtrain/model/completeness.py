"""Whether a graph holds everything the model was sent: its system prompt and its tool schemas.

Many logs do not record them (coding-assistant session logs keep the conversation, not the request the assistant
built around it). A sample trained on such a graph is not token-exact, whatever the tokenizer: the model saw more
than the sample holds. Readers say so here; the linearizer then flags every sample of the graph
``context_incomplete`` and the run's books count them.

Invariants:
- The mark lives in the graph's metadata under :data:`CONTEXT_INCOMPLETE` as ``{"missing": [...], "why": ...}``,
  ``missing`` a sorted subset of :data:`CONTEXT_PARTS`; marking twice merges what is missing.
- A reader marks a graph only for what its format cannot hold or did not hold in this log; where the log holds the
  part (a logged request, a results file with the policy text), the reader puts it in the context instead.
- When the user supplies the missing parts (``context:`` in the config) they are added to the graph's root and
  the mark is cleared for what was supplied.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from msgtrain.model.graph import MessageGraph

CONTEXT_INCOMPLETE = "context_incomplete"
CONTEXT_PARTS = ("system_prompt", "tools")


def mark_context_incomplete(graph: MessageGraph, missing: Iterable[str], why: str) -> None:
    """Record that ``graph`` lacks ``missing`` parts of what its model was sent, and why."""
    parts = set(missing)
    unknown = parts - set(CONTEXT_PARTS)
    if unknown:
        raise ValueError(f"unknown context parts {sorted(unknown)}; use {CONTEXT_PARTS}")
    prev = missing_context(graph)
    graph.metadata[CONTEXT_INCOMPLETE] = {"missing": sorted(parts | set(prev)), "why": why}


def missing_context(graph: MessageGraph) -> list[str]:
    """The parts of the model's context ``graph`` lacks (empty when complete or unknown to be incomplete)."""
    mark: Any = graph.metadata.get(CONTEXT_INCOMPLETE)
    if not isinstance(mark, dict):
        return []
    return [p for p in mark.get("missing", []) if p in CONTEXT_PARTS]


def clear_context_parts(graph: MessageGraph, supplied: Iterable[str]) -> None:
    """Drop ``supplied`` parts from the mark (the user gave them); the mark goes when nothing is missing."""
    left = [p for p in missing_context(graph) if p not in set(supplied)]
    if not left:
        graph.metadata.pop(CONTEXT_INCOMPLETE, None)
    else:
        graph.metadata[CONTEXT_INCOMPLETE] = {**graph.metadata[CONTEXT_INCOMPLETE], "missing": left}
