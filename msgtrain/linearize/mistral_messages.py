"""What a logged conversation becomes before mistral-common encodes it: the messages as a Mistral version can take
them (:func:`served_messages`) and the checks mistral-common makes that concern serving, not the format
(:func:`relaxed_validator`).

Invariants:
- Tool-call ids are served as vLLM serves them (``truncate_tool_call_ids``): an id longer than 9 characters is cut to
  its last 9, on calls and on results alike. An id the version would still refuse (shorter than 9, or not letters
  and digits in its last 9, before v13; empty or ``null`` from v13), which vLLM answers with an HTTP 400, becomes 9
  letters and digits derived from a hash of the whole id (:func:`served_call_id`): one function of the id, so a call
  and its result get the same served id in every turn of a log and in every run.
- What a version cannot encode is left out of the message, as Mistral's own chat templates of that version do:
  reasoning without the ``[THINK]`` tokens (before v13, or a v13 file without them); the text of an assistant message
  that also calls tools before v7 (v1 to v3 encode an assistant message as text or as ``[TOOL_CALLS]``, never both;
  consecutive assistant messages count as one, as mistral-common joins them).
  The linearizer flags a sampled turn that lost any of it (``template_dropped_*``).
- History holds only answered calls (msgtrain's pairing rule): a call in the context without a result before the
  next assistant message (a built-in tool whose result the log lacks, an interrupted run) is left out of its message
  (the message too when nothing is left), and so is a result no call of its assistant message asked for.
  mistral-common refuses both ("Not the same number of function calls and responses"). The sampled message itself
  keeps every call it made.
- Media the tokenizer has no encoder for (an image for a text-only model), and media given by URL (not ``data:``),
  which mistral-common would download to count its ``[IMG]`` tokens, are left out and the sample is flagged
  ``media_not_rendered``, as for chat templates: its tokens hold the text around the media. Nothing is fetched.
- Some of mistral-common's checks are about what a server accepts, not about the format, and are relaxed for logs
  written elsewhere: a system message after an assistant or tool message (e.g. Codex's developer notices between a
  call and its result) is encoded where the format puts every system message (in place as ``[SYSTEM_PROMPT]`` from
  v7; joined into the one system prompt before); a tool whose parameters are not valid JSON Schema (``"type":
  "dict"``) and a function name outside ``[a-zA-Z0-9_-]{1,64}`` (``functions.exec``) are shown as logged.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Sequence
from typing import Any

ID_LENGTH = 9  # Mistral's tool-call ids: 9 letters or digits
_ID_ALPHABET = string.ascii_letters + string.digits
_NULL_ID = "null"  # mistral-common's placeholder for a call without an id


def served_call_id(call_id: str, *, free: bool = False) -> str:
    """The id a Mistral model is shown for a logged tool-call id: its last 9 characters when it is longer (vLLM's
    ``truncate_tool_call_ids``), else the id itself when the version takes it (9 letters or digits; any id but
    ``null`` from v13, ``free``), else 9 letters and digits derived from a hash of the whole id (vLLM refuses such
    an id; a log written elsewhere still has to be encoded, the same way every time)."""
    served = call_id[-ID_LENGTH:]
    valid = len(served) == ID_LENGTH and all(c in _ID_ALPHABET for c in served)
    if valid or (free and served and served != _NULL_ID):
        return served
    n = int.from_bytes(hashlib.blake2b(call_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")
    chars = []
    for _ in range(ID_LENGTH):
        n, k = divmod(n, len(_ID_ALPHABET))
        chars.append(_ID_ALPHABET[k])
    return "".join(chars)


def answered_only(messages: Sequence[dict[str, Any]], *, keep_last: bool) -> list[dict[str, Any]]:
    """The messages with each context call that no result answers (before the next assistant message) left out,
    and each result that answers no call of its assistant message; ``keep_last``: the last message is the sampled
    one and keeps its calls. Messages that lose nothing are passed as they are."""
    answered: list[set[str]] = []  # per message: the result ids that follow it up to the next assistant message
    pending: set[str] = set()
    for m in reversed(messages):
        answered.append(set(pending))
        if m.get("role") == "assistant":
            pending = set()
        elif m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str):
            pending.add(m["tool_call_id"])
    answered.reverse()
    out: list[dict[str, Any]] = []
    open_ids: set[str] = set()
    last = len(messages) - 1
    for k, m in enumerate(messages):
        role = m.get("role")
        calls = m.get("tool_calls") or ()
        if role == "assistant":
            if calls and not (keep_last and k == last):
                kept = [c for c in calls if c.get("id") in answered[k]]
                if len(kept) < len(calls):
                    if not kept and not m.get("content") and m.get("reasoning_content") is None:
                        open_ids = set()
                        continue
                    m = {**m, "tool_calls": kept} if kept else {k2: v for k2, v in m.items() if k2 != "tool_calls"}
                    calls = kept
            open_ids = {c.get("id") for c in calls}
        elif role == "tool":
            if m.get("tool_call_id") not in open_ids:
                continue
            open_ids.discard(m.get("tool_call_id"))
        out.append(m)
    return out


def text_or_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Before v7: the text of each run of consecutive assistant messages that calls tools left out (mistral-common
    joins the run into one message, and that message holds text or calls, never both)."""
    out = list(messages)
    k = 0
    while k < len(out):
        end = k
        while end < len(out) and out[end].get("role") == "assistant":
            end += 1
        run = out[k:end]
        if any(m.get("tool_calls") for m in run):
            # Text-only messages of the run go whole (nothing would be left of them).
            kept = [{**m, "content": None} if m.get("content") else m for m in run if m.get("tool_calls")]
            out[k:end] = kept
            end = k + len(kept)
        k = end + 1 if end == k else end
    return out


def chat_tool(tool: Any) -> Any:
    """A tool schema in the chat-completions shape mistral-common reads: a Responses API tool (``name`` and
    ``parameters`` beside ``"type": "function"``) wrapped in ``function``, as vLLM does before encoding."""
    if isinstance(tool, dict) and "function" not in tool and "name" in tool:
        return {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
    return tool


# The OpenAI part type of each modality mistral-common encodes, and the encoder it needs on the instruct tokenizer.
MEDIA_PARTS = {"image": ("image_url", "image_encoder"), "audio": ("input_audio", "audio_encoder")}


def media_encodable(modality: str, url: str, encoders: Sequence[str]) -> bool:
    """Whether a media part is encoded: the tokenizer has an encoder for its modality (``encoders``) and its bytes
    are inline (a ``data:`` URL). mistral-common would download any other URL; msgtrain fetches nothing."""
    return modality in encoders and url.startswith("data:")


def without_media(messages: list[dict[str, Any]], encoders: Sequence[str]) -> list[dict[str, Any]]:
    """The messages with each media part :func:`media_encodable` refuses left out (a message left without parts
    keeps empty text). Messages without such parts are passed as they are."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            kept = [p for p in content if _kept_part(p, encoders)]
            if len(kept) < len(content):
                m = {**m, "content": kept or ""}
        out.append(m)
    return out


def _kept_part(part: Any, encoders: Sequence[str]) -> bool:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in (None, "text", "thinking"):
        return True
    modality = next((mod for mod, (name, _) in MEDIA_PARTS.items() if name == kind), str(kind))
    media = part.get(str(kind))
    url = media.get("url") if isinstance(media, dict) else media
    return media_encodable(modality, url if isinstance(url, str) else "", encoders)


def relaxed_validator(validator: Any) -> Any:
    """A copy of mistral-common's request validator (``validator``'s own version and mode) that lets a system
    message follow any role and shows tool schemas and function names as they are logged."""
    from mistral_common.protocol.instruct.messages import Roles

    base = type(validator)

    class Relaxed(base):  # type: ignore[misc,valid-type]
        def _validate_message_order(self, messages: list[Any]) -> None:
            super()._validate_message_order([m for m in messages if m.role != Roles.system])

        def _validate_function(self, function: Any) -> None:
            return  # a schema that is not JSON Schema, a name with a dot: the model is shown them as text

        def _validate_function_call(self, function_call: Any) -> None:
            return

        def _validate_tool_message(self, message: Any) -> None:
            super()._validate_tool_message(message.model_copy(update={"name": None}))

    Relaxed.__name__ = f"Relaxed{base.__name__}"
    return Relaxed(mode=validator._mode)
