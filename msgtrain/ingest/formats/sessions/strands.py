"""Strands Agents sessions (``FileSessionManager``, the S3 session manager's same layout): a *folder* per agent,
``session_<session id>/agents/agent_<agent id>/`` holding ``agent.json`` and ``messages/message_<n>.json``, one
``SessionMessage`` per file: ``{"message": {role, content}, "message_id", "redact_message", "created_at", ...}``.

The session folder (``session.json`` + ``agents/``) is the unit (``detect_directory``; an agent folder passed alone is
one too): input discovery hands it over once, and the files inside are not inputs of their own. Each message file
and ``agent.json`` is one record. One graph per agent folder, ``strands:<session id>/<agent id>``, policy
``strands``.

What is read, in ``message_id`` order (the number in the file name): each message is a Bedrock Converse message
(``text``, ``toolUse``, ``toolResult``, ``reasoningContent``, media blocks: the Converse reader's converter), a user
message's ``toolResult`` blocks the results of the calls before it; an assistant message is a reply sampled after the
messages before it. A message the agent's guardrail redacted (``redact_message`` set) is what the conversation holds
from then on: a redacted reply is context (``carried``: the text the model sampled is not what it was shown again),
a redacted prompt is its redacted text.

The session does not keep the agent's system prompt or its tool specs (they are the agent's code): every graph is
marked incomplete for them. A conversation manager that removed messages from the window
(``conversation_manager_state.removed_message_count`` in ``agent.json``, the sliding window's) leaves every message
on disk, but which window each later reply saw is not logged: the replies are kept as context (``carried``), not
trained in a context the model may not have had.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.session_common import Chain, SkipTally, as_dict, folder_records, graph_id_for
from msgtrain.ingest.formats import Marks, ReadEvent, ReadGraph, SourceRef
from msgtrain.ingest.formats.api.bedrock import ConverseConverter
from msgtrain.model.completeness import mark_context_incomplete
from msgtrain.model.graph import MessageGraph, Origin

POLICY = "strands"
_MESSAGE_FILE = re.compile(r"^message_(\d+)\.json$")
_NO_CONTEXT = "a Strands session keeps the messages, not the agent's system prompt and tool specs (its code)"


def _message_files(folder: Path) -> list[Path]:
    """The message files of an agent folder in ``message_id`` order (message_10 after message_9)."""
    messages = folder / "messages"
    if not messages.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in messages.iterdir() if (m := _MESSAGE_FILE.match(p.name)) and p.is_file()]
    return [p for _, p in sorted(found)]


def _agents(session: Path) -> list[Path]:
    agents = session / "agents"
    return sorted(p for p in agents.iterdir() if p.is_dir()) if agents.is_dir() else []


def _agent_folder(path: Path) -> bool:
    messages = path / "messages"
    if not (path / "agent.json").is_file() or not messages.is_dir():
        return False
    return next(messages.glob("message_*.json"), None) is not None


class StrandsReader:
    name = "strands"
    description = "Strands Agents session folders: agents/agent_<id>/agent.json + messages/message_<n>.json"
    example = "sample_logs/strands/session_demo"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks()

    def detect(self, path: Path, head: bytes) -> bool:
        # The unit is the agent folder; a single message file is not a conversation.
        del path, head
        return False

    def detect_directory(self, path: Path) -> bool:
        # A few stat calls and directory entries: discovery asks this of every folder it walks. A session folder
        # (session.json + agents/) is claimed whole, so its session.json is not an input of its own.
        if (path / "session.json").is_file() and (path / "agents").is_dir():
            return any(_agent_folder(a) for a in _agents(path))
        return _agent_folder(path)

    def read(self, path: Path) -> Iterator[ReadEvent]:
        if not path.is_dir() or not self.detect_directory(path):
            raise ValidationError(
                "a Strands session is a folder with session.json and agents/agent_<id>/ (agent.json and "
                "messages/message_<n>.json)",
                where=str(path),
                code="bad_document",
                hint="pass the session folder (session_<id>), an agent folder inside it, or any folder above it",
            )
        if _agent_folder(path):
            yield from self._agent(path)
            return
        for agent in _agents(path):
            if _agent_folder(agent):
                yield from self._agent(agent)

    def _agent(self, path: Path) -> Iterator[ReadEvent]:
        build = _Build(path)
        yield from folder_records(path / "agent.json", build.agent, _message_files(path), build.message, build.rejected)
        yield from build.finish()


class _Build:
    def __init__(self, folder: Path):
        self.folder = folder
        session = folder.parent.parent.name.removeprefix("session_") if folder.parent.name == "agents" else None
        agent_id = folder.name.removeprefix("agent_")
        key = f"{session}/{agent_id}" if session else agent_id
        self.graph = MessageGraph(graph_id=graph_id_for("strands", key, folder), policy=POLICY)
        self.chain = Chain(self.graph)
        self.converter = ConverseConverter(policy=POLICY)
        self.skips = SkipTally(folder)
        self.records = 0
        self.meta: dict[str, Any] = {"format": "strands", "agent_id": agent_id}
        if session:
            self.meta["session_id"] = session

    def agent(self, state: Any) -> None:
        state = as_dict(state)
        self.records += 1
        manager = as_dict(state.get("conversation_manager_state"))
        removed = manager.get("removed_message_count")
        if isinstance(removed, int) and removed > 0:
            self.meta["removed_message_count"] = removed
            self.chain.taint = f"the conversation manager removed {removed} messages from the window"

    def message(self, record: Any, name: str) -> None:
        record = as_dict(record)
        data = record.get("message")
        if not isinstance(data, dict):
            raise ValidationError("the record holds no 'message' object", code="bad_record")
        redacted = record.get("redact_message")
        if isinstance(redacted, dict) and data.get("role") != "assistant":
            data = redacted  # the guardrail's text replaced the prompt in the conversation
        messages = self.converter.message(data, self.records)
        self.records += 1
        for message in messages:
            origin = Origin.CARRIED if redacted is not None and message.role == "assistant" else None
            self.chain.append(message, origin)

    def rejected(self, name: str) -> None:
        """A message file that could not be read: what the model saw after it is unknown, so later replies are not
        trained."""
        self.chain.taint = self.chain.taint or f"rejected {name}"

    def finish(self) -> Iterator[ReadEvent]:
        if self.graph.nodes:
            mark_context_incomplete(self.graph, ["system_prompt", "tools"], _NO_CONTEXT)
            self.graph.metadata.update(self.meta)
            yield ReadGraph(self.graph, SourceRef(str(self.folder), "agent.json"), records=self.records)
        elif self.records:
            self.skips.add("conversation_without_messages", "agent.json", self.records)
        yield from self.skips.events()


READER = StrandsReader()
