"""aider chat transcripts: the markdown file aider appends every session to (``.aider.chat.history.md`` in the
repository, or any name given with ``--chat-history-file``).

The grammar is the one aider's ``InputOutput`` writes (``aider/io.py``, Aider-AI/aider at 5dc9490b), one call per
piece, each ending with a line break:
- ``# aider chat started at YYYY-MM-DD HH:MM:SS`` opens a session (``# Aider chat started`` before v0.5.0).
- ``user_input``: what the user typed, each of its lines prefixed ``#### `` and ended with two spaces (a markdown
  line break), after a blank line; an empty input is ``#### <blank>``. Commands (``/add``, ``/run``, ``!cmd``) are
  logged the same way, and so are the answers to a "(Y)es/(N)o" question a group preference answered.
- ``tool_output`` / ``tool_warning`` / ``tool_error`` and every question with its answer: ``> `` lines ending with
  two spaces (a multi-line ``tool_output`` message has ``> `` on its first line only; its last line ends with the
  two spaces).
- ``ai_output``: the assistant's reply, stripped, between blank lines, as plain markdown (SEARCH/REPLACE blocks,
  diffs, whole files); reasoning, when the model streams it, wrapped in ``<thinking-content-...>`` tags (or the
  model's own ``<think>``-like tag) before the answer.

What is read (one graph per session, ``aider:file-<hash>:<n>``, policy ``aider``, each reply's model from the
session's ``Main model:`` / ``Model:`` line):
- A prompt is a user message, its lines joined; ``/ask``, ``/code``, ``/architect``, ``/context`` with text, and
  ``/ok``, send their text (aider logs that text again as a prompt when it runs the command: the copy is not a
  second message).
- A reply after a logged prompt is a sampled turn; its reasoning is a reasoning part, its answer the text (what
  aider keeps in its history).
- ``/clear`` and ``/reset`` empty aider's history: what follows starts a new branch from the root (a ``rewind``
  edge).
- Architect mode: once the user accepts "Edit the files?", aider hands the architect's reply to a fresh editor
  conversation, logging it again as a prompt: the editor's reply is sampled on a branch of its own, whose only
  context is that prompt.
- After a reply whose edits aider applied, aider's history holds its note and "Ok." (``injected``): the commit
  (from the first ``Commit <hash> <message>`` line) or "I updated the files."; after architect mode's editor, "I
  made those changes to the files." (``move_back_cur_messages``, v0.8.0 on).
- Before v0.49, ``/add`` (after some chat) and ``/undo`` returned a message that aider sent ("I added these files
  to the chat: ...", the undo note): a reply right after such a command, nothing typed between, answers it.
- ``/lint`` fixes each file's errors with a coder whose history starts empty, logging the errors as a prompt: its
  prompts and replies are a branch of their own from the root, until something else is typed.
- Other commands (``/add``, ``/drop``, ``/run``, ``/undo``, ``/tokens``, ``/model`` ...) are not messages, nor are
  ``> `` lines: they are aider's terminal, not the model's context.

Not trained, and said so:
- A reply the user interrupted (``^C`` before it ended) stays in the history aider kept (with, from v0.72.2, the
  ``^C KeyboardInterrupt`` / "I see that you interrupted my previous reply." pair aider adds after it), origin
  ``carried``, dropped as ``interrupted``: never a positive example.
- In a session that starts by restoring the earlier transcript (``--restore-chat-history``: "Restored previous
  conversation history." before its first prompt), aider's history is that transcript as its own simple parser
  reads it, summarised in the background when long; after a switch that changes the edit format (``/chat-mode``
  to other than ask or code, ``/architect`` or ``/context`` alone, a ``/model`` whose format differs: the next
  announcement says), aider summarises the history it had. Replies up to a ``/clear`` are then ``carried``
  (``context_unknown``).
- A reply whose prompt the transcript does not hold (a ``--watch-files`` "AI!" comment request, a lint or test
  failure aider reflected back, whose lines the log strips, ``/help`` answered with aider's docs) is a ``carried``
  side branch, dropped as ``context_unknown``: the next replies' contexts do not include it. Some reflections are
  whole in the transcript, and are the next reply's prompt: the files a reply named that the user let aider add
  (a question about them answered yes, in each version's form; aider's note names them), and the edit errors
  of :data:`EDIT_FAILURES` (logged whole after "The LLM did not conform to the edit format.").
- Every graph is ``context_incomplete`` (``system_prompt`` and ``files``): aider sends a system prompt, examples,
  the repository map and the files in the chat, none of which the transcript holds; the same is true of the
  command output and web pages aider adds to its history and of the summaries that replace a long history. A
  system prompt supplied in the config (``context:``, format ``aider``) is put in front of each branch; the files
  stay missing (they change from request to request), so the samples stay flagged.

aider's other files beside the transcript (``.aider.conf.yml``, ``.aider.input.history``, model settings) are
claimed by name and skipped, one record each (``aider_config``, ``aider_input_history``): no conversation, no reject.

Accounting: a session is one record: a graph, or a ``ReadSkip`` when it holds no reply: ``aider_session_without_chat``
(no prompt either), ``aider_session_without_replies`` (prompts whose requests failed or were interrupted). A file
with no session header is read as one session when it holds prompts (a transcript whose first lines were cut), else
it is one skipped record (``no_aider_session``; forced with ``--input-format aider``, a
``forced_format_not_recognised`` reject). Transcripts of aider before v0.5.0 (``# Aider chat started``:
prompts as ``---`` then ``#### >  text``, output as ``_italic_`` lines at first) are read in the same grammar.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Literal

from msgtrain.ingest.common.reasoning_tags import reasoning_and_answer
from msgtrain.ingest.common.session_common import Chain, graph_id_for
from msgtrain.ingest.core.base import bounded_lines, open_input
from msgtrain.ingest.core.files import Beside, input_files
from msgtrain.ingest.formats import Marks, ReadEvent, ReadGraph, ReadItem, ReadSkip, RecordTask, SourceRef
from msgtrain.model.completeness import mark_context_incomplete
from msgtrain.model.graph import HISTORY_COPY, MessageGraph, Origin
from msgtrain.model.message import Generation, Part, PartsMessage, TextPart

POLICY = "aider"
TRANSCRIPT_NAME = ".aider.chat.history.md"
# The other files aider keeps beside its transcript, which hold no conversation: claimed by name so that a folder of
# an aider project is read without a reject for them, each one skipped record with what it is.
COMPANIONS = {
    ".aider.conf.yml": "aider_config",
    ".aider.model.settings.yml": "aider_config",
    ".aider.model.metadata.json": "aider_config",
    ".aider.input.history": "aider_input_history",  # the prompts alone, with their times: the transcript has them
}
HEADER = re.compile(r"^# aider chat started at (?P<when>.*?)\s*$", re.IGNORECASE)
# aider's own commands (aider/commands.py): a typed ``/name`` resolves to the one command it is a prefix of.
COMMANDS = (
    "add", "architect", "ask", "chat-mode", "clear", "code", "commit", "context", "copy", "copy-context", "diff",
    "drop", "edit", "editor", "editor-model", "exit", "git", "help", "lint", "load", "ls", "map", "map-refresh",
    "model", "models", "multiline-mode", "ok", "paste", "quit", "read-only", "reasoning-effort", "report", "reset",
    "run", "save", "settings", "test", "think-tokens", "tokens", "undo", "voice", "weak-model", "web",
)  # fmt: skip
CHAT_COMMANDS = frozenset({"ask", "code", "architect", "context"})  # their text is a user message
CLEARING_COMMANDS = frozenset({"clear", "reset"})  # they empty aider's history
LINT_PROMPT = "# Fix any errors below, if possible."  # how aider's linter report starts (aider/linter.py)
OK_MESSAGE = "Ok, please go ahead and make those changes."  # what ``/ok`` sends (aider/commands.py cmd_ok)
INTERRUPT_USER = "^C KeyboardInterrupt"  # the pair aider adds after an interrupted reply (base_coder, v0.72.2 on)
INTERRUPT_ASSISTANT = "I see that you interrupted my previous reply."
INTERRUPT_PAIR_SINCE = (0, 72, 2)
# The notes aider adds to its history after a reply's edits were applied (aider/coders/base_prompts.py
# ``files_content_gpt_edits`` / ``files_content_gpt_edits_no_repo``, since 2023; architect_coder.py for the editor).
EDITS_COMMITTED = "I committed the changes with git hash {hash} & commit msg: {message}"
EDITS_UNCOMMITTED = "I updated the files."
EDITOR_DONE = "I made those changes to the files."
NOTES_SINCE = (0, 8, 0)
# The edit errors aider reflects whose text the log holds whole (it logs str(err) stripped): the SEARCH/REPLACE
# blocks that failed to match (editblock_coder.py apply_edits: always ends with a newline), and a whole-file listing
# without a file name (wholefile_coder.py: one line). Other errors are parse errors quoting the reply's text as far
# as it was read, whose leading white space the log may have lost: their retries stay unseen.
EDIT_FAILURES = (
    (re.compile(r"# \d+ SEARCH/REPLACE blocks? failed to match!\n"), "\n"),
    (re.compile(r"No filename provided before \S+ in file listing\Z"), ""),
)
# What /undo returned, sent when the model's settings asked for it (aider/prompts.py, unchanged since 2023-05).
UNDO_REPLY = (
    "I did `git reset --hard HEAD~1` to discard the last edits. Please wait for further instructions before"
    " attempting that change again. Feel free to ask relevant questions about why the changes were reverted."
)
# The note aider sends after adding the files a reply named (aider/prompts.py ``added_files``, unchanged since 2023).
ADDED_FILES = "I added these files to the chat: {fnames}\nLet me know if there are others we should add."
# A confirm question with its answer: "... (Y)es/(N)o ... [Yes]: a" (v0.5x on; a group's answer is also logged as
# a prompt in this form), or "...? y" before.
ANSWERED = re.compile(r"\(Y\)es/\(N\)o.*\[[^\]]*\]:\s*\S*\s*$")
QUESTION = re.compile(rf"{ANSWERED.pattern}|\? (?:y|n|yes|no)\s*$", re.IGNORECASE)
UNLOGGED_CONTEXT = (
    "aider sends a system prompt, examples, the repository map and the files in the chat, which its transcript does"
    " not hold (nor the command output and web pages it adds to its history, nor its summaries)"
)
UNSEEN_PROMPT = (
    "the transcript does not hold this reply's prompt (a --watch-files request, a reflected lint or test error, a"
    " /help question)"
)
SUMMARISED_WHY = (
    "aider summarised its history when the edit format changed (/chat-mode, /architect, /model): the context it"
    " sent is not in the transcript"
)
RESTORED_WHY = (
    "aider restored the earlier transcript into this session's history (--restore-chat-history), summarised when"
    " long: the context it sent is not in the transcript"
)
INTERRUPTED_WHY = "the user interrupted this reply (^C) before it ended"

Kind = Literal["user", "tool", "assistant"]


@dataclass
class Block:
    """Consecutive lines of one kind, and the line number (1-based) of the first; an output block's entries are its
    messages (a multi-line one whole, its lines joined)."""

    kind: Kind
    line: int
    lines: list[str] = field(default_factory=list)
    span: tuple[int, int] = (0, 0)  # the indices of its first and last line in its session's lines


@dataclass
class Session:
    """One ``# aider chat started at`` section (or the lines before the first header)."""

    line: int
    when: str | None
    blocks: list[Block] = field(default_factory=list)
    # Before v0.5.0 (May 2023, "# Aider chat started"): prompts written "---" then "#### >  text", and (in the
    # first days) aider's output as "_italic_" lines rather than "> " quotes.
    legacy: bool = False


class AiderReader:
    name = "aider"
    description = "aider chat transcripts (.aider.chat.history.md): sessions of #### prompts, > output, replies"
    example = "sample_logs/aider/.aider.chat.history.md"
    # A text format: input discovery asks this reader about files whose name has no log suffix (markdown).
    reads_text = True
    text_hint = "an aider transcript starts with '# aider chat started at'"

    # What detect needs to see in a file (msgtrain.ingest.core.marks): detection imports only readers it admits.
    marks = Marks(
        texts=("# aider chat started at",), names=(f"*{TRANSCRIPT_NAME}", *(f"*/{n}" for n in sorted(COMPANIONS)))
    )

    def detect(self, path: Path, head: bytes) -> bool:
        """A head whose first non-blank line is aider's session header, or (for a transcript whose first session was
        cut) a file named like aider's transcript that is not JSON."""
        if path.name in COMPANIONS:
            return True
        text = head.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
        if HEADER.match(text.split("\n", 1)[0].rstrip("\r")):
            return True
        named = path.name.lower().endswith(TRANSCRIPT_NAME)
        return named and text[:1] not in ("{", "[") and ("\n" + text).find("\n#### ") >= 0

    def explain(self, path: Path, head: bytes) -> str | None:
        """Why a markdown file with aider's prompt lines is not read as a transcript (shown in ``unknown_format``)."""
        del path
        text = head.decode("utf-8", "replace")
        prompts = sum(1 for line in text.split("\n") if line.startswith("#### "))
        if not prompts or text.lstrip("\ufeff \t\r\n")[:1] in ("{", "["):
            return None
        return (
            f"{prompts} '#### ' prompt lines but no '# aider chat started at' session header first"
            " (force it with --input-format aider)"
        )

    # The LLM history aider writes beside its transcript when asked (``--llm-history-file .aider.llm.history``).
    partner_marks = Marks(names=(f"*{TRANSCRIPT_NAME}",))

    def partners(self, location: PurePosixPath, beside: Beside) -> list[PurePosixPath]:
        """The LLM history beside a transcript (present or not: the part is keyed by its absence too), whose replies
        the ``aider_llm`` reader trains in the requests aider logged."""
        del beside
        return [location.parent / LLM_HISTORY_NAME] if location.name.lower().endswith(TRANSCRIPT_NAME) else []

    def read(self, path: Path) -> Iterator[ReadItem]:
        if path.name in COMPANIONS:
            yield ReadSkip(SourceRef(str(path), "file"), COMPANIONS[path.name])
            return
        logged = _logged_replies(path)
        found = False
        for index, session in enumerate(read_sessions(path)):
            found = True
            ref = SourceRef(str(path), f"line {session.line}")
            task = partial(_session_events, path, index, session, ref, logged)
            yield RecordTask(ref, task, raw=_session_excerpt(session))
        if not found:  # no session header and no prompt: one record, skipped (a forced read rejects it)
            yield ReadSkip(SourceRef(str(path), "file"), "no_aider_session")


# ------------------------------------------------------------------------------------------------------ parsing
def _text_lines(path: Path) -> Iterator[str]:
    with open_input(path) as f:
        for k, raw in enumerate(bounded_lines(f)):
            line = raw.decode("utf-8", "replace").rstrip("\n").rstrip("\r")
            yield line.removeprefix("\ufeff") if k == 0 else line  # an editor's byte-order mark


def read_sessions(path: Path) -> Iterator[Session]:
    """The sessions of a transcript, streamed (one session held at a time), each as its blocks of user, tool and
    assistant lines."""
    # aider ends every prompt and output line with two spaces; a file that lost them (an editor trimming
    # trailing whitespace) is read by prefixes alone, which cannot tell a reply's own "> " quote from output.
    strict = any(line.endswith("  ") and line.startswith(("#### ", "> ")) for line in _text_lines(path))
    session: Session | None = None
    lines: list[tuple[int, str]] = []
    for number, line in enumerate(_text_lines(path), 1):
        match = HEADER.match(line)
        if match:
            if session is not None or _has_chat(lines):
                yield _blocks(session or Session(1, None), lines, strict)
            session, lines = Session(number, match.group("when"), legacy=line.startswith("# Aider")), []
            continue
        lines.append((number, line))
    if session is not None or _has_chat(lines):
        yield _blocks(session or Session(1, None), lines, strict)


def _has_chat(lines: list[tuple[int, str]]) -> bool:
    return any(line.startswith("#### ") for _, line in lines)


def _kind(line: str, strict: bool) -> Kind | None:
    """The kind of a line that starts a prompt or an output line, or None (a reply's line, or blank)."""
    ended = not strict or line.endswith("  ")
    if (line.startswith("#### ") or line == "####") and ended:
        return "user"
    if line.startswith(("> ", ">")) and (len(line) == 1 or line[1] == " "):
        # An output line; in a strict file one without the two spaces starts a multi-line message.
        return "tool"
    return None


def _blocks(session: Session, lines: list[tuple[int, str]], strict: bool) -> Session:
    current: Block | None = None
    continuing = False  # inside a multi-line output message (its lines after the first have no "> ")
    for k, (number, line) in enumerate(lines):
        if continuing:
            assert current is not None
            current.lines[-1] += "\n" + line  # a tool block's entries are its messages, whole
            current.span = (current.span[0], k)
            continuing = not _ends_message(line, lines[k + 1][1] if k + 1 < len(lines) else None)
            continue
        if session.legacy:
            line = _modern(line, strict)
        kind = _kind(line, strict)
        if kind == "tool" and strict and not line.endswith("  ") and _quotes(current, lines, k):
            kind = None
        if kind is None:
            if not line.strip() and (current is None or current.kind != "assistant"):
                current = None  # blank lines between pieces
                continue
            kind = "assistant"
        if current is None or current.kind != kind:
            current = Block(kind, number, span=(k, k))
            session.blocks.append(current)
        current.span = (current.span[0], k)
        if kind == "tool":
            current.lines.append(line[2:] if line.startswith("> ") else line[1:])
            continuing = strict and not _ends_message(line, lines[k + 1][1] if k + 1 < len(lines) else None)
        elif kind == "user":
            current.lines.append(line[5:])
        else:
            current.lines.append(line)
    if any(b.kind == "tool" and _reports_usage(b) for b in session.blocks):
        _rejoin_quotes(session, [line for _, line in lines])
    return session


def _rejoin_quotes(session: Session, lines: list[str]) -> None:
    """Put back into their replies the ``> `` quotes that end with two spaces (a markdown line break), in a session
    whose replies are each followed by aider's usage report (``Tokens: ...``, v0.4x on): output lines after a reply
    that hold no report, followed by more of the reply or by the report, are the reply's own."""
    blocks = session.blocks
    i = 0
    while i < len(blocks):
        j = i + 1
        if blocks[i].kind == "assistant":
            while j < len(blocks) and blocks[j].kind == "tool" and not _reports_usage(blocks[j]):
                j += 1
            rest = blocks[j] if j < len(blocks) else None
            ends = rest is not None and (rest.kind == "assistant" or (rest.kind == "tool" and _reports_usage(rest)))
            if j > i + 1 and ends:
                last = j if rest is not None and rest.kind == "assistant" else j - 1
                first = blocks[i]
                start, end = first.span[0], blocks[last].span[1]
                blocks[i : last + 1] = [Block("assistant", first.line, lines[start : end + 1], (start, end))]
                continue
        i = j if j > i + 1 else i + 1


def _reports_usage(block: Block) -> bool:
    return any(entry.startswith("Tokens: ") for entry in block.lines)


def _modern(line: str, strict: bool) -> str:
    """A line of the pre-v0.5.0 grammar in today's: the ``---`` before a prompt is a blank, ``#### >  text`` is
    ``#### text``, an ``_italic_`` (or ``*italic*``) output line is a ``> `` one."""
    if line == "---":
        return ""
    if line.startswith("#### >  "):
        return "#### " + line[8:]
    body = line[:-2] if line.endswith("  ") else line
    if (line.endswith("  ") or not strict) and len(body) > 2 and body[0] == body[-1] and body[0] in "_*":
        return "> " + body[1:-1] + "  "
    return line


def _quotes(current: Block | None, lines: list[tuple[int, str]], k: int) -> bool:
    """Whether a ``> `` line without aider's two spaces is a reply's own quote rather than the first line of an output
    message of several lines. Such a message comes right after a prompt or an output line (a /git usage text, an
    edit error), or first in a session (a command line of several lines): inside a reply (blank lines are part of
    it), or after a blank line, a quote, unless its lines run to aider's two spaces before any blank line."""
    if current is not None:
        return current.kind == "assistant"
    return not _one_message(lines, k)


def _one_message(lines: list[tuple[int, str]], start: int) -> bool:
    """Whether the lines from ``start`` on end as one output message (:func:`_ends_message`) before a blank line."""
    for k in range(start, len(lines)):
        line = lines[k][1]
        if not line.strip():
            return False
        if _ends_message(line, lines[k + 1][1] if k + 1 < len(lines) else None):
            return True
    return False


def _ends_message(line: str, following: str | None) -> bool:
    """Whether ``line`` is the last of an output message: it ends with aider's two spaces and what follows starts
    another piece (a blank line, a ``> `` or ``#### `` line, the end). The lines of a multi-line question's subject
    are padded with spaces to one width, so two spaces alone do not end a message."""
    if not line.endswith("  "):
        return False
    return following is None or not following.strip() or following.startswith((">", "#### "))


def prompt_text(block: Block) -> str:
    """What the user typed: the ``#### `` lines joined, without the two spaces aider appended to each."""
    return "\n".join(line[:-2] if line.endswith("  ") else line for line in block.lines)


def reply_parts(block: Block) -> tuple[Part, ...]:
    """A reply's reasoning (when aider logged it in tags) and its answer."""
    return reasoning_and_answer("\n".join(block.lines).strip())


def _session_excerpt(session: Session) -> str:
    head = [f"# aider chat started at {session.when}"] if session.when else []
    for block in session.blocks[:6]:
        prefix = {"user": "#### ", "tool": "> ", "assistant": ""}[block.kind]
        head.extend(prefix + line for line in block.lines[:4])
    return "\n".join(head)


# ------------------------------------------------------------------------------------------------ interpretation
def command_of(text: str) -> tuple[str | None, str] | None:
    """``(command, arguments)`` of a typed command (``None`` as the command when no command or several match, as
    aider's own ``Invalid``/``Ambiguous command``), or None when ``text`` is not a command."""
    if not text.startswith(("/", "!")):
        return None
    if text.startswith("!"):
        return "run", text[1:]
    word = text[1:].partition(" ")[0].split("\n", 1)[0]
    rest = text[1 + len(word) :].strip()
    if word in COMMANDS:
        return word, rest
    matches = [c for c in COMMANDS if c.startswith(word)] if word else []
    return (matches[0] if len(matches) == 1 else None), rest


def _version(text: str) -> tuple[int, ...] | None:
    match = re.match(r"Aider v(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(g) for g in match.groups()) if match else None


class _SessionBuilder:
    """Replays one session as aider kept its history (see the module docstring)."""

    def __init__(self, path: Path, index: int, session: Session):
        self.graph = MessageGraph(graph_id=f"{graph_id_for('aider', None, path)}:{index}", policy=POLICY)
        self.chain = Chain(self.graph)
        self.session = session
        self.model: str | None = None
        self.editor_model: str | None = None
        self.version: tuple[int, ...] | None = None
        self.prompt: str | None = None  # the logged prompt not yet answered (held: an interrupt may change it)
        self.interrupted = False  # a ^C since the prompt, before any reply
        self.in_flight = False  # that ^C came while the request could still be running (no output before it)
        self.settled = False  # aider printed something since the prompt (an error, a refusal): not in flight
        self.echo: str | None = None  # the text a chat command sends, which aider logs again as a prompt
        self.last_reply: str | None = None
        self.handoff = False  # the user accepted "Edit the files?": the editor is handed the last reply
        self.editor_prompt: str | None = None
        self.subject: str | None = None  # the last output line: the file a following question asks about
        self.mentioned: list[str] = []  # files of the last reply the user let aider add: their note is the prompt
        self.since_usage: list[str] = []  # the output lines since the last usage report
        self.on_branch = False  # the last reply is on the branch (not a side branch, not interrupted)
        self.edit_error = False  # aider said the last reply's edits failed: its error message comes next
        self.reflection: str | None = None  # that error, which aider sends as the next prompt
        self.command: str | None = None  # the last command, while nothing else was typed after it
        self.added: list[str] = []  # the files that command (an /add) added
        # Why aider's history is no longer what the transcript shows (a restored or summarised history), until /clear.
        self.unknown_history: str | None = None
        self.edit_format: str | None = None  # the coder's, from its announcement
        self.switching = False  # a command that may summarise the history when the edit format changes ran
        self.tracking = False  # the last reply is on the branch: its output says whether its edits were applied
        self.edits = False  # they were
        self.note: str | None = None  # what aider adds to its history after that reply (a commit note), with "Ok."
        self.chat = False
        self.main_chain: Chain | None = None  # the session's branch while /lint's conversation is the current one

    def build(self) -> MessageGraph | None:
        for block in self.session.blocks:
            if block.kind == "tool":
                self._output(block)
            elif block.kind == "user":
                self._prompt(block)
            else:
                self._reply(block)
        self._flush_prompt()
        if not any(n.message.role == "assistant" for n in self.graph.nodes.values()):
            return None  # no reply: nothing the model sampled (prompts whose requests failed, or none at all)
        mark_context_incomplete(self.graph, ["files", "system_prompt"], UNLOGGED_CONTEXT)
        if self.session.when:
            self.graph.metadata["started_at"] = self.session.when
        return self.graph

    # ------------------------------------------------------------------ the three kinds of block
    def _output(self, block: Block) -> None:
        for line in block.lines:
            text = line.strip()
            if text.startswith("^C ") and (self.prompt is not None or self.mentioned):
                self.interrupted = True
                self.in_flight = self.in_flight or not self.settled
            elif text and not QUESTION.search(text):
                self.settled = True
            if text.startswith("^C "):
                continue
            if self.command == "add" and (added := re.match(r"Added (.+) to the chat$", text)):
                self.added.append(added.group(1))
            if self.edit_error and (failure := _edit_failure(text)) is not None:
                self.reflection, self.edit_error = failure, False
            elif text == "The LLM did not conform to the edit format." and self.prompt is None and self.on_branch:
                self.edit_error = True
            elif text == "Restored previous conversation history." and not self.chat:
                self.unknown_history = RESTORED_WHY  # --restore-chat-history: announced before any prompt
            elif text == "Processing your request...":  # --watch-files: an "AI!" comment is the prompt, unlogged
                self._flush_prompt()
                self.command, self.added = None, []
            elif match := re.match(r"(?:Main model|Models?): (\S+)", text):
                self.model = match.group(1)
                self._announced(re.search(r"(?:with|using) (\S+) edit format", text))
            elif match := re.match(r"Editor model: (\S+)", text):
                self.editor_model = match.group(1)
            elif (version := _version(text)) is not None:
                self.version = version
            elif text.startswith("Applied edit to ") and self.tracking:
                self.edits = True
            elif (commit := re.match(r"Commit ([0-9a-f]{7,40}) (.+)", text)) and self.edits and self.tracking:
                self.note = EDITS_COMMITTED.format(hash=commit.group(1), message=commit.group(2))
                self.tracking = False  # the first commit is the note; a later one (the linter's) is not
            elif text.startswith("Edit the files?") and QUESTION.search(text):
                self.handoff = _accepted(text)
            elif QUESTION.search(text) and self.prompt is None and _accepted(text):
                self.mentioned.extend(self._mentions(text))
            if text and not QUESTION.search(text):
                self.subject = text
                self.since_usage = [] if text.startswith("Tokens: ") else [*self.since_usage, text]

    def _prompt(self, block: Block) -> None:
        text = prompt_text(block)
        if text.strip() in ("", "<blank>") or ("\n" not in text and ANSWERED.search(text)):
            return  # an empty input, or a question's answer logged as input: nothing is sent
        if self.handoff and self.last_reply is not None and text.strip() == self.last_reply:
            self.handoff, self.editor_prompt = False, text
            self.note = EDITOR_DONE  # what the architect's history gets once the editor has run
            self.tracking = False  # the editor's edits and commit are noted in its own conversation
            return
        self._settle_note()
        if self.main_chain is not None and not text.startswith(LINT_PROMPT):
            self._flush_prompt()
            self.chain, self.main_chain = self.main_chain, None  # /lint's own conversation is over
        self.handoff = False
        if self.echo is not None and text == self.echo:
            self.echo = None
            return
        self.echo = None
        command = command_of(text)
        self.command, self.added = (command[0] if command else None), []
        if command is None:
            self._user(text)
            return
        name, args = command
        if name in CHAT_COMMANDS and args:
            self._user(args)
            self.echo = args
        elif name == "ok":
            message = f"{OK_MESSAGE} {args}" if args else OK_MESSAGE
            self._user(message)
            self.echo = message
        elif name == "help" and args:  # answered by aider's help coder, from its docs, not this conversation
            self._flush_prompt()
            self.echo = args
        elif name == "chat-mode" or (name in ("architect", "context") and not args) or name == "model":
            # Coder.create summarises the history when the edit format changes (not for ask and code modes).
            self.switching = name == "model" or (args if name == "chat-mode" else name) not in ("ask", "code")
        elif name in CLEARING_COMMANDS:
            self._flush_prompt()
            self.chain.rewind(0)
            self.unknown_history = None
        elif name == "lint":
            # cmd_lint runs a coder with an empty history on each file's errors, which it logs as prompts.
            self._flush_prompt()
            self.main_chain, self.chain = self.chain, Chain(self.graph)

    def _reply(self, block: Block) -> None:
        message = PartsMessage(parts=reply_parts(block), policy=POLICY, role_hint_for_llm="assistant")
        self.on_branch = False
        self.since_usage = []
        self.chat = True
        self.last_reply = message.parts[-1].text if isinstance(message.parts[-1], TextPart) else None
        if self.editor_prompt is not None:  # the editor's own conversation: the architect's reply, then this
            root = self.graph.add_node(None, _user_message(self.editor_prompt), origin=Origin.CONTEXT)
            generation = _generation(self.editor_model or self.model)
            self.graph.add_node(root, message, origin=Origin.SAMPLED, generation=generation)
            self.editor_prompt = None
            return
        self._settle_note()
        if self.prompt is not None:
            self.chain.append(_user_message(self.prompt))
            self.prompt = None
        elif self.mentioned:
            # The files a reply named and the user let aider add: aider sends their note as the next prompt.
            self.chain.append(_user_message(ADDED_FILES.format(fnames=", ".join(self.mentioned))), Origin.INJECTED)
            self.mentioned = []
        elif (returned := self._command_message()) is not None:
            # Before v0.49, /add (after some chat) and /undo returned a message aider sent: this reply answers it.
            self.chain.append(_user_message(returned), Origin.INJECTED)
        elif (reflection := self._take_reflection()) is not None:
            # The edits of the last reply failed to match: aider sent the error back as the next prompt.
            self.chain.append(_user_message(reflection), Origin.INJECTED)
        else:
            # No logged prompt since the last reply: what the model answered is not in the transcript.
            unseen = message.model_copy(update={"metadata": {"why_not_trained": UNSEEN_PROMPT}})
            self.graph.add_node(self.chain.head, unseen, origin=Origin.CARRIED)
            return
        if self.interrupted:
            interrupted = message.model_copy(
                update={"metadata": {"interrupted": True, "why_not_trained": INTERRUPTED_WHY}}
            )
            self.chain.append(interrupted, Origin.CARRIED)
            self._interrupt_pair(after_reply=True)
            self.interrupted = self.in_flight = False
            return
        self.tracking = self._notes_edits()  # its output says whether aider applied its edits
        self.on_branch = True  # a failed edit of this reply is reflected on this branch
        if self.unknown_history is not None:
            update = {"metadata": {"why_not_trained": self.unknown_history}}
            self.chain.append(message.model_copy(update=update), Origin.CARRIED)
            return
        self.chain.append(message, Origin.SAMPLED, generation=_generation(self.model))

    # ------------------------------------------------------------------ history as aider keeps it
    def _mentions(self, question: str) -> list[str]:
        """The files an accepted question about the files a reply named adds, in aider's three forms: "Add file to
        the chat?" after the file's line (v0.7x on), "Add NAME to the chat?" (v0.6x), "Add these files to the chat?"
        after their lines (before)."""
        if question.startswith("Add file to the chat?"):
            return [self.subject] if self.subject else []
        if question.startswith("Add these files to the chat?"):
            return list(self.since_usage)
        named = re.match(r"Add (.+) to the chat\? \(Y\)es", question)
        if named is None or named.group(1) == "URL" or named.group(1).endswith("command output"):
            return []  # a URL of a prompt, a shell command's output: not files a reply named
        return [named.group(1)]

    def _command_message(self) -> str | None:
        """What the last command returned, when a reply follows it with nothing typed between."""
        command, added, self.command, self.added = self.command, self.added, None, []
        if command == "add" and added:
            return ADDED_FILES.format(fnames=", ".join(added))
        return UNDO_REPLY if command == "undo" else None

    def _take_reflection(self) -> str | None:
        reflection, self.reflection, self.edit_error = self.reflection, None, False
        return reflection

    def _settle_note(self) -> None:
        """After a reply whose edits aider applied, its history holds a note (the commit, or "I updated the files."
        when nothing was committed) and "Ok." (``move_back_cur_messages``): put them on the branch before what
        comes next."""
        note = self.note or (EDITS_UNCOMMITTED if self.edits else None)
        self.note, self.edits, self.tracking = None, False, False
        if note is None or self.chain.head is None:
            return
        self.chain.append(_user_message(note), Origin.INJECTED)
        ok = PartsMessage(parts=(TextPart(text="Ok."),), policy=POLICY, role_hint_for_llm="assistant")
        self.chain.append(ok, Origin.INJECTED)

    def _user(self, text: str) -> None:
        self._flush_prompt()
        self.prompt = text
        self.chat = True
        self.interrupted = self.in_flight = self.settled = False
        self.mentioned = []
        self._take_reflection()  # the user spoke instead

    def _flush_prompt(self) -> None:
        """A prompt that got no reply stays in aider's history (the request failed, or was interrupted before any
        text: then aider appends ``^C KeyboardInterrupt`` to it)."""
        if self.prompt is None:
            return
        text, self.prompt = self.prompt, None
        # Only a request still running when the user pressed ^C is interrupted; a ^C after aider refused or failed
        # it (a context too large, an API error) was at the input prompt, and changes nothing.
        in_flight = self.interrupted and self.in_flight and self._pairs_interrupts()
        if in_flight:
            text += "\n" + INTERRUPT_USER
        self.chain.append(_user_message(text))
        if in_flight:
            self._interrupt_pair(after_reply=False)
        self.interrupted = self.in_flight = False

    def _announced(self, edit_format: re.Match[str] | None) -> None:
        """A coder's announcement: after a switch that changed the edit format, aider summarised a non-empty
        history (``Coder.create`` with ``summarize_from_coder``), with its weak model, unlogged."""
        new = edit_format.group(1) if edit_format else None
        changed = self.edit_format is not None and new is not None and new != self.edit_format
        if self.switching and changed and self.chain.head is not None:
            self.unknown_history = SUMMARISED_WHY
        self.switching = False
        self.edit_format = new or self.edit_format

    def _notes_edits(self) -> bool:
        """Whether this aider adds a note after applied edits (v0.8.0 on; not the pre-v0.5.0 grammar)."""
        return not self.session.legacy and (self.version is None or self.version >= NOTES_SINCE)

    def _pairs_interrupts(self) -> bool:
        return self.version is None or self.version >= INTERRUPT_PAIR_SINCE

    def _interrupt_pair(self, after_reply: bool) -> None:
        if not self._pairs_interrupts():
            return
        if after_reply:
            self.chain.append(_user_message(INTERRUPT_USER), Origin.INJECTED)
        note = PartsMessage(parts=(TextPart(text=INTERRUPT_ASSISTANT),), policy=POLICY, role_hint_for_llm="assistant")
        self.chain.append(note, Origin.INJECTED)


def _edit_failure(text: str) -> str | None:
    """The message aider sent back for an edit error logged as ``text``, when the log holds it whole."""
    for pattern, ending in EDIT_FAILURES:
        if pattern.match(text):
            return text + ending
    return None


def _accepted(question: str) -> bool:
    """Whether a logged question (:data:`QUESTION`) was answered yes (or all, or by its default)."""
    if not question.rstrip().endswith("]:") and re.search(r"\? (?:y|yes)\s*$", question, re.IGNORECASE):
        return True  # "...? y", before v0.5x
    if "[" not in question:
        return False
    answer = question.rsplit(":", 1)[1].strip().lower()
    default = question.rsplit("[", 1)[1].split("]", 1)[0].strip().lower()
    return (answer or default)[:1] in ("y", "a")


def _user_message(text: str) -> PartsMessage:
    return PartsMessage(parts=(TextPart(text=text),), policy="user", role_hint_for_llm="user")


def _generation(model: str | None) -> Generation | None:
    return Generation(model=model) if model else None


def _session_events(
    path: Path, index: int, session: Session, ref: SourceRef, logged: frozenset[str] = frozenset()
) -> Iterator[ReadEvent]:
    builder = _SessionBuilder(path, index, session)
    graph = builder.build()
    if graph is None:
        # Said apart: prompts that got no reply (failed requests, a refusal, ^C) are not a session with no chat.
        yield ReadSkip(ref, "aider_session_without_replies" if builder.chat else "aider_session_without_chat")
        return
    _leave_logged_replies(graph, logged)
    yield ReadGraph(graph, ref)


# ------------------------------------------------------------------------------------------ the LLM history beside
LLM_HISTORY_NAME = ".aider.llm.history"
_RESPONSE = re.compile(r"^LLM RESPONSE \d{4}-\d\d-\d\dT")
_REQUEST = re.compile(r"^TO LLM \d{4}-\d\d-\d\dT")
LOGGED_WHY = (
    "trained from the LLM history beside the transcript (.aider.llm.history), in the request aider logged: here it is "
    "a copy in a context without the system prompt and files"
)


def _logged_replies(path: Path) -> frozenset[str]:
    """The replies of the LLM history beside a transcript (``LLM RESPONSE`` blocks, their ``ASSISTANT `` prefixes
    removed, stripped as the transcript strips a reply), reached through the storage interface; empty when there is
    none."""
    files = input_files()
    replies: set[str] = set()
    for partner in READER.partners(files.location(path), files):
        f = files.open_sibling(path, partner)
        if f is None:
            continue
        with f:
            lines: list[str] | None = None
            for raw in bounded_lines(f):
                line = raw.decode("utf-8", "replace").rstrip("\n").rstrip("\r")
                if _RESPONSE.match(line) or _REQUEST.match(line):
                    if lines is not None:
                        replies.add(_answer("\n".join(lines)))
                    lines = [] if _RESPONSE.match(line) else None
                elif lines is not None:
                    lines.append(line.removeprefix("ASSISTANT").removeprefix(" "))
            if lines is not None:
                replies.add(_answer("\n".join(lines)))
    replies.discard("")
    return frozenset(replies)


def _answer(reply: str) -> str:
    """A logged reply's answer, its reasoning wrapper removed (the transcript's reply text is its answer alone)."""
    return "".join(p.text for p in reasoning_and_answer(reply.strip()) if isinstance(p, TextPart)).strip()


def _leave_logged_replies(graph: MessageGraph, logged: frozenset[str]) -> None:
    """A sampled reply the LLM history beside the transcript also holds is trained there, in its exact request: here it
    is kept as context, a copy counted apart (``history_copy``), never a second training of the same turn."""
    if not logged:
        return
    for nid, node in list(graph.nodes.items()):
        if node.origin is Origin.SAMPLED and node.is_assistant and node.message.text.strip() in logged:
            metadata = {**node.message.metadata, "why_not_trained": LOGGED_WHY, HISTORY_COPY: True}
            message = node.message.model_copy(update={"metadata": metadata})
            graph.nodes[nid] = replace(node, origin=Origin.CARRIED, message=message)


READER = AiderReader()
