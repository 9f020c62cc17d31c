"""OpenHands V1 (software-agent-sdk) persisted conversations: a *folder* ``<conversation id>/`` holding
``base_state.json`` and ``events/event-NNNNN-<event id>.json``, one event per file, ``kind`` naming the event.

The folder is the unit (``detect_directory``): input discovery hands it over once, and the event files inside are
not inputs of their own. Each event file and ``base_state.json`` is one record. One graph per folder,
``openhands-v1:<conversation id>``, policy ``openhands``.

What is read, in event-file order (``NNNNN``):
- ``SystemPromptEvent``: the system prompt (``system_prompt.text``, plus ``dynamic_context`` when present). Its
  ``tools`` are the SDK's tool descriptions, not the JSON schemas sent to the model: their names go to metadata.
- ``MessageEvent``: ``llm_message`` as it was sent — a user message (``source: user``), or the assistant's reply
  (``source: agent``: text, ``reasoning_content`` / ``thinking_blocks`` as reasoning), sampled in the context before
  it; ``extended_content`` (skill text the SDK appends to a user message) is part of the user message.
- ``ActionEvent``: a tool call of one model response: ``tool_call`` ``{id, name, arguments}`` with the ``thought``
  text and reasoning of the response. Consecutive actions with the same ``llm_response_id`` are one response with
  parallel calls (the thought rides on the first).
- ``ObservationEvent`` / ``AgentErrorEvent`` / ``UserRejectObservation``: the result of the call with that
  ``tool_call_id``. The text is built the way the SDK's ``to_llm_content`` does for the base observation: an error
  observation starts with ``[An error occurred during execution.]``, then the ``content`` text; a terminal
  observation is wrapped in its metadata ``prefix`` / ``suffix``.
- ``base_state.json``: the agent's LLM settings (model, temperature, top_p) for the ``Generation``, and the run's
  ``execution_status`` and usage stats as metadata.

Skipped: ``ConversationStateUpdateEvent``, ``PauseEvent``, ``TokenEvent`` and other events that carry no message
(``non_message_record:<kind>``). An error event without a ``tool_call_id`` (a restart, a failed LLM call) answers no
call: skipped (``error_without_call:<kind>``), and it taints the branch (whether the model saw it is unknown). A
``Condensation`` (events forgotten, a summary inserted) taints the branch: later responses are ``carried`` (the
condensed view the model saw is not rebuilt here).

Safe readings: tool-specific observation renderings beyond the base rule (some SDK versions add lines such as the
exit code) may differ from what the model saw; the observation content is used, as for the V0 reader.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.session_common import Chain, SkipTally, as_dict, as_list, folder_records, graph_id_for
from msgtrain.ingest.formats import Marks, ReadEvent, ReadGraph, SourceRef
from msgtrain.model.graph import MessageGraph, Origin
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
from msgtrain.model.openai import parse_arguments

POLICY = "openhands"
ERROR_HEADER = "[An error occurred during execution.]"
_RESULT_KINDS = {"ObservationEvent", "AgentErrorEvent", "UserRejectObservation"}


def _event_files(folder: Path) -> list[Path]:
    events = folder / "events"
    return sorted(p for p in events.glob("event-*.json") if p.is_file()) if events.is_dir() else []


class OpenHandsV1Reader:
    name = "openhands_v1"
    description = "OpenHands V1 (software-agent-sdk) conversation folders: base_state.json + events/event-*.json"
    example = "sample_logs/openhands_v1/conv0001"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks()

    def detect(self, path: Path, head: bytes) -> bool:
        # The unit is the folder; a single event file is not a conversation.
        del path, head
        return False

    def detect_directory(self, path: Path) -> bool:
        # A few stat calls and one directory entry: discovery asks this of every folder it walks.
        events = path / "events"
        return (
            (path / "base_state.json").is_file()
            and events.is_dir()
            and next(events.glob("event-*.json"), None) is not None
        )

    def read(self, path: Path) -> Iterator[ReadEvent]:
        if not path.is_dir() or not self.detect_directory(path):
            raise ValidationError(
                "an OpenHands V1 conversation is a folder with base_state.json and events/",
                where=str(path),
                code="bad_document",
                hint="pass the conversation folder (persistence_dir/<conversation id>)",
            )
        build = _Build(path)
        yield from folder_records(
            path / "base_state.json", build.base_state, _event_files(path), build.event, build.rejected
        )
        yield from build.finish()


class _Build:
    def __init__(self, folder: Path):
        self.folder = folder
        self.graph = MessageGraph(graph_id=graph_id_for("openhands-v1", folder.name, folder), policy=POLICY)
        self.chain = Chain(self.graph)
        self.skips = SkipTally(folder)
        self.records = 0
        self.meta: dict[str, Any] = {"format": "openhands_v1", "conversation_id": folder.name}
        self.generation: Generation | None = None
        self.calls: dict[str, str] = {}
        # The response being assembled from consecutive actions: (llm_response_id, parts, calls).
        self.pending: tuple[str | None, list[Part], list[OptionCallPayload]] | None = None

    def base_state(self, state: Any) -> None:
        state = as_dict(state)
        self.records += 1
        llm = as_dict(as_dict(state.get("agent")).get("llm"))
        model = llm.get("model") if isinstance(llm.get("model"), str) else None
        sampling = {k: llm[k] for k in ("temperature", "top_p") if isinstance(llm.get(k), int | float)}
        if model or sampling:
            self.generation = Generation(model=model, sampling=sampling)
        for key in ("id", "execution_status", "max_iterations"):
            if state.get(key) is not None:
                self.meta[key] = state[key]
        usage = as_dict(as_dict(state.get("stats")).get("usage_to_metrics"))
        if usage:
            self.meta["usage"] = {
                k: as_dict(v).get("accumulated_token_usage") for k, v in usage.items() if isinstance(v, dict)
            }

    def event(self, event: Any, name: str) -> None:
        if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
            raise ValidationError("event is not an object with a 'kind'", code="bad_record")
        kind = event["kind"]
        if kind != "ActionEvent":
            self.flush()
        if kind == "SystemPromptEvent":
            prompt = as_dict(event.get("system_prompt"))
            text = str(prompt.get("text", ""))
            extra = as_dict(event.get("dynamic_context")).get("text")
            if isinstance(extra, str) and extra:
                text = f"{text}\n\n{extra}"
            self.meta["tools"] = [
                as_dict(t).get("title") or as_dict(t).get("name") for t in as_list(event.get("tools"))
            ]
            self.records += 1
            self.chain.append(PartsMessage(parts=(TextPart(text=text),), role_hint_for_llm="system", policy="system"))
        elif kind == "MessageEvent":
            self.records += 1
            self._message(event)
        elif kind == "ActionEvent":
            self.records += 1
            self._action(event)
        elif kind in _RESULT_KINDS and not isinstance(event.get("tool_call_id"), str):
            # An agent error that answers no call (a restart, an LLM failure): the SDK reports it to the user, and
            # whether the model saw it is unknown, so what follows is not trained.
            self.skips.add(f"error_without_call:{kind}", name)
            self.chain.taint = self.chain.taint or f"{kind} without a call"
        elif kind in _RESULT_KINDS:
            self.records += 1
            self._result(event, kind)
        elif kind in ("Condensation", "CondensationSummaryEvent"):
            self.skips.add(f"non_message_record:{kind}", name)
            self.chain.taint = self.chain.taint or "condensed history"
        else:
            self.skips.add(f"non_message_record:{kind}", name)

    def _message(self, event: dict[str, Any]) -> None:
        llm = as_dict(event.get("llm_message"))
        role = llm.get("role")
        parts = [*_reasoning(llm), *_content(llm.get("content"))]
        if role == "user":
            parts += _content(event.get("extended_content"))
            if not parts:
                raise ValidationError("user message has no content", code="empty_content")
            self.chain.append(PartsMessage(parts=tuple(parts), role_hint_for_llm="user", policy="user"))
            return
        if role != "assistant":
            raise ValidationError(f"message role {role!r} is not user or assistant", code="unknown_role")
        calls = [self._call(c) for c in as_list(llm.get("tool_calls"))]
        message: AnyMessage
        if calls:
            message = OptionCallMessage(
                parts=tuple(parts), calls=tuple(calls), policy=POLICY, role_hint_for_llm="assistant"
            )
        elif parts:
            message = PartsMessage(parts=tuple(parts), role_hint_for_llm="assistant", policy=POLICY)
        else:
            raise ValidationError("assistant message has no content", code="empty_assistant")
        self.chain.append(message, Origin.SAMPLED, self.generation)

    def _call(self, raw: Any) -> OptionCallPayload:
        call = as_dict(raw)
        fn = as_dict(call.get("function")) or call
        if not isinstance(call.get("id"), str) or not isinstance(fn.get("name"), str):
            raise ValidationError("tool call needs an id and a name", code="bad_tool_call")
        args, raw_args = parse_arguments(fn.get("arguments"))
        self.calls[call["id"]] = fn["name"]
        return OptionCallPayload(
            invocation_id=call["id"], option_name=fn["name"], arguments=args, raw_arguments=raw_args
        )

    def _action(self, event: dict[str, Any]) -> None:
        call = self._call(event.get("tool_call"))
        response = event.get("llm_response_id") if isinstance(event.get("llm_response_id"), str) else None
        if self.pending is not None and (response is None or self.pending[0] != response):
            self.flush()
        if self.pending is None:
            parts = [*_reasoning(event), *_content(event.get("thought"))]
            self.pending = (response, parts, [])
        self.pending[2].append(call)

    def flush(self) -> None:
        if self.pending is None:
            return
        _, parts, calls = self.pending
        self.pending = None
        message = OptionCallMessage(
            parts=tuple(parts), calls=tuple(calls), policy=POLICY, role_hint_for_llm="assistant"
        )
        self.chain.append(message, Origin.SAMPLED, self.generation)

    def _result(self, event: dict[str, Any], kind: str) -> None:
        call_id = event.get("tool_call_id")
        if not isinstance(call_id, str) or call_id not in self.calls:
            raise ValidationError(f"{kind} answers no earlier tool call ({call_id})", code="unpaired_result")
        if kind == "AgentErrorEvent":
            text, is_error = f"{ERROR_HEADER}\n{event.get('error', '')}", True
        elif kind == "UserRejectObservation":
            text, is_error = str(event.get("rejection_reason") or "Action rejected by the user."), True
        else:
            obs = as_dict(event.get("observation"))
            is_error = bool(obs.get("is_error"))
            body = "".join(p.text for p in _content(obs.get("content")) if isinstance(p, TextPart))
            meta = as_dict(obs.get("metadata"))
            if meta and ("prefix" in meta or "suffix" in meta):
                body = f"{meta.get('prefix') or ''}{body}{meta.get('suffix') or ''}"
            text = f"{ERROR_HEADER}\n{body}" if is_error else body
        self.chain.append(
            OptionResultMessage(
                result=OptionResultPayload(
                    invocation_id=call_id, option_name=self.calls[call_id], result=text, is_error=is_error
                ),
                policy=RUNTIME_POLICY,
                role_hint_for_llm="tool",
            ),
            Origin.CONTEXT,
        )

    def rejected(self, name: str) -> None:
        """An event file that could not be read: the response being assembled was sampled before it and keeps its
        context; what the model saw after it is unknown, so later responses are not trained."""
        self.flush()
        self.chain.taint = self.chain.taint or f"rejected {name}"

    def finish(self) -> Iterator[ReadEvent]:
        self.flush()
        self.graph.metadata.update(self.meta)
        if self.graph.nodes:
            yield ReadGraph(self.graph, SourceRef(str(self.folder), "base_state.json"), records=self.records)
        elif self.records:
            self.skips.add("conversation_without_messages", "base_state.json", self.records)
        yield from self.skips.events()


def _content(raw: Any) -> list[Part]:
    """TextContent / ImageContent items (``{"type": "text", "text"}`` / ``{"type": "image", "image_urls"}``)."""
    parts: list[Part] = []
    for k, item in enumerate(as_list(raw)):
        item = as_dict(item)
        if item.get("type") == "text" and isinstance(item.get("text"), str):
            parts.append(TextPart(text=item["text"]))
        elif item.get("type") == "image":
            parts.extend(MediaPart(modality="image", url=str(u)) for u in as_list(item.get("image_urls")))
        else:
            raise ValidationError(
                f"content[{k}] is not a text or image item: {json.dumps(item, default=str)[:80]}",
                code="bad_content",
            )
    return parts


def _reasoning(source: dict[str, Any]) -> list[Part]:
    blocks = [
        ReasoningPart(text=str(b.get("thinking", "")), signature=b.get("signature"))
        for b in as_list(source.get("thinking_blocks"))
        if isinstance(b, dict) and b.get("thinking")
    ]
    if blocks:
        return list(blocks)
    text = source.get("reasoning_content")
    return [ReasoningPart(text=text)] if isinstance(text, str) and text else []


READER = OpenHandsV1Reader()
