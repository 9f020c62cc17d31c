"""Crush (charmbracelet/crush) and the Go OpenCode it grew from (opencode-ai/opencode): the SQLite database each keeps
its sessions in (``.crush/crush.db``, ``.opencode/opencode.db``): tables ``sessions`` (``id``, ``parent_session_id``,
``title``, ``summary_message_id`` from 2025 on, ...) and ``messages`` (``id``, ``session_id``, ``role`` user /
assistant / tool, ``parts`` the JSON of ``[{type, data}]``, ``model``, ``created_at``; later ``provider``,
``is_summary_message``, ``seq``), internal/db/migrations.

A part is ``text`` ``{text}``, ``reasoning`` ``{thinking, signature}``, ``tool_call`` ``{id, name, input (JSON text),
finished}``, ``tool_result`` ``{tool_call_id, name, content, is_error}``, ``binary`` ``{path, mime_type, data}``,
``image_url`` ``{url}`` or ``finish`` ``{reason, time}`` (internal/message/content.go). One graph per session,
``crush:<session id>``, policy ``crush``; each row of ``sessions`` and ``messages`` is one record.

What a request held is rebuilt as the agent builds it (internal/llm/agent/agent.go): the session's messages in
``seq`` order where they are numbered, else ``created_at`` order (then as stored); an assistant message is one model
call, sampled after everything before it (its reasoning, text and tool calls; one with none of them is left out, as
the agent leaves it out), a ``tool`` message the results of the calls before it. An assistant message that did not
finish (``finish`` reason ``canceled``, ``error``, or ``max_tokens``: stopped at the output limit) is the history later
requests hold, ``carried`` (``interrupted`` when canceled or cut at the limit), as is one with no ``finish`` part (the
agent adds one whenever a stream ends: it stopped while this one streamed). After a summary
(``sessions.summary_message_id``, or a message ``is_summary_message``), requests start with that message sent as a
user message: a new branch from the root (a ``compaction`` edge); the summary itself was sampled after a prompt the
database does not keep, so it is ``carried``. A schema without
``is_summary_message`` names only the latest summary (``summary_message_id``, overwritten by each): in a session that
has one, an earlier summary is an assistant message right after an assistant message (the agent's own messages always
answer a user or tool message; ``Summarize`` appends its reply to the session as it stands), and requests restart
there too.

Every graph is ``context_incomplete`` (``system_prompt``, ``tools``): neither is stored. A message whose parts cannot
be read is a reject; the replies after it in its session are ``carried``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.session_common import Chain, as_dict, graph_id_for
from msgtrain.ingest.common.sqlite_db import SQLITE_HEADER, connect_read_only
from msgtrain.ingest.formats import Marks, ReadEvent, ReadGraph, ReadReject, ReadSkip, SourceRef, excerpt
from msgtrain.ingest.formats.api.anthropic import AnthropicConverter
from msgtrain.model.completeness import mark_context_incomplete
from msgtrain.model.graph import EdgeKind, MessageGraph, Origin
from msgtrain.model.message import Generation

POLICY = "crush"
UNLOGGED = "Crush stores the conversation, not the system prompt and tool schemas it sends with each request"
_TABLES = {"sessions": {"id", "title"}, "messages": {"id", "session_id", "role", "parts"}}


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}


class CrushReader:
    name = "crush"
    description = "Crush / Go OpenCode SQLite databases: sessions + messages whose parts are [{type, data}]"
    example = "sample_logs/crush/crush.db"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks()

    def detect(self, path: Path, head: bytes) -> bool:
        if not head.startswith(SQLITE_HEADER):
            return False
        try:
            with closing(connect_read_only(path)) as db:
                return all(columns <= _columns(db, table) for table, columns in _TABLES.items())
        except sqlite3.Error:
            return False

    def read(self, path: Path) -> Iterator[ReadEvent]:
        try:
            with closing(connect_read_only(path)) as db:
                db.row_factory = sqlite3.Row
                order = "created_at, rowid" if "created_at" in _columns(db, "sessions") else "rowid"
                sessions = db.execute(f"SELECT * FROM sessions ORDER BY {order}").fetchall()
                columns = _columns(db, "messages")
                order = "created_at, rowid" if "created_at" in columns else "rowid"
                order = "seq, rowid" if "seq" in columns else order
                for session in sessions:
                    rows = db.execute(
                        f"SELECT * FROM messages WHERE session_id = ? ORDER BY {order}", (session["id"],)
                    ).fetchall()
                    yield from _Session(path, session).events(rows)
                lost = db.execute(
                    "SELECT count(*) FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)"
                ).fetchone()[0]
        except sqlite3.Error as e:
            raise ValidationError(f"cannot read Crush's tables: {e}", where=str(path), code="bad_database") from e
        if lost:
            yield ReadSkip(SourceRef(str(path), "file"), "crush_messages_without_session", lost)


class _Session:
    def __init__(self, path: Path, row: sqlite3.Row):
        self.path = path
        self.sid = str(row["id"])
        keys = row.keys()
        self.summary_id = row["summary_message_id"] if "summary_message_id" in keys else None
        self.graph = MessageGraph(graph_id=graph_id_for("crush", self.sid, path), policy=POLICY)
        self.chain = Chain(self.graph)
        self.converter = AnthropicConverter(policy=POLICY)
        self.meta: dict[str, Any] = {"format": "crush", "session_id": self.sid}
        for column in ("title", "parent_session_id"):
            if column in keys and isinstance(row[column], str) and row[column]:
                self.meta[column] = row[column]
        self.records = 1
        self.rejects: list[ReadReject] = []
        # Where no column flags a summary, sessions.summary_message_id names only the latest one (each summary
        # overwrites it): an earlier one is known by its shape, an assistant message right after an assistant message
        # (in the agent's own flow an assistant message answers a user or tool message; Summarize appends its reply
        # to the session as it stands)
        self.infer_summaries = self.summary_id is not None
        self.last_role: Any = None

    def events(self, rows: list[sqlite3.Row]) -> Iterator[ReadEvent]:
        if rows and "is_summary_message" in rows[0].keys():  # noqa: SIM118 - a sqlite3.Row's "in" looks at its values
            self.infer_summaries = False
        for row in rows:
            self.records += 1
            ref = SourceRef(str(self.path), f"message {row['id']}")
            try:
                self._message(row, str(ref))
            except MsgtrainError as e:
                self.chain.taint = self.chain.taint or f"{ref} could not be read"
                self.rejects.append(ReadReject(ref, e.located(str(ref)), excerpt(row["parts"])))
                self.records -= 1
            self.last_role = row["role"]
        yield from self.rejects
        source = SourceRef(str(self.path), f"session {self.sid}")
        if any(n.is_assistant for n in self.graph.nodes.values()):
            mark_context_incomplete(self.graph, ["system_prompt", "tools"], UNLOGGED)
            self.graph.metadata.update(self.meta)
            yield ReadGraph(self.graph, source, records=self.records)
        else:
            yield ReadSkip(source, "crush_session_without_replies", self.records)

    def _message(self, row: sqlite3.Row, where: str) -> None:
        try:
            parts = json.loads(row["parts"])
        except (TypeError, ValueError) as e:
            raise ValidationError(f"parts is not JSON: {e}", where=where, code="bad_record") from None
        if not isinstance(parts, list):
            raise ValidationError("parts is not a list", where=where, code="bad_record")
        role = row["role"]
        blocks, finish = _blocks([as_dict(p) for p in parts], role, where)
        flagged = "is_summary_message" in row.keys() and bool(row["is_summary_message"])  # noqa: SIM118 - a Row
        summary = flagged or (self.summary_id is not None and row["id"] == self.summary_id)
        summary = summary or (self.infer_summaries and role == "assistant" and self.last_role == "assistant")
        if role == "assistant":
            if not blocks:
                return  # the agent sends no message without calls, text or reasoning
            converted, _ = self.converter.message({"role": "assistant", "content": blocks}, 0)
            has_model = "model" in row.keys()  # noqa: SIM118 - a sqlite3.Row's "in" looks at its values
            model = row["model"] if has_model and isinstance(row["model"], str) else None
            for message in converted:
                metadata, origin = dict(message.metadata), None
                if summary:
                    metadata["why_not_trained"] = "a summary sampled after a prompt the database does not keep"
                    origin = Origin.CARRIED
                elif finish in ("canceled", "error", "max_tokens"):
                    # canceled by the user, failed, or stopped at the output limit: the reply's end was never sampled
                    interrupted = finish != "error"
                    metadata |= {"interrupted": interrupted, "why_not_trained": f"the reply ended {finish}"}
                    origin = Origin.CARRIED
                elif finish is None:
                    # the agent adds a finish part when the stream ends (or is canceled): a message without one was
                    # cut while it streamed (the agent stopped), its end never sampled
                    why = "the message has no finish part: the agent stopped before the reply ended"
                    metadata |= {"interrupted": True, "why_not_trained": why}
                    origin = Origin.CARRIED
                generation = Generation(model=model) if model else None
                self.chain.append(message.model_copy(update={"metadata": metadata}), origin, generation)
            if summary:
                self._restart(blocks)
            return
        if role not in ("user", "tool"):
            raise ValidationError(
                f"message with role {role!r}", where=where, code="unknown_role", hint="user, assistant or tool"
            )
        if blocks:
            converted, _ = self.converter.message({"role": "user", "content": blocks}, 0)
            for message in converted:
                self.chain.append(message)

    def _restart(self, blocks: list[dict[str, Any]]) -> None:
        """From the summary on, requests start with it sent as a user message (its text parts)."""
        text = "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
        converted, _ = self.converter.message({"role": "user", "content": [{"type": "text", "text": text}]}, 0)
        self.chain.replace(0, [(m, Origin.CONTEXT) for m in converted], EdgeKind.COMPACTION)
        self.chain.taint = None  # what made the requests before it unknown is in none of those after it


def _blocks(parts: list[dict[str, Any]], role: str, where: str) -> tuple[list[dict[str, Any]], str | None]:
    """A message's parts as Anthropic blocks, and its finish reason."""
    blocks: list[dict[str, Any]] = []
    finish: str | None = None
    for part in parts:
        kind, data = part.get("type"), as_dict(part.get("data"))
        if kind == "text":
            if data.get("text"):
                blocks.append({"type": "text", "text": str(data["text"])})
        elif kind == "reasoning":
            if data.get("thinking"):
                block = {"type": "thinking", "thinking": str(data["thinking"])}
                if isinstance(data.get("signature"), str) and data["signature"]:
                    block["signature"] = data["signature"]
                blocks.append(block)
        elif kind == "tool_call":
            blocks.append(_tool_use(data, where))
        elif kind == "tool_result":
            blocks.append(
                {
                    "type": "tool_result",
                    "tool_use_id": data.get("tool_call_id"),
                    "content": str(data.get("content", "")),
                    "is_error": bool(data.get("is_error")),
                }
            )
        elif kind == "binary" and isinstance(data.get("data"), str):
            mime = str(data.get("mime_type") or "application/octet-stream")
            kind_of = "image" if mime.startswith("image/") else "document"
            blocks.append({"type": kind_of, "source": {"type": "base64", "media_type": mime, "data": data["data"]}})
        elif kind == "image_url" and isinstance(data.get("url"), str):
            blocks.append({"type": "image", "source": {"type": "url", "url": data["url"]}})
        elif kind == "finish":
            finish = data.get("reason") if isinstance(data.get("reason"), str) else None
        else:
            raise ValidationError(f"a {role} message's part of type {kind!r}", where=where, code="unsupported_block")
    return blocks, finish


def _tool_use(data: dict[str, Any], where: str) -> dict[str, Any]:
    call_id, name = data.get("id"), data.get("name")
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise ValidationError("tool_call without id or name", where=where, code="bad_tool_call")
    raw = data.get("input")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except ValueError:
        arguments = {"input": raw}
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


READER = CrushReader()
