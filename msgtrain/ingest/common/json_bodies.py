"""Request and response bodies a log keeps as JSON text, or as the stream it received: the objects they stand for.

Gateways and proxies log a call's bodies as they went over the wire: Portkey's log API takes ``request.body`` and
``response.body`` as ``JSON.stringify`` of the bodies, Cloudflare's AI Gateway hands them back as text, a table
export writes an object column as its JSON. A streamed call's response is logged as the Server-Sent Events text
received, or as the list of chunks. Such a field is the body it holds, so the structural reader reads it as that
object (a stream reassembled as its provider's SDK does, :mod:`msgtrain.ingest.common.streams`): the messages, the
reply and the tools in it are then found where they would be had the body been logged as an object, and a stream's
text is never taken for the reply.

Invariants:
- Only a field of an object that is not itself a message is decoded, never a message's content: a tool result or a
  user's text that happens to be JSON stays the text the model was sent.
- Only the JSON text of a body that holds messages (a request's message list, a response's choices or candidates, an
  assistant message) is decoded, and in a field that holds a reply (a pair's completion) only a response's: a model
  asked for a sample chat as JSON sampled that text; any other text (a JSON column of settings, ``"{}"`` where a proxy
  stored no prompt) stays as logged. Only a stream whose events are one provider's (OpenAI chat chunks, Anthropic or
  Responses events, Gemini chunks) is reassembled; a stream that reports an error fails its record
  (``error_response``: the call produced nothing to train on); events of no provider's stream stay the text.
- Bounded: objects are walked :data:`MAX_DEPTH` levels down, through objects and lists of records (a HAR
  capture's ``log.entries``; a list whose first item is a message is a conversation, left as it is), and a text is
  parsed only when it opens as an object and names a role or a reply's container, or opens as a stream's event.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from msgtrain.ingest.common.message_like import is_message_like, message_like_count
from msgtrain.ingest.common.streams import assemble, is_chunk_list, stream_events
from msgtrain.ingest.core.http_bodies import is_sse

MAX_DEPTH = 6  # record -> log -> entries[] -> request -> postData -> text: a few containers down, as the search
# what the JSON text of a body holding messages names (a role; a response's choices or candidates)
_MARKERS = ('"role"', '"choices"', '"candidates"')


def decoded_bodies(value: Any, depth: int = 0) -> Any:
    """``value`` with every field that is the JSON text of a body holding messages replaced by that body (the module
    docstring); ``value`` itself when there is none (no copy is made)."""
    if not isinstance(value, dict) or depth >= MAX_DEPTH or is_message_like(value):
        return value
    out: dict[str, Any] | None = None
    for key, field in value.items():
        if isinstance(field, str):
            new = _body(field, reply=key in REPLY_FIELDS)
        elif isinstance(field, list):
            new = _stream(field, f"{key}")
            if new is field and field and isinstance(field[0], dict) and not is_message_like(field[0]):
                new = _records(field, depth + 1)
        else:
            new = decoded_bodies(field, depth + 1)
        if new is not field:
            out = dict(value) if out is None else out
            out[key] = new
    return out if out is not None else value


# The fields a record keeps a sampled reply in (a pair's completion side, a preference's sides): such a field's JSON
# text is decoded only as a response body, never as an object holding a conversation (what a model asked for a sample
# chat as JSON wrote).
REPLY_FIELDS = frozenset(
    {"completion", "response", "output", "answer", "answers", "prediction", "generation", "sampled", "judgment"}
    | {"output_response", "actual_message", "chosen", "rejected", "target", "label"}
)
# Where a request body keeps its messages (OpenAI chat, Gemini, Responses, Anthropic): what makes an object one
_REQUEST_LISTS = ("messages", "contents", "input")


def _body(text: str, *, reply: bool = False) -> Any:
    """The object a JSON text holding messages stands for (a request or a response body; only a response body for
    a reply's field, ``reply``), or the body a provider's stream makes of its events, else the text."""
    if text.startswith(("data:", "event:")) and is_sse(text):
        try:
            events = stream_events(text)
        except ValueError:  # not a stream of JSON events: the text it is
            return text
        body = _stream(events, "SSE text")
        return text if body is events else body  # events of no provider's stream: a text that looks like one
    if not text.lstrip().startswith("{") or not any(m in text for m in _MARKERS):
        return text
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError):
        return text
    if not isinstance(decoded, dict) or message_like_count(decoded)[0] == 0 or not _a_body(decoded, reply):
        return text
    return decoded


def _a_body(obj: dict[str, Any], reply: bool) -> bool:
    """Whether a decoded object is a call's body: a response's (choices, candidates, a Responses output list, the
    assistant message itself) or, outside a reply's field, a request's (its message list under a request's key)."""
    if isinstance(obj.get("choices"), list) or isinstance(obj.get("candidates"), list):
        return True
    if isinstance(obj.get("output"), list) or (is_message_like(obj) and obj.get("role") in ("assistant", "model")):
        return True
    return not reply and any(isinstance(obj.get(k), list) for k in _REQUEST_LISTS)


def _stream(events: list[Any], where: str) -> Any:
    """The response body a provider's stream events make (:func:`~msgtrain.ingest.common.streams.assemble`), or
    ``events`` as they are when they are not one provider's stream."""
    kind = next((k for k in ("openai_chat", "anthropic", "openai_responses") if is_chunk_list(k, events)), None)
    if kind is None and events and all(isinstance(e, dict) and "candidates" in e for e in events):
        kind = "gemini"  # streamGenerateContent: each chunk a GenerateContentResponse
    return assemble(kind, events, where) if kind is not None else events


def _records(items: list[Any], depth: int) -> list[Any]:
    """A list of records with their bodies decoded (:func:`decoded_bodies`); ``items`` itself when none is."""
    out = [decoded_bodies(item, depth) for item in items]
    return out if any(a is not b for a, b in zip(out, items, strict=True)) else items


def archive_entries(document: Any) -> list[Any] | None:
    """The exchanges of an HTTP archive (HAR 1.2, as browsers' devtools, mitmproxy and Charles save a capture:
    ``{"log": {"entries": [{request, response}, ...]}}``), each with its response's ``content.text`` decoded from
    base64 where the archive says so, or None for any other document. A request's ``postData.text`` and a response's
    ``content.text`` are then bodies as :func:`decoded_bodies` reads them."""
    log = document.get("log") if isinstance(document, dict) else None
    entries = log.get("entries") if isinstance(log, dict) else None
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("request"), dict) and isinstance(e.get("response"), dict)
        for e in entries
    ):
        return None
    return [_plain_content(e) for e in entries]


def _plain_content(entry: dict[str, Any]) -> dict[str, Any]:
    content = entry["response"].get("content")
    if not isinstance(content, dict) or content.get("encoding") != "base64" or not isinstance(content.get("text"), str):
        return entry
    try:
        text = base64.b64decode(content["text"], validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return entry  # not base64 text: as logged (read as text, never as a reply's body)
    plain = {k: v for k, v in content.items() if k != "encoding"} | {"text": text}
    return {**entry, "response": {**entry["response"], "content": plain}}


def head_with_bodies(head: bytes) -> bytes:
    """The head with the bodies its records keep as JSON text decoded (:func:`decoded_bodies`), for detection: the
    whole lines of a JSON-lines head, or a whole JSON document, re-written; the head as it is when it holds no such
    text (no escaped object opening in a string) or does not parse."""
    if b'"{\\"' not in head and b'"data: {' not in head:
        return head
    try:
        values = [json.loads(head)]  # one whole document (a HAR capture: its entries)
        values = archive_entries(values[0]) or values
    except (ValueError, RecursionError):
        values = _head_entries(head) or []
    if not values:
        lines = head.split(b"\n")
        if len(lines) > 1 and not head.endswith(b"\n"):
            lines = lines[:-1]  # the last line, cut by the end of the head
        try:
            values = [json.loads(line) for line in lines if line.strip()]
        except (ValueError, RecursionError):
            return head
    decoded = [decoded_bodies(v) for v in values]
    if all(d is v for d, v in zip(decoded, values, strict=True)):
        return head
    return b"\n".join(json.dumps(d, ensure_ascii=False).encode("utf-8") for d in decoded) + b"\n"


_ENTRIES = re.compile(r'^\s*\{\s*"log"\s*:.*?"entries"\s*:\s*\[', re.S)


def _head_entries(head: bytes) -> list[Any] | None:
    """The whole exchanges at the start of an HTTP archive's head (:func:`archive_entries`), for detection when the
    head cuts the archive short; None for any other head."""
    text = head.decode("utf-8", "replace")
    opening = _ENTRIES.match(text)
    if opening is None:
        return None
    decoder, entries, at = json.JSONDecoder(), [], opening.end()
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        try:
            entry, at = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            break
        entries.append(entry)
    return archive_entries({"log": {"entries": entries}}) if entries else None
