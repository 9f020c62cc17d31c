"""smolagents memory steps with their model inputs: ``agent.memory.get_full_steps()`` (or ``ActionStep.dict()`` /
``PlanningStep.dict()`` records) saved as a JSON list, JSONL, or an object with a ``steps`` list.

What is read:
- Every step that logs both ``model_input_messages`` and ``model_output_message`` is one model call (action steps
  and planning steps alike): its input messages, as smolagents' model classes send them, are the context, and its
  output message is ``sampled`` in exactly that context (:mod:`msgtrain.ingest.common.call_log`). Assistant messages of
  an input are the agent's rendering of earlier outputs, which their own steps log: context, not turns. Calls of one
  run share their history's nodes; the calls of a file are joined into conversations where a call re-sends an
  earlier call's messages and then its output as smolagents rewrites it (:mod:`msgtrain.ingest.common.call_log`,
  ``rewritten_replies``).
- "As the model classes send them": ``get_clean_message_list`` with ``tool_role_conversions`` — ``tool-call``
  messages become ``assistant`` and ``tool-response`` messages ``user``, and consecutive messages of one role are
  merged, text parts joined with a newline.
- The output message's ``tool_calls`` (``{id, type, function: {name, arguments}}``) are the reply's calls;
  ``token_usage.input_tokens`` stays on the reply (``metadata["usage"]``).

Skipped: steps without model inputs (``TaskStep``, ``SystemPromptStep``, final-answer steps; ``non_model_step``).

Context completeness: a tool-calling agent sends its tools' JSON schemas with each call, and the steps do not log
them: a run whose replies call tools natively is marked context-incomplete (``tools``). A code agent describes its
tools in the system prompt, which the inputs hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.call_log import Call, CallLogGroups
from msgtrain.ingest.common.conversation_files import Step, iter_call_records, iter_raw_records
from msgtrain.ingest.formats import Marks, ReadEvent, ReadGraph, ReadReject, ReadSkip, excerpt, head_shape, quoted
from msgtrain.model.completeness import mark_context_incomplete
from msgtrain.model.graph import Origin
from msgtrain.model.message import OptionCallMessage
from msgtrain.model.openai import from_openai_message, from_openai_messages

POLICY = "smolagents"
# smolagents.models.tool_role_conversions
_ROLE_CONVERSIONS = {"tool-call": "assistant", "tool-response": "user"}
_ROLES = frozenset({"system", "user", "assistant", "tool-call", "tool-response"})


class SmolagentsReader:
    name = "smolagents"
    description = "smolagents memory steps with model_input_messages / model_output_message (get_full_steps)"
    example = "sample_logs/smolagents/steps.json"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=quoted(["model_input_messages"]))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        shape = head_shape(head)
        return shape.has(".model_input_messages[].role") or shape.has(".steps[].model_input_messages[].role")

    def read(self, path: Path) -> Iterator[ReadEvent]:
        # smolagents renders each output into the next call's messages (joined with the observation's text): a
        # re-sent reply is not the reply as sampled
        groups = CallLogGroups(path, metadata={"source_format": self.name}, rewritten_replies=True)
        skipped = 0
        first_skip = None
        native_calls = False
        for ref, value, raw in iter_call_records(path, _steps(iter_raw_records(path))):
            if isinstance(value, MsgtrainError):
                yield ReadReject(ref, value, excerpt(raw))
                continue
            if (
                not isinstance(value, dict)
                or not value.get("model_input_messages")
                or not value.get("model_output_message")
            ):
                skipped += 1
                first_skip = first_skip or ref
                continue
            try:
                call = _call(value)
                native_calls = native_calls or any(isinstance(s.message, OptionCallMessage) for s in call.samples)
                groups.add(call, ref, policy=POLICY, extras={})
            except MsgtrainError as e:
                yield ReadReject(ref, e.located(str(ref)), excerpt(raw))
        for event in groups.events():
            if native_calls and isinstance(event, ReadGraph):
                mark_context_incomplete(event.graph, ["tools"], "a tool-calling agent's tool schemas are not logged")
            yield event
        if skipped and first_skip is not None:
            yield ReadSkip(first_skip, "non_model_step", skipped)


def _steps(records: Iterator[Any]) -> Iterator[Any]:
    """The step records: a document ``{"steps": [...]}`` is read as its list of steps."""
    for rec in records:
        if rec.ref.record == "file" and isinstance(rec.value, dict) and isinstance(rec.value.get("steps"), list):
            rec.value = rec.value["steps"]
        yield rec


def _call(step: dict[str, Any]) -> Call:
    messages = _clean(step["model_input_messages"])
    context = from_openai_messages(messages)
    names = {c.invocation_id: c.option_name for m in context if isinstance(m, OptionCallMessage) for c in m.calls}
    out = step["model_output_message"]
    if not isinstance(out, dict):
        raise ValidationError("model_output_message is not an object", code="bad_record")
    reply: dict[str, Any] = {"role": "assistant", "content": _text_content(out.get("content"))}
    if out.get("tool_calls"):
        reply["tool_calls"] = out["tool_calls"]
    msg = from_openai_message(reply, call_names=names)
    usage = step.get("token_usage")
    if isinstance(usage, dict):
        msg = msg.model_copy(update={"metadata": {**msg.metadata, "usage": usage}})
    # Every model call of a run is a step of its own: an assistant message in a later input is the agent's rendering
    # of an earlier, logged output (merged with its "Calling tools" note), not a turn the log lacks.
    return Call([Step(m, origin=Origin.CONTEXT, index=i) for i, m in enumerate(context)], [Step(msg)])


def _clean(raw: Any) -> list[dict[str, Any]]:
    """smolagents' ``get_clean_message_list(messages, role_conversions=tool_role_conversions)``."""
    if not isinstance(raw, list):
        raise ValidationError("model_input_messages is not a list", code="bad_record")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(raw):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _ROLES:
            raise ValidationError(
                f"unknown smolagents role {role!r}",
                where=f"model_input_messages[{i}]",
                code="unknown_role",
                hint="smolagents roles: system, user, assistant, tool-call, tool-response",
            )
        role = _ROLE_CONVERSIONS.get(role, role)
        content = message.get("content")
        parts = (
            [dict(p) for p in content] if isinstance(content, list) else [{"type": "text", "text": str(content or "")}]
        )
        if out and out[-1]["role"] == role:
            for part in parts:
                last = out[-1]["content"][-1] if out[-1]["content"] else None
                if part.get("type") == "text" and last is not None and last.get("type") == "text":
                    last["text"] += "\n" + str(part.get("text", ""))
                else:
                    out[-1]["content"].append(part)
        else:
            out.append({"role": role, "content": parts})
    return out


def _text_content(content: Any) -> Any:
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    return content


READER = SmolagentsReader()
