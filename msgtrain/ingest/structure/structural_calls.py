"""Calls found at any depth of a record: each message list logged beside the reply sampled for it is one call.

A record that holds several such pairs (an agent's trajectory ``{steps: [{input: [...], response: {...}}, ...]}``,
an RL rollout's ``transitions[].actions[]``, a search tree whose nodes each hold the call that expanded them) is
read as the per-call logs are (:mod:`msgtrain.ingest.common.call_log`): each sampled reply is trained after exactly the
messages its own call sent, with the tools and system prompt of that call; calls whose messages share a prefix
share those nodes, so a history re-sent with every step is one conversation, not a copy per step. Which calls are
one conversation is the call log's rule (:class:`~msgtrain.ingest.common.call_log.Continuations`): a call joins the
conversation whose messages and reply it re-sends; calls that only open alike are conversations of their own (one
graph each). Records of one file that are each one call are joined the same way (:func:`continuation_groups`): an
agent's per-call log written one call per line.

Invariants:
- A call is read by the same conversion as a lone prompt / completion record (the structural reader's
  ``convert_found``), so the shapes it reads (OpenAI, Anthropic, Gemini replies, rendered prompts, reasoning) are
  the same at any depth.
- A call that cannot be read is one reject (one record of the books); the other calls are read: each holds its
  own full context, so a bad call leaves no gap in the ones after it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from msgtrain.errors import MsgtrainError
from msgtrain.ingest.common.call_log import Call, CallLogGraph, Continuations, turn_identity
from msgtrain.ingest.common.conversation_files import Step, base_graph_id
from msgtrain.ingest.common.message_like import canonical_role, is_message_list, role_of
from msgtrain.ingest.core.base import ReadEvent, ReadGraph, ReadReject, SourceRef, excerpt
from msgtrain.ingest.structure.found import SAMPLE_LISTS, Found, choice_messages
from msgtrain.ingest.structure.mapping import dig
from msgtrain.model.completeness import UNLOGGED_TOOLS, mark_calls_without_tools
from msgtrain.model.graph import MessageGraph, Origin

# convert_found of msgtrain.ingest.structure.convert, passed in by the structural reader
Convert = Callable[[Path, SourceRef, Any], list[ReadEvent]]


def calls_of(graph: MessageGraph) -> list[Call]:
    """The calls a one-call graph holds: one per sampled reply, its context the path to it (a completion that runs
    on after a tool result is a second call, whose context holds the first reply and the result). A reply the log
    holds but that is not to be trained (``carried``: weight 0, a sample logged as a null) is a call too, kept
    ``carried`` so the books count it, never dropped without a word."""
    out: list[Call] = []
    for node in graph.nodes.values():
        carried = node.origin is Origin.CARRIED and node.message.role == "assistant"
        if node.origin is not Origin.SAMPLED and not carried:
            continue
        path = graph.path(node.id)[:-1]
        context = [
            Step(n.message, origin=None if n.message.role == "assistant" else n.origin, index=i)
            for i, n in enumerate(path)
        ]
        sample = Step(node.message, origin=node.origin, generation=graph.generations.get(node.id))
        out.append(Call(context, [sample], graph.envs[node.env_id]))
    return out


def read_calls(path: Path, ref: SourceRef, found: Sequence[Any], raw: Any, convert: Convert) -> list[ReadEvent]:
    """The events of a record's calls (``found``: the structural reader's prompt / completion finds, one per
    call): one graph per conversation, a reject per call that cannot be read."""
    items = [(SourceRef(ref.file, f"{ref.record} {f.path}" if ref.record != "file" else f.path), f) for f in found]
    return read_call_items(path, ref, items, raw, convert)


def read_call_items(
    path: Path, ref: SourceRef, found: Sequence[tuple[SourceRef, Any]], raw: Any, convert: Convert
) -> list[ReadEvent]:
    """:func:`read_calls` for calls each at its own place (``(where, find)``: several records of one file whose
    calls re-send each other's histories)."""
    events: list[ReadEvent] = []
    logs: dict[str, CallLogGraph] = {}
    extras: dict[str, dict[str, Any]] = {}
    continuations = Continuations()
    base = base_graph_id(path, ref)
    read_calls_: list[tuple[Call, dict[str, Any]]] = []
    for sub, item in found:
        samples = choice_calls(item)
        try:
            # n > 1 choices of one call: each its own call of the same context, siblings once joined
            read = [e for sample in samples for e in convert(path, sub, sample)]
            graphs = [e for e in read if isinstance(e, ReadGraph)]
            events.extend(e for e in read if not isinstance(e, ReadGraph))
            read_calls_.extend((call, event.extras) for event in graphs for call in calls_of(event.graph))
        except MsgtrainError as e:
            holder = raw if raw is not None else item.holder
            events.append(ReadReject(sub, e.located(str(sub)), excerpt(holder), turns=len(samples)))
    for call, extra in summaries_kept_as_context(read_calls_):
        # a call joins the conversation whose messages and reply it re-sends, as every call log's calls do
        # (msgtrain.ingest.common.call_log): calls that only open alike stay apart
        key = continuations.conversation(call)
        log = logs.get(key)
        if log is None:
            digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
            log = CallLogGraph(f"{base}#{digest}", metadata={"source_format": "structural"})
            log.graph.metadata["layout"] = "calls"
        log.add(call)
        continuations.added(call, key)
        logs.setdefault(key, log)
        extras.setdefault(key, {}).update(extra)
    out: list[ReadEvent] = []
    records = sum(1 for e in events if isinstance(e, ReadReject) and e.count)
    budget = len(found) - records  # the calls read, shared among the conversations they form
    for n, (key, log) in enumerate(logs.items()):
        graph = log.finish()
        mark_calls_without_tools(graph, UNLOGGED_TOOLS)
        share = budget - (len(logs) - 1) if n == 0 else 1  # every graph is at least one record; the rest to the first
        out.append(ReadGraph(graph, ref, records=max(share, 1), extras=extras[key]))
    if not logs and budget > 0:  # calls read but holding no reply (cannot happen: each call samples one)
        out.append(ReadReject(ref, MsgtrainError("no call holds a reply", code="no_conversation"), count=budget))
    return out + events


SUMMARY = (
    "the same reply as a call whose messages run on past these (a wrapper's record of the run's input and final "
    "output, beside the call that sampled it): trained there, after the context the model saw"
)


def summaries_kept_as_context(items: Sequence[tuple[Call, dict[str, Any]]]) -> list[tuple[Call, dict[str, Any]]]:
    """``items`` with each call whose reply another call also holds, after messages that run on past this call's
    own (a trace's parent span, or the trace itself, logging the run's input and its final output beside the
    generation that sampled it), kept as context only (``carried``, with why): the reply is that other call's,
    trained once, after the whole context the model saw; this copy's context is missing what came between."""
    keys = [
        ([turn_identity(s.message) for s in c.context], [turn_identity(s.message) for s in c.samples]) for c, _ in items
    ]
    out = []
    for n, (call, extra) in enumerate(items):
        context, replies = keys[n]
        longer = any(
            m != n and other_replies == replies and len(other) > len(context) and other[: len(context)] == context
            for m, (other, other_replies) in enumerate(keys)
        )
        if longer:
            samples = [
                Step(
                    s.message.model_copy(update={"metadata": {**s.message.metadata, "why_not_trained": SUMMARY}}),
                    origin=Origin.CARRIED,
                    generation=s.generation,
                )
                for s in call.samples
            ]
            call = Call(call.context, samples, call.env)
        out.append((call, extra))
    return out


def continuation_groups(prompts: Sequence[list[Any]]) -> list[list[int]]:
    """Records (by position) grouped so that no group parts calls that may be one conversation: by their first
    logged message other than a system one (a call that continues another re-sends all of its dialogue, the first
    message included, under the system prompt of its own time). Which calls of a group are one conversation is the
    call log's rule (:class:`~msgtrain.ingest.common.call_log.Continuations`, in :func:`read_call_items`). Compared
    as logged, before any parsing."""
    groups: dict[str, list[int]] = {}
    for i, prompt in enumerate(prompts):
        groups.setdefault(logged_opening(prompt), []).append(i)
    return list(groups.values())


def logged_dialogue(prompt: list[Any]) -> list[Any]:
    """A logged message list without its system (and developer) messages, as logged: what a call that continues
    another re-sends of it whatever system prompt each call was sent."""
    out = []
    for message in prompt:
        role = role_of(message)
        if role is None or canonical_role(role[1]) not in ("system", "developer"):
            out.append(message)
    return out


def logged_opening(prompt: list[Any]) -> str:
    """The first message of a logged message list's dialogue (:func:`logged_dialogue`; the first message where all
    are system messages), as canonical JSON."""
    first = next(iter(logged_dialogue(prompt)), None)
    return json.dumps([first] if first is not None else prompt[:1], sort_keys=True, ensure_ascii=False, default=str)


# Keys a call's two halves share when a log writes them as two records: the request's id, its trace span.
_HALF_IDS = ("request_id", "requestId", "call_id", "callId", "id", "span_id", "generation_id", "llm_call_id")
# Where a record of a request's half keeps its messages, and where a response's half keeps the body it got.
_REQUEST_KEYS = ("messages", "input", "prompt")
_RESPONSE_KEYS = ("response", "output", "completion", "result", "body")
# How many requests may wait for their responses at once (calls in flight, interleaved in the log).
_IN_FLIGHT = 64
# How many may wait before the file has shown a response half (a file of conversations, each a request-like record)
_BEFORE_HALVES = 16


def paired_halves(stream: Iterator[tuple[SourceRef, Any, Any]]) -> Iterator[tuple[SourceRef, Any, Any]]:
    """The records of a log that writes each call in two records, its request (a message list and no reply) then its
    response (a response body and no message list), each response merged into the request it answers: the one that
    shares the value of an id key with it (:data:`_HALF_IDS`), or, neither naming one, the oldest waiting. The merged
    record is the request's, the response's body under ``response`` beside its messages: one call, read as any call
    is. Records that are neither half, requests never answered and responses that answer none pass as they are (a
    request when its response comes, or when the file ends; a response whose request is not there is the reply
    without its context it always was)."""
    waiting: list[tuple[SourceRef, dict[str, Any], Any]] = []
    split = False  # a response half was seen: the file writes calls in halves
    for ref, value, raw in stream:
        body = _response_half(value)
        match = next((w for w in waiting if _same_call(w[1], value)), None) if body is not None else None
        if match is not None:
            split = True
            waiting.remove(match)
            yield match[0], {**match[1], "response": body}, match[2]
        elif _request_half(value):
            waiting.append((ref, value, raw))
            # the oldest request waited long enough (as it is): in a file that has shown halves, for as many calls
            # as may be in flight; before that, for a few (an ordinary file of conversations is not held back)
            if len(waiting) > (_IN_FLIGHT if split else _BEFORE_HALVES):
                yield waiting.pop(0)
        else:
            split = split or body is not None
            yield ref, value, raw
    yield from waiting


def _request_half(value: Any) -> bool:
    if not isinstance(value, dict) or any(k in value for k in _RESPONSE_KEYS):
        return False
    return any(is_message_list(value.get(k)) for k in _REQUEST_KEYS)


def _response_half(value: Any) -> Any:
    """The response body a record of a call's second half holds (an OpenAI or Gemini body with its choices, at the
    top or under one of :data:`_RESPONSE_KEYS`), or None."""
    if not isinstance(value, dict) or any(is_message_list(value.get(k)) for k in _REQUEST_KEYS):
        return None
    for body in (value, *(value.get(k) for k in _RESPONSE_KEYS)):
        if isinstance(body, dict) and choice_messages(body) is not None:
            return body
    return None


def _same_call(request: dict[str, Any], response: dict[str, Any]) -> bool:
    shared = [k for k in _HALF_IDS if k in request and k in response]
    if not shared:
        return not any(k in request for k in _HALF_IDS) or not any(k in response for k in _HALF_IDS)
    return all(request[k] == response[k] for k in shared)


def choice_calls(found: Any) -> list[Any]:
    """A call whose response holds n > 1 choices (OpenAI's ``n``, Gemini's ``candidateCount``) as n calls of the
    same context, each holding one of them (its ``index`` kept); ``[found]`` for any other find. Joined as a call log
    is, the n replies are sibling samples of that context, as the per-call readers make them."""
    completion = found.mapping.columns.get("completion") if isinstance(found, Found) else None
    value = dig(found.holder, completion) if completion else None
    if not completion or not isinstance(value, dict) or choice_messages(value) is None:
        return [found]
    key = next(k for k, _ in SAMPLE_LISTS if isinstance(value.get(k), list))
    if len(value[key]) < 2:
        return [found]
    return [
        replace(found, holder=_with_value(found.holder, completion.split("."), {**value, key: [choice]}))
        for choice in value[key]
    ]


def _with_value(holder: Any, path: list[str], value: Any) -> Any:
    """``holder`` with the value at ``path`` (keys, or indices of lists) replaced, the containers on the way
    copied."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(holder, list):
        i = int(head)
        return [*holder[:i], _with_value(holder[i], rest, value), *holder[i + 1 :]]
    return {**holder, head: _with_value(holder[head], rest, value)}
