"""Logs of agent frameworks, tracing tools and coding agents that no reader is named after, read by the mechanism
(detection vote, structural reader, shapes vocabulary, context completeness) as serious users write them.

The fixtures are written here in the shape of real third-party files (never the data itself); each says which
repository, path and commit its shape follows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from msgtrain.cli import main
from msgtrain.ingest.detect import detect_format


def convert(tmp_path: Path, *inputs: Path) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    out = tmp_path / "out"
    code = main(["convert", *map(str, inputs), "-o", str(out)])
    rows: list[dict[str, Any]] = []
    for f in sorted((out / "data").glob("*.parquet")):
        rows.extend(pq.read_table(f).to_pylist())
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    return code, rows, report


def _write(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2), encoding="utf-8")
    return path


# Shape of Cline's saved API history (gmfstu/Online-Card-Architecture
# exported_conversation_1769053680585/api_conversation_history.json, commit 2e6753c4ce6476e69eb686167a737c80a1107734):
# a top-level array of Anthropic MessageParams, text-block user turns first, then thinking / text / tool_use replies
# with Cline's own `metrics` beside them, and tool_result blocks in user turns. No system prompt, no tool schemas.
CLINE_HISTORY = [
    {"role": "user", "content": [{"type": "text", "text": "<task>\nAdd a DiscardCard action.\n</task>"}]},
    {"role": "user", "content": [{"type": "text", "text": "<environment_details>ACT</environment_details>"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Read the action system first.", "signature": "c2ln"},
            {"type": "text", "text": "Let me read ActionSystem.cs."},
            {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {"path": "ActionSystem.cs"}},
        ],
        "modelInfo": {"modelId": "claude-sonnet-4-5", "providerId": "cline", "mode": "act"},
        "metrics": {"tokens": {"prompt": 15093, "completion": 388, "cached": 0}},
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "public class ActionSystem {}"},
            {"type": "text", "text": "<environment_details># Current Mode\nACT</environment_details>"},
        ],
    },
    {
        "role": "assistant",
        "content": [{"type": "text", "text": "ActionSystem is empty; I will add the action there."}],
        "modelInfo": {"modelId": "claude-sonnet-4-5", "providerId": "cline", "mode": "act"},
        "metrics": {"tokens": {"prompt": 15561, "completion": 20, "cached": 15093}},
    },
    {"role": "user", "content": [{"type": "text", "text": "Thanks."}]},
]


def test_a_saved_message_list_is_one_conversation_and_its_blocks_choose_the_reader(tmp_path: Path) -> None:
    # Voted message by message, OpenAI chat (which takes any user / assistant message) outvoted the reader of the
    # Anthropic blocks a few messages hold, and the whole file was rejected at its first tool_use.
    path = _write(tmp_path / "logs" / "api_conversation_history.json", CLINE_HISTORY)
    assert detect_format(path).name == "anthropic"
    code, _, report = convert(tmp_path, path)
    assert code == 0 and report["records"]["rejected"] == 0
    assert report["turns"]["found"] == report["turns"]["trained"] == 2


def test_a_transcript_that_calls_tools_without_their_schemas_is_flagged_context_incomplete(tmp_path: Path) -> None:
    path = _write(tmp_path / "logs" / "api_conversation_history.json", CLINE_HISTORY)
    code, rows, report = convert(tmp_path, path)
    assert code == 0 and rows and all("context_incomplete" in r["flags"] for r in rows)
    assert report["flags"]["context_incomplete"] == len(rows)


def test_a_transcript_whose_tool_schemas_are_logged_is_not_flagged(tmp_path: Path) -> None:
    tools = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]
    path = _write(tmp_path / "logs" / "history.json", {"tools": tools, "messages": CLINE_HISTORY})
    code, rows, _ = convert(tmp_path, path)
    assert code == 0 and rows and not any("context_incomplete" in r["flags"] for r in rows)
