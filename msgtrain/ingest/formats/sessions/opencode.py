"""OpenCode (sst/opencode) storage folders: a session's records live in separate JSON files that answer each other
by id, under OpenCode's data directory (``~/.local/share/opencode/storage``):

- ``session/<project id>/<session id>.json``: the session (``id``, ``title``, ``parentID`` for a sub-agent's session,
  ``time``, ``revert``);
- ``message/<session id>/<message id>.json``: one message (``role`` user or assistant; an assistant's ``parentID``
  is the user message it answers, ``modelID`` / ``providerID``, ``tokens``, ``summary``, ``error``, ``finish``);
- ``part/<message id>/<part id>.json``: one part of a message (``text``, ``reasoning``, ``file``, ``tool`` with its
  ``callID``, ``state {status, input, output | error, time {compacted}}``, ``step-start`` / ``step-finish`` with
  the step's ``tokens``, ``compaction``, ``subtask``, ``agent``, ``snapshot``, ``patch``, ``retry``).

The storage folder is the unit (``detect_directory``: ``session/`` and ``message/`` holding ``ses_*`` folders):
input discovery hands it over once; every session, message and part file in it is one record. Ids are
time-ordered (``ses_`` / ``msg_`` / ``prt_`` then an ascending stamp), so a session's messages are its message files
by name and a message's parts its part files by name, as OpenCode reads them. Files of the folder's other kinds
(``project/``, ``todo/``, ``permission/``, ``session_diff/``, ``session_share/``...) hold no conversation: one
skipped record each (``opencode_<kind>``). Version 1.2 on keeps the same records in an SQLite database
(``opencode.db``, migrated once from the folder: tables ``session``, ``message``, ``part``, each message's and part's
JSON in ``data`` without its ids), read by the same rules: each row one record, messages in ``time_created`` then id
order, parts by id.

One graph per session, ``opencode:<session id>``, policy ``opencode``. What a request held is rebuilt the way OpenCode
builds it (``MessageV2.toModelMessages`` and ``filterCompacted``, packages/opencode/src/session/message-v2.ts):
- A user message: its ``text`` parts (``synthetic`` ones too: the file contents OpenCode reads for an @-mention;
  ``ignored`` ones not), its ``file`` parts other than ``text/plain`` and directories (media), a ``compaction`` part
  as "What did we do so far?", a ``subtask`` part as "The following tool was executed by the user".
- An assistant message is one turn of several model calls: each ``step-start`` .. ``step-finish`` run of its parts
  is one reply (its reasoning, text and tool calls in part order) sampled after everything before it, then the
  results of its calls (a completed call's ``output``, an error's ``error``, a call left pending or running
  "[Tool execution was interrupted]"), as the AI SDK splits the turn. A step's ``step-finish`` ``tokens`` (``input``
  + ``cache.read`` + ``cache.write``) is the prompt size its API reported (``usage``), and the message's
  ``modelID`` the model. A message without step parts is one reply. A step whose ``step-finish`` ``reason`` says the
  model did not end it (``length``: the output limit; ``content-filter``; ``error``) is history later requests hold,
  ``carried`` and ``interrupted``: its end was never sampled; so is a step that has a ``step-start`` and no
  ``step-finish`` (OpenCode stopped while it streamed).
- An assistant message that failed (``error``, except an abort after some of its parts) is left out of later
  requests, as OpenCode leaves it out: its calls go on a branch of their own from the history before it, the finished
  ones (a ``step-finish``) trained there, the failing one's partial content ``carried`` and ``interrupted``. An
  aborted reply is kept as the history later requests hold, ``carried`` and ``interrupted`` (cut short, never
  trained), unless its call had ended before the abort (a ``step-finish``).
- Compaction: the reply to a user message holding a ``compaction`` part (an assistant ``summary``) is sampled after
  the whole history and that prompt; the requests after it hold only that prompt, the summary and what follows
  (``filterCompacted``): a new branch from the root (a ``compaction`` edge), the summary ``carried`` on it. A
  compaction that keeps a tail (``tail_start_id``) puts that tail, from its first message to the compaction prompt,
  after the summary (``filterCompacted``'s order), its replies ``carried``. Tool results OpenCode cleared from later
  requests (``state.time.compacted``: sent as "[Old tool result content cleared]" once pruned) are not rebuilt: the
  replies after them are ``carried`` with the reason (``context_unknown``), until a compaction.

Every graph is ``context_incomplete`` (``system_prompt`` and ``tools``): OpenCode builds the system prompt (its
agent's prompt, the environment, AGENTS.md) and the tool schemas per request and stores neither. A message or part
file that cannot be read is a reject; the replies after it in its session are ``carried``.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.session_common import Chain, as_dict, graph_id_for
from msgtrain.ingest.common.sqlite_db import SQLITE_HEADER, connect_read_only
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadReject,
    ReadSkip,
    SourceRef,
    excerpt,
    load_json_document,
    read_head,
)
from msgtrain.ingest.formats.api.anthropic import AnthropicConverter
from msgtrain.model.completeness import mark_context_incomplete
from msgtrain.model.graph import EdgeKind, MessageGraph, Origin
from msgtrain.model.message import AnyMessage, Generation

POLICY = "opencode"
UNLOGGED = "OpenCode stores the conversation, not the system prompt and tool schemas it builds for each request"
COMPACTION_PROMPT = "What did we do so far?"  # what a compaction part is sent as (toModelMessages)
SUBTASK_PROMPT = "The following tool was executed by the user"
INTERRUPTED_CALL = "[Tool execution was interrupted]"
_CONVERSATION_KINDS = ("session", "message", "part")
# The tables of opencode.db that hold the conversation, each with the columns read (drizzle's session.sql.ts).
_TABLES = {"session": {"id"}, "message": {"id", "session_id", "data"}, "part": {"id", "message_id", "data"}}
# A step's finish reasons (the AI SDK's finishReason) that say the model did not end the reply itself
_CUT_REASONS = frozenset({"length", "content-filter", "error"})
_SESSION_FILE = re.compile(r"^ses_[A-Za-z0-9]+\.json$")


def _json_files(folder: Path) -> list[Path]:
    """The ``*.json`` files of ``folder`` by name (OpenCode's ids ascend with time), none when it is absent."""
    return sorted(p for p in folder.glob("*.json") if p.is_file()) if folder.is_dir() else []


class OpenCodeReader:
    name = "opencode"
    description = "OpenCode storage folders: session/<project>/<id>.json, message/<session>/, part/<message>/"
    example = "sample_logs/opencode/storage"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks()

    def detect(self, path: Path, head: bytes) -> bool:
        # A storage folder is a unit of its own (detect_directory); a single message or part file is no conversation.
        # The database (1.2 on) is a file: its tables say what it is.
        return head.startswith(SQLITE_HEADER) and _database_tables(path)

    def detect_directory(self, path: Path) -> bool:
        # A few stat calls and directory entries: discovery asks this of every folder it walks.
        messages = path / "message"
        return (
            (path / "session").is_dir()
            and messages.is_dir()
            and next((p for p in messages.glob("ses_*") if p.is_dir()), None) is not None
        )

    def read(self, path: Path) -> Iterator[ReadEvent]:
        if path.is_file() and self.detect(path, read_head(path)):
            yield from _database(path)
            return
        if not path.is_dir() or not self.detect_directory(path):
            raise ValidationError(
                "an OpenCode storage folder holds session/<project id>/, message/<session id>/ and part/<message id>/",
                where=str(path),
                code="bad_document",
                hint="pass OpenCode's storage folder (~/.local/share/opencode/storage) or a folder above it",
            )
        sessions: dict[str, Path] = {}
        for project in sorted(p for p in (path / "session").iterdir() if p.is_dir()):
            for file in _json_files(project):
                sessions.setdefault(file.stem, file)
        messages: set[str] = set()
        for folder in sorted(p for p in (path / "message").iterdir() if p.is_dir()):
            files = _json_files(folder)
            messages.update(f.stem for f in files)
            if folder.name not in sessions and files:
                # messages whose session file is gone: no session to read them in
                count = len(files) + sum(len(_json_files(path / "part" / m.stem)) for m in files)
                yield ReadSkip(SourceRef(str(folder), "file"), "opencode_messages_without_session", count)
        for sid, file in sorted(sessions.items()):
            yield from _folder_session(path, sid, file)
        parts = path / "part"
        orphans = [p for p in parts.iterdir() if p.is_dir() and p.name not in messages] if parts.is_dir() else []
        count = sum(len(_json_files(p)) for p in orphans)
        if count:
            yield ReadSkip(SourceRef(str(parts), "file"), "opencode_parts_without_message", count)
        for other in sorted(p for p in path.iterdir() if p.name not in _CONVERSATION_KINDS):
            count = sum(1 for p in other.rglob("*") if p.is_file()) if other.is_dir() else 1
            if count:
                yield ReadSkip(SourceRef(str(other), "file"), f"opencode_{other.name}", count)


class _Session:
    """One session's graph, from its records (files of a storage folder, rows of the database) in OpenCode's order."""

    def __init__(self, sid: str, source: SourceRef, key: Path):
        self.sid, self.source = sid, source
        self.graph = MessageGraph(graph_id=graph_id_for("opencode", sid, key), policy=POLICY)
        self.chain = Chain(self.graph)
        self.converter = AnthropicConverter(policy=POLICY)
        self.records = 0
        self.rejects: list[ReadReject] = []
        self.meta: dict[str, Any] = {"format": "opencode", "session_id": sid}
        self.summary_for: set[str] = set()  # user messages holding a compaction part
        self.tail_of: dict[str, str] = {}  # a compaction prompt's id → the first message of the tail it keeps
        self.owner: list[str | None] = []  # the OpenCode message of each node of the chain's path
        self.current: str | None = None  # the message being read
        self.pruned_at: float | None = None  # when OpenCode first cleared a tool result from later requests
        self.position: dict[str, int] = {}  # each message's place in the session (its records are read just before it)
        self.unread_at: int | None = None  # the place of the first message since the last clearing a record of which
        # could not be read: a compaction clears that taint only when the message is older than what it keeps
        self.seen_rejects = 0

    def record(self, value: Any, ref: SourceRef, error: MsgtrainError | None, raw: Any = None) -> Any:
        """A record read (its value), or None once its reject is kept: the replies after it are not trained."""
        if error is not None:
            self.chain.taint = self.chain.taint or f"{ref} could not be read"
            self.rejects.append(ReadReject(ref, error.located(str(ref)), excerpt(raw)))
            return None
        self.records += 1
        return value

    def events(self, session: Any, messages: Iterator[tuple[SourceRef, Any, list[Any]]]) -> Iterator[ReadEvent]:
        """The session's events from its session record and its messages, each (where, its info, its parts) with
        every record already taken through :meth:`record`."""
        if isinstance(session, dict):
            for key in ("title", "parentID", "version"):
                if isinstance(session.get(key), str):
                    self.meta[key] = session[key]
        for index, (ref, info, parts) in enumerate(messages):
            if len(self.rejects) > self.seen_rejects and self.unread_at is None:
                self.unread_at = index  # a record of this message (its info or a part) could not be read
            try:
                if info is None:
                    continue
                self._message(as_dict(info), [p for p in parts if p is not None], str(ref), index)
            except MsgtrainError as e:
                self.chain.taint = self.chain.taint or f"{ref} could not be read"
                self.unread_at = index if self.unread_at is None else self.unread_at
                self.rejects.append(ReadReject(ref, e.located(str(ref)), excerpt(info)))
            finally:
                self.seen_rejects = len(self.rejects)
        yield from self.rejects
        if any(n.is_assistant for n in self.graph.nodes.values()):
            mark_context_incomplete(self.graph, ["system_prompt", "tools"], UNLOGGED)
            self.graph.metadata.update(self.meta)
            yield ReadGraph(self.graph, self.source, records=self.records)
        elif self.records:
            yield ReadSkip(self.source, "opencode_session_without_replies", self.records)

    def _message(self, info: dict[str, Any], parts: list[Any], where: str, index: int) -> None:
        self.current = info.get("id") if isinstance(info.get("id"), str) else None
        if self.current is not None:
            self.position.setdefault(self.current, index)
        role = info.get("role")
        parts = [p for p in parts if isinstance(p, dict)]
        if role == "user":
            self._user(info, parts, where)
        elif role == "assistant":
            self._assistant(info, parts, where)
        else:
            raise ValidationError(
                f"message with role {role!r}",
                where=where,
                code="unknown_role",
                hint="an OpenCode message is {role: user | assistant, ...}",
            )

    def _user(self, info: dict[str, Any], parts: list[dict[str, Any]], where: str) -> None:
        blocks: list[dict[str, Any]] = []
        for part in parts:
            kind = part.get("type")
            if kind == "text" and not part.get("ignored"):
                blocks.append({"type": "text", "text": str(part.get("text", ""))})
            elif kind == "file":
                block = _media_block(part)
                if block is not None:
                    blocks.append(block)
            elif kind == "compaction":
                blocks.append({"type": "text", "text": COMPACTION_PROMPT})
                if isinstance(info.get("id"), str):
                    self.summary_for.add(info["id"])
                    if isinstance(part.get("tail_start_id"), str):
                        self.tail_of[info["id"]] = part["tail_start_id"]
            elif kind == "subtask":
                blocks.append({"type": "text", "text": SUBTASK_PROMPT})
        if not blocks:
            return  # OpenCode sends no message without parts
        messages, _ = self.converter.message({"role": "user", "content": blocks}, 0)
        for message in messages:
            self._append(message, None, None)

    def _assistant(self, info: dict[str, Any], parts: list[dict[str, Any]], where: str) -> None:
        error = as_dict(info.get("error"))
        aborted = error.get("name") == "MessageAbortedError"
        # A failed turn (an error, except an abort after some of its parts) is left out of every later request, as
        # OpenCode leaves it out; the calls it made before the failing one were sampled in an exact context all the
        # same: they go on a branch of their own, which the next message does not continue
        failed = bool(error) and not (aborted and any(p.get("type") not in ("step-start", "reasoning") for p in parts))
        keep = len(self.chain.path)
        created = as_dict(info.get("time")).get("created")
        if self.pruned_at is not None and isinstance(created, int | float) and created >= self.pruned_at:
            self.chain.taint = self.chain.taint or (
                f"{where}: OpenCode cleared earlier tool results from the requests after "
                f"{self.pruned_at:.0f} (state.time.compacted): which results each request held is not rebuilt"
            )
        if info.get("summary") is True and info.get("parentID") not in self.summary_for:
            self.chain.taint = self.chain.taint or f"{where}: a summary without its prompt"
        model = info.get("modelID") if isinstance(info.get("modelID"), str) else None
        generation = Generation(model=model) if model else None
        summary = info.get("summary") is True and info.get("parentID") in self.summary_for and not error
        steps = _steps(parts)
        for n, step in enumerate(steps):
            reply, results, usage = _step_blocks(step, where)
            if not reply:
                continue
            converted, _ = self.converter.message({"role": "assistant", "content": reply}, 0)
            last = n == len(steps) - 1
            finished = any(p.get("type") == "step-finish" for p in step)
            reason = next((p.get("reason") for p in step if p.get("type") == "step-finish"), None)
            for message in converted:
                metadata = dict(message.metadata)
                if usage:
                    metadata["usage"] = usage
                origin = None
                if aborted and last and not finished:
                    metadata |= {"interrupted": True, "why_not_trained": "the user aborted this reply before it ended"}
                    origin = Origin.CARRIED
                elif reason in _CUT_REASONS:
                    # the AI SDK's finish reason: the call stopped before the model ended its reply (the output
                    # limit, a content filter, an error): its end was never sampled
                    why = f"the call stopped before the reply ended (finish reason {reason!r})"
                    metadata |= {"interrupted": True, "why_not_trained": why}
                    origin = Origin.CARRIED
                elif failed and not finished:
                    # the failing call: what it streamed before the error (no step-finish) is not a whole reply
                    name = error.get("name") if isinstance(error.get("name"), str) else "an error"
                    why = f"the call failed ({name}) before it ended; OpenCode left the turn out of later requests"
                    metadata |= {"interrupted": True, "why_not_trained": why}
                    origin = Origin.CARRIED
                elif not finished and step[0].get("type") == "step-start":
                    # a call OpenCode started and never saw end (stopped while streaming): its reply is partial
                    why = "the call has no step-finish: OpenCode stopped before the reply ended"
                    metadata |= {"interrupted": True, "why_not_trained": why}
                    origin = Origin.CARRIED
                self._append(message.model_copy(update={"metadata": metadata}), origin, generation)
            if results:
                messages, _ = self.converter.message({"role": "user", "content": results}, 0)
                for message in messages:
                    self._append(message, None, None)
            pruned = _pruned_at(step)
            if pruned is not None and not failed:
                self.pruned_at = pruned if self.pruned_at is None else min(self.pruned_at, pruned)
        if failed:
            self.chain.rewind(keep)
            del self.owner[keep:]
            return
        if summary and self.chain.path:
            self._restart_after_summary(str(info["parentID"]), where)

    def _append(self, message: AnyMessage, origin: Origin | None, generation: Generation | None) -> None:
        self.chain.append(message, origin, generation)
        self.owner.append(self.current)

    def _restart_after_summary(self, marker: str, where: str) -> None:
        """After a compaction's summary, requests hold the compaction prompt, the summary, the tail of the history the
        compaction kept (``tail_start_id``: from that message to the prompt) and what follows (``filterCompacted``): a
        new branch from the root, the summary and the tail's replies carried on it."""
        nodes = self.chain.path
        if marker not in self.owner:
            return
        start = self.owner.index(marker)
        picked = list(range(start, len(nodes)))
        tail = self.tail_of.get(marker)
        first = self.position.get(marker, 0)  # the place of the oldest message the requests from here on hold
        clear = True
        if tail is not None:
            if tail in self.owner[:start]:
                picked += list(range(self.owner.index(tail), start))
                first = self.position.get(tail, 0)  # the tail is recent: no result in it was cleared
            else:
                clear = False
                self.chain.taint = self.chain.taint or (
                    f"{where}: the compaction kept a tail from message {tail}, which is not in the session"
                )
        kept = [
            (
                self.graph.nodes[nodes[i]].message,
                Origin.CARRIED if self.graph.nodes[nodes[i]].is_assistant else Origin.CONTEXT,
            )
            for i in picked
        ]
        owners = [self.owner[i] for i in picked]
        self.chain.replace(0, kept, EdgeKind.COMPACTION)
        self.owner = owners
        if self.unread_at is not None and self.unread_at >= first:
            # a record that could not be read belongs to a message the requests from here on still hold (the
            # compaction prompt, the summary, the kept tail): they stay unknown
            clear = False
        if clear:
            # what made the earlier requests unknown (a record that could not be read, cleared tool results) is in
            # none of the requests from here on
            self.chain.taint, self.pruned_at, self.unread_at = None, None, None


def _folder_session(root: Path, sid: str, file: Path) -> Iterator[ReadEvent]:
    """A session of a storage folder: its session file, its message files by name, each message's part files."""
    build = _Session(sid, SourceRef(str(file), "file"), file)

    def load(path: Path) -> Any:
        try:
            return build.record(load_json_document(path), SourceRef(str(path), "file"), None)
        except MsgtrainError as e:
            return build.record(None, SourceRef(str(path), "file"), e, read_head(path))

    def messages() -> Iterator[tuple[SourceRef, Any, list[Any]]]:
        for message in _json_files(root / "message" / sid):
            info = load(message)
            yield SourceRef(str(message), "file"), info, [load(f) for f in _json_files(root / "part" / message.stem)]

    session = load(file)
    yield from build.events(session, messages())


def _database_tables(path: Path) -> bool:
    try:
        with closing(connect_read_only(path)) as db:
            for table, columns in _TABLES.items():
                if not columns <= {r[1] for r in db.execute(f"PRAGMA table_info({table})")}:
                    return False
    except sqlite3.Error:
        return False
    return True


def _database(path: Path) -> Iterator[ReadEvent]:
    """The sessions of ``opencode.db``: each row of ``session``, ``message`` and ``part`` one record; a message's
    ``data`` is its info without ``id`` / ``sessionID`` (the row's columns), a part's likewise; messages in
    ``time_created``, then id, order, parts by id, as ``MessageV2`` reads them."""
    try:
        with closing(connect_read_only(path)) as db:
            db.row_factory = sqlite3.Row
            sessions = db.execute("SELECT * FROM session ORDER BY id").fetchall()
            order = "time_created, id" if "time_created" in _columns(db, "message") else "id"
            for row in sessions:
                yield from _database_session(path, db, row, order)
            lost = db.execute(
                "SELECT (SELECT count(*) FROM message WHERE session_id NOT IN (SELECT id FROM session))"
                " + (SELECT count(*) FROM part WHERE message_id NOT IN (SELECT id FROM message))"
            ).fetchone()[0]
    except sqlite3.Error as e:
        raise ValidationError(f"cannot read OpenCode's tables: {e}", where=str(path), code="bad_database") from e
    if lost:
        yield ReadSkip(SourceRef(str(path), "file"), "opencode_rows_without_session", lost)


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}


def _database_session(path: Path, db: sqlite3.Connection, row: sqlite3.Row, order: str) -> Iterator[ReadEvent]:
    sid = str(row["id"])
    build = _Session(sid, SourceRef(str(path), f"session {sid}"), path)
    columns = row.keys()
    session: dict[str, Any] = {"id": sid}
    if "data" in columns:  # a layout that keeps the session as JSON too
        session |= as_dict(_row_json(row["data"]))
    for column, key in (("parent_id", "parentID"), ("title", "title"), ("version", "version")):
        if column in columns and isinstance(row[column], str):
            session[key] = row[column]
    build.record(session, build.source, None)

    def load(table: str, item: sqlite3.Row, base: dict[str, Any]) -> Any:
        ref = SourceRef(str(path), f"{table} {item['id']}")
        try:
            value = _row_json(item["data"])
            if not isinstance(value, dict):
                raise ValidationError(f"the {table} row's data is not a JSON object", code="bad_record")
            return build.record({**value, **base, "id": item["id"]}, ref, None)
        except MsgtrainError as e:
            return build.record(None, ref, e, item["data"])

    def messages() -> Iterator[tuple[SourceRef, Any, list[Any]]]:
        rows = db.execute(f"SELECT id, data FROM message WHERE session_id = ? ORDER BY {order}", (sid,)).fetchall()
        for message in rows:
            info = load("message", message, {"sessionID": sid})
            parts = db.execute("SELECT id, data FROM part WHERE message_id = ? ORDER BY id", (message["id"],))
            loaded = [load("part", part, {"sessionID": sid, "messageID": message["id"]}) for part in parts]
            yield SourceRef(str(path), f"message {message['id']}"), info, loaded

    yield from build.events(session, messages())


def _row_json(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as e:
        raise ValidationError(f"data is not JSON: {e}", code="bad_record") from None


def _steps(parts: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A turn's parts cut into its model calls: each ``step-start`` opens one (a turn without them is one call)."""
    steps: list[list[dict[str, Any]]] = [[]]
    for part in parts:
        if part.get("type") == "step-start" and steps[-1]:
            steps.append([])
        steps[-1].append(part)
    return steps


def _step_blocks(
    step: list[dict[str, Any]], where: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any] | None]:
    """(the reply's Anthropic blocks, the results' blocks, the reported usage) of one model call."""
    reply: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    usage: dict[str, Any] | None = None
    for part in step:
        kind = part.get("type")
        if kind == "text":
            reply.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "reasoning":
            reply.append({"type": "thinking", "thinking": str(part.get("text", ""))})
        elif kind == "tool":
            call_id, name = part.get("callID"), part.get("tool")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise ValidationError("tool part without callID or tool", where=where, code="bad_tool_call")
            state = as_dict(part.get("state"))
            reply.append({"type": "tool_use", "id": call_id, "name": name, "input": as_dict(state.get("input"))})
            results.append(_result_block(call_id, state))
        elif kind == "step-finish":
            tokens = as_dict(part.get("tokens"))
            cache = as_dict(tokens.get("cache"))
            counts = [tokens.get("input"), cache.get("read", 0), cache.get("write", 0)]
            if all(isinstance(c, int | float) and not isinstance(c, bool) for c in counts):
                # OpenCode's input excludes the cache it counts apart (getUsage): the prompt is the three together,
                # written as OpenAI's prompt_tokens, which holds its cache
                usage = {"prompt_tokens": sum(counts), "completion_tokens": tokens.get("output")}
    return reply, results, usage


def _result_block(call_id: str, state: dict[str, Any]) -> dict[str, Any]:
    status = state.get("status")
    if status == "completed":
        return {"type": "tool_result", "tool_use_id": call_id, "content": str(state.get("output", ""))}
    if status == "error":
        metadata = as_dict(state.get("metadata"))
        if metadata.get("interrupted") is True and isinstance(metadata.get("output"), str):
            return {"type": "tool_result", "tool_use_id": call_id, "content": metadata["output"]}
        return {"type": "tool_result", "tool_use_id": call_id, "content": str(state.get("error", "")), "is_error": True}
    return {"type": "tool_result", "tool_use_id": call_id, "content": INTERRUPTED_CALL, "is_error": True}


def _pruned_at(step: list[dict[str, Any]]) -> float | None:
    """When OpenCode first cleared one of the step's tool results from later requests (``state.time.compacted``)."""
    times = [
        t
        for p in step
        if p.get("type") == "tool"
        and isinstance(t := as_dict(as_dict(p.get("state")).get("time")).get("compacted"), int | float)
    ]
    return min(times) if times else None


def _media_block(part: dict[str, Any]) -> dict[str, Any] | None:
    """A ``file`` part as the media block it is sent as, or None for one OpenCode sends as text parts instead
    (``text/plain``, directories)."""
    mime, url = part.get("mime"), part.get("url")
    if not isinstance(mime, str) or not isinstance(url, str) or mime in ("text/plain", "application/x-directory"):
        return None
    kind = "image" if mime.startswith("image/") else "document"
    if url.startswith("data:") and "," in url:
        return {"type": kind, "source": {"type": "base64", "media_type": mime, "data": url.split(",", 1)[1]}}
    return {"type": kind, "source": {"type": "url", "url": url}}


READER = OpenCodeReader()
