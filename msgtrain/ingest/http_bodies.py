"""Recorded HTTP bodies back to the bytes the client read: content decoding and stream framing.

Recorders store what went over the wire. A body may be compressed (``Content-Encoding: gzip`` / ``deflate`` /
``br`` / ``zstd``, kept as YAML ``!!binary`` or base64 text), and a streamed body is framed: Server-Sent Events
(``text/event-stream``: ``event:`` / ``data:`` lines, blank-line separated) or the AWS event stream
(``application/vnd.amazon.eventstream``: length-prefixed binary messages with CRC32 checksums, what Bedrock's
``converse-stream`` and ``invoke-with-response-stream`` return). This module undoes both; it knows nothing of
providers (that is :mod:`msgtrain.ingest.streams`).

Invariants:
- Decoding never guesses silently: an encoding the header names is applied when its magic bytes are there
  (a recorder that decoded the body but kept the header, like VCR.py's ``decode_compressed_response``, leaves
  plain bytes, which are kept as they are); ``br`` and ``zstd`` need optional packages (``pip install
  'msgtrain[compression]'``) and a body that needs one that is missing is rejected with that fix, never read as
  garbage.
- Event-stream messages are checked against both of their CRC32 checksums; a damaged or truncated frame is an
  error, not a shorter stream.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import importlib
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from msgtrain.errors import FormatError, ValidationError

_ENCODINGS = ("gzip", "x-gzip", "deflate", "br", "zstd", "identity")


def header(headers: Any, name: str) -> str | None:
    """A header's value from a recorded header mapping (any case; VCR stores lists of values)."""
    if not isinstance(headers, dict):
        return None
    wanted = name.lower()
    for key, value in headers.items():
        if str(key).lower() == wanted:
            if isinstance(value, list):
                value = value[0] if value else None
            return None if value is None else str(value)
    return None


def decode_content(body: bytes, encoding: str | None, where: str = "body") -> bytes:
    """Undo ``Content-Encoding`` (several codings apply right to left, as the header lists them)."""
    if not encoding:
        return body
    for coding in reversed([c.strip().lower() for c in encoding.split(",") if c.strip()]):
        body = _decode_one(body, coding, where)
    return body


def _decode_one(body: bytes, coding: str, where: str) -> bytes:
    if coding in ("identity", ""):
        return body
    if coding in ("gzip", "x-gzip"):
        if not body.startswith(b"\x1f\x8b"):
            return body  # already decoded by the recorder
        try:
            return gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as e:
            raise ValidationError(f"gzip body does not decompress: {e}", where=where, code="bad_encoding") from e
    if coding == "deflate":
        # HTTP "deflate" is the zlib format, but servers also send raw deflate; try both.
        for wbits in (zlib.MAX_WBITS, -zlib.MAX_WBITS):
            try:
                return zlib.decompress(body, wbits)
            except zlib.error:
                continue
        return body if _looks_decoded(body) else _bad(coding, where)
    if coding == "br":
        module = _optional("brotli", "brotlicffi")
        if module is None:
            if _looks_decoded(body):
                return body
            raise _missing("br", "brotli", where)
        try:
            return bytes(module.decompress(body))
        except Exception as e:  # the brotli bindings raise their own error class
            if _looks_decoded(body):
                return body
            raise ValidationError(f"br body does not decompress: {e}", where=where, code="bad_encoding") from e
    if coding == "zstd":
        if not body.startswith(b"\x28\xb5\x2f\xfd"):
            return body  # not a zstd frame: already decoded by the recorder
        module = _optional("zstandard")
        if module is None:
            raise _missing("zstd", "zstandard", where)
        try:
            return bytes(module.ZstdDecompressor().decompressobj().decompress(body))
        except Exception as e:  # zstandard.ZstdError
            raise ValidationError(f"zstd body does not decompress: {e}", where=where, code="bad_encoding") from e
    raise ValidationError(
        f"unknown Content-Encoding {coding!r}",
        where=where,
        code="bad_encoding",
        hint=f"supported encodings: {', '.join(_ENCODINGS)}",
    )


def _bad(coding: str, where: str) -> bytes:
    raise ValidationError(f"{coding} body does not decompress", where=where, code="bad_encoding")


def _looks_decoded(body: bytes) -> bool:
    """A body a recorder already decoded: UTF-8 text starting like JSON or an event stream."""
    try:
        text = body[:64].decode("utf-8").lstrip()
    except UnicodeDecodeError:
        return False
    return text[:1] in ("{", "[") or text.startswith(("data:", "event:", ":"))


def _optional(*names: str) -> Any:
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def _missing(coding: str, package: str, where: str) -> FormatError:
    return FormatError(
        f"the body is {coding}-compressed and the {package!r} package is not installed",
        where=where,
        code="missing_decoder",
        hint=f"pip install 'msgtrain[compression]' (or pip install {package}) and convert again",
    )


def recorded_bytes(value: Any, where: str = "body") -> bytes | None:
    """A recorded body as bytes: ``!!binary`` bytes as they are, text as UTF-8, ``{"base64_string": ...}`` (Ruby
    VCR) decoded; None when there is no body."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, dict) and isinstance(value.get("base64_string"), str):
        try:
            return base64.b64decode(value["base64_string"], validate=False)
        except (binascii.Error, ValueError) as e:
            raise ValidationError(f"base64 body does not decode: {e}", where=where, code="bad_encoding") from e
    return None


# --------------------------------------------------------------------------- Server-Sent Events


@dataclass(frozen=True)
class SSEvent:
    """One dispatched Server-Sent Event: its ``event:`` name (None when unnamed) and joined ``data:`` lines."""

    event: str | None
    data: str


def is_sse(text: str) -> bool:
    """Whether a body is an SSE stream: its first non-blank line is a field (``data:``, ``event:``, ``id:``) or a
    comment."""
    for line in text.splitlines():
        if line.strip():
            return line.lstrip(" \t").startswith(("data:", "event:", "id:", "retry:", ":"))
    return False


def sse_events(text: str) -> list[SSEvent]:
    """Parse an SSE stream as the WHATWG rules say: fields per line, one optional space after the colon, ``data``
    lines of one event joined with newlines, an event dispatched at a blank line (and at the end of the text).
    One leniency: indentation before a field name is ignored (the spec would read `` data`` as an unknown field and
    drop the event; recorded streams with a stray leading space exist, and no real field starts with a blank)."""
    events: list[SSEvent] = []
    name: str | None = None
    data: list[str] = []
    for raw in [*text.splitlines(), ""]:
        line = raw.lstrip(" \t")
        if not line:
            if data:
                events.append(SSEvent(name, "\n".join(data)))
            name, data = None, []
            continue
        if line.startswith(":"):
            continue  # a comment (keep-alive)
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
    return events


# --------------------------------------------------------------------------- AWS event stream


@dataclass(frozen=True)
class EventStreamMessage:
    """One AWS event-stream message: its headers (``:event-type``, ``:message-type``...) and payload bytes."""

    headers: dict[str, Any]
    payload: bytes


def is_event_stream(body: bytes) -> bool:
    """Whether bytes start with a well-formed event-stream prelude (lengths plus a matching prelude CRC)."""
    if len(body) < 16:
        return False
    total, headers_len, crc = struct.unpack(">III", body[:12])
    return total >= 16 + headers_len and zlib.crc32(body[:8]) == crc


def event_stream_messages(body: bytes, where: str = "body") -> list[EventStreamMessage]:
    """Split AWS event-stream bytes into messages: ``total length, headers length, prelude CRC`` (big-endian
    uint32), headers, payload, message CRC over everything before it."""
    out: list[EventStreamMessage] = []
    pos = 0
    while pos < len(body):
        if len(body) - pos < 16:
            raise _stream_error("truncated event-stream message", pos, where)
        total, headers_len, prelude_crc = struct.unpack(">III", body[pos : pos + 12])
        end = pos + total
        if total < 16 + headers_len or end > len(body):
            raise _stream_error(f"event-stream message of {total} bytes does not fit", pos, where)
        if zlib.crc32(body[pos : pos + 8]) != prelude_crc:
            raise _stream_error("event-stream prelude checksum mismatch", pos, where)
        (message_crc,) = struct.unpack(">I", body[end - 4 : end])
        if zlib.crc32(body[pos : end - 4]) != message_crc:
            raise _stream_error("event-stream message checksum mismatch", pos, where)
        headers = _event_headers(body[pos + 12 : pos + 12 + headers_len], pos, where)
        out.append(EventStreamMessage(headers, body[pos + 12 + headers_len : end - 4]))
        pos = end
    return out


def _event_headers(raw: bytes, at: int, where: str) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    i = 0
    try:
        while i < len(raw):
            name_len = raw[i]
            name = raw[i + 1 : i + 1 + name_len].decode("utf-8")
            i += 1 + name_len
            kind = raw[i]
            i += 1
            value: Any
            if kind in (0, 1):  # bool true / false
                value = kind == 0
            elif kind == 2:
                value, i = struct.unpack(">b", raw[i : i + 1])[0], i + 1
            elif kind == 3:
                value, i = struct.unpack(">h", raw[i : i + 2])[0], i + 2
            elif kind == 4:
                value, i = struct.unpack(">i", raw[i : i + 4])[0], i + 4
            elif kind in (5, 8):  # int64, timestamp (ms)
                value, i = struct.unpack(">q", raw[i : i + 8])[0], i + 8
            elif kind in (6, 7):  # bytes, string
                (size,) = struct.unpack(">H", raw[i : i + 2])
                chunk = raw[i + 2 : i + 2 + size]
                value = chunk.decode("utf-8") if kind == 7 else chunk
                i += 2 + size
            elif kind == 9:  # uuid
                value, i = raw[i : i + 16].hex(), i + 16
            else:
                raise _stream_error(f"unknown event-stream header type {kind}", at, where)
            headers[name] = value
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise _stream_error(f"bad event-stream headers ({e})", at, where) from e
    return headers


def _stream_error(message: str, at: int, where: str) -> ValidationError:
    return ValidationError(
        f"{message} at byte {at}",
        where=where,
        code="bad_stream",
        hint="the recorded body is not a complete AWS event stream; record the call again",
    )
