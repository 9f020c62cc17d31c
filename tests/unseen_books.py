"""What a conversion of a hand-made fixture of tests/fixtures/unseen trains, and in which context: the helpers the
tests of unseen shapes share (test_unseen_runs, test_unseen_calls, test_unseen_sweep)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph
from msgtrain.ingest.detect import detect_format
from msgtrain.model.graph import MessageGraph
from msgtrain.run.parts import LinearizeSettings, convert_file

FIXTURES = Path(__file__).parent / "fixtures" / "unseen"
SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)


def books(path: Path) -> tuple[int, int, int]:
    """(trained, dropped, lost) of converting ``path``."""
    _, stats, _ = convert_file(path, SETTINGS)
    return stats.turns_trained, sum(stats.turns_dropped.values()), stats.turns_lost


def graphs(path: Path) -> list[MessageGraph]:
    return [e.graph for e in read_events(detect_format(path), path) if isinstance(e, ReadGraph)]


def said(message: Any) -> tuple[str, Any]:
    """(role, text) of a message; a call's (role, [(name, arguments)]); a result's (role, (name, result))."""
    calls = getattr(message, "calls", None)
    if calls:
        return message.role, [(c.option_name, c.arguments) for c in calls]
    result = getattr(message, "result", None)
    if result is not None:
        return message.role, (result.option_name, result.result)
    return message.role, message.text


def contexts(path: Path) -> list[list[tuple[str, Any]]]:
    """The path to each sampled reply, the reply last, in file order."""
    return [
        [said(n.message) for n in graph.path(node.id)]
        for graph in graphs(path)
        for node in graph.nodes.values()
        if node.origin.value == "sampled"
    ]
