"""One normaliser from the message shapes log writers use to OpenAI chat message dicts.

Readers of formats that store chat messages in their own dialect (role names, content keys, tool-call shapes)
use :class:`MessageNormaliser` instead of growing their own tables. What a message is and which role it has is
:mod:`msgtrain.ingest.common.message_like`; the pieces of its content (parts, calls, results in each dialect) are
:mod:`msgtrain.ingest.common.content_parts`; here they are assembled, one conversation at a time:

- **Tool calls and results** in the OpenAI shape (``tool_calls``, legacy ``function_call``, ``tool``/``function``
  messages), the Anthropic shape (``tool_use`` / ``tool_result`` / ``thinking`` blocks; Letta's ``reasoning``
  blocks; goose's ``toolRequest`` / ``toolResponse``) and the Gemini shape (``functionCall`` /
  ``functionResponse`` / ``thought`` parts), and bare ``{"name", "arguments"}`` calls.
- **Model calls folded into one message's text**: Open WebUI's ``<details type="reasoning" | "tool_calls">``
  markup in an assistant message's content is read back into the assistant messages and results it stands for
  (:mod:`msgtrain.ingest.common.details_markup`), never trained as text.
- **Role-labelled transcripts** (Anthropic's legacy ``Human:`` / ``Assistant:`` prompt text) as messages.

Invariants:
- Nothing is invented: argument strings are kept verbatim, ids the log gave are kept; a synthetic id
  (``call_<message>_<k>``) is made only for a call the log wrote without one.
- A result is paired with a call only when the log says which: its own id, else the oldest open call of its
  name, else the oldest open call (results written in call order, as ShareGPT and Gemini write them). A result
  that answers no open call is an ``unpaired_result`` error, never attached to a guess; except a tool message
  without an id right after a reply that wrote its calls as text (Hermes' ``<tool_call>``, no structured call
  logged): the result of those calls, kept as the tool's text with nothing to pair (:meth:`_text_call_result`).
- A role outside the vocabulary is never guessed (``unknown_role``).
- Errors are :class:`~msgtrain.errors.ValidationError` located at the message's JSON path (``where``).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.content_parts import (
    CONTENT_HINT,
    NO_OUTPUT,
    REASONING_BLOCKS,
    REDACTED_BLOCKS,
    UI_ONLY_PARTS,
    block_result,
    block_text,
    content_part,
    content_value,
    converse_block,
    first_present,
    goose_call,
    goose_result,
    haystack_reasoning,
    is_ui_steps,
    json_call,
    kernel_items,
    parse_json_field,
    reasoning_text,
    rendered_template_text,
    sdk_call,
    sdk_result,
    split_parallel_results,
    text_calls,
    ui_tool,
)
from msgtrain.ingest.common.details_markup import DetailsStep, details_steps
from msgtrain.ingest.common.message_like import (
    CALL_KEYS,
    CONTENT_KEYS,
    OBSERVATION_INPUTS,
    ROLE_FLAGS,
    ROLE_KEYS,
    ROLE_VOCABULARY,
    SHAPED_ROLES,
    UNLOGGED_INPUT,
    attached_files,
    canonical_role,
    history_copy,
    message_weight,
    role_of,
    unwrapped,
)
from msgtrain.ingest.common.pydantic_ai_messages import INSTRUCTIONS_MARK, is_pydantic_ai_message, pydantic_ai_messages
from msgtrain.ingest.common.turn_pieces import is_turn_piece, piece_message
from msgtrain.model.openai import REDACTED_REASONING, RESULT_ERROR, TEXT_CALL_RESULT

_RESULT_IDS = ("tool_call_id", "tool_use_id", "toolCallId")
_NO_ROLE = object()  # a message that logs no role (asking whether it is a result is no error)


@dataclass
class MessageNormaliser:
    """Turns message-like objects of one conversation into OpenAI chat dicts, pairing results with calls.

    ``roles`` maps extra logged role values to canonical roles (see :func:`canonical_role`); ``role_key`` and
    ``content_key`` force the keys to read (a user's mapping), else the first present of :data:`ROLE_KEYS` /
    :data:`CONTENT_KEYS` is read."""

    roles: dict[str, str] | None = None
    role_key: str | None = None
    content_key: str | None = None
    open_calls: list[tuple[str, str]] = field(default_factory=list)  # (id, name) not answered yet, oldest first
    names: set[str] = field(default_factory=set)  # speaker names seen on assistant messages
    thought: list[str] = field(default_factory=list)  # reasoning logged apart, for the next assistant message
    instructions: str | None = None  # pydantic-ai: the instructions the conversation's requests carry
    position: int = 0  # logged messages read so far: the next one's index in its conversation (synthetic call ids)
    turn_calls: list[str] = field(default_factory=list)  # the ids of the calls the latest calling message made
    user_calls: set[str] = field(default_factory=set)  # open calls the user side made (see _user_calls)
    user_tool_messages: int = 0  # the user side's calls and results, left out of the policy's context
    text_called: bool = False  # the latest reply wrote its calls as text, none structured (see _text_call_result)

    def fork(self) -> MessageNormaliser:
        """A normaliser for a branch that continues this one's conversation (a tree's child, a sibling reply): the
        same keys and roles, a copy of the open calls and of the position; speaker names are the branch's own."""
        return MessageNormaliser(
            roles=self.roles,
            role_key=self.role_key,
            content_key=self.content_key,
            open_calls=list(self.open_calls),
            position=self.position,
            turn_calls=list(self.turn_calls),
            user_calls=set(self.user_calls),
            text_called=self.text_called,
        )

    def normalise(self, raw: Any, where: str, *, results_follow: bool | None = None) -> list[dict[str, Any]]:
        """One logged message → one or more OpenAI chat dicts (an Anthropic user turn holding ``tool_result``
        blocks, or a Gemini one holding ``functionResponse`` parts, becomes its results then its text).

        ``results_follow`` says whether the next logged message is a tool result too (None: not known), which
        decides how one result answering several parallel calls is read (:meth:`_parallel_results`)."""
        index, self.position = self.position, self.position + 1
        out = self._normalise(raw, where, index, results_follow)
        # only a step logged with an observation carries them: any other message is not unwrapped a second time
        inputs = unwrapped(raw).get(OBSERVATION_INPUTS) if isinstance(raw, dict) and "observation" in raw else None
        if isinstance(inputs, list):  # what the harness sent after this message (an ATIF step's observation)
            out += [{"role": "user", "content": text} for text in inputs]
        return out

    def is_result(self, raw: Any) -> bool:
        """Whether the logged message ``raw`` is a tool result by its role (what ``results_follow`` asks)."""
        if not isinstance(raw, dict):
            return False
        logged = self._role_value(unwrapped(raw))
        return logged is not _NO_ROLE and canonical_role(logged, self.roles) == "tool"

    def _normalise(self, raw: Any, where: str, index: int, results_follow: bool | None) -> list[dict[str, Any]]:
        if not isinstance(raw, dict):
            raise ValidationError(f"message is a {type(raw).__name__}, not an object", where=where, code="bad_message")
        obj = unwrapped(raw)
        if obj.get(UNLOGGED_INPUT):
            raise ValidationError(
                f"the {obj[UNLOGGED_INPUT]} ({str(obj.get('content'))[:60]!r}) stands for an input the harness sent "
                "whose text the log does not hold",
                where=where,
                code="unlogged_input",
                hint="the replies before it are trained; the ones after it were sampled after that text and are kept "
                "as context only (log the messages the model was sent to train them)",
            )
        if is_turn_piece(obj) and not self.role_key:  # a Responses item, an Open Interpreter message
            piece = piece_message(obj)
            if piece is None:
                return []  # never sent to the model
            obj = piece
        if is_pydantic_ai_message(obj) and not self.role_key:
            return self._pydantic_ai(obj, where, index)
        logged = self._logged_role(obj, where)
        role = canonical_role(logged, self.roles)
        if role is None:
            raise ValidationError(
                f"role {json.dumps(logged, default=str)} is not a role msgtrain knows",
                where=where,
                code="unknown_role",
                hint="which side spoke is ambiguous; map it with --map (roles: {VALUE: user|assistant|system|tool})",
            )
        content = kernel_items(obj.get(self.content_key) if self.content_key else first_present(obj, CONTENT_KEYS))
        if not self.content_key and is_ui_steps(obj.get("parts")):
            content = obj["parts"]  # AI SDK 4 keeps the text in content too, the calls only in parts
        role = self._shaped_role(logged, role, obj, content, where)
        if role not in ("tool", "thought"):
            self.text_called = False
        if role == "thought":
            self.thought.append(content if isinstance(content, str) else block_text(content, where))
            return []
        if self.thought and role not in ("assistant", "call"):
            raise ValidationError(
                "a reasoning message is not followed by the assistant message it belongs to",
                where=where,
                code="ambiguous_structure",
            )
        if role == "assistant" and is_ui_steps(content):
            return self._ui_steps(content, where)
        folded = details_steps(content, where) if role == "assistant" and isinstance(content, str) else None
        if folded is not None:  # Open WebUI's <details> markup: the model calls one message stands for
            return self._details_steps(obj, folded, where)
        if role in ("assistant", "call"):
            name = obj.get("name")
            if isinstance(name, str) and name:
                self.names.add(name)
            reply = self._assistant(obj, content, role == "call", where)
            self.text_called = not reply.get("tool_calls") and text_calls(reply["content"])
            return [reply]
        if role == "tool":
            if self.text_called and not self.open_calls and not any(obj.get(k) for k in (*_RESULT_IDS, "id")):
                return [self._text_call_result(obj, content)]
            results = [sdk_result(b) for b in content] if isinstance(content, list) and content else []
            if results and all(r is not None for r in results):  # one message answering several calls
                return [d for r in results if r is not None for d in self._result(r[0], r[1], r[2], where)]
            parallel = self._parallel_results(obj, content, where, results_follow)
            return parallel if parallel is not None else self._tool_message(obj, content, where)
        if role == "user" and any(obj.get(k) for k in CALL_KEYS):
            self._user_calls(obj, where, index)
            if content in (None, "", []):
                self.user_tool_messages += 1
                return []  # a message of nothing but the user side's calls: nothing the policy saw
        return self._input(obj, role, content, where)

    def _user_calls(self, obj: dict[str, Any], where: str, index: int) -> None:
        """Tool calls in a user message: the other side's (tau2-bench's user simulator calls its own tools). No
        chat API takes calls in a user message, so the policy never saw them, nor their results: both are left out
        of its context (counted, ``user_tool_messages``), and the results still pair with them, so they are
        neither rejected as unpaired nor taken as answers to the policy's own calls. The user's text beside them is
        kept."""
        for key in CALL_KEYS:
            value = obj.get(key)
            for k, call in enumerate(value if isinstance(value, list) else [value] if isinstance(value, dict) else []):
                self.user_calls.add(self._call(call, where, k, index)["id"])
        self.turn_calls = []

    def _shaped_role(self, logged: Any, role: str, obj: dict[str, Any], content: Any, where: str) -> str:
        """The role of a :data:`SHAPED_ROLES` value, by what the message holds: a call (structured, or JSON text
        naming one) or a result answering an open call read as such, plain text as its text role."""
        key = logged.strip().lower() if isinstance(logged, str) else None
        if key not in SHAPED_ROLES or (self.roles and canonical_role(logged, self.roles) != ROLE_VOCABULARY[key]):
            return role  # not a shaped role, or a mapping said what it is
        structured, text = SHAPED_ROLES[key]
        if structured == "call":
            if any(obj.get(k) for k in CALL_KEYS):
                return "assistant"  # an assistant message whose calls are under their own key
            holds = json_call(content)
        else:
            holds = any(obj.get(k) for k in _RESULT_IDS) or bool(self.open_calls)
        if holds:
            return structured
        if text is None:
            raise ValidationError(
                f"role {json.dumps(logged)} answers no open tool call here, and is no role msgtrain reads as text",
                where=where,
                code="unknown_role",
                hint="map it with --map (roles: {VALUE: user|assistant|system|tool})",
            )
        return text

    def _pydantic_ai(self, obj: dict[str, Any], where: str, index: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message in pydantic_ai_messages(obj, where):
            if message.pop(INSTRUCTIONS_MARK, False):
                if self.instructions == message["content"]:
                    continue  # every request repeats them: sent once, as the system prompt
                if self.instructions is not None:
                    raise ValidationError(
                        "the instructions differ from an earlier request's: which system prompt each reply was "
                        "sampled after is ambiguous",
                        where=where,
                        code="ambiguous_structure",
                        hint="split the conversation where the instructions change",
                    )
                self.instructions = message["content"]
            out.extend(self._normalise(message, where, index, None))
        return out

    def _logged_role(self, obj: dict[str, Any], where: str) -> Any:
        value = self._role_value(obj)
        if value is not _NO_ROLE:
            return value
        if self.role_key:
            raise ValidationError(f"message has no {self.role_key!r}", where=where, code="bad_message")
        raise ValidationError(
            "message has no role-like key",
            where=where,
            code="bad_message",
            hint=f"messages need one of {', '.join(ROLE_KEYS)}",
        )

    def _role_value(self, obj: dict[str, Any]) -> Any:
        """The role value ``obj`` logs (under the forced key, or the first role-like one), or :data:`_NO_ROLE`."""
        if self.role_key:
            value = obj.get(self.role_key)
            if value is None:
                return _NO_ROLE
            if self.role_key in ROLE_FLAGS and isinstance(value, bool):
                return ROLE_FLAGS[self.role_key][0 if value else 1]
            return value
        hit = role_of(obj)
        return _NO_ROLE if hit is None else hit[1]

    # ---------------------------------------------------------------- assistant turns

    def _assistant(self, obj: dict[str, Any], content: Any, calls_only: bool, where: str) -> dict[str, Any]:
        parts: list[Any] = []
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        index = self.position - 1
        if calls_only:  # ShareGPT function_call: the value is the call (or a list of calls) as JSON
            value = parse_json_field(content, what="function_call value", where=where)
            for call in value if isinstance(value, list) else [value]:
                calls.append(self._call(call, where, len(calls), index))
        else:
            self._assistant_content(content, parts, reasoning, calls, where)
        for key in ("tool_calls", "function_call", "toolCalls"):  # toolCalls: camelCase writers (Continue)
            value = obj.get(key)
            if value:
                # OpenAI's legacy function_call has no id: function_call_<i>, as the openai_chat reader names it
                legacy = f"function_call_{index}" if key == "function_call" and isinstance(value, dict) else None
                for call in value if isinstance(value, list) else [value]:
                    calls.append(self._call(call, where, len(calls), index, synthetic=legacy))
        if calls:
            self.turn_calls = [c["id"] for c in calls]
        # the reasoning beside the text, or in the message's extras (SillyTavern's ``extra.reasoning``)
        extra = obj["extra"] if isinstance(obj.get("extra"), dict) else {}
        for key in ("reasoning_content", "reasoning", "thinking"):
            value = obj.get(key) or extra.get(key)
            if isinstance(value, str) and value:
                reasoning.insert(0, value)
                break
        # a call-only message's value is its calls, not text the model wrote besides them
        out: dict[str, Any] = {"role": "assistant", "content": None if calls_only else content_value(parts, content)}
        reasoning[:0], self.thought = self.thought, []  # reasoning logged as a message of its own comes first
        if reasoning:
            out["reasoning_content"] = "\n".join(reasoning)
        if calls:
            out["tool_calls"] = calls
        if isinstance(obj.get("name"), str):
            out["name"] = obj["name"]
        if message_weight(obj) is not None:
            out["weight"] = message_weight(obj)
        if history_copy(obj):
            out["weight"] = 0  # re-sent as history: trained in the run that sampled it
        if out["content"] is None and isinstance(obj.get("refusal"), str):
            out["content"] = obj["refusal"]
        return out

    def _assistant_content(
        self, content: Any, parts: list[Any], reasoning: list[str], calls: list[dict[str, Any]], where: str
    ) -> None:
        if content is None or isinstance(content, str):
            return
        if isinstance(content, dict):
            content = [content]
        if not isinstance(content, list):
            raise ValidationError(
                f"content is a {type(content).__name__}", where=where, code="bad_content", hint=CONTENT_HINT
            )
        for j, item in enumerate(content):
            if isinstance(item, str):
                parts.append({"type": "text", "text": item})
                continue
            if not isinstance(item, dict):
                raise ValidationError(f"content[{j}] is not an object", where=where, code="bad_content")
            item = haystack_reasoning(converse_block(item))
            kind = item.get("type")
            gemini_call = item.get("functionCall", item.get("function_call"))
            if kind == "tool_use" or isinstance(gemini_call, dict):
                calls.append(
                    self._call(item if kind == "tool_use" else gemini_call, where, len(calls), self.position - 1)
                )
            elif kind == "tool-call" or (kind is None and isinstance(item.get("tool_call"), dict)):
                calls.append(self._call(sdk_call(item), where, len(calls), self.position - 1))
            elif kind == "toolRequest":
                calls.append(self._call(goose_call(item, j, where), where, len(calls), self.position - 1))
            elif kind == "tool_call" and "value" in item:  # LLaMA-Factory v1: the call as JSON text under "value"
                call = parse_json_field(item["value"], what=f"content[{j}] tool_call value", where=where)
                calls.append(self._call(call, where, len(calls), self.position - 1))
            elif kind in REASONING_BLOCKS or (item.get("thought") is True and isinstance(item.get("text"), str)):
                reasoning.append(reasoning_text(item, j, where))
            elif kind in REDACTED_BLOCKS:  # reasoning the provider keeps encrypted: kept, its payload the signature
                data = item.get("data")
                parts.append(
                    {"type": "reasoning", "text": "", REDACTED_REASONING: True, "signature": data}
                    if isinstance(data, str)
                    else {"type": "reasoning", "text": "", REDACTED_REASONING: True}
                )
            else:
                parts.append(content_part(item, j, where))

    def _ui_steps(self, parts: list[Any], where: str) -> list[dict[str, Any]]:
        """An AI SDK UI message (:func:`is_ui_steps`) as the model messages it stands for, as the SDK's
        ``convertToModelMessages`` makes them: per step (``step-start`` separates them) one assistant message of its
        text, reasoning and calls, then the results of the calls that have an output. Sources and data parts are
        the UI's own, not model output."""
        out: list[dict[str, Any]] = []
        steps: list[list[dict[str, Any]]] = [[]]
        # without step boundaries (LibreChat's agent messages), text or reasoning after a call that ran is the next
        # call's: the model read the output first
        marked = any(isinstance(item, dict) and item.get("type") == "step-start" for item in parts)
        ran = False
        for item in parts:
            if isinstance(item, dict) and item.get("type") == "step-start":
                steps.append([])
            elif isinstance(item, dict) and not str(item.get("type", "")).startswith(UI_ONLY_PARTS):
                tool = ui_tool(item)
                if not marked and tool is None and ran:
                    steps.append([])
                ran = tool is not None and tool[3] is not NO_OUTPUT
                steps[-1].append(item)
        for j, step in enumerate(s for s in steps if s):
            content: list[Any] = []
            results: list[tuple[Any, Any, Any]] = []
            for item in step:
                tool = ui_tool(item)
                if tool is None:
                    content.append(item)
                    continue
                call_id, name, arguments, output = tool
                content.append({"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": arguments})
                if output is not NO_OUTPUT:
                    results.append((call_id, name, output))
            out.append(self._assistant({}, content, False, f"{where} step {j}"))
            out.extend(d for call_id, name, value in results for d in self._result(call_id, name, value, where))
        return out

    def _details_steps(self, obj: dict[str, Any], steps: list[DetailsStep], where: str) -> list[dict[str, Any]]:
        """An assistant message whose text folds its model calls into markup (:mod:`.details_markup`): per call one
        assistant message of its reasoning, text and tool calls, then its calls' results."""
        out: list[dict[str, Any]] = []
        for j, step in enumerate(steps):
            logged: dict[str, Any] = {"tool_calls": step.calls}
            if step.reasoning:
                logged["reasoning_content"] = "\n".join(step.reasoning)
            logged |= {k: v for k, v in obj.items() if k in ("name", "weight", "loss_weight")}  # the message's, all
            out.append(self._assistant(logged, step.text or None, False, f"{where} call {j}"))
            out.extend(d for call_id, name, value in step.results for d in self._result(call_id, name, value, where))
        return out

    def _call(self, call: Any, where: str, k: int, index: int, *, synthetic: str | None = None) -> dict[str, Any]:
        """One call in any shape → an OpenAI ``tool_calls`` entry (arguments kept verbatim when a string). A call
        the log wrote without an id gets ``call_<index>_<k>`` (``index``: its message's place in the conversation),
        as the readers of id-less formats name them, or ``synthetic``."""
        if not isinstance(call, dict):
            raise ValidationError(f"tool call {k} is not an object", where=where, code="bad_tool_call")
        fn = call["function"] if isinstance(call.get("function"), dict) else call
        name = fn.get("name")
        if name is None and isinstance(call.get("function"), str):  # Inspect AI's ToolCall: {id, function, arguments}
            name = call["function"]
        if not isinstance(name, str) or not name:
            raise ValidationError(
                f"tool call {k} has no name",
                where=where,
                code="bad_tool_call",
                hint='a call is {"name": ..., "arguments": {...}} (or OpenAI / Anthropic / Gemini call shapes)',
            )
        arguments: Any = next((fn[a] for a in ("arguments", "args", "input", "parameters") if a in fn), {})
        call_id = call.get("id") or fn.get("id") or call.get("tool_call_id")
        call_id = str(call_id) if call_id else synthetic or f"call_{index}_{k}"
        self.open_calls.append((call_id, name))
        if not isinstance(arguments, str | dict):
            arguments = {"value": arguments}
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}

    # ---------------------------------------------------------------- inputs and results

    def _input(self, obj: dict[str, Any], role: str, content: Any, where: str) -> list[dict[str, Any]]:
        attached = attached_files(obj)
        if attached:
            raise ValidationError(
                f"the {role} message came with {attached} attached file(s) the model was sent beside its text, and "
                "the log does not keep what of them was sent or how it was laid out in the message",
                where=where,
                code="unsupported_content",
                hint="the replies before it are trained; the ones after it saw the files and are kept as context only",
            )
        out: list[dict[str, Any]] = []
        parts: list[Any] = []
        items = content if isinstance(content, list) else ([content] if isinstance(content, dict) else None)
        for j, item in enumerate(items or []):
            if isinstance(item, str):
                parts.append({"type": "text", "text": item})
                continue
            if not isinstance(item, dict):
                raise ValidationError(f"content[{j}] is not an object", where=where, code="bad_content")
            item = converse_block(item)
            answer = item.get("functionResponse", item.get("function_response"))
            if item.get("type") == "toolResponse":
                if parts:
                    out.append({"role": role, "content": parts})
                    parts = []
                out.extend(self._result(item.get("id"), None, block_result(goose_result(item, j, where)), where))
            elif item.get("type") == "tool_result" or isinstance(answer, dict):
                if parts:  # keep order: text before a result stays before it
                    out.append({"role": role, "content": parts})
                    parts = []
                if item.get("type") == "tool_result":
                    # AgentScope's blocks (ToolResultBlock) name their call (``id``) and tool (``name``) and hold
                    # the result under ``output``; Anthropic's give the call's ``tool_use_id`` and ``content``
                    call_id, named = item.get("tool_use_id") or item.get("id"), item.get("name")
                    named = named if isinstance(named, str) else None
                    value = item["content"] if "content" in item else item.get("output")
                    failed = item.get("is_error") is True  # Anthropic's, and a Converse result's status: error
                    out.extend(self._result(call_id, named, block_result(value), where, failed=failed))
                else:
                    assert isinstance(answer, dict)
                    out.extend(self._result(answer.get("id"), answer.get("name"), answer.get("response"), where))
            else:
                parts.append(content_part(item, j, where))
        if items is None:
            if content is not None and not isinstance(content, str):
                raise ValidationError(
                    f"content is a {type(content).__name__}", where=where, code="bad_content", hint=CONTENT_HINT
                )
            marker = rendered_template_text(content) if content else None
            if marker is not None:
                raise ValidationError(
                    f"the {role} text is a prompt a chat template already rendered ({marker!r} around it): read as a "
                    "message it would be rendered twice, a context the model never saw",
                    where=where,
                    code="prerendered_prompt",
                    hint="log the messages the prompt was rendered from, or the engine's prompt token ids",
                )
            message: dict[str, Any] = {"role": role, "content": content if content is not None else ""}
        elif parts or not out:
            message = {"role": role, "content": content_value(parts, content)}
        else:
            return out
        if isinstance(obj.get("name"), str):
            message["name"] = obj["name"]
        return [*out, message]

    def _text_call_result(self, obj: dict[str, Any], content: Any) -> dict[str, Any]:
        """A tool message after a reply that wrote its calls as text (:func:`text_calls`: Hermes' ``<tool_call>``
        markup, no structured call logged), with no call id of its own: the result of those calls, sent back as the
        log holds it. The reply is trained as the text it is; this message is its context, a tool-role message with
        no call to pair (:data:`TEXT_CALL_RESULT`), no id or name invented. Several may follow one reply (one per
        call, or one holding every result, as hermes-agent writes them)."""
        value = block_result(content)
        text = value if isinstance(value, str | list) else json.dumps(value, ensure_ascii=False)
        out: dict[str, Any] = {"role": "tool", "content": text, TEXT_CALL_RESULT: True}
        if isinstance(obj.get("name"), str) and obj["name"]:
            out["name"] = obj["name"]
        return out

    def _tool_message(self, obj: dict[str, Any], content: Any, where: str) -> list[dict[str, Any]]:
        call_id = next((obj[k] for k in (*_RESULT_IDS, "id") if obj.get(k)), None)
        name = obj.get("name")
        if isinstance(content, list) and content and all(isinstance(b, dict) for b in content):
            answers = [b.get("functionResponse") for b in content if isinstance(b.get("functionResponse"), dict)]
            if len(answers) == 1:  # a Gemini "function" turn holding one functionResponse part
                answer = answers[0]
                return self._result(answer.get("id"), answer.get("name"), answer.get("response"), where)
        error = obj.get("error")
        if isinstance(error, dict) and isinstance(error.get("type"), str) and isinstance(error.get("message"), str):
            content = f"Error: {error['message']}"  # Inspect AI's ToolCallError: the text Inspect sends in its place
        return self._result(call_id, name if isinstance(name, str) else None, block_result(content), where)

    def _result(
        self, call_id: Any, name: str | None, value: Any, where: str, *, failed: bool = False
    ) -> list[dict[str, Any]]:
        """The result as an OpenAI tool message answering the open call it pairs with (none: a result of the user
        side's call, :meth:`_user_calls`). It carries a ``name`` only where the log gave the result one: the call's
        name is known from the call, and a template that renders a result's name must not be shown one the log
        never sent. A result the log marks as a failure (``failed``) says so (:data:`RESULT_ERROR`)."""
        pos = self._answered(call_id, name, where)
        found_id, _ = self.open_calls.pop(pos)
        if found_id in self.user_calls:
            self.user_calls.discard(found_id)
            self.user_tool_messages += 1
            return []
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        out: dict[str, Any] = {"role": "tool", "tool_call_id": found_id, "content": text}
        if name:
            out["name"] = name
        if failed:
            out[RESULT_ERROR] = True
        return [out]

    def _parallel_results(
        self, obj: dict[str, Any], content: Any, where: str, results_follow: bool | None
    ) -> list[dict[str, Any]] | None:
        """One tool result, with no id or name of its own, standing alone after a message that made N > 1 calls
        (ShareGPT's and LLaMA-Factory's one observation for parallel calls): the N results, when its text is a
        JSON list of exactly N entries, paired in order (an entry ``{"name", "content"}`` of its call's name
        contributes its ``content``). Any other such result is ambiguous (``ambiguous_results``): which call it
        answers the log does not say. None when the result is not of this kind (it pairs as usual), and when
        whether another result follows is not known."""
        if results_follow is not False or any(obj.get(k) for k in ("tool_call_id", "tool_use_id", "toolCallId", "id")):
            return None
        if isinstance(obj.get("name"), str) and obj["name"]:
            return None
        waiting = [(i, n) for i, n in self.open_calls if i in self.turn_calls and i not in self.user_calls]
        if len(waiting) < 2 or len(waiting) != len(self.turn_calls):
            return None
        entries = split_parallel_results(block_result(content), [n for _, n in waiting], where)
        out: list[dict[str, Any]] = []
        for entry, (call_id, call_name) in zip(entries, waiting, strict=True):
            self.open_calls.remove((call_id, call_name))
            if isinstance(entry, str):
                out.append({"role": "tool", "tool_call_id": call_id, "content": entry})
            else:  # a JSON value, kept as one (its text is what a template renders of it)
                text = json.dumps(entry, ensure_ascii=False)
                out.append({"role": "tool", "tool_call_id": call_id, "content": text, "result": entry})
        self.turn_calls = []
        return out

    def _answered(self, call_id: Any, name: str | None, where: str) -> int:
        """Which open call a result answers (see the module docstring), as its position in ``open_calls``."""
        if call_id:
            for pos, (open_id, _) in enumerate(self.open_calls):
                if open_id == str(call_id):
                    return pos
        elif name:
            for pos, (_, open_name) in enumerate(self.open_calls):
                if open_name == name:
                    return pos
        elif self.open_calls:
            return 0
        said = f"id {call_id!r}" if call_id else (f"name {name!r}" if name else "no id or name")
        raise ValidationError(
            f"tool result ({said}) answers no open tool call",
            where=where,
            code="unpaired_result",
            hint="a tool result must follow the assistant turn that made its call (same id, or the call's name)",
        )


def normalise_messages(
    messages: list[Any], where: str, *, roles: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], list[int]]:
    """A logged message list → (OpenAI chat dicts, the index in ``messages`` each dict came from).

    ``where`` is the list's JSON path (``$.samples[3].messages``); errors name ``where[i]``."""
    norm = MessageNormaliser(roles=roles)
    out: list[dict[str, Any]] = []
    origin: list[int] = []
    for i, raw in enumerate(messages):
        for message in norm.normalise(raw, f"{where}[{i}]"):
            out.append(message)
            origin.append(i)
    return out, origin


# Anthropic's legacy text-completion prompt ("\n\nHuman: ...\n\nAssistant: ..."), which Anthropic/hh-rlhf and the
# datasets built on it write as one string per conversation.
_TRANSCRIPT_TURN = re.compile(r"(?:^|\n\n)(Human|Assistant): ?")
_TRANSCRIPT_ROLES = {"Human": "user", "Assistant": "assistant"}


def parse_transcript(text: str) -> list[dict[str, Any]] | None:
    """A role-labelled text transcript → messages, or None when ``text`` is not one.

    It is one only if it starts with ``Human:`` (after leading blank lines), alternates Human / Assistant and ends
    with an Assistant turn: anything looser is ordinary text that happens to hold the words."""
    stripped = text.lstrip("\n")
    marks = list(_TRANSCRIPT_TURN.finditer(stripped))
    if not marks or marks[0].start() != 0 or marks[0].group(1) != "Human" or marks[-1].group(1) != "Assistant":
        return None
    roles = [m.group(1) for m in marks]
    if any(a == b for a, b in itertools.pairwise(roles)):
        return None
    out: list[dict[str, Any]] = []
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        end = following.start() if following is not None else len(stripped)
        out.append({"role": _TRANSCRIPT_ROLES[mark.group(1)], "content": stripped[mark.end() : end]})
    return out
