"""Message shapes log writers use, and one normaliser from any of them to OpenAI chat message dicts.

Readers of formats that store chat messages in their own dialect (role names, content keys, tool-call shapes)
import this module instead of growing their own tables. What it knows:

- **Message-like objects**: a role-like key (:data:`ROLE_KEYS`: ``role``, ``from``, ``author``, ``speaker``;
  ``author`` may be an object holding ``role``, as ChatGPT exports write it) and a content-like key
  (:data:`CONTENT_KEYS`: ``content``, ``value``, ``text``, ``parts``), or a tool call instead of content.
  LangChain's ``{"type": "human" | "ai" | ..., "data": {...}}`` dicts are read through their ``data``.
- **Roles**, normalised through one vocabulary (:data:`ROLE_VOCABULARY`): ``human``/``user`` → user;
  ``gpt``/``model``/``bot``/``ai``/``assistant``... → assistant; ``system`` (and ``developer``, kept as such);
  ``function``/``tool``/``observation``/``ipython`` → tool result; ShareGPT's ``function_call`` → an assistant
  turn holding only calls. A role outside the vocabulary is never guessed (``unknown_role``).
- **Tool calls and results** in the OpenAI shape (``tool_calls``, legacy ``function_call``, ``tool``/``function``
  messages), the Anthropic shape (``tool_use`` / ``tool_result`` / ``thinking`` blocks; Letta's ``reasoning``
  blocks; goose's ``toolRequest`` / ``toolResponse``) and the Gemini shape (``functionCall`` /
  ``functionResponse`` / ``thought`` parts), and bare ``{"name", "arguments"}`` calls.
- **Model calls folded into one message's text**: Open WebUI's ``<details type="reasoning" | "tool_calls">``
  markup in an assistant message's content is read back into the assistant messages and results it stands for
  (:mod:`msgtrain.ingest.common.details_markup`), never trained as text.

Invariants:
- Nothing is invented: argument strings are kept verbatim, ids the log gave are kept; a synthetic id
  (``call_<message>_<k>``) is made only for a call the log wrote without one.
- A result is paired with a call only when the log says which: its own id, else the oldest open call of its
  name, else the oldest open call (results written in call order, as ShareGPT and Gemini write them). A result
  that answers no open call is an ``unpaired_result`` error, never attached to a guess.
- Errors are :class:`~msgtrain.errors.ValidationError` located at the message's JSON path (``where``).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.details_markup import DetailsStep, details_steps
from msgtrain.ingest.common.pydantic_ai_messages import (
    INSTRUCTIONS_MARK,
    is_pydantic_ai_message,
    pydantic_ai_messages,
    pydantic_ai_role,
)

ROLE_KEYS = ("role", "from", "author", "speaker")
# (chosen, rejected) keys of preference records: TRL / LLaMA-Factory / UltraFeedback, LLaMA-Factory v1's typed
# messages, OpenAI's preference fine-tuning files. A record holding one pair is a preference pair, whatever else
# it holds (the structural reader reads it; readers of plain conversations leave it).
PREFERENCE_KEYS = (
    ("chosen", "rejected"),
    ("chosen_messages", "rejected_messages"),
    ("preferred_output", "non_preferred_output"),
)
# "prompt": OpenCompass's PromptList items ({"role": "HUMAN" | "BOT" | "SYSTEM", "prompt": ...})
# "items": Semantic Kernel's ChatMessageContent (typed by "content_type")
# "mes": SillyTavern's chats (with its ``is_user`` role flag)
CONTENT_KEYS = ("content", "value", "text", "parts", "prompt", "items", "mes")

# The role table (case and surrounding space ignored; ``ROLE_USER``-style enum names are the role they end with).
# docs/formats.md ("Roles") prints it; a mapping's ``roles`` / tags extend it and win over it.
USER_ROLES = frozenset({"user", "human", "human_user", "prompter"})
# "chatbot": Cohere's chat history and fine-tuning files (USER / CHATBOT / SYSTEM); "agent": agent frameworks and
# customer-service logs that name the model's side after the agent
ASSISTANT_ROLES = frozenset(
    {"assistant", "gpt", "model", "bot", "ai", "agent", "chatbot", "chatgpt", "bard", "bing", "claude"}
)
# "_system_prompt": Kimi CLI's context.jsonl writes the system prompt it sends under this role
SYSTEM_ROLES = frozenset({"system", "_system_prompt"})
DEVELOPER_ROLES = frozenset({"developer"})
TOOL_ROLES = frozenset({"tool", "function", "observation", "ipython", "tool_result", "function_response"})
CALL_ROLES = frozenset({"function_call", "tool_call"})
# Roles whose reading depends on the message's shape: (role when the shape holds a call / answers one, role of a
# message that is plain text, None: no reading). smolagents' own messages (``tool-call`` / ``tool-response``: its
# model classes send them as assistant and user text); ``api``: a tool result in multi-agent role-play logs, read
# only where it answers an open call.
SHAPED_ROLES: dict[str, tuple[str, str | None]] = {
    "tool-call": ("call", "assistant"),
    "tool-response": ("tool", "user"),
    "api": ("tool", None),
}
# A message holding only the reasoning of the assistant message that follows it (Continue's ``thinking`` role).
THOUGHT_ROLES = frozenset({"thinking"})

# Boolean keys that say which side wrote a message, where the log names no role: (role when true, when false).
# LibreChat's exports (``isCreatedByUser``; its ``sender`` is a display name), SillyTavern's chats (``is_user``).
# Without a role key or flag, a ``sender`` is the role only when it is one of the table's (Claude.ai's data export:
# ``human`` / ``assistant``); a display name there ("GPT-4") says nothing.
ROLE_FLAGS: dict[str, tuple[str, str]] = {"isCreatedByUser": ("user", "assistant"), "is_user": ("user", "assistant")}

# Canonical roles: user, assistant, system, developer, tool, call (an assistant turn made only of calls).
ROLE_VOCABULARY: dict[str, str] = {
    **dict.fromkeys(USER_ROLES, "user"),
    **dict.fromkeys(ASSISTANT_ROLES, "assistant"),
    **dict.fromkeys(SYSTEM_ROLES, "system"),
    **dict.fromkeys(DEVELOPER_ROLES, "developer"),
    **dict.fromkeys(TOOL_ROLES, "tool"),
    **dict.fromkeys(CALL_ROLES, "call"),
    **dict.fromkeys(THOUGHT_ROLES, "thought"),
    **{role: structured for role, (structured, _) in SHAPED_ROLES.items()},
}

# LangChain's serialised messages name their kind under "type"; only these values make "type" a role.
_LANGCHAIN_TYPES = frozenset({"human", "ai", "system", "tool", "function"})
# LangChain message classes (``dumpd``'s constructor id ends with one; ``*Chunk`` classes read as their message) →
# their type; a ``ChatMessage`` names its own ``role``.
_LANGCHAIN_CLASSES = {
    "HumanMessage": "human",
    "AIMessage": "ai",
    "SystemMessage": "system",
    "ToolMessage": "tool",
    "FunctionMessage": "function",
    "ChatMessage": "chat",
}
# LangChain generation records that hold the message generated (``outputs.generations`` of a LangSmith LLM run).
_GENERATION_TYPES = frozenset({"ChatGeneration", "ChatGenerationChunk"})
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})
# Reasoning blocks, by type: Anthropic's ``thinking``, Letta's ``reasoning`` (``ReasoningContent``); their redacted
# or omitted forms hold no text that could be trained (Letta's ``redacted_reasoning`` / ``omitted_reasoning``).
_REASONING_BLOCKS = frozenset({"thinking", "reasoning", "think"})  # think: Kimi's ThinkPart {"think": ...}
_REDACTED_BLOCKS = frozenset({"redacted_thinking", "redacted_reasoning", "omitted_reasoning", "redactedThinking"})
_CALL_KEYS = ("tool_calls", "function_call", "functionCall", "toolCalls")


# Chat-template control text that opens a conversation's first turn, or the assistant's turn at its end. A user or
# system text that starts or ends with one is a prompt some chat template already rendered (veRL and SkyRL rollout
# dumps, lm-evaluation-harness with --apply_chat_template): read as a message it would be rendered a second time,
# around its own control text, a context no model ever saw. Readers parse a whole rendered prompt back into its
# messages first (msgtrain.ingest.common.rendered_prompts); what reaches this check is markup no family reads
# unambiguously.
_RENDERED_OPENINGS = (
    "<|im_start|>",  # ChatML (Qwen, ...)
    "<|begin_of_text|>",  # Llama 3
    "<|start_header_id|>",
    "<start_of_turn>",  # Gemma
    "<s>[INST]",  # Mistral / Llama 2
    "[INST]",
    "<|system|>",  # Zephyr / Phi
    "<|user|>",
    "<｜begin▁of▁sentence｜>",  # DeepSeek
    "<|start|>",  # harmony (gpt-oss)
)
_RENDERED_ASSISTANT_OPENINGS = (
    "<|im_start|>assistant\n",
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "<start_of_turn>model\n",
    "[/INST]",
    "<|assistant|>\n",
    "<｜Assistant｜>",
    "<|start|>assistant",
)


def rendered_template_text(text: str) -> str | None:
    """The chat-template control text a prompt starts or ends with (see above), or None for ordinary text."""
    head, tail = text.lstrip(), text.rstrip(" ")
    hit = next((m for m in _RENDERED_OPENINGS if head.startswith(m)), None)
    return hit or next((m for m in _RENDERED_ASSISTANT_OPENINGS if tail.endswith(m) or tail.endswith(m.strip())), None)


def attached_files(message: dict[str, Any]) -> int:
    """How many files a chat UI's export says came with a message beside its text (Claude.ai's ``attachments``
    whose ``extracted_content`` it sent and ``files`` it uploaded; LibreChat's and Open WebUI's ``files``): what the
    model was sent from them, and where, the message does not hold. 0 for none."""
    attachments = message.get("attachments")
    pasted = (
        [a for a in attachments if isinstance(a, dict) and a.get("extracted_content")]
        if isinstance(attachments, list)
        else []
    )
    files = message.get("files")
    uploaded = [f for f in files if isinstance(f, dict) and f] if isinstance(files, list) else []
    return len(pasted) + len(uploaded)


def loss_flag_weight(message: dict[str, Any]) -> int | None:
    """The weight a boolean ``loss`` flag gives a message (AgentGym / AgentTuning trajectories: ``false`` on the
    scripted turns a task opens with, ``"Ok."`` after the instructions and few-shot replies, ``true`` on the replies
    the agent generated): 0 or 1, or None when the message has no such flag."""
    loss = message.get("loss")
    return (1 if loss else 0) if isinstance(loss, bool) else None


def canonical_role(value: Any, extra: dict[str, str] | None = None) -> str | None:
    """The canonical role of a logged role value (case and surrounding space ignored), or None if unknown.

    ``extra`` maps further values (a user's mapping, e.g. axolotl ``roles``) to canonical roles; it wins."""
    if not isinstance(value, str):
        return None
    key = value.strip().lower()
    if extra:
        hit = extra.get(value, extra.get(key))
        if hit is not None:
            return hit
    # Protocol-buffer enum names (xAI's gRPC SDK writes ROLE_USER, ROLE_ASSISTANT) are the role they end with.
    return ROLE_VOCABULARY.get(key.removeprefix("role_"))


def _langchain_type(obj: dict[str, Any]) -> bool:
    """Whether ``type`` names a LangChain message kind (a value of any JSON type may stand there, a list too)."""
    kind = obj.get("type")
    return isinstance(kind, str) and kind in _LANGCHAIN_TYPES


def is_wrapper(obj: dict[str, Any]) -> bool:
    """A message-like object that wraps its message (an OpenAI choice, LangChain's type + data): counting what a
    record holds counts it once, not again inside."""
    return _unwrap(obj) is not obj


def unwrapped(obj: Any) -> Any:
    """The message a wrapper holds (see :func:`_unwrap`); anything else as it is."""
    return _unwrap(obj) if isinstance(obj, dict) else obj


def _unwrap(obj: dict[str, Any]) -> dict[str, Any]:
    """LangChain ``{"type": "ai", "data": {...}}`` → the data dict (which repeats the type); LangChain's ``dumpd``
    form ``{"lc": 1, "type": "constructor", "id": [..., "AIMessage"], "kwargs": {...}}`` (LangSmith run inputs,
    LangGraph checkpoints) → the kwargs, typed by the class; an OpenAI ``choice`` logged in a message list
    (``{"finish_reason", "index", "message"}``, as OpenPipe ART's ``messages_and_choices`` holds the sampled turns)
    and a LangChain ``ChatGeneration`` (``{"text", "message", "generation_info"}``, LangSmith run outputs) → its
    message."""
    data = obj.get("data")
    if isinstance(data, dict) and _langchain_type(obj) and "content" in data:
        return {"type": obj["type"], **data}
    kwargs = obj.get("kwargs")
    if obj.get("lc") == 1 and obj.get("type") == "constructor" and isinstance(kwargs, dict) and "content" in kwargs:
        ident = obj.get("id")
        cls = ident[-1] if isinstance(ident, list) and ident else None
        kind = _LANGCHAIN_CLASSES.get(str(cls).removesuffix("Chunk"))
        if kind is not None:
            return {**kwargs, "type": kind} if kind != "chat" else dict(kwargs)
    info = obj.get("info")
    if isinstance(info, dict) and isinstance(info.get("role"), str) and isinstance(obj.get("parts"), list):
        return _opencode_message(info, obj["parts"])
    message = obj.get("message")
    if isinstance(message, dict) and ("finish_reason" in obj or obj.get("type") in _GENERATION_TYPES):
        inner = _unwrap(message)
        if isinstance(inner.get("role"), str) or inner.get("type") in _LANGCHAIN_TYPES:
            return inner
    event = _event_message(obj)
    return event if event is not None else obj


def _event_message(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The message an event holds as its ``content`` (Google ADK's session events: ``{"author": <agent name or
    "user">, "content": {"role": "user" | "model", "parts": [...]}}``), or None. The message's own role says
    which side spoke; the event's author (an agent's name) is the speaker of a model message, so that a session
    in which several agents speak is seen as such."""
    content = obj.get("content")
    if not isinstance(content, dict) or not isinstance(content.get("role"), str):
        return None
    if not any(key in content for key in CONTENT_KEYS if key != "content") and "content" not in content:
        return None
    author = next((obj[key] for key in ROLE_KEYS if key != "role" and isinstance(obj.get(key), str)), None)
    if author is None and not isinstance(obj.get("role"), str):
        return None
    if author is not None and canonical_role(content["role"]) == "assistant" and canonical_role(author) is None:
        return {**content, "name": author}
    return dict(content)


def role_of(obj: Any) -> tuple[str, Any] | None:
    """(role key, logged role value) of a message-like object, or None. ``author`` may be ``{"role": ...}``."""
    if not isinstance(obj, dict):
        return None
    obj = _unwrap(obj)
    if is_pydantic_ai_message(obj):
        return "kind", pydantic_ai_role(obj)
    for key in ROLE_KEYS:
        value = obj.get(key)
        if isinstance(value, dict) and isinstance(value.get("role"), str):
            return f"{key}.role", value["role"]
        if isinstance(value, str):
            return key, value
    if _langchain_type(obj) and "content" in obj:
        return "type", obj["type"]
    for key, (yes, no) in ROLE_FLAGS.items():
        if isinstance(obj.get(key), bool):
            return key, yes if obj[key] else no
    sender = obj.get("sender")  # Claude.ai's data export (human / assistant); elsewhere often a display name
    if isinstance(sender, str) and canonical_role(sender) is not None:
        return "sender", sender
    return None


def content_key_of(obj: dict[str, Any]) -> str | None:
    """The content-like key of a message-like object (the first of :data:`CONTENT_KEYS` it has), or None."""
    obj = _unwrap(obj)
    for key in CONTENT_KEYS:
        if key in obj:
            return key
    return None


def is_message_like(obj: Any) -> bool:
    """A dict with a role-like key holding a string and a content-like key (or a tool call instead)."""
    if role_of(obj) is None:
        return False
    data = _unwrap(obj)
    return content_key_of(data) is not None or any(k in data for k in _CALL_KEYS)


def is_message_list(value: Any) -> bool:
    """A non-empty list whose items are all message-like and of which at least one has a known role."""
    if not isinstance(value, list) or not value:
        return False
    known = False
    for item in value:
        if not is_message_like(item):
            return False
        hit = role_of(item)
        known = known or (hit is not None and canonical_role(hit[1]) is not None)
    return known


def wrapped_messages(value: Any) -> tuple[str, list[Any]] | None:
    """(key, messages) when ``value`` is a list of wrappers that each hold one message under the same key and are
    not messages themselves (Continue's ``history[].message`` beside its ``contextItems``; AgentScope's memory of
    ``[message, marks]`` pairs, key ``"0"``), else None."""
    if not isinstance(value, list) or not value:
        return None
    keys: set[str] = set()
    for item in value:
        if isinstance(item, list):
            inner = [str(i) for i, v in enumerate(item) if is_message_like(v)]
        elif isinstance(item, dict) and not is_message_like(item):
            inner = [k for k, v in item.items() if is_message_like(v)]
        else:
            return None
        if len(inner) != 1:
            return None
        keys.add(inner[0])
    if len(keys) != 1:
        return None
    key = keys.pop()
    messages = [item[int(key)] if isinstance(item, list) else item[key] for item in value]
    return (key, messages) if is_message_list(messages) else None


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
        )

    def normalise(self, raw: Any, where: str, *, results_follow: bool | None = None) -> list[dict[str, Any]]:
        """One logged message → one or more OpenAI chat dicts (an Anthropic user turn holding ``tool_result``
        blocks, or a Gemini one holding ``functionResponse`` parts, becomes its results then its text).

        ``results_follow`` says whether the next logged message is a tool result too (None: not known), which
        decides how one result answering several parallel calls is read (:meth:`_parallel_results`)."""
        index, self.position = self.position, self.position + 1
        return self._normalise(raw, where, index, results_follow)

    def is_result(self, raw: Any) -> bool:
        """Whether the logged message ``raw`` is a tool result by its role (what ``results_follow`` asks)."""
        if not isinstance(raw, dict):
            return False
        try:
            logged = self._logged_role(_unwrap(raw), "")
        except ValidationError:
            return False
        return canonical_role(logged, self.roles) == "tool"

    def _normalise(self, raw: Any, where: str, index: int, results_follow: bool | None) -> list[dict[str, Any]]:
        if not isinstance(raw, dict):
            raise ValidationError(f"message is a {type(raw).__name__}, not an object", where=where, code="bad_message")
        obj = _unwrap(raw)
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
        content = _kernel_items(obj.get(self.content_key) if self.content_key else _first(obj, CONTENT_KEYS))
        if not self.content_key and is_ui_steps(obj.get("parts")):
            content = obj["parts"]  # AI SDK 4 keeps the text in content too, the calls only in parts
        role = self._shaped_role(logged, role, obj, content, where)
        if role == "thought":
            self.thought.append(content if isinstance(content, str) else _block_text(content, where))
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
            return [self._assistant(obj, content, role == "call", where)]
        if role == "tool":
            results = [_sdk_result(b) for b in content] if isinstance(content, list) and content else []
            if results and all(r is not None for r in results):  # one message answering several calls
                return [d for r in results if r is not None for d in self._result(r[0], r[1], r[2], where)]
            parallel = self._parallel_results(obj, content, where, results_follow)
            return parallel if parallel is not None else self._tool_message(obj, content, where)
        if role == "user" and any(obj.get(k) for k in _CALL_KEYS):
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
        for key in _CALL_KEYS:
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
            if any(obj.get(k) for k in _CALL_KEYS):
                return "assistant"  # an assistant message whose calls are under their own key
            holds = _json_call(content)
        else:
            ids = ("tool_call_id", "tool_use_id", "toolCallId")
            holds = any(obj.get(k) for k in ids) or bool(self.open_calls)
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
        if self.role_key:
            value = obj.get(self.role_key)
            if value is None:
                raise ValidationError(f"message has no {self.role_key!r}", where=where, code="bad_message")
            if self.role_key in ROLE_FLAGS and isinstance(value, bool):
                return ROLE_FLAGS[self.role_key][0 if value else 1]
            return value
        hit = role_of(obj)
        if hit is None:
            raise ValidationError(
                "message has no role-like key",
                where=where,
                code="bad_message",
                hint=f"messages need one of {', '.join(ROLE_KEYS)}",
            )
        return hit[1]

    # ---------------------------------------------------------------- assistant turns

    def _assistant(self, obj: dict[str, Any], content: Any, calls_only: bool, where: str) -> dict[str, Any]:
        parts: list[Any] = []
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        index = self.position - 1
        if calls_only:  # ShareGPT function_call: the value is the call (or a list of calls) as JSON
            value = parse_json_field(content, what="function_call value", where=where, code="bad_tool_call")
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
        for key in ("reasoning_content", "reasoning", "thinking"):
            value = obj.get(key)
            if isinstance(value, str) and value:
                reasoning.insert(0, value)
                break
        # a call-only message's value is its calls, not text the model wrote besides them
        out: dict[str, Any] = {"role": "assistant", "content": None if calls_only else _content_value(parts, content)}
        reasoning[:0], self.thought = self.thought, []  # reasoning logged as a message of its own comes first
        if reasoning:
            out["reasoning_content"] = "\n".join(reasoning)
        if calls:
            out["tool_calls"] = calls
        if isinstance(obj.get("name"), str):
            out["name"] = obj["name"]
        for key in ("weight", "loss_weight"):  # OpenAI fine-tuning / axolotl; LLaMA-Factory v1
            if key in obj:
                out["weight"] = obj[key]
                break
        else:
            if loss_flag_weight(obj) is not None:
                out["weight"] = loss_flag_weight(obj)
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
                f"content is a {type(content).__name__}", where=where, code="bad_content", hint=_CONTENT_HINT
            )
        for j, item in enumerate(content):
            if isinstance(item, str):
                parts.append({"type": "text", "text": item})
                continue
            if not isinstance(item, dict):
                raise ValidationError(f"content[{j}] is not an object", where=where, code="bad_content")
            kind = item.get("type")
            gemini_call = item.get("functionCall", item.get("function_call"))
            if kind == "tool_use" or isinstance(gemini_call, dict):
                calls.append(
                    self._call(item if kind == "tool_use" else gemini_call, where, len(calls), self.position - 1)
                )
            elif kind == "tool-call" or (kind is None and isinstance(item.get("tool_call"), dict)):
                calls.append(self._call(_sdk_call(item), where, len(calls), self.position - 1))
            elif kind == "toolRequest":
                calls.append(self._call(_goose_call(item, j, where), where, len(calls), self.position - 1))
            elif kind == "tool_call" and "value" in item:  # LLaMA-Factory v1: the call as JSON text under "value"
                call = parse_json_field(item["value"], what=f"content[{j}] tool_call value", where=where)
                calls.append(self._call(call, where, len(calls), self.position - 1))
            elif kind in _REASONING_BLOCKS or (item.get("thought") is True and isinstance(item.get("text"), str)):
                reasoning.append(_reasoning_text(item, j, where))
            elif kind in _REDACTED_BLOCKS:
                raise ValidationError(
                    f"content[{j}] is redacted reasoning", where=where, code="unsupported_block", hint=_CONTENT_HINT
                )
            else:
                parts.append(_part(item, j, where))

    def _ui_steps(self, parts: list[Any], where: str) -> list[dict[str, Any]]:
        """An AI SDK UI message (:func:`is_ui_steps`) as the model messages it stands for, as the SDK's
        ``convertToModelMessages`` makes them: per step (``step-start`` separates them) one assistant message of its
        text, reasoning and calls, then the results of the calls that have an output. Sources and data parts are
        the UI's own, not model output."""
        out: list[dict[str, Any]] = []
        steps: list[list[dict[str, Any]]] = [[]]
        for item in parts:
            if isinstance(item, dict) and item.get("type") == "step-start":
                steps.append([])
            elif isinstance(item, dict) and not str(item.get("type", "")).startswith(_UI_ONLY_PARTS):
                steps[-1].append(item)
        for j, step in enumerate(s for s in steps if s):
            content: list[Any] = []
            results: list[tuple[Any, Any, Any]] = []
            for item in step:
                tool = _ui_tool(item)
                if tool is None:
                    content.append(item)
                    continue
                call_id, name, arguments, output = tool
                content.append({"type": "tool-call", "toolCallId": call_id, "toolName": name, "input": arguments})
                if output is not _NO_OUTPUT:
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
                "the log keeps neither their content nor how it was laid out",
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
            answer = item.get("functionResponse", item.get("function_response"))
            if item.get("type") == "toolResponse":
                if parts:
                    out.append({"role": role, "content": parts})
                    parts = []
                out.extend(self._result(item.get("id"), None, _block_result(_goose_result(item, j, where)), where))
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
                    out.extend(self._result(call_id, named, _block_result(value), where))
                else:
                    assert isinstance(answer, dict)
                    out.extend(self._result(answer.get("id"), answer.get("name"), answer.get("response"), where))
            else:
                parts.append(_part(item, j, where))
        if items is None:
            if content is not None and not isinstance(content, str):
                raise ValidationError(
                    f"content is a {type(content).__name__}", where=where, code="bad_content", hint=_CONTENT_HINT
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
            message = {"role": role, "content": _content_value(parts, content)}
        else:
            return out
        if isinstance(obj.get("name"), str):
            message["name"] = obj["name"]
        return [*out, message]

    def _tool_message(self, obj: dict[str, Any], content: Any, where: str) -> list[dict[str, Any]]:
        call_id = next((obj[k] for k in ("tool_call_id", "tool_use_id", "toolCallId", "id") if obj.get(k)), None)
        name = obj.get("name")
        if isinstance(content, list) and content and all(isinstance(b, dict) for b in content):
            answers = [b.get("functionResponse") for b in content if isinstance(b.get("functionResponse"), dict)]
            if len(answers) == 1:  # a Gemini "function" turn holding one functionResponse part
                answer = answers[0]
                return self._result(answer.get("id"), answer.get("name"), answer.get("response"), where)
        return self._result(call_id, name if isinstance(name, str) else None, _block_result(content), where)

    def _result(self, call_id: Any, name: str | None, value: Any, where: str) -> list[dict[str, Any]]:
        """The result as an OpenAI tool message answering the open call it pairs with (none: a result of the user
        side's call, :meth:`_user_calls`). It carries a ``name`` only where the log gave the result one: the call's
        name is known from the call, and a template that renders a result's name must not be shown one the log
        never sent."""
        pos = self._answered(call_id, name, where)
        found_id, _ = self.open_calls.pop(pos)
        if found_id in self.user_calls:
            self.user_calls.discard(found_id)
            self.user_tool_messages += 1
            return []
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        out = {"role": "tool", "tool_call_id": found_id, "content": text}
        if name:
            out["name"] = name
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
        entries = _block_result(content)
        if isinstance(entries, str):
            try:
                entries = json.loads(entries)
            except (ValueError, RecursionError):
                entries = None
        if not isinstance(entries, list) or len(entries) != len(waiting):
            raise ValidationError(
                f"one tool result answers {len(waiting)} parallel calls and is not a list of {len(waiting)} results",
                where=where,
                code="ambiguous_results",
                hint="write one tool result per call (with the call's id), or a JSON list with one entry per call",
            )
        out: list[dict[str, Any]] = []
        for entry, (call_id, call_name) in zip(entries, waiting, strict=True):
            if isinstance(entry, dict) and "content" in entry and entry.get("name", call_name) == call_name:
                entry = entry["content"]
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


_CONTENT_HINT = "content is text, or a list of text / image parts (OpenAI, Anthropic or Gemini shapes)"


def _json_call(content: Any) -> bool:
    """Text that is the JSON of a call (``{"name", "arguments"}``, or a list of them), as ShareGPT writes one."""
    if not isinstance(content, str) or not content.lstrip().startswith(("{", "[")):
        return False
    try:
        value = json.loads(content)
    except (ValueError, RecursionError):
        return False
    calls = value if isinstance(value, list) else [value]
    return bool(calls) and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls)


def _first(obj: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in obj:
            return obj[key]
    return None


def parse_json_field(value: Any, *, what: str, where: str, code: str = "bad_json_field") -> Any:
    """A field that may hold JSON as a string (ShareGPT ``tools`` and ``function_call`` values, LLaMA-Factory
    ``tool_call`` values, verifiers' tool calls, lm-evaluation-harness chat prompts): the readers' one
    JSON-in-string parser. Anything but a string is returned as is; blank text is None; text that does not parse is
    a :class:`ValidationError` with ``code``, never a guess."""
    if not isinstance(value, str):
        return value
    if not value.strip():
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise ValidationError(
            f"{what} is not valid JSON: {e.msg} at char {e.pos}",
            where=where,
            code=code,
            hint=f"{what} must be a JSON string",
        ) from e


def _content_value(parts: list[Any], logged: Any) -> Any:
    """Content as OpenAI writes it: the logged string as is, one text part as a string, else the parts list."""
    if isinstance(logged, str):
        return logged
    if not parts:
        return None if logged is None else ""
    if len(parts) == 1 and parts[0].get("type") == "text":
        return parts[0]["text"]
    return parts


def _sdk_call(item: dict[str, Any]) -> dict[str, Any]:
    """A call part of an agent SDK's own message type → ``{"id", "name", "arguments"}``: the Vercel AI SDK's
    ``{"type": "tool-call", "toolCallId", "toolName", "input" | "args"}``, Haystack's ``{"tool_call": {"id",
    "tool_name", "arguments"}}``."""
    if item.get("type") == "tool-call":
        return {
            "id": item.get("toolCallId"),
            "name": item.get("toolName"),
            "arguments": item.get("input", item.get("args")),
        }
    call = item["tool_call"]
    return {"id": call.get("id"), "name": call.get("tool_name"), "arguments": call.get("arguments")}


def _sdk_result(item: Any) -> tuple[Any, str | None, Any] | None:
    """(call id, tool name, value) of a result part of an agent SDK's own message type, or None: the Vercel AI SDK's
    ``{"type": "tool-result", "toolCallId", "toolName", "output": {"type", "value"} | "result"}``, Haystack's
    ``{"tool_call_result": {"result", "origin": {the call}, "error"}}``."""
    if not isinstance(item, dict):
        return None
    if item.get("type") == "tool-result":
        output = item.get("output", item.get("result"))
        if isinstance(output, dict) and "value" in output and output.get("type") in _SDK_OUTPUT_TYPES:
            output = output["value"]  # AI SDK 5: a typed output (text, json, error-text, error-json, content)
        name = item.get("toolName")
        return item.get("toolCallId"), name if isinstance(name, str) else None, output
    answer = item.get("tool_call_result")
    if isinstance(answer, dict) and item.get("type") is None:
        origin: dict[str, Any] = answer["origin"] if isinstance(answer.get("origin"), dict) else {}
        name = origin.get("tool_name")
        return origin.get("id"), name if isinstance(name, str) else None, answer.get("result")
    return None


_SDK_OUTPUT_TYPES = frozenset({"text", "json", "error-text", "error-json", "content"})


# UI message parts no model sampled: cited sources and app data (AI SDK ``source-url``, ``source-document``,
# ``data-<name>``); opencode's step ends (with the step's usage), file snapshots and patches, retries.
_UI_ONLY_PARTS = ("source-", "data-", "step-finish", "snapshot", "patch", "retry")


def _opencode_message(info: dict[str, Any], parts: list[Any]) -> dict[str, Any]:
    """An opencode message (``opencode export``, its storage and server API: ``{"info": {role, modelID, tokens,
    ...}, "parts": [...]}``) as one message object: role and parts, the model, and the usage its tokens give (input,
    cache reads and writes are the prompt)."""
    out: dict[str, Any] = {"role": info["role"], "parts": parts}
    if isinstance(info.get("modelID"), str):
        out["model"] = info["modelID"]
    tokens = info.get("tokens")
    if isinstance(tokens, dict) and isinstance(tokens.get("input"), int):
        cache: dict[str, Any] = tokens["cache"] if isinstance(tokens.get("cache"), dict) else {}
        out["usage"] = {
            "input_tokens": tokens["input"],
            "cache_read_input_tokens": cache.get("read", 0),
            "cache_creation_input_tokens": cache.get("write", 0),
        }
    return out


_NO_OUTPUT = object()


def is_ui_steps(parts: Any) -> bool:
    """An AI SDK UI message's parts (``useChat`` messages): a step boundary or a tool part (``tool-<name>``,
    ``dynamic-tool``, AI SDK 4's ``tool-invocation``), which hold a call and its result in the assistant message."""
    return isinstance(parts, list) and any(
        isinstance(p, dict)
        and isinstance(p.get("type"), str)
        and (p["type"] in ("step-start", "dynamic-tool", "tool-invocation", "tool") or p["type"].startswith("tool-"))
        and p["type"] not in ("tool-call", "tool-result")
        for p in parts
    )


def _ui_tool(item: dict[str, Any]) -> tuple[Any, Any, Any, Any] | None:
    """(call id, tool name, input, output or ``_NO_OUTPUT``) of a UI tool part, or None for any other part. AI SDK
    5: ``tool-<name>`` / ``dynamic-tool`` with ``toolCallId``, ``input``, ``state`` and ``output`` (``errorText``
    when the call failed); AI SDK 4: ``tool-invocation`` holding ``toolInvocation`` (``args``, ``result``)."""
    kind = str(item.get("type", ""))
    if kind == "tool" and isinstance(item.get("state"), dict):  # opencode: callID, tool, state {status, input, ...}
        state = item["state"]
        output = state.get("output") if state.get("status") == "completed" else _NO_OUTPUT
        if state.get("status") == "error":
            output = state.get("error")
        return item.get("callID"), item.get("tool"), state.get("input"), output
    if kind == "tool-invocation" and isinstance(item.get("toolInvocation"), dict):
        inv = item["toolInvocation"]
        output = inv["result"] if inv.get("state") == "result" and "result" in inv else _NO_OUTPUT
        return inv.get("toolCallId"), inv.get("toolName"), inv.get("args"), output
    if kind == "dynamic-tool" or (kind.startswith("tool-") and kind not in ("tool-call", "tool-result")):
        name = item.get("toolName") if kind == "dynamic-tool" else kind.removeprefix("tool-")
        state = item.get("state")
        output = item.get("output") if state == "output-available" else _NO_OUTPUT
        if state == "output-error":
            output = item.get("errorText")
        return item.get("toolCallId"), name, item.get("input"), output
    return None


def _kernel_items(content: Any) -> Any:
    """Semantic Kernel's items (``ChatHistory.serialize``: ``{"content_type": "text" | "function_call" |
    "function_result", ...}``) as the parts this module reads: text parts, and calls and results in the agent-SDK
    shape (:func:`_sdk_call`, :func:`_sdk_result`); the call's ``name`` is the ``plugin-function`` name the kernel
    sends. Any other content is returned as it is."""
    if not (
        isinstance(content, list) and content and all(isinstance(i, dict) and "content_type" in i for i in content)
    ):
        return content
    out: list[Any] = []
    for item in content:
        kind = item["content_type"]
        if kind == "text":
            out.append({"type": "text", "text": item.get("text", "")})
        elif kind == "function_call":
            out.append(
                {
                    "type": "tool-call",
                    "toolCallId": item.get("id"),
                    "toolName": item.get("name"),
                    "input": item.get("arguments"),
                }
            )
        elif kind == "function_result":
            out.append(
                {
                    "type": "tool-result",
                    "toolCallId": item.get("id"),
                    "toolName": item.get("name"),
                    "output": item.get("result"),
                }
            )
        else:
            out.append({"type": f"semantic_kernel:{kind}"})  # not read: rejected by the part reader, named
    return out


def _goose_call(item: dict[str, Any], j: int, where: str) -> dict[str, Any]:
    """goose's ``toolRequest`` block: ``{"id", "toolCall": {"status", "value": {"name", "arguments"}}}`` (older
    sessions: ``toolCall`` is the call itself) → a call with its id. A call goose could not parse (``status``
    ``error``) holds no call the model's text could be rebuilt from: an error, not a guess."""
    call = item.get("toolCall")
    value = call.get("value", call) if isinstance(call, dict) else None
    if not isinstance(value, dict) or (isinstance(call, dict) and call.get("status") == "error"):
        raise ValidationError(
            f"content[{j}] is a toolRequest without a parsed call",
            where=where,
            code="bad_tool_call",
            hint=_CONTENT_HINT,
        )
    return {"id": item.get("id"), **value}


def _goose_result(item: dict[str, Any], j: int, where: str) -> Any:
    """goose's ``toolResponse`` block: ``{"id", "toolResult": {"status", "value" | "error"}}``, the value a list of
    content blocks or ``{"content": [...]}`` (MCP ``CallToolResult``) → the result's content."""
    result = item.get("toolResult")
    if isinstance(result, list):
        return result
    if not isinstance(result, dict):
        raise ValidationError(f"content[{j}] is a toolResponse without a result", where=where, code="bad_content")
    if result.get("status") == "error":
        return str(result.get("error", ""))
    value = result.get("value")
    return value.get("content") if isinstance(value, dict) and "content" in value else value


def _reasoning_text(item: dict[str, Any], j: int, where: str) -> str:
    """The text of a reasoning block, under its own type's key (``thinking`` in Anthropic's, ``reasoning`` in
    Letta's ``ReasoningContent``) or ``text`` (``value`` in LLaMA-Factory v1's); a list of text chunks (Mistral's
    ``ThinkChunk``) is joined."""
    kind = item.get("type")
    # LLaMA-Factory v1's typed parts hold the text under "value" ({"type": "reasoning", "value": ...})
    value = item.get(kind) if isinstance(kind, str) and kind in item else item.get("text", item.get("value", ""))
    if isinstance(value, list):
        texts = [c if isinstance(c, str) else c.get("text") if isinstance(c, dict) else None for c in value]
        if all(isinstance(t, str) for t in texts):
            return "".join(str(t) for t in texts)
    if isinstance(value, str):
        return value
    raise ValidationError(
        f"content[{j}] is a reasoning block without text", where=where, code="bad_content", hint=_CONTENT_HINT
    )


def _part(item: dict[str, Any], j: int, where: str) -> dict[str, Any]:
    """A content item (OpenAI part, Anthropic block or Gemini part) that is text or media → an OpenAI part."""
    kind = item.get("type")
    if kind in ("text", "input_text", "output_text") or (kind is None and isinstance(item.get("text"), str)):
        # LLaMA-Factory v1's typed parts hold the text under "value" ({"type": "text", "value": ...})
        return {"type": "text", "text": str(item.get("text", item.get("value", "")))}
    if kind in ("image_url", "input_audio", "video_url", "file", "input_image"):
        return item
    if kind == "imageUrl" and isinstance(item.get("imageUrl"), dict):  # camelCase writers (Continue)
        return {"type": "image_url", "image_url": item["imageUrl"]}
    if kind in ("image", "document") and isinstance(item.get("source"), dict):
        source = item["source"]
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type') or 'application/octet-stream'};base64,{source.get('data', '')}"
        else:
            url = str(source.get("url") or source.get("file_id") or "")
        if url:
            return {"type": "image_url", "image_url": {"url": url}}
    inline = item.get("inlineData", item.get("inline_data"))
    if isinstance(inline, dict) and isinstance(inline.get("data"), str):
        mime = inline.get("mimeType") or inline.get("mime_type") or "application/octet-stream"
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{inline['data']}"}}
    ref = item.get("fileData", item.get("file_data"))
    if isinstance(ref, dict) and isinstance(ref.get("fileUri", ref.get("file_uri")), str):
        return {"type": "image_url", "image_url": {"url": ref.get("fileUri", ref.get("file_uri"))}}
    shown = kind if kind is not None else ", ".join(sorted(item)[:6]) or "empty"
    raise ValidationError(
        f"content[{j}] is a part msgtrain cannot read ({shown})", where=where, code="bad_content", hint=_CONTENT_HINT
    )


def _block_text(content: Any, where: str) -> str:
    """The text of a content that must be text: a string, or text parts / blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(b, dict) and isinstance(b.get("text"), str) for b in content):
        return "".join(b["text"] for b in content)
    raise ValidationError("reasoning that is not text", where=where, code="bad_content", hint=_CONTENT_HINT)


def _block_result(content: Any) -> Any:
    """A tool result's content: text stays text, all-text blocks are joined, anything else is kept as JSON."""
    if content is None:
        return ""
    if isinstance(content, list) and all(_block_text_of(b) is not None for b in content):
        return "\n".join(str(_block_text_of(b)) for b in content)
    return content


def _block_text_of(block: Any) -> str | None:
    """The text of a text block: ``text``, or ``value`` in LLaMA-Factory v1's typed parts (``{"type": "text",
    "value"}``); None for any other block."""
    if not isinstance(block, dict):
        return None
    if isinstance(block.get("text"), str):
        return str(block["text"])
    if block.get("type") == "text" and isinstance(block.get("value"), str):
        return str(block["value"])
    return None


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


MAX_COUNT_NODES = 200_000  # objects and lists looked at when estimating what a rejected record held
MAX_COUNT_BYTES = 64 * 1024 * 1024  # raw records larger than this are not parsed to estimate


def message_like_count(value: Any) -> tuple[int, int]:
    """(message-like objects, assistant ones) anywhere in ``value`` (bounded search): what a record no reader could
    train still held. A ``str`` / ``bytes`` value is parsed as JSON first (unparseable text holds none)."""
    if isinstance(value, bytes | bytearray | str):
        if len(value) > MAX_COUNT_BYTES:
            return 0, 0
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return 0, 0
    stack, seen, messages, assistants = [value], 0, 0, 0
    while stack and seen < MAX_COUNT_NODES:
        item = stack.pop()
        seen += 1
        if isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, dict | list))
        elif isinstance(item, dict):
            if is_message_like(item):
                messages += 1
                hit = role_of(item)
                assistants += hit is not None and canonical_role(hit[1]) in ("assistant", "call")
                if is_wrapper(item):
                    continue  # a wrapper (an OpenAI choice, LangChain's type + data): its message is this one
            stack.extend(v for v in item.values() if isinstance(v, dict | list))
    return messages, assistants


def assistant_turns_in(value: Any) -> int:
    """An estimate of the assistant turns a rejected record held: its assistant-like messages (0 when unknown)."""
    try:
        return message_like_count(value)[1]
    except Exception:  # an estimate for the books never becomes a fault of its own
        return 0


def named_agents(messages: Any) -> list[str]:
    """The agents of a transcript among named agents, or ``[]``: user-role messages carry a speaker's ``name`` and
    either assistant-role messages carry another one (AutoGen 0.2 / AG2 ``chat_messages`` and ``ChatResult
    .chat_history``: one agent's view, its own messages as ``assistant``) or there are no assistant messages and the
    user-role ones carry at least two names (an AutoGen ``GroupChat``'s ``messages``: every speaker's message as
    ``user``). Which of the agents is a model, and which a human or a code executor, the transcript does not say."""
    if not isinstance(messages, list):
        return []
    named: dict[str, set[str]] = {"user": set(), "assistant": set()}
    for m in messages:
        role = canonical_role(m.get("role")) if isinstance(m, dict) else None
        if role in named and isinstance(m.get("name"), str) and m["name"]:
            named[role].add(m["name"])
    users, assistants = named["user"], named["assistant"]
    has_assistant = any(isinstance(m, dict) and canonical_role(m.get("role")) == "assistant" for m in messages)
    if users and assistants and assistants - users:
        return sorted(users | assistants)
    if not has_assistant and len(users) >= 2:
        return sorted(users)
    return []


def named_agents_error(agents: list[str], where: str) -> ValidationError:
    """The reject of a transcript among named agents: which one to train is the user's to say, with a mapping that
    reads the speaker's name as the role (the agent trained as ``assistant``, the others as ``user``)."""
    return ValidationError(
        f"messages of named agents ({', '.join(agents)}), as AutoGen saves a chat: which agent is the model (and "
        "which a human or a code executor) the log does not say",
        where=where,
        code="ambiguous_structure",
        hint="train one agent's turns with a mapping (--map) that reads the speaker's name as the role: "
        "message_property_mappings: {role: name, content: content}, roles: {assistant: [THE_MODEL_AGENT], "
        "user: [THE_OTHERS]}",
    )
