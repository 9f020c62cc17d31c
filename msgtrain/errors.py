"""The one exception root of msgtrain.

Every error msgtrain raises on purpose derives from :class:`MsgtrainError`; each category also inherits the
matching builtin (``ValueError``, ``OSError``) so callers that catch builtins keep working. Errors carry a
location (file, line/record, graph, node or message index), what was wrong, and how to fix it, and render as
one actionable line. They are picklable because they cross worker-process boundaries.
"""

from __future__ import annotations

from typing import Any


class MsgtrainWarning(UserWarning):
    """Warnings msgtrain emits (the test-suite turns them into errors)."""


class MsgtrainError(Exception):
    """Root of every msgtrain error.

    ``code`` is a stable machine-readable reason (used in rejects files and reports); ``where`` locates the
    problem (``file.jsonl:12``, ``graph abc message[3]``); ``hint`` says how to fix it.
    """

    code: str = "error"

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None, code: str | None = None):
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
