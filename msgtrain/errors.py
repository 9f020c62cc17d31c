"""The one exception root of msgtrain.

Every error msgtrain raises on purpose derives from :class:`MsgtrainError`; each category also inherits the
matching builtin (``ValueError``, ``OSError``) so callers that catch builtins keep working. Errors carry a
location (file, line/record, graph, node or message index), what was wrong, and how to fix it, and render as
one actionable line. They are picklable because they cross worker-process boundaries.
"""

from __future__ import annotations

import re
from typing import Any, overload

_SURROGATES = re.compile("[\ud800-\udfff]")


@overload
def printable(text: str) -> str: ...
@overload
def printable(text: None) -> None: ...
def printable(text: str | None) -> str | None:
    """``text`` with lone UTF-16 surrogates (which no UTF-8 terminal, file or Arrow column takes) replaced by U+FFFD.

    Error messages quote input (an unknown role, a bad key), and input may hold them (a JSON ``"\\ud800"``): every
    message, location and hint goes through here so that reporting an error never becomes a new one."""
    if text is None or text.isascii():
        return text
    return _SURROGATES.sub("\ufffd", text)


class MsgtrainWarning(UserWarning):
    """Warnings msgtrain emits (the test-suite turns them into errors)."""


class MsgtrainError(Exception):
    """Root of every msgtrain error.

    ``code`` is a stable machine-readable reason (used in rejects files and reports); ``where`` locates the
    problem (``file.jsonl:12``, ``graph abc message[3]``); ``hint`` says how to fix it.
    """

    code: str = "error"

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None, code: str | None = None):
        message, where, hint = printable(message), printable(where), printable(hint)
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint
        if code is not None:
            self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructor arguments do not survive default pickling; rebuild explicitly.
        return (_rebuild, (type(self), self.message, self.where, self.hint, self.code))

    def located(self, where: str) -> MsgtrainError:
        """Return the same error with an outer location prepended (``file:line`` around ``message[3]``)."""
        inner = f"{where} {self.where}" if self.where else where
        return type(self)(self.message, where=inner, hint=self.hint, code=self.code)

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f" (fix: {self.hint})"
        return text


def _rebuild(cls: type[MsgtrainError], message: str, where: str | None, hint: str | None, code: str) -> MsgtrainError:
    return cls(message, where=where, hint=hint, code=code)


class ValidationError(MsgtrainError, ValueError):
    """A message, graph or record breaks the model's rules (unknown role, unpaired tool result, cycle...)."""

    code = "invalid"


class ParseError(MsgtrainError, ValueError):
    """Input bytes could not be read as the format they claim to be (bad JSON, bad UTF-8, truncated line)."""

    code = "parse_error"


class FormatError(MsgtrainError, ValueError):
    """No reader recognises a file, or a forced reader cannot read it."""

    code = "unknown_format"


class RenderError(MsgtrainError, ValueError):
    """A chat template failed, timed out, or produced output that cannot be tokenized exactly."""

    code = "render_error"


class TokenizerError(MsgtrainError, OSError):
    """A tokenizer could not be loaded (missing folder, no network for a hub id, no chat template)."""

    code = "tokenizer_error"


class ConfigError(MsgtrainError, ValueError):
    """A config file or CLI option is invalid (unknown key, bad value)."""

    code = "config_error"


class OutputError(MsgtrainError, OSError):
    """The output location cannot be written or published."""

    code = "output_error"


class DatasetError(MsgtrainError, OSError):
    """A file of an exported dataset cannot be read back (truncated, damaged, or not written by msgtrain)."""

    code = "unreadable_dataset_file"


# Fix hints for reject reasons whose raising site gives none: every line of ``rejects.jsonl`` carries a hint.
REJECT_HINTS: dict[str, str] = {
    "parse_error": "the record is not valid for its format; fix or drop the line",
    "bad_json": "the line is not valid JSON (often a log cut mid-write): fix or drop it",
    "bad_json_field": "a field that should hold JSON text does not parse: fix the field",
    "truncated_line": "the line was cut mid-write (a crashed logger); drop it or re-export the log",
    "record_too_large": "the record is above the size limit; split it or drop it",
    "too_deep": "the record nests deeper than any conversation needs; drop it",
    "unknown_format": "no reader recognises this file; force one with --input-format (see `msgtrain formats`)",
    "unreadable_file": "check the file's permissions and that it is not being written",
    "empty_input": "the file holds no records; drop it from the inputs",
    "bad_yaml": "the YAML does not parse (or expands beyond the limits); fix or drop the file",
    "bad_document": "the JSON document does not have the shape its format expects; check --input-format",
    "unknown_role": "use one of the roles the format defines (system, user, assistant, tool)",
    "spoofed_role": "a record claims a role its source cannot produce; check where the log came from",
    "bad_message": "the message lacks a field its format requires or has one of the wrong type; fix the record",
    "bad_content": "the message content has an unexpected type or part; fix the record",
    "bad_record": "the record lacks a field its format requires or has one of the wrong type; fix the record",
    "bad_tool_call": "a tool call needs an id, a name and arguments (a JSON object); fix the record",
    "bad_tools": "tool schemas must be a list of function definitions; fix the record",
    "unpaired_result": "a tool result must follow the assistant call with the same tool_call_id; fix the ids",
    "missing_tool_call_id": "give the tool message the tool_call_id of the call it answers",
    "dangling_parent": "a node names a parent that is not in the log; the log may be cut: re-export it",
    "cycle": "the parent links form a loop; fix the log's parent ids",
    "duplicate_id": "two nodes share one id; make ids unique",
    "conversation_too_large": "split the log into conversations",
    "internal_error": "please report this with the rejected record",
    "template_error": "the chat template failed on this conversation; check the template or the record",
    "template_timeout": "the chat template ran too long on this conversation; check the template",
    "template_output_too_large": "the rendering is above the size limit; split the conversation",
    "render_error": "the conversation cannot be rendered token-exactly with this template; check the template",
    "replay_mismatch": "the logged engine ids do not match the rendering; check the tokenizer matches the run",
    "prerendered_prompt": "the prompt was logged as text a chat template rendered; log its messages or token ids",
}


def reject_hint(error: MsgtrainError) -> str:
    """The hint a reject is shown with: the error's own, else one for its reason, else a general one."""
    if error.hint:
        return error.hint
    if error.code in REJECT_HINTS:
        return REJECT_HINTS[error.code]
    if isinstance(error, ValidationError):
        return "the record breaks the format's rules (see message and where); fix or drop the record"
    if isinstance(error, ParseError | FormatError):
        return "the record does not parse as its format; check --input-format or drop the record"
    return "see message and where; fix or drop the record, or report it if it is valid for its format"


_OS_HINTS = {
    "ENOSPC": "free disk space (or point -o / TMPDIR elsewhere) and rerun with --resume",
    "EDQUOT": "free space in your quota and rerun with --resume",
    "EROFS": "the file system is read-only: choose another -o",
    "EACCES": "check the permissions of that path, or choose another -o",
    "EPERM": "check the permissions of that path, or choose another -o",
    "ENOTDIR": "a part of that path is a file, not a directory: choose another -o",
    "EMFILE": "raise the open-file limit (ulimit -n) or lower --workers",
}


def os_error_line(error: OSError) -> str:
    """An OSError the system raised (disk full, read-only, permission) as one line: what, where, how to fix."""
    import errno as _errno

    name = _errno.errorcode.get(error.errno or 0, "")
    where = error.filename if error.filename is not None else None
    text = f"{where}: " if where else ""
    text += error.strerror or str(error)
    if name:
        text += f" ({name})"
    hint = _OS_HINTS.get(name)
    return text + (f" (fix: {hint})" if hint else "")
