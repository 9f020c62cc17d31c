"""Where a sampled turn's completion lies in the template's rendering of it, and what stopped its generation.

The rule (stated in README "What token-exact means"): let ``P`` be the context rendered with the generation prompt
(what the policy saw), ``B`` the context plus the message rendered without it, and ``A`` the context alone.

- When ``B`` starts with ``P`` (an append-only template) the completion is ``B`` after ``P``.
- Otherwise the template renders the message differently in history than what follows the generation prompt (it
  re-renders the message before it, appends a closing instruction, folds tool results into the turn): the
  generation prompt's *header* ``G`` is ``P`` after ``A`` (``P`` must extend ``A``); the message's rendering is what
  ``B`` inserts into ``A``; the completion is that insertion after ``G``'s first occurrence reaching past what
  ``A`` and ``B`` share. When history renders no such header, the header is the generation prompt up to one of its
  control tokens, or after one and its whitespace (longest first: what follows is a prefill, e.g. an empty
  thinking block). When history renders that prefill before a message's reasoning and this message has none, the
  prefill opened the model's reasoning, which the log lost: the turn is flagged ``reasoning_not_logged``. History's
  rendering of the message may start with the prefill's closing part (DeepSeek V3.2's ``</think>``), which the
  prompt already holds: the completion starts after it. When history renders
  none of it after the context but the context holds it (a turn still open: tool results written into the model's
  turn, Apertus), the header is empty. When ``B`` is exactly ``A`` with one insertion there, the insertion ends
  where ``A`` resumes; otherwise it ends where ``A`` and ``B`` share their tail again, and never inside the
  message's text: that shared tail is at most what ``B`` shares with the same conversation whose message's text is
  a probe (the message's calls and reasoning kept), i.e. what the template writes after the text. Without that
  bound, a message that ends like the one before it (two adjacent assistant messages both ending "… Please provide
  me the") would lose the words they share.
- What two renderings share is counted in whole control tokens: renderings that part inside a control token's
  text part at its start.
- The completion then ends at its first stop token followed only by template trailer (``_trim_completion`` in the
  linearizer): whitespace, or the generation header the prompt ends with (its ids after its last occurrence of
  that stop token), which a template that ignores ``add_generation_prompt`` (Command R7B's) renders after every
  conversation. A completion without a stop token ends with the one the model sampled when the template writes one
  right after the message once a following message exists (GLM's ``<|user|>`` / ``<|observation|>`` role headers),
  else (a template that marks no end of the turn: Command R+'s tool calls) with EOS, after the text without its
  trailing whitespace. The stop tokens are whatever stops generation (EOS, ``generation_config.json``'s
  ``eos_token_id`` list, what the template writes after an assistant message or after its tool calls).

- The completion is then checked (the linearizer's self-check): it must not hold a control token that opens
  another turn, nor another message's text (:func:`foreign_text`). When the rule's difference holds one, the
  template's history moves context away from the reply (Mistral NeMo's writes the system prompt only into the last
  user message): the completion is the message's own rendering where history puts it (:func:`moved_context_span`,
  the engine-mode rule), when that place ends as the prompt does; else the turn is dropped
  (``completion_mismatch``). docs/completion-rules.md states the guards.

Nothing here is per model: every case is decided by comparing renderings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from msgtrain.linearize.tokenizer import common_prefix_len

_THINK_END = "</think>"


class NotRecoverable(Exception):
    """The template does not render the sampled message after its generation prompt in any recoverable way."""


def _common_suffix_len(a: str, b: str) -> int:
    return common_prefix_len(a[::-1], b[::-1])


def _outside_controls(texts: Iterable[str], pos: int, controls: re.Pattern[str] | None, *, forward: bool) -> int:
    """``pos`` moved out of any control token whose text it falls strictly inside, in any of ``texts``: to the
    token's start (``forward`` False) or its end. Two renderings that part inside a control token's text (Command
    R7B's ``<|START_THINKING|>`` and ``<|START_RESPONSE|>`` share ``<|START_``) share no part of that token."""
    if controls is None:
        return pos
    moved = True
    while moved:
        moved = False
        for text in texts:
            for m in controls.finditer(text):
                if m.start() >= pos:
                    break
                if m.end() > pos:
                    pos, moved = (m.end() if forward else m.start()), True
                    break
    return pos


# The reasoning a message is rendered with to see whether the generation prompt opens the model's reasoning.
REASONING_PROBE = "msgtrain-reasoning-probe"
# The flag of a turn whose prompt opened the model's reasoning while the logged message carries none: the
# completion is the template's rendering of the message, without what the model sampled first.
REASONING_NOT_LOGGED = "reasoning_not_logged"


def completion_span(
    prompt: str,
    turn: str,
    context: Callable[[], str],
    control_starts: Callable[[str], Iterable[int]] | None = None,
    controls: re.Pattern[str] | None = None,
    with_reasoning: Callable[[], str] | None = None,
    flags: list[str] | None = None,
    with_probe_text: Callable[[], str] | None = None,
) -> tuple[int, int]:
    """``(start, end)`` of the sampled completion's text in ``turn`` (the rule in the module docstring).

    ``prompt`` is the context rendered with the generation prompt, ``turn`` the context plus the message rendered
    without it, ``context`` renders the context alone (only called when ``turn`` does not start with ``prompt``),
    ``control_starts`` gives the offsets in a text where a control token starts, ``controls`` matches control
    tokens' text: what two renderings share is counted in whole control tokens. ``with_reasoning`` renders the
    context and the message with :data:`REASONING_PROBE` as its reasoning (None when the message carries reasoning):
    a generation prompt whose prefill history renders only before a message's reasoning (MiniMax-M2's ``<think>``)
    opened the model's reasoning, which a message without it lost: ``reasoning_not_logged`` is appended to
    ``flags`` (the completion is still the message's rendering). ``with_probe_text`` renders the context and the
    message as :func:`with_probe_text` makes it (None when the message has no text): what ``turn`` shares
    with it at its end is what follows the text, which bounds the tail ``turn`` shares with the context.
    Raises :class:`NotRecoverable` with the reason when no rule applies.
    """
    if turn.startswith(prompt):
        return len(prompt), len(turn)
    ctx = context()
    if not prompt.startswith(ctx):
        raise NotRecoverable(
            "the generation prompt does not extend the context's own rendering, so the text the model generated "
            "after it cannot be told apart"
        )
    full_header = prompt[len(ctx) :]
    lcp = _outside_controls((ctx, turn), common_prefix_len(ctx, turn), controls, forward=False)
    i, header = lcp, ""
    if full_header:
        # The whole generation prompt first, then shorter headers: a generation prompt can end with a prefill that
        # history does not render (Gemma 4's empty thought channel; Apriel 1.6's plain "Here are my reasoning
        # steps:"), so its header is its part before or after a control token (never nothing: a header none of
        # which history renders is no header).
        cuts = sorted(_header_cuts(full_header, control_starts, controls), reverse=True)
        for header in [full_header, *(full_header[:k] for k in cuts)]:
            i = turn.find(header, max(0, lcp - len(header) + 1))
            if i >= 0:
                break
    if i < 0 and full_header in ctx:
        # History continues a turn the context already opened with this header (Apertus writes tool results into
        # the model's turn, which goes on without a new header): the message is what it inserts, no header.
        i, header = lcp, ""
    if i < 0:
        raise NotRecoverable(
            f"the template renders this message without its generation prompt's header {full_header!r}"
        )
    start = i + len(header)
    inserted = len(turn) - len(ctx)
    if i <= lcp and inserted >= len(header) and turn[i + inserted :] == ctx[i:]:
        end = i + inserted
    else:
        tail = _common_suffix_len(ctx[lcp:], turn[start:])
        probed = with_probe_text() if with_probe_text is not None and tail else ""
        if probed:
            tail = min(tail, _common_suffix_len(probed, turn[start:]))
        end = len(turn) - tail
        end = _outside_controls((turn,), end, controls, forward=True) if end > start else end
    if header != full_header and header:
        # History may render the prefill's closing part as the message's start (DeepSeek V3.2 prompts
        # "<think></think>" and renders "</think>" + content): the prompt holds it already, the model sampled what
        # follows. Counted in whole control tokens, longest first.
        prefill = full_header[len(header) :]
        for c in sorted(k for k in (control_starts(prefill) if control_starts else ()) if k < len(prefill)):
            if turn.startswith(prefill[c:], start) and start + len(prefill) - c <= end:
                start += len(prefill) - c
                break
        shown = with_reasoning() if with_reasoning is not None and flags is not None else None
        if shown is not None and _opens_unlogged_reasoning(prefill, header, turn[start:end], shown, lcp):
            assert flags is not None
            flags.append(REASONING_NOT_LOGGED)
    return start, end


def reasoning_stripped(message: dict[str, Any], reasoning_tokens: int | None, shown: Callable[[], str]) -> bool:
    """Whether a message without reasoning was sampled with reasoning the log lost, where the template has a place
    for it (``shown``: the message rendered with :data:`REASONING_PROBE` as its reasoning holds the probe): the API
    counted reasoning tokens for the reply, or its text starts with the blank line a server's reasoning parser
    leaves where it cut ``<think>…</think>`` out (``"\n\n<guess>…"``). The template then renders an empty reasoning
    block where the model sampled its reasoning: the turn is flagged :data:`REASONING_NOT_LOGGED`."""
    if carries_reasoning(message):
        return False
    content = message.get("content")
    text = content if isinstance(content, str) else "".join(_visible_texts(content)) if content else ""
    cut = text.startswith("\n\n") and bool(text.strip())
    if not cut and not (reasoning_tokens or 0) > 0:
        return False
    return REASONING_PROBE in shown()


def _header_cuts(
    header: str, control_starts: Callable[[str], Iterable[int]] | None, controls: re.Pattern[str] | None
) -> set[int]:
    """Where a generation prompt's header may end before its prefill: before a control token, or after one and the
    whitespace that follows it (Apriel 1.6's ``<|begin_assistant|>`` + newline, then plain text history never
    renders; not right after a token that plain text follows: ``<|im_start|>`` + a role name is one header);
    never at its start or end."""
    cuts = set(control_starts(header) if control_starts else ())
    for m in controls.finditer(header) if controls is not None else ():
        after = header[m.end() :]
        if after[:1].isspace():
            cuts.add(m.end() + len(after) - len(after.lstrip()))
    return {k for k in cuts if 0 < k < len(header)}


def _opens_unlogged_reasoning(prefill: str, header: str, completion: str, shown: str, lcp: int) -> bool:
    """Whether the generation prompt's ``prefill`` (what follows the ``header`` history renders) ends where history
    puts a message's reasoning (``shown``: the message rendered with :data:`REASONING_PROBE` as its reasoning), so
    the model sampled its reasoning right after the prompt, and ``completion`` is not what history renders there for
    an empty reasoning (GLM-4.7's ``</think>`` is; MiniMax-M2, which renders no reasoning block for a message without
    one, is not): the reasoning the model sampled there is not in the log. A prefill that goes on past the
    reasoning's place (Gemma 4's closed, empty thought channel) decided the reasoning itself."""
    k = shown.find(header, max(0, lcp - len(header) + 1))
    p = shown.find(REASONING_PROBE, k + len(header)) if k >= 0 else -1
    if p < 0 or not prefill.endswith(shown[k + len(header) : p]):
        return False
    return not shown[p:].replace(REASONING_PROBE, "", 1).startswith(completion)


_TEXT_PROBE = "msgtrain-text-probe"


def with_probe_text(message: dict[str, Any]) -> dict[str, Any] | None:
    """``message`` with its visible text replaced by a probe that ends with a character the text does not end with
    (stripped, as templates often strip it), its calls and reasoning kept: a rendering of it shares no character of
    the text's end with the message's. None when the message has no text to replace (string content, or a list of
    text parts)."""
    content = message.get("content")
    if isinstance(content, str):
        texts = [content]
    elif isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        texts = [str(p.get("text") or "") for p in content]
    else:
        return None
    last = "".join(texts).rstrip()[-1:]
    if not last:
        return None
    probe = _TEXT_PROBE if last != _TEXT_PROBE[-1] else _TEXT_PROBE + "."
    return {**message, "content": probe if isinstance(content, str) else [{"type": "text", "text": probe}]}


# The content of :func:`follower` messages: found in a rendering, it marks where the follower's text begins.
FOLLOWER_TEXT = "msgtrain-follower-text"
_TAIL = 32


def sampled_stop(
    followed: str, core: str, stops: re.Pattern[str] | None, controls: re.Pattern[str] | None = None
) -> str | None:
    """The text the model sampled after ``core`` (a completion without a stop token) to stop: whitespace then the
    stop token the template writes right after the message in ``followed`` (the context, the message and its
    :func:`follower`, rendered), if it writes one there; else None.

    The message's end in ``followed`` is the last occurrence of ``core``'s tail before the follower's text: a
    template may render the message itself differently once something follows it (GLM drops the reasoning of
    turns before the last user message), but not its end: the tail is at most the text after its last control
    token (``controls`` matches them), or that token when nothing follows it."""
    if stops is None or not core:
        return None
    limit = followed.find(FOLLOWER_TEXT)
    if limit < 0:
        return None
    last = None
    if controls is not None:
        last = max(controls.finditer(core), key=lambda m: m.start(), default=None)
    if last is not None and last.end() == len(core):
        tail = last.group(0)
    else:
        tail = core[max(len(core) - _TAIL, last.end() if last is not None else 0) :]
    q = followed.rfind(tail, 0, limit)
    if q < 0:
        return None
    m = stops.match(followed, q + len(tail), limit)
    return m.group(0) if m else None


def follower(message: dict[str, Any]) -> list[dict[str, Any]]:
    """What follows a sampled message in a conversation: a result for each of its tool calls, else a user turn. Only
    the token the template writes before it is used."""
    calls = message.get("tool_calls") or []
    if not calls:
        return [{"role": "user", "content": FOLLOWER_TEXT}]
    out = []
    for c in calls:
        fn = c.get("function") or {}
        out.append(
            {"role": "tool", "tool_call_id": c.get("id") or "", "name": fn.get("name") or "", "content": FOLLOWER_TEXT}
        )
    return out


def carries_reasoning(message: dict[str, Any]) -> bool:
    """Whether a message holds the model's reasoning: a reasoning field or reasoning inline in its content."""
    content = message.get("content")
    inline = isinstance(content, str) and _THINK_END in content
    return bool(message.get("reasoning_content") or message.get("thinking") or inline)


def _visible_texts(content: Any) -> list[str]:
    """The message text a template renders: string content (or text parts) without inline reasoning."""
    if isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    else:
        return []
    out = []
    for p in parts:
        if _THINK_END in p:
            p = p.rsplit(_THINK_END, 1)[1]
        p = p.strip()
        if p:
            out.append(p)
    return out


def dropped_by_template(message: dict[str, Any], completion: str) -> list[str]:
    """Flags for what of a sampled message its rendered completion lost: ``template_dropped_content`` (its text),
    ``template_dropped_tool_calls`` (a call's function name), ``template_dropped_reasoning``. The model sampled
    them; a completion without them trains something else."""
    flags = []
    if any(t not in completion for t in _visible_texts(message.get("content"))):
        flags.append("template_dropped_content")
    names: dict[str, int] = {}
    for c in message.get("tool_calls") or []:
        name = (c.get("function") or {}).get("name") or c.get("name")
        if isinstance(name, str) and name:
            names[name] = names.get(name, 0) + 1
    if any(completion.count(n) < k for n, k in names.items()):
        flags.append("template_dropped_tool_calls")
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning.strip() and reasoning.strip() not in completion:
        flags.append("template_dropped_reasoning")
    return flags


# The reason a rendered completion is not trained when it holds what belongs to another message (another message's
# text, the header that opens another turn): the template's rendering of the turn is not what the model sampled.
COMPLETION_MISMATCH = "completion_mismatch"
# Another message's text shorter than this is not looked for: a short reply ("ok", "42") occurs anywhere.
MIN_FOREIGN_TEXT = 8


def _string_leaves(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _string_leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _string_leaves(v)


def own_material(message: dict[str, Any]) -> str:
    """Everything a message's own rendering may print: its content (text parts), its reasoning, its tool calls'
    names and arguments (as text, as JSON, and every string inside them), joined by NUL. Another message's text
    found inside it is the model's own words, not a leak."""
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    for key in ("reasoning_content", "thinking"):
        if isinstance(message.get(key), str):
            parts.append(message[key])
    for c in message.get("tool_calls") or []:
        fn = c.get("function") or {}
        parts.append(str(fn.get("name") or c.get("name") or ""))
        args = fn.get("arguments", c.get("arguments"))
        parts.append(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
        parts.extend(_string_leaves(args))
    return "\0".join(parts)


def message_texts(message: dict[str, Any]) -> tuple[str, ...]:
    """The texts of a message another turn's completion must not hold: its visible content, stripped, long enough
    to be told apart (:data:`MIN_FOREIGN_TEXT`)."""
    return tuple(t for t in _visible_texts(message.get("content")) if len(t) >= MIN_FOREIGN_TEXT)


def foreign_text(completion: str, material: str, others: Iterable[tuple[str, ...]]) -> str | None:
    """The first text of ``others`` (other messages' :func:`message_texts`) that ``completion`` holds and the
    message's own ``material`` (:func:`own_material`) does not: the completion carries another message."""
    n = len(completion)
    for texts in others:
        for text in texts:
            if len(text) <= n and text in completion and text not in material:
                return text
    return None


def moved_context_span(
    prompt: str,
    turn: str,
    stand_ins: list[str],
    context: str,
    header: str,
    controls: re.Pattern[str] | None,
) -> tuple[int, int]:
    """``(start, end)`` of the message's rendering in ``turn`` for a template whose history renders the context
    differently from the prompt away from the reply (Mistral NeMo's template writes the system prompt only into the
    last user message, so once a reply follows, that message renders without it): the engine-mode rule, the
    template's rendering of the message right after where history puts the generation prompt.

    ``stand_ins`` are the context and two stand-in messages (other contents, no calls) rendered as history: where
    they part from each other and from ``turn`` is where the message's own rendering begins (after the generation
    header ``header``, the prompt after the context's rendering, when history renders one). Well defined only when
    history there ends as the prompt does (the same text after the prompt's last control token, or the whole
    header): else
    :class:`NotRecoverable`. The end is where ``turn`` and ``context`` share their tail again."""
    k = min(common_prefix_len(turn, stand_ins[0]), *(common_prefix_len(stand_ins[0], s) for s in stand_ins[1:]))
    k = _outside_controls((turn, *stand_ins), k, controls, forward=False)
    if header:
        i = turn.rfind(header, 0, k)
        if i < 0:
            raise NotRecoverable(
                f"history moves the context, and renders no generation header {header!r} before the message"
            )
        start = i + len(header)
    else:
        start = k
        last = max(controls.finditer(prompt), key=lambda m: m.start(), default=None) if controls else None
        tail = prompt[last.start() :] if last is not None else ""
        if not tail or not turn[:start].endswith(tail):
            raise NotRecoverable(
                "history moves the context, and where it renders the message does not end as the generation prompt "
                f"does ({prompt[-24:]!r}): what the model sampled after the prompt cannot be told"
            )
    end = len(turn) - _common_suffix_len(context, turn[start:])
    end = _outside_controls((turn,), end, controls, forward=True) if end > start else end
    if end <= start:
        raise NotRecoverable("history moves the context, and renders nothing of the message where it should be")
    return start, end
