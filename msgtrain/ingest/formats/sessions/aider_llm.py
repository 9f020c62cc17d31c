"""aider's LLM history (``--llm-history-file``, commonly ``.aider.llm.history``): every request aider sent and every
reply it got, as text (``InputOutput.log_llm_history``, aider/io.py; ``format_messages`` / ``format_content``,
aider/utils.py, Aider-AI/aider at 5dc9490b):

- ``TO LLM <ISO time>`` opens a request: each message is a ``-------`` line, then every line of its content prefixed
  with its role in capitals and a space (``SYSTEM ...``, ``USER ...``, ``ASSISTANT ...``; a blank line of content is
  the role and a space);
- ``LLM RESPONSE <ISO time>`` opens the reply to the request before it, its lines prefixed ``ASSISTANT``.

Unlike the chat transcript (``.aider.chat.history.md``, the ``aider`` reader), this is what the model was sent: the
system prompt, the example exchanges, the repository map and the files in the chat, as messages. So a request is a
logged call: the reply is sampled in exactly its request's messages, and the calls of a session share their history
(:mod:`msgtrain.ingest.common.call_log`: a call that re-sends an earlier call's messages and reply continues it; the
weak model's calls, a commit message or a summary, are conversations of their own).

Safe readings: the log keeps lines, not line breaks: a message's last line break, and a line ending other than
``\\n``, is not in it (``str.splitlines``), so a message that ended with one is read without it. Content aider
sent as a list of parts (an image beside the text) is logged as its parts' keys and values, which do not give back
what was sent: such a request is a reject (``aider_list_content``).

Replies aider did not keep whole: aider writes ``LLM RESPONSE`` in the ``finally:`` of ``Coder.send``, so every
call leaves one, also a call that did not end as a reply (aider/coders/base_coder.py ``send`` / ``send_message``):

- a call that failed before any content (an API error aider retries) leaves a response with no line: no reply was
  sampled, a skipped record (``aider_empty_response``), never an empty reply trained;
- a reply the user stopped (^C) is its partial text; the next request re-sends it followed by the user message
  ``^C KeyboardInterrupt``: kept ``carried`` and ``interrupted`` (cut short, no end of turn sampled);
- a reply cut at the output limit (``FinishReasonLength``) is its partial text, which aider sends again as an assistant
  prefill at the end of the next request (``prefix: True``): ``carried`` and ``interrupted``; the reply to a request
  that ends in such a prefill continues it, so no template renders its context: ``carried``, context unknown;
- a reply whose request the next request repeats unchanged was not kept (a call that failed mid-stream, retried):
  ``carried`` and ``interrupted``.
Reasoning the model streamed in the API's reasoning field is in the response wrapped in aider's own tag
(``<thinking-content-...>``, aider/reasoning_tags.py), which aider strips before the next request: it is read as the
reply's reasoning, never as answer text.

Accounting: a request and its reply are one record (a call); a request no reply follows (interrupted, failed) is a
skipped record (``aider_request_without_reply``), a reply no request precedes a reject.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

from msgtrain.errors import ValidationError
from msgtrain.ingest.common.call_log import Call, CallLogGroups, turn_identity
from msgtrain.ingest.common.conversation_files import Step
from msgtrain.ingest.common.reasoning_tags import reasoning_and_answer
from msgtrain.ingest.core.base import bounded_lines, open_input
from msgtrain.ingest.formats import Marks, ReadEvent, ReadReject, ReadSkip, SourceRef, excerpt
from msgtrain.model.graph import Env, Origin
from msgtrain.model.message import PartsMessage, TextPart

POLICY = "aider"
HISTORY_NAME = ".aider.llm.history"
HEADER = re.compile(r"^(?P<kind>TO LLM|LLM RESPONSE) (?P<when>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*)$")
ROLES = {"SYSTEM": "system", "USER": "user", "ASSISTANT": "assistant"}
SEPARATOR = "-------"
_LIST_CONTENT = re.compile(r"^(type: |text: |Image_url URL: )")
INTERRUPT = "^C KeyboardInterrupt"  # the user message aider adds after a reply the user stopped
INTERRUPTED_WHY = "the user stopped this reply (^C) before it ended"
LIMIT_WHY = "the reply stopped at the output token limit: aider sent it again as an assistant prefill to continue"
PREFILL_WHY = "continues the assistant prefill aider sent after the output limit: no chat template renders that context"
RETRIED_WHY = "aider sent this reply's request again unchanged (a call that failed mid-stream, retried): not kept"


class AiderLlmHistoryReader:
    name = "aider_llm"
    description = "aider's LLM history (.aider.llm.history): every request as sent and its reply"
    example = "sample_logs/aider_llm/.aider.llm.history"
    reads_text = True
    text_hint = "aider's LLM history starts with 'TO LLM <time>'"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(texts=("to llm ",), names=(f"*/{HISTORY_NAME}",))

    def detect(self, path: Path, head: bytes) -> bool:
        del path
        lines = head.decode("utf-8", "replace").lstrip("\ufeff \t\r\n").split("\n", 2)
        if len(lines) < 2 or not (m := HEADER.match(lines[0].rstrip("\r"))) or m.group("kind") != "TO LLM":
            return False
        return lines[1].rstrip("\r") == SEPARATOR

    def read(self, path: Path) -> Iterator[ReadEvent]:
        groups = CallLogGroups(path, metadata={"source_format": self.name})
        # a request read, its messages (or why they cannot be read); a call read, kept until the next request says
        # whether aider kept its reply
        pending: tuple[SourceRef, list[str], list[Step] | ValidationError] | None = None
        held: tuple[SourceRef, list[Step], PartsMessage, list[str]] | None = None
        for ref, kind, lines in _blocks(path):
            if kind == "TO LLM":
                if pending is not None:
                    yield ReadSkip(pending[0], "aider_request_without_reply")
                try:
                    messages: list[Step] | ValidationError = _messages(lines, ref)
                except ValidationError as e:
                    messages = e
                if held is not None:
                    yield from _add(groups, held, messages if isinstance(messages, list) else None)
                    held = None
                pending = (ref, lines, messages)
                continue
            if pending is None:
                err = ValidationError("a reply no request precedes", where=str(ref), code="aider_reply_without_request")
                yield ReadReject(ref, err, excerpt("\n".join(lines)))
                continue
            request_ref, request, parsed = pending
            pending = None
            if isinstance(parsed, ValidationError):
                yield ReadReject(request_ref, parsed, excerpt("\n".join(request)))
                continue
            if not any(line.strip() for line in lines):
                # format_content of an empty partial_response_content: the call ended before any content
                yield ReadSkip(request_ref, "aider_empty_response")
                continue
            try:
                held = (request_ref, parsed, _reply(lines, ref), request)
            except ValidationError as e:
                yield ReadReject(request_ref, e, excerpt("\n".join(request)))
        if pending is not None:
            yield ReadSkip(pending[0], "aider_request_without_reply")
        if held is not None:
            yield from _add(groups, held, None)
        yield from groups.events()


def _add(
    groups: CallLogGroups, held: tuple[SourceRef, list[Step], PartsMessage, list[str]], after: list[Step] | None
) -> Iterator[ReadEvent]:
    """Add a call, its reply kept as context when the request after it (``after``) shows aider did not keep it whole."""
    ref, messages, reply, request = held
    why = _not_kept(messages, reply, after)
    step = Step(reply)
    if why is not None:
        metadata = {**reply.metadata, "why_not_trained": why}
        if why != PREFILL_WHY:
            metadata["interrupted"] = True
        step = Step(reply.model_copy(update={"metadata": metadata}), origin=Origin.CARRIED)
    try:
        groups.add(Call(messages, [step], Env()), ref, policy=POLICY)
    except ValidationError as e:
        yield ReadReject(ref, e, excerpt("\n".join(request)))


def _not_kept(messages: list[Step], reply: PartsMessage, after: list[Step] | None) -> str | None:
    """Why a reply is not one aider kept whole (module docstring), from its request and the next request; None when
    nothing says so."""
    if messages[-1].message.role == "assistant":
        return PREFILL_WHY
    if after is None:
        return None
    sent = [turn_identity(s.message) for s in messages]
    again = [turn_identity(s.message) for s in after]
    if again == sent:
        return RETRIED_WHY
    if again[:-1] == sent and after[-1].message.role == "assistant":
        return LIMIT_WHY
    answer = reply.text.strip()
    for one, two in pairwise(after):
        if (
            one.message.role == "assistant"
            and one.message.text.strip() == answer
            and two.message.role == "user"
            and two.message.text == INTERRUPT
        ):
            return INTERRUPTED_WHY
    return None


def _blocks(path: Path) -> Iterator[tuple[SourceRef, str, list[str]]]:
    """Each ``TO LLM`` / ``LLM RESPONSE`` block: where it starts, which it is, its lines (line breaks removed)."""
    ref: SourceRef | None = None
    kind = ""
    lines: list[str] = []
    with open_input(path) as f:
        for number, raw in enumerate(bounded_lines(f), start=1):
            line = raw.decode("utf-8", "surrogateescape").removesuffix("\n").removesuffix("\r")
            if number == 1:
                line = line.removeprefix("\ufeff")
            m = HEADER.match(line)
            if m:
                if ref is not None:
                    yield ref, kind, lines
                ref, kind, lines = SourceRef(str(path), f"line {number}"), m.group("kind"), []
            elif ref is not None:
                lines.append(line)
            elif line.strip():
                raise ValidationError(
                    "text before the first 'TO LLM' request", where=f"{path}:{number}", code="bad_document"
                )
    if ref is not None:
        yield ref, kind, lines


def _content(lines: list[str], role: str, where: str) -> str:
    prefix = role + " "
    out = []
    for line in lines:
        if line == role:
            out.append("")  # a blank line whose trailing space was trimmed
        elif line.startswith(prefix):
            out.append(line[len(prefix) :])
        else:
            raise ValidationError(
                f"a line of a {role} message without its prefix: {line[:60]!r}", where=where, code="bad_message"
            )
    return "\n".join(out)


def _messages(lines: list[str], ref: SourceRef) -> list[Step]:
    chunks: list[list[str]] = []
    for line in lines:
        if line == SEPARATOR:
            chunks.append([])
        elif chunks:
            chunks[-1].append(line)
        elif line.strip():
            raise ValidationError("a request's first line is not '-------'", where=str(ref), code="bad_message")
    steps = []
    for i, chunk in enumerate(chunks):
        while chunk and not chunk[-1].strip():
            chunk = chunk[:-1]  # the blank line log_llm_history's trailing newline leaves before the next block
        word = chunk[0].split(" ", 1)[0] if chunk else ""
        role = ROLES.get(word)
        where = f"{ref} message {i}"
        if role is None:
            raise ValidationError(f"message {i} has no role prefix ({word!r})", where=where, code="unknown_role")
        if any(_LIST_CONTENT.match(line[len(word) + 1 :]) for line in chunk[:1]):
            raise ValidationError(
                "content logged as a list of parts (an image beside the text): what was sent is not in the log",
                where=where,
                code="aider_list_content",
            )
        text = _content(chunk, word, where)
        steps.append(Step(PartsMessage(parts=(TextPart(text=text),), role_hint_for_llm=role, policy=POLICY)))
    if not steps:
        raise ValidationError("a request with no message", where=str(ref), code="bad_message")
    return steps


def _reply(lines: list[str], ref: SourceRef) -> PartsMessage:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    text = _content(lines, "ASSISTANT", str(ref))
    return PartsMessage(parts=reasoning_and_answer(text), role_hint_for_llm="assistant", policy=POLICY)


READER = AiderLlmHistoryReader()
