"""Sampled turns → token-exact samples: prompt/completion ids per turn, the prefix tree, leaves, cut reasons.

The spec (issue 3), as invariants of :func:`linearize_graph`:
- ``P(t)`` (prompt ids of turn t) = the logged ``prompt_token_ids`` when present, else the chat template applied to
  exactly t's context with the generation prompt, tokenized. ``C(t)`` (completion ids) = the logged sampled ids when
  present (verbatim), else the ids the template renders for t right after the generation prompt, up to and including
  the end-of-turn token (never the trailing newline or the next header). ``F(t) = P(t) + C(t)``.
- Turn u *extends* t when ``P(u)`` starts with ``F(t)``; t's prefix parent is the longest such t. Nothing else joins
  turns: edits, compactions, forks, templates that re-render history, token drift and logged ids that differ all
  show up as a failed prefix test, generically, with no per-model case.
- One sample per leaf (a turn no other turn extends): its ids are ``F(leaf)``; it trains the leaf and every turn of
  its prefix chain not already trained by an earlier sample. Each sampled turn is trained exactly once; ``loss_mask``
  is 1 exactly on the trained turns' completion ids; every other token (system, user, tool, generation prompts,
  carried or edited assistant text, turns trained elsewhere) is 0.
- Every sample records why it could not continue an earlier one (``CutReason``); every turn not trained is dropped
  with a reason. Sub-agent graphs nested in tool results are linearized as their own conversations.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import sys
import weakref
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from msgtrain.errors import MsgtrainError
from msgtrain.export.dedupe import DUPLICATE
from msgtrain.export.schema import Sample, unknown_logprobs
from msgtrain.linearize.behaviour import sample_behaviour
from msgtrain.linearize.budget import (
    DEFAULT_MAX_GRAPH_SAMPLES,
    DEFAULT_MAX_GRAPH_STATE_BYTES,
    DEFAULT_MAX_GRAPH_TOKENS,
    GraphBudget,
)
from msgtrain.linearize.completion import (
    FOLLOWER_TEXT,
    REASONING_NOT_LOGGED,
    REASONING_PROBE,
    NotRecoverable,
    carries_reasoning,
    completion_span,
    dropped_by_template,
    follower,
    foreign_text,
    message_texts,
    moved_context_span,
    own_material,
    reasoning_stripped,
    sampled_stop,
    with_probe_text,
)
from msgtrain.linearize.engine_ids import ENGINE_IDS_MISMATCH, MismatchPolicy, engine_ids_disagree
from msgtrain.linearize.render import Renderer, alarm_handler
from msgtrain.linearize.tokenizer import (
    REBIND_BYTES,
    VERIFY_MARKS,
    Encoded,
    SegmentKey,
    TokenizerBundle,
    common_prefix_len,
    in_table,
    membership_table,
    unmark,
)
from msgtrain.linearize.turns import Turn, collect_turns, turn_policy
from msgtrain.model.completeness import (
    CONTEXT_INCOMPLETE,
    RENDERED_PROMPT,
    missing_context,
    reported_prompt_range,
    reported_reasoning_tokens,
    same_model,
)
from msgtrain.model.graph import HISTORY_COPY, MessageGraph, Origin
from msgtrain.model.graphlog import subgraphs
from msgtrain.model.message import AnyMessage, Generation, MediaPart
from msgtrain.model.openai import to_openai_message
from msgtrain.model.supply import SUPPLIED_FLAGS, supplied_context


class CutReason(StrEnum):
    START = "start"  # the first sample of a conversation: nothing was cut
    FORK = "fork"  # shares a prefix with another sample that trains it (n>1 samples, a branch)
    EDIT = "edit"
    COMPACTION = "compaction"
    DELETE = "delete"
    ENV_CHANGE = "env_change"  # tools or template kwargs changed
    REWIND = "rewind"
    TEMPLATE_RERENDER = "template_rerender"  # the template renders earlier turns differently later
    TOKEN_DRIFT = "token_drift"  # same text, other tokens at a boundary
    LOGGED_IDS_DIFFER = "logged_ids_differ"  # engine ids disagree with a later prompt


class DropReason(StrEnum):
    POLICY_NOT_SELECTED = "policy_not_selected"
    NO_TRAINABLE_TOKENS = "no_trainable_tokens"
    RENDER_ERROR = "render_error"
    COMPLETION_NOT_RENDERABLE = "completion_not_renderable"
    # A rendered completion that holds another message's text or another turn's header (the self-check,
    # msgtrain.linearize.completion): what the template renders there is not what the model sampled.
    COMPLETION_MISMATCH = "completion_mismatch"
    # The template renders the reply without its tool calls or its text (Granite 3.3 renders a tool call as a bare
    # end token): trained, it would teach the model to answer with what it did not sample. ``--train-dropped``
    # trains such turns, flagged with the same name.
    TEMPLATE_DROPPED_TOOL_CALLS = "template_dropped_tool_calls"
    TEMPLATE_DROPPED_CONTENT = "template_dropped_content"
    NEGATIVE_LABEL = "negative_label"
    # A reply the log holds (origin ``carried``) in a context it does not hold whole: a record before it was
    # rejected or unknown, so no sample can be exact. Counted so the books show every reply, never trained.
    CONTEXT_UNKNOWN = "context_unknown"
    # A reply the user stopped before it ended (aider's ^C): kept as the context later replies saw, never trained.
    INTERRUPTED = "interrupted"
    # Logged engine ids that do not decode to the logged text (msgtrain.linearize.engine_ids).
    ENGINE_IDS_MISMATCH = ENGINE_IDS_MISMATCH


# Drops that are the user's choice or the log's own limit, not a failure of this run: listed, but they do not make
# ``convert`` and ``validate`` exit with "problems" (both read this one set, so their exit codes agree).
NOT_FAILURES = frozenset(
    {
        DropReason.POLICY_NOT_SELECTED.value,
        DropReason.NEGATIVE_LABEL.value,
        DropReason.CONTEXT_UNKNOWN.value,
        DropReason.INTERRUPTED.value,
        DUPLICATE,  # trained once already, by an earlier sample of the run (msgtrain.export.dedupe)
    }
)

# A sample whose context holds media (an image, a video, an audio clip) that the chat template never renders: its
# tokens hold the text around the media, not what the model saw (a text-only tokenizer on multimodal logs).
MEDIA_NOT_RENDERED = "media_not_rendered"

# A sample whose reply's API-reported prompt size contradicts the prompt msgtrain built for it (the tokenizer being the
# model's own): the context is not what the model saw (a forced reader, a missing system prompt...).
USAGE_MISMATCH = "usage_mismatch"
# The prompt is the logged text a chat template rendered, which this template renders differently (see _logged_prompt).
RENDERED_PROMPT_LOGGED = "rendered_prompt_logged"
# The engine stopped the reply at its token limit: the end-of-turn token after it is context, not trained (_limit_stop).
STOPPED_AT_TOKEN_LIMIT = "stopped_at_token_limit"
USAGE_TOLERANCE = (16, 0.02)  # tokens, share of the reported size: whichever is larger

# A reply the log judges (a KTO label, a chosen/rejected mark) carries the judgement in its message metadata; the
# sample that trains it is flagged with it, and a reply judged bad is not trained unless asked for.
NEGATIVE_MARKS = frozenset({"label_negative", "preference_rejected"})


def reply_mark(metadata: dict[str, Any]) -> str | None:
    """The judgement a reply's metadata carries: ``label_positive`` / ``label_negative`` (a boolean ``label``),
    ``preference_chosen`` / ``preference_rejected`` (``preference``), or None."""
    preference = metadata.get("preference")
    if preference in ("chosen", "rejected"):
        return f"preference_{preference}"
    label = metadata.get("label")
    if isinstance(label, bool):
        return "label_positive" if label else "label_negative"
    return None


@dataclass
class TurnTokens:
    turn: Turn
    prompt: np.ndarray
    completion: np.ndarray
    logprobs: np.ndarray | None
    prompt_engine: bool
    completion_engine: bool
    prompt_text: str | None = None
    full_text: str | None = None  # prompt text + completion text (rendered turns only)
    full_enc: Encoded | None = None
    prompt_enc: Encoded | None = None
    flags: list[str] = field(default_factory=list)
    # Trailing completion ids the model did not sample (the end-of-turn token a template writes after a reply the
    # engine stopped at its token limit): in the sequence as context, never trained.
    unsampled_tail: int = 0
    _full: np.ndarray | None = None

    @property
    def full(self) -> np.ndarray:
        if self._full is None:
            joint = _joint_view(self.prompt, self.completion, self.full_enc)
            self._full = np.concatenate([self.prompt, self.completion]) if joint is None else joint
        return self._full


def _joint_view(prompt: np.ndarray, completion: np.ndarray, joint_enc: Encoded | None) -> np.ndarray | None:
    """``prompt`` + ``completion`` as the first ids of the joint encoding itself (a view, no copy) when the
    completion is its ids right after the prompt's and the prompt is its prefix, as when a rendered completion
    tokenized the same joined; else None (they are concatenated). A long record's sample is then held once."""
    if joint_enc is not None:
        joint = joint_enc.ids
        n, m = prompt.shape[0], completion.shape[0]
        base = joint.__array_interface__["data"][0]
        at = base + n * joint.itemsize
        if (
            m
            and n + m <= joint.shape[0]
            and completion.dtype == joint.dtype
            and completion.flags.c_contiguous
            and joint.flags.c_contiguous
            and completion.__array_interface__["data"][0] == at
            # a prompt held as the joint encoding's first ids (rebound, _prompt_in_joint) is its prefix already
            and (
                (
                    prompt.dtype == joint.dtype
                    and prompt.flags.c_contiguous
                    and prompt.__array_interface__["data"][0] == base
                )
                or _is_prefix(prompt, joint)
            )
        ):
            return joint[: n + m]
    return None


@dataclass
class TurnOutcome:
    node_id: str
    graph_id: str
    policy: str
    status: str  # "trained" | "dropped"
    reason: str | None = None
    sample_id: str | None = None
    message: str | None = None


@dataclass
class LinearizeResult:
    samples: list[Sample] = field(default_factory=list)
    turns: list[TurnOutcome] = field(default_factory=list)
    cuts: Counter[str] = field(default_factory=Counter)
    drops: Counter[str] = field(default_factory=Counter)
    flags: Counter[str] = field(default_factory=Counter)
    # replies held as the history a group of rollouts started from (``HISTORY_COPY``): copies, not turns
    history_copies: int = 0

    def merge(self, other: LinearizeResult) -> None:
        self.samples.extend(other.samples)
        self.turns.extend(other.turns)
        self.cuts.update(other.cuts)
        self.drops.update(other.drops)
        self.flags.update(other.flags)
        self.history_copies += other.history_copies


@dataclass(frozen=True)
class LinearizeOptions:
    policies: frozenset[str] = frozenset()  # empty = all
    render_date: str | None = None
    # Control-token text in log content (not the policy's own text): "plain" encodes it as plain text (content
    # never becomes a control token); "parse" renders it as a serving engine does (control tokens) and flags the
    # sample ``content_special_tokens_parsed``. Logged engine ids are the truth either way.
    content_special_tokens: str = "plain"
    # A reply marked bad (KTO ``label: false``, the rejected side of a preference pair) is dropped as
    # ``negative_label`` unless this is set; then it is trained and its sample flagged with the mark, for trainers
    # that read the flags (KTO, preference pairs sharing a group id).
    train_negative: bool = False
    # Logged engine ids that do not decode to the logged text: drop the turn, render it instead, or keep the ids
    # (the last two flag the sample engine_ids_mismatch).
    engine_ids_mismatch: MismatchPolicy = "drop"
    # How list content reaches the template (msgtrain.linearize.content_format): "auto" (detected from the
    # template, as vLLM does), "string" (text parts joined with "\n") or "openai" (the parts as logged).
    content_format: str = "auto"
    # A turn whose template dropped its tool calls or its text is dropped with that reason unless this is set; then
    # it is trained as rendered, flagged template_dropped_tool_calls / template_dropped_content.
    train_dropped: bool = False
    # Per-graph caps (msgtrain.linearize.budget): a graph whose samples would pass one is rejected; None = no cap.
    max_graph_tokens: int | None = DEFAULT_MAX_GRAPH_TOKENS
    max_graph_samples: int | None = DEFAULT_MAX_GRAPH_SAMPLES
    max_graph_state_bytes: int | None = DEFAULT_MAX_GRAPH_STATE_BYTES


def _h(*parts: str) -> str:
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=12).hexdigest()


_PREFIX_BLOCK = 1 << 16  # ids compared at a time: a long prefix costs a block's copies, not the whole of both


def _is_prefix(prefix: np.ndarray, seq: np.ndarray) -> bool:
    n = prefix.shape[0]
    if n > seq.shape[0]:
        return False
    if n <= _PREFIX_BLOCK and prefix.dtype == seq.dtype and prefix.flags.c_contiguous and seq.flags.c_contiguous:
        # Bytes of contiguous arrays of one dtype compare like their elements; two copies and a memcmp cost less
        # than numpy's per-call overhead at these sizes.
        return prefix.tobytes() == seq[:n].tobytes()
    # A whole-record prefix (10 M ids of a byte-level vocabulary) compared at once held two copies of it (tobytes)
    # or a mask as long (array_equal) at the linearizing peak: block by block holds one block's.
    # (the last block of ``seq`` cut at ``n``: a longer ``seq`` is compared with the prefix, not past its end)
    return all(
        np.array_equal(seq[i : min(i + _PREFIX_BLOCK, n)], prefix[i : i + _PREFIX_BLOCK])
        for i in range(0, n, _PREFIX_BLOCK)
    )


# Held no longer than the tokenizer itself: a process that loads many tokenizers does not keep them all alive here.
_STOP_FACTS: weakref.WeakKeyDictionary[TokenizerBundle, tuple[np.ndarray, np.ndarray, int]] = (
    weakref.WeakKeyDictionary()
)


def _stop_facts(tok: TokenizerBundle) -> tuple[np.ndarray, np.ndarray, int]:
    """(sorted stop ids, a membership table indexed by id, vocabulary size) of ``tok``, made once per tokenizer."""
    hit = _STOP_FACTS.get(tok)
    if hit is None:
        stop = np.array(sorted(tok.stop_ids), dtype=np.int64)
        table = membership_table(stop, int(stop.max()) + 1 if stop.shape[0] else 0)
        hit = _STOP_FACTS[tok] = (stop, table, len(tok.base))
    return hit


class _GraphLinearizer:
    def __init__(self, graph: MessageGraph, tok: TokenizerBundle, renderer: Renderer, opts: LinearizeOptions):
        self.g = graph
        self.tok = tok
        self.r = renderer
        self.opts = opts
        # Per tokenizer, not per conversation: the stop table is as long as the highest stop id.
        self.stop, self._stop_table, self.vocab_size = _stop_facts(tok)
        self.tt: dict[str, TurnTokens] = {}
        self.parent: dict[str, str | None] = {}
        self.recent: list[Encoded] = []
        # Nodes some turn's context passes through (set by run): a turn at none of them has no later turn that
        # could start from its joint encoding.
        self._extended: set[str] | None = None
        self.result = LinearizeResult()
        self._edges = graph._edge_index()  # computed once per graph: cut reasons look it up per sample
        self._has_turn: dict[str, bool] = {}
        self._by_len: list[tuple[int, int, str]] = []  # (full length, turn index, node id) of kept turns, sorted
        # Segment ids of this conversation's renderings (see TokenizerBundle.encode_segments), shared between its
        # turns; the renderer's bounded cache shares them between the conversations it serves.
        self.segments: dict[SegmentKey, np.ndarray] | None = {} if renderer.segments is not None else None
        # Node ids that are content hashes: renderings of this graph may be shared with the run's other graphs.
        self.shared_ids = getattr(graph, "content_ids", False)
        self._graph_media: list[str] | None = None  # modalities in the graph the template cannot render
        self._node_texts: dict[str, tuple[str, ...]] = {}  # node id -> its texts the self-check looks for

    # ------------------------------------------------------------ per-turn tokens
    def _encode(self, text: str, marked: bool, bases: list[Encoded | None]) -> Encoded:
        # A text the run encoded before (unmarked: a marked one is encoded by stretches) comes from the tokenizer's
        # memo of encodings; each new one goes to it.
        memo = self.tok.encodings if self.segments is not None and not marked else None
        if memo is not None:
            hit = memo.get(text)
            if hit is not None and not VERIFY_MARKS:
                return hit
        enc = self._encode_new(text, marked, bases)
        if VERIFY_MARKS and memo is not None and (hit := memo.get(text)) is not None:  # the test suite checks hits
            if not (np.array_equal(hit.ids, enc.ids) and np.array_equal(hit.char_marks, enc.char_marks)):
                raise AssertionError("a memoized encoding differs from a new one")
            return hit
        if memo is not None:
            memo.put(enc)
        return enc

    def _encode_new(self, text: str, marked: bool, bases: list[Encoded | None]) -> Encoded:
        best: Encoded | None = None
        best_len = -1
        for b in bases:
            # A base no longer than the best common prefix so far cannot share a longer one (the ancestor's joint
            # encoding is usually among the recent ones too, and a turn's prompt is a prefix of its joint text).
            if b is None or len(b.text) <= best_len:
                continue
            n = len(b.text) if text.startswith(b.text) else common_prefix_len(b.text, text)
            if n > best_len:
                best, best_len = b, n
        lcp = best_len if best is not None else None
        return self.tok.encode_from(best, text, marked, lcp=lcp, segments=self.segments, shared=self.r.segments)

    def _trim_completion(self, raw: np.ndarray, prompt: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Up to and including the first stop token after which only template trailer follows: whitespace, or
        (part of) the generation header ``prompt`` ends with, its ids after its last occurrence of that stop token
        (a template that renders the generation prompt even without ``add_generation_prompt``, as Command R7B's
        does, writes it after the message too; the policy stopped before it). With which of its ids are stop ids."""
        is_stop = self._is_stop(raw)
        if raw.shape[0] == 0:
            return raw, is_stop
        stop_ids = self.tok.stop_ids
        for p in np.flatnonzero(is_stop).tolist():
            after = raw[p + 1 :]
            # Usually the trailer is one newline token: known whitespace ids decide without decoding (a short
            # trailer is looked at as Python ints, where numpy's calls would cost more than the work).
            rest: np.ndarray | list[int] = (
                [i for i in after.tolist() if i not in stop_ids] if after.shape[0] <= 8 else after[~is_stop[p + 1 :]]
            )
            if (
                len(rest) == 0
                or (len(rest) <= 8 and all(int(i) in self.tok.whitespace_ids for i in rest))
                or self.tok.decode(rest).strip() == ""
            ):
                return raw[: p + 1], is_stop[: p + 1]
            if prompt is not None:
                last = np.flatnonzero(prompt == raw[p])
                header = prompt[last[-1] + 1 :] if last.shape[0] else prompt[:0]
                if after.shape[0] <= header.shape[0] and np.array_equal(after, header[: after.shape[0]]):
                    return raw[: p + 1], is_stop[: p + 1]
        # No stop token (a template whose turns end in plain text): drop trailing whitespace only.
        end = raw.shape[0]
        while end > 0 and self.tok.decode([int(raw[end - 1])]).strip() == "":
            end -= 1
        return raw[:end], is_stop[:end]

    def _is_stop(self, ids: np.ndarray) -> np.ndarray:
        """``np.isin(ids, self.stop)`` by a table lookup."""
        return in_table(self._stop_table, ids)

    def _usable(self, t: Turn, flags: list[str]) -> Generation | None:
        """Engine facts whose ids belong to this tokenizer; foreign or out-of-vocabulary ids are not used, and ids
        that do not decode to the logged text are dropped, rendered or kept flagged (:mod:`.engine_ids`)."""
        gen = t.generation
        if gen is None or (gen.token_ids is None and gen.prompt_token_ids is None):
            return gen
        ids = [*(gen.token_ids or ()), *(gen.prompt_token_ids or ())]
        if gen.tokenizer is not None or (ids and (max(ids) >= self.vocab_size or min(ids) < 0)):
            flags.append("foreign_engine_ids")
            return None
        why = engine_ids_disagree(self.tok.decode, t.node.message, t.context, gen.token_ids, gen.prompt_token_ids)
        if why is None:
            return gen
        if self.opts.engine_ids_mismatch == "drop":
            raise _Drop(DropReason.ENGINE_IDS_MISMATCH, why)
        flags.append(ENGINE_IDS_MISMATCH)
        return gen if self.opts.engine_ids_mismatch == "keep" else None

    def _unrenderable_media(self, t: Turn) -> list[str]:
        """Modalities on the turn's path that the chat template never mentions (a text-only template renders an
        image part as nothing, and some drop the text beside it too)."""
        if self._graph_media is None:
            found = {
                p.modality
                for n in self.g.nodes.values()
                for p in getattr(n.message, "parts", ())
                if isinstance(p, MediaPart)
            }
            template = (getattr(self.tok, "chat_template", None) or "").lower()
            self._graph_media = sorted(m for m in found if m not in template)
        if not self._graph_media:
            return []
        if self.tok.encodes_messages:  # the encoder leaves out what it cannot encode (Mistral: no encoder, a URL)
            parts = (p for n in t.path for p in getattr(n.message, "parts", ()) if isinstance(p, MediaPart))
            return sorted({p.modality for p in parts if not self.tok.encodes_media(p.modality, p.url)})
        on_path = {p.modality for n in t.path for p in getattr(n.message, "parts", ()) if isinstance(p, MediaPart)}
        return [m for m in self._graph_media if m in on_path]

    def _tokens(self, t: Turn, anc: TurnTokens | None) -> TurnTokens:
        flags: list[str] = []
        gen = self._usable(t, flags)
        if self.tok.encodes_messages:
            return self._message_tokens(t, gen, flags)
        ctx = t.context
        carries = self.r.needs_marking(t.path, t.env)
        marked = carries and self.opts.content_special_tokens != "parse"
        created = gen.created if gen is not None else None
        prompt_text = prompt_enc = None
        if gen is not None and gen.prompt_token_ids is not None:
            prompt = np.asarray(gen.prompt_token_ids, dtype=np.int32)
            prompt_engine = True
            if carries:
                self._check_engine_parse(t, prompt, created, flags)
        else:
            prompt_text = self.r.render(
                ctx, t.env, add_generation_prompt=True, marked=marked, created=created, shared_ids=self.shared_ids
            )
            bases = [anc.full_enc if anc else None, *self.recent[-3:]]
            prompt_enc = self._encode(prompt_text, marked, bases)
            prompt = prompt_enc.ids
            prompt_engine = False
        full_text = full_enc = None
        logprobs = None
        if gen is not None and gen.token_ids is not None:
            completion = np.asarray(gen.token_ids, dtype=np.int32)
            completion_engine = True
            if gen.logprobs is not None:
                logprobs = np.asarray(gen.logprobs, dtype=np.float32)
        else:
            completion_engine = False
            if prompt_text is None:
                prompt_text = self.r.render(
                    ctx, t.env, add_generation_prompt=True, marked=marked, created=created, shared_ids=self.shared_ids
                )
            # A rendered prompt's ids are read from its encoding, which _prompt_in_joint may rebind to the joint
            # encoding's first ids: no frame keeps the prompt's own array alive beside the joint's.
            held = prompt if prompt_enc is None else None
            del prompt
            completion, full_text, full_enc = self._rendered_completion(
                t, held, prompt_text, prompt_enc, anc, marked, created, flags
            )
            if prompt_enc is not None:
                prompt = prompt_enc.ids
            else:
                assert held is not None
                prompt = held
            del held
        if completion.shape[0] == 0:
            raise _Drop(DropReason.NO_TRAINABLE_TOKENS, "the completion has no tokens")
        logged_prompt = None if prompt_engine or prompt_text is None else self._logged_prompt(t, prompt_text)
        if logged_prompt is not None:  # the context the policy saw, as logged, not this template's rendering of it
            prompt_text, prompt = logged_prompt
            full_text = full_enc = prompt_enc = None
            flags.append(RENDERED_PROMPT_LOGGED)
        if carries and not marked and not (prompt_engine and completion_engine):
            flags.append("content_special_tokens_parsed")
        if self._usage_contradicts(t, prompt.shape[0]):
            flags.append(USAGE_MISMATCH)
        joint = _joint_view(prompt, completion, full_enc)
        if joint is None and self._extended is not None and t.node_id not in self._extended:
            # Its ids are not this turn's sample and no later turn starts from it: not held while the sample's ids
            # are concatenated (a long record's prompt, joint and sample ids were all three live at that peak).
            full_enc = None
        tt = TurnTokens(
            t,
            prompt,
            completion,
            logprobs,
            prompt_engine,
            completion_engine,
            prompt_text,
            full_text,
            full_enc,
            prompt_enc,
            flags,
        )
        tt._full = joint
        for enc in (prompt_enc, full_enc):
            if enc is not None and enc.char_marks.shape[0]:
                self.recent.append(enc)
        del self.recent[:-4]
        return tt

    def _logged_prompt(self, t: Turn, rendered: str) -> tuple[str, np.ndarray] | None:
        """(text, ids) of the prompt the log holds for ``t`` as the text a chat template rendered (parsed back into
        messages at ingest, :data:`RENDERED_PROMPT`), when it differs from ``rendered`` (this template's prompt for
        those messages) and is this tokenizer's markup (the family's control strings are its added tokens): then
        it, not the rendering, is the context the policy saw, as logged prompt ids are. Another family's markup
        (the data feeds another model) or text without control tokens (Alpaca, Human / Assistant) leaves the
        rendering, which is the conversation in this model's own template."""
        logged = t.node.message.metadata.get(RENDERED_PROMPT)
        if not isinstance(logged, dict) or not isinstance(logged.get("text"), str):
            return None
        text, controls = logged["text"], logged.get("controls")
        if not controls or unmark(rendered)[0] == text:
            return None
        if not all(isinstance(c, str) and c in self.tok.added_strings for c in controls):
            return None
        return text, self.tok.encode(text)

    def _check_engine_parse(self, t: Turn, prompt: np.ndarray, created: int | None, flags: list[str]) -> None:
        """Flag logged prompt ids that parsed content's control-token text as control tokens. A diagnostic only:
        logged ids stand alone, so a template that cannot render the context (it rejects control text, call ids
        of another length, ...) leaves the turn as logged, unflagged."""
        try:
            rendered = self.r.render(
                t.context, t.env, add_generation_prompt=True, marked=True, created=created, shared_ids=self.shared_ids
            )
        except MsgtrainError:
            return
        if not np.array_equal(self.tok.encode_marked(rendered), prompt):
            flags.append("engine_parsed_special_tokens")

    def _rendered_completion(
        self,
        t: Turn,
        prompt: np.ndarray | None,
        prompt_text: str,
        prompt_enc: Encoded | None,
        anc: TurnTokens | None,
        marked: bool,
        created: int | None,
        flags: list[str],
    ) -> tuple[np.ndarray, str, Encoded | None]:
        """(completion ids, prompt text + completion text, the joint encoding when there is one) of a turn without
        logged ids (``prompt``: the prompt's ids, None when they are ``prompt_enc``'s): the rule of
        :mod:`msgtrain.linearize.completion`, then the self-check (:meth:`_mismatch`). A recovered completion that
        holds another message (a template whose history moves context) is recovered again by the engine-mode rule
        (:func:`moved_context_span`); one that still fails is dropped as ``completion_mismatch``."""
        text = self.r.render(
            t.path, t.env, add_generation_prompt=False, marked=marked, created=created, shared_ids=self.shared_ids
        )
        message = self.r.message_dict(t.node)
        with_reasoning = None
        if not carries_reasoning(message):
            probed = {**message, "reasoning_content": REASONING_PROBE, "thinking": REASONING_PROBE}

            def with_reasoning() -> str:
                try:
                    return self.r.render_followed(t.context, [probed], t.env, marked=marked, created=created)
                except MsgtrainError:  # a template that cannot render the probe: nothing learned from it
                    return ""

        retexted = with_probe_text(message)
        probed_text = None
        if retexted is not None:

            def probed_text() -> str:
                try:
                    return self.r.render_followed(t.context, [retexted], t.env, marked=marked, created=created)
                except MsgtrainError:
                    return ""

        def context() -> str:
            return self.r.render(
                t.context,
                t.env,
                add_generation_prompt=False,
                marked=marked,
                created=created,
                shared_ids=self.shared_ids,
            )

        try:
            start, end = completion_span(
                prompt_text,
                text,
                context,
                self.tok.control_starts,
                self.tok.added_pattern,
                with_reasoning,
                flags,
                probed_text,
            )
        except NotRecoverable as e:
            raise _Drop(DropReason.COMPLETION_NOT_RENDERABLE, str(e)) from None
        if (
            with_reasoning is not None
            and REASONING_NOT_LOGGED not in flags
            and reasoning_stripped(message, reported_reasoning_tokens(t.node.message.metadata), with_reasoning)
        ):
            flags.append(REASONING_NOT_LOGGED)
        attempt: list[str] = []
        out = self._span_tokens(t, prompt, prompt_text, prompt_enc, anc, marked, created, text, start, end, attempt)
        why = self._mismatch(t, message, out[0], out[3])
        if why is not None and (start, end) != (len(prompt_text), len(text)):
            # History renders the context differently from the prompt away from the reply: the message's own
            # rendering where history puts it, if that place ends as the prompt does.
            try:
                ctx = context()
                stand_ins = [
                    self.r.render_followed(
                        t.context, [{"role": "assistant", "content": f"{c}-{FOLLOWER_TEXT}"}], t.env, marked=marked
                    )
                    for c in "xy"
                ]
                start, end = moved_context_span(
                    prompt_text, text, stand_ins, ctx, prompt_text[len(ctx) :], self.tok.added_pattern
                )
            except (NotRecoverable, MsgtrainError) as e:
                raise _Drop(DropReason.COMPLETION_MISMATCH, f"{why}; {e}") from None
            attempt = []
            out = self._span_tokens(t, prompt, prompt_text, prompt_enc, anc, marked, created, text, start, end, attempt)
            why = self._mismatch(t, message, out[0], out[3])
        if why is not None:
            raise _Drop(DropReason.COMPLETION_MISMATCH, why)
        completion, comp_text, full_enc, flag_text = out
        flags.extend(attempt)
        flags.extend(dropped_by_template(message, flag_text))
        return completion, prompt_text + comp_text, full_enc

    def _mismatch(self, t: Turn, message: dict[str, Any], completion: np.ndarray, text: str) -> str | None:
        """Why a rendered completion is not the message it claims to be, or None: it holds the header that opens
        another turn (the generation prompt's opening control token), or another message's text. Cheap: one
        table lookup over the ids, and a substring test per earlier message no longer than the completion."""
        body = completion[:-1] if completion.shape[0] and int(completion[-1]) in self.tok.stop_ids else completion
        openers = self.r.turn_openers()
        if openers.shape[0] and body.shape[0] and bool(in_table(self.r.turn_openers_table(), body).any()):
            opener = next(int(i) for i in body if int(i) in set(openers.tolist()))
            return (
                f"the completion holds {self.tok.decode([opener])!r}, which opens another turn: the template renders "
                "this message differently in history than after its generation prompt"
            )
        others = (self._texts(n) for n in t.context)
        found = foreign_text(text, own_material(message), others)
        if found is not None:
            shown = found if len(found) <= 60 else found[:57] + "..."
            return (
                f"the completion holds another message's text ({shown!r}): the template renders this message "
                "differently in history than after its generation prompt"
            )
        return None

    def _texts(self, node: Any) -> tuple[str, ...]:
        hit = self._node_texts.get(node.id)
        if hit is None:
            hit = self._node_texts[node.id] = message_texts(self.r.message_dict(node))
        return hit

    def _span_tokens(
        self,
        t: Turn,
        prompt: np.ndarray | None,
        prompt_text: str,
        prompt_enc: Encoded | None,
        anc: TurnTokens | None,
        marked: bool,
        created: int | None,
        text: str,
        start: int,
        end: int,
        flags: list[str],
    ) -> tuple[np.ndarray, str, Encoded | None, str]:
        """(completion ids, completion text, joint encoding or None, the completion's plain text) of the span
        ``text[start:end]``: trimmed at its stop token, or ended with the stop token the model sampled. ``prompt``:
        the prompt's ids, None when they are ``prompt_enc``'s."""
        if prompt is None:
            assert prompt_enc is not None
            prompt = prompt_enc.ids
        full_enc = None
        if start == len(prompt_text) and end == len(text):
            base = prompt_enc or self._encode(prompt_text, marked, [anc.full_enc if anc else None])
            full_enc = self._encode(text, marked, [base])
            joint = full_enc.ids
            if _is_prefix(prompt, joint):
                raw = joint[prompt.shape[0] :]
                if self._prompt_in_joint(prompt_enc, prompt, joint):
                    prompt = joint[: prompt.shape[0]]  # the prompt's own array is dropped here
            else:
                # The boundary between prompt and completion tokenizes differently when joined: the policy
                # generated after the prompt ids, so its completion is the completion text tokenized on its own.
                raw = self._encode_after(prompt_text, text[start:], marked)
                flags.append("boundary_drift")
        else:
            # The template renders the message differently in history: its completion is recovered from the
            # difference and tokenized on its own, after the prompt ids.
            raw = self._encode_after(prompt_text, text[start:end], marked)
        completion, stops = self._trim_completion(raw, prompt)
        comp_text = text[start:end]
        flag_text = unmark(comp_text)[0]
        # Declared stop ids are stop ids: the table finds the few candidates, the set decides.
        declared = [p for p in np.flatnonzero(stops[:-1]).tolist() if int(completion[p]) in self.tok.declared_stop_ids]
        if declared:
            # The template renders one sampled message as several turns (Nemotron Nano v2 writes the tool calls in
            # an assistant turn of their own after the text's EOS): generation stopped at the first declared stop.
            completion = completion[: declared[0] + 1]
            flag_text = self.tok.decode(completion.tolist())
        elif not stops.any():
            # No end-of-turn token in the rendering: the model stopped on the token the template writes before
            # what follows the message (GLM's next role header), when that token stops generation; else, the
            # template marking no end at all (Command R+'s tool-call turns), on its EOS.
            core = comp_text.rstrip()
            stop = self._sampled_stop(t, core, marked, created) if core else None
            if stop is None and core:
                stop = self.tok.eos_stop_text
            if stop is not None:
                with_stop = self._encode_after(prompt_text, core + stop, marked)
                if with_stop.shape[0] and self._is_stop(with_stop[-1:]).all():
                    completion, comp_text = with_stop, core + stop
        return completion, comp_text, full_enc, flag_text

    def _prompt_in_joint(self, prompt_enc: Encoded | None, prompt: np.ndarray, joint: np.ndarray) -> bool:
        """Hold a long prompt's ids as the first ids of its joint encoding, which they equal, not as an array of their
        own: the prompt's encoding, and this conversation's cached segments that are views of its ids, are rebound
        to views of ``joint`` at the same offsets (a long record's ids were held twice, prompt and joint, at the
        linearizing peak). A prompt encoding the run-wide memo holds is left as it is (its entry would keep the
        longer joint ids alive past the memo's bound); so is a segment outside the prompt's ids. True when rebound."""
        if prompt_enc is None or prompt_enc.ids is not prompt or prompt.nbytes < REBIND_BYTES:
            return False
        if joint.dtype != prompt.dtype or not (prompt.flags.c_contiguous and joint.flags.c_contiguous):
            return False
        if self.tok.encodings.holds(prompt_enc):
            return False
        n, size = prompt.shape[0], prompt.itemsize
        start = prompt.__array_interface__["data"][0]
        root = prompt if prompt.base is None else prompt.base
        views = {}
        for key, ids in (self.segments or {}).items():
            if (ids is root or ids.base is root) and ids.dtype == prompt.dtype and ids.flags.c_contiguous:
                at, rem = divmod(ids.__array_interface__["data"][0] - start, size)
                if rem == 0 and at >= 0 and at + ids.shape[0] <= n:
                    view = joint[at : at + ids.shape[0]]
                    view.flags.writeable = False
                    views[key] = view
        if self.segments is not None:
            self.segments.update(views)
        ids = joint[:n]
        ids.flags.writeable = False
        prompt_enc.ids = ids
        return True

    def _encode_after(self, prompt_text: str, text: str, marked: bool) -> np.ndarray:
        """``text`` tokenized on its own as what follows ``prompt_text``."""
        if not marked:
            return self.tok.encode(text)
        return self.tok.encode_marked(text, after=self.tok.control_ending_at(prompt_text, len(prompt_text)))

    def _sampled_stop(self, t: Turn, core: str, marked: bool, created: int | None) -> str | None:
        pattern = self.tok.stop_pattern
        if pattern is None:
            return None
        try:
            followed = self.r.render_followed(
                t.path, follower(self.r.message_dict(t.node)), t.env, marked=marked, created=created
            )
        except MsgtrainError:
            return None
        return sampled_stop(followed, core, pattern, self.tok.added_pattern)

    def _message_tokens(self, t: Turn, gen: Generation | None, flags: list[str]) -> TurnTokens:
        """P(t) and C(t) from a tokenizer that encodes messages itself (Mistral through mistral-common): P = its
        ids of the context (ending in the generation prompt), C = its ids of context + message past P (the message
        and its end token). Logged engine ids are used as they are, as for templates."""
        msgs = [to_openai_message(n.message) for n in t.path]
        tools = list(t.env.tools)
        logprobs = None
        if gen is not None and gen.prompt_token_ids is not None:
            prompt = np.asarray(gen.prompt_token_ids, dtype=np.int32)
        else:
            prompt = self.tok.encode_messages(msgs[:-1], tools, final=False)
        if gen is not None and gen.token_ids is not None:
            completion = np.asarray(gen.token_ids, dtype=np.int32)
            if gen.logprobs is not None:
                logprobs = np.asarray(gen.logprobs, dtype=np.float32)
        else:
            full = self.tok.encode_messages(msgs, tools, final=True)
            if not _is_prefix(prompt, full):
                raise _Drop(
                    DropReason.COMPLETION_NOT_RENDERABLE,
                    "the tokenizer does not encode this turn right after its context's ids",
                )
            completion = full[prompt.shape[0] :]
            # What the encoder left out of the sampled message (a version without think tokens, ...) is flagged
            # as for templates: the completion trains something other than what the model sampled.
            flags.extend(dropped_by_template(msgs[-1], self.tok.decode(completion.tolist())))
        if completion.shape[0] == 0:
            raise _Drop(DropReason.NO_TRAINABLE_TOKENS, "the completion has no tokens")
        if self._usage_contradicts(t, prompt.shape[0]):
            flags.append(USAGE_MISMATCH)
        prompt_engine = gen is not None and gen.prompt_token_ids is not None
        completion_engine = gen is not None and gen.token_ids is not None
        return TurnTokens(t, prompt, completion, logprobs, prompt_engine, completion_engine, flags=flags)

    # ------------------------------------------------------------ structure
    def _nearest_turn_ancestor(self, t: Turn) -> TurnTokens | None:
        for node in reversed(t.context):
            tt = self.tt.get(node.id)
            if tt is not None:
                return tt
        return None

    def _find_parent(self, tt: TurnTokens, anc: TurnTokens | None) -> str | None:
        """The turn with the longest full ids that the prompt starts with (None: this turn starts a sample)."""
        prompt = tt.prompt
        found: str | None = None
        cur = anc.turn.node_id if anc else None
        while cur is not None:
            if _is_prefix(self.tt[cur].full, prompt):
                found = cur
                break
            cur = self.parent.get(cur)
        # Other branches can render to the same tokens and reach further (e.g. a client dropped reasoning that the
        # template strips anyway): any longer full-ids prefix wins.
        floor = self.tt[found].full.shape[0] if found else 0
        # Turns by full length, so only those between ``floor`` and the prompt's length are looked at (scanning all
        # turns here made long conversations quadratic).
        lo = bisect.bisect_right(self._by_len, (floor, sys.maxsize))
        hi = bisect.bisect_right(self._by_len, (prompt.shape[0], sys.maxsize))
        cands = [self.tt[nid] for _, _, nid in self._by_len[lo:hi] if nid != tt.turn.node_id]
        cands.sort(key=lambda o: (-o.full.shape[0], o.turn.index))
        for o in cands:
            f = o.full
            n = f.shape[0]
            if f[0] == prompt[0] and f[-1] == prompt[n - 1] and f[n // 2] == prompt[n // 2] and _is_prefix(f, prompt):
                return o.turn.node_id
        return found

    def _cut_reason(self, tt: TurnTokens, chain_parent: str | None) -> CutReason:
        """Why the sample whose first trained turn is ``tt`` does not continue the previous turn of its branch.

        A version edge between the previous sampled turn and this one names the reason (edit, compaction, rewind,
        ...); a sample that continues its branch's previous turn, trained by another sample, is a fork; otherwise
        the tokens disagree with the previous turn (a re-rendering template, drifting tokenization, or engine ids)
        — even when an older prefix still matched — or there is no previous turn.
        """
        t = tt.turn
        anc = self._nearest_turn_ancestor(t)
        below = t.context[anc.turn.node.depth + 1 :] if anc else t.context
        for node in reversed(below):
            e = self._edges.get(node.id)
            if e is not None:
                return CutReason(e.kind.value)
        if chain_parent is not None and (anc is None or anc.turn.node_id == chain_parent):
            return CutReason.FORK
        if anc is not None:
            if anc.prompt_engine or anc.completion_engine or tt.prompt_engine:
                return CutReason.LOGGED_IDS_DIFFER
            if (
                tt.prompt_text is not None
                and anc.full_text is not None
                and self._starts_with_f_text(tt.prompt_text, anc)
            ):
                return CutReason.TOKEN_DRIFT
            return CutReason.TEMPLATE_RERENDER
        # No earlier turn on this path: did this path leave a branch where turns were sampled?
        for node in below:
            siblings = self.g.children.get(node.parent, [])
            # Only versions that existed before this node can have been replaced by it.
            for sib in siblings[: siblings.index(node.id)]:
                if self._subtree_has_turn(sib):
                    same = self.g.nodes[sib].message.canonical_json() == node.message.canonical_json()
                    if same:
                        return CutReason.ENV_CHANGE
                    if node.parent is not None:  # two unrelated roots are two conversations, not an edit
                        return CutReason.EDIT
        return CutReason.START

    def _starts_with_f_text(self, text: str, anc: TurnTokens) -> bool:
        """Whether ``text`` starts with ``anc``'s F text (its prompt text and the text of its completion ids). Decoded
        only when the texts themselves leave it open: a text holding the whole rendering does; one that leaves the
        prompt text, or its first character after it, does not, when the completion ends with an added token (its
        text, never empty, is in the decoding). A template that re-renders history (Qwen3 drops the reasoning block
        that starts the reply) is then told apart without decoding a completion per sample."""
        full, prompt = anc.full_text, anc.prompt_text
        assert full is not None and prompt is not None
        if text.startswith(full):
            return True
        n = len(prompt)
        ends_added = len(full) > n and anc.completion.shape[0] and bool(self.tok.is_added(anc.completion[-1:])[0])
        if ends_added and (text[n : n + 1] != full[n : n + 1] or not text.startswith(prompt)):
            return False
        return text.startswith(full[: self._completion_text_end(anc)])

    def _completion_text_end(self, tt: TurnTokens) -> int:
        assert tt.full_text is not None and tt.prompt_text is not None
        # The F text ends where the trimmed completion ends; decode length is exact for rendered ids.
        return len(tt.prompt_text) + len(self.tok.decode(tt.completion.tolist()))

    def _subtree_has_turn(self, nid: str) -> bool:
        """Whether any node under ``nid`` is a kept turn (memoised: each node is visited once per graph)."""
        known = self._has_turn.get(nid)
        if known is not None:
            return known
        order: list[str] = []
        stack = [nid]
        while stack:  # post-order without recursion: long chains must not hit the recursion limit
            cur = stack.pop()
            if cur in self._has_turn:
                continue
            order.append(cur)
            stack.extend(self.g.children.get(cur, []))
        for cur in reversed(order):
            self._has_turn[cur] = cur in self.tt or any(
                self._has_turn.get(k, False) for k in self.g.children.get(cur, [])
            )
        return self._has_turn[nid]

    # ------------------------------------------------------------ driver
    def run(self, source: str, extras: dict[str, Any]) -> LinearizeResult:
        res = self.result
        budget = GraphBudget(
            self.g.graph_id,
            self.opts.max_graph_tokens,
            self.opts.max_graph_samples,
            self.opts.max_graph_state_bytes,
            len(json.dumps({k: v for k, v in extras.items() if k != "reward"}, default=str)),
        )
        turns = collect_turns(self.g)
        self._extended = {n.id for t in turns for n in t.context}
        for t in turns:
            if self.opts.policies and t.policy not in self.opts.policies:
                self._drop(t, DropReason.POLICY_NOT_SELECTED, None)
                continue
            mark = reply_mark(t.node.message.metadata)
            if mark in NEGATIVE_MARKS and not self.opts.train_negative:
                why = f"the log marks this reply {mark.split('_', 1)[1]}: not trained as a positive example"
                self._drop(t, DropReason.NEGATIVE_LABEL, why + " (--train-negative trains it, flagged)")
                continue
            anc = self._nearest_turn_ancestor(t)
            try:
                tt = self._tokens(t, anc)
                self._check_template_dropped(tt)
                self._limit_stop(tt)
            except _Drop as d:
                self._drop(t, d.reason, d.message)
                continue
            except MsgtrainError as e:
                self._drop(t, DropReason.RENDER_ERROR, str(e))
                continue
            if mark is not None:
                tt.flags.append(mark)
            if self._unrenderable_media(t):
                tt.flags.append(MEDIA_NOT_RENDERED)
            self.tt[t.node_id] = tt
            self.parent[t.node_id] = self._find_parent(tt, anc)
            budget.add(t.node_id, tt.full.shape[0], self.parent[t.node_id])
            bisect.insort(self._by_len, (tt.full.shape[0], t.index, t.node_id))
        self._emit_samples(source, extras)
        self._count_carried_replies(turns)
        return res

    def _limit_stop(self, tt: TurnTokens) -> None:
        """A reply the engine stopped at its token limit (:attr:`Generation.stopped_at_limit`) did not sample the
        end of its turn: the stop tokens a rendered completion ends with are kept in the sequence (what follows saw
        them) but not trained, and the turn is flagged ``stopped_at_token_limit``. Logged engine ids are what was
        sampled and stay as they are."""
        gen = tt.turn.generation
        if gen is None or not gen.stopped_at_limit:
            return
        tt.flags.append(STOPPED_AT_TOKEN_LIMIT)
        if tt.completion_engine:
            return
        stops = self._is_stop(tt.completion)
        tail = int(stops.shape[0] - np.flatnonzero(~stops)[-1] - 1) if (~stops).any() else int(stops.shape[0])
        if tail >= tt.completion.shape[0]:
            raise _Drop(DropReason.NO_TRAINABLE_TOKENS, "the reply stopped at its token limit before any token")
        tt.unsampled_tail = tail

    def _check_template_dropped(self, tt: TurnTokens) -> None:
        """Drop a turn whose rendered completion lost its tool calls or its text (flagged by
        :func:`~msgtrain.linearize.completion.dropped_by_template`), unless ``train_dropped``: its tokens are not
        what the model sampled (a tool-call turn trained as a bare end token teaches it to answer with nothing)."""
        if self.opts.train_dropped or not tt.flags:
            return
        for reason, what in (
            (DropReason.TEMPLATE_DROPPED_TOOL_CALLS, "its tool calls"),
            (DropReason.TEMPLATE_DROPPED_CONTENT, "its text"),
        ):
            if reason.value in tt.flags:
                raise _Drop(
                    reason,
                    f"the template renders this reply without {what}: its tokens are not what the model sampled"
                    " (--train-dropped trains it as rendered, flagged)",
                )

    def _usage_contradicts(self, t: Turn, prompt_tokens: int) -> bool:
        """Whether the prompt size the reply's API reported contradicts the prompt built here: checked only when
        the tokenizer is the model's own (:func:`same_model`), beyond :data:`USAGE_TOLERANCE` (a template's
        generation prompt or a BOS the API counts otherwise)."""
        found = reported_prompt_range(t.node.message.metadata)
        if found is None:
            return False
        model = (t.generation.model if t.generation is not None else None) or t.policy
        if not same_model(self.tok.name, model):
            return False
        low, high = found  # a usage that leaves the cache's share open contradicts only outside both readings
        tokens, share = USAGE_TOLERANCE
        return prompt_tokens < low - max(tokens, share * low) or prompt_tokens > high + max(tokens, share * high)

    def _count_carried_replies(self, turns: list[Turn]) -> None:
        """Put in the books every reply the graph holds only as ``carried`` context: once per distinct reply, and
        not when the same reply (text and calls) is a sampled turn elsewhere in the graph (a history re-sent with
        a different rendering, a branch re-created after an edit: the same turn, already counted)."""
        seen: set[str] | None = None  # the sampled replies' keys, made when the graph carries a reply
        for node in self.g.nodes.values():
            if node.origin is not Origin.CARRIED or not node.is_assistant:
                continue
            if seen is None:
                seen = {_reply_key(t.node.message) for t in turns}
            policy = turn_policy(self.g, node)
            key = _reply_key(node.message)
            if key in seen or (self.opts.policies and policy not in self.opts.policies):
                continue
            seen.add(key)
            if node.message.metadata.get(HISTORY_COPY) is True:
                # a copy of a reply sampled before the group this rollout is one of: a turn where it was sampled,
                # here the history the group started from (counted apart, not a turn found)
                self.result.history_copies += 1
                continue
            # A reader may say why it kept the reply as context only (``why_not_trained``), and that the user
            # interrupted it (``interrupted``): a reply cut short is its own reason, not an unknown context.
            meta = node.message.metadata
            reason = DropReason.INTERRUPTED if meta.get("interrupted") is True else DropReason.CONTEXT_UNKNOWN
            why = meta.get("why_not_trained")
            message = (
                why if isinstance(why, str) else "the log holds this reply, but not the whole context it was sampled in"
            )
            self.result.turns.append(
                TurnOutcome(node.id, self.g.graph_id, policy, "dropped", reason.value, None, message)
            )
            self.result.drops[reason.value] += 1

    def _drop(self, t: Turn, reason: DropReason, message: str | None) -> None:
        self.result.turns.append(
            TurnOutcome(t.node_id, self.g.graph_id, t.policy, "dropped", reason.value, None, message)
        )
        self.result.drops[reason.value] += 1

    def _emit_samples(self, source: str, extras: dict[str, Any]) -> None:
        res = self.result
        has_child = {p for p in self.parent.values() if p is not None}
        trained: dict[str, str] = {}
        reward = extras.get("reward")
        reward = float(reward) if isinstance(reward, int | float) and not isinstance(reward, bool) else None
        graph_id = self.g.graph_id
        metadata = {k: v for k, v in extras.items() if k != "reward"}
        # A graph that lacks part of what its model was sent trains samples that are not exact: each says so.
        graph_flags = {CONTEXT_INCOMPLETE} if missing_context(self.g) else set()
        # What the user supplied in place of what the log lacks is not what the log says the model saw: said too.
        graph_flags |= {SUPPLIED_FLAGS[part] for part in supplied_context(self.g)}
        for nid, leaf in self.tt.items():
            if nid in has_child:
                continue
            chain = [nid]
            while (p := self.parent.get(chain[-1])) is not None:
                chain.append(p)
            chain.reverse()
            todo = [c for c in chain if c not in trained]
            ids = leaf.full
            n = ids.shape[0]
            mask = np.zeros(n, dtype=np.int8)
            # Unknown logprobs hold no memory (a read-only view) unless a turn of the sample has some.
            known = any(self.tt[c].logprobs is not None for c in todo)
            lp = np.full(n, np.nan, dtype=np.float32) if known else unknown_logprobs(n)
            spans: list[tuple[int, int]] = []
            flags: set[str] = set(graph_flags)
            for c in todo:
                ct = self.tt[c]
                a = ct.prompt.shape[0]
                b = a + ct.completion.shape[0] - ct.unsampled_tail
                mask[a:b] = 1
                if ct.logprobs is not None:
                    lp[a:b] = ct.logprobs
                spans.append((a, b))
                flags.update(ct.flags)
            first = self.tt[todo[0]]
            pos = chain.index(todo[0])
            cut = self._cut_reason(first, chain[pos - 1] if pos > 0 else None)
            engine = (leaf.prompt.shape[0] if leaf.prompt_engine else 0) + (
                leaf.completion.shape[0] if leaf.completion_engine else 0
            )
            sid = _h(graph_id, nid, *todo)
            reason = cut.value
            behaviour = sample_behaviour([self.tt[c].turn.generation for c in todo])
            sample = Sample(
                sample_id=sid,
                graph_id=graph_id,
                source=source,
                policy=leaf.turn.policy,
                input_ids=ids,
                loss_mask=mask,
                logprobs=lp,
                turn_ids=list(todo),
                turn_spans=spans,
                turn_group_ids=[self.tt[c].turn.group_id for c in todo],
                group_id=leaf.turn.group_id,
                cut_reason=reason,
                engine_tokens=engine,
                reward=reward,
                flags=sorted(flags),
                metadata=metadata if behaviour is None else {**metadata, "behaviour": behaviour},
            )
            res.samples.append(sample)
            if cut is not CutReason.START:
                res.cuts[reason] += 1
            if flags:  # Counter.update of an empty set still costs its type checks
                res.flags.update(flags)
            for c in todo:
                trained[c] = sid
                ct = self.tt[c]
                res.turns.append(TurnOutcome(c, graph_id, ct.turn.policy, "trained", None, sid))


def _reply_key(message: AnyMessage) -> str:
    """What makes two replies the same turn: their text and their calls (not reasoning a history may drop)."""
    # Parsed arguments: a history re-sent by a client that re-serialises the call's JSON is still the same turn.
    calls = [(c.option_name, json.dumps(c.arguments, sort_keys=True)) for c in getattr(message, "calls", ())]
    return json.dumps([message.text, calls], ensure_ascii=False)


class _Drop(Exception):
    def __init__(self, reason: DropReason, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


def linearize_graph(
    graph: MessageGraph,
    tok: TokenizerBundle,
    *,
    options: LinearizeOptions | None = None,
    source: str = "",
    extras: dict[str, Any] | None = None,
    renderer: Renderer | None = None,
) -> LinearizeResult:
    """Linearize one graph (and, recursively, the sub-agent graphs nested in its tool results)."""
    opts = options or LinearizeOptions()
    r = renderer or Renderer(tok, opts.render_date, opts.content_format)
    with alarm_handler():
        result = _GraphLinearizer(graph, tok, r, opts).run(source, extras or {})
    for sub in subgraphs(graph):
        result.merge(linearize_graph(sub, tok, options=opts, source=source, extras=extras, renderer=r))
    return result
