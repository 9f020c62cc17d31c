"""Codex CLI's headless event stream (``codex exec --json``): recognised, and rejected saying where the session is.

The stream (openai/codex ``docs/exec.md``, "JSON output mode") holds ``thread.started``, ``turn.started`` /
``turn.completed`` (with usage), ``turn.failed``, ``error`` and ``item.started`` / ``item.updated`` /
``item.completed`` events whose items are the CLI's account of a turn: ``agent_message`` text, ``reasoning``
summaries, ``command_execution`` (the command line and its output), ``file_change``, ``mcp_tool_call``,
``web_search``, ``todo_list``. It holds neither the prompt (an argument of ``codex exec``) nor the calls as the model
emitted them (a shell call's JSON arguments), so no reply in it can be trained exactly. The same session is written
whole to its rollout file, ``~/.codex/sessions/YYYY/MM/DD/rollout-*-<thread id>.jsonl``, which the ``codex``
reader reads: the reject names it, and counts the replies (``agent_message`` items) as turns lost.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from msgtrain.errors import ValidationError
from msgtrain.ingest.formats import ReadEvent, ReadReject, SourceRef, head_shape, iter_json_lines

EVENT_TYPES = frozenset(
    {
        "thread.started",
        "turn.started",
        "turn.completed",
        "turn.failed",
        "item.started",
        "item.updated",
        "item.completed",
        "error",
    }
)


def is_exec_stream(head: bytes) -> bool:
    """JSONL of ``codex exec --json`` events, starting a thread."""
    shape = head_shape(head)
    types = shape.values_at(".type")
    return shape.layout == "jsonl" and "thread.started" in types and types <= EVENT_TYPES


def reject_exec_stream(path: Path) -> Iterator[ReadEvent]:
    """One reject for the whole stream (see the module docstring)."""
    thread = None
    replies = 0
    lines = 0
    for _, _, obj in iter_json_lines(path):
        lines += 1
        if not isinstance(obj, dict):
            continue
        if obj.get("type") == "thread.started" and isinstance(obj.get("thread_id"), str):
            thread = obj["thread_id"]
        item = obj.get("item")
        if obj.get("type") == "item.completed" and isinstance(item, dict) and item.get("type") == "agent_message":
            replies += 1
    rollout = f"rollout-*-{thread}.jsonl" if thread else "rollout-*.jsonl"
    error = ValidationError(
        "a `codex exec --json` event stream holds the CLI's account of each turn, not the prompt nor the calls as "
        f"the model emitted them: its {replies} replies cannot be trained exactly",
        where=str(path),
        code="unsupported_log",
        hint=f"convert the session's rollout instead: ~/.codex/sessions/YYYY/MM/DD/{rollout}",
    )
    yield ReadReject(SourceRef(str(path), "line 1"), error, count=max(lines, 1), turns=replies)
