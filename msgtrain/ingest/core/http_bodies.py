"""Recorded HTTP bodies back to the bytes the client read: content decoding and stream framing.

Recorders store what went over the wire. A body may be compressed (``Content-Encoding: gzip`` / ``deflate`` /
``br`` / ``zstd``, kept as YAML ``!!binary`` or base64 text), and a streamed body is framed: Server-Sent Events
(``text/event-stream``: ``event:`` / ``data:`` lines, blank-line separated) or the AWS event stream
(``application/vnd.amazon.eventstream``: length-prefixed binary messages with CRC32 checksums, what Bedrock's
``converse-stream`` and ``invoke-with-response-stream`` return). This module undoes both; it knows nothing of
providers (that is :mod:`msgtrain.ingest.common.streams`).

Invariants:
- Decoding never guesses silently: an encoding the header names is applied when its magic bytes are there
  (a recorder that decoded the body but kept the header, like VCR.py's ``decode_compressed_response``, leaves
  plain bytes, which are kept as they are); ``br`` and ``zstd`` need optional packages (``pip install
  'msgtrain[compression]'``) and a body that needs one that is missing is rejected with that fix, never read as
  garbage.
- Bounded output: every decoder streams and stops at :data:`MAX_BODY_BYTES` of output per coding (chained
  codings such as ``gzip, gzip`` are bounded at each step), so a small compressed body cannot expand into gigabytes
  in memory; a body past the cap is a ``body_too_large`` error (the record is rejected, the file goes on).
- Event-stream messages are checked against both of their CRC32 checksums; a damaged or truncated frame is an
  error, not a shorter stream.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from msgtrain.errors import FormatError, ValidationError

_ENCODINGS = ("gzip", "x-gzip", "deflate", "br", "zstd", "identity")
# The most bytes one decoding step may produce: the per-record limit (a body larger than a record could be is not a
# conversation but a writer bug or a decompression bomb). Read at call time, so tests can lower it.
MAX_BODY_BYTES = 64 * 1024 * 1024
_ZSTD_READ = 1024 * 1024  # output read per step from a zstd stream
_BROTLI_SLICE = 256  # input fed per step to a brotli binding without an output limit (brotlicffi)


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


def decode_content(body: bytes, encoding: str | None, where: str = "body", limit: int | None = None) -> bytes:
    """Undo ``Content-Encoding`` (several codings apply right to left, as the header lists them).

    Each step produces at most ``limit`` bytes (default :data:`MAX_BODY_BYTES`) and raises a ``body_too_large``
    :class:`ValidationError` past it, having held no more than that much output."""
    if not encoding:
        return body
    cap = MAX_BODY_BYTES if limit is None else limit
    for coding in reversed([c.strip().lower() for c in encoding.split(",") if c.strip()]):
        body = _decode_one(body, coding, where, cap)
    return body


class _TooLarge(Exception):
    """A decoder's output passed the cap (turned into ``body_too_large`` by :func:`_decode_one`)."""


def _decode_one(body: bytes, coding: str, where: str, cap: int) -> bytes:
    try:
        return _decode_bounded(body, coding, where, cap)
    except _TooLarge:
        raise ValidationError(
            f"{coding}-encoded body of {len(body)} bytes decodes to more than the --max-record-mb limit "
            f"({cap / 2**20:g} MiB)",
            where=where,
            code="body_too_large",
            hint="a body this large is not one API call (or is a decompression bomb); the record is skipped "
            "(raise --max-record-mb to read it)",
        ) from None


def _decode_bounded(body: bytes, coding: str, where: str, cap: int) -> bytes:
    if coding in ("identity", ""):
        return body
    if coding in ("gzip", "x-gzip"):
        if not body.startswith(b"\x1f\x8b"):
            return body  # already decoded by the recorder
        try:
            return _inflate(body, 16 + zlib.MAX_WBITS, cap, members=True)
        except (EOFError, zlib.error) as e:
            raise ValidationError(f"gzip body does not decompress: {e}", where=where, code="bad_encoding") from e
    if coding == "deflate":
        # HTTP "deflate" is the zlib format, but servers also send raw deflate; try both.
        for wbits in (zlib.MAX_WBITS, -zlib.MAX_WBITS):
            try:
                return _inflate(body, wbits, cap, members=False)
            except (EOFError, zlib.error):
                continue
        return body if _looks_decoded(body) else _bad(coding, where)
    if coding == "br":
        module = _optional("brotli", "brotlicffi")
        if module is None:
            if _looks_decoded(body):
                return body
            raise _missing("br", "brotli", where)
        try:
            return _unbrotli(module, body, cap)
        except _TooLarge:
            raise
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
            return _unzstd(module, body, cap)
        except _TooLarge:
            raise
        except Exception as e:  # zstandard.ZstdError
            raise ValidationError(f"zstd body does not decompress: {e}", where=where, code="bad_encoding") from e
    raise ValidationError(
        f"unknown Content-Encoding {coding!r}",
        where=where,
        code="bad_encoding",
        hint=f"supported encodings: {', '.join(_ENCODINGS)}",
    )


def _inflate(body: bytes, wbits: int, cap: int, members: bool) -> bytes:
    """zlib / raw deflate / gzip (``members``: concatenated gzip members, as ``gzip.decompress`` reads them) with at
    most ``cap`` bytes of output; raises :class:`_TooLarge` past it, ``EOFError`` on a truncated stream."""
    out = bytearray()
    data = body
    while True:
        inflater = zlib.decompressobj(wbits)
        while True:
            # Asking for one byte more than the room left tells "exactly at the cap" from "past it".
            out += inflater.decompress(data, cap + 1 - len(out))
            if len(out) > cap:
                raise _TooLarge
            data = inflater.unconsumed_tail
            if inflater.eof or not data:
                break
        if not inflater.eof:
            raise EOFError("compressed data ended before the end-of-stream marker")
        data = inflater.unused_data
        if not members or not data.strip(b"\x00"):
            return bytes(out)  # trailing NUL padding after the last member is allowed, as gzip.decompress does
        if not data.startswith(b"\x1f\x8b"):
            raise zlib.error("trailing garbage after the last gzip member")


def _unbrotli(module: Any, body: bytes, cap: int) -> bytes:
    """Brotli with at most ``cap`` bytes of output (``brotli``'s ``output_buffer_limit``; a binding without it is
    fed small input slices, which bounds the overshoot by what one slice expands to)."""
    decompressor = module.Decompressor()
    out = bytearray()
    try:
        out += decompressor.process(body, output_buffer_limit=cap + 1)
        while len(out) <= cap and not decompressor.is_finished() and not decompressor.can_accept_more_data():
            out += decompressor.process(b"", output_buffer_limit=cap + 1 - len(out))
    except TypeError:  # brotlicffi: no output limit
        for start in range(0, len(body), _BROTLI_SLICE):
            out += decompressor.process(body[start : start + _BROTLI_SLICE])
            if len(out) > cap:
                break
    if len(out) > cap:
        raise _TooLarge
    if not decompressor.is_finished():
        raise EOFError("brotli stream ended before its last block")
    return bytes(out)


def _unzstd(module: Any, body: bytes, cap: int) -> bytes:
    """The first zstd frame with at most ``cap`` bytes of output, read in steps."""
    out = bytearray()
    with module.ZstdDecompressor().stream_reader(body, read_across_frames=False) as reader:
        while True:
            chunk = reader.read(min(_ZSTD_READ, cap + 1 - len(out)))
            if not chunk:
                return bytes(out)
            out += chunk
            if len(out) > cap:
                raise _TooLarge


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
