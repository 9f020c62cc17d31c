"""AG2 / AutoGen 0.2 runtime logs: the SQLite database ``autogen.runtime_logging.start()`` writes (``logs.db``).

Its ``chat_completions`` table holds one row per model call an agent made (``SqliteLogger.log_chat_completion``
in ag2ai/ag2 ``autogen/logger/sqlite_logger.py``): ``request`` is the JSON of the create call's arguments (the
``messages`` the agent sent, system message included, its ``tools``, ``model``...) and ``response`` the JSON of the
``ChatCompletion`` returned; ``source_name`` names the agent and ``session_id`` the logging session. That is the
exact context of every reply, however the agents' chat histories were assembled, so each row is read as a per-call
record by :mod:`msgtrain.ingest.formats.api.calls` (calls sharing a prefix share nodes; each choice is sampled in
exactly its request's context), one conversation per agent and session.

Invariants:
- Rows are read in ``id`` order (the order calls were logged); each row is one record of the books
  (``row N``).
- A row whose response is not a completion (AG2 logs a failed or string response as ``{"response": ...}``) is
  rejected with that reason; the other tables (agents, events, function calls) hold no model call: not read.
- The database is opened read-only (``mode=ro``), never written.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.call_log import CallLogGroups
from msgtrain.ingest.common.sqlite_db import SQLITE_HEADER, connect_read_only
from msgtrain.ingest.formats import Marks, ReadEvent, ReadReject, SourceRef, excerpt
from msgtrain.ingest.formats.api.calls import READER as CALLS

TABLE = "chat_completions"
_COLUMNS = ("id", "request", "response", "source_name", "session_id")


def _has_table(path: Path) -> bool:
    try:
        with closing(connect_read_only(path)) as db:
            row = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)).fetchone()
            columns = {r[1] for r in db.execute(f"PRAGMA table_info({TABLE})")} if row else set()
    except sqlite3.Error:
        return False
    return set(_COLUMNS) <= columns


class AG2SqliteReader:
    name = "ag2_sqlite"
    description = "AG2 / AutoGen 0.2 runtime logs: the SQLite logs.db of autogen.runtime_logging (chat_completions)"
    example = "sample_logs/ag2/logs.db"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks()

    def detect(self, path: Path, head: bytes) -> bool:
        return head.startswith(SQLITE_HEADER) and _has_table(path)

    def read(self, path: Path) -> Iterator[ReadEvent]:
        groups = CallLogGroups(path)
        seen: dict[str | None, Any] = {}
        try:
            with closing(connect_read_only(path)) as db:
                rows = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM {TABLE} ORDER BY id").fetchall()
        except sqlite3.Error as e:
            raise ValidationError(f"cannot read the {TABLE} table: {e}", where=str(path), code="bad_database") from e
        for row_id, request, response, source, session in rows:
            src = SourceRef(str(path), f"row {row_id}")
            where = f"{path} ({TABLE} row {row_id})"
            try:
                record = {"request": _json(request, "request", where), "response": _json(response, "response", where)}
                if isinstance(record["response"], dict) and set(record["response"]) == {"response"}:
                    raise ValidationError(
                        f"the call logged no completion: {str(record['response']['response'])[:200]}",
                        where=where,
                        code="error_response",
                    )
                # One conversation per agent and logging session; the calls reader groups by this id.
                conversation = f"{session or ''}/{source or ''}"
                call, model, extras = CALLS._call(record, where, seen.setdefault(conversation, {}))
                groups.add(call, src, conversation, policy=source or model, extras=extras)
            except MsgtrainError as e:
                yield ReadReject(src, e if e.where else e.located(where), excerpt(response))
        yield from groups.events()


def _json(text: Any, column: str, where: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as e:
        raise ValidationError(f"{column} is not JSON: {e}", where=where, code="bad_record") from None


READER = AG2SqliteReader()
