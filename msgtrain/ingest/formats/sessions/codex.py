"""OpenAI Codex CLI rollouts: ``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``, one JSON record per line,
``{"timestamp", "type", "payload"}``.

What is read (this follows how Codex itself rebuilds a thread's history from its rollout):

- ``session_meta``: the session id (graph id ``codex:<id>``) and ``base_instructions`` — the instructions Codex
  sends with every request — which become the root system message.
- ``response_item``: the history items, in order. Consecutive model items (``reasoning``, assistant ``message``,
  ``function_call``, ``custom_tool_call``, ``local_shell_call``, ``web_search_call``) are one model response and
  become one assistant message (text and reasoning parts in order, calls after); ``function_call_output`` /
  ``custom_tool_call_output`` become results paired with their call by ``call_id``; ``user``/``developer`` messages
  are context (``developer`` keeps its role as metadata). A ``token_count`` event with usage closes the response
  it follows (its usage is kept in the message metadata) and counts as part of the graph.
- ``turn_context``: the model and reasoning effort of the turn, recorded on each response's ``Generation``.
- A response ends at a turn's edge (``task_started``, ``task_complete``, ``turn_aborted``, ``user_message`` events),
  with or without a ``token_count`` after it. A prompt logged only as its ``user_message`` event, not as the item
  Codex sent, leaves the replies after it ``carried`` until a replacement history is the whole context again.
- ``compacted``: history is replaced by ``replacement_history`` (after the root system message). The old branch is
  kept and a ``compaction`` parallel edge records the replacement; assistant messages in the replacement are
  ``carried`` (they were sampled in the full history) and the opaque ``compaction`` item (an encrypted summary
  written by the compaction model) is ``injected`` context. A ``compacted`` record without replacement history
  (older local compaction) is rebuilt as the user messages plus the summary, and, because Codex also re-adds its
  initial context we cannot see, turns after it are ``carried``.
- ``event_msg`` records are UI events and are skipped (reason ``non_message_record:event_msg``), except
  ``thread_rolled_back`` (the user dropped the last N turns: a rewind, what follows is a new branch) and the
  ``token_count`` records described above.

- A fork that names the rollout it continues (``session_meta`` ``history_base``, Codex 0.154 on) holds none of the
  history it inherited: its replies are ``carried`` until a replacement history is the whole context again. A rollout
  line of a type this reader does not know (``inter_agent_communication``, ``world_state``) taints what follows as an
  unknown item does; ``token_usage_record`` lines (usage accounting) are skipped.

Safe readings:
- Reasoning is encrypted (``encrypted_content``): it is kept as a redacted reasoning part with the ciphertext as
  its signature; reasoning *summaries* are metadata, never reasoning text, because they were written by a
  summarizer, not sampled as the model's thinking. Plain ``content`` reasoning (open models) is real reasoning.
- A response that used a hosted tool (``web_search_call``) was sampled around search results the rollout does not
  hold; it is kept as context (``carried``), not trained.
- Tool schemas are not in the rollout, so the environment has no tools.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.session_common import (
    Chain,
    SkipTally,
    as_dict,
    graph_id_for,
    synthetic_call_id,
    text_of_blocks,
)
from msgtrain.ingest.core.base import first_json_value
from msgtrain.ingest.formats import (
    Marks,
    ReadEvent,
    ReadGraph,
    ReadReject,
    SourceRef,
    excerpt,
    iter_json_lines,
    quoted,
    read_head,
)
from msgtrain.ingest.formats.sessions.codex_exec import is_exec_stream, reject_exec_stream
from msgtrain.model.completeness import mark_context_incomplete, mark_unlogged_context
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

POLICY = "codex"
_ROLLOUT_TYPES = {"session_meta", "response_item", "turn_context", "event_msg", "compacted"}
# Rollout records that only account for a response (token usage), never part of the model's input.
_ACCOUNTING_TYPES = {"token_usage_record"}
_MODEL_ITEMS = {
    "reasoning",
    "function_call",
    "custom_tool_call",
    "local_shell_call",
    "web_search_call",
    "image_generation_call",
    "tool_search_call",
}
_HOSTED_ITEMS = {"web_search_call", "image_generation_call"}  # executed by the API inside the response
_OUTPUT_ITEMS = {"function_call_output", "custom_tool_call_output", "local_shell_call_output", "tool_search_output"}
# Items Codex records but never sends to the model.
_NOT_SENT_ITEMS = {"ghost_snapshot"}
# UI events at a turn's edges: no model response continues across one.
_TURN_EDGES = {"task_started", "task_complete", "turn_aborted", "user_message"}
# User messages Codex injects as context; a rollback counts only real user turns.
_CONTEXTUAL_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
    "<INSTRUCTIONS>",
    "<user_shell_command>",
    "<turn_aborted>",
    "<subagent_notification>",
)


class CodexReader:
    name = "codex"
    description = "OpenAI Codex CLI rollouts (JSONL: session_meta, response_item, turn_context, compacted)"
    example = "sample_logs/codex/rollout.jsonl"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["thread.started", "payload"]))

    def detect(self, path: Path, head: bytes) -> bool:
        first = first_json_value(head)
        if is_exec_stream(head):
            return True  # `codex exec --json`: rejected naming the rollout that holds the session (codex_exec.py)
        return (
            isinstance(first, dict) and first.get("type") in _ROLLOUT_TYPES and isinstance(first.get("payload"), dict)
        )

    def read(self, path: Path) -> Iterator[ReadEvent]:
        if is_exec_stream(read_head(path)):
            yield from reject_exec_stream(path)
            return
        build = _RolloutBuild(path)
        for lineno, raw, obj in iter_json_lines(path):
            ref = f"line {lineno}"
            if isinstance(obj, MsgtrainError):
                build.flush()
                build.taint(f"rejected {ref}")
                yield ReadReject(SourceRef(str(path), ref), obj, excerpt(raw))
                continue
            try:
                build.record(obj, ref)
            except MsgtrainError as e:
                # As for a line that does not parse: what came before the bad record was sampled in a whole
                # context and is kept; only what follows it is tainted.
                build.flush()
                build.taint(f"rejected {ref}")
                yield ReadReject(SourceRef(str(path), ref), e.located(f"{path}:{lineno}"), excerpt(raw))
        yield from build.finish()


class _RolloutBuild:
    def __init__(self, path: Path):
        self.path = path
        self.skips = SkipTally(path)
        self.graph: MessageGraph | None = None
        self.chain: Chain | None = None
        self.records = 0
        self.first_ref = "line 1"
        self.system_nodes = 0  # nodes before the history proper (base instructions); compaction keeps them
        self.pending: list[tuple[dict[str, Any], str]] = []
        self.call_names: dict[str, str] = {}
        self.model: str | None = None
        self.effort: str | None = None
        self.session: dict[str, Any] = {}
        # User turns since the last model response: as the UI event (``event_msg`` ``user_message``) and as the
        # history item the model was sent. An event without its item means the model's input is not logged.
        self.user_events: list[str] = []
        self.user_items = 0

    # ------------------------------------------------------------------ plumbing
    def _chain(self, ref: str) -> Chain:
        if self.chain is None:
            sid = self.session.get("id") if isinstance(self.session.get("id"), str) else None
            meta = {k: self.session.get(k) for k in ("cli_version", "originator", "model_provider", "cwd", "source")}
            meta = {"format": "codex", "session_id": sid, **{k: v for k, v in meta.items() if v is not None}}
            self.graph = MessageGraph(graph_id=graph_id_for("codex", sid, self.path), policy=POLICY, metadata=meta)
            self.chain = Chain(self.graph)
            self.first_ref = ref
        return self.chain

    def taint(self, reason: str) -> None:
        if self.chain is not None:
            self.chain.taint = self.chain.taint or reason

    def _use(self, ref: str) -> None:
        self.records += 1
        if self.chain is None:
            self._chain(ref)

    # ------------------------------------------------------------------ records
    def record(self, obj: Any, ref: str) -> None:
        if not isinstance(obj, dict):
            raise ValidationError("record is not a JSON object", code="bad_record")
        rtype = obj.get("type")
        if rtype in _ROLLOUT_TYPES and not isinstance(obj.get("payload"), dict):
            raise ValidationError(f"{rtype} record has no payload object", code="bad_record")
        payload = as_dict(obj.get("payload"))
        if rtype == "session_meta":
            self.flush()
            self._session_meta(payload, ref)
        elif rtype == "turn_context":
            self.flush()
            self.model = payload.get("model") if isinstance(payload.get("model"), str) else self.model
            mode = as_dict(as_dict(payload.get("collaboration_mode")).get("settings"))
            effort = payload.get("effort") or mode.get("reasoning_effort")
            self.effort = effort if isinstance(effort, str) else self.effort
            self._use(ref)
        elif rtype == "response_item":
            self._response_item(payload, ref)
        elif rtype == "compacted":
            self.flush()
            self._compacted(payload, ref)
        elif rtype == "event_msg":
            self._event(payload, ref)
        elif rtype in _ACCOUNTING_TYPES:
            self.skips.add(f"non_message_record:{rtype}", ref)
        else:
            # A record kind this reader does not know (messages between agents, a world state) may have been part
            # of what the model was sent next: what follows is not exact.
            self.flush()
            self.skips.add(f"unsupported_rollout_record:{rtype}", ref)
            self.taint(f"unsupported record {rtype} at {ref}")

    def _session_meta(self, payload: dict[str, Any], ref: str) -> None:
        first = self.chain is None
        if first:
            self.session = payload
        chain = self._chain(ref)
        self.records += 1
        instructions = payload.get("base_instructions")
        text = instructions.get("text") if isinstance(instructions, dict) else instructions
        if first and isinstance(text, str) and text:
            chain.append(
                PartsMessage(
                    parts=(TextPart(text=text),),
                    role_hint_for_llm="system",
                    policy="system",
                    metadata={"codex_item": "base_instructions"},
                ),
                Origin.CONTEXT,
            )
            self.system_nodes = 1
        base = payload.get("history_base")
        if first and base is not None:
            # A fork (Codex 0.154 on) holds none of the history it inherited: the model was sent another rollout's
            # first records before this file's, so no reply here is in a context this file holds.
            source = as_dict(base).get("thread_id")
            self.taint(f"history inherited from rollout {source or '?'} (session_meta history_base) is not in the file")

    def _response_item(self, item: dict[str, Any], ref: str) -> None:
        itype = item.get("type")
        if itype in _MODEL_ITEMS or (itype == "message" and item.get("role") == "assistant"):
            if not self.pending:
                self._check_user_input()
            self.pending.append((item, ref))
            return
        if itype in _NOT_SENT_ITEMS:
            self.skips.add(f"non_message_record:{itype}", ref)
            return
        self.flush()
        chain = self._chain(ref)
        if itype == "message":
            message = _input_message(item)
            self.user_items += _is_user_turn(message)
            chain.append(message, Origin.CONTEXT)
        elif itype in _OUTPUT_ITEMS:
            chain.append(self._result(item), Origin.CONTEXT)
        elif itype == "compaction":
            chain.append(_compaction_item(item), Origin.INJECTED)
        else:
            # An item this reader does not know may have been part of the model's input: what follows is not exact.
            self.skips.add(f"unsupported_response_item:{itype}", ref)
            self.taint(f"unsupported item {itype} at {ref}")
            return
        self.records += 1

    def _event(self, payload: dict[str, Any], ref: str) -> None:
        etype = payload.get("type")
        if etype == "token_count" and isinstance(payload.get("info"), dict) and self.pending:
            self.flush(usage=payload["info"].get("last_token_usage"))
            self.records += 1
            return
        if etype == "thread_rolled_back" and isinstance(payload.get("num_turns"), int) and self.chain is not None:
            self.flush()
            self._rollback(payload["num_turns"])
            self.records += 1
            return
        if etype in _TURN_EDGES:
            # A response never spans a turn's edge: without a token_count event after it (rollouts that keep only
            # some records), the next turn's reply would be read as more of the same response.
            self.flush()
        if etype == "user_message" and _typed_by_user(payload):
            self.user_events.append(ref)
        self.skips.add("non_message_record:event_msg", ref)

    def _check_user_input(self) -> None:
        """Before a model response: every user turn the UI logged must be in the history as the item Codex sent.

        Codex records what the user typed twice, as the ``user`` message item of the history it sends and as a
        ``user_message`` event for the UI, and rebuilds history from the items alone. A turn logged only as the
        event (a rollout cut down to some records) was sent in a form the rollout does not hold: the replies from
        there on were sampled in a context it does not hold.
        """
        if len(self.user_events) > self.user_items:
            missing = self.user_events[self.user_items]
            self.taint(f"user turn at {missing} logged only as a user_message event, not as the item sent")
        self.user_events, self.user_items = [], 0

    def _rollback(self, num_turns: int) -> None:
        assert self.chain is not None and self.graph is not None
        starts = [i for i, nid in enumerate(self.chain.path) if _is_user_turn(self.graph.nodes[nid].message)]
        if num_turns <= 0 or not starts:
            return
        keep = starts[-num_turns] if num_turns <= len(starts) else starts[0]
        self.chain.rewind(keep)

    def _compacted(self, payload: dict[str, Any], ref: str) -> None:
        chain = self._chain(ref)
        assert self.graph is not None
        history = payload.get("replacement_history")
        new: list[tuple[AnyMessage, Origin]] = []
        if isinstance(history, list):
            group: list[tuple[dict[str, Any], str]] = []
            for k, item in enumerate(history):
                if not isinstance(item, dict):
                    raise ValidationError(f"replacement_history[{k}] is not an object", code="bad_record")
                itype = item.get("type")
                if itype in _MODEL_ITEMS or (itype == "message" and item.get("role") == "assistant"):
                    group.append((item, f"{ref} replacement_history[{k}]"))
                    continue
                if group:
                    new.append((self._assistant(group)[0], Origin.CARRIED))
                    group = []
                if itype == "message":
                    new.append((_input_message(item), Origin.CONTEXT))
                elif itype in _OUTPUT_ITEMS:
                    new.append((self._result(item), Origin.CONTEXT))
                elif itype == "compaction":
                    new.append((_compaction_item(item), Origin.INJECTED))
            if group:
                new.append((self._assistant(group)[0], Origin.CARRIED))
            chain.replace(self.system_nodes, new)
            chain.taint = None  # the replacement history is the complete new context
            self.user_events, self.user_items = [], 0
        else:
            users = [
                (self.graph.nodes[nid].message, Origin.CONTEXT)
                for nid in chain.path[self.system_nodes :]
                if _is_user_turn(self.graph.nodes[nid].message)
            ]
            summary = str(payload.get("message") or "")
            note = PartsMessage(
                parts=(TextPart(text=summary),),
                role_hint_for_llm="user",
                policy="user",
                metadata={"codex_item": "compaction_summary"},
            )
            chain.replace(self.system_nodes, [*users, (note, Origin.INJECTED)])
            chain.taint = "compaction rebuilt without replacement history"
        self.records += 1

    # ------------------------------------------------------------------ messages
    def flush(self, usage: Any = None) -> None:
        if not self.pending:
            return
        group, self.pending = self.pending, []
        chain = self._chain(group[0][1])
        message, hosted = self._assistant(group, usage)
        origin = Origin.CARRIED if hosted else Origin.SAMPLED
        sampling = {"reasoning_effort": self.effort} if self.effort else {}
        generation = Generation(model=self.model, sampling=sampling) if self.model or sampling else None
        chain.append(message, origin, generation)
        self.records += len(group)

    def _assistant(self, group: list[tuple[dict[str, Any], str]], usage: Any = None) -> tuple[AnyMessage, bool]:
        """One model response from its items; also says whether it used a hosted tool mid-response."""
        parts: list[Part] = []
        calls: list[OptionCallPayload] = []
        summaries: list[str] = []
        hosted: list[str] = []
        phases: list[str] = []
        for item, ref in group:
            itype = item.get("type")
            if itype == "reasoning":
                summaries.extend(str(s.get("text", "")) for s in item.get("summary") or [] if isinstance(s, dict))
                raw = [str(c.get("text", "")) for c in item.get("content") or [] if isinstance(c, dict)]
                if raw:
                    parts.append(ReasoningPart(text="\n".join(raw)))
                elif item.get("encrypted_content") or item.get("summary"):
                    parts.append(ReasoningPart(text="", signature=item.get("encrypted_content"), redacted=True))
            elif itype == "message":
                if isinstance(item.get("phase"), str):
                    phases.append(item["phase"])
                for c in item.get("content") or []:
                    if isinstance(c, dict) and c.get("type") in ("output_text", "text", "refusal"):
                        parts.append(TextPart(text=str(c.get("text", c.get("refusal", "")))))
            elif itype == "function_call":
                args, raw_args = parse_arguments(item.get("arguments"))
                calls.append(self._call(item, ref, str(item.get("name") or ""), args, raw_args))
            elif itype == "custom_tool_call":
                args, raw_args = parse_arguments(item.get("input"))
                raw_args = item.get("input") if isinstance(item.get("input"), str) else raw_args
                calls.append(self._call(item, ref, str(item.get("name") or ""), args, raw_args))
            elif itype == "local_shell_call":
                action = as_dict(item.get("action"))
                calls.append(self._call(item, ref, "local_shell", action, None))
            else:  # hosted tools and other API-side calls: no result comes back into the history
                hosted.append(str(itype))
                action = as_dict(item.get("action"))
                name = "web_search" if itype == "web_search_call" else str(itype).removesuffix("_call")
                calls.append(self._call(item, ref, name, action, None))
        meta: dict[str, Any] = {}
        if summaries:
            meta["reasoning_summary"] = summaries
        if phases:
            meta["phase"] = phases[-1]
        if usage is not None:
            meta["usage"] = usage
        if hosted:
            meta["hosted_tools"] = hosted
        message: AnyMessage
        if calls:
            message = OptionCallMessage(
                parts=tuple(parts), calls=tuple(calls), policy=POLICY, role_hint_for_llm="assistant", metadata=meta
            )
        else:
            message = PartsMessage(parts=tuple(parts), policy=POLICY, role_hint_for_llm="assistant", metadata=meta)
        return message, bool(hosted)

    def _call(
        self, item: dict[str, Any], ref: str, name: str, args: dict[str, Any], raw: str | None
    ) -> OptionCallPayload:
        call_id = item.get("call_id") or item.get("id")
        if not isinstance(call_id, str) or not call_id:
            if item.get("type") in _HOSTED_ITEMS:
                call_id = synthetic_call_id(self.path.name, ref, name)
            else:
                raise ValidationError(
                    f"{item.get('type')} has no call_id",
                    code="bad_tool_call",
                    hint="every function_call item carries a call_id",
                )
        if not name:
            raise ValidationError(f"{item.get('type')} has no name", code="bad_tool_call")
        self.call_names[call_id] = name
        return OptionCallPayload(invocation_id=call_id, option_name=name, arguments=args, raw_arguments=raw)

    def _result(self, item: dict[str, Any]) -> OptionResultMessage:
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or call_id not in self.call_names:
            raise ValidationError(
                f"{item.get('type')} answers no earlier call ({call_id})",
                code="unpaired_result",
                hint="the call item must come before its output in the rollout",
            )
        output = item.get("output")
        is_error = False
        if isinstance(output, dict):
            # Older rollouts: {"content": ..., "success": bool}
            is_error = output.get("success") is False
            output = output.get("content", output)
        text = text_of_blocks(output) if isinstance(output, list) else None
        if isinstance(output, list) and text is None:
            joined = [str(c.get("text")) for c in output if isinstance(c, dict) and c.get("type") == "input_text"]
            text = "\n".join(joined) if len(joined) == len(output) else None
        return OptionResultMessage(
            result=OptionResultPayload(
                invocation_id=call_id,
                option_name=self.call_names[call_id],
                result=text if text is not None else output,
                is_error=is_error,
            ),
            policy=RUNTIME_POLICY,
            role_hint_for_llm="tool",
        )

    def finish(self) -> Iterator[ReadEvent]:
        self.flush()
        if self.graph is not None and self.graph.nodes:
            mark_unlogged_context(
                self.graph, "Codex rollouts log no tool schemas (and base instructions only at times)"
            )
            if not self.system_nodes:
                # Developer messages are not the instructions Codex sends with every request (its request's
                # ``instructions``): without base_instructions the system prompt is missing, whatever else is logged.
                why = "the rollout's session_meta logs no base_instructions: the instructions Codex sent are not in it"
                mark_context_incomplete(self.graph, ["system_prompt"], why)
            yield ReadGraph(self.graph, SourceRef(str(self.path), self.first_ref), records=self.records)
        elif self.records:
            self.skips.add("empty_session", self.first_ref, self.records)
        yield from self.skips.events()


def _input_message(item: dict[str, Any]) -> PartsMessage:
    role = item.get("role")
    if role not in ("user", "developer", "system"):
        raise ValidationError(
            f"message item has unknown role {role!r}",
            code="unknown_role",
            hint="rollout messages are user, developer, system or assistant",
        )
    parts: list[Part] = []
    content = item.get("content")
    for k, c in enumerate(content if isinstance(content, list) else [{"type": "input_text", "text": content}]):
        if not isinstance(c, dict):
            raise ValidationError(f"content[{k}] is not an object", code="bad_content")
        ctype = c.get("type")
        if ctype in ("input_text", "text", "output_text"):
            parts.append(TextPart(text=str(c.get("text", ""))))
        elif ctype == "input_image":
            url = c.get("image_url") or c.get("file_id")
            if not isinstance(url, str) or not url:
                raise ValidationError(f"content[{k}] input_image has no image_url", code="bad_content")
            parts.append(MediaPart(modality="image", url=url))
        elif ctype == "input_file":
            url = c.get("file_url") or c.get("file_id") or c.get("filename")
            if not isinstance(url, str) or not url:
                raise ValidationError(f"content[{k}] input_file has no reference", code="bad_content")
            parts.append(MediaPart(modality="document", url=url))
        else:
            raise ValidationError(
                f"content[{k}] has unknown type {ctype!r}",
                code="bad_content",
                hint="supported: input_text, input_image, input_file",
            )
    if role == "user":
        return PartsMessage(parts=tuple(parts), role_hint_for_llm="user", policy="user")
    return PartsMessage(
        parts=tuple(parts),
        role_hint_for_llm="system",
        policy="system",
        metadata={"openai_role": role} if role == "developer" else {},
    )


def _compaction_item(item: dict[str, Any]) -> PartsMessage:
    """The opaque summary item remote compaction leaves in history: kept as a redacted reference, never text."""
    return PartsMessage(
        parts=(ReasoningPart(text="", signature=item.get("encrypted_content"), redacted=True),),
        role_hint_for_llm="user",
        policy="user",
        metadata={"codex_item": "compaction"},
    )


def _typed_by_user(event: dict[str, Any]) -> bool:
    """Whether a ``user_message`` event is a prompt the user typed: older Codex also logged the context messages
    it adds (``kind`` ``user_instructions`` / ``environment_context``) as such events."""
    if event.get("kind") not in (None, "plain", "user"):
        return False
    message = event.get("message")
    return not (isinstance(message, str) and message.lstrip().startswith(_CONTEXTUAL_PREFIXES))


def _is_user_turn(message: AnyMessage) -> bool:
    if not isinstance(message, PartsMessage) or message.role != "user" or message.metadata.get("codex_item"):
        return False
    text = message.text.lstrip()
    return not text.startswith(_CONTEXTUAL_PREFIXES)


READER = CodexReader()
