"""An independent oracle for token-exactness: seeded random agent runs and what each trained turn must look like.

Nothing here uses msgtrain's linearizer. A run is replayed as the calls an agent made (context, tools, sampled
choices, optional engine ids); the expected prompt ids come from ``apply_chat_template`` (or the logged ids), the
expected completion ids from the template's rendering of the turn after its generation prompt up to the
template's end-of-turn token (a per-template table that this file owns), or the logged ids.
"""

from __future__ import annotations

import copy
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

# How each template ends an assistant turn: (tokens, "first" | "last" occurrence in the rendered completion).
END_OF_TURN = {
    "demo": (["<|im_end|>"], "first"),
    "qwen3": (["<|im_end|>"], "first"),
    "qwen2.5": (["<|im_end|>"], "first"),
    "phi3": (["<|end|>"], "first"),
    "gpt-oss": (["<|end|>", "<|return|>", "<|call|>"], "last"),
}

WORDS = [
    "the",
    "weather",
    "in",
    "Paris",
    "is",
    "mild",
    "today",
    "and",
    "the",
    "forecast",
    "says",
    "light",
    "rain",
    "later",
    "this",
    "evening",
    "so",
    "bring",
    "a",
    "jacket",
    "tokens",
    "trains",
    "samples",
    "graph",
    "branch",
    "policy",
    "search",
    "results",
    "file",
    "main.py",
    "returns",
    "status",
    "ok",
    "value",
    "number",
    "42",
    "naïve",
    "café",
    "résumé",
    "東京",
    "emoji",
    "🎉",
    "code",
    "`x",
    "=",
    "1`",
    "JSON",
    '{"a":',
    "[1,",
    "2]}",
    "path",
    "/tmp/a_b-c.txt",
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "what to look for"}},
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "absolute path"}},
                "required": ["path"],
            },
        },
    },
]


@dataclass
class Call:
    context: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    choices: list[dict[str, Any]]
    engine: bool = False
    prompt_ids: list[int] | None = None
    choice_ids: list[list[int]] = field(default_factory=list)
    choice_logprobs: list[list[float]] = field(default_factory=list)


def _text(rng: random.Random, lo: int = 2, hi: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


class RunGenerator:
    """Random agent runs: tool calls (parallel too), reasoning, edits, compactions, n>1 samples."""

    def __init__(self, seed: int, template: str, *, with_tools: bool = True):
        self.rng = random.Random(seed)
        self.template = template
        self.with_tools = with_tools
        self.ids = 0

    def _call_id(self) -> str:
        self.ids += 1
        return f"call_{self.ids}"

    def assistant(self, *, allow_tools: bool) -> dict[str, Any]:
        rng = self.rng
        msg: dict[str, Any] = {"role": "assistant", "content": _text(rng)}
        if rng.random() < 0.5:
            msg["reasoning_content"] = _text(rng, 3, 15)
        if allow_tools and self.with_tools and rng.random() < 0.45:
            n = 1 if self.template == "gpt-oss" else rng.choice([1, 1, 2])
            calls = []
            for _ in range(n):
                name = rng.choice(["search", "read_file"])
                args = {"query": _text(rng, 1, 4)} if name == "search" else {"path": f"/tmp/{rng.randint(1, 99)}.txt"}
                raw = json.dumps(args, ensure_ascii=False)
                # Both the OpenAI shape and the flat name/arguments some templates (harmony) read.
                calls.append(
                    {
                        "id": self._call_id(),
                        "type": "function",
                        "name": name,
                        "arguments": args,
                        "function": {"name": name, "arguments": raw},
                    }
                )
            msg["tool_calls"] = calls
            if rng.random() < 0.3:
                msg["content"] = ""
        return msg

    def run(self, n_turns: int) -> list[Call]:
        rng = self.rng
        tools = TOOLS if self.with_tools and rng.random() < 0.8 else None
        history: list[dict[str, Any]] = []
        if rng.random() < 0.8:
            history.append({"role": "system", "content": "You are an agent. " + _text(rng)})
        history.append({"role": "user", "content": _text(rng)})
        calls: list[Call] = []
        for _ in range(n_turns):
            n = rng.choice([1, 1, 1, 2])
            choices = [self.assistant(allow_tools=True) for _ in range(n)]
            calls.append(Call(copy.deepcopy(history), tools, choices))
            chosen = choices[0]
            kept = dict(chosen)
            if "reasoning_content" in kept and rng.random() < 0.3:
                kept.pop("reasoning_content")  # a client that drops reasoning from history
            history.append(kept)
            for tc in chosen.get("tool_calls", []):
                history.append(
                    {
                        "role": "tool",
                        "tool_call_id": tc["id"],
                        "name": tc["name"],
                        "content": _text(rng, 1, 8),
                    }
                )
            if not chosen.get("tool_calls"):
                history.append({"role": "user", "content": _text(rng)})
            r = rng.random()
            if r < 0.12 and len(history) > 3:
                # Edit an earlier user message: later calls see the new version.
                users = [i for i, m in enumerate(history) if m["role"] == "user"]
                i = rng.choice(users)
                history[i] = {**history[i], "content": history[i]["content"] + " (edited)"}
            elif r < 0.2 and len(history) > 6:
                # Compaction: everything but the system prompt and the last exchange becomes a summary.
                head = [history[0]] if history[0]["role"] == "system" else []
                tail = history[-1:] if history[-1]["role"] == "user" else [{"role": "user", "content": _text(rng)}]
                history = [*head, {"role": "user", "content": "Summary: " + _text(rng, 5, 10)}, *tail]
        return calls


def render_ids(hf: Any, messages: list[dict[str, Any]], tools: Any, gen: bool) -> list[int]:
    out = hf.apply_chat_template(messages, tools=tools, add_generation_prompt=gen, tokenize=True, return_dict=False)
    return list(out)


def oracle_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a serving engine hands the template: tool-call arguments parsed into dicts."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**tc, "function": {**tc["function"], "arguments": json.loads(tc["function"]["arguments"])}}
                for tc in m["tool_calls"]
            ]
        out.append(m)
    return out


def expected_turn(
    hf: Any, template: str, ctx: list[dict[str, Any]], tools: Any, msg: dict[str, Any]
) -> tuple[list[int], list[int]] | None:
    """(prompt ids, completion ids) per the spec, or None when the template cannot render the turn after its prompt."""
    p = render_ids(hf, oracle_messages(ctx), tools, True)
    full = render_ids(hf, oracle_messages([*ctx, msg]), tools, False)
    if full[: len(p)] != p:
        return None
    rest = full[len(p) :]
    ends, which = END_OF_TURN[template]
    end_ids = {hf.convert_tokens_to_ids(t) for t in ends}
    pos = [i for i, t in enumerate(rest) if t in end_ids]
    if not pos:
        return None
    cut = pos[0] if which == "first" else pos[-1]
    return p, rest[: cut + 1]


def non_canonical(hf: Any, ids: list[int]) -> list[int]:
    """Re-spell one multi-character token as several smaller tokens that decode to the same text."""
    for i, t in enumerate(ids):
        piece = hf.convert_ids_to_tokens(t)
        if isinstance(piece, str) and len(piece) >= 3 and t not in hf.all_special_ids and piece.isalpha():
            parts = [hf.convert_tokens_to_ids(piece[:1]), hf.convert_tokens_to_ids(piece[1:])]
            if all(isinstance(x, int) and x != hf.unk_token_id for x in parts):
                return [*ids[:i], *parts, *ids[i + 1 :]]
    return ids


def to_records(
    hf: Any, template: str, calls: list[Call], rng: random.Random, engine_share: float
) -> list[dict[str, Any]]:
    """Per-call JSONL records; some carry vLLM engine ids (sometimes non-canonical) and logprobs."""
    records = []
    now = int(time.time())
    for k, c in enumerate(calls):
        engine = rng.random() < engine_share
        choices = []
        resp: dict[str, Any] = {"id": f"r{k}", "model": "m", "created": now, "choices": choices}
        prompt = render_ids(hf, oracle_messages(c.context), c.tools, True) if engine else None
        c.engine = engine
        c.prompt_ids = prompt
        for j, msg in enumerate(c.choices):
            wire = dict(msg)
            if "tool_calls" in wire:
                wire["tool_calls"] = [
                    {"id": tc["id"], "type": "function", "function": tc["function"]} for tc in wire["tool_calls"]
                ]
            choice: dict[str, Any] = {"index": j, "message": wire, "finish_reason": "stop"}
            if engine:
                exp = expected_turn(hf, template, c.context, c.tools, msg)
                ids: list[int] = [] if exp is None else exp[1]
                if ids and rng.random() < 0.3:
                    ids = non_canonical(hf, ids)
                lps = [round(-rng.random(), 4) for _ in ids]
                choice["token_ids"] = ids
                choice["logprobs"] = {
                    "content": [{"token": str(t), "logprob": lp} for t, lp in zip(ids, lps, strict=True)]
                }
                c.choice_ids.append(ids)
                c.choice_logprobs.append(lps)
            choices.append(choice)
        if prompt is not None:
            resp["prompt_token_ids"] = prompt
        req: dict[str, Any] = {"model": "m", "messages": [_wire(m) for m in c.context]}
        if c.tools:
            req["tools"] = c.tools
        records.append({"request": req, "response": resp, "session_id": "run"})
    return records


def _wire(m: dict[str, Any]) -> dict[str, Any]:
    out = dict(m)
    if out.get("tool_calls"):
        out["tool_calls"] = [
            {"id": tc["id"], "type": "function", "function": tc["function"]} for tc in out["tool_calls"]
        ]
    return out


@dataclass
class ExpectedTurn:
    prompt: list[int]
    completion: list[int]
    logprobs: list[float] | None

    @property
    def full(self) -> list[int]:
        return self.prompt + self.completion


def expected_turns(hf: Any, template: str, calls: list[Call]) -> list[ExpectedTurn]:
    """Every distinct sampled turn with its expected ids (duplicates — same context, same message — once)."""
    seen: set[str] = set()
    out = []
    for c in calls:
        for j, msg in enumerate(c.choices):
            key = json.dumps([c.context, c.tools, msg], sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            if c.engine:
                assert c.prompt_ids is not None
                if not c.choice_ids[j]:
                    continue
                out.append(ExpectedTurn(c.prompt_ids, c.choice_ids[j], c.choice_logprobs[j]))
            else:
                exp = expected_turn(hf, template, c.context, c.tools, msg)
                if exp is not None:
                    out.append(ExpectedTurn(exp[0], exp[1], None))
    return out


def minimal_sample_count(turns: list[ExpectedTurn]) -> int:
    """Leaves of the extension relation: turns whose full ids no other turn's prompt starts with.

    Identical turns (same prompt and completion ids, e.g. n>1 samples that differ only in what the template does
    not render) can share one row's positions only once: an extended group of m copies still needs m-1 rows.
    """
    groups: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    for t in turns:
        key = (tuple(t.prompt), tuple(t.completion))
        groups[key] = groups.get(key, 0) + 1
    leaves = 0
    for (prompt, completion), m in groups.items():
        f = list(prompt + completion)
        extended = any(len(u.prompt) >= len(f) and u.prompt[: len(f)] == f for u in turns)
        leaves += m - 1 if extended else m
    return leaves
