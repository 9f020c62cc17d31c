"""A message graph as a tree of lines, annotated for people debugging training data.

Extends :mod:`msgtrain.model.pretty` (same ``[System]``/``[Human]``/``[AI]``/``[Tool: …]`` message lines) with
what ``inspect`` needs: the version edge that starts each branch (edit, compaction with how many messages it
replaced, deletion, env change, rewind), origin / step / policy of every message, what became of each sampled
turn (trained in which sample, or dropped and why), and sub-agent graphs nested under the tool result that
carries them.

Invariants:
- Lines come in depth-first order; a chain of single children stays flat and only forks indent, so a
  conversation of thousands of messages is thousands of lines, not thousands of indentation levels.
- The walk is iterative (no recursion per message); only nested sub-agent graphs recurse, one level per nesting.
- The line model is renderer-neutral: :func:`rich_lines` renders it for terminals, ``html_page`` for browsers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.markup import escape
from rich.text import Text

from msgtrain.model.graph import EdgeKind, MessageGraph, Origin, ParallelEdge
from msgtrain.model.message import OptionResultMessage
from msgtrain.model.pretty import message_line

ROLE_STYLE = {"system": "magenta", "user": "cyan", "assistant": "green", "tool": "yellow"}
TAG_STYLE = {
    "sampled": "bold green",
    "origin": "dim",
    "step": "blue",
    "policy": "bright_blue",
    "trained": "bold green",
    "dropped": "bold red",
    "edge": "bold magenta",
    "subagent": "bold cyan",
}


@dataclass(frozen=True)
class TurnNote:
    """What became of one sampled turn: trained in sample ``sample`` as its turn ``turn``, or dropped."""

    trained: bool
    sample: int | None = None  # index among the samples shown
    turn: int | None = None  # index of the turn inside that sample (colour key)
    reason: str | None = None


@dataclass
class TreeLine:
    guide: str  # box-drawing prefix
    text: str  # the message line
    role: str
    node_id: str
    depth: int  # nesting of sub-agent graphs (0 = top level)
    edge: str | None = None  # the version edge that starts this branch
    tags: list[tuple[str, str]] = field(default_factory=list)  # (text, kind in TAG_STYLE)
    header: bool = False  # a graph header line rather than a message


def edge_index(g: MessageGraph) -> dict[str, ParallelEdge]:
    """Node id → the version edge whose new side starts at it (first node of an edit/compaction, or the node
    after a deletion)."""
    idx: dict[str, ParallelEdge] = {}
    for e in g.edges:
        if e.new:
            idx.setdefault(e.new[0], e)
        elif e.old:
            for child in g.children.get(e.anchor, []):
                if child not in e.old:
                    idx.setdefault(child, e)
    return idx


def _edge_label(e: ParallelEdge) -> str:
    if e.kind is EdgeKind.COMPACTION:
        return f"compaction: {len(e.old)} messages → {len(e.new)}"
    if e.kind is EdgeKind.DELETE:
        return f"delete: {len(e.old)} messages"
    return e.kind.value


def graph_lines(
    g: MessageGraph, notes: dict[str, TurnNote] | None = None, *, width: int = 100, depth: int = 0, guide: str = ""
) -> list[TreeLine]:
    """The graph (and nested sub-agent graphs) as annotated tree lines."""
    notes = notes or {}
    kinds = sorted({e.kind.value for e in g.edges})
    summary = (
        f"MessageGraph {g.graph_id} · policy {g.policy} · {_n(len(g.nodes), 'node')}, "
        f"{_n(len(g.leaves()), 'branch', 'es')}, {_n(len(g.edges), 'version')}"
        + (f" ({', '.join(kinds)})" if kinds else "")
    )
    lines = [TreeLine(guide, summary, "", "", depth, header=True)]
    edges = edge_index(g)
    roots = g.children.get(None, [])
    # (node id, guide for its line, guide for its children, whether its parent forks)
    stack: list[tuple[str, str, str]] = []
    for i, r in reversed(list(enumerate(roots))):
        last = i == len(roots) - 1
        fork = len(roots) > 1
        stack.append(
            (
                r,
                guide + (("└─ " if last else "├─ ") if fork else ""),
                guide + (("   " if last else "│  ") if fork else ""),
            )
        )
    while stack:
        nid, line_guide, child_guide = stack.pop()
        node = g.nodes[nid]
        msg = node.message
        line = TreeLine(line_guide, message_line(msg, width), msg.role, nid, depth)
        if nid in edges:
            line.edge = _edge_label(edges[nid])
        if node.is_assistant:
            line.tags.append((node.origin.value, "sampled" if node.origin is Origin.SAMPLED else "origin"))
        if msg.step_num is not None:
            line.tags.append((f"step {msg.step_num}", "step"))
        if msg.policy not in ("policy", "user", "system", "runtime", g.policy):
            line.tags.append((f"policy {msg.policy}", "policy"))
        note = notes.get(nid)
        if note is not None:
            if note.trained:
                line.tags.append((f"trained: sample {note.sample}, turn {note.turn}", "trained"))
            else:
                line.tags.append((f"dropped: {note.reason}", "dropped"))
        lines.append(line)
        if isinstance(msg, OptionResultMessage) and msg.subgraph is not None:
            from msgtrain.model.graphlog import graph_from_data

            sub = graph_from_data(msg.subgraph)
            sub_lines = graph_lines(sub, notes, width=width, depth=depth + 1, guide=child_guide + "┆  ")
            sub_lines[0].tags.append(("sub-agent", "subagent"))
            lines.extend(sub_lines)
        kids = g.children.get(nid, [])
        fork = len(kids) > 1
        for i, k in reversed(list(enumerate(kids))):
            last = i == len(kids) - 1
            stack.append(
                (
                    k,
                    child_guide + (("└─ " if last else "├─ ") if fork else ""),
                    child_guide + (("   " if last else "│  ") if fork else ""),
                )
            )
    return lines


def rich_lines(lines: list[TreeLine], turn_styles: list[str] | None = None) -> Text:
    """Tree lines as one rich Text. ``turn_styles`` colours each trained tag like its turn in the sample view."""
    out = Text()
    for n, line in enumerate(lines):
        if n:
            out.append("\n")
        out.append(line.guide, style="dim")
        if line.header:
            out.append(line.text, style="bold")
        else:
            if line.edge:
                out.append(f"[{line.edge}] ", style=TAG_STYLE["edge"])
            out.append_text(
                Text.from_markup(f"[{ROLE_STYLE.get(line.role, '')}]{escape(_label(line.text))}[/]")
                if line.role in ROLE_STYLE
                else Text(_label(line.text))
            )
            out.append(_body(line.text))
        if line.tags:
            out.append("  (", style="dim")
            for k, (text, kind) in enumerate(line.tags):
                style = TAG_STYLE.get(kind, "")
                if kind == "trained" and turn_styles:
                    turn = int(text.rsplit(" ", 1)[-1])
                    style = turn_styles[turn % len(turn_styles)]
                out.append(" · " if k else "", style="dim")
                out.append(text, style=style)
            out.append(")", style="dim")
    return out


def _label(text: str) -> str:
    """The ``[Role]`` / ``[Tool: …]`` head of a message line."""
    end = text.find("]")
    return text[: end + 1] if text.startswith("[") and end > 0 else ""


def _body(text: str) -> str:
    head = _label(text)
    return text[len(head) :]


def _n(count: int, noun: str, suffix: str = "s") -> str:
    return f"{count} {noun}" + ("" if count == 1 else suffix)
