"""``audit-template``: probe a chat template for the properties token-exact training relies on.

What is checked, per probe conversation of :mod:`msgtrain.tools.battery` and per sampled assistant turn ``k``:

- *Prefix stability (append-only).* ``P_k`` = tokens of ``render(messages[:k], add_generation_prompt=True)``
  (what the policy saw); ``S_k`` = tokens of ``render(messages[: k + 1])`` up to and including the turn's
  end-of-turn token (what it saw plus what it sampled). ``P_k`` must open ``render(messages[: k + 1])``, and
  ``S_k`` must be a prefix of every later render (``messages[:j]`` + generation prompt for each later assistant
  turn ``j``, and the whole conversation). When it is not, one sample cannot hold both turns: the first
  differing tokens are reported, decoded, with a likely cause.
- *End of turn.* The first control token after the turn's content in its own render is its end-of-turn token;
  it lies inside the completion, so it is trained. A turn with none never teaches the model to stop.
- *Generation masks.* Whether the template has ``{% generation %}`` blocks, i.e. whether transformers'
  ``return_assistant_tokens_mask`` works (informational: msgtrain finds trained spans by prefix rendering).
- *Special-token text in content.* A plain encode of the rendered text turns control-token text inside message
  content into control tokens; msgtrain tokenizes content with special tokens split, which must leave none.

A probe whose conversation the template cannot render is ``unsupported`` (not an error); one that renders but
loses a message's text, reasoning or a call is ``dropped``. Renders use a frozen clock, so reports do not depend
on the day they are made; the ``date`` probe re-renders on a later day to find templates that print the date.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from msgtrain.errors import ConfigError
from msgtrain.linearize.completion import (
    NotRecoverable,
    completion_span,
    follower,
    foreign_text,
    message_texts,
    moved_context_span,
    own_material,
    sampled_stop,
)
from msgtrain.linearize.content_format import joined_text, resolve_content_format
from msgtrain.linearize.tokenizer import stop_pattern, template_stop_texts
from msgtrain.tools.battery import MULTI_TURN, WEATHER_TOOL, Probe
from msgtrain.tools.tokenizer import added_token_ids, control_token_ids, stop_token_ids

if TYPE_CHECKING:
    from msgtrain.linearize.tokenizer import TokenizerBundle

# The day probe turns are "sampled" on, and the later day they are re-rendered on (date probe only).
SAMPLED_AT = datetime(2025, 3, 14, 9, 30)
RERENDERED_AT = datetime(2025, 4, 15, 10, 0)
WINDOW = 8  # tokens shown on each side of a divergence
GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")
# A template that mentions any of these handles reasoning; one that then renders none of it drops it.
REASONING_FIELDS = re.compile(r"reasoning_content|\bthinking\b|<think>|analysis")

Status = Literal["stable", "breaks", "dropped", "unsupported"]


@dataclass
class Divergence:
    """Where a sampled turn's tokens stop being a prefix of a later render."""

    turn: int  # message index of the sampled assistant turn
    later: str  # which later render, e.g. "messages[:5] + generation prompt"
    position: int  # token index of the first difference
    context: list[str]  # decoded tokens just before it
    expected: list[str]  # the turn's own render from there (what the policy saw / sampled)
    found: list[str]  # the later render from there
    cause: str


@dataclass
class ProbeResult:
    feature: str
    description: str
    status: Status
    detail: str
    turns: int = 0  # assistant turns checked
    divergence: Divergence | None = None
    dropped: list[str] = field(default_factory=list)  # texts missing from the render of their own turn
    end_of_turn: list[str] = field(default_factory=list)  # per turn: its end-of-turn token ("" if none)
    eos_appended: list[bool] = field(default_factory=list)  # per turn: the template marks no end, EOS is trained
    # Per turn whose history moves context: what convert does with it (recovered by the engine-mode rule, dropped).
    moved_context: list[str] = field(default_factory=list)


@dataclass
class EndOfTurn:
    ok: bool
    tokens: list[str]  # distinct end-of-turn tokens found
    stop_tokens: list[str]  # what generation stops on (eos, generation_config)
    missing: list[str]  # "feature turn n" of turns without one
    detail: str
    eos_appended: list[str] = field(default_factory=list)  # "feature turn n" of turns the template ends with nothing


@dataclass
class GenerationMasks:
    supported: bool
    detail: str
    masked_tokens: int = 0
    includes_end_of_turn: bool | None = None


@dataclass
class SpecialTokenSafety:
    """Content holding control-token text: what a plain encode does, and what msgtrain's split encode does."""

    injected_text: str
    naive_control_tokens: int  # control tokens a plain encode makes out of the content text
    split_safe: bool  # msgtrain's encode (content's added-token text kept plain) made no control token of it
    detail: str
    nonspecial_added: list[str] = field(default_factory=list)  # added tokens that still match inside content


@dataclass
class AuditReport:
    tokenizer: str
    chat_template: str | None
    template_kwargs: dict[str, Any]
    probes: list[ProbeResult]
    prefix_stable: bool
    end_of_turn: EndOfTurn
    generation_masks: GenerationMasks
    special_tokens: SpecialTokenSafety
    failures: list[str]  # properties training relies on that fail; empty means the template is fine
    # Per probe whose render loses part of a message ("feature: 'text', ..."): the linearizer drops turns that lose
    # text or tool calls (template_dropped_content / _tool_calls, unless --train-dropped) and flags lost reasoning.
    drops: list[str] = field(default_factory=list)
    # How the template reads content, as a serving engine detects it (msgtrain.linearize.content_format): the probes
    # hand a "string" template list content as its text parts joined, as convert does; None for mistral-common.
    content_format: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failures

    def probe(self, feature: str) -> ProbeResult:
        return next(p for p in self.probes if p.feature == feature)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, **asdict(self)}


class _Unsupported(Exception):
    """A render raised: the template cannot render this conversation."""


@contextmanager
def frozen_clock(when: datetime) -> Iterator[None]:
    """Make templates' ``strftime_now`` read ``when``.

    transformers builds ``strftime_now`` on ``datetime.now()`` looked up in its chat-template module at call
    time, so swapping that name is enough; if a future transformers moves it, renders use the real clock and
    only the ``date`` probe loses its meaning (it then reports the template's static use of the clock).
    """
    from transformers.utils import chat_template_utils as ctu

    real = getattr(ctu, "datetime", None)
    if real is None:
        yield
        return

    class _Frozen(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> _Frozen:
            return cls(when.year, when.month, when.day, when.hour, when.minute, tzinfo=tz)

    ctu.datetime = _Frozen  # type: ignore[misc]
    try:
        yield
    finally:
        ctu.datetime = real  # type: ignore[misc]


@dataclass
class _Render:
    text: str
    ids: list[int]
    offsets: list[tuple[int, int]]


class TemplateAuditor:
    """Renders probes with one tokenizer + template and checks them.

    Probes are independent; the only state carried between them is ``seen_added``, the added tokens the template
    itself writes, which the special-token check injects into content.
    """

    def __init__(
        self, bundle: TokenizerBundle, template_kwargs: dict[str, Any] | None = None, folder: str | Path | None = None
    ):
        self.bundle = bundle
        self.tok = tok = bundle.hf
        self.kwargs = dict(template_kwargs or {})
        self.control = control_token_ids(tok)
        self.added = added_token_ids(tok)
        self.stops = stop_token_ids(tok, folder)
        self.seen_added: set[int] = set()  # added tokens the template itself writes (collected over renders)
        template = tok.chat_template if isinstance(tok.chat_template, str) else ""
        self.reads_reasoning = bool(REASONING_FIELDS.search(template))
        self.content_format = resolve_content_format("auto", template)
        # What the linearizer ends a completion on, with this audit's template kwargs (the bundle probed without).
        probed = template_stop_texts(
            lambda msgs, tools: self.render(msgs, tools or (), prompt=False).text,
            bundle.added_pattern,
            [str(tok.convert_ids_to_tokens(i)) for i in self.stops],
        )
        self.stop_ids = {*bundle.stop_ids, *self.stops, *(int(tok.convert_tokens_to_ids(t)) for t in probed)}
        self.stop_pattern = stop_pattern(tok.decode([i]) for i in self.stop_ids if i in self.added)

    # ------------------------------------------------------------------ rendering
    def render(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        prompt: bool,
        when: datetime = SAMPLED_AT,
    ) -> _Render:
        try:
            with frozen_clock(when):
                text = self.tok.apply_chat_template(
                    [self._as_template_reads(m) for m in messages],
                    tools=list(tools) or None,
                    add_generation_prompt=prompt,
                    tokenize=False,
                    **self.kwargs,
                )
        except Exception as e:  # jinja raises TemplateError, TypeError, UndefinedError... for what it cannot render
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise _Unsupported(f"{type(e).__name__}: {first}") from e
        ids, offsets = self.encode(text)
        self.seen_added.update(i for i in ids if i in self.added)
        return _Render(text, ids, offsets)

    def _as_template_reads(self, message: dict[str, Any]) -> dict[str, Any]:
        """A probe message as convert hands it to this template: list content joined for a string template."""
        out = dict(message)
        if self.content_format == "string" and isinstance(out.get("content"), list):
            out["content"] = joined_text(out["content"])
        return out

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Plain encode of rendered text (what a chat template's output becomes) with character offsets."""
        enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    def show(self, ids: Sequence[int], start: int, end: int) -> list[str]:
        """Tokens ``ids[start:end]`` as text, each decoded after a few predecessors (SentencePiece spaces and
        split UTF-8 bytes need them)."""
        from msgtrain.tools.sample_view import token_pieces

        ctx = max(0, start - 4)
        return token_pieces(lambda x: str(self.tok.decode(x)), ids[ctx:end])[start - ctx :]

    # ------------------------------------------------------------------ one probe
    def run_probe(self, probe: Probe) -> ProbeResult:
        try:
            if probe.later_day:
                return self._date_probe(probe)
            return self._turn_probe(probe)
        except _Unsupported as e:
            return ProbeResult(probe.feature, probe.description, "unsupported", f"the template cannot render it ({e})")

    def _turn_probe(self, probe: Probe) -> ProbeResult:
        msgs, tools = probe.messages, probe.tools
        result = ProbeResult(probe.feature, probe.description, "stable", "append-only")
        dropped = self._dropped(probe)
        result.dropped = dropped
        sampled: list[tuple[int, list[int], str]] = []  # (k, S_k ids, S_k text)
        for k in probe.assistant_indices:
            seen = self.render(msgs[:k], tools, prompt=True)
            turn = self.render(msgs[: k + 1], tools, prompt=False)
            result.turns += 1
            eot, stop, appended = self._end_of_turn(probe, k, seen, turn)
            result.end_of_turn.append(stop)
            result.eos_appended.append(appended)
            if turn.ids[: len(seen.ids)] != seen.ids:
                # Every later check assumes the turn starts where the prompt ends; report the first such turn
                # but keep collecting the end-of-turn tokens of the others.
                moved = self._moved_context(probe, k, seen, turn)
                if moved is not None:
                    result.moved_context.append(moved)
                if result.divergence is None:
                    name = f"messages[:{k + 1}] (the turn itself)"
                    result.divergence = self._divergence(k, name, seen.ids, turn.ids, seen.text, turn.text, probe)
                    if moved is not None:
                        result.divergence.cause = moved
                    elif not turn.text.startswith(seen.text):
                        result.divergence.cause = "the generation prompt is not how the template opens the turn"
                continue
            cut = eot + 1 if eot is not None else len(turn.ids)  # a stop only a follower shows: the whole render
            sampled.append((k, turn.ids[:cut], turn.text[: turn.offsets[cut - 1][1]] if cut else ""))
        if result.divergence is None:
            result.divergence = self._first_break(probe, sampled)
        if result.divergence is not None:
            result.status = "breaks"
            result.detail = result.divergence.cause
            return result
        if dropped:
            lost_reasoning = [d for d in dropped if d in self._reasoning_texts(probe)]
            if lost_reasoning and self.reads_reasoning:
                # The template knows about reasoning yet never renders it, not even in the turn that produced it:
                # the reasoning a policy sampled can never be a prefix of any render of the conversation.
                result.status = "breaks"
                result.detail = (
                    "the template reads reasoning but never renders it, not even in the turn that "
                    "sampled it (e.g. a dropped analysis channel): sampled reasoning is in no render"
                )
            else:
                result.status = "dropped"
                result.detail = "renders without " + ", ".join(repr(d) for d in dropped)
        return result

    def _moved_context(self, probe: Probe, k: int, seen: _Render, turn: _Render) -> str | None:
        """What ``convert`` does with turn ``k`` when the completion rule's difference holds another message (the
        template's history moves context, as Mistral NeMo's moves the system prompt): recovers it by the
        engine-mode rule, or drops it as ``completion_mismatch`` (msgtrain.linearize.completion). None when the
        rule's difference is the message alone."""
        msgs, tools = probe.messages, probe.tools
        try:
            context = self.render(msgs[:k], tools, prompt=False).text
            start, end = completion_span(
                seen.text, turn.text, lambda: context, self.bundle.control_starts, self.bundle.added_pattern
            )
        except (NotRecoverable, _Unsupported):
            return None
        others = [message_texts(m) for m in msgs[:k]]
        if foreign_text(turn.text[start:end], own_material(msgs[k]), others) is None:
            return None
        lead = "history moves context (an earlier message renders differently once a reply follows)"
        try:
            stand_ins = [
                self.render([*msgs[:k], {"role": "assistant", "content": f"{c}-stand-in"}], tools, prompt=False).text
                for c in "xy"
            ]
            start, end = moved_context_span(
                seen.text, turn.text, stand_ins, context, seen.text[len(context) :], self.bundle.added_pattern
            )
        except (NotRecoverable, _Unsupported) as e:
            return f"{lead}: convert drops such turns (completion_mismatch: {e})"
        if foreign_text(turn.text[start:end], own_material(msgs[k]), others) is not None:
            return f"{lead}: convert drops such turns (completion_mismatch)"
        return f"{lead}: convert trains each reply as the template renders it after the prompt (engine-mode rule)"

    def _first_break(self, probe: Probe, sampled: list[tuple[int, list[int], str]]) -> Divergence | None:
        """The first sampled turn whose tokens are not a prefix of a later render, if any."""
        msgs, tools = probe.messages, probe.tools
        later = [
            (j, f"messages[:{j}] + generation prompt", self.render(msgs[:j], tools, prompt=True))
            for j in probe.assistant_indices[1:]
        ]
        later.append((len(msgs), f"messages[:{len(msgs)}]", self.render(msgs, tools, prompt=False)))
        for k, s_ids, s_text in sampled:
            for j, name, r in later:
                if j <= k:
                    continue  # renders of the messages before turn k do not hold it
                if r.ids[: len(s_ids)] != s_ids:
                    return self._divergence(k, name, s_ids, r.ids, s_text, r.text, probe)
        return None

    @staticmethod
    def _reasoning_texts(probe: Probe) -> set[str]:
        return {str(m["reasoning_content"]) for m in probe.messages if m.get("reasoning_content")}

    def _date_probe(self, probe: Probe) -> ProbeResult:
        """Render the same conversation on two days; any difference is the template printing the date."""
        msgs, tools = probe.messages, probe.tools
        first = self.render(msgs, tools, prompt=False, when=SAMPLED_AT)
        again = self.render(msgs, tools, prompt=False, when=RERENDERED_AT)
        result = ProbeResult(
            probe.feature,
            probe.description,
            "stable",
            "the render does not depend on the date",
            turns=len(probe.assistant_indices),
        )
        if first.ids != again.ids:
            result.status = "breaks"
            result.divergence = self._divergence(
                probe.assistant_indices[0],
                "the same messages a month later",
                first.ids,
                again.ids,
                first.text,
                again.text,
                probe,
            )
            result.divergence.cause = (
                "the template writes the current date (strftime_now): a turn sampled on one "
                "day does not re-render the same on another"
            )
            result.detail = result.divergence.cause
        return result

    def _dropped(self, probe: Probe) -> list[str]:
        """Marker texts missing from the render of the message that carries them (rendered as the last one)."""
        out: list[str] = []
        for i, markers in probe.markers.items():
            text = self.render(probe.messages[: i + 1], probe.tools, prompt=False).text
            out.extend(m for m in markers if m not in text and m not in out)
        return out

    def _end_of_turn(self, probe: Probe, k: int, seen: _Render, turn: _Render) -> tuple[int | None, str, bool]:
        """Turn k's end-of-turn token as the linearizer trains it: (its index in ``turn.ids`` when the turn's own
        render holds it, its text, whether it is EOS the template does not write), or (None, "", False) when the
        completion has none.

        The completion is recovered by the linearizer's rule (:mod:`msgtrain.linearize.completion`), so a template
        that renders the turn differently after its generation prompt (Mistral's system prompt in the last user
        turn, a tool-use template's closing instruction) is judged on what is trained; the end-of-turn token is
        the first stop token (:attr:`TokenizerBundle.stop_ids`) after the turn's content in it, or else the stop
        token the template writes right after the message once a following message exists (GLM's role headers), or
        else EOS (a template that marks no end of the turn: Command R+'s tool calls)."""
        msgs, tools = probe.messages, probe.tools
        try:
            start, end = completion_span(
                seen.text,
                turn.text,
                lambda: self.render(msgs[:k], tools, prompt=False).text,
                self.bundle.control_starts,
                self.bundle.added_pattern,
            )
        except NotRecoverable:
            return None, "", False
        content_end = start
        for marker in probe.markers.get(k, ()):
            pos = turn.text.rfind(marker, start, end)
            if pos >= 0:
                content_end = max(content_end, pos + len(marker))
        for t in range(len(turn.ids)):
            lo, hi = turn.offsets[t]
            if lo >= content_end and hi <= end and turn.ids[t] in self.stop_ids:
                return t, str(self.tok.decode([turn.ids[t]])), False
        core = turn.text[start:end].rstrip()
        try:
            followed = self.render([*msgs[: k + 1], *follower(msgs[k])], tools, prompt=False).text
            stop = sampled_stop(followed, core, self.stop_pattern, self.bundle.added_pattern)
        except _Unsupported:
            stop = None
        if stop is None and core and self.bundle.eos_stop_text:  # a turn the template marks no end of: EOS
            return None, self.bundle.eos_stop_text, True
        return None, (stop.strip() if stop else ""), False

    def _divergence(
        self,
        k: int,
        later: str,
        expected: list[int],
        found: list[int],
        expected_text: str,
        found_text: str,
        probe: Probe,
    ) -> Divergence:
        n = min(len(expected), len(found))
        diff = np.flatnonzero(np.asarray(expected[:n], dtype=np.int64) != np.asarray(found[:n], dtype=np.int64))
        pos = int(diff[0]) if diff.size else n
        return Divergence(
            turn=k,
            later=later,
            position=pos,
            context=self.show(expected, max(0, pos - 4), pos),
            expected=self.show(expected, pos, pos + WINDOW),
            found=self.show(found, pos, pos + WINDOW),
            cause=self._cause(
                probe,
                self.tok.decode(expected[pos : pos + 64]),
                self.tok.decode(found[pos : pos + 64]),
                found_text.startswith(expected_text),
            ),
        )

    @staticmethod
    def _cause(probe: Probe, expected: str, found: str, text_is_prefix: bool) -> str:
        if text_is_prefix:
            return "the text is append-only but tokens merge across the turn boundary (BPE)"
        reasoning = [str(m["reasoning_content"]) for m in probe.messages if m.get("reasoning_content")]
        empty_think = re.match(r"\s*<think>\s*</think>", expected)
        if empty_think and not any(r in expected for r in reasoning):
            return (
                "the empty <think></think> block the template writes into the latest assistant turn is removed "
                "from earlier turns (reasoning removal)"
            )
        if "<think>" in expected or "</think>" in expected or any(r in expected for r in reasoning):
            return "reasoning of an earlier turn is removed once later messages are rendered"
        if "analysis" in expected and "analysis" not in found:
            return "the analysis channel of an earlier turn is dropped once later messages are rendered"
        return "an earlier message renders differently once later messages exist"

    # ------------------------------------------------------------------ template-wide checks
    def end_of_turn(self, results: list[ProbeResult]) -> EndOfTurn:
        tokens = sorted({t for r in results for t in r.end_of_turn if t})
        missing = [f"{r.feature} turn {n}" for r in results for n, t in enumerate(r.end_of_turn, 1) if not t]
        appended = [f"{r.feature} turn {n}" for r in results for n, a in enumerate(r.eos_appended, 1) if a]
        written = sum(1 for r in results for t, a in zip(r.end_of_turn, r.eos_appended, strict=True) if t and not a)
        stops = sorted(self.tok.decode([i]) for i in self.stops)
        if appended and not written:
            missing = missing or appended
            detail = (
                "the template writes no end-of-turn token after any assistant turn: msgtrain trains EOS after each "
                "(what stopped generation), but no history shows it; is this the model's chat template?"
            )
        elif missing:
            detail = (
                "no control token follows the assistant content inside its own turn ("
                + ", ".join(missing)
                + "): the model never learns to stop"
            )
        elif not tokens:
            detail = "no turn could be rendered"
        else:
            detail = f"turns end with {', '.join(tokens)}, inside the completion: it is trained"
            off = [t for t in tokens if t not in stops]
            if off and stops:
                detail += (
                    f"; generation stops on {', '.join(stops)}, so make sure the engine also stops on {', '.join(off)}"
                )
        if appended and written:
            detail += (
                f"; the template ends {', '.join(appended)} with no token: EOS is trained there, as the model "
                "sampled it"
            )
        return EndOfTurn(
            ok=not missing and bool(tokens),
            tokens=tokens,
            stop_tokens=stops,
            missing=missing,
            detail=detail,
            eos_appended=appended,
        )

    def generation_masks(self) -> GenerationMasks:
        template = self.tok.chat_template if isinstance(self.tok.chat_template, str) else ""
        if not GENERATION_TAG.search(template):
            return GenerationMasks(
                False,
                "no {% generation %} blocks: return_assistant_tokens_mask is all zeros; "
                "msgtrain finds trained spans by prefix rendering instead",
            )
        try:
            with frozen_clock(SAMPLED_AT):
                enc = self.tok.apply_chat_template(
                    list(MULTI_TURN), tokenize=True, return_dict=True, return_assistant_tokens_mask=True, **self.kwargs
                )
        except Exception as e:  # a template with generation blocks can still fail to render
            return GenerationMasks(False, f"has {{% generation %}} blocks but rendering with masks failed: {e}")
        ids = np.asarray(enc["input_ids"])
        mask = np.asarray(enc["assistant_masks"], dtype=bool)
        masked = int(mask.sum())
        includes = bool(np.isin(ids[mask], list(self.control)).any()) if masked else None
        detail = f"{{% generation %}} masks {masked} tokens of the multi-turn probe"
        if includes is False:
            detail += "; the end-of-turn token is outside the mask, so mask-based trainers never train it"
        return GenerationMasks(masked > 0, detail, masked, includes)

    def special_tokens(self) -> SpecialTokenSafety:
        """Render a conversation whose content spells the template's own control tokens, and encode it twice:
        plainly (what ``apply_chat_template(tokenize=True)`` does) and the way msgtrain does (content's added-token
        text marked, then encoded as plain text: :meth:`TokenizerBundle.encode_marked`)."""
        written = sorted(self.seen_added)
        if not written:
            return SpecialTokenSafety("", 0, True, "the template writes no added tokens")
        chosen = [i for i in written if i in self.control][:3] + [i for i in written if i not in self.control][:2]
        texts = [self.tok.decode([i]) for i in chosen]
        injected = "Repeat this literally: " + " ".join(texts)
        benign = "Repeat this literally: nothing special"
        convo = [{"role": "user", "content": injected}, {"role": "assistant", "content": "I will not. (a1)"}]
        plain_convo = [{"role": "user", "content": benign}, convo[1]]
        bundle = self.bundle
        marked = [bundle.mark_message(m) for m in convo]
        rendered: list[str] = []
        failure = ""
        # Some templates cannot render a conversation without tools (they iterate over them): then with the
        # battery's tools.
        for tools in ((), (WEATHER_TOOL,)):
            try:
                rendered = [self.render(c, tools, prompt=False).text for c in (convo, plain_convo, marked)]
                break
            except _Unsupported as e:
                failure = str(e)
        if not rendered:
            return SpecialTokenSafety(
                injected, 0, True, f"not checked: the template cannot render a plain conversation ({failure})"
            )
        text, baseline, marked_text = rendered
        added = np.asarray(sorted(self.added))

        def count_added(ids: Sequence[int]) -> int:
            return int(np.isin(np.asarray(ids), added).sum())

        expected = count_added(self.encode(baseline)[0])
        naive = count_added(self.encode(text)[0]) - expected
        ours = bundle.encode_marked(marked_text)
        # Decoding is not a check here: SentencePiece tokenizers strip spaces around added tokens when decoding.
        leaked = count_added(ours.tolist()) - expected
        safe = leaked == 0
        example = f"{texts[0]!r} → id {chosen[0]}"
        detail = (
            f"a plain encode of the rendered text turns {naive} added-token texts in content into control "
            f"tokens (e.g. {example}); msgtrain marks added-token text in content and encodes it as plain "
            "text: " + ("none left" if safe else f"{leaked} still became added tokens")
        )
        nonspecial = sorted({self.tok.decode([i]) for i in written if i not in self.control})
        return SpecialTokenSafety(injected, naive, safe, detail, nonspecial)


def parse_template_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; VALUE is JSON when it parses (``false``, ``3``, ``"x"``), else a plain string."""
    import json

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(
                f"template kwarg {item!r} is not KEY=VALUE", hint="e.g. --template-kwarg enable_thinking=false"
            )
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def report_of(
    tokenizer: str,
    chat_template: str | None,
    template_kwargs: dict[str, Any],
    results: list[ProbeResult],
    eot: EndOfTurn | None,
    masks: GenerationMasks,
    special: SpecialTokenSafety,
    content_format: str | None = None,
) -> AuditReport:
    """The report of probe results and template-wide checks: what fails, what is dropped. A run where nothing
    rendered is a :class:`ConfigError` (every check would be vacuous)."""
    if eot is None or not any(r.status != "unsupported" for r in results):
        results_note = "; ".join(f"{r.feature}: {r.detail}" for r in results)
        raise ConfigError(
            f"the template rendered none of the probes ({results_note})",
            where=str(chat_template or tokenizer),
            hint="check the template with a plain conversation",
        )
    prefix_stable = all(r.status != "breaks" for r in results)
    failures = []
    if not prefix_stable:
        failures.append("prefix_stable: " + ", ".join(r.feature for r in results if r.status == "breaks"))
    if not eot.ok:
        failures.append("end_of_turn: " + eot.detail)
    if not special.split_safe:
        failures.append("special_tokens: " + special.detail)
    drops = [f"{r.feature}: " + ", ".join(repr(d) for d in r.dropped) for r in results if r.dropped]
    return AuditReport(
        drops=drops,
        tokenizer=tokenizer,
        chat_template=chat_template,
        template_kwargs=template_kwargs,
        probes=results,
        prefix_stable=prefix_stable,
        end_of_turn=eot,
        generation_masks=masks,
        special_tokens=special,
        failures=failures,
        content_format=content_format,
    )


# ---------------------------------------------------------------------- terminal rendering
_STATUS_STYLE = {"stable": "green", "breaks": "bold red", "dropped": "yellow", "unsupported": "dim"}


def _tokens_text(tokens: Sequence[str]) -> str:
    return " ".join(repr(t) for t in tokens)


def render_audit(report: AuditReport) -> Any:
    """The report as rich renderables (a probe table, then one line per template-wide property)."""
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    source = f"template from {report.chat_template}" if report.chat_template else "the tokenizer's own template"
    kwargs = f", kwargs {report.template_kwargs}" if report.template_kwargs else ""
    header = Text.from_markup(f"[bold]audit-template[/] {escape(report.tokenizer)} ({escape(source)}{escape(kwargs)})")
    table = Table(show_lines=False, title_justify="left", expand=False)
    table.add_column("feature")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    for r in report.probes:
        detail = Text(r.detail)
        if r.divergence is not None:
            d = r.divergence
            detail.append(f"\n  message[{d.turn}] vs {d.later}, token {d.position}:", style="dim")
            detail.append(f"\n  …{_tokens_text(d.context)}", style="dim")
            detail.append(f"\n  expected {_tokens_text(d.expected)}", style="green")
            detail.append(f"\n  found    {_tokens_text(d.found)}", style="red")
        table.add_row(r.feature, Text(r.status, style=_STATUS_STYLE[r.status]), detail)

    def verdict(ok: bool | None, label: str, detail: str) -> Text:
        mark = {True: ("yes", "green"), False: ("NO", "bold red"), None: ("no", "yellow")}[ok]
        line = Text(f"{label}: ", style="bold")
        line.append(mark[0], style=mark[1])
        line.append(f" — {detail}")
        return line

    breaking = [r.feature for r in report.probes if r.status == "breaks"]
    stable_detail = (
        "every rendered probe is append-only"
        if report.prefix_stable
        else f"breaks on {', '.join(breaking)}; samples are cut where a later render differs"
    )
    unsupported = [r.feature for r in report.probes if r.status == "unsupported"]
    if unsupported:
        stable_detail += f" (cannot render: {', '.join(unsupported)})"
    lines = [
        verdict(report.prefix_stable, "prefix-stable (append-only)", stable_detail),
        verdict(report.end_of_turn.ok, "end-of-turn token trained", report.end_of_turn.detail),
        verdict(
            True if report.generation_masks.supported else None,
            "{% generation %} masks",
            report.generation_masks.detail,
        ),
        verdict(report.special_tokens.split_safe, "special-token text in content safe", report.special_tokens.detail),
        *(
            [
                verdict(
                    True,
                    "content format",
                    f"{report.content_format} (as vLLM detects it; convert --content-format overrides)"
                    + (
                        ": list content is rendered as its text parts joined with a newline, media left out"
                        if report.content_format == "string"
                        else ": list content is rendered as its parts"
                    ),
                )
            ]
            if report.content_format
            else []
        ),
        verdict(
            None if report.drops else True,
            "renders every part of a sampled message",
            "; ".join(report.drops)
            + " — convert drops turns that lose text or tool calls (template_dropped_content / _tool_calls;"
            " --train-dropped trains them, flagged) and flags lost reasoning (template_dropped_reasoning)"
            if report.drops
            else "no probe loses a message's text, reasoning or tool calls",
        ),
    ]
    result = Text("result: ", style="bold")
    result.append("OK" if report.ok else "FAIL", style="bold green" if report.ok else "bold red")
    if report.failures:
        result.append(" (" + "; ".join(f.split(":", 1)[0] for f in report.failures) + ")")
    return Group(header, table, *lines, result)
