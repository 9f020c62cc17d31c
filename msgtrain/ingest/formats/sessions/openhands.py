"""OpenHands event streams: a JSON list of events ``{id, timestamp, source, message, action | observation, cause,
args | content + extras, tool_call_metadata}`` (trajectory exports and the runtime's replay files).

What is read:
- Agent actions produced by a function-calling agent carry ``tool_call_metadata.model_response``: the raw
  chat-completion the LLM returned. That response is the truth of what was sampled: its ``choices[0].message``
  (content, tool_calls with their JSON-string arguments, reasoning) becomes one assistant message, once per
  response ``id`` — the one or more actions it produced (parallel tool calls) point back to the same message.
  Model, finish reason and creation time go to the ``Generation``, usage to metadata.
- Observations with ``tool_call_metadata`` are the tool results, paired by ``tool_call_id``; the text is the
  observation ``content`` wrapped in the command metadata's ``prefix``/``suffix`` when present (what OpenHands shows
  the model for command output).
- ``message`` actions: from the user, user messages (``image_urls`` kept as media references); from the agent
  without a model response, the LLM's plain-text reply (OpenHands makes exactly that content a message action).
- A ``system`` action is the system prompt (and its ``tools`` the environment).
- A ``condensation`` action forgets events and may insert a summary: the branch is rebuilt without the forgotten
  events' messages plus the summary (``injected``) and a ``compaction`` parallel edge records it; assistant messages
  kept in the condensed view are ``carried``.

Skipped: environment events (``agent_state_changed``, ``change_agent_state``), ``null`` observations and
``recall`` actions (``non_message_record:<kind>``).

Safe readings: an event the model saw but this reader cannot render exactly — a ``recall`` observation (rendered
from prompt templates), a user-run command, or an agent action without a model response (older text-parsing
agents) — is skipped and taints the branch: later responses are kept as context (``carried``), not trained.
Observation wording for file edits may differ from what OpenHands' conversation memory sent (it formats some
observations); the observation ``content`` is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.session_common import Chain, SkipTally, as_dict, graph_id_for, has_any
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadReject,
    SourceRef,
    excerpt,
    head_shape,
    load_json_document,
    quoted,
)
from msgtrain.model.graph import EdgeKind, MessageGraph, Origin
from msgtrain.model.message import (
    RUNTIME_POLICY,
    AnyMessage,
    MediaPart,
    OptionCallMessage,
    OptionResultMessage,
    OptionResultPayload,
    Part,
    PartsMessage,
    TextPart,
)
from msgtrain.model.openai import from_openai_message, generation_from_choice

POLICY = "openhands"
_SKIP_ACTIONS = {"change_agent_state", "recall", "null"}
_SKIP_OBSERVATIONS = {"null", "agent_state_changed"}


class OpenHandsReader:
    name = "openhands"
    description = "OpenHands event streams (JSON list of actions/observations embedding the raw model response)"
    example = "sample_logs/openhands/events.json"
    document_records = ""  # a JSON document's records (see msgtrain.ingest.core.base)

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["action", "observation"]))

    def detect(self, path: Path, head: bytes) -> bool:
        shape = head_shape(head)
        return (
            shape.layout == "array"
            and shape.has(".id", ".source")
            and has_any(shape, ".action", ".observation")
            and has_any(shape, ".args", ".extras", ".tool_call_metadata")
        )

    def read(self, path: Path) -> Iterator[ReadEvent]:
        doc = load_json_document(path)
        events = doc if isinstance(doc, list) else None
        if events is None:
            raise ValidationError(
                "an OpenHands event stream is a JSON list of events",
                where=str(path),
                code="bad_document",
                hint="pass a trajectory exported as a list of events",
            )
        yield from _StreamBuild(path, events).events()


class _StreamBuild:
    def __init__(self, path: Path, events: list[Any]):
        self.path = path
        self.events_in = events
        self.skips = SkipTally(path)
        system = next(
            (
                e
                for e in events
                if isinstance(e, dict) and e.get("action") == "system" and isinstance(e.get("args"), dict)
            ),
            None,
        )
        tools = system["args"].get("tools") if system is not None else None
        self.graph = MessageGraph(
            tools=tools if isinstance(tools, list) else None,
            graph_id=graph_id_for("openhands", path.name.rsplit(".", 1)[0], path),
            policy=POLICY,
            metadata={"format": "openhands"},
        )
        self.chain = Chain(self.graph)
        self.sources: list[Any] = []  # event id of each node on the chain (for condensation)
        self.responses: set[str] = set()
        self.call_names: dict[str, str] = {}
        self.records = 0

    def _append(self, event_id: Any, message: AnyMessage, origin: Origin, generation: Any = None) -> None:
        self.chain.append(message, origin, generation)
        self.sources.append(event_id)

    def events(self) -> Iterator[ReadEvent]:
        for i, event in enumerate(self.events_in):
            ref = f"item {i}"
            try:
                self._event(event, ref)
            except MsgtrainError as e:
                self.chain.taint = self.chain.taint or f"rejected {ref}"
                yield ReadReject(SourceRef(str(self.path), ref), e.located(f"{self.path} ({ref})"), excerpt(str(event)))
        if self.graph.nodes:
            yield ReadGraph(self.graph, SourceRef(str(self.path), "item 0"), records=self.records)
        elif self.records:
            self.skips.add("empty_session", "item 0", self.records)
        yield from self.skips.events()

    def _skip(self, reason: str, ref: str, taint: bool = False) -> None:
        self.skips.add(reason, ref)
        if taint:
            # The model saw this event in some form this reader cannot reproduce: later turns are not exact.
            self.chain.taint = self.chain.taint or f"{reason} at {ref}"

    def _event(self, event: Any, ref: str) -> None:
        if not isinstance(event, dict):
            raise ValidationError("event is not an object", code="bad_record")
        source = event.get("source")
        tcm = event.get("tool_call_metadata") if isinstance(event.get("tool_call_metadata"), dict) else None
        action, observation = event.get("action"), event.get("observation")
        args = as_dict(event.get("args"))
        if action is not None:
            if action == "system":
                text = str(args.get("content") or event.get("message") or "")
                self._append(
                    event.get("id"),
                    PartsMessage(parts=(TextPart(text=text),), role_hint_for_llm="system", policy="system"),
                    Origin.CONTEXT,
                )
            elif tcm is not None and isinstance(tcm.get("model_response"), dict):
                self._model_action(event, tcm)
            elif action == "message" and source == "user":
                self._append(event.get("id"), _user_message(args, event), Origin.CONTEXT)
            elif action == "message" and source == "agent":
                content = args.get("content") if isinstance(args.get("content"), str) else event.get("message")
                msg = PartsMessage(
                    parts=(TextPart(text=str(content or "")),),
                    role_hint_for_llm="assistant",
                    policy=POLICY,
                    metadata={"event_id": event.get("id")},
                )
                self._append(event.get("id"), msg, Origin.SAMPLED)
            elif action == "condensation":
                self._condense(args, event)
            elif action in _SKIP_ACTIONS or source == "environment":
                self._skip(f"non_message_record:{action}", ref)
                return
            else:
                self._skip(f"action_without_model_response:{action}", ref, taint=True)
                return
            self.records += 1
            return
        if observation is not None:
            if tcm is not None and isinstance(tcm.get("tool_call_id"), str):
                self._append(event.get("id"), self._result(event, tcm), Origin.CONTEXT)
                self.records += 1
            elif observation in _SKIP_OBSERVATIONS or source == "environment":
                self._skip(f"non_message_record:{observation}", ref)
            else:
                self._skip(f"observation_without_call:{observation}", ref, taint=True)
            return
        raise ValidationError("event has neither an action nor an observation", code="bad_record")

    def _model_action(self, event: dict[str, Any], tcm: dict[str, Any]) -> None:
        response = tcm["model_response"]
        rid = str(response.get("id") or f"event-{event.get('id')}")
        if rid in self.responses:
            return  # another action of a response already in the graph (parallel tool calls)
        choices = response.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ValidationError("model_response has no choices", code="bad_record")
        choice = choices[0]
        data = choice.get("message")
        if not isinstance(data, dict):
            raise ValidationError("model_response choice has no message", code="bad_record")
        message = from_openai_message(data, policy=POLICY)
        if isinstance(message, OptionCallMessage):
            self.call_names.update({c.invocation_id: c.option_name for c in message.calls})
        meta = {"response_id": rid, "event_id": event.get("id")}
        if response.get("usage"):
            meta["usage"] = response["usage"]
        message = message.model_copy(update={"metadata": {**message.metadata, **meta}})
        self.responses.add(rid)
        self._append(event.get("id"), message, Origin.SAMPLED, generation_from_choice(choice, response))

    def _result(self, event: dict[str, Any], tcm: dict[str, Any]) -> OptionResultMessage:
        call_id = tcm["tool_call_id"]
        name = self.call_names.get(call_id) or tcm.get("function_name")
        if not isinstance(name, str) or not name:
            raise ValidationError(
                f"observation answers no known call ({call_id})",
                code="unpaired_result",
                hint="the action's model_response must come before its observation",
            )
        extras = as_dict(event.get("extras"))
        meta = as_dict(extras.get("metadata"))
        text = f"{meta.get('prefix') or ''}{event.get('content') or ''}{meta.get('suffix') or ''}"
        exit_code = meta.get("exit_code")
        return OptionResultMessage(
            result=OptionResultPayload(
                invocation_id=call_id, option_name=name, result=text, is_error=event.get("observation") == "error"
            ),
            policy=RUNTIME_POLICY,
            role_hint_for_llm="tool",
            metadata={"event_id": event.get("id"), **({"exit_code": exit_code} if exit_code is not None else {})},
        )

    def _condense(self, args: dict[str, Any], event: dict[str, Any]) -> None:
        forgotten = set(args.get("forgotten_event_ids") or [])
        start, end = args.get("forgotten_events_start_id"), args.get("forgotten_events_end_id")
        if isinstance(start, int) and isinstance(end, int):
            forgotten |= set(range(start, end + 1))
        kept: list[tuple[Any, AnyMessage, Origin]] = []
        for nid, source in zip(self.chain.path, self.sources, strict=True):
            if source in forgotten:
                continue
            node = self.graph.nodes[nid]
            origin = Origin.CARRIED if node.origin is Origin.SAMPLED else node.origin
            kept.append((source, node.message, origin))
        summary = args.get("summary")
        if isinstance(summary, str) and summary:
            offset = args["summary_offset"] if isinstance(args.get("summary_offset"), int) else len(kept)
            note = PartsMessage(
                parts=(TextPart(text=summary),),
                role_hint_for_llm="user",
                policy="user",
                metadata={"condensation_summary": True, "event_id": event.get("id")},
            )
            kept.insert(max(0, min(offset, len(kept))), (event.get("id"), note, Origin.INJECTED))
        self.chain.replace(0, [(m, o) for _, m, o in kept], EdgeKind.COMPACTION)
        self.sources = [s for s, _, _ in kept]


def _user_message(args: dict[str, Any], event: dict[str, Any]) -> PartsMessage:
    text = args.get("content") if isinstance(args.get("content"), str) else event.get("message")
    parts: list[Part] = [TextPart(text=str(text or ""))]
    for url in args.get("image_urls") or []:
        if isinstance(url, str) and url:
            parts.append(MediaPart(modality="image", url=url))
    return PartsMessage(
        parts=tuple(parts), role_hint_for_llm="user", policy="user", metadata={"event_id": event.get("id")}
    )


READER = OpenHandsReader()
