"""Reasoning and tool calls that a chat UI folded into an assistant message's text as ``<details>`` markup.

Open WebUI stores what one assistant turn produced — reasoning, tool calls with their results, code it ran, and the
text — as one ``content`` string: its backend serialises the turn's content blocks (``serialize_content_blocks`` in
``backend/open_webui/utils/middleware.py``, read at open-webui/open-webui commit 000032ed1cfe; the same shapes since
the 0.5 series) as, per block::

    text                                    the text, stripped, then "\\n"
    <details type="reasoning" done="true" duration="4">
    <summary>Thought for 4 seconds</summary>
    &gt; first line of the reasoning         html.escape of the lines, each prefixed "> "
    &gt; second line
    </details>
    <details type="tool_calls" done="true" id="call_1" name="get_weather"
      arguments="&quot;{\\&quot;city\\&quot;: \\&quot;Paris\\&quot;}&quot;"
      result="&quot;Sunny, 22C&quot;" files="" embeds="&quot;&quot;">
    <summary>Tool Executed</summary>
    </details>

(one ``<details>`` line per call: its attributes are ``html.escape(json.dumps(...))`` of the call's arguments text and
of its result). Trained as text, the model would learn markup it never sampled. :func:`details_steps` reads such a
string back into the model messages it stands for, as Open WebUI's own ``convert_content_blocks_to_messages`` splits
them: one assistant message per model call (its reasoning, its text, its calls), each followed by the results of
its calls, the text after the last results a final assistant message.

Invariants:
- Only assistant text that holds Open WebUI's own block signature (``<details type="reasoning" | "tool_calls" |
  "code_interpreter" done=...``, at the start of a line) is read as markup; any other text, ``<details>`` of
  another kind included, is left as it is (:func:`details_steps` returns None).
- Markup that does not read back into what was sampled is an error, never text: a block the UI left unfinished
  (``done="false"``: a reply interrupted while it reasoned or before its call ran), a block of an unknown type or
  attributes that are not the JSON the UI writes, reasoning lines without the quote prefix, text before reasoning in
  one reply (the order it was written in cannot be kept), and several tool calls with nothing between them (the UI
  writes the parallel calls of one reply and the calls of successive replies alike). The reader turns the error
  into a gap: the replies before it are trained, none after it.
- Reasoning loses only what Open WebUI dropped when it saved it: the whitespace around it, and (as a markdown quote
  line) a ``"> "`` that started one of its lines is indistinguishable from the prefix and read as the prefix.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from typing import Any

from msgtrain.errors import ValidationError

# Open WebUI's block signature: the types its serialiser writes, at the start of a line, ``done`` second.
_SIGNATURE = re.compile(r'^<details type="(?:reasoning|tool_calls|code_interpreter)" done="', re.MULTILINE)
# One block: its type, its attributes, its body (up to the first ``</details>``: bodies are escaped, so a reasoning
# that wrote "</details>" holds it as "&lt;/details&gt;").
_BLOCK = re.compile(
    r'^<details type="(?P<type>[^"]*)"(?P<attrs>[^>]*)>\n?(?P<body>.*?)</details>[ \t]*$', re.MULTILINE | re.DOTALL
)
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
_SUMMARY = re.compile(r"\A\s*<summary>[^<]*</summary>\n?")
_HINT = "re-export the chat after the reply finished, or map the message away with --map"


@dataclass
class DetailsStep:
    """One model call of the turn: what it sampled (reasoning, text, calls) and the results its calls got."""

    text: str = ""
    reasoning: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI ``tool_calls`` entries
    results: list[tuple[str, str, Any]] = field(default_factory=list)  # (call id, name, result value)


def details_steps(content: str, where: str) -> list[DetailsStep] | None:
    """The model calls an assistant ``content`` string with Open WebUI markup stands for, or None when it holds
    none (see the module docstring); raises :class:`ValidationError` where the markup cannot be read back."""
    if '<details type="' not in content or _SIGNATURE.search(content) is None:  # the text search first: C speed
        return None
    steps = [DetailsStep()]
    pos = 0
    for match in _BLOCK.finditer(content):
        _add_text(steps, content[pos : match.start()], where)
        pos = match.end()
        attrs = dict(_ATTRIBUTE.findall(match.group("attrs")))
        kind = match.group("type")
        if attrs.get("done") != "true":
            raise ValidationError(
                f'a <details type="{kind}"> block the chat UI saved unfinished (done="{attrs.get("done")}"): the '
                "reply was interrupted, what the model sampled is not all in the log",
                where=where,
                code="interrupted_markup",
                hint=_HINT,
            )
        if kind == "reasoning":
            if steps[-1].calls:  # reasoning after a call's results: the next model call's
                steps.append(DetailsStep())
            if steps[-1].text:
                raise ValidationError(
                    "reasoning after text in one reply (Open WebUI markup): the order the model wrote them in "
                    "cannot be kept",
                    where=where,
                    code="ambiguous_markup",
                    hint=_HINT,
                )
            steps[-1].reasoning.append(_reasoning(match.group("body"), where))
        elif kind == "tool_calls":
            if steps[-1].calls:
                # The UI writes the calls of one reply one line after another, and the calls of the next reply (after
                # the results, with nothing between) the same way: parallel calls and sequential ones look alike.
                raise ValidationError(
                    "tool calls written one after another (Open WebUI markup): one reply that made them together, or "
                    "one reply per call, cannot be told apart",
                    where=where,
                    code="ambiguous_markup",
                    hint=_HINT,
                )
            _add_call(steps[-1], attrs, where)
        else:
            raise ValidationError(
                f'a <details type="{kind}"> block (Open WebUI markup): what the model sampled for it is not read',
                where=where,
                code="unsupported_markup",
                hint=_HINT,
            )
    _add_text(steps, content[pos:], where)
    if _SIGNATURE.search(_BLOCK.sub("", content)) is not None:  # a signature no whole block matched
        raise ValidationError(
            "a <details> block of Open WebUI markup that does not close", where=where, code="bad_markup", hint=_HINT
        )
    return [s for s in steps if s.text or s.reasoning or s.calls]


def _add_text(steps: list[DetailsStep], text: str, where: str) -> None:
    text = text.strip()
    if not text:
        return
    if steps[-1].calls:  # text after a call's results: the next model call's
        steps.append(DetailsStep())
    steps[-1].text = f"{steps[-1].text}\n{text}" if steps[-1].text else text


def _reasoning(body: str, where: str) -> str:
    """The reasoning text of a reasoning block's body: the summary line dropped, HTML entities unescaped, each
    line's ``"> "`` quote prefix removed."""
    body = _SUMMARY.sub("", body, count=1)
    lines = html.unescape(body).strip("\n").split("\n")
    out = []
    for line in lines:
        if line.startswith("> "):
            out.append(line[2:])
        elif line.startswith(">"):  # a line that started with ">" is kept as written
            out.append(line)
        else:
            raise ValidationError(
                "a reasoning line without the quote prefix Open WebUI writes: the reasoning cannot be read back",
                where=where,
                code="bad_markup",
                hint=_HINT,
            )
    return "\n".join(out).strip()


def _add_call(step: DetailsStep, attrs: dict[str, str], where: str) -> None:
    """A tool_calls block: the call (its arguments as the JSON text the model wrote) and its result."""
    name, call_id = attrs.get("name"), attrs.get("id")
    if not name or not call_id:
        raise ValidationError(
            "a tool_calls block without its call's id or name (Open WebUI markup)",
            where=where,
            code="bad_markup",
            hint=_HINT,
        )
    arguments = _attribute_json(attrs, "arguments", where)
    if not isinstance(arguments, str | dict):
        raise ValidationError(
            f"the arguments of tool call {call_id!r} are {type(arguments).__name__}, not the JSON text of an object",
            where=where,
            code="bad_markup",
            hint=_HINT,
        )
    step.calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
    step.results.append((call_id, name, _attribute_json(attrs, "result", where)))


def _attribute_json(attrs: dict[str, str], key: str, where: str) -> Any:
    """An attribute Open WebUI wrote as ``html.escape(json.dumps(value))``, read back into the value."""
    if key not in attrs:
        raise ValidationError(
            f"a tool_calls block without {key!r} (Open WebUI markup)", where=where, code="bad_markup", hint=_HINT
        )
    try:
        return json.loads(html.unescape(attrs[key]))
    except ValueError:
        raise ValidationError(
            f"the {key!r} of a tool_calls block is not the JSON Open WebUI writes", where=where, code="bad_markup"
        ) from None
