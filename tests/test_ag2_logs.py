"""AG2 / AutoGen 0.2 runtime logs (the SQLite ``logs.db`` of ``autogen.runtime_logging``): every logged call is the
exact context of its reply. Databases are built by ``tests/ag2_db.py`` in the shape AG2's SqliteLogger writes.

Hand count for ``sample_logs/ag2/logs.db``: three calls of the agent ``assistant``, three sampled replies (a tool call,
its answer, the answer to a follow-up)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from msgtrain.cli import main
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.detect import detect_format, looks_like_a_log
from msgtrain.linearize import linearize_graph
from msgtrain.model.completeness import missing_context
from msgtrain.model.openai import to_openai_message
from tests.ag2_db import SYSTEM, WEATHER, weather_session, write_db
from tests.conftest import SAMPLE_LOGS, load_named_tokenizer

SAMPLE = SAMPLE_LOGS / "ag2" / "logs.db"


def served(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as a serving engine hands them to a chat template: call arguments parsed from their JSON text."""
    out = []
    for m in messages:
        calls = [
            {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
            for c in m.get("tool_calls") or []
        ]
        out.append({**m, "tool_calls": calls} if calls else m)
    return out


def read(path: Path) -> tuple[list[ReadGraph], list[ReadReject]]:
    reader = detect_format(path)
    assert reader.name == "ag2_sqlite"
    events = list(read_events(reader, path))
    return [e for e in events if isinstance(e, ReadGraph)], [e for e in events if isinstance(e, ReadReject)]


def test_each_logged_call_is_the_exact_context_apply_chat_template_renders_for_its_reply() -> None:
    (ev,), rejects = read(SAMPLE)
    assert not rejects and ev.records == 3 and ev.graph.policy == "assistant"
    assert missing_context(ev.graph) == []  # the request holds the system message and the tool schemas
    tok = load_named_tokenizer("demo")
    result = linearize_graph(ev.graph, tok)
    trained = [t for s in result.samples for t in s.turn_ids]
    assert len(trained) == 3
    requests = [request for _, request, _ in weather_session()]
    for sample in result.samples:
        for turn, (start, _) in zip(sample.turn_ids, sample.turn_spans, strict=True):
            context = [to_openai_message(n.message, for_template=True) for n in ev.graph.path(turn)[:-1]]
            request = next(r for r in requests if len(r["messages"]) == len(context))
            assert context[0] == {"role": "system", "content": SYSTEM}
            expected = tok.hf.apply_chat_template(
                served(request["messages"]), tools=[WEATHER], add_generation_prompt=True, tokenize=False
            )
            assert tok.hf.decode(sample.input_ids[:start].tolist()) == expected


def test_a_call_that_logged_no_completion_is_rejected_and_the_others_are_read(tmp_path: Path) -> None:
    rows = weather_session()
    agent, request, _ = rows[1]
    path = write_db(tmp_path / "logs.db", [rows[0], (agent, request, {"response": None}), rows[2]])
    (ev,), (reject,) = read(path)
    assert reject.source.record == "row 2" and reject.error.code == "error_response"
    assert ev.records == 2 and len(ev.graph.sampled_nodes()) == 2


def test_a_logs_db_in_a_folder_is_found_and_another_database_is_passed_over(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    write_db(logs / "logs.db", weather_session())
    with sqlite3.connect(logs / "app.sqlite") as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    assert looks_like_a_log(logs / "logs.db") and not looks_like_a_log(logs / "app.sqlite")
    out = tmp_path / "out"
    assert main(["convert", str(logs), "-o", str(out), "-q"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["turns"]["trained"] == 3 and report["records"]["read"] == 3
    assert any(i["path"].endswith("app.sqlite") for i in report["files"]["ignored"])
