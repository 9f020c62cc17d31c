"""Cline task folders (and those of its forks Roo Code and Kilo Code, which keep the same files): one folder per task
under the extension's storage (``.../saoudrizwan.claude-dev/tasks/<task id>/``) holding

- ``api_conversation_history.json``: the Anthropic messages Cline keeps as the conversation (no system prompt: Cline
  builds it per request; newer versions add ``ts``, ``modelInfo`` and ``metrics.tokens`` to each message);
- ``ui_messages.json`` (``claude_messages.json`` before Cline 2): what the extension showed (``ClineMessage``:
  ``{ts, type: ask | say, say, text, conversationHistoryIndex, conversationHistoryDeletedRange}``); each request is a
  ``say: "api_req_started"`` whose ``text`` is the JSON of its ``{request, tokensIn, tokensOut, cacheWrites,
  cacheReads, cost}``, stamped with ``conversationHistoryIndex``, the index of the history's last message when it
  was sent;
- ``context_history.json`` (newer versions): the edits Cline's context manager makes to earlier messages in later
  requests (a truncation notice, file reads replaced by a note), each stamped with the time it applies from;
- ``task_metadata.json`` and other state files, which hold no conversation.

The folder is the unit (``detect_directory``: both history files): input discovery hands it over once. Each file is
one record (the history one graph, ``cline:<task id>``, policy ``cline``; the others read beside it or skipped as
``cline_<file>``). A history file named on its own (``api_conversation_history.json``, or a JSON list of Anthropic
messages under any name whose head holds the ``<environment_details>`` block these agents append to every user
turn) is read by the same rules, with the task folder's UI messages and context edits where it sits in one: the
Anthropic reader would train Cline's interruption notices and stand-ins.

What is read: the history as the Anthropic reader reads a message list (every assistant message a reply sampled after
the messages before it); a request's reported prompt size (``tokensIn``, ``cacheWrites``, ``cacheReads``) goes to
the reply it produced (the history's message after its ``conversationHistoryIndex``) unless the message logs its own
``metrics``, so a prompt that shrank is seen (*Context completeness*); whether ``tokensIn`` holds the cached tokens
depends on the provider, so it is a range from ``tokensIn`` to the sum.

Not trained, and said so: a reply Cline stopped reading (the user's cancel, an API error mid-stream, a rejected tool, a
second tool in one message) holds the partial text and Cline's notice after it (``[Response interrupted by user]``,
``... by API Error]``, ``... by user feedback]``, ``... by a tool use result. ...]``): ``carried`` and ``interrupted``,
as later requests hold it; Cline's stand-in for a call that returned nothing ("Failure: I did not provide a response.")
is ``carried`` too (the model did not write it). Cline keeps the whole history on disk but sends less once the context
window fills: from the request its context manager first removed a range of the history
(``conversationHistoryDeletedRange`` on the UI messages) or first edited an earlier message (``context_history.json``),
the replies are ``carried`` with the reason (``context_unknown``): what each later request held is Cline's rebuild, not
the log. Every graph is ``context_incomplete`` (``system_prompt``, ``tools``): Cline's system prompt (which holds its
tools' descriptions in the versions that call tools as XML) is not stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.conversation_files import Step, build_linear_graph
from msgtrain.ingest.common.session_common import as_dict, graph_id_for
from msgtrain.ingest.core import base
from msgtrain.ingest.core.files import Beside, input_files
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
from msgtrain.model.completeness import mark_context_incomplete, reported_prompt_range
from msgtrain.model.graph import Origin

POLICY = "cline"
HISTORY = "api_conversation_history.json"
UI = "ui_messages.json"
OLD_UI = "claude_messages.json"  # its name before Cline 2 (Claude Dev), until the task is opened again
CONTEXT_EDITS = "context_history.json"
# The block Cline (and Roo Code, Kilo Code) append to the user's content of every request it sends
ENVIRONMENT_DETAILS = "<environment_details>"
UNLOGGED = "Cline stores the conversation, not the system prompt (with its tools) it builds for each request"
# What Cline (and Roo Code, Kilo Code) appends to a reply it stopped reading (Task.abortStream: the user's cancel, an
# API error mid-stream; the stream loop: a rejected tool, a second tool after the one a message may hold)
# What Cline (and its forks) store as the reply when a call returned no text and no tool use: its own text, no reply
NO_RESPONSE = "Failure: I did not provide a response."
_USER_FIRST = re.compile(r'\{\s*"role"\s*:\s*"user"')
INTERRUPTED = re.compile(
    r"\n\n\[Response interrupted by (user|API Error|user feedback|a tool use result\.[^\]\n]*)\]\s*$", re.M
)


class ClineTaskReader:
    name = "cline_task"
    description = "Cline / Roo Code / Kilo Code task folders: api_conversation_history.json + ui_messages.json"
    example = "sample_logs/cline_task/1765000000000"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=(ENVIRONMENT_DETAILS,), names=(f"*/{HISTORY}",))

    def detect(self, path: Path, head: bytes) -> bool:
        # A history file given on its own (or under another name): a JSON list of Anthropic messages whose user
        # messages carry the <environment_details> block every Cline / Roo / Kilo request appends to the user's turn
        start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        if not start.startswith(b"[") or not (path.name == HISTORY or ENVIRONMENT_DETAILS.encode() in head):
            return False
        text = start[1:].decode("utf-8", "ignore").lstrip()
        try:
            first, _ = json.JSONDecoder().raw_decode(text)
        except ValueError:  # a first message longer than the head: its opening must say it is the user's
            return _USER_FIRST.match(text) is not None
        return isinstance(first, dict) and first.get("role") == "user" and "content" in first

    # A history file named on its own joins the task folder's files beside it (present or not: the part is keyed by
    # their absence too), reached through the storage interface like every partner
    partner_marks = Marks(names=(f"*/{HISTORY}",))

    def partners(self, location: PurePosixPath, beside: Beside) -> list[PurePosixPath]:
        """The UI messages (either name) and context edits beside a file named ``api_conversation_history.json``."""
        del beside
        if location.name != HISTORY:
            return []
        return [location.parent / UI, location.parent / OLD_UI, location.parent / CONTEXT_EDITS]

    def detect_directory(self, path: Path) -> bool:
        # Two stat calls: discovery asks this of every folder it walks.
        return (path / HISTORY).is_file() and ((path / UI).is_file() or (path / OLD_UI).is_file())

    def read(self, path: Path) -> Iterator[ReadEvent]:
        if path.is_file():
            yield from _read_history_file(path)
            return
        if not self.detect_directory(path):
            raise ValidationError(
                f"a Cline task is a folder with {HISTORY} and {UI}",
                where=str(path),
                code="bad_document",
                hint="pass the task folder (tasks/<task id>) or a folder above it",
            )
        ui_file = path / UI if (path / UI).is_file() else path / OLD_UI
        ui, ui_reject = _load(ui_file)
        edits, edits_reject = _load(path / CONTEXT_EDITS) if (path / CONTEXT_EDITS).is_file() else (None, None)
        for reject in (ui_reject, edits_reject):
            if reject is not None:
                yield reject
        beside = (ui_reject is None) + ((path / CONTEXT_EDITS).is_file() and edits_reject is None)
        history, reject = _load(path / HISTORY)
        if reject is None:
            try:
                cut = _first_cut(ui, edits, ui_reject or edits_reject)
                yield _graph(path / HISTORY, history, _requests(ui), cut, records=1 + beside, key=path.name)
                beside = 0
            except MsgtrainError as e:
                where = path / HISTORY
                reject = ReadReject(SourceRef(str(where), "file"), e.located(str(where)), excerpt(read_head(where)))
        if reject is not None:
            yield reject
        if beside:
            yield ReadSkip(SourceRef(str(ui_file), "file"), "cline_state_without_history", beside)
        for other in sorted(p for p in path.iterdir() if p.name not in (HISTORY, ui_file.name, CONTEXT_EDITS)):
            count = sum(1 for p in other.rglob("*") if p.is_file()) if other.is_dir() else 1
            if count:
                yield ReadSkip(SourceRef(str(other), "file"), f"cline_{other.stem}", count)


def _read_history_file(path: Path) -> Iterator[ReadEvent]:
    """A history file named on its own: read with the rules of its task folder, and with the UI messages and context
    edits beside it when it sits in one (its partners: they say which requests were cut and what each request's
    prompt size was; one of them unreadable makes every reply's context unknown, as in the folder). The files beside
    it are not records of this input: no events for them."""
    history, reject = _load(path)
    if reject is not None:
        yield reject
        return
    files = input_files()
    beside: dict[str, tuple[Any, ReadReject | None]] = {}
    for partner in READER.partners(files.location(path), files):
        f = files.open_sibling(path, partner)
        if f is not None:
            with f:
                beside[partner.name] = _load_sibling(path, partner.name, f)
    requests: dict[int, tuple[dict[str, Any], int | None]] = {}
    cut: tuple[int, str] | None = None
    ui = beside.get(UI) or beside.get(OLD_UI)
    if ui is not None:
        edits = beside.get(CONTEXT_EDITS, (None, None))
        requests, cut = _requests(ui[0]), _first_cut(ui[0], edits[0], ui[1] or edits[1])
    key = path.parent.name if path.name == HISTORY else path.stem
    try:
        yield _graph(path, history, requests, cut, records=1, key=key)
    except MsgtrainError as e:
        yield ReadReject(SourceRef(str(path), "file"), e.located(str(path)), excerpt(read_head(path)))


def _load_sibling(path: Path, name: str, f: BinaryIO) -> tuple[Any, ReadReject | None]:
    """A partner's JSON document (read whole, bounded as a whole-file document is), or the reject saying why not."""
    where = str(path.parent / name)
    try:
        raw = f.read(base.MAX_RECORD_BYTES + 1)
        base.check_whole_file(len(raw), where)
        return json.loads(raw), None
    except MsgtrainError as e:
        return None, ReadReject(SourceRef(where, "file"), e.located(where))
    except (ValueError, OSError) as e:
        err = ValidationError(f"not a JSON document: {e}", where=where, code="bad_json")
        return None, ReadReject(SourceRef(where, "file"), err)


def _load(path: Path) -> tuple[Any, ReadReject | None]:
    try:
        return load_json_document(path), None
    except MsgtrainError as e:
        return None, ReadReject(SourceRef(str(path), "file"), e.located(str(path)), excerpt(read_head(path)))


def _requests(ui: Any) -> dict[int, tuple[dict[str, Any], int | None]]:
    """By the history index of the reply each request produced: its reported usage and its time."""
    found: dict[int, tuple[dict[str, Any], int | None]] = {}
    for message in ui if isinstance(ui, list) else []:
        message = as_dict(message)
        index = message.get("conversationHistoryIndex")
        if message.get("say") != "api_req_started" or not isinstance(index, int):
            continue
        try:
            info = as_dict(json.loads(message.get("text") or "{}"))
        except ValueError:
            continue
        # as Cline logged them: whether tokensIn holds the cached tokens depends on the provider (Anthropic's counts
        # them apart, OpenAI's prompt_tokens holds them), so the reported prompt is a range where the cache is logged
        usage = {
            k: info[k]
            for k in ("tokensIn", "tokensOut", "cacheWrites", "cacheReads")
            if isinstance(info.get(k), int | float) and not isinstance(info.get(k), bool)
        }
        ts = message.get("ts") if isinstance(message.get("ts"), int) else None
        found[index + 1] = (usage, ts)  # a retried request: the last one produced the reply
    return found


def _first_cut(ui: Any, edits: Any, unreadable: ReadReject | None) -> tuple[int, str] | None:
    """(the history index of the first reply sent a history Cline cut or edited, why), or None."""
    if unreadable is not None:
        return 0, f"{Path(unreadable.source.file).name} could not be read: what each request held is unknown"
    cuts: list[tuple[int, str]] = []
    last_request: int | None = None
    for message in ui if isinstance(ui, list) else []:
        message = as_dict(message)
        index = message.get("conversationHistoryIndex")
        deleted = message.get("conversationHistoryDeletedRange")
        if isinstance(deleted, list) and len(deleted) == 2:
            # the range is stamped from the setup of the request that cut the history on: the request before this
            # message (before this request itself, when the stamp first shows on a request)
            at = (last_request if last_request is not None else index if isinstance(index, int) else -1) + 1
            cuts.append((at, f"Cline removed messages {deleted[0]}..{deleted[1]} of the history from this request on"))
            break
        if message.get("say") == "api_req_started" and isinstance(index, int):
            last_request = index
    first_edit = _first_edit_time(edits)
    if first_edit is not None:
        for message in ui if isinstance(ui, list) else []:
            message = as_dict(message)
            index, ts = message.get("conversationHistoryIndex"), message.get("ts")
            if message.get("say") != "api_req_started" or not isinstance(index, int) or not isinstance(ts, int):
                continue
            if ts > first_edit:
                cuts.append((index + 1, f"Cline edited earlier messages in the requests after {first_edit}"))
                break
    return min(cuts) if cuts else None


def _first_edit_time(edits: Any) -> int | None:
    """The earliest time of an edit in ``context_history.json`` (``[message index, [edit type, [[block index,
    [[timestamp, update type, update, metadata], ...]]]]]``), or None when it holds none."""
    times: list[int] = []
    for entry in edits if isinstance(edits, list) else []:
        try:
            for _, updates in entry[1][1]:
                times.extend(u[0] for u in updates if isinstance(u[0], int))
        except (TypeError, IndexError, ValueError):
            times.append(0)  # an edit whose time cannot be read: from the first request on
    return min(times) if times else None


def _graph(
    history_file: Path,
    history: Any,
    requests: dict[int, tuple[dict[str, Any], int | None]],
    cut: tuple[int, str] | None,
    records: int,
    key: str,
) -> ReadGraph:
    if not isinstance(history, list):
        raise ValidationError(f"{HISTORY} is not a list of messages", code="bad_document")
    converter = AnthropicConverter(policy=POLICY)
    steps: list[Step] = []
    for step in converter.messages(history):
        message, origin = step.message, step.origin
        if message.role == "assistant" and step.index is not None:
            metadata = dict(message.metadata)
            if step.index in requests and reported_prompt_range(metadata) is None:
                metadata["usage"] = requests[step.index][0]
            if cut is not None and step.index >= cut[0] and origin in (None, Origin.SAMPLED):
                metadata["why_not_trained"] = cut[1]
                origin = Origin.CARRIED
            elif origin in (None, Origin.SAMPLED) and message.text == NO_RESPONSE and not getattr(message, "calls", ()):
                # the model gave nothing: Cline stored this stand-in, which later requests hold
                why = "Cline's stand-in for a call that returned no reply: the model did not write it"
                metadata["why_not_trained"] = why
                origin = Origin.CARRIED
            elif origin in (None, Origin.SAMPLED) and (marked := INTERRUPTED.search(message.text)):
                # Cline cut the stream and wrote its own notice after the partial text: neither the notice nor an
                # end of turn was sampled; later requests hold the message as it is
                why = f"Cline stopped reading this reply: [Response interrupted by {marked.group(1)}]"
                metadata |= {"interrupted": True, "why_not_trained": why}
                origin = Origin.CARRIED
            message = message.model_copy(update={"metadata": metadata})
        steps.append(Step(message, origin, step.generation, step.index))
    graph = build_linear_graph(
        steps,
        base_id=graph_id_for("cline", key, history_file),
        metadata={"source_format": "cline_task", "task_id": key},
        policy=POLICY,
    )
    mark_context_incomplete(graph, ["system_prompt", "tools"], UNLOGGED)
    return ReadGraph(graph, SourceRef(str(history_file), "file"), records=records)


READER = ClineTaskReader()
