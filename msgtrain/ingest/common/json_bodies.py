"""Request and response bodies a log keeps as JSON text: the objects they stand for.

Gateways and proxies log a call's bodies as they went over the wire: Portkey's log API takes ``request.body`` and
``response.body`` as ``JSON.stringify`` of the bodies, Cloudflare's AI Gateway hands them back as text, a table
export writes an object column as its JSON. Such a field is the body it holds, so the structural reader reads it as
that object: the messages, the reply and the tools in it are then found where they would be had the body been
logged as an object.

Invariants:
- Only a field of an object that is not itself a message is decoded, never a message's content: a tool result or a
  user's text that happens to be JSON stays the text the model was sent.
- Only the JSON text of an object that holds messages (a request's message list, a response's choices or
  candidates, an assistant message) is decoded; any other text (a JSON column of settings, ``"{}"`` where a proxy
  stored no prompt) stays as logged.
- Bounded: objects are walked :data:`MAX_DEPTH` levels down, through objects only (a list is a list of records or
  messages, whose items are read as they are), and a text is parsed only when it opens as an object and names a role
  or a reply's container.
"""

from __future__ import annotations

import json
from typing import Any

from msgtrain.ingest.common.message_like import is_message_like, message_like_count

MAX_DEPTH = 4  # record -> request -> body: a body is found a few objects down, never deeper
# what the JSON text of a body holding messages names (a role; a response's choices or candidates)
_MARKERS = ('"role"', '"choices"', '"candidates"')


def decoded_bodies(value: Any, depth: int = 0) -> Any:
    """``value`` with every field that is the JSON text of a body holding messages replaced by that body (the module
    docstring); ``value`` itself when there is none (no copy is made)."""
    if not isinstance(value, dict) or depth >= MAX_DEPTH or is_message_like(value):
        return value
    out: dict[str, Any] | None = None
    for key, field in value.items():
        new = _body(field) if isinstance(field, str) else decoded_bodies(field, depth + 1)
        if new is not field:
            out = dict(value) if out is None else out
            out[key] = new
    return out if out is not None else value


def _body(text: str) -> Any:
    """The object a JSON text holding messages stands for, else the text."""
    if not text.lstrip().startswith("{") or not any(m in text for m in _MARKERS):
        return text
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError):
        return text
    if not isinstance(decoded, dict) or message_like_count(decoded)[0] == 0:
        return text
    return decoded
