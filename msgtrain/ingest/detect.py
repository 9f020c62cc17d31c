"""Per-file format detection: which reader reads a file, decided by a vote of its records.

Invariants:
- Cheap and bounded: only the file's first :data:`~msgtrain.ingest.core.base.HEAD_BYTES` are read (more only for a
  file no reader recognises from them: the fallback readers look at :data:`EXPLAIN_BYTES`, as the explanation does,
  since a first record longer than the head may hold its messages past it); at most :data:`VOTE_RECORDS` records, each
  shown to every candidate's detector once.
- Lazy, with the same answer: only the readers whose marks the head holds (the candidates,
  :func:`~msgtrain.ingest.registry.candidates`) are imported and asked; every other reader's detector refuses the
  head and each of its records, so leaving it out changes no vote.
- Bad records do not decide: each parseable record of the head (a JSONL line, or an item of a top-level JSON array)
  votes, and a reader accepting at least half of them reads the file (most votes; ties by registry order), so
  broken or foreign records anywhere — the first ones included — cost only themselves. Only when no reader takes
  half of the records (formats whose records cannot be told apart one by one) does the head as a whole decide.
- Messages are not records: a file whose records are mostly messages (a saved message list, one message per line)
  is one conversation, and the head as a whole decides. Voted message by message, a reader that claims any message
  with a familiar role (OpenAI chat) would outvote the one that can read the blocks a few messages hold (a coding
  assistant's saved Anthropic history: text-only user turns, then ``tool_use`` / ``tool_result`` blocks).
- A file no reader recognises raises :class:`~msgtrain.errors.FormatError` whose hint says what the file looks like
  and why the closest readers refused it (their optional ``explain``).
"""

from __future__ import annotations

import json
from pathlib import Path

from msgtrain.errors import FormatError
from msgtrain.ingest.common.message_like import is_message_like
from msgtrain.ingest.core.base import HEAD_BYTES, Reader, _head_lines, _mostly_records, read_head
from msgtrain.ingest.core.text_input import open_input, unmarked_utf16
from msgtrain.ingest.registry import REGISTRY, candidates, directory_reader, entries, with_trait

VOTE_RECORDS = 32  # records of the head that vote on the file's format


def detect_format(path: Path) -> Reader:
    """The reader for ``path`` (see the module docstring); raises :class:`FormatError` with an explaining hint.

    A directory goes to the directory reader that claims it. A file's format is decided by its records, not its
    first lines: each of the first :data:`VOTE_RECORDS` records of its head that parse (JSONL lines, or the items of
    a top-level JSON array) is shown to every detector on its own, as a one-record file would be; a reader that
    accepts at least half of them reads the file (the one accepting most; ties by registry order), so bad records
    anywhere — the first ones included — cost only themselves. Formats whose records cannot be told apart one by
    one (a session header line, then events) are recognised from the head as a whole: when no reader takes half of
    the records, the first reader (registry order) accepting the whole head reads the file. Only the readers whose
    marks admit the head are imported and asked (:func:`~msgtrain.ingest.registry.candidates`; the others refuse it
    and each of its records). Cost: one 64 KiB head, at most ``VOTE_RECORDS`` × candidates cheap detector calls,
    each record's shape scanned once.
    """
    if path.is_dir():
        reader = directory_reader(path)
        if reader is not None:
            return reader
        raise FormatError(
            "no reader takes this directory as one log",
            where=str(path),
            hint="pass the log files inside it, or a folder a directory reader knows (see msgtrain formats)",
        )
    head = read_head(path)
    found = candidates(path, head)
    specific = [e.load() for e in found if "fallback" not in e.traits]
    voted = _majority_reader(path, head, specific)
    if voted is not None:
        return voted
    for reader in specific:
        if _accepts(reader, path, head):
            return reader
    for entry in found:  # fallback readers: only where no specific reader claims the file
        if "fallback" in entry.traits and _accepts(fallback := entry.load(), path, head):
            return fallback
    # A first record longer than the head may hold its messages past it (an RL rollout group's token arrays come
    # first): the fallback readers, which find conversations by shape, look as far as an explanation would.
    deeper = _explain_head(path, head)
    for entry in candidates(path, deeper) if deeper is not head else ():
        if "fallback" in entry.traits and _accepts(fallback := entry.load(), path, deeper):
            return fallback
    raise FormatError("no reader recognises this file", where=str(path), hint=unknown_format_hint(path, head))


def looks_like_a_log(path: Path) -> bool:
    """Whether a file whose name has no log suffix (a Letta ``.af`` agent file, a ``.log`` of JSON lines, a file
    without a suffix, an AG2 ``logs.db``, an aider ``.aider.chat.history.md``) holds JSON a reader recognises, the
    structural reader's message shapes included, is a SQLite database a reader recognises by its tables, or is text
    a text reader (``reads_text``) recognises from its name and first KiB. Nothing else is looked at: a notebook, a
    README or a config that holds no conversation is not a log, and stays passed over
    (:func:`passed_over_reason` says why)."""
    try:
        with open_input(path) as f:
            head = f.read(1024)
    except OSError:
        return False
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    readers = [e.load() for e in candidates(path, head) if "reads_text" in e.traits]
    if any(_accepts(reader, path, head) for reader in readers):
        return True
    # JSON, or a SQLite database (AG2's runtime logs.db) that a reader recognises by its tables.
    if start[:1] not in (b"{", b"[") and not start.startswith(b"SQLite format 3\x00"):
        return False
    try:
        detect_format(path)
    except Exception:  # not recognised (or unreadable): passed over, with its reason
        return False
    return True


TEXT_SUFFIXES = (".md", ".markdown")  # markdown a transcript reader could read: passed over with its why


def text_readers() -> list[Reader]:
    """The readers of a text format (``reads_text``: markdown transcripts, not JSON), asked about files without a
    log suffix."""
    return with_trait("reads_text")


def passed_over_reason(name: str, not_a_log: str) -> str:
    """Why input discovery passed over a file named ``name`` (``not_a_log``: the plain reason): for text a transcript
    reader could have read (a README, notes), what such a transcript looks like, so a transcript whose head was cut
    or changed is not lost without a word."""
    if not name.lower().endswith(TEXT_SUFFIXES):
        return not_a_log
    hints = "; ".join(str(getattr(r, "text_hint", r.name)) for r in text_readers())
    return f"{not_a_log}: text that is not a transcript a reader knows ({hints})"


EXPLAIN_BYTES = 4 * 1024 * 1024  # how much of an unrecognised file the explanations look at


def _explain_head(path: Path, head: bytes) -> bytes:
    """More of the file than detection saw, so an explanation can find messages nested deep in a document."""
    if len(head) < HEAD_BYTES:
        return head
    try:
        with open_input(path) as f:
            return f.read(EXPLAIN_BYTES)
    except OSError:
        return head


def specific_readers() -> list[Reader]:
    """The registered readers that are not fallbacks (a fallback, such as the structural reader, finds
    conversations by shape in any file; it is offered a file only when none of these claims it), all imported."""
    return [e.load() for e in entries() if "fallback" not in e.traits]


def _accepts(reader: Reader, path: Path, head: bytes) -> bool:
    try:
        return bool(reader.detect(path, head))
    except Exception:  # a detector that trips on odd bytes has not recognised the file; the others still look
        return False


def head_records(head: bytes, limit: int = VOTE_RECORDS) -> list[bytes]:
    """Up to ``limit`` records of a head, each as the bytes of a one-record file: the lines of a JSONL head that
    parse as JSON objects or arrays (newline-terminated), or the object items of a top-level JSON array (each as
    ``[item]``). Records cut off by the end of the head, and heads of any other shape, give none."""
    records, filled = _head_lines(head)
    if _mostly_records(records, filled):
        return records[:limit]
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"[":
        return _array_items(head, limit)
    return []


_DECODER = json.JSONDecoder()


def _array_items(head: bytes, limit: int) -> list[bytes]:
    """The complete object items at the start of a head holding a top-level JSON array, each as ``[item]``."""
    text = head.decode("utf-8", "ignore").lstrip("\ufeff \t\r\n")
    pos = 1  # after the "["
    out: list[bytes] = []
    n = len(text)
    while len(out) < limit:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n or text[pos] == "]":
            break
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):  # an item cut off by the head's end, or not JSON: no more items
            break
        if isinstance(value, dict):
            out.append(b"[" + text[pos:end].encode("utf-8", "replace") + b"]")
        pos = end
    return out


def _majority_reader(path: Path, head: bytes, readers: list[Reader] | None = None) -> Reader | None:
    """The reader accepting most of the head's records if it accepts at least half of them (ties: registry order),
    or None (fewer than two records, or no reader takes half). ``readers``: the specific readers that may vote (in
    registry order; by default all of them). Records are looked at one at a time, every reader in turn, so each
    record's shape is scanned once (detectors share :func:`head_shape`'s cache)."""
    records = head_records(head)
    if len(records) < 2 or _mostly_messages(records):
        return None
    if readers is None:
        readers = specific_readers()
    votes = [0] * len(readers)
    for k, record in enumerate(records):
        for i, reader in enumerate(readers):
            votes[i] += _accepts(reader, path, record)
        decided, winner = _vote_decided(votes, len(records) - k - 1, len(records))
        if decided:  # the records left cannot change the outcome: they are not shown to every detector
            return readers[winner] if winner is not None else None
    best = max(votes, default=0)
    if best == 0 or best * 2 < len(records):
        return None
    return readers[votes.index(best)]


def _vote_decided(votes: list[int], left: int, total: int) -> tuple[bool, int | None]:
    """Whether a vote whose ``left`` records are not counted yet is decided, and for whom (None: no reader can take
    half of the ``total`` records): the leader (the first with most votes) wins when it holds half of them already
    and no other reader can pass it with every record left (nor tie it, for a reader before it in registry order)."""
    best = max(votes, default=0)
    if (best + left) * 2 < total:
        return True, None
    if best == 0 or best * 2 < total:
        return False, None
    lead = votes.index(best)
    for j, v in enumerate(votes):
        if j != lead and (v + left > best or (v + left == best and j < lead)):
            return False, None
    return True, lead


def _mostly_messages(records: list[bytes]) -> bool:
    """Whether at least half of the records are single messages (one conversation, not independent records)."""
    messages = 0
    for record in records:
        try:
            value = json.loads(record)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, list) and len(value) == 1:  # an item of a top-level array, shown as ``[item]``
            value = value[0]
        messages += is_message_like(value)
    return messages * 2 >= len(records)


def describe_head(head: bytes) -> str:
    """What a file looks like, in one phrase, from its head (``JSONL of objects with keys a, b, c``)."""
    from msgtrain.ingest.common.head_shape import head_shape

    shape = head_shape(head)
    if shape.layout == "other":
        text = head[:40].decode("utf-8", "replace").strip()
        return f"not JSON (it starts with {text!r})" if text else "an empty file"
    top = sorted({p.split(".")[1].split("[")[0] for p in shape.paths if p.count(".") == 1})
    what = {"jsonl": "JSONL of objects", "array": "a JSON array of objects", "object": "a JSON object"}[shape.layout]
    if not top:
        return what
    shown = ", ".join(top[:12]) + (f" (+{len(top) - 12} more)" if len(top) > 12 else "")
    return f"{what} with keys {shown}"


def _text_records(head: bytes) -> bool:
    """Whether the head's records hold a ``text`` and little else (``{"text": ...}``, with an id or a source)."""
    from msgtrain.ingest.common.head_shape import head_shape

    shape = head_shape(head)
    top = {p.split(".")[1].split("[")[0] for p in shape.paths if p.count(".") == 1}
    return shape.layout != "other" and "text" in top and len(top) <= 3


def unknown_format_hint(path: Path, head: bytes) -> str:
    """The hint of an ``unknown_format`` reject: what the file looks like, and why the closest readers refused."""
    wide_text = unmarked_utf16(head)
    if wide_text is not None:
        return (
            f"the file looks like {wide_text} text without a byte-order mark (every other byte is zero); re-encode it "
            f"as UTF-8 (iconv -f {wide_text} -t UTF-8 {path.name} > {path.stem}.utf8{path.suffix}), or write it "
            "with a byte-order mark, which msgtrain decodes"
        )
    reasons: list[str] = []
    wide = _explain_head(path, head)
    for reader in with_trait("explain"):
        explain = reader.explain  # type: ignore[attr-defined]
        try:
            why = explain(path, wide)
        except Exception:
            why = None
        if why:
            reasons.append(f"{reader.name}: {why}")
    text = f"the file looks like {describe_head(wide)}"
    if _text_records(wide):
        text += (
            "; a record of a text alone is a document, not a conversation: msgtrain reads a text only when it is one "
            "whole conversation a chat template rendered (ChatML, Llama 3, Gemma, Phi-3 or DeepSeek turns, the last "
            "reply closed by its end token), and trains nothing of plain text (a pretraining corpus is for a "
            "pretraining tool)"
        )
    if reasons:
        text += "; closest readers: " + "; ".join(reasons[:3])
        text += "; fix those records, or force a reader with --input-format NAME"
    else:
        text += f"; no reader comes close (known formats: {', '.join(REGISTRY)})"
    return text
