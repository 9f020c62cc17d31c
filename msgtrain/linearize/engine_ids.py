"""Logged engine ids checked against the logged text: ids that do not decode to what the log says was sampled are
not trained as if they did.

A log's ``token_ids`` (and ``prompt_token_ids``) are the truth for training only when they are this tokenizer's ids
of the text the log holds. An id range check cannot tell: ids of another vocabulary, or a log whose ids were written
for a different reply, are in range and decode to other text (a toy log's Qwen3 ids decode to ``",."`` where its
reply says ``"Four"``). So the ids are decoded and compared with the message:

- completion ids: one of the pieces of the reply a template prints verbatim (a text part, a tool call's name) must
  occur in the decoded completion, whole. Not every piece: a template may leave the text of a tool-calling reply or
  its reasoning out of what the model saw and sampled (Qwen2.5's and Llama's drop reasoning, some drop text beside
  calls), and an API may log a summary of reasoning rather than the sampled text. A piece that opens with a tagged
  block (``<think>…</think>``) may be held without it: a template may strip the block a logged text begins with
  (DeepSeek R1's). Whole, not its end: rollouts of one task often end alike (a code fence, ``return 0; }``, the same
  boxed answer), so ids of a sibling reply hold the end of this one (NeMo Gym's real competitive-coding rollouts:
  five C++ answers ending in ``return 0; }`` and a code fence). Ids of another vocabulary or of another reply hold none;
- prompt ids: the text of the last user message of the context must occur in the decoded prompt, whole.

Both comparisons ignore whitespace (engines and APIs strip or re-indent around a reply; templates add newlines), and
nothing else: an argument string is not compared, because a serving engine's tool parser re-serializes arguments.

This is the engine-ids side; the rendered side (a template's rendering of the logged message) is checked where
completions are cut from renderings (:mod:`msgtrain.linearize.completion`). What a mismatch does is the user's choice
(``--engine-ids-mismatch``): ``drop`` the turn (reason ``engine_ids_mismatch``, the default), ``render`` it from the
logged text with the chat template instead (flagged ``engine_ids_mismatch``), or ``keep`` the logged ids (flagged).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from msgtrain.model.message import OptionCallMessage, PartsMessage, TextPart

ENGINE_IDS_MISMATCH = "engine_ids_mismatch"
MismatchPolicy = Literal["drop", "render", "keep"]
MISMATCH_POLICIES: tuple[str, ...] = ("drop", "render", "keep")

_SPACE = re.compile(r"\s+")
_EXCERPT = 40
# A block a text opens with that a template may strip: <think>…</think> and its like.
_OPENING_BLOCK = re.compile(r"^\s*<([A-Za-z][\w-]*)>.*?</\1>", re.DOTALL)


def _squeeze(text: str) -> str:
    return _SPACE.sub("", text)


def reply_pieces(message: Any) -> list[str]:
    """The pieces of a sampled message that a chat template prints as they are (whitespace aside)."""
    pieces: list[str] = []
    for part in getattr(message, "parts", ()):
        if isinstance(part, TextPart):
            pieces.append(part.text)
    if isinstance(message, OptionCallMessage):
        pieces.extend(call.option_name for call in message.calls)
    return [p for p in pieces if _squeeze(p)]


def last_user_text(context: Sequence[Any]) -> str | None:
    """The text of the context's last user message (what any template prints verbatim just before a reply)."""
    for node in reversed(context):
        message = node.message
        if isinstance(message, PartsMessage) and message.role == "user":
            return message.text if _squeeze(message.text) else None
    return None


def _forms(piece: str) -> list[str]:
    """What the decoded ids may hold of ``piece`` (whitespace aside): all of it, or all but an opening tagged block."""
    whole = _squeeze(piece)
    opening = _OPENING_BLOCK.match(piece)
    rest = _squeeze(piece[opening.end() :]) if opening else ""
    return [whole, rest] if rest else [whole]


def _missing(pieces: Sequence[str], decoded: str) -> str | None:
    """The first piece, when the decoded text holds none of them whole (whitespace aside, an opening tagged block
    aside); None when it holds one."""
    squeezed = _squeeze(decoded)
    if not pieces or any(form in squeezed for piece in pieces for form in _forms(piece)):
        return None
    return pieces[0]


def engine_ids_disagree(
    decode: Callable[[list[int]], str],
    message: Any,
    context: Sequence[Any],
    token_ids: Sequence[int] | None,
    prompt_token_ids: Sequence[int] | None,
) -> str | None:
    """Why the logged ids are not the logged text (a message for the drop or the flag), or None when they agree."""
    if token_ids:  # no ids at all is a turn without trainable tokens, dropped as such
        decoded = decode(list(token_ids))
        piece = _missing(reply_pieces(message), decoded)
        if piece is not None:
            return (
                f"the logged completion ids decode to {decoded[:_EXCERPT]!r}, which does not hold the logged reply's "
                f"{piece[:_EXCERPT]!r}: the ids are not this tokenizer's ids of this reply (another model's "
                "vocabulary, or ids of another reply); --engine-ids-mismatch render trains the logged text instead"
            )
    if prompt_token_ids is not None:
        text = last_user_text(context)
        if text is not None and _missing([text], decode(list(prompt_token_ids))) is not None:
            return (
                f"the logged prompt ids do not hold the last user message {text[:_EXCERPT]!r}: they are not this "
                "tokenizer's ids of this context; --engine-ids-mismatch render renders the logged context instead"
            )
    return None
