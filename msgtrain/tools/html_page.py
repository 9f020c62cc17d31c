"""``inspect --html``: the same tree and sample views as a self-contained HTML page.

Invariants:
- One file, no scripts, no external resources (fonts, CSS, images): it opens offline and from an attachment.
- Every text that came from data is HTML-escaped; nothing from a log is ever markup.
- Each token is a ``<span>`` whose title gives its index, id, turn and logprob, so hovering shows what the
  terminal view cannot; trained tokens carry their turn's colour class, control tokens a class of their own.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from msgtrain.errors import OutputError
from msgtrain.run.own_files import own_file
from msgtrain.tools.bounds import gap_note, gaps, turn_of_tokens
from msgtrain.tools.sample_view import Decode, SampleView, describe_cut, plural, shown_pieces
from msgtrain.tools.tree import TreeLine

TURN_COLOURS = ("#86efac", "#7dd3fc", "#fde047", "#f0abfc", "#fdba74", "#5eead4", "#fda4af", "#d9f99d")
ROLE_COLOURS = {"system": "#a21caf", "user": "#0e7490", "assistant": "#15803d", "tool": "#a16207"}

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em; color: #111; background: #fff; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 2em; }
pre.tree { background: #f8fafc; border: 1px solid #e2e8f0; padding: .8em; overflow-x: auto; }
.guide { color: #94a3b8; } .hdr { font-weight: bold; } .edge { color: #a21caf; font-weight: bold; }
.tag { color: #64748b; margin-left: .6em; } .tag .trained { color: #15803d; font-weight: bold; }
.tag .dropped { color: #b91c1c; font-weight: bold; } .tag .sampled { color: #15803d; }
.tag .subagent { color: #0e7490; font-weight: bold; }
.meta { color: #334155; } .cut { color: #b91c1c; font-weight: bold; }
.legend span.sw { display: inline-block; padding: 0 .4em; margin-right: .3em; border-radius: 3px; }
div.tokens { font: 13px/1.6 ui-monospace, monospace; white-space: pre-wrap; word-break: break-all;
  border: 1px solid #e2e8f0; padding: .8em; }
div.tokens span.t { border-right: 1px solid rgba(0,0,0,.08); }
div.tokens span.ctx { color: #64748b; }
div.tokens span.ctl { color: #a21caf; font-weight: bold; }
div.tokens span.elided { background: #334155; color: #fff; font-style: italic; padding: 0 .3em; }
div.tokens span.scissors { background: #b91c1c; color: #fff; font-weight: bold; padding: 0 .3em; }
"""


@dataclass
class PageSample:
    view: SampleView
    pieces: list[str]
    ranges: list[tuple[int, int]] | None = None  # token ranges shown (msgtrain.tools.bounds); None: all


def _turn_css() -> str:
    return "\n".join(
        f"div.tokens span.turn{k}, .legend span.turn{k} {{ background: {c}; }}" for k, c in enumerate(TURN_COLOURS)
    )


def tree_html(lines: Sequence[TreeLine]) -> str:
    out = []
    for line in lines:
        parts = [f'<span class="guide">{html.escape(line.guide)}</span>']
        if line.header:
            parts.append(f'<span class="hdr">{html.escape(line.text)}</span>')
        else:
            if line.edge:
                parts.append(f'<span class="edge">[{html.escape(line.edge)}]</span> ')
            colour = ROLE_COLOURS.get(line.role)
            style = f' style="color:{colour}"' if colour else ""
            parts.append(f"<span{style}>{html.escape(line.text)}</span>")
        if line.tags:
            tags = " · ".join(
                f'<span class="{html.escape(kind)}">{html.escape(text)}</span>' for text, kind in line.tags
            )
            parts.append(f'<span class="tag">({tags})</span>')
        out.append("".join(parts))
    return '<pre class="tree">' + "\n".join(out) + "</pre>"


def _token_spans(s: PageSample, a: int, b: int, turns: np.ndarray, ctrl: np.ndarray, ids: list[int]) -> list[str]:
    """One ``<span>`` per token of ``a:b``, the scissors before the cut point."""
    v = s.view
    spans = []
    for i in range(a, b):
        if v.cut_at is not None and i == v.cut_at:
            spans.append(f'<span class="scissors">✂ {html.escape(v.cut_reason)}</span>')
        turn = int(turns[i])
        classes = ["t", f"turn{turn % len(TURN_COLOURS)}" if turn >= 0 else "ctx"]
        if ctrl[i]:
            classes.append("ctl")
        title = f"#{i} id {ids[i]}" + (f" · turn {turn}" if turn >= 0 else " · context")
        if v.logprobs is not None and turn >= 0 and not np.isnan(v.logprobs[i]):
            title += f" · logprob {float(v.logprobs[i]):.4f}"
        piece = html.escape(s.pieces[i])
        spans.append(f'<span class="{" ".join(classes)}" title="{html.escape(title)}">{piece}</span>')
    return spans


def sample_html(s: PageSample, total: int, control_ids: set[int]) -> str:
    v = s.view
    turns = turn_of_tokens(v.num_tokens, v.turn_spans)
    ctrl = (
        np.isin(v.input_ids, np.fromiter(control_ids, dtype=np.int64))
        if control_ids
        else np.zeros(v.num_tokens, dtype=bool)
    )
    legend = "".join(
        f'<span class="sw turn{k % len(TURN_COLOURS)}">turn {k}</span>{html.escape(nid[:12])} '
        f"(tokens {a}–{b - 1}) &nbsp; "
        for k, ((a, b), nid) in enumerate(zip(v.turn_spans, v.turn_ids, strict=True))
    )
    cut = f'cut: <span class="cut">{html.escape(v.cut_reason)}</span> — {html.escape(describe_cut(v.cut_reason))}'
    if v.cut_at is not None:
        cut += f" (at token {v.cut_at}, where it leaves the other samples of this graph)"
    ids = v.input_ids.tolist()
    spans = []
    shown = s.ranges if s.ranges is not None else [(0, v.num_tokens)]
    hidden = gaps(shown, v.num_tokens)
    for a, b in sorted([*shown, *hidden]):
        if (a, b) in hidden:
            spans.append(f'<span class="elided">{html.escape(gap_note(v, a, b))}</span>')
            continue
        spans.extend(_token_spans(s, a, b, turns, ctrl, ids))
    flags = f" · flags {html.escape(', '.join(v.flags))}" if v.flags else ""
    sizes = f"{v.num_tokens} tokens, {v.num_trained} trained in {plural(len(v.turn_spans), 'turn')}"
    return (
        f'<section class="sample" id="sample-{v.index}">'
        f"<h2>sample {v.index} (of {total}) · {html.escape(v.sample_id)}</h2>"
        f'<p class="meta">graph {html.escape(v.graph_id)} · policy {html.escape(v.policy)} · source '
        f"{html.escape(v.source)}<br>{sizes}"
        f" · engine tokens {'-' if v.engine_tokens is None else v.engine_tokens}{flags}<br>{cut}</p>"
        f'<p class="legend">{legend}<span class="ctx">context</span> &nbsp; <span class="ctl">control token</span></p>'
        f'<div class="tokens">{"".join(spans)}</div></section>'
    )


def page(
    title: str,
    trees: Sequence[Sequence[TreeLine]],
    samples: Sequence[PageSample],
    total: int,
    control_ids: set[int],
    notes: Sequence[str] = (),
) -> str:
    body = [f"<h1>{html.escape(title)}</h1>"]
    body.extend(f'<p class="meta">{html.escape(n)}</p>' for n in notes)
    body.extend(tree_html(t) for t in trees)
    body.extend(sample_html(s, total, control_ids) for s in samples)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}{_turn_css()}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def write_page(
    path: str | Path,
    title: str,
    trees: Sequence[Sequence[TreeLine]],
    views: Sequence[SampleView],
    total: int,
    decode: Decode,
    control_ids: set[int],
    notes: Sequence[str] = (),
    *,
    turns: Sequence[int | None] | None = None,
    max_chars: int | None = None,
) -> Path:
    """Decode every sample's tokens and write the page; returns its path. ``turns[k]`` (when given) is how many
    trained turns of ``views[k]`` to show, ``max_chars`` the longest stretch shown whole (msgtrain.tools.bounds)."""
    samples = []
    for k, v in enumerate(views):
        samples.append(PageSample(v, *shown_pieces(decode, v, turns[k] if turns is not None else None, max_chars)))
    text = page(title, trees, samples, total, control_ids, notes)
    path = Path(path)
    try:
        with own_file(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except OSError as e:
        raise OutputError(f"cannot write the HTML page: {e.strerror or e}", where=str(path)) from e
    return path
