"""Builds AG2 runtime-log databases for the tests, with the schema and row shape of ag2ai/ag2
``autogen/logger/sqlite_logger.py`` (commit 5b036f6a): ``chat_completions`` rows whose ``request`` is
``json.dumps(request)`` (the create call's arguments) and whose ``response`` is ``json.dumps(to_dict(ChatCompletion))``
(or ``{"response": ...}`` when the call returned a string or nothing)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE chat_completions(
    id INTEGER PRIMARY KEY, invocation_id TEXT, client_id INTEGER, wrapper_id INTEGER, session_id TEXT,
    source_name TEXT, request TEXT, response TEXT, is_cached INEGER, cost REAL,
    start_time DATETIME DEFAULT CURRENT_TIMESTAMP, end_time DATETIME DEFAULT CURRENT_TIMESTAMP);
CREATE TABLE agents (id INTEGER PRIMARY KEY, agent_id INTEGER, wrapper_id INTEGER, session_id TEXT, name TEXT,
    class TEXT, init_args TEXT, timestamp DATETIME DEFAULT CURRENT_TIMESTAMP, UNIQUE(agent_id, session_id));
CREATE TABLE version (id INTEGER PRIMARY KEY CHECK (id = 1), version_number INTEGER NOT NULL);
INSERT INTO version (id, version_number) VALUES (1, 1);
"""

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
SYSTEM = "You are a helpful AI assistant. Reply TERMINATE when the task is done."


def completion(message: dict[str, Any], n: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{n}",
        "choices": [{"finish_reason": "stop", "index": 0, "logprobs": None, "message": message}],
        "created": 1735689600 + n,
        "model": "gpt-4o-2024-08-06",
        "object": "chat.completion",
        "usage": {"completion_tokens": 12, "prompt_tokens": 80 + 20 * n, "total_tokens": 92 + 20 * n},
        "cost": 0.0004,
    }


def weather_session() -> list[tuple[str, dict[str, Any], Any]]:
    """(agent, request, response) of an assistant that calls a tool once, then answers; then its user proxy's
    reply asks for more and the assistant answers again (three calls, three sampled replies). As AutoGen 0.2 keeps
    them, the agent's own messages carry its name unless they hold tool calls, and received ones their sender's."""
    call = {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    history = [
        {"content": SYSTEM, "role": "system"},
        {"content": "Weather in Paris?", "role": "user", "name": "user_proxy"},
    ]
    first = {"content": None, "role": "assistant", "tool_calls": [call]}
    result = {"tool_call_id": "call_abc", "role": "tool", "content": "18 degrees, cloudy"}
    answer = {"content": "It is 18 degrees and cloudy in Paris. TERMINATE", "role": "assistant"}
    follow = {"content": "And tomorrow?", "role": "user", "name": "user_proxy"}
    last = {"content": "I can only see today's weather. TERMINATE", "role": "assistant"}
    rows = []
    for n, (messages, reply) in enumerate(
        [
            (history, first),
            ([*history, first, result], answer),
            ([*history, first, result, {**answer, "name": "assistant"}, follow], last),
        ]
    ):
        request = {"messages": messages, "tools": [WEATHER], "model": "gpt-4o", "temperature": 0}
        rows.append(("assistant", request, completion(reply, n)))
    return rows


def write_db(path: Path, rows: list[tuple[str, dict[str, Any], Any]], session: str = "5d4f-session") -> Path:
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)
        for i, (agent, request, response) in enumerate(rows):
            db.execute(
                "INSERT INTO chat_completions (invocation_id, client_id, wrapper_id, session_id, source_name, request,"
                " response, is_cached, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (f"inv-{i}", 1, 2, session, agent, json.dumps(request), json.dumps(response, indent=4), 0, 0.0004),
            )
    return path


if __name__ == "__main__":  # regenerates sample_logs/ag2/logs.db
    target = Path(__file__).resolve().parents[1] / "sample_logs" / "ag2" / "logs.db"
    target.unlink(missing_ok=True)
    write_db(target, weather_session())
