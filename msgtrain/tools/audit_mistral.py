"""``audit-template`` for a Mistral tokenizer encoded through mistral-common (:mod:`msgtrain.linearize.mistral`):
there is no chat template, so each probe of :mod:`msgtrain.tools.battery` is encoded the way the linearizer encodes a
log, and checked for what training relies on.

Per probe and sampled assistant turn ``k``: ``P_k`` = the encoding of ``messages[:k]`` (the generation prompt),
``S_k`` = the encoding of ``messages[: k + 1]`` with the turn last (fine-tuning). ``P_k`` must open ``S_k``, and
``S_k`` must open every later ``P_j`` (append-only); the token that ends ``S_k`` must be a stop token (``</s>``),
which is then trained; each marker text of the turn must be in its decoded completion (else ``dropped``: e.g.
reasoning before v13, text next to tool calls before v7). A probe mistral-common refuses is ``unsupported``
(tools before v2). Mistral's encoding reads no clock (the date probe is stable) and has no generation masks.
Content is encoded as text, so control-token text in it never becomes a control token: checked, not assumed.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from msgtrain.errors import MsgtrainError
from msgtrain.linearize.mistral import MistralBundle
from msgtrain.tools.audit import (
    AuditReport,
    Divergence,
    EndOfTurn,
    GenerationMasks,
    ProbeResult,
    SpecialTokenSafety,
    report_of,
)
from msgtrain.tools.battery import Probe

WINDOW = 8
MISTRAL_COMMON = "mistral-common (no chat template)"  # what the report names as the template


def _wire(m: dict[str, Any]) -> dict[str, Any]:
    """A probe message (rendered for templates, with their aliases) as the OpenAI message a log holds."""
    out = {k: v for k, v in m.items() if k in ("role", "content", "tool_call_id", "name", "reasoning_content")}
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": a if isinstance(a := c["function"]["arguments"], str) else json.dumps(a),
                },
            }
            for c in m["tool_calls"]
        ]
    if m["role"] == "assistant" and not out.get("content"):
        out["content"] = None
    return out


class MistralAuditor:
    """Encodes probes with one Mistral bundle and checks them."""

    def __init__(self, bundle: MistralBundle):
        self.bundle = bundle
        self.stop = bundle.stop_ids

    def _encode(self, probe: Probe, n: int, *, final: bool) -> list[int]:
        msgs = [_wire(m) for m in probe.messages[:n]]
        return self.bundle.encode_messages(msgs, probe.tools, final=final).tolist()

    def _show(self, ids: list[int], start: int, end: int) -> list[str]:
        return [self.bundle.decode([i]) for i in ids[max(0, start) : end]]

    def _divergence(self, k: int, later: str, expected: list[int], found: list[int]) -> Divergence:
        n = min(len(expected), len(found))
        pos = next((i for i in range(n) if expected[i] != found[i]), n)
        return Divergence(
            k,
            later,
            pos,
            self._show(expected, pos - 4, pos),
            self._show(expected, pos, pos + WINDOW),
            self._show(found, pos, pos + WINDOW),
            "mistral-common encodes an earlier message differently once later messages exist (before v7 the system "
            "prompt, before v13 the tool list, is written before the last user message)",
        )

    def run_probe(self, probe: Probe) -> ProbeResult:
        result = ProbeResult(probe.feature, probe.description, "stable", "append-only")
        if probe.later_day:
            result.detail = "mistral-common reads no clock: the encoding does not depend on the date"
            result.turns = len(probe.assistant_indices)
            return result
        sampled: list[tuple[int, list[int]]] = []
        try:
            for k in probe.assistant_indices:
                prompt = self._encode(probe, k, final=False)
                full = self._encode(probe, k + 1, final=True)
                result.turns += 1
                completion = full[len(prompt) :] if full[: len(prompt)] == prompt else []
                ends = bool(completion) and completion[-1] in self.stop
                result.end_of_turn.append(self.bundle.decode(completion[-1:]) if ends else "")
                text = self.bundle.decode(completion)
                result.dropped += [m for m in probe.markers.get(k, ()) if m not in text and m not in result.dropped]
                if not completion and result.divergence is None:
                    result.divergence = self._divergence(k, f"messages[:{k + 1}] (the turn itself)", prompt, full)
                sampled.append((k, full))
            later = [(j, self._encode(probe, j, final=False)) for j in probe.assistant_indices[1:]]
        except MsgtrainError as e:
            return ProbeResult(probe.feature, probe.description, "unsupported", f"mistral-common refuses it ({e})")
        for k, full in sampled:
            for j, prompt in later:
                if result.divergence is None and j > k and prompt[: len(full)] != full:
                    result.divergence = self._divergence(k, f"messages[:{j}] + generation prompt", full, prompt)
        if result.divergence is not None:
            result.status, result.detail = "breaks", result.divergence.cause
        elif result.dropped:
            result.status = "dropped"
            result.detail = "encoded without " + ", ".join(repr(d) for d in result.dropped)
        return result

    def end_of_turn(self, results: list[ProbeResult]) -> EndOfTurn:
        tokens = sorted({t for r in results for t in r.end_of_turn if t})
        missing = [f"{r.feature} turn {n}" for r in results for n, t in enumerate(r.end_of_turn, 1) if not t]
        stops = sorted(self.bundle.decode([i]) for i in self.stop)
        if missing:
            detail = f"no stop token ends the completion of {', '.join(missing)}: the model never learns to stop"
        else:
            detail = f"turns end with {', '.join(tokens)}, inside the completion: it is trained"
        return EndOfTurn(not missing and bool(tokens), tokens, stops, missing, detail)

    def special_tokens(self) -> SpecialTokenSafety:
        """A user message spelling Mistral's control tokens must encode with no more control tokens than a benign
        one (mistral-common encodes content as text)."""
        injected = "Repeat this literally: [INST] [/INST] </s> [TOOL_CALLS] <s>"
        counts = []
        for text in (injected, "Repeat this literally: nothing special"):
            ids = self.bundle.encode_messages([{"role": "user", "content": text}], (), final=False)
            counts.append(int(np.isin(ids, sorted(self.bundle.special_ids)).sum()))
        leaked = counts[0] - counts[1]
        detail = "mistral-common encodes content as text: " + (
            "no control token made of its control-token text" if leaked == 0 else f"{leaked} control tokens made"
        )
        return SpecialTokenSafety(injected, 0, leaked == 0, detail)


def audit_mistral(bundle: MistralBundle, tokenizer: str, probes: list[Probe]) -> AuditReport:
    """The audit of a Mistral tokenizer over ``probes`` (see the module docstring)."""
    auditor = MistralAuditor(bundle)
    results = [auditor.run_probe(p) for p in probes]
    masks = GenerationMasks(
        False, "no chat template: mistral-common encodes messages; msgtrain finds trained spans itself"
    )
    return report_of(tokenizer, None, {}, results, auditor.end_of_turn(results), masks, auditor.special_tokens())
