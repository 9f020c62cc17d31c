"""Claude Code session transcripts: ``~/.claude/projects/<project>/<session>.jsonl``, the sub-agent files under
``<session>/subagents/agent-<id>.jsonl``, and the web/API export ``{"loglines": [...]}``.

A transcript is a real message graph: every record has a ``uuid`` and a ``parentUuid``. What the reader rebuilds:

- **Streamed assistant messages.** Claude Code writes one line per content block (thinking, text, each tool_use)
  of one API response, all with the same ``message.id``; tool results can even be written between two blocks of
  the same response (tools start while the response still streams). The lines of one ``message.id`` become one
  assistant message (blocks in file order), and the tool results answering its calls follow it as one run of
  result messages, in the order they were written. Children of any line of that block hang after the run.
- **Rewinds** are records whose parent already has a child: they start a branch there, and a ``rewind`` parallel
  edge records the branch they left (so the linearizer can name the cut).
- **Compaction.** A ``system``/``compact_boundary`` record has no parent (``logicalParentUuid`` names the last
  message before it); the ``isCompactSummary`` user message below it starts a new root whose first node is the
  summary (origin ``injected``: another model wrote it). A ``compaction`` parallel edge replaces the whole
  pre-compaction branch by the summary, so the linearizer reports the cut as ``compaction``. An export without
  boundaries (``isCompactSummary`` only) is read the same way.
- **Sub-agents** (``isSidechain``) are separate graphs whose policy is ``subagent:<type>``; the type comes from the
  ``Task`` call in the parent session file when it is next to the sub-agent file (else the agent id). The main
  graph's policy is ``claude-code``. ``agent_progress`` records of the main file (copies of sub-agent traffic) are
  skipped: the sub-agent's own file is the source.
- **Not sampled here**: an assistant message whose context is incomplete (its parent is not in the file, as in
  the compaction agent's file, or below a rejected record) is ``carried``; ``<synthetic>`` messages written by
  Claude Code itself and responses that embed server-tool results are ``injected``/``carried``.
- **Attachments** (``attachment`` records, Claude Code 2) hold what Claude Code adds to the next request in a form it
  renders itself (files and CLAUDE.md a prompt brought in, queued prompts, hook context, reminders): a gap in the
  chain, so the replies below one are ``carried``; only the kinds the user alone sees are passed over. So is a
  ``system`` / ``microcompact_boundary`` record: the tool results it names were cleared from every later request,
  in a form the transcript does not hold.
- Records without conversation content (progress, system, file-history-snapshot, summary, queue-operation, …)
  are skipped with reason ``non_message_record:<type>``; a progress or system record inside the parent chain is
  transparent (its children hang from its parent).
- **Streams** (``claude -p --output-format stream-json``, the Claude Agent SDK's message stream) hold the same
  messages without ``parentUuid``: each message follows the previous one of its conversation. Lines of a
  sub-agent carry the ``parent_tool_use_id`` of the call that started it and form its own graph (policy
  ``subagent:<subagent_type>``). The prompt given on the command line is not in the stream (only with
  ``--replay-user-messages`` or ``--input-format stream-json``): replies before any logged user message are
  ``carried``. ``system`` (init, hooks, status), ``stream_event`` (partial deltas), ``rate_limit_event`` and
  ``result`` lines are skipped with their type; a line of a type this reader does not know may have held what the
  model saw next, so the replies after it are ``carried``.
- Streaming: the JSONL is read line by line; a session is one graph, so its message records are held until the
  file ends (bounded by the file).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Literal

from msgtrain.errors import FormatError, MsgtrainError, ValidationError
from msgtrain.ingest.common.session_common import SkipTally, as_dict, graph_id_for
from msgtrain.ingest.core.base import HEAD_BYTES, bounded_lines, first_json_value, open_input
from msgtrain.ingest.core.files import Beside, input_files
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadReject,
    ReadSkip,
    SourceRef,
    excerpt,
    head_shape,
    iter_json_lines,
    load_json_document,
    quoted,
)
from msgtrain.ingest.formats.sessions.content_records import (
    GEMINI_MARK,
    as_block_record,
    compressed_history,
    content_record,
    is_content_record,
)
from msgtrain.model.completeness import mark_unlogged_context
from msgtrain.model.graph import EdgeKind, MessageGraph, Origin
from msgtrain.model.message import (
    RUNTIME_POLICY,
    AnyMessage,
    Generation,
    MediaPart,
    OptionCallMessage,
    OptionCallPayload,
    OptionResultMessage,
    OptionResultPayload,
    Part,
    PartsMessage,
    ReasoningPart,
    TextPart,
)

MAIN_POLICY = "claude-code"
GEMINI_POLICY = "qwen-code"  # sessions of the same tree whose messages are Gemini Contents (Qwen Code)
_RECORD_TYPES = {
    "user",
    "assistant",
    "system",
    "summary",
    "progress",
    "file-history-snapshot",
    "queue-operation",
}
_SYNTHETIC_MODEL = "<synthetic>"
# ``attachment`` records (Claude Code 2): what Claude Code adds to the next request beside the conversation (a file
# or CLAUDE.md a prompt brought in, a prompt queued while the model worked, hook context, reminders), sent as
# messages it renders itself and does not log. Such a record is a gap: the replies below it are ``carried``. Only
# the kinds its conversion for the API (normalizeAttachmentForAPI) sends nothing for are passed over: hook notices and
# errors, permission decisions, a file already read, the todo list and task progress it shows the user, ...
_UNSENT_ATTACHMENTS = {
    "hook_non_blocking_error",
    "hook_error_during_execution",
    "hook_cancelled",
    "hook_system_message",
    "hook_permission_decision",
    "command_permissions",
    "already_read_file",
    "edited_image_file",
    "structured_output",
    "context_efficiency",
    "autocheckpointing",
    "background_task_status",
    "todo",
    "task_progress",
}
# On a transparent record: from here on the model's requests differ from what the log holds (it was sent what an
# attachment held, in a form the log lacks; or a microcompaction cleared earlier tool results from its context).
_GAP = "_context_gap"
# Assistant blocks that the API itself produced around a server-side tool: the response then contains text the
# model did not sample (the tool's result), so it cannot be trained as one sampled message.
_SERVER_RESULT_BLOCKS = {"web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result"}

Kind = Literal["message", "transparent", "boundary"]
Group = tuple[bool, str | None]  # (is sidechain, agent id)


@dataclass
class _Rec:
    ref: str  # "line 12" / "item 3"
    uuid: str
    parent: str | None
    kind: Kind
    group: Group
    data: dict[str, Any]
    raw: bytes | str = b""


@dataclass
class _Unit:
    """One logical message: an assistant response (several lines) or one user record."""

    key: str
    records: list[_Rec]
    results: list[_Rec] = field(default_factory=list)  # tool-result records answering this assistant unit
    call_ids: set[str] = field(default_factory=set)

    @property
    def first(self) -> _Rec:
        return self.records[0]

    @property
    def is_assistant(self) -> bool:
        return self.first.data.get("type") == "assistant"


class ClaudeCodeReader:
    name = "claude_code"
    description = "Claude Code session transcripts (JSONL with uuid/parentUuid, sub-agent files, loglines exports)"
    example = "sample_logs/claude_code/session.jsonl"
    document_records = "loglines"  # a JSON document's records (see msgtrain.ingest.core.base)

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["sessionId", "session_id", "init", "parentUuid", "leafUuid", "snapshot", "loglines"]))
    # What partners needs to return any file (its location, its head).
    partner_marks = Marks(names=("*/subagents/*",))  # _parent_session

    def detect(self, path: Path, head: bytes) -> bool:
        first = first_json_value(head)
        if isinstance(first, dict) and first.get("type") in _RECORD_TYPES:
            return (
                "sessionId" in first
                or (_is_stream_record(first) and _claude_stream(head))
                or ("uuid" in first and "parentUuid" in first)
                or (first.get("type") == "summary" and "leafUuid" in first)
                or (first.get("type") == "file-history-snapshot" and "snapshot" in first)
            )
        shape = head_shape(head)
        return shape.layout == "object" and shape.has(".loglines", ".loglines[].type", ".loglines[].message")

    def partners(self, location: PurePosixPath, beside: Beside) -> list[PurePosixPath]:
        """The file this reader joins ``location`` with (:mod:`msgtrain.ingest.core.files`): a sub-agent's parent
        session, named by the sub-agent's location alone (present or not: the part is keyed by its absence too)."""
        del beside
        return _parent_session(location)

    def read(self, path: Path) -> Iterator[ReadEvent]:
        skips = SkipTally(path)
        records: list[_Rec] = []
        rejected: list[ReadReject] = []
        open_calls: list[tuple[str, str]] = []  # Gemini-content records: calls not answered yet (file order)
        unread_event = False  # a stream line of a type this reader does not know since the last message
        for ref, raw, obj in _iter_records(path):
            if isinstance(obj, MsgtrainError):
                yield ReadReject(SourceRef(str(path), ref), obj, excerpt(raw))
                continue
            if isinstance(obj, dict) and is_content_record(obj):
                obj = as_block_record(obj, open_calls)  # Qwen Code: the same tree, Gemini messages
            if isinstance(obj, dict) and "parentUuid" not in obj and obj.get("type") not in _KNOWN_TYPES:
                unread_event = True  # in a stream, order is the only link: what follows saw what this line held
            rec = _classify(obj, ref, raw, records)
            if isinstance(rec, _Rec) and rec.kind == "message":
                if unread_event and "parentUuid" not in rec.data:  # a session's messages name their parent
                    rec.data = {**rec.data, _AFTER_UNREAD: True}
                unread_event = False
            if isinstance(rec, str):
                skips.add(rec, ref)
                continue
            if isinstance(rec, ValidationError):
                rejected.append(ReadReject(SourceRef(str(path), ref), rec.located(f"{path} ({ref})"), excerpt(raw)))
                continue
            records.append(rec)
            if rec.kind == "transparent":
                skips.add(f"non_message_record:{obj.get('type')}", ref)
        yield from rejected
        groups: dict[Group, list[_Rec]] = {}
        for rec in records:
            if rec.kind != "transparent":
                groups.setdefault(rec.group, []).append(rec)
        by_uuid = {r.uuid: r for r in records}
        for group, recs in groups.items():
            yield from _GraphBuild(path, group, recs, by_uuid).events()
        yield from skips.events()


def _iter_records(path: Path) -> Iterator[tuple[str, bytes | str, Any]]:
    """(record ref, raw, parsed object or ParseError) for the JSONL lines, or the items of a loglines export."""
    with open_input(path) as f:
        head = f.read(HEAD_BYTES)
    shape = head_shape(head)
    if shape.layout == "object" and shape.has(".loglines"):
        doc = load_json_document(path)
        items = doc.get("loglines") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise FormatError(
                "a Claude Code export needs a top-level 'loglines' list",
                where=str(path),
                hint="pass the session's .jsonl transcript, or force another --input-format",
            )
        for i, item in enumerate(items):
            yield f"item {i}", excerpt(json.dumps(item, ensure_ascii=False)), item
        return
    for lineno, raw, obj in iter_json_lines(path):
        yield f"line {lineno}", raw, obj


def _classify(obj: Any, ref: str, raw: bytes | str, earlier: list[_Rec]) -> _Rec | str | ValidationError:
    """A record to keep, a skip reason, or the error that rejects it."""
    if not isinstance(obj, dict):
        return ValidationError("record is not a JSON object", code="bad_record")
    rtype = obj.get("type")
    uuid = obj.get("uuid") if isinstance(obj.get("uuid"), str) else None
    group: Group = (
        bool(obj.get("isSidechain")),
        obj.get("agentId") if isinstance(obj.get("agentId"), str) else None,
    )
    if isinstance(obj.get("parent_tool_use_id"), str):
        group = (True, obj["parent_tool_use_id"])  # a stream's sub-agent line: the call that started the agent
    if rtype in ("user", "assistant") and "message" in obj:
        if not isinstance(obj["message"], dict):
            return ValidationError(f"{rtype} record's 'message' is not an object", code="bad_record")
        if "parentUuid" in obj:
            parent = obj["parentUuid"] if isinstance(obj["parentUuid"], str) else None
        else:
            # Exports without uuids are linear: each message follows the previous one of its group.
            parent = next((r.uuid for r in reversed(earlier) if r.group == group and r.kind == "message"), None)
        uuid = uuid or f"{ref}"
        if obj.get("isCompactSummary") and "parentUuid" not in obj:
            # No boundary record in this export: make the one the transcript format would have written.
            boundary = _Rec(
                f"{ref} (boundary)",
                f"boundary:{ref}",
                None,
                "boundary",
                group,
                {"logicalParentUuid": parent, "synthetic": True},
            )
            earlier.append(boundary)
            parent = boundary.uuid
        return _Rec(ref, uuid, parent, "message", group, obj, raw)
    if rtype == "system" and obj.get("subtype") == "compact_boundary":
        return _Rec(ref, uuid or f"boundary:{ref}", None, "boundary", group, obj, raw)
    if rtype == "system" and obj.get("subtype") == "chat_compression" and compressed_history(obj) is not None:
        # Qwen Code: the history the model is sent from here on is the record's own compressed history.
        compressed = {**obj, "logicalParentUuid": obj.get("parentUuid")}
        return _Rec(ref, uuid or f"boundary:{ref}", None, "boundary", group, compressed, raw)
    if uuid is not None:
        parent = obj.get("parentUuid") if isinstance(obj.get("parentUuid"), str) else None
        data: dict[str, Any] = {"type": rtype}
        if rtype == "attachment":
            kind = as_dict(obj.get("attachment")).get("type")
            if kind not in _UNSENT_ATTACHMENTS:
                data[_GAP] = f"attachment {kind}" if isinstance(kind, str) else "attachment"
        if rtype == "system" and obj.get("subtype") == "microcompact_boundary":
            data[_GAP] = "microcompact_boundary"  # the results it names were cleared from every later request
        return _Rec(ref, uuid, parent, "transparent", group, data, b"")
    return f"non_message_record:{rtype}"


# The line types of a Claude Code stream (the Agent SDK's SDKMessage union and the CLI's control protocol):
# messages, and lines that hold none (skipped by type).
_STREAM_TYPES = {
    "user",
    "assistant",
    "system",
    "stream_event",
    "rate_limit_event",
    "result",
    "tool_progress",
    "tool_use_summary",
    "auth_status",
    "keep_alive",
    "control_request",
    "control_response",
}


_KNOWN_TYPES = _STREAM_TYPES | _RECORD_TYPES
_AFTER_UNREAD = "_after_unread_event"  # set on a stream's message that follows a line of an unknown type


def _claude_stream(head: bytes) -> bool:
    """Whether a stream's head is Claude Code's: no line of another type (other agents' CLIs copy its init line but
    log tool calls and thinking as events of their own, Cursor's ``tool_call`` / ``thinking``, which this reader
    would pass over, training replies in a context without them), and its replies carry the API's message id (the
    key that joins a response's lines; Cursor writes text fragments without one)."""
    shape = head_shape(head)
    types = shape.values_at(".type")
    return types <= _STREAM_TYPES and ("assistant" not in types or shape.has(".message.id"))


def _is_stream_record(obj: dict[str, Any]) -> bool:
    """A line of a stream-json session: snake-case ``session_id`` with a subtype (system lines) or the
    ``parent_tool_use_id`` every message line carries; or the session's ``init`` line, which names its tools and
    working directory (some writers leave the session id out)."""
    if obj.get("type") == "system" and obj.get("subtype") == "init" and ("tools" in obj or "cwd" in obj):
        return True
    return "session_id" in obj and ("subtype" in obj or "parent_tool_use_id" in obj)


class _GraphBuild:
    """Builds the graph of one group (the main conversation, or one sub-agent) from its records."""

    def __init__(self, path: Path, group: Group, recs: list[_Rec], by_uuid: dict[str, _Rec]):
        self.path = path
        self.group = group
        self.recs = recs
        self.by_uuid = by_uuid
        self.units: list[_Unit] = []
        self.unit_of: dict[str, _Unit] = {}  # line uuid -> the unit whose tail its children hang from
        self.call_names: dict[str, str] = {}
        self.tail: dict[str, str | None] = {}  # unit key -> last node id of the unit (after its results)
        self.tainted: dict[str, bool] = {}
        self.rejects: list[ReadReject] = []
        self.records_in_graph = 0
        self.policy = MAIN_POLICY

    # ------------------------------------------------------------------ structure
    def _resolve(self, parent: str | None) -> tuple[str, str | None]:
        """Walk up through transparent records: ("root"|"line"|"boundary"|"dangling", uuid)."""
        seen: set[str] = set()
        while parent is not None:
            rec = self.by_uuid.get(parent)
            if rec is None or parent in seen:
                return "dangling", parent
            if rec.kind == "message":
                return "line", parent
            if rec.kind == "boundary":
                return "boundary", parent
            seen.add(parent)
            parent = rec.parent
        return "root", None

    def _group_units(self) -> None:
        by_msg_id: dict[str, _Unit] = {}
        for rec in self.recs:
            if rec.kind != "message":
                continue
            msg = rec.data["message"]
            if rec.data.get("type") == "assistant":
                mid = msg.get("id") if isinstance(msg.get("id"), str) else None
                unit = by_msg_id.get(mid) if mid else None
                kind, parent = self._resolve(rec.parent)
                if unit is not None and (kind != "line" or parent is None or self.unit_of.get(parent) is not unit):
                    unit = None  # the same response copied onto another branch (a resumed session): a new node
                if unit is None:
                    unit = _Unit(f"assistant:{mid or rec.uuid}", [])
                    self.units.append(unit)
                    if mid:
                        by_msg_id[mid] = unit
                unit.records.append(rec)
                for block in _blocks(msg.get("content")):
                    if block.get("type") in ("tool_use", "server_tool_use") and isinstance(block.get("id"), str):
                        unit.call_ids.add(block["id"])
                        self.call_names[block["id"]] = str(block.get("name") or "")
                self.unit_of[rec.uuid] = unit
                continue
            result_ids = _tool_result_ids(msg.get("content"))
            kind, parent = self._resolve(rec.parent)
            owner = self.unit_of.get(parent) if kind == "line" and parent is not None else None
            if result_ids and owner is not None and owner.is_assistant and set(result_ids) <= owner.call_ids:
                owner.results.append(rec)
                self.unit_of[rec.uuid] = owner
                continue
            unit = _Unit(f"user:{rec.uuid}", [rec])
            self.units.append(unit)
            self.unit_of[rec.uuid] = unit

    # ------------------------------------------------------------------ building
    def events(self) -> Iterator[ReadEvent]:
        self._group_units()
        session = next(
            (s for r in self.recs for s in (r.data.get("sessionId"), r.data.get("session_id")) if isinstance(s, str)),
            None,
        )
        is_side, agent_id = self.group
        if is_side:
            agent_type = self._stream_agent_type() or (_subagent_type(self.path, agent_id) if agent_id else None)
            policy = f"subagent:{agent_type or agent_id or 'sidechain'}"
            key = f"{session}:agent-{agent_id or 'sidechain'}" if session else None
        else:
            gemini = any(r.data.get(GEMINI_MARK) for r in self.recs)
            policy, key = (GEMINI_POLICY if gemini else MAIN_POLICY), session
        self.policy = policy
        first = self.recs[0].data
        metadata = {
            k: v
            for k, v in {
                "format": "claude_code",
                "session_id": session,
                "agent_id": agent_id,
                "cwd": first.get("cwd"),
                "version": first.get("version"),
                "git_branch": first.get("gitBranch"),
            }.items()
            if v is not None
        }
        graph = MessageGraph(graph_id=graph_id_for("claude-code", key, self.path), policy=policy, metadata=metadata)
        boundaries: list[tuple[_Rec, str]] = []  # (boundary record, first node id after it)
        for unit in self.units:
            self._emit(graph, unit, boundaries)
        for boundary, new_root in boundaries:
            self._record_compaction(graph, boundary, new_root)
        self.records_in_graph += sum(1 for r in self.recs if r.kind == "boundary" and not r.data.get("synthetic"))
        yield from self.rejects
        if graph.nodes:
            mark_unlogged_context(graph, "Claude Code sessions log neither the system prompt nor the tool schemas")
            yield ReadGraph(graph, SourceRef(str(self.path), self.recs[0].ref), records=self.records_in_graph)
        elif self.records_in_graph:
            # Only boundaries survived (every message was rejected): still accounted for.
            yield ReadSkip(SourceRef(str(self.path), self.recs[0].ref), "empty_session", self.records_in_graph)

    def _stream_agent_type(self) -> str | None:
        """A stream's sub-agent type: written on its own lines (``subagent_type``), else in the input of the call
        that started it (the group's agent id is that call's id), which the main conversation's lines hold."""
        named = next((r.data["subagent_type"] for r in self.recs if isinstance(r.data.get("subagent_type"), str)), None)
        call_id = self.group[1]
        for rec in self.by_uuid.values() if named is None and call_id else ():
            if rec.kind != "message" or rec.data.get("type") != "assistant":
                continue
            for block in _blocks(rec.data["message"].get("content")):
                inp = block.get("input")
                if block.get("id") == call_id and isinstance(inp, dict) and isinstance(inp.get("subagent_type"), str):
                    return inp["subagent_type"]
        return named

    def _sent_between(self, parent: str | None) -> bool:
        """Whether a record passed over on the way up from ``parent`` to the nearest message is a gap (an
        attachment the model was sent, a microcompaction): the context below it is not in the log."""
        seen: set[str] = set()
        while parent is not None and parent not in seen:
            rec = self.by_uuid.get(parent)
            if rec is None or rec.kind != "transparent":
                return False
            if rec.data.get(_GAP):
                return True
            seen.add(parent)
            parent = rec.parent
        return False

    def _parent_of(self, rec: _Rec) -> tuple[str | None, bool, _Rec | None]:
        """(parent node id, parent context incomplete?, compaction boundary above it or None). A reply with no
        message above it was sampled after a prompt the log does not hold (``claude -p "..."`` streams do not echo
        it): its context is incomplete; so is one below a record that held what the model was sent."""
        parent_id, incomplete, boundary = self._parent_of_message(rec)
        return parent_id, incomplete or self._sent_between(rec.parent), boundary

    def _parent_of_message(self, rec: _Rec) -> tuple[str | None, bool, _Rec | None]:
        kind, parent = self._resolve(rec.parent)
        if kind == "root":
            return None, rec.data.get("type") == "assistant", None
        if kind == "dangling":
            return None, True, None  # the context lives outside this file (e.g. the compaction agent's file)
        if kind == "boundary":
            return None, False, self.by_uuid[parent] if parent is not None else None
        assert parent is not None
        unit = self.unit_of.get(parent)
        if unit is None or unit.key not in self.tail:
            return (
                None,
                True,
                None,
            )  # a parent that could not be built: do not pretend the context is complete
        return self.tail[unit.key], self.tainted[unit.key], None

    def _emit(self, graph: MessageGraph, unit: _Unit, boundaries: list[tuple[_Rec, str]]) -> None:
        parent, tainted, boundary = self._parent_of(unit.first)
        tainted = tainted or bool(unit.first.data.get(_AFTER_UNREAD))
        try:
            head = [self._assistant(unit)] if unit.is_assistant else self._user(unit.first)
        except MsgtrainError as e:
            for rec in unit.records + unit.results:
                err = e.located(f"{self.path} ({rec.ref})")
                self.rejects.append(ReadReject(SourceRef(str(self.path), rec.ref), err, excerpt(rec.raw)))
            # Children still hang where this unit would have been, but nothing below can be trained exactly.
            self.tail[unit.key] = parent
            self.tainted[unit.key] = True
            return
        last = parent
        earlier = list(graph.children.get(parent, [])) if parent is not None else []
        history = compressed_history(boundary.data) if boundary is not None else None
        if history is not None and boundary is not None:
            last = self._compressed(graph, boundary, history)  # the history the model was sent, above the unit
            boundaries.append((boundary, graph.path(last)[0].id))
            boundary = None
        for message, origin, generation in head:
            if origin is Origin.SAMPLED and tainted:
                origin = Origin.CARRIED
            last = graph.add_node(last, message, origin=origin, generation=generation)
            if boundary is not None:
                boundaries.append((boundary, last))
                boundary = None
        first = graph.path(last)[-len(head)].id if head and last is not None else None
        if earlier and first is not None and first not in earlier:
            # A second child under a node that already had one: the user rewound to here and went on differently.
            graph.record_edge(EdgeKind.REWIND, _latest_run(graph, earlier[-1]), [first], parent)
        self.records_in_graph += len(unit.records)
        for rec in unit.results:
            try:
                results = self._results(rec)
            except MsgtrainError as e:
                self.rejects.append(
                    ReadReject(
                        SourceRef(str(self.path), rec.ref),
                        e.located(f"{self.path} ({rec.ref})"),
                        excerpt(rec.raw),
                    )
                )
                tainted = True
                continue
            for msg in results:
                last = graph.add_node(last, msg, origin=Origin.CONTEXT)
            self.records_in_graph += 1
        self.tail[unit.key] = last
        self.tainted[unit.key] = tainted

    def _compressed(self, graph: MessageGraph, boundary: _Rec, history: list[dict[str, Any]]) -> str:
        """The compressed history a ``chat_compression`` record holds, as a new root branch of ``injected`` nodes
        (a summariser wrote it; its replies are copies, never trained here); returns its last node."""
        last: str | None = None
        open_calls: list[tuple[str, str]] = []
        for k, content in enumerate(history):
            rec = _Rec(f"{boundary.ref} history[{k}]", f"{boundary.uuid}:{k}", None, "message", self.group, {})
            rec.data = as_block_record({**content_record(content), "uuid": rec.uuid}, open_calls)
            if rec.data["type"] == "assistant":
                for block in _blocks(rec.data["message"].get("content")):
                    if block.get("type") == "tool_use":
                        self.call_names[str(block["id"])] = str(block.get("name") or "")
                messages = [self._assistant(_Unit(rec.uuid, [rec]))[0]]
            else:
                messages = [m for m, _, _ in self._user(rec)]
            for message in messages:
                last = graph.add_node(last, message, origin=Origin.INJECTED)
        assert last is not None  # a compression record's history is never empty (compressed_history)
        return last

    def _record_compaction(self, graph: MessageGraph, boundary: _Rec, new_root: str) -> None:
        """Record that the branch the boundary closed was replaced by the summary branch starting at new_root.

        ``logicalParentUuid`` names the last message before the boundary, but Claude Code does not always persist
        that record; then the branch is the one ending at the last message written before the boundary.
        """
        logical = boundary.data.get("logicalParentUuid")
        kind, parent = self._resolve(logical if isinstance(logical, str) else None)
        if kind != "line":
            before = self.recs[: self.recs.index(boundary)]
            parent = next((r.uuid for r in reversed(before) if r.kind == "message"), None)
        unit = self.unit_of.get(parent) if parent is not None else None
        tail = self.tail.get(unit.key) if unit is not None else None
        old = [n.id for n in graph.path(tail)] if tail is not None else []
        graph.record_edge(EdgeKind.COMPACTION, old, [new_root], None)

    # ------------------------------------------------------------------ messages
    def _assistant(self, unit: _Unit) -> tuple[AnyMessage, Origin, Generation | None]:
        parts: list[Part] = []
        calls: list[OptionCallPayload] = []
        unrendered: list[str] = []
        model = finish = None
        usage: Any = None
        for rec in unit.records:
            msg = rec.data["message"]
            model = msg.get("model") or model
            finish = msg.get("stop_reason") or finish
            usage = msg.get("usage") or usage
            for j, block in enumerate(_blocks(msg.get("content"), where=rec.ref)):
                btype = block.get("type")
                if btype == "text":
                    parts.append(TextPart(text=str(block.get("text", ""))))
                elif btype == "thinking":
                    parts.append(ReasoningPart(text=str(block.get("thinking", "")), signature=block.get("signature")))
                elif btype == "redacted_thinking":
                    parts.append(ReasoningPart(text="", signature=block.get("data"), redacted=True))
                elif btype in ("tool_use", "server_tool_use"):
                    if not isinstance(block.get("id"), str) or not block.get("name"):
                        raise ValidationError(
                            f"content[{j}] tool_use needs an id and a name",
                            code="bad_tool_call",
                            hint="every tool_use block carries 'id' and 'name'",
                        )
                    args = block.get("input")
                    calls.append(
                        OptionCallPayload(
                            invocation_id=block["id"],
                            option_name=str(block["name"]),
                            arguments=args if isinstance(args, dict) else {"input": args},
                        )
                    )
                elif btype in _SERVER_RESULT_BLOCKS:
                    unrendered.append(str(btype))
                else:
                    raise ValidationError(
                        f"content[{j}] has unknown assistant block type {btype!r}",
                        code="bad_content",
                        hint="supported: text, thinking, redacted_thinking, tool_use",
                    )
        first = unit.first.data
        meta: dict[str, Any] = {"message_id": unit.first.data["message"].get("id"), "uuid": unit.first.uuid}
        if usage:
            meta["usage"] = usage
        if first.get("requestId"):
            meta["request_id"] = first["requestId"]
        origin = Origin.SAMPLED
        if model == _SYNTHETIC_MODEL or first.get("isApiErrorMessage") or first.get("is_api_error_message"):
            origin = Origin.INJECTED  # written by Claude Code (an error notice, an interruption), not by the model
        elif unrendered:
            # The API spliced a server tool's result into this response; the model did not sample those tokens.
            origin = Origin.CARRIED
            meta["unrendered_blocks"] = unrendered
        policy = self.policy
        message: AnyMessage
        if calls:
            message = OptionCallMessage(
                parts=tuple(parts),
                calls=tuple(calls),
                policy=policy,
                role_hint_for_llm="assistant",
                metadata=meta,
            )
        else:
            message = PartsMessage(parts=tuple(parts), policy=policy, role_hint_for_llm="assistant", metadata=meta)
        generation = Generation(model=model, finish_reason=finish) if model and origin is Origin.SAMPLED else None
        return message, origin, generation

    def _user(self, rec: _Rec) -> list[tuple[AnyMessage, Origin, Generation | None]]:
        data = rec.data
        content = data["message"].get("content")
        if _tool_result_ids(content):
            # Results whose call is not in the response just above (e.g. a resumed session): still results.
            return [(msg, Origin.CONTEXT, None) for msg in self._results(rec)]
        meta: dict[str, Any] = {"uuid": rec.uuid}
        if data.get("isMeta"):
            meta["is_meta"] = True
        parts = _user_parts(content, rec.ref)
        if not parts:
            raise ValidationError("user message has no content", code="empty_content")
        origin = Origin.CONTEXT
        if data.get("isCompactSummary"):
            meta["compact_summary"] = True
            origin = Origin.INJECTED  # written by the compaction agent, not by the user
        return [
            (
                PartsMessage(parts=tuple(parts), role_hint_for_llm="user", policy="user", metadata=meta),
                origin,
                None,
            )
        ]

    def _results(self, rec: _Rec) -> list[AnyMessage]:
        out: list[AnyMessage] = []
        extra: list[Part] = []
        for j, block in enumerate(_blocks(rec.data["message"].get("content"), where=rec.ref)):
            if block.get("type") != "tool_result":
                extra.extend(_user_parts([block], rec.ref))
                continue
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or call_id not in self.call_names:
                raise ValidationError(
                    f"content[{j}] tool_result answers no tool_use in this transcript ({call_id})",
                    code="unpaired_result",
                    hint="the record answering a call must follow it",
                )
            out.append(
                OptionResultMessage(
                    result=OptionResultPayload(
                        invocation_id=call_id,
                        option_name=self.call_names[call_id],
                        result=_result_value(block.get("content")),
                        is_error=bool(block.get("is_error")),
                    ),
                    policy=RUNTIME_POLICY,
                    role_hint_for_llm="tool",
                    metadata={"uuid": rec.uuid},
                )
            )
        if extra:
            out.append(PartsMessage(parts=tuple(extra), role_hint_for_llm="user", policy="user"))
        return out


def _latest_run(graph: MessageGraph, start: str) -> list[str]:
    """The branch a rewind left: from ``start`` down through the most recently created child at each step."""
    run = [start]
    while graph.children.get(run[-1]):
        run.append(graph.children[run[-1]][-1])
    return run


def _blocks(content: Any, where: str = "") -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and all(isinstance(b, dict) for b in content):
        return content
    raise ValidationError(
        "message content must be a string or a list of blocks", where=where or None, code="bad_content"
    )


def _tool_result_ids(content: Any) -> list[str]:
    if not isinstance(content, list) or not content:
        return []
    ids = [b.get("tool_use_id") for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return [i for i in ids if isinstance(i, str)]


def _media(block: dict[str, Any], where: str) -> MediaPart:
    """An image/document block as a reference: a URL, a file id, or the inline data as a ``data:`` URI."""
    source = as_dict(block.get("source"))
    mime = source.get("media_type")
    url = source.get("url") or source.get("file_id")
    if url is None and isinstance(source.get("data"), str):
        url = f"data:{mime or 'application/octet-stream'};base64,{source['data']}"
    if not isinstance(url, str) or not url:
        raise ValidationError(f"{block.get('type')} block has no source", where=where, code="bad_content")
    return MediaPart(modality="image" if block.get("type") == "image" else "document", url=url, mime=mime)


def _user_parts(content: Any, where: str) -> list[Part]:
    parts: list[Part] = []
    for j, block in enumerate(_blocks(content, where=where)):
        btype = block.get("type")
        if btype == "text":
            parts.append(TextPart(text=str(block.get("text", ""))))
        elif btype in ("image", "document"):
            parts.append(_media(block, f"{where} content[{j}]"))
        else:
            raise ValidationError(
                f"content[{j}] has unknown user block type {btype!r}",
                where=where,
                code="bad_content",
                hint="supported: text, image, document, tool_result",
            )
    return parts


def _result_value(content: Any) -> Any:
    """A tool result's content: text stays text (text blocks joined); anything with media keeps its blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in content):
        return "\n".join(str(b.get("text", "")) for b in content)
    return content


_AGENT_TYPE_FROM_ID = re.compile(r"^a([a-z_]+)-[0-9a-f]+$")


def _parent_session(location: PurePosixPath) -> list[PurePosixPath]:
    """A sub-agent file's parent session: ``<session>/subagents/agent-<id>.jsonl`` → ``<session>.jsonl``."""
    if location.parent.name != "subagents":
        return []
    return [location.parent.parent.with_suffix(".jsonl")]


def _subagent_type(path: Path, agent_id: str) -> str | None:
    """The sub-agent's type: from a typed agent id (``acompact-…``) or the parent session's ``Task`` call (opened
    through the storage interface, :mod:`msgtrain.ingest.core.files`, which an object-store run serves too)."""
    m = _AGENT_TYPE_FROM_ID.match(agent_id)
    if m:
        return m.group(1)
    files = input_files()
    for session in _parent_session(files.location(path)):
        f = files.open_sibling(path, session)
        if f is not None:
            with f:
                return _task_type(f, agent_id)
    return None


def _task_type(f: BinaryIO, agent_id: str) -> str | None:
    """The ``subagent_type`` of the ``Task`` call a session file ties to ``agent_id``."""
    needle = agent_id.encode()
    task_types: dict[str, str] = {}
    wanted: set[str] = set()
    for raw in bounded_lines(f):
        # Only the few lines naming the agent or a sub-agent type are parsed; the rest are skimmed.
        if needle not in raw and b"subagent_type" not in raw:
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if not isinstance(obj, dict):
            continue
        data = as_dict(obj.get("data"))
        tur = as_dict(obj.get("toolUseResult"))
        if data.get("agentId") == agent_id and isinstance(obj.get("parentToolUseID"), str):
            wanted.add(obj["parentToolUseID"])
        content = (obj.get("message") or {}).get("content") if isinstance(obj.get("message"), dict) else None
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if tur.get("agentId") == agent_id and block.get("type") == "tool_result":
                wanted.add(str(block.get("tool_use_id")))
            inp = block.get("input")
            if block.get("type") == "tool_use" and isinstance(inp, dict) and inp.get("subagent_type"):
                task_types[str(block.get("id"))] = str(inp["subagent_type"])
    return next((task_types[t] for t in sorted(wanted) if t in task_types), None)


READER = ClaudeCodeReader()
