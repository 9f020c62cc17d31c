"""Prompts a chat template already rendered, parsed back into the messages they were rendered from.

RL and eval tools often log a prompt as the text the chat template produced (veRL and SkyRL rollout dumps,
lm-evaluation-harness with ``--apply_chat_template``, ``/v1/completions`` request logs, DPO files whose ``prompt``
is ``<|im_start|>user\\n...``), and preference datasets write whole conversations in Anthropic's legacy
``\\n\\nHuman: ...\\n\\nAssistant:`` text. Read as one user message such a prompt would be rendered a second time,
inside the template's own control text: a context no model ever saw. Parsed back, it is a conversation like any
other.

The markup family is told by its own tokens, never by a guess (:data:`FAMILIES`): ChatML (``<|im_start|>``, or its
role lines alone where the text was decoded with special tokens skipped, as veRL dumps rollouts),
Llama 3 headers, Gemma turns, Phi-3 / Zephyr role tags, DeepSeek's full-width markers, Mistral / Llama 2
``[INST]``, Anthropic Human / Assistant, Alpaca ``### Instruction:`` / ``### Response:``.

Invariants:
- A text is parsed only when it is *unambiguous*: every character of it belongs to the family's grammar (an optional
  BOS, whole turns, and at the end the assistant's opening with nothing after it: the generation prompt), with no
  control text of the family inside a turn's content. Anything looser (a prefill after the opening, a prompt cut
  mid-turn, two families mixed) is not parsed, and the caller rejects it as before (``prerendered_prompt``).
- Contents are kept verbatim (what the template wrote between its markers); only Llama 3 / Mistral, whose templates
  trim contents, and Alpaca's blank-line separators are read as the template writes them.
- The logged text itself is kept (:attr:`RenderedPrompt.text`): it is the exact prompt the model saw. The linearizer
  prefers it to a re-rendering when the tokenizer is of the same family (its control strings are the tokenizer's
  added tokens, :attr:`RenderedPrompt.controls`) and the two differ.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from msgtrain.model.completeness import RENDERED_PROMPT

# The key of a sampled reply's metadata holding the prompt text it was sampled after, as logged (a
# :meth:`RenderedPrompt.metadata` dict: the linearizer reads it, see msgtrain.linearize.plan).
RENDERED_PROMPT_KEY = RENDERED_PROMPT

_TURN_ROLES = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "model": "assistant",
}  # tool turns are not read: their results answer calls the rendered text holds only as text


@dataclass(frozen=True)
class RenderedPrompt:
    """A rendered prompt parsed back: its family, the messages (OpenAI dicts, ``tool`` turns as user-side text the
    template wrote) and the logged text."""

    family: str
    messages: list[dict[str, Any]]
    text: str
    controls: tuple[str, ...]  # the family's control strings: a tokenizer of this family has them as added tokens
    ends: tuple[str, ...]  # what a sampled reply of this family ends with (its stop tokens)

    def metadata(self) -> dict[str, Any]:
        """What a reply sampled after this prompt carries in its metadata (:data:`RENDERED_PROMPT_KEY`)."""
        return {"family": self.family, "text": self.text, "controls": list(self.controls)}

    def reply_text(self, completion: str) -> str:
        """A logged completion without the stop token the engine left at its end (veRL dumps ``4<|im_end|>``): the
        template writes that token itself after the reply."""
        for end in self.ends:
            if completion.endswith(end):
                return completion[: -len(end)]
        return completion


def _turns(
    text: str, opener: str, closer: str, head: tuple[str, ...], role_end: str, *, strip: bool = False
) -> list[tuple[str, str]] | None:
    """(role, content) of ``opener ROLE role_end CONTENT closer`` turns covering ``text`` (after an optional
    ``head``), the last being the assistant's opening alone; None unless that grammar covers the text exactly."""
    pieces = text.split(opener)
    if pieces[0] not in ("", *head) or len(pieces) < 2:
        return None
    out: list[tuple[str, str]] = []
    for i, piece in enumerate(pieces[1:], start=1):
        role, sep, rest = piece.partition(role_end)
        if not sep or not role or role != role.strip():
            return None
        last = i == len(pieces) - 1
        if last:
            if rest or role not in ("assistant", "model"):
                return None  # a prefill, or a prompt cut before the generation prompt: not unambiguous
            out.append((role, ""))
            break
        content, sep, after = rest.rpartition(closer)
        if not sep or after not in ("", "\n") or closer in content:
            return None
        out.append((role, content.strip() if strip else content))
    return out


def _chatml(text: str) -> list[tuple[str, str]] | None:
    return _turns(text, "<|im_start|>", "<|im_end|>", (), "\n")


_DECODED_ROLE = re.compile(r"(?:^|\n)(system|user|assistant)\n")


def _chatml_decoded(text: str) -> list[tuple[str, str]] | None:
    """ChatML decoded with its special tokens skipped (``tokenizer.batch_decode(..., skip_special_tokens=True)``, as
    veRL dumps rollouts): ``system\nS\nuser\nU\nassistant\n``. Role lines are read as turns only in the one order a
    chat has (an optional system turn, then user and assistant alternating, ending with the assistant's opening):
    a content line that is a role name breaks the order, and the text is not parsed."""
    if "<|im_start|>" in text:
        return None
    marks = list(_DECODED_ROLE.finditer(text))
    if not marks or marks[0].start() != 0 or marks[-1].group(1) != "assistant" or marks[-1].end() != len(text):
        return None
    roles = [m.group(1) for m in marks]
    body = roles[1:] if roles[0] == "system" else roles
    if not body or body != ["user", "assistant"] * (len(body) // 2) or len(body) % 2:
        return None
    out = [(m.group(1), text[m.end() : following.start()]) for m, following in itertools.pairwise(marks)]
    return [*out, ("assistant", "")]


def _llama3(text: str) -> list[tuple[str, str]] | None:
    return _turns(text, "<|start_header_id|>", "<|eot_id|>", ("<|begin_of_text|>",), "<|end_header_id|>\n\n")


def _gemma(text: str) -> list[tuple[str, str]] | None:
    return _turns(text, "<start_of_turn>", "<end_of_turn>", ("<bos>",), "\n")


_PHI_TAG = re.compile(r"<\|(system|user|assistant)\|>\n")


def _role_tags(text: str, closer: str) -> list[tuple[str, str]] | None:
    """Phi-3 (``<|end|>``) and Zephyr (``</s>``): ``<|role|>\\nCONTENT{closer}\\n`` turns."""
    head = text.removeprefix("<s>")
    marks = list(_PHI_TAG.finditer(head))
    if not marks or marks[0].start() != 0 or marks[-1].group(1) != "assistant" or marks[-1].end() != len(head):
        return None
    out = []
    for mark, following in itertools.pairwise(marks):
        content, sep, after = head[mark.end() : following.start()].rpartition(closer)
        if not sep or after not in ("", "\n") or closer in content:
            return None
        out.append((mark.group(1), content))
    return [*out, ("assistant", "")]


def _phi3(text: str) -> list[tuple[str, str]] | None:
    return _role_tags(text, "<|end|>")


def _zephyr(text: str) -> list[tuple[str, str]] | None:
    return _role_tags(text, "</s>") if "<|end|>" not in text else None


_DS_BOS, _DS_EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
_DS_USER, _DS_ASSISTANT = "<｜User｜>", "<｜Assistant｜>"


def _deepseek(text: str) -> list[tuple[str, str]] | None:
    """``BOS SYSTEM <｜User｜>U<｜Assistant｜>A<｜end▁of▁sentence｜> ... <｜User｜>U<｜Assistant｜>``."""
    body = text.removeprefix(_DS_BOS)
    system, sep, rest = body.partition(_DS_USER)
    if not sep or not rest.endswith(_DS_ASSISTANT) or _DS_ASSISTANT in system:
        return None
    out = [("system", system)] if system else []
    for k, turn in enumerate(rest.split(_DS_USER)):
        user, sep, reply = turn.partition(_DS_ASSISTANT)
        if not sep or _DS_ASSISTANT in reply:
            return None
        out.append(("user", user))
        if k == len(rest.split(_DS_USER)) - 1:
            if reply:
                return None
            break
        content, sep, after = reply.rpartition(_DS_EOS)
        if not sep or after:
            return None
        out.append(("assistant", content))
    return [*out, ("assistant", "")]


_INST = re.compile(r"\[INST\]|\[/INST\]")
_SYS = re.compile(r"^<<SYS>>\n(.*?)\n<</SYS>>\n\n", re.DOTALL)


def _inst(text: str) -> list[tuple[str, str]] | None:
    """Mistral / Llama 2: ``<s>[INST] U [/INST] A</s>[INST] U [/INST]`` (Llama 2's ``<<SYS>>`` block opens the
    first instruction); the templates trim contents, so they are read trimmed."""
    body = text.removeprefix("<s>")
    marks = list(_INST.finditer(body))
    if len(marks) < 2 or marks[0].start() != 0 or body[marks[-1].end() :].strip():
        return None
    kinds = [m.group(0) for m in marks]
    if kinds != ["[INST]", "[/INST]"] * (len(kinds) // 2) or len(kinds) % 2:
        return None
    out: list[tuple[str, str]] = []
    for k in range(0, len(marks), 2):
        user = body[marks[k].end() : marks[k + 1].start()].strip()
        if k == 0 and (system := _SYS.match(user)) is not None:
            out.append(("system", system.group(1)))
            user = user[system.end() :].strip()
        out.append(("user", user))
        if k + 2 < len(marks):
            reply = body[marks[k + 1].end() : marks[k + 2].start()]
            for eos in ("</s><s>", "</s>"):
                if reply.endswith(eos):
                    reply = reply[: -len(eos)]
                    break
            else:
                return None
            out.append(("assistant", reply.strip()))
    return [*out, ("assistant", "")]


_HUMAN_TURN = re.compile(r"(?:^|\n\n)(Human|Assistant): ?")


def _anthropic(text: str) -> list[tuple[str, str]] | None:
    """``\\n\\nHuman: ...\\n\\nAssistant: ...`` alternating, ending with an empty ``Assistant:``."""
    stripped = text.lstrip("\n")
    marks = list(_HUMAN_TURN.finditer(stripped))
    if not marks or marks[0].start() != 0 or marks[0].group(1) != "Human" or marks[-1].group(1) != "Assistant":
        return None
    roles = [m.group(1) for m in marks]
    if any(a == b for a, b in itertools.pairwise(roles)) or stripped[marks[-1].end() :].strip():
        return None
    out = []
    for mark, following in itertools.pairwise(marks):
        out.append(("user" if mark.group(1) == "Human" else "assistant", stripped[mark.end() : following.start()]))
    return [*out, ("assistant", "")]


_ALPACA = re.compile(
    r"^(?P<preamble>(?:(?!###).)*?)(?:\n\n)?### Instruction:\n(?P<instruction>.*?)\n\n"
    r"(?:### Input:\n(?P<input>.*?)\n\n)?### Response:\n?$",
    re.DOTALL,
)


def _alpaca(text: str) -> list[tuple[str, str]] | None:
    """Alpaca's prompt: an optional preamble (the system text), ``### Instruction:``, optional ``### Input:``, and
    ``### Response:`` with nothing after it. The input follows the instruction after a blank line, as written."""
    m = _ALPACA.match(text)
    if m is None or "### " in m.group("instruction") or "### " in (m.group("input") or ""):
        return None
    out = [("system", m.group("preamble").strip())] if m.group("preamble").strip() else []
    user = m.group("instruction") + (f"\n\n{m.group('input')}" if m.group("input") is not None else "")
    return [*out, ("user", user), ("assistant", "")]


@dataclass(frozen=True)
class _Family:
    name: str
    marker: str  # a string every text of the family holds (a cheap first test)
    parse: Callable[[str], list[tuple[str, str]] | None]
    controls: tuple[str, ...]
    ends: tuple[str, ...]


FAMILIES: tuple[_Family, ...] = (
    _Family("chatml", "<|im_start|>", _chatml, ("<|im_start|>", "<|im_end|>"), ("<|im_end|>", "<|endoftext|>")),
    # no control strings: the logged text lost them, so it cannot be the exact prompt; the messages are rendered
    _Family("chatml_decoded", "\nassistant\n", _chatml_decoded, (), ()),
    _Family(
        "llama3",
        "<|start_header_id|>",
        _llama3,
        ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"),
    ),
    _Family("gemma", "<start_of_turn>", _gemma, ("<start_of_turn>", "<end_of_turn>"), ("<end_of_turn>", "<eos>")),
    _Family("phi3", "<|end|>", _phi3, ("<|user|>", "<|assistant|>", "<|end|>"), ("<|end|>", "<|endoftext|>")),
    _Family("zephyr", "<|assistant|>", _zephyr, ("<|user|>", "<|assistant|>", "</s>"), ("</s>",)),
    _Family("deepseek", _DS_ASSISTANT, _deepseek, (_DS_USER, _DS_ASSISTANT), (_DS_EOS,)),
    _Family("inst", "[/INST]", _inst, ("[INST]", "[/INST]"), ("</s>",)),
    _Family("anthropic_text", "Assistant:", _anthropic, (), ()),
    _Family("alpaca", "### Response:", _alpaca, (), ("</s>",)),
)


def parse_rendered_prompt(text: Any) -> RenderedPrompt | None:
    """The messages a rendered prompt was rendered from (module docstring), or None when ``text`` is not one
    (ordinary text, or markup that is not unambiguous)."""
    if not isinstance(text, str):
        return None
    for family in FAMILIES:
        if family.marker not in text:
            continue
        turns = family.parse(text)
        if turns is None or len(turns) < 2:
            continue
        roles = [_TURN_ROLES.get(role) for role, _ in turns[:-1]]
        if any(r is None for r in roles) or "user" not in roles:
            continue
        messages = [{"role": r, "content": c} for r, (_, c) in zip(roles, turns[:-1], strict=True)]
        return RenderedPrompt(family.name, messages, text, family.controls, family.ends)
    return None


# What opens the assistant's turn (the generation prompt) in the families whose control tokens also close a reply: a
# whole conversation they rendered, its last reply included, is that prompt and that reply (see
# :func:`split_rendered_conversation`).
_OPENINGS = {
    "chatml": "<|im_start|>assistant\n",
    "llama3": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "gemma": "<start_of_turn>model\n",
    "phi3": "<|assistant|>\n",
    "deepseek": _DS_ASSISTANT,
    "inst": "[/INST]",
}
# Families whose templates trim each content and pad it with their own spaces (Mistral / Llama 2: ``[/INST] A </s>``):
# a reply cut out of their text is read trimmed, as their turns are (:func:`_inst`).
TRIMMING_FAMILIES = frozenset({"inst"})


def continued_conversation(prompt: Any, completion: Any) -> tuple[RenderedPrompt, str] | None:
    """A completion that carries its rendered prompt on past turns of other roles (a multi-turn rollout decoded whole:
    verl's agent loop and SkyRL keep the tool responses the engine was handed between the replies inside the
    response): the prompt extended through the completion's last assistant opening of the prompt's family, parsed,
    and the reply after that opening. The earlier replies become the extended prompt's assistant messages (context, not
    trained), the responses between them its other turns. None unless the prompt is a rendered prompt, the
    completion holds the family's assistant opening, and the extended prompt parses as the same family with more
    turns (a reply that merely mentions the opening does not)."""
    if not (isinstance(prompt, str) and isinstance(completion, str)):
        return None
    rendered = parse_rendered_prompt(prompt)
    if rendered is None:
        return None
    opening = _OPENINGS.get(rendered.family) or (_DECODED_OPENING if rendered.family == "chatml_decoded" else None)
    cut = completion.rfind(opening) if opening is not None else -1
    if opening is None or cut < 0:
        return None
    cut += len(opening)
    longer = parse_rendered_prompt(prompt + completion[:cut])
    if longer is None or longer.family != rendered.family or len(longer.messages) <= len(rendered.messages):
        return None
    return longer, completion[cut:]


_DECODED_OPENING = "\nassistant\n"  # ChatML decoded with its special tokens skipped: the role line alone


def split_rendered_conversation(text: Any) -> tuple[RenderedPrompt, str] | None:
    """A whole conversation a chat template rendered, its last reply included and closed by the family's end token
    (RL tools log rollouts so: Atropos's ``messages``), as the rendered prompt the reply was sampled after and the
    reply as logged (its end token kept: :meth:`RenderedPrompt.reply_text` takes it off). None unless unambiguous: the
    text ends with an end token of a family with control tokens, what comes before the last assistant opening is a
    rendered prompt of that family (:func:`parse_rendered_prompt`), and the reply holds none of its control text."""
    if not isinstance(text, str):
        return None
    for family in FAMILIES:
        opening = _OPENINGS.get(family.name)
        end = next((e for e in family.ends if text.endswith(e)), None)
        if opening is None or end is None or family.marker not in text:
            continue
        cut = text.rfind(opening) + len(opening)
        if cut < len(opening):
            continue
        reply = text[cut:]
        if any(c in reply[: -len(end)] for c in (*family.controls, *family.ends)):
            continue
        rendered = parse_rendered_prompt(text[:cut])
        if rendered is not None and rendered.family == family.name:
            return rendered, reply
    return None


def rendered_family(text: Any) -> str | None:
    """The name of the first family whose control text ``text`` holds (:data:`FAMILIES`; its marker), or None: text
    that some chat template rendered, whether or not it parses unambiguously."""
    if not isinstance(text, str):
        return None
    return next((f.name for f in FAMILIES if f.controls and f.marker in text), None)
