"""One message graph from many recorded model calls (request = context, response = what was sampled in it).

Used by readers of request/response logs (VCR cassettes, Anthropic / Responses request-response JSONL).

Invariants:
- Every call is added under the same :class:`MessageGraph` with ``add_node``, so calls whose histories share a
  prefix share those nodes (node ids hash the parent chain and, at the root, the tool environment).
- A response is ``sampled`` in exactly its request's context; n > 1 choices are sibling samples of one
  context.
- An assistant message that appears only in a request's history is ``carried``: it is context, and it is
  trained only if some recorded response produced it in that very context (then its node is upgraded to
  ``sampled``).
- Adding a call costs what is new in it: context steps that are the very objects of the previous call's (a
  reader that reuses parsed history passes them again) map to the same nodes and are not added again.
- A call is checked before it touches the graph (a tool result must answer a call issued earlier on its path),
  so a rejected call leaves no partial nodes behind.

Which calls are one conversation (:class:`CallLogGroups`, the rule every request/response log shares):

- A call that names its session (``session_id``, ``conversation_id``, ...) joins that session's conversation.
- Otherwise a call **continues** an earlier call when the earlier call's full message list (its context, then its
  reply) is a prefix of its context: it re-sent that history, the earlier reply in it. It joins the conversation of
  the longest such earlier call, however short that call's context was (a first call of one user message included).
- Messages are compared as the same turn (:func:`turn_identity`): a user, system or tool message by its content; an
  assistant message by its text and its calls (name, parsed arguments), as the books tell replies apart, because a
  client may re-send a reply without its reasoning or with its arguments re-serialised.
- A call that logs an earlier call again (the same messages and the same reply: a trace and its span, a retry that
  got the same reply) is that call, in its conversation.
- A call that continues no earlier call starts a conversation of its own, even when it opens with the same messages
  as another (two sessions that both start with "hi", a retry of a first call that got another reply): each reply
  stays in the conversation whose later calls re-send it, and what one session logs with its calls (a reward) never
  reaches the other.
- Ambiguity: two conversations may both hold a call that a later call continues (they opened with the very same
  call, reply included). Nothing in the log tells them apart; the later call joins the one that logged such a call
  last (a log appends a conversation's calls in order). Either choice trains the same replies in the same contexts.
- The system messages aside: a call that re-sends an earlier call's other messages and its reply under another
  system prompt (one that writes the time, a memory block the agent rewrote, Responses ``instructions`` sent anew)
  continues it too, when no call is continued as logged. Each reply stays trained after the system prompt its own
  call sent (the two prompts are two branches of one graph), and the copies under the new prompt are the same turns,
  never counted twice.
- Calls are taken in file order, and a call logged after a call that continues it (an export sorted newest first:
  Helicone's, Langfuse's) joins that call's conversation: the earlier call's messages and reply are a prefix of what
  the later-logged call re-sent (its system messages aside, as above).
- A reader whose client rewrites the replies it re-sends (smolagents renders each output into the next call's
  messages, joined with what follows it) says so (``rewritten_replies``): there a call whose context starts with an
  earlier call's context, then an assistant message, continues that call when no call is continued as logged (the
  longest such context; a guess where two conversations share it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgtrain.ingest.common.conversation_files import Step, check_pairing, content_graph_id, dict_field
from msgtrain.ingest.core.base import ReadGraph, SourceRef
from msgtrain.model.graph import Env, MessageGraph, Origin
from msgtrain.model.message import AnyMessage, OptionCallMessage


@dataclass
class Call:
    """One recorded model call: the full context it was sent, and the turn(s) sampled in it."""

    context: Sequence[Step]
    samples: Sequence[Step]
    env: Env = field(default_factory=Env)


class CallLogGraph:
    """Accumulates calls into one graph; :meth:`finish` fixes the deterministic graph id."""

    def __init__(self, base_id: str, metadata: dict[str, Any] | None = None, policy: str | None = None):
        self.base_id = base_id
        self.graph = MessageGraph(graph_id=base_id, metadata=metadata)
        if policy:
            self.graph.policy = policy
        self.calls = 0
        self.extras: dict[str, Any] = {}
        self._first_env: Env | None = None
        self._last: tuple[str, list[Step], list[str]] | None = None  # env id, context steps, their node ids

    def add(self, call: Call) -> list[str]:
        """Add one call; returns the node ids of its sampled responses, in order."""
        check_pairing(call.context)
        graph = self.graph
        env = call.env
        self._first_env = self._first_env or env
        ids = self._reusable_prefix(call)
        parent: str | None = ids[-1] if ids else None
        for step in call.context[len(ids) :]:
            origin = step.origin or (Origin.CARRIED if step.message.role == "assistant" else Origin.CONTEXT)
            parent = graph.add_node(parent, step.message, origin=origin, env=env, generation=step.generation)
            ids.append(parent)
        self._last = (env.id, list(call.context), ids)
        samples = [
            graph.add_node(
                parent,
                step.message,
                origin=step.origin or Origin.SAMPLED,
                env=env,
                generation=step.generation,
            )
            for step in call.samples
        ]
        last = samples[-1] if samples else parent
        graph.head = [n.id for n in graph.path(last)] if last is not None else []
        self.calls += 1
        return samples

    def _reusable_prefix(self, call: Call) -> list[str]:
        """Node ids of the leading context steps that are the very steps (same objects) of the previous call, in
        the same environment: adding them again would find the same nodes and change nothing."""
        if self._last is None or self._last[0] != call.env.id:
            return []
        _, steps, ids = self._last
        n = 0
        for new, old in zip(call.context, steps, strict=False):
            if new.message is not old.message or new.origin != old.origin or new.generation is not old.generation:
                break
            n += 1
        return ids[:n]

    def history(self, node_id: str) -> list[AnyMessage]:
        """The messages from the root to ``node_id`` (what a call continuing that node was given)."""
        return [node.message for node in self.graph.path(node_id)]

    def finish(self) -> MessageGraph:
        graph = self.graph
        if self._first_env is not None:
            graph.env = self._first_env
        unused = [eid for eid in graph.envs if eid != graph.env.id and not _env_used(graph, eid)]
        for eid in unused:
            del graph.envs[eid]
        graph.graph_id = content_graph_id(self.base_id, graph)
        return graph


def _env_used(graph: MessageGraph, env_id: str) -> bool:
    return any(node.env_id == env_id for node in graph.nodes.values())


class Continuations:
    """Which conversation each call of a log joins, by the rule of the module docstring (calls taken in file order):
    :meth:`conversation` names it, :meth:`added` records the call once its conversation holds it. Readers that keep
    their own :class:`CallLogGraph` per conversation use it as :class:`CallLogGroups` does."""

    def __init__(self, *, rewritten_replies: bool = False) -> None:
        # the digest of each full message list a call logged (context + one reply) -> the conversation holding it
        self._ends: dict[str, str] = {}
        # with ``rewritten_replies``: the digest of each call's context -> the conversation holding it
        self._contexts: dict[str, str] | None = {} if rewritten_replies else None
        # the same, over the messages other than system ones (the dialogue): a call whose system prompt changed
        self._dialogue_ends: dict[str, str] = {}
        # the digest of each prefix of a call's context (and of its dialogue) -> the first conversation re-sending it:
        # a call logged after a call that continues it (an export sorted newest first) joins that call's conversation
        self._sent: dict[str, str] = {}
        self._dialogue_sent: dict[str, str] = {}
        self._opened: set[str] = set()
        # the last call's context, its prefix digests and its dialogue's prefix digests (one per message: a system
        # message repeats the digest before it)
        self._last: tuple[list[AnyMessage], list[str], list[str]] = ([], [], [])
        self._fresh = 0  # how many leading digests of the last chain were the call before's

    def conversation(self, call: Call) -> str:
        """The conversation ``call`` continues, else a new one named by its opening call (an ordinal where several
        conversations open alike)."""
        chain, dialogue = self._chain([step.message for step in call.context])
        tip = chain[-1] if chain else ""
        whole = [_extend(tip, step.message) for step in call.samples]
        again = next((self._ends[d] for d in whole if d in self._ends), None)
        if again is not None:  # the very call logged again (a trace and its span, a retry that got the same reply)
            return again
        continued = next((self._ends[d] for d in reversed(chain) if d in self._ends), None)
        if continued is not None:
            return continued
        # the dialogue and a reply of an earlier call re-sent under other system messages (a system prompt that
        # writes the time, a memory block the agent edited): the same conversation, whose replies stay trained
        # after the system prompt their own calls sent
        continued = next((self._dialogue_ends[d] for d in reversed(dialogue) if d in self._dialogue_ends), None)
        if continued is not None:
            return continued
        # a call that a call logged before it continues (its messages and reply re-sent there)
        dialogue_tip = dialogue[-1] if dialogue else ""
        continuing = next((self._sent[d] for d in whole if d in self._sent), None) or next(
            (
                self._dialogue_sent[d]
                for s in call.samples
                if (d := _extend(dialogue_tip, s.message)) in self._dialogue_sent
            ),
            None,
        )
        if continuing is not None:
            return continuing
        if self._contexts is not None:  # an earlier call's messages, then its reply as the client rewrote it
            messages = call.context
            continued = next(
                (
                    self._contexts[chain[k - 1]]
                    for k in range(len(chain) - 1, 0, -1)
                    if messages[k].message.role == "assistant" and chain[k - 1] in self._contexts
                ),
                None,
            )
            if continued is not None:
                return continued
        opening = whole[0] if whole else tip
        key, n = "prefix:" + opening, 1
        while (key if n == 1 else f"{key}#{n}") in self._opened:
            n += 1
        return key if n == 1 else f"{key}#{n}"

    def added(self, call: Call, key: str) -> None:
        """Record that conversation ``key`` holds ``call``: later calls that re-send its messages and a reply of it
        continue that conversation."""
        self._opened.add(key)
        chain, dialogue = self._chain([step.message for step in call.context])
        tip = chain[-1] if chain else ""
        if self._contexts is not None and chain:
            self._contexts[tip] = key
        dialogue_tip = dialogue[-1] if dialogue else ""
        for step in call.samples:
            self._ends[_extend(tip, step.message)] = key
            self._dialogue_ends.setdefault(_extend(dialogue_tip, step.message), key)
        # the prefixes the call before sent were registered then
        messages, _, dialogue_digests = self._last
        for digest in chain[self._fresh :]:
            self._sent.setdefault(digest, key)
        for message, digest in zip(messages[self._fresh :], dialogue_digests[self._fresh :], strict=True):
            if message.role != "system":
                self._dialogue_sent.setdefault(digest, key)

    def _chain(self, messages: list[AnyMessage]) -> tuple[list[str], list[str]]:
        """The digest of each prefix of ``messages`` (turn identities, :func:`turn_identity`), and of each prefix's
        dialogue (its messages other than system ones; only prefixes that end in such a message are keys, so a
        system message adds none). The leading messages that are those of the last call (the very objects, as a
        reader that reuses parsed history passes them, or equal ones) keep their digests: a call costs what is new
        in it."""
        last, digests, dialogue_digests = self._last
        n = 0
        for new, old in zip(messages, last, strict=False):
            if new is not old and new != old:
                break
            n += 1
        if n < len(messages) or n < len(last):  # not the same call again (conversation, then added)
            self._fresh = n
        chain, dialogue = digests[:n], dialogue_digests[:n]
        for message in messages[n:]:
            chain.append(_extend(chain[-1] if chain else "", message))
            before = dialogue[-1] if dialogue else ""
            dialogue.append(before if message.role == "system" else _extend(before, message))
        self._last = (messages, chain, dialogue)
        return chain, [d for d, m in zip(dialogue, messages, strict=True) if m.role != "system"]


class CallLogGroups:
    """Call logs holding many conversations: one :class:`CallLogGraph` per conversation, the calls joined by the
    rule of the module docstring (a session id, else a call continuing an earlier call's full message list)."""

    def __init__(self, path: Path, metadata: dict[str, Any] | None = None, *, rewritten_replies: bool = False):
        self.path = path
        self.metadata = metadata
        self.logs: dict[str, CallLogGraph] = {}
        self.first_ref: dict[str, SourceRef] = {}
        self._continuations = Continuations(rewritten_replies=rewritten_replies)

    def add(
        self,
        call: Call,
        ref: SourceRef,
        session: str | None = None,
        *,
        policy: str | None = None,
        extras: dict[str, Any] | None = None,
    ) -> list[str]:
        """Add a call to its conversation. ``policy`` names the graph's policy when the conversation is new;
        ``extras`` (e.g. a reward logged with the call) are carried to the conversation's samples, later
        calls overriding earlier ones."""
        key = f"session:{session}" if session else self._continuations.conversation(call)
        log = self.logs.get(key)
        if log is None:
            # Named by file and conversation key, not by line: records around it (even garbage) do not move it.
            conv = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
            base = f"{self.path.name}#{conv}"
            log = CallLogGraph(base, metadata={**(self.metadata or {}), "conversation_key": key}, policy=policy)
        added = log.add(call)  # raises before anything is registered when the call is invalid
        log.extras.update(extras or {})
        self.logs.setdefault(key, log)
        self.first_ref.setdefault(key, ref)
        if not session:
            self._continuations.added(call, key)
        return added

    def history(self, node_id: str) -> list[AnyMessage] | None:
        """The messages from a root to a recorded node (None if no conversation holds it)."""
        log = next((log for log in self.logs.values() if node_id in log.graph.nodes), None)
        return log.history(node_id) if log is not None else None

    def events(self) -> Iterator[ReadGraph]:
        for key, log in self.logs.items():
            yield ReadGraph(log.finish(), self.first_ref[key], records=log.calls, extras=log.extras)


def turn_identity(message: AnyMessage) -> str:
    """What makes two logged messages the same turn of a conversation: an assistant message's text and calls (name,
    parsed arguments; not its reasoning, which a re-sent history may drop, nor its call ids), any other message's
    canonical content. The books tell replies apart the same way (``msgtrain.linearize.plan``)."""
    if message.role != "assistant":
        return message.canonical_json()
    calls = message.calls if isinstance(message, OptionCallMessage) else ()
    named = [(c.option_name, json.dumps(c.arguments, sort_keys=True)) for c in calls]
    return json.dumps(["assistant", message.text, named], ensure_ascii=False)


def _extend(digest: str, message: AnyMessage) -> str:
    """The digest of a message list one message longer than the one ``digest`` stands for."""
    h = hashlib.blake2b(digest.encode(), digest_size=16)
    h.update(turn_identity(message).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def conversation_key(first_messages: Sequence[AnyMessage], session: str | None) -> str:
    """The key a huge file's splitter (``chunk_keys``) files a call under: its session id, else the first two
    messages of its full message list (its context, then its reply; :func:`call_chunk_keys`). Every call a
    conversation joins (module docstring) shares those two with the call that opened it, so no chunk separates calls
    the reader joins."""
    if session:
        return f"session:{session}"
    head = "\x00".join(turn_identity(m) for m in list(first_messages)[:2])
    return "prefix:" + hashlib.blake2b(head.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def call_chunk_keys(
    context: Sequence[AnyMessage], samples: Sequence[AnyMessage], session: str | None
) -> tuple[str, ...]:
    """The chunk keys of a call (:func:`conversation_key`): one, from its first two context messages; a call whose
    context is one message has one per reply (each reply is the second message of the lists that continue it)."""
    if session or len(context) >= 2 or not samples:
        return (conversation_key(context, session),)
    return tuple(dict.fromkeys(conversation_key([*context, sample], None) for sample in samples))


def session_of(record: dict[str, Any], request: dict[str, Any]) -> str | None:
    """A conversation id logged next to the call (never a user id: one user has many conversations)."""
    for source in (record, dict_field(request, "metadata")):
        for key in ("session_id", "conversation_id", "thread_id", "trajectory_id"):
            value = source.get(key)
            if isinstance(value, str | int) and str(value):
                return str(value)
    return None
