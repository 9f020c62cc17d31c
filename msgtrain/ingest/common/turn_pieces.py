"""Messages that are pieces of one model turn: what some writers log as several list entries for one reply.

Two dialects log a reply as a run of typed entries, each one piece of what the model returned:

- **OpenAI Responses items** (``input`` / ``output`` lists, wherever a record keeps them: NeMo Gym's rollouts, agent
  frameworks' saved runs): ``message`` items (a role and ``input_text`` / ``output_text`` parts), ``function_call`` /
  ``custom_tool_call`` items (no role: ``call_id``, ``name``, ``arguments`` or ``input``), their
  ``function_call_output`` / ``custom_tool_call_output`` (``call_id``, ``output``) and ``reasoning`` items.
- **Open Interpreter's LMC messages** (its saved conversations, ``interpreter.messages``): ``{"role": "user" |
  "assistant" | "computer", "type": "message" | "code" | "console", "format", "content"}``. Open Interpreter sends an
  assistant ``code`` entry to a function-calling model as a call of its one tool, ``execute``, with the arguments
  ``{"language": <format>, "code": <content>}`` (``json.dumps`` of them), and the ``computer``'s ``console`` entry of
  format ``output`` as that call's result (``No output`` when it is blank); an entry with a ``recipient`` other than
  the assistant is never sent to the model (OpenInterpreter/open-interpreter
  ``interpreter/core/llm/utils/convert_to_openai_messages.py`` @ dcfcffa9). A ``code`` entry no console output
  follows is sent with an empty result (``""``) right after it (``process_messages`` in
  ``interpreter/core/llm/run_tool_calling_llm.py``, same commit): the model saw that, not a gap.

:func:`piece_message` turns one entry into the chat message it stands for; the normaliser reads that as any other
message. Which pieces form one turn is the step builder's rule (:mod:`msgtrain.ingest.structure.steps`): consecutive
assistant-side pieces are one reply, as one response emits them, except that text after a call starts the next model
call (a response writes its text before its calls; reasoning comes on either side of a call: NeMo Gym's converter
writes a call's reasoning after it, before its output).

Invariants:
- Nothing is invented: ids, argument text and output are kept as logged; the ``execute`` call's argument text is the
  JSON Open Interpreter itself sends; a call logged without an id gets the normaliser's synthetic one.
- A summary of reasoning (a ``reasoning`` item with no ``content`` of its own) was written by a summariser, not
  sampled: it is no part of the reply (as the OpenAI Responses reader keeps it: never trained as text).
"""

from __future__ import annotations

import json
from typing import Any

# Responses item types that stand for a call, a call's output, reasoning.
RESPONSES_CALLS = frozenset({"function_call", "custom_tool_call"})
RESPONSES_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
RESPONSES_REASONING = "reasoning"
# Open Interpreter's message types and its roles (``computer``: the machine that ran the code).
LMC_TYPES = frozenset({"message", "code", "console"})
LMC_ROLES = frozenset({"user", "assistant", "computer"})
LMC_TOOL = "execute"  # Open Interpreter's one tool, which runs the code blocks
LMC_NO_OUTPUT = "No output"  # what Open Interpreter sends for a blank console output
LMC_NO_RESULT: dict[str, Any] = {"role": "tool", "content": ""}  # what it sends for a code entry no output follows


def _responses_item(obj: dict[str, Any]) -> bool:
    kind = obj.get("type")
    if not isinstance(kind, str):
        return False
    if kind in RESPONSES_CALLS:
        return isinstance(obj.get("name"), str) and ("arguments" in obj or "input" in obj)
    if kind in RESPONSES_OUTPUTS:
        return "call_id" in obj and "output" in obj
    if kind == RESPONSES_REASONING:
        return "role" not in obj and ("summary" in obj or "content" in obj or "encrypted_content" in obj)
    return False


def _lmc_message(obj: dict[str, Any]) -> bool:
    role, kind = obj.get("role"), obj.get("type")
    return (
        isinstance(role, str) and isinstance(kind, str) and role in LMC_ROLES and kind in LMC_TYPES and "content" in obj
    )


def is_turn_piece(obj: Any) -> bool:
    """Whether ``obj`` is a typed entry of one of the dialects above: a Responses call, output or reasoning item, a
    Responses ``message`` item, or an Open Interpreter message."""
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):  # every dialect types its entries
        return False
    if _responses_item(obj) or _lmc_message(obj):
        return True
    return obj.get("type") == "message" and isinstance(obj.get("role"), str) and "content" in obj


def piece_role(obj: Any) -> str | None:
    """The role a role-less Responses item stands for (``function_call`` for a call, ``tool`` for its output,
    ``thinking`` for reasoning: roles of the role table), or None."""
    if not isinstance(obj, dict) or "role" in obj or not _responses_item(obj):
        return None
    kind = obj["type"]
    if kind in RESPONSES_CALLS:
        return "function_call"
    return "tool" if kind in RESPONSES_OUTPUTS else "thinking"


def assistant_piece(obj: Any) -> bool:
    """Whether a piece is on the assistant's side (a reply's text, call or reasoning)."""
    if not is_turn_piece(obj):
        return False
    return obj.get("role") == "assistant" or str(obj.get("type")) in RESPONSES_CALLS | {RESPONSES_REASONING}


def piece_is_call(obj: Any) -> bool:
    """Whether a piece is a call (a Responses call item, an Open Interpreter ``code`` entry)."""
    if not is_turn_piece(obj):
        return False
    return str(obj.get("type")) in RESPONSES_CALLS or (obj.get("type") == "code" and obj.get("role") == "assistant")


def lmc_call(obj: Any) -> bool:
    """Whether ``obj`` is an Open Interpreter ``code`` entry the model is sent (a call of ``execute``)."""
    return (
        isinstance(obj, dict)
        and _lmc_message(obj)
        and obj["type"] == "code"
        and obj["role"] == "assistant"
        and obj.get("recipient", "assistant") == "assistant"
    )


def lmc_result(obj: Any) -> bool:
    """Whether ``obj`` is an Open Interpreter console ``output`` entry the model is sent (a call's result)."""
    return (
        isinstance(obj, dict)
        and _lmc_message(obj)
        and obj["type"] == "console"
        and obj["role"] == "computer"
        and obj.get("format") == "output"
        and obj.get("recipient", "assistant") == "assistant"
    )


def joins_reply(item: Any, open_reply: bool, called: bool) -> bool:
    """Whether the assistant piece ``item`` continues the reply the pieces before it began (``open_reply``: no other
    message came between; ``called``: that reply holds a call): a call or reasoning always does, text only before
    the reply's first call."""
    if not open_reply:
        return False
    return piece_is_call(item) or item.get("type") == RESPONSES_REASONING or not called


def piece_message(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The chat message a piece stands for (OpenAI chat keys), or None for one the model was never sent (an Open
    Interpreter entry for another recipient, a reasoning summary). Any other object is returned as it is."""
    kind = obj.get("type") if isinstance(obj.get("type"), str) else None
    if "recipient" in obj and obj.get("recipient") != "assistant" and _lmc_message(obj):
        return None
    if kind in RESPONSES_CALLS and _responses_item(obj):
        arguments = obj.get("arguments") if kind == "function_call" else obj.get("input")
        call = {"id": obj.get("call_id"), "function": {"name": obj["name"], "arguments": arguments}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if kind in RESPONSES_OUTPUTS and _responses_item(obj):
        return {"role": "tool", "tool_call_id": obj.get("call_id"), "content": _output_text(obj.get("output"))}
    if kind == RESPONSES_REASONING and _responses_item(obj):
        own = [c.get("text") for c in obj.get("content") or [] if isinstance(c, dict)]
        texts = [t for t in own if isinstance(t, str)]
        return {"role": "thinking", "content": "\n".join(texts)} if texts else None
    if not _lmc_message(obj):
        return obj
    if kind == "code" and obj["role"] == "assistant":
        arguments = json.dumps({"language": obj.get("format"), "code": obj["content"]})
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"function": {"name": LMC_TOOL, "arguments": arguments}}],
        }
    if kind == "console" and obj["role"] == "computer" and obj.get("format") == "output":
        content = obj["content"] if isinstance(obj["content"], str) else json.dumps(obj["content"])
        return {"role": "tool", "content": content if content.strip() else LMC_NO_OUTPUT}
    return obj  # a message as it is; a computer's message, a console entry of another format: an unknown role, a gap


LMC_UNLOGGED = "Open Interpreter saves its messages, not the system message and execute tool it sends with them"


def unlogged_context(messages: Any) -> str | None:
    """Why a list of pieces lacks what its model was sent, or None: Open Interpreter's saved conversation never
    holds its system message (``interpreter.system_message``, sent first with every call) nor the ``execute`` tool's
    schema."""
    if isinstance(messages, list) and any(
        isinstance(m, dict) and _lmc_message(m) and m["type"] != "message" for m in messages
    ):
        return LMC_UNLOGGED
    return None


def _output_text(output: Any) -> Any:
    """A call output as the text sent: a list of text parts joined, anything else as logged."""
    if isinstance(output, list) and output and all(isinstance(p, dict) and "text" in p for p in output):
        return "\n".join(str(p["text"]) for p in output)
    return "" if output is None else output
