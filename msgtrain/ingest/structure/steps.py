"""Messages into steps: normalised, paired, cut at the first message that cannot be read.

:class:`StepBuilder` turns raw messages (any dialect :mod:`msgtrain.ingest.common.shapes` reads) into
:class:`~msgtrain.ingest.common.conversation_files.Step` s, with errors that name the JSON path; the checks here are
the ones every layout's conversation passes (one policy speaker; the rows' extras).

Invariants:
- A message that cannot be read ends the conversation for training (:class:`Gap`): the steps before it are kept as
  read; after it only assistant messages are kept, as context the log does not hold (``carried``, with why), never
  trained; nothing is stitched across the gap. A conversation with nothing trainable before the gap is rejected whole.
- A reply's logged metadata (usage, model) stays with that reply only, never spread over several.
- A forked normaliser (:func:`forked`) starts from a copy of its parent's open tool calls: sibling branches pair
  their calls and results independently.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from msgtrain.errors import MsgtrainError, ValidationError
from msgtrain.ingest.common.conversation_files import Step, logged_reply, seeded_acknowledgement
from msgtrain.ingest.common.media_columns import MEDIA_COLUMNS
from msgtrain.ingest.common.message_like import SHAPED_ROLES, canonical_role, message_like_count, role_of, unwrapped
from msgtrain.ingest.common.shapes import MessageNormaliser
from msgtrain.ingest.common.turn_pieces import (
    LMC_NO_RESULT,
    assistant_piece,
    is_turn_piece,
    joins_reply,
    lmc_call,
    lmc_result,
    piece_is_call,
    piece_message,
)
from msgtrain.ingest.core.base import ReadReject, SourceRef
from msgtrain.ingest.structure.found import assistant_like
from msgtrain.ingest.structure.mapping import MAX_EXTRA_JSON, Mapping, top_fields
from msgtrain.model.graph import MessageGraph, Origin
from msgtrain.model.message import OptionCallMessage, PartsMessage, ReasoningPart, TextPart
from msgtrain.model.openai import check_reply_present, from_openai_message

# ``then`` of a list's last message: nothing follows it (as against None, not known)
_END: dict[str, Any] = {}

# How a layout reads one raw message after a gap into OpenAI chat dicts (its own dialect: a node map's typed content).
ReadAfterGap = Callable[[Any, str], list[dict[str, Any]]]


@dataclass
class Gap:
    """Where a conversation stops being trainable: the first message that cannot be read (an unknown role, a result
    answering no call, content in no shape). Replies before it are trained; replies after it were sampled in a
    context that held it, which the log cannot give, so they are context only (``context_unknown``), never trained
    as if it had not been there (that would stitch the two sides of the gap together)."""

    where: str
    error: MsgtrainError
    turns: int  # the assistant turns the unreadable message held (lost with it)
    after: int = 0  # replies after it, kept as context the log does not hold
    unread: int = 0  # replies after it that could not be read either (lost)


@dataclass
class StepBuilder:
    """Normalised messages → steps, with JSON-path errors."""

    norm: MessageNormaliser
    steps: list[Step] = field(default_factory=list)
    call_names: dict[str, str] = field(default_factory=dict)
    piece_turn: bool = False  # the last step is a reply built of pieces (turn_pieces): the next piece may join it
    piece_called: bool = False  # that reply, kept after a gap, holds a call (text after it is the next reply)
    lmc_unanswered: bool = False  # the last message sent is an Open Interpreter code entry no output answered yet

    def add(
        self,
        raw: Any,
        where: str,
        *,
        trained: bool = True,
        metadata: dict[str, Any] | None = None,
        then: Any = None,
    ) -> None:
        """One logged message; ``then`` is the message logged after it in the same list (None: none, or not
        known), which says whether more tool results follow a result (:meth:`MessageNormaliser.normalise`)."""
        self._lmc_empty_result(raw, where)
        follow = None if then is None else False if then is _END else self.norm.is_result(then)
        normalised = self.norm.normalise(raw, where, results_follow=follow)
        if not normalised and self.norm.thought and self.piece_turn and self._reasoning_after_call():
            return  # reasoning logged after its reply's call: that reply's (see _reasoning_after_call)
        # What is logged beside the message (usage, model) belongs to one reply: a message that stands for several
        # (a UI message's steps) cannot say which.
        alone = len(normalised) <= 1 or sum(d["role"] == "assistant" for d in normalised) <= 1
        beside = unwrapped(raw) if alone else None
        for data in normalised:
            weight = data.pop("weight", None)
            if data["role"] == "assistant" and weight != 0:
                check_reply_present(data, where)
            try:
                msg = from_openai_message(data, call_names=self.call_names)
            except MsgtrainError as e:  # the model's errors say ``message``; the user needs the JSON path
                raise type(e)(e.message, where=where, hint=e.hint, code=e.code) from e
            if isinstance(msg, OptionCallMessage):
                self.call_names.update({c.invocation_id: c.option_name for c in msg.calls})
            origin: Origin | None = None
            # usage beside the message, inside its wrapper; the finish reason on the wrapper (an OpenAI choice)
            msg, generation = logged_reply(msg, beside, raw if beside is not None and beside is not raw else None)
            if msg.role == "assistant":
                if metadata:
                    msg = msg.model_copy(update={"metadata": {**msg.metadata, **metadata}})
                if not trained:
                    origin = Origin.INJECTED
                elif weight == 0:
                    origin = Origin.CARRIED
            if self._merges(raw, msg) or self._joins_turn(raw, msg, generation):
                continue
            if msg.role == "assistant":
                self._check_results_logged(where)
            self.steps.append(Step(msg, origin, generation, len(self.steps)))
            self.piece_turn = msg.role == "assistant" and assistant_piece(unwrapped(raw))

    def _lmc_empty_result(self, raw: Any, where: str) -> None:
        """Open Interpreter sends a code entry that no console output follows with an empty result right after it
        (:mod:`msgtrain.ingest.common.turn_pieces`): the next message it sends is read after that result, as the
        model saw it, not as a reply after a call whose result the log lost."""
        piece = unwrapped(raw) if isinstance(raw, dict) else None
        if piece is not None and is_turn_piece(piece) and piece_message(piece) is None:
            return  # never sent: the next message sent decides
        if self.lmc_unanswered and not lmc_result(piece):
            self.lmc_unanswered = False
            self.add(dict(LMC_NO_RESULT), f"{where} (the empty result sent for the code entry before it)")
        self.lmc_unanswered = lmc_call(piece)

    def _joins_turn(self, raw: Any, msg: Any, generation: Any) -> bool:
        """Join a piece of a reply (:mod:`msgtrain.ingest.common.turn_pieces`: a Responses item, an Open Interpreter
        message) to the reply the pieces before it began: one response emits its reasoning, text and calls as
        consecutive pieces. Text after a call is the next model call, never the same reply."""
        if not (self.piece_turn and msg.role == "assistant" and assistant_piece(unwrapped(raw))):
            return False
        prev = self.steps[-1]
        before = prev.message
        if not isinstance(before, PartsMessage | OptionCallMessage):
            return False
        calls_before = before.calls if isinstance(before, OptionCallMessage) else ()
        calls = msg.calls if isinstance(msg, OptionCallMessage) else ()
        if calls_before and (msg.parts or not calls):
            return False
        parts, joined = (*before.parts, *msg.parts), (*calls_before, *calls)
        update = {"parts": parts, "metadata": {**before.metadata, **msg.metadata}}
        merged: Any = (
            OptionCallMessage(**{**before.model_dump(exclude={"kind", "parts", "calls"}), **update, "calls": joined})
            if joined
            else before.model_copy(update=update)
        )
        self.steps[-1] = Step(merged, prev.origin, prev.generation or generation, prev.index)
        return True

    def _reasoning_after_call(self) -> bool:
        """Reasoning a piece logged right after the calls of the reply before it (NeMo Gym writes a call's reasoning
        after the call, before its output) is that reply's, never the next one's: put into it."""
        prev = self.steps[-1]
        if not isinstance(prev.message, OptionCallMessage):
            return False
        thought = ReasoningPart(text="\n".join(self.norm.thought))
        self.norm.thought = []
        merged = prev.message.model_copy(update={"parts": (*prev.message.parts, thought)})
        self.steps[-1] = Step(merged, prev.origin, prev.generation, prev.index)
        return True

    def _check_results_logged(self, where: str) -> None:
        """A reply right after a reply whose calls no result answers was sampled after those results (an API takes
        no reply between a call and its result): the log lost them, and what the model saw is not in it."""
        last = self.steps[-1].message if self.steps else None
        if not isinstance(last, OptionCallMessage):
            return
        open_ids = {i for i, _ in self.norm.open_calls} - self.norm.user_calls
        missing = [c.invocation_id for c in last.calls if c.invocation_id in open_ids]
        if missing:
            raise ValidationError(
                f"a reply follows the calls {missing} with none of their results logged: the context it was sampled "
                "in is not in the log",
                where=where,
                code="missing_result",
                hint="the replies before it are trained; log each call's result (function_call_output, tool message)",
            )

    def _merges(self, raw: Any, msg: Any) -> bool:
        """Append a shaped-role message read as text (smolagents' ``tool-call`` / ``tool-response``) to the message
        before it when both are text of the same role: smolagents' model classes send consecutive messages of one
        role as one, their texts joined by a newline, so the two were one turn of the model's context."""
        if not self.steps:
            return False
        prev = self.steps[-1].message
        if not (isinstance(prev, PartsMessage) and isinstance(msg, PartsMessage) and prev.role == msg.role):
            return False
        hit = role_of(raw)  # asked last: most messages are no text after text of their own role
        if hit is None or not isinstance(hit[1], str) or hit[1].strip().lower() not in SHAPED_ROLES:
            return False
        if not (
            prev.parts and isinstance(prev.parts[-1], TextPart) and msg.parts and isinstance(msg.parts[0], TextPart)
        ):
            return False
        joined = TextPart(text=f"{prev.parts[-1].text}\n{msg.parts[0].text}")
        merged = prev.model_copy(update={"parts": (*prev.parts[:-1], joined, *msg.parts[1:])})
        self.steps[-1] = Step(merged, self.steps[-1].origin, self.steps[-1].generation, self.steps[-1].index)
        return True

    def add_until_gap(self, raw: list[Any], where: str, places: list[str] | None = None) -> Gap | None:
        """A conversation's messages, up to the first one that cannot be read (see :class:`Gap`): the messages
        before it are added as usual; of the messages after it, the assistant ones are added as context the log
        does not hold (``carried``, dropped as ``context_unknown``), the rest left out (nothing after the gap is
        trained, so nothing after it needs its context)."""
        for i, item in enumerate(raw):
            at = places[i] if places is not None else f"{where}[{i}]"
            try:
                self.add(item, at, then=raw[i + 1] if i + 1 < len(raw) else _END)
            except ValidationError as e:
                if not any(s.message.role == "assistant" and s.origin is None for s in self.steps):
                    raise  # nothing trainable before it: the conversation's reject, as it always was
                if e.code == "missing_result":  # the gap is before this reply: it is the first one after it
                    gap = Gap(at, e, 0)
                    i -= 1
                else:
                    gap = Gap(at, e, message_like_count(item)[1] or int(assistant_like(item)))
                self.piece_turn = False  # no reply after the gap continues one before it
                for j, later in enumerate(raw[i + 1 :], start=i + 1):
                    self.add_after_gap(later, places[j] if places is not None else f"{where}[{j}]", gap)
                return gap
        return None

    def add_after_gap(self, raw: Any, where: str, gap: Gap, read: ReadAfterGap | None = None) -> None:
        """A message after ``gap``: an assistant one kept as context the log does not hold (``carried``, with
        why), any other left out. ``read`` reads a layout's own dialect (default: the shared normaliser)."""
        hit = role_of(raw)
        role = canonical_role(hit[1], self.norm.roles) if hit is not None else None
        if role == "thought":
            return  # reasoning belongs to a reply, never a reply of its own
        if role not in ("assistant", "call"):
            self.piece_turn = False
            return
        piece = unwrapped(raw)
        if assistant_piece(piece):  # the pieces of one reply are one reply after the gap too
            call = piece_is_call(piece)
            if self.steps and joins_reply(piece, self.piece_turn, self.piece_called):
                self.piece_called = self.piece_called or call
                return
            self.piece_turn, self.piece_called = True, call
            if call:
                raw = {"role": "assistant", "content": ""}  # its calls are not kept after a gap: an empty reply
        else:
            self.piece_turn = False
        if read is None:
            read = MessageNormaliser(roles=self.norm.roles, content_key=self.norm.content_key).normalise
        try:
            data = read(raw, where)
            messages = [from_openai_message({**d, "tool_calls": None} if d["role"] == "assistant" else d) for d in data]
        except MsgtrainError:
            gap.unread += 1
            return
        why = f"after an unreadable message at {gap.where}: the context it was sampled in is not in the log"
        for msg in messages:
            if msg.role == "assistant":
                msg = msg.model_copy(update={"metadata": {**msg.metadata, "why_not_trained": why}})
                self.steps.append(Step(msg, origin=Origin.CARRIED, index=len(self.steps)))
                gap.after += 1

    def add_list(self, raw: Any, where: str, *, trained: bool = True) -> None:
        if isinstance(raw, str):
            self.add({"role": "user" if not trained else "assistant", "content": raw}, where, trained=trained)
        elif isinstance(raw, dict):
            self.add(raw, where, trained=trained)
        else:
            items = list(raw or [])
            for i, item in enumerate(items):
                self.add(item, f"{where}[{i}]", trained=trained, then=items[i + 1] if i + 1 < len(items) else _END)


def hang_below_gap(
    graph: MessageGraph,
    parent: str,
    gap: Gap,
    below: Iterable[tuple[Any, str]],
    builder: StepBuilder,
    read: ReadAfterGap | None = None,
) -> int:
    """The rest of a tree's branch below an unreadable message (``gap``), given as (raw message, JSON path) in any
    order: the replies in it were sampled in a context that held the message, so each is hung under ``parent`` as
    context the log does not hold (``carried``, never trained; see :meth:`StepBuilder.add_after_gap`), the other
    messages left out. The branches beside the gap are not touched. Returns how many messages were passed over."""
    count = 0
    for raw, where in below:
        count += 1
        builder.add_after_gap(raw, where, gap, read)
    for step in builder.steps:
        graph.add_node(parent, step.message, origin=step.origin)
    return count


def gap_reject(ref: SourceRef, gap: Gap) -> ReadReject:
    """The books' line for a gap: the unreadable message (and the replies after it that could not be read either)
    as turns lost, in no record of their own (the conversation is the record, converted up to the gap)."""
    error = gap.error.located(str(ref) if gap.error.where else f"{ref} {gap.where}")
    note = f"; the conversation is trained up to it, {gap.after} later replies kept as context only"
    error = type(error)(error.message + note, where=error.where, hint=error.hint, code=error.code)
    return ReadReject(ref, error, "", count=0, turns=gap.turns + gap.unread)


def scripted_opening(steps: list[Step]) -> list[Step]:
    """``steps`` with the reply a conversation opens with, before any input, marked as context (``injected``): a model
    call answers something it is sent (a user message, a tool's result; Anthropic's and Gemini's APIs refuse a
    conversation that does not open with a user turn), so an assistant message with nothing but system messages before
    it is the application's own text (a character card's greeting, an agent's boot message, a harness's fixed opener:
    tau2's "Hi! How can I help you today?", Letta's first ``send_message``), never a turn the model sampled. A reply
    logged with what only a model call reports (its usage, its finish reason) was sampled all the same, after the system
    prompt alone, and stays a turn. The tool results of such an opening are context as any result is. So is the reply
    a client seeds a chat with after its own context message (Gemini CLI's "Got it. Thanks for the context!",
    :func:`~msgtrain.ingest.common.conversation_files.seeded_acknowledgement`)."""
    out = list(steps)
    for i, step in enumerate(out):
        role = step.message.role
        if role == "system":
            continue
        if role != "assistant":
            break  # an input: replies from here on answer it
        if step.origin is None and not _call_evidence(step):
            out[i] = Step(step.message, Origin.INJECTED, None, step.index)
    seeded = seeded_acknowledgement(out)  # the client's own reply to the context it seeds a chat with
    if seeded is not None and out[seeded].origin is None and not _call_evidence(out[seeded]):
        out[seeded] = Step(out[seeded].message, Origin.INJECTED, None, out[seeded].index)
    return out


def scripted_openings(graph: MessageGraph) -> None:
    """:func:`scripted_opening` on every branch of a message tree: a sampled reply with nothing but system messages
    above it, logged without what only a model call reports, is the application's text (``injected``). One walk down
    from the roots, through system messages only (below any other message no reply opens its branch): linear in the
    nodes it passes, never a path per reply."""
    from dataclasses import replace

    stack = list(graph.children.get(None, ()))
    while stack:
        nid = stack.pop()
        node = graph.nodes[nid]
        role = node.message.role
        if role == "system":
            stack.extend(graph.children.get(nid, ()))
        elif role == "assistant" and node.origin is Origin.SAMPLED:
            generation = graph.generations.get(nid)
            if not _call_evidence(Step(node.message, None, generation)):
                graph.nodes[nid] = replace(node, origin=Origin.INJECTED)
                graph.generations.pop(nid, None)


def _call_evidence(step: Step) -> bool:
    """Whether a reply carries what only a model call reports: a usage naming the prompt's size, a finish reason."""
    finish = step.generation.finish_reason if step.generation is not None else None
    return "usage" in step.message.metadata or finish is not None


def need_list(value: Any, where: str) -> None:
    if not isinstance(value, list):
        raise ValidationError(
            f"{where} is not a message list", code="ambiguous_structure", hint="fix the mapping's messages column"
        )


def forked(norm: MessageNormaliser) -> MessageNormaliser:
    return norm.fork()


def check_speakers(norm: MessageNormaliser, at: str) -> None:
    if len(norm.names) > 1:
        shown = ", ".join(sorted(norm.names)[:5])
        raise ValidationError(
            f"assistant messages at {at} come from {len(norm.names)} named speakers ({shown}): which one is the "
            "policy, and how it saw the others' messages, is ambiguous",
            code="ambiguous_structure",
            hint="convert one speaker's own view of the conversation, or map the others to user with --map (roles)",
        )


def row_extras(holder: dict[str, Any], m: Mapping) -> dict[str, Any]:
    """Sibling fields carried to the rows: scalars and small objects (every field, with the mapping's ``extras: all``);
    the mapped reward as ``reward``."""
    used = {f for k, v in m.columns.items() if k not in ("reward", "kto_tag") for f in top_fields(holder, v)}
    used |= {f for v in m.passed_over for f in top_fields(holder, v)}  # alternatives of a column not picked
    used |= set(MEDIA_COLUMNS)
    extras: dict[str, Any] = {}
    for key, value in holder.items():
        if key in used or not isinstance(key, str):
            continue
        if isinstance(value, dict | list) and m.extras != "all":
            try:
                if len(json.dumps(value, ensure_ascii=False)) > MAX_EXTRA_JSON:
                    continue
            except (TypeError, ValueError):
                continue
        extras[key] = value
    reward = m.field_of(holder, "reward")
    if isinstance(reward, int | float) and not isinstance(reward, bool):
        extras["reward"] = reward
    label = m.field_of(holder, "kto_tag")
    if isinstance(label, bool):
        extras["label"] = label
    return extras
