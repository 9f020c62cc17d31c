"""What a message is in any log writer's dialect: role and content keys, the one role table, the wrappers a
message may sit in, and the recognisers and estimates built on them.

- **Message-like objects**: a role-like key (:data:`ROLE_KEYS`: ``role``, ``from``, ``author``, ``speaker``;
  ``author`` may be an object holding ``role``, as ChatGPT exports write it; a boolean flag of :data:`ROLE_FLAGS`
  where no role is named) and a content-like key (:data:`CONTENT_KEYS`: ``content``, ``value``, ``text``,
  ``parts``, ...), or a tool call instead of content. A wrapper is read through the message it holds: LangChain's
  ``{"type": "human" | "ai" | ..., "data": {...}}`` and ``dumpd`` forms, an OpenAI choice, a LangChain
  ``ChatGeneration``, an opencode ``{info, parts}`` message, a Google ADK event's ``content``, an ATIF step
  (Harbor's trajectories), a CAMEL memory record (``role_at_backend``), a system message keeping its text under
  ``system_prompt`` (nebius' SWE-agent trajectories). Those are one format's each, yet they are read here, not in a
  format module or a shipped mapping: the structural reader's search, the books' estimates and the normaliser meet
  them message by message inside any record, below the format readers (the ingest layers point down only), and a
  mapping names columns, keys and role values, never a message rewritten (an ATIF step's calls joined with its
  observation's results, CAMEL's call and result from ``func_name`` / ``args`` / ``result``).
- **Roles**, normalised through one vocabulary (:data:`ROLE_VOCABULARY`): ``human``/``user`` → user;
  ``gpt``/``model``/``bot``/``ai``/``assistant``... → assistant; ``system`` (and ``developer``, kept as such);
  ``function``/``tool``/``observation``/``ipython`` → tool result; ShareGPT's ``function_call`` → an assistant
  turn holding only calls; :data:`SHAPED_ROLES` read by what the message holds (by the normaliser,
  :mod:`msgtrain.ingest.common.shapes`).

Invariants:
- A role outside the vocabulary is never guessed: :func:`canonical_role` is None for it (a mapping's roles extend
  the table and win over it).
- Recognising reads a value and never changes it; a wrapper is one message (counted once, never again inside).
- The estimates of what a rejected record held (:func:`message_like_count`, :func:`assistant_turns_in`) are bounded
  (:data:`MAX_COUNT_NODES`, :data:`MAX_COUNT_BYTES`) and never become a fault of their own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.pydantic_ai_messages import is_pydantic_ai_message, pydantic_ai_role
from msgtrain.ingest.common.turn_pieces import assistant_piece, is_turn_piece, joins_reply, piece_is_call, piece_role

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
# "contentParts": Chatbox's sessions (text, reasoning, tool-call parts)
CONTENT_KEYS = ("content", "value", "text", "parts", "prompt", "items", "mes", "contentParts")

# The role table (case and surrounding space ignored; ``ROLE_USER``-style enum names are the role they end with).
# docs/formats.md ("Roles") prints it; a mapping's ``roles`` / tags extend it and win over it.
# "environment": RL environments' observations, what the environment says to the policy each step (Atropos)
USER_ROLES = frozenset({"user", "human", "human_user", "prompter", "environment"})
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
CALL_KEYS = ("tool_calls", "function_call", "functionCall", "toolCalls")


def attached_files(message: dict[str, Any]) -> int:
    """How many files a chat UI's export says came with a message beside its text (Claude.ai's ``attachments``
    whose ``extracted_content`` it sent and ``files`` it uploaded; LibreChat's and Open WebUI's ``files``; Continue's
    ``contextItems`` with content; Mastra's ``experimental_attachments``, read as ``files``): what the model was sent
    from them, and where, the message does not hold. 0 for none."""
    attachments = message.get("attachments")
    pasted = (
        [a for a in attachments if isinstance(a, dict) and a.get("extracted_content")]
        if isinstance(attachments, list)
        else []
    )
    files = message.get("files")
    uploaded = [f for f in files if isinstance(f, dict) and f] if isinstance(files, list) else []
    items = message.get(CONTEXT_ITEMS)
    context = [i for i in items if isinstance(i, dict) and i.get("content")] if isinstance(items, list) else []
    return len(pasted) + len(uploaded) + len(context)


# The context items a chat wrapper keeps beside a prompt (Continue's ``history[].contextItems``: files, code and
# search results attached to it, rendered into the message when it was sent; the message holds the typed text only).
CONTEXT_ITEMS = "contextItems"


def loss_flag_weight(message: dict[str, Any]) -> int | None:
    """The weight a boolean flag gives a message: AgentGym / AgentTuning trajectories' ``loss`` (``false`` on the
    scripted turns a task opens with, ``"Ok."`` after the instructions and few-shot replies, ``true`` on the replies
    the agent generated), axolotl's ``training`` (its ``message_field_training``: ``false`` on a turn kept as context
    whatever its role); 0 or 1, or None when the message has no such flag."""
    for key in ("loss", "training"):
        flag = message.get(key)
        if isinstance(flag, bool):
            return 1 if flag else 0
    return None


def message_weight(message: dict[str, Any]) -> Any:
    """A message's own word on whether it is trained, or None when it says nothing: OpenAI fine-tuning's and
    axolotl's ``weight``, LLaMA-Factory v1's ``loss_weight`` (a null one, as ShareGPT exports write on every turn, says
    nothing), else a boolean flag (``loss_flag_weight``). A reply axolotl's ``train_detail`` masks in part (a span
    ``{"begin_offset", "end_offset", "train": false}``) is not trained whole, so it is 0: context, never its masked
    text trained."""
    for key in ("weight", "loss_weight"):
        if message.get(key) is not None:
            return message[key]
    detail = message.get("train_detail")
    if isinstance(detail, list) and any(isinstance(span, dict) and span.get("train") is False for span in detail):
        return 0
    return loss_flag_weight(message)


def history_copy(message: dict[str, Any]) -> bool:
    """Whether a message says it is a copy of an earlier run's message, re-sent as history (Agno's and phidata's
    ``from_history``, set on the messages a run fetched from the session's earlier runs; a run stored with them
    repeats each earlier reply): sampled in the run that wrote it, context here."""
    return message.get("from_history") is True


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
    """The message a wrapper holds (:func:`_unwrap_wrapper`), ``obj`` itself for anything else. Every wrapper that
    function reads is told by a key of :data:`_WRAPPER_KEYS` or by ``content`` holding an object; a message with
    neither (most messages, asked about several times each) is decided by one set operation."""
    if _WRAPPER_KEYS.isdisjoint(obj) and not isinstance(obj.get("content"), dict):
        return obj
    return _unwrap_wrapper(obj)


def _unwrap_wrapper(obj: dict[str, Any]) -> dict[str, Any]:
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
    source = obj.get("source")
    if isinstance(obj.get("step_id"), int) and isinstance(source, str) and source in _ATIF_ROLES and "message" in obj:
        return _atif_message(obj)
    backend = obj.get("role_at_backend")
    message = obj.get("message")
    if isinstance(backend, str) and isinstance(message, dict) and "content" in message:
        return _memory_record_message(backend, message)
    if isinstance(message, dict) and ("finish_reason" in obj or obj.get("type") in _GENERATION_TYPES):
        inner = _unwrap(message)
        if isinstance(inner.get("role"), str) or inner.get("type") in _LANGCHAIN_TYPES:
            return inner
    if len(obj) == 1 and next(iter(obj)) in TAGGED_ROLES:
        tagged = _tagged_message(obj)
        if tagged is not None:
            return tagged
    if isinstance(obj.get("segments"), list) and isinstance(obj.get("role"), str) and "content" not in obj:
        return _segmented_message(obj)
    if isinstance(obj.get("additional_kwargs"), dict) and isinstance(obj.get("role"), str) and "type" not in obj:
        return _llama_index_message(obj)
    content = obj.get("content")
    if isinstance(content, dict) and isinstance(content.get("parts"), list) and isinstance(content.get("format"), int):
        # Mastra's stored messages (MastraMessageV2): an AI SDK UI message's parts under content, beside the format
        # number (content.content and content.toolInvocations repeat what the parts hold); the files sent with it
        # (content.experimental_attachments, not in the parts) are what the message came with (attached_files)
        unwrapped_message = {**{k: v for k, v in obj.items() if k != "content"}, "parts": content["parts"]}
        attachments = content.get("experimental_attachments")
        if isinstance(attachments, list) and attachments:
            unwrapped_message["files"] = attachments
        return unwrapped_message
    for shape in _MESSAGE_SHAPES:  # the first that reads the object as a message (event, fragments, typed, ...)
        found = shape(obj)
        if found is not None:
            return found
    return obj


# Rust's serde writes an enum's variant as an object of one key naming it (externally tagged): a thread's messages
# ``{"User": {...}}`` / ``{"Agent": {...}}`` and their parts ``{"Text": ...}`` / ``{"ToolUse": {...}}`` (Zed's agent
# threads, ``threads.data`` as the agent crate serialises a ``DbThread``).
TAGGED_ROLES = {"User": "user", "Agent": "assistant", "Assistant": "assistant", "System": "system"}
# Unit variants of a tagged thread's messages, written as bare strings (Zed's ``Message::Resume``)
TAGGED_UNIT_VARIANTS = frozenset({"Resume"})
# Why such a thread (:func:`thread_without_request`) lacks the system prompt and the tools: built for each request.
THREAD_WITHOUT_REQUEST = "an editor's agent thread (Zed's) keeps neither the system prompt nor the tools it sent"


def thread_without_request(messages: Any) -> bool:
    """Whether a message list is a thread as an editor's agent stores it, messages that are Rust enum variants
    (:data:`TAGGED_ROLES`) or typed ``segments`` beside their ``tool_uses`` (Zed's agent threads): the system prompt
    and the tool schemas it sent with each request are built at the time and not stored."""
    return isinstance(messages, list) and any(
        isinstance(m, dict)
        and ((len(m) == 1 and next(iter(m)) in TAGGED_ROLES) or ("segments" in m and "tool_uses" in m))
        for m in messages
    )


def _dynamic_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    """A call as an AI SDK UI message's ``dynamic-tool`` part, its result not yet known (the part the normaliser splits
    into the reply's call and, once ``state`` is ``output-available``, the result after it)."""
    return {
        "type": "dynamic-tool",
        "toolCallId": call_id,
        "toolName": name,
        "input": arguments,
        "state": "input-available",
    }


def _tagged_text(value: Any) -> Any:
    """A tagged text (``{"Text": ...}``, or a list of such parts) as its text; anything else as it is."""
    if isinstance(value, dict) and set(value) == {"Text"}:
        return value["Text"]
    if isinstance(value, list) and value and all(isinstance(v, dict) and set(v) == {"Text"} for v in value):
        return "".join(str(v["Text"]) for v in value)
    return value


def _tagged_message(obj: dict[str, Any]) -> dict[str, Any] | None:
    """An externally tagged message (:data:`TAGGED_ROLES`) as the message it stands for: ``Text`` parts as text,
    ``Thinking`` as reasoning, each ``ToolUse`` a call holding the result the message keeps for it under
    ``tool_results`` (by call id: Zed sends them after the reply, as the next user message), as an AI SDK UI
    message's ``dynamic-tool`` part does; any other part (a ``Mention`` whose file content was sent with the text, an
    image) left as it is, for the normaliser to refuse; a mention without content adds nothing to what was sent. None
    when the variant holds no content list."""
    ((tag, body),) = obj.items()
    if not isinstance(body, dict) or not isinstance(body.get("content"), list):
        return None
    results = body.get("tool_results")
    if isinstance(results, list):
        results = {r.get("tool_use_id"): r for r in results if isinstance(r, dict)}
    parts: list[Any] = []
    for item in body["content"]:
        kind, value = next(iter(item.items())) if isinstance(item, dict) and len(item) == 1 else (None, item)
        if kind == "Text" and isinstance(value, str):
            parts.append({"type": "text", "text": value})
        elif kind == "Mention" and isinstance(value, dict) and not value.get("content"):
            continue  # a mention sends its content beside the text (which holds its link): here none
        elif kind == "Thinking" and isinstance(value, dict) and isinstance(value.get("text"), str):
            parts.append({"type": "reasoning", "text": value["text"]})
        elif kind == "ToolUse" and isinstance(value, dict):
            call = _dynamic_call(value.get("id"), value.get("name"), value.get("input", {}))
            result = results.get(value.get("id")) if isinstance(results, dict) else None
            if isinstance(result, dict):
                call |= {"state": "output-available", "output": _tagged_text(result.get("content"))}
            parts.append(call)
        else:
            parts.append(item)
    return {"role": TAGGED_ROLES[tag], "content": parts}


def _segmented_message(obj: dict[str, Any]) -> dict[str, Any]:
    """A message that keeps its text in typed ``segments`` and its calls in ``tool_uses`` beside their
    ``tool_results`` (Zed's agent threads before 0.3: ``SerializedMessage``) as the message it stands for: the
    ``context`` loaded for it (the files and rules it was sent with) first, as Zed puts it in the request, then the
    segments (text, thinking as reasoning; a redacted one kept for the normaliser to refuse), each call holding its
    result as an AI SDK UI message's ``dynamic-tool`` part does."""
    parts: list[Any] = []
    if isinstance(obj.get("context"), str) and obj["context"]:
        parts.append({"type": "text", "text": obj["context"]})
    for segment in obj["segments"]:
        kind = segment.get("type") if isinstance(segment, dict) else None
        if kind == "text" and isinstance(segment.get("text"), str):
            if segment["text"]:
                parts.append({"type": "text", "text": segment["text"]})
        elif kind == "thinking" and isinstance(segment.get("text"), str):
            parts.append({"type": "reasoning", "text": segment["text"]})
        else:
            parts.append(segment)
    results = {r.get("tool_use_id"): r for r in obj.get("tool_results") or () if isinstance(r, dict)}
    for use in obj.get("tool_uses") or ():
        if not isinstance(use, dict):
            parts.append(use)
            continue
        call = _dynamic_call(use.get("id"), use.get("name"), use.get("input", {}))
        result = results.pop(use.get("id"), None)
        if result is not None:
            call |= {"state": "output-available", "output": _tagged_text(result.get("content"))}
        parts.append(call)
    parts.extend({"type": "tool-result", "toolCallId": k, "output": r.get("content")} for k, r in results.items())
    keep = ("role", "id")
    return {**{k: obj[k] for k in keep if k in obj}, "content": parts}


def _llama_index_message(obj: dict[str, Any]) -> dict[str, Any]:
    """A LlamaIndex ``ChatMessage`` (``{"role", "additional_kwargs", "blocks"}``; ``content`` before 0.12) as the
    OpenAI message it stands for: its blocks as parts (``block_type`` text, thinking as reasoning, ``tool_call``
    blocks as calls, an image by its URL; any other block kept for the normaliser to refuse), and what its LLM
    integrations keep in ``additional_kwargs``: OpenAI's ``tool_calls``, a tool message's ``tool_call_id`` and ``name``
    (a chat store's messages, an agent's memory). A message without blocks keeps its content."""
    kwargs = obj["additional_kwargs"]
    out: dict[str, Any] = {k: v for k, v in obj.items() if k not in ("additional_kwargs", "blocks")}
    blocks = obj.get("blocks")
    if isinstance(blocks, list):
        parts: list[Any] = []
        calls: list[Any] = []
        for block in blocks:
            kind = block.get("block_type") if isinstance(block, dict) else None
            if kind == "text":
                parts.append({"type": "text", "text": block.get("text", "")})
            elif kind == "thinking" and isinstance(block.get("content"), str | None):
                # ThinkingBlock.content is optional; several blocks are one reasoning, in order
                thought = block.get("content") or ""
                out["reasoning_content"] = "\n".join(t for t in (out.get("reasoning_content"), thought) if t)
            elif kind == "tool_call":
                fn = {"name": block.get("tool_name"), "arguments": block.get("tool_kwargs", {})}
                calls.append({"id": block.get("tool_call_id"), "type": "function", "function": fn})
            elif kind == "image" and isinstance(block.get("url"), str):
                parts.append({"type": "image_url", "image_url": {"url": block["url"]}})
            else:
                parts.append(block)
        out["content"] = parts
        if calls:
            out["tool_calls"] = calls
    for key in ("tool_calls", "tool_call_id", "name"):
        if kwargs.get(key) is not None and key not in out:
            out[key] = kwargs[key]
    return out


# The fragments of a DeepSeek chat message (its data export's ``mapping`` nodes, its web API's ``chat_messages``):
# the side each says spoke, and the part it is. Other fragments (``SEARCH``, ``TOOL_SEARCH``, ``READ_LINK``: what the
# service fetched and showed the model, which the export does not hold) are kept as parts no reader reads, so the
# message is refused, never trained after a context without them.
_FRAGMENT_SIDES = {"REQUEST": "user", "RESPONSE": "assistant", "THINK": "assistant"}


def _fragments_message(obj: dict[str, Any]) -> dict[str, Any] | None:
    """A message that keeps its content as typed ``fragments`` (``[{"type": "REQUEST" | "THINK" | "RESPONSE" | ...,
    "content"}]``) and no content key, as a message of parts (THINK its reasoning); its side is its role key's, or
    the one its fragments name (the export's nodes have no role). None for anything else."""
    fragments = obj.get("fragments")
    if not isinstance(fragments, list) or not fragments or any(k in obj for k in CONTENT_KEYS):
        return None
    if not all(isinstance(f, dict) and isinstance(f.get("type"), str) for f in fragments):
        return None
    sides = {_FRAGMENT_SIDES[f["type"]] for f in fragments if f["type"] in _FRAGMENT_SIDES}
    role = next((obj[k] for k in ROLE_KEYS if isinstance(obj.get(k), str)), None)
    if role is None and len(sides) != 1:
        return None
    parts: list[dict[str, Any]] = []
    for fragment in fragments:
        kind, text = fragment["type"], fragment.get("content")
        if kind == "THINK":
            parts.append({"type": "reasoning", "text": text})
        elif kind in _FRAGMENT_SIDES:
            parts.append({"type": "text", "text": text})
        else:
            parts.append({"type": f"fragment:{kind}", "content": text})
    rest = {k: v for k, v in obj.items() if k != "fragments"}
    return {**rest, "role": role if role is not None else sides.pop(), "content": parts}


# The item of a typed ``contents`` list (Microsoft Agent Framework's ``ChatMessage.to_dict``) that holds the call's
# token counts, not anything the message said: passed over.
_CONTENTS_USAGE = "usage"


def _typed_contents_message(obj: dict[str, Any]) -> dict[str, Any] | None:
    """A message whose role is a serialised enum object (``{"type": "role", "value": "assistant"}``) and whose
    content is a ``contents`` list of typed items (Microsoft Agent Framework's ``ChatMessage.to_dict``, the messages
    of a serialised ``AgentThread``'s ``chat_message_store_state``: ``text``, ``text_reasoning``, ``function_call``
    ``{call_id, name, arguments}``, ``function_result`` ``{call_id, result}``, ``usage``), as a message of parts:
    calls and results in the agent-SDK shape, the speaking agent's ``author_name`` its name (a thread several agents
    wrote is seen as such), the usage item passed over. None for anything else (a content key of its own, a plain
    role string)."""
    role = obj.get("role")
    contents = obj.get("contents")
    if not isinstance(contents, list) or any(k in obj for k in CONTENT_KEYS):
        return None
    value = role.get("value") if isinstance(role, dict) else None
    if not isinstance(value, str) or canonical_role(value) is None:
        return None
    if not all(isinstance(c, dict) and isinstance(c.get("type"), str) for c in contents):
        return None
    parts: list[dict[str, Any]] = []
    for item in contents:
        kind = item["type"]
        if kind == "text":
            parts.append({"type": "text", "text": item.get("text")})
        elif kind == "text_reasoning":
            parts.append({"type": "reasoning", "text": item.get("text")})
        elif kind == "function_call":
            parts.append(
                {
                    "type": "tool-call",
                    "toolCallId": item.get("call_id"),
                    "toolName": item.get("name"),
                    "input": item.get("arguments"),
                }
            )
        elif kind == "function_result":
            parts.append({"type": "tool-result", "toolCallId": item.get("call_id"), "output": item.get("result")})
        elif kind != _CONTENTS_USAGE:
            parts.append({"type": f"agent_framework:{kind}"})  # not read: rejected by the part reader, named
    rest = {k: v for k, v in obj.items() if k not in ("role", "contents", "author_name")}
    out: dict[str, Any] = {**rest, "role": value, "content": parts}
    if isinstance(obj.get("author_name"), str) and canonical_role(value) == "assistant":
        out["name"] = obj["author_name"]
    return out


# LobeChat's separator between a plugin's identifier, its API's name and its type in the function name it sends.
_PLUGIN_SEPARATOR = "____"
# OpenAI's limit on a function's name: LobeChat sends a longer one hashed, a name the log does not keep.
_MAX_FUNCTION_NAME = 64


def _plugin_calls_message(obj: dict[str, Any]) -> dict[str, Any] | None:
    """An assistant message that keeps its calls as plugin calls under ``tools`` (LobeChat's ``ChatMessage.tools``:
    ``[{id, identifier, apiName, arguments, type}]``) as one with OpenAI ``tool_calls``, each named as LobeChat named
    the function it sent (``genToolCallingName``: the identifier, the API's name and, for a type other than
    ``default``, the type, joined by ``____``). A name of 64 characters or more was sent hashed, which the log does
    not keep: such a message is left as it is (its calls unread, its reply not trained as text). None for anything
    else (a list of tool schemas, calls in their own key)."""
    tools = obj.get("tools")
    if not isinstance(tools, list) or not tools or any(k in obj for k in CALL_KEYS):
        return None
    if not all(isinstance(t, dict) and {"id", "identifier", "apiName", "arguments"} <= t.keys() for t in tools):
        return None
    calls = []
    for tool in tools:
        kind = tool.get("type")
        name = f"{tool['identifier']}{_PLUGIN_SEPARATOR}{tool['apiName']}"
        if isinstance(kind, str) and kind and kind != "default":
            name += f"{_PLUGIN_SEPARATOR}{kind}"
        if len(name) >= _MAX_FUNCTION_NAME:
            return None
        calls.append({"id": tool["id"], "type": "function", "function": {"name": name, "arguments": tool["arguments"]}})
    rest = {k: v for k, v in obj.items() if k != "tools"}
    return {**rest, "tool_calls": calls}


def _part_fragments_message(obj: dict[str, Any]) -> dict[str, Any] | None:
    """A message whose content is ``fragments`` each holding a typed ``part`` (big-AGI's ``DMessage``: ``{ft:
    "content", part: {pt: "text", text}}``, a model annotation ``{pt: "ma", aType: "reasoning", aText}``; ``ft:
    "void"`` fragments are the UI's placeholders and annotations, never sent), as a message of parts; any other part
    (tool invocations and responses, attachments) is named, so the part reader refuses it, counted. None for
    anything else (a content key of its own)."""
    fragments = obj.get("fragments")
    if not isinstance(fragments, list) or not fragments or any(k in obj for k in CONTENT_KEYS):
        return None
    if not all(isinstance(f, dict) and isinstance(f.get("ft"), str) for f in fragments):
        return None
    parts: list[dict[str, Any]] = []
    for fragment in fragments:
        part = fragment.get("part")
        if fragment["ft"] == "void":
            continue
        kind = part.get("pt") if isinstance(part, dict) else None
        if fragment["ft"] != "content" or not isinstance(part, dict):
            parts.append({"type": f"fragment:{fragment['ft']}"})
        elif kind == "text":
            parts.append({"type": "text", "text": part.get("text")})
        elif kind == "ma" and part.get("aType") == "reasoning":
            parts.append({"type": "reasoning", "text": part.get("aText")})
        else:
            parts.append({"type": f"fragment:{kind}"})
    rest = {k: v for k, v in obj.items() if k != "fragments"}
    return {**rest, "content": parts}


def _system_prompt_text(obj: dict[str, Any]) -> dict[str, Any] | None:
    """A system message that keeps its text under ``system_prompt``, its content key empty (nebius'
    SWE-agent-trajectories: ``{"role": "system", "system_prompt": "SETTING: ...", "text": null}``), as that text under
    its content key; None for anything else (a message with content of its own keeps it)."""
    prompt = obj.get("system_prompt")
    if not isinstance(prompt, str) or not prompt:
        return None
    if not any(isinstance(obj.get(k), str) and canonical_role(obj[k]) == "system" for k in ROLE_KEYS):
        return None
    key = next((k for k in CONTENT_KEYS if k in obj), "content")
    return {**obj, key: prompt} if obj.get(key) in (None, "") else None


# Keys under which a message keeps its content split into the steps of its generation (LM Studio's ``steps``, each
# a ``contentBlock`` holding content parts, beside status and debug steps that hold none).
STEP_KEYS = ("steps",)
# A step's tool call and tool result parts (LM Studio's, as its SDK's ``ChatMessagePartToolCallRequestData`` /
# ``ChatMessagePartToolCallResultData`` define them: ``{"type": "toolCallRequest", "toolCallRequest": {id, type,
# name, arguments}}``, ``{"type": "toolCallResult", "content", "toolCallId"}``).
STEP_CALL, STEP_RESULT = "toolCallRequest", "toolCallResult"


def _stepped_content(obj: dict[str, Any]) -> dict[str, Any] | None:
    """A message whose content is split across its steps (a role key, no content key, a ``steps`` list whose items
    hold content parts) as one message of those parts, in order; the steps that hold no content (a UI's status and
    debug blocks) say nothing the model saw. Steps that call tools are several model calls in one message: they are
    given as the steps of a UI message (:func:`_tool_steps`), which the normaliser reads as one assistant message per
    call, each followed by its calls' results. None for anything else."""
    if not any(k in obj for k in STEP_KEYS):  # most messages: decided by one lookup
        return None
    if not any(isinstance(obj.get(k), str) for k in ROLE_KEYS) or any(k in obj for k in CONTENT_KEYS):
        return None
    for key in STEP_KEYS:
        steps = obj.get(key)
        if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
            continue
        held = [s["content"] for s in steps if "content" in s]
        if not held or not all(isinstance(c, list) and all(isinstance(p, dict) for p in c) for c in held):
            continue
        rest = {k: v for k, v in obj.items() if k != key}
        return {**rest, "content": _tool_steps(held) or [part for parts in held for part in parts]}
    return None


def _tool_steps(held: list[list[dict[str, Any]]]) -> list[dict[str, Any]] | None:
    """The content steps of a reply that called tools (LM Studio: a step of text and ``toolCallRequest`` parts, a
    step of ``toolCallResult`` parts, then the next call's text) as the parts of an AI SDK UI message: each call a
    ``dynamic-tool`` part holding its result (the result answering its ``toolCallId``, or else the first call still
    unanswered), a ``step-start`` wherever a model call follows results. None when no step calls a tool. A result
    that answers no call is left as it is, for the normaliser to refuse (never dropped)."""
    if not any(p.get("type") in (STEP_CALL, STEP_RESULT) for parts in held for p in parts):
        return None
    out: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    after_results = False
    for parts in held:
        results = [p for p in parts if p.get("type") == STEP_RESULT]
        if results and len(results) == len(parts):
            for result in results:
                call = _answered_call(calls, result.get("toolCallId"))
                if call is None:
                    out.append(result)
                    continue
                call.update(state="output-available", output=result.get("content"))
            after_results = True
            continue
        if after_results and parts:
            out.append({"type": "step-start"})
            after_results = False
        for part in parts:
            request = part.get(STEP_CALL) if part.get("type") == STEP_CALL else None
            if not isinstance(request, dict):
                out.append(part)
                continue
            call = _dynamic_call(request.get("id"), request.get("name"), request.get("arguments", {}))
            calls.append(call)
            out.append(call)
    return out


def _answered_call(calls: list[dict[str, Any]], call_id: Any) -> dict[str, Any] | None:
    """The call a result answers: the one with its id, else (a result logged without one) the first unanswered."""
    open_calls = [c for c in calls if c["state"] != "output-available"]
    if call_id is not None:
        return next((c for c in open_calls if str(c["toolCallId"]) == str(call_id)), None)
    return open_calls[0] if open_calls else None


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
    piece = piece_role(obj)  # a Responses call, output or reasoning item: its type says what it is
    return ("type", piece) if piece is not None else None


# Keys by which a chat UI's export names the side that spoke, instead of the role an API request carries: an export
# of what the user saw, never of the request the product built (its system prompt is not in it).
UI_SIDE_KEYS = ("sender", *ROLE_FLAGS)


def names_ui_side(obj: Any) -> bool:
    """Whether a message names its side the way a chat UI's export does (:data:`UI_SIDE_KEYS`: Claude.ai's
    ``sender``, LibreChat's ``isCreatedByUser``, SillyTavern's ``is_user``), not by a role key."""
    hit = role_of(obj)
    return hit is not None and hit[0] in UI_SIDE_KEYS


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
    return content_key_of(data) is not None or any(k in data for k in CALL_KEYS) or is_turn_piece(data)


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
            if any(k not in inner and _sent_messages(v) for k, v in item.items()):
                return None  # a call: the messages it sent beside the reply (a trace's generations), not a wrapper
        else:
            return None
        if len(inner) != 1:
            return None
        keys.add(inner[0])
    if len(keys) != 1:
        return None
    key = keys.pop()
    messages = [item[int(key)] if isinstance(item, list) else _with_context_items(item, key) for item in value]
    return (key, messages) if is_message_list(messages) else None


def _sent_messages(value: Any) -> bool:
    """Whether a field beside a reply holds the messages a call sent: a message list, or a request body holding one
    (Langfuse's generation ``input`` is ``{"messages", "tools"}`` when the call sent tools)."""
    if isinstance(value, list):
        return is_message_list(value)
    return isinstance(value, dict) and any(isinstance(v, list) and is_message_list(v) for v in value.values())


def _with_context_items(wrapper: dict[str, Any], key: str) -> Any:
    """The message ``wrapper[key]``, with the context items the wrapper keeps beside it (:data:`CONTEXT_ITEMS`): what
    it was sent with, which the normaliser then cannot leave out of its context unsaid."""
    message = wrapper[key]
    items = wrapper.get(CONTEXT_ITEMS)
    if isinstance(message, dict) and isinstance(items, list) and items:
        return message | {CONTEXT_ITEMS: items}
    return message


# The inputs a message's step logged after it (an ATIF step's observation when the step called no tool): the user
# messages the normaliser adds after the message.
OBSERVATION_INPUTS = "observation_inputs"
# What a message stands for when the text the model was sent is not in the log (an ATIF system step after the
# first: the account of an operation the harness ran, "Added workspace context"): the normaliser's gap.
UNLOGGED_INPUT = "unlogged_input"
# The sources of an Agent Trajectory Interchange Format step (Harbor's ``trajectory.json``) and the roles they are.
_ATIF_ROLES = {"system": "system", "user": "user", "agent": "assistant"}


def _atif_message(step: dict[str, Any]) -> dict[str, Any]:
    """An ATIF step (``{"step_id", "source", "message", "reasoning_content", "tool_calls": [{tool_call_id,
    function_name, arguments}], "observation": {"results": [{source_call_id, content}]}, "metrics", "model_name"}``)
    as one message; an agent step's calls and their results as an AI SDK UI message's ``dynamic-tool`` parts, which
    the normaliser splits into the reply and the results after it. Its metrics' token counts are the call's usage,
    their ``prompt_token_ids`` / ``completion_token_ids`` / ``logprobs`` what the engine logged of it. A
    step copied from an earlier context (``is_copied_context``: a handoff's history) is context, never a reply here.
    A ``system`` step is the system prompt only as the trajectory's first step; later ones are messages the harness
    ran during the run (RFC 0001 v1.2: subagent delegation, context management, environment resets), whose message
    is the harness's account of it, not the text the model was sent: OpenHands' "Added workspace context" stands for
    the workspace context it sends as a user message (repository, runtime and date, built from its templates), its
    "Retrieving content for: ..." for a recall it never sends. Never a new system prompt replacing the first, nor
    read as the input it describes: the step is marked :data:`UNLOGGED_INPUT`, a gap (the replies after it were
    sampled after text the log does not hold)."""
    role = _ATIF_ROLES[step["source"]]
    if role == "system" and step["step_id"] != 1:
        text = step["message"] if isinstance(step["message"], str) else ""
        return {"role": "user", "content": text, UNLOGGED_INPUT: f"ATIF system step {step['step_id']}"}
    parts: list[dict[str, Any]] = []
    if isinstance(step.get("reasoning_content"), str) and step["reasoning_content"]:
        parts.append({"type": "reasoning", "text": step["reasoning_content"]})
    if isinstance(step["message"], str) and step["message"]:
        parts.append({"type": "text", "text": step["message"]})
    elif isinstance(step["message"], list):
        parts.extend(step["message"])
    observation = step.get("observation")
    results = observation.get("results") if isinstance(observation, dict) else None
    answers = [r for r in results or [] if isinstance(r, dict) and "content" in r]
    for call in step.get("tool_calls") or []:
        if not isinstance(call, dict):
            parts.append(call)
            continue
        call_id = call.get("tool_call_id")
        part = {"type": "dynamic-tool", "toolCallId": call_id, "toolName": call.get("function_name")}
        part["input"] = call.get("arguments", {})
        # the result naming the call, or (Terminus-2 logs its results without source_call_id) the next one unnamed
        answer = next((r for r in answers if r.get("source_call_id") == call_id), None)
        answer = answer or next((r for r in answers if r.get("source_call_id") is None), None)
        if answer is not None:
            answers.remove(answer)
            part |= {"state": "output-available", "output": answer["content"]}
        else:
            part["state"] = "input-available"
        parts.append(part)
    out: dict[str, Any] = {"role": role, "parts": parts}
    if not step.get("tool_calls") and all(r.get("source_call_id") is None for r in answers):
        # a step that called nothing: its observation is what the harness sent next (Terminus-2 sends the terminal's
        # output as the next user message), an input after the reply
        if answers:
            out[OBSERVATION_INPUTS] = [r["content"] for r in answers]
        answers = []
    # results no call of the step asked for: left as result parts, which the normaliser refuses (never dropped)
    parts.extend(
        {"type": "tool-result", "toolCallId": r.get("source_call_id"), "output": r["content"]} for r in answers
    )
    if step.get("is_copied_context") is True and role == "assistant":
        out["weight"] = 0  # copied from an earlier context (a handoff's history): sampled there, not here
    metrics = step.get("metrics")
    if role == "assistant" and isinstance(metrics, dict) and isinstance(metrics.get("prompt_tokens"), int):
        out["usage"] = {k: metrics[k] for k in ("prompt_tokens", "completion_tokens") if k in metrics}
    if role == "assistant" and isinstance(metrics, dict):  # the engine's ids (ATIF v1.3, v1.4) and logprobs
        out |= {k: metrics[k] for k in ("prompt_token_ids", "completion_token_ids", "logprobs") if k in metrics}
    if isinstance(step.get("model_name"), str):
        out["model"] = step["model_name"]
    return out


def _memory_record_message(backend: str, message: dict[str, Any]) -> dict[str, Any]:
    """A memory record's message as the backend was sent it (CAMEL's ``MemoryRecord.to_dict``: ``{"message":
    {"__class__", "role_name", "role_type", "content", ...}, "role_at_backend", "agent_id", ...}``): the role is the one
    at the backend (a system message's ``role_type`` says assistant, the agent's side); a ``FunctionCallingMessage``
    with ``args`` is the call, one with ``result`` its result, paired by ``tool_call_id``."""
    out: dict[str, Any] = {"role": backend, "content": message["content"]}
    name = message.get("func_name")
    call_id = message.get("tool_call_id")
    if isinstance(name, str) and "result" in message:
        result = message["result"]
        out.update(
            content=result if isinstance(result, str) else json.dumps(result, ensure_ascii=False),
            name=name,
            tool_call_id=call_id,
        )
    elif isinstance(name, str) and "args" in message:
        arguments = json.dumps(message["args"] if message["args"] is not None else {}, ensure_ascii=False)
        out["tool_calls"] = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]
    return out


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
            assistants -= _joined_pieces(item)  # counted below as messages, but pieces of the reply before them
        elif isinstance(item, dict):
            if is_message_like(item):
                messages += 1
                hit = role_of(item)
                assistants += hit is not None and canonical_role(hit[1]) in ("assistant", "call")
                if is_wrapper(item):
                    continue  # a wrapper (an OpenAI choice, LangChain's type + data): its message is this one
            stack.extend(v for v in item.values() if isinstance(v, dict | list))
    return messages, assistants


def _joined_pieces(items: list[Any]) -> int:
    """How many of a list's assistant pieces (:mod:`msgtrain.ingest.common.turn_pieces`) join the reply the piece
    before them began (a call after the text or calls of the same reply): one reply, however many pieces."""
    joined, open_reply, called = 0, False, False
    for item in items:
        if not assistant_piece(item):
            open_reply = False
            continue
        call = piece_is_call(item)
        if joins_reply(item, open_reply, called):
            joined += 1
            called = called or call
        else:
            open_reply, called = True, call
    return joined


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


def said(message: Any) -> str:
    """What a message says: its content as compact JSON (a text as itself), the same for a reply and its copies
    whatever wraps them, to tell a transcript's copy of a call's reply from another reply."""
    inner = unwrapped(message)
    if isinstance(inner, dict):
        key = content_key_of(inner)
        inner = inner.get(key) if key is not None else inner
    return json.dumps(inner, sort_keys=True, ensure_ascii=False, default=str)


# The keys that tell a wrapper :func:`_unwrap_wrapper` reads (besides ``content`` holding an object: Mastra's stored
# messages, an ADK event): LangChain's ``data`` and ``dumpd`` ``kwargs``, opencode's ``info``, an ATIF ``step_id``,
# CAMEL's ``role_at_backend``, a choice's or generation's ``message``, a tagged variant's key, Zed's ``segments``,
# LlamaIndex's ``additional_kwargs``, a ``system_prompt``, DeepSeek's ``fragments``, the :data:`STEP_KEYS`. A wrapper
# read there that needs a key not listed here would never be seen: ``tests/test_read_fast_paths.py`` checks the
# two agree over random and real messages.
_WRAPPER_KEYS = frozenset(
    {
        "data",
        "kwargs",
        "info",
        "step_id",
        "role_at_backend",
        "message",
        "segments",
        "additional_kwargs",
        "system_prompt",
        "fragments",
        "contents",
        "tools",
        *STEP_KEYS,
        *TAGGED_ROLES,
    }
)


# The message shapes a wrapper-less object is tried as, in order (the first that reads it wins): an event holding a
# message, a system prompt's text, fragments, part fragments, typed contents, plugin calls, stepped content.
_MESSAGE_SHAPES: tuple[Callable[[dict[str, Any]], dict[str, Any] | None], ...] = (
    _event_message,
    _system_prompt_text,
    _fragments_message,
    _part_fragments_message,
    _typed_contents_message,
    _plugin_calls_message,
    _stepped_content,
)
