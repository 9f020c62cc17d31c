"""Benchmark corpora built at run time: real-content agent conversations of a chosen number of turns, written as
per-call logs (with or without vLLM engine ids) and as native graph logs (``MessageGraph.save``).

Invariants:
- Nothing from ``../shared/real_logs`` is copied into the repository: the content pool is read from there when the
  corpus is built; without it the caller skips (or, for tests, uses :func:`synthetic_pool`).
- Deterministic: the same pool, seed and shape give byte-identical files.
- A conversation is ``turns`` sampled assistant messages in episodes of :data:`EPISODE_TURNS`: a user request, tool
  calls each answered by a tool result, then a final answer. With ``reasoning`` every assistant message carries
  ``reasoning_content``, so a reasoning-stripping template (Qwen3) re-renders history at every new user message.
- Engine ids are what a serving engine would return: the chat template applied to the request (tool-call arguments
  handed to the template as objects, as vLLM does) and tokenized; the completion is the rendering of the turn after
  the generation prompt, up to and including the end-of-turn token.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EPISODE_TURNS = 4  # per user message: 3 tool calls + 1 final answer
MAX_CHARS = {"system": 3000, "user": 1200, "assistant": 700, "reasoning": 900, "tool_output": 2000, "command": 300}
MIN_CHARS = 20

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in the repository and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "the command line"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "str_replace_editor",
            "description": "View or edit a file.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "enum": ["view", "create", "str_replace"]},
                    "path": {"type": "string"},
                },
                "required": ["command", "path"],
            },
        },
    },
]


@dataclass
class ContentPool:
    """Texts by role, sorted and deduplicated (deterministic whatever order files were read in)."""

    system: list[str] = field(default_factory=list)
    user: list[str] = field(default_factory=list)
    assistant: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_output: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)

    def add(self, kind: str, text: Any) -> None:
        if not isinstance(text, str):
            return
        text = text.replace("\r\n", "\n").strip()
        if len(text) < MIN_CHARS:
            return
        getattr(self, kind).append(text[: MAX_CHARS[kind]])

    def finish(self) -> ContentPool:
        for kind in MAX_CHARS:
            setattr(self, kind, sorted(set(getattr(self, kind))))
        if not self.reasoning:
            self.reasoning = list(self.assistant)
        missing = [k for k in MAX_CHARS if not getattr(self, k)]
        if missing:
            raise ValueError(f"content pool has no {', '.join(missing)} texts")
        return self

    def summary(self) -> str:
        return ", ".join(f"{k} {len(getattr(self, k))}" for k in MAX_CHARS)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _iter_jsonl(path: Path) -> Iterator[Any]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    for line in lines:
        try:
            yield json.loads(line)
        except ValueError:
            continue


def _block_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(b.get("text", "") for b in value if isinstance(b, dict) and isinstance(b.get("text"), str))
    return None


def load_pool(real_logs: Path) -> ContentPool:
    """Real texts from SWE-agent trajectories, tau-bench, OpenHands and Claude Code sessions under ``real_logs``."""
    pool = ContentPool()
    for traj in sorted((real_logs / "swe_agent").glob("*.traj")):
        data = _read_json(traj)
        for m in (data or {}).get("history", []):
            role, content = m.get("role"), _block_text(m.get("content"))
            if role == "system":
                pool.add("system", content)
            elif role == "assistant":
                pool.add("assistant", content)
                pool.add("reasoning", m.get("thought"))
                pool.add("command", m.get("action"))
            elif role == "tool" or (role == "user" and m.get("message_type") == "observation"):
                pool.add("tool_output", content)
            elif role == "user":
                pool.add("user", content)
    for task in _read_json(real_logs / "tau_bench" / "gpt-4o-airline.first20.json") or []:
        for m in task.get("traj", []):
            kind = {"system": "system", "user": "user", "assistant": "assistant", "tool": "tool_output"}.get(
                m.get("role")
            )
            if kind:
                pool.add(kind, m.get("content"))
    for events in (_read_json(p) for p in sorted((real_logs / "openhands").glob("*.json"))):
        for ev in events if isinstance(events, list) else []:
            if isinstance(ev, dict) and ev.get("observation"):
                pool.add("tool_output", ev.get("content"))
            elif isinstance(ev, dict) and ev.get("source") == "agent":
                pool.add("assistant", ev.get("message"))
    for session in sorted((real_logs / "claude_code_spotter").glob("*.jsonl")):
        for rec in _iter_jsonl(session):
            msg = rec.get("message") if isinstance(rec, dict) else None
            blocks = msg.get("content") if isinstance(msg, dict) else None
            for b in blocks if isinstance(blocks, list) else []:
                kind = b.get("type") if isinstance(b, dict) else None
                if kind == "text" and isinstance(msg, dict) and msg.get("role") == "assistant":
                    pool.add("assistant", b.get("text"))
                elif kind == "thinking":
                    pool.add("reasoning", b.get("thinking"))
                elif kind == "tool_result":
                    pool.add("tool_output", _block_text(b.get("content")))
                elif kind == "tool_use":
                    pool.add("command", json.dumps(b.get("input"), ensure_ascii=False))
    return pool.finish()


def synthetic_pool(seed: int = 0) -> ContentPool:
    """A pool of seeded pseudo-text, for tests that must run without ../shared."""
    rng = random.Random(seed)
    words = ["the", "file", "main.py", "returns", "status", "ok", "value", "42", "café", "東京", "test", "passes"]
    words += ["fails", "error", "line", "path", "/tmp/x", "<tag>", "{}", "\n"]

    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n)) + "."

    pool = ContentPool()
    for kind, (lo, hi) in {
        "system": (20, 60),
        "user": (5, 20),
        "assistant": (5, 20),
        "reasoning": (5, 20),
        "tool_output": (10, 40),
        "command": (3, 8),
    }.items():
        for _ in range(40):
            pool.add(kind, text(rng.randint(lo, hi)))
    return pool.finish()


# ------------------------------------------------------------------------------------------------ conversations
@dataclass
class Conversation:
    """OpenAI messages and, for each sampled turn, the index of its assistant message."""

    session: str
    messages: list[dict[str, Any]]
    turns: list[int]


def make_conversation(pool: ContentPool, turns: int, seed: int, *, reasoning: bool, session: str) -> Conversation:
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": rng.choice(pool.system)}]
    sampled: list[int] = []
    call = 0
    for t in range(turns):
        step = t % EPISODE_TURNS
        if step == 0:
            # The task number keeps conversations distinct even when the pool repeats a request.
            msgs.append(
                {"role": "user", "content": f"[{session} · request {t // EPISODE_TURNS + 1}]\n" + rng.choice(pool.user)}
            )
        msg: dict[str, Any] = {"role": "assistant", "content": rng.choice(pool.assistant)}
        if reasoning:
            msg["reasoning_content"] = rng.choice(pool.reasoning)
        final = step == EPISODE_TURNS - 1 or t == turns - 1
        if not final:
            call += 1
            call_id = f"call_{session}_{call}"
            tool = TOOLS[call % len(TOOLS)]["function"]["name"]
            args = (
                {"command": rng.choice(pool.command)}
                if tool == "bash"
                else {"command": "view", "path": f"/repo/src/module_{rng.randint(1, 40)}.py"}
            )
            msg["tool_calls"] = [
                {"id": call_id, "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
            ]
        sampled.append(len(msgs))
        msgs.append(msg)
        if not final:
            msgs.append({"role": "tool", "tool_call_id": call_id, "content": rng.choice(pool.tool_output)})
    return Conversation(session, msgs, sampled)


def make_conversations(
    pool: ContentPool, turns: int, count: int, *, reasoning: bool, seed: int = 0
) -> list[Conversation]:
    return [
        make_conversation(
            pool, turns, seed * 1_000_003 + turns * 1009 + i, reasoning=reasoning, session=f"s{turns}-{i}"
        )
        for i in range(count)
    ]


def template_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as a serving engine hands them to a chat template: tool-call arguments parsed into objects."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                args = c["function"]["arguments"]
                with contextlib.suppress(ValueError):
                    args = json.loads(args) if isinstance(args, str) else args
                calls.append({**c, "function": {**c["function"], "arguments": args}})
            m = {**m, "tool_calls": calls}
        out.append(m)
    return out


# ------------------------------------------------------------------------------------------------ engine ids
class EngineIds:
    """Prompt / completion ids as a serving engine returns them, computed with per-segment memoisation.

    HF tokenizers split on added tokens before anything else, so a text's ids are the concatenation of the ids of
    its segments between added tokens; segments repeat across calls of a conversation, so each is encoded once.
    """

    def __init__(self, hf: Any):
        self.hf = hf
        added = sorted(hf.added_tokens_encoder, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(map(re.escape, added)) + ")")
        self._added = dict(hf.added_tokens_encoder)
        self._memo: dict[str, list[int]] = {}
        self.end_ids = {int(hf.added_tokens_encoder[t]) for t in ("<|im_end|>",) if t in hf.added_tokens_encoder}

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for piece in self._split.split(text):
            if not piece:
                continue
            if piece in self._added:
                out.append(self._added[piece])
                continue
            ids = self._memo.get(piece)
            if ids is None:
                ids = self.hf.backend_tokenizer.encode(piece, add_special_tokens=False).ids
                self._memo[piece] = ids
            out.extend(ids)
        return out

    def render(self, messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool) -> str:
        return str(
            self.hf.apply_chat_template(
                template_messages(messages), tools=TOOLS, add_generation_prompt=add_generation_prompt, tokenize=False
            )
        )

    def call_ids(self, context: Sequence[dict[str, Any]], reply: dict[str, Any]) -> tuple[list[int], list[int]]:
        prompt_text = self.render(context, add_generation_prompt=True)
        full_text = self.render([*context, reply], add_generation_prompt=False)
        if not full_text.startswith(prompt_text):
            raise ValueError("the template does not render the reply right after its generation prompt")
        completion = self.encode(full_text[len(prompt_text) :])
        end = next((i for i, t in enumerate(completion) if t in self.end_ids), len(completion) - 1)
        return self.encode(prompt_text), completion[: end + 1]


# ------------------------------------------------------------------------------------------------ writers
def call_records(conv: Conversation, *, model: str, engine: EngineIds | None) -> Iterator[dict[str, Any]]:
    """One ``{request, response}`` record per sampled turn; each request re-sends the whole history."""
    for n, i in enumerate(conv.turns):
        context, reply = conv.messages[:i], conv.messages[i]
        choice: dict[str, Any] = {
            "index": 0,
            "message": reply,
            "finish_reason": "tool_calls" if reply.get("tool_calls") else "stop",
        }
        response: dict[str, Any] = {
            "id": f"chatcmpl-{conv.session}-{n}",
            "object": "chat.completion",
            "model": model,
            "created": 1_760_000_000 + n,
            "choices": [choice],
        }
        if engine is not None:
            prompt_ids, completion_ids = engine.call_ids(context, reply)
            response["prompt_token_ids"] = prompt_ids
            choice["token_ids"] = completion_ids
            pieces = engine.hf.convert_ids_to_tokens(completion_ids)
            choice["logprobs"] = {
                "content": [
                    {"token": p, "logprob": -round(((k * 7919) % 1000) / 997, 4), "top_logprobs": []}
                    for k, p in enumerate(pieces)
                ]
            }
        yield {
            "request": {"model": model, "messages": context, "tools": TOOLS, "temperature": 0.7},
            "response": response,
            "session_id": conv.session,
        }


def write_calls(path: Path, convs: Sequence[Conversation], *, model: str, engine: EngineIds | None = None) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for conv in convs:
            for rec in call_records(conv, model=model, engine=engine):
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")


def conversation_graph(conv: Conversation, *, model: str) -> Any:
    from msgtrain.model.graph import MessageGraph

    g = MessageGraph(tools=TOOLS, graph_id=conv.session, policy=model)
    for m in conv.messages:
        g.append(m)
    return g


def write_native(path: Path, convs: Sequence[Conversation], *, model: str) -> None:
    path.write_text("", encoding="utf-8")
    for conv in convs:
        conversation_graph(conv, model=model).save(path, append=True)


def spread(items: Sequence[Any], parts: int) -> list[list[Any]]:
    """Round-robin ``items`` into at most ``parts`` non-empty lists (files of similar size)."""
    n = max(1, min(parts, len(items)))
    return [list(items[k::n]) for k in range(n)]
