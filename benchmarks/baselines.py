"""The two reference points msgtrain is measured against, computed in this process with no msgtrain linearizer.

- :func:`floor`: the unavoidable work. Parse the logs, apply the chat template once per call (its context and
  reply in one rendering), keep the renderings no other one extends (the samples: a text that is a prefix of a
  later one is contained in it), and tokenize those once with the tokenizer's batch encoder.
- :func:`naive`: what per-call RL stacks do: parse the logs and ``apply_chat_template(..., tokenize=True)`` every
  call's context (quadratic in turns: each call re-tokenizes its whole history).

Both read per-call logs (``{request, response}`` JSONL); :func:`floor` also reads native graph logs, whose turns are
the calls (a turn's context is its root-to-parent path). Rendering hands tool-call arguments to the template as
objects, like the serving engine and msgtrain do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.corpus import template_messages


@dataclass
class Call:
    conversation: str
    messages: list[dict[str, Any]]  # context + reply
    tools: list[Any]


@dataclass
class BaselineResult:
    calls: int
    samples: int
    tokens: int  # tokens produced (floor: of the samples; naive: of every context)


def _files(corpus: Path) -> list[Path]:
    return sorted(p for p in corpus.rglob("*.jsonl") if p.is_file())


def read_calls(path: Path) -> Iterator[Call]:
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            req = rec["request"]
            reply = {**rec["response"]["choices"][0]["message"], "role": "assistant"}
            key = rec.get("session_id") or json.dumps(req["messages"][:2], sort_keys=True)
            yield Call(str(key), [*req["messages"], reply], req.get("tools") or [])


def read_native(path: Path) -> Iterator[Call]:
    """Each sampled assistant node of a native graph log, with its root-to-node path as OpenAI messages."""
    from msgtrain.model.message import parse_message
    from msgtrain.model.openai import to_openai_message

    nodes: dict[str, tuple[str | None, dict[str, Any]]] = {}
    envs: dict[str, list[Any]] = {}
    turns: list[tuple[str, str, str]] = []
    with open(path, "rb") as f:
        for line in f:
            rec = json.loads(line)
            kind = rec.get("type")
            if kind == "env":
                envs[rec["env_id"]] = rec.get("tools") or []
            elif kind == "node":
                msg = to_openai_message(parse_message(rec["message"]), for_template=True)
                nodes[rec["id"]] = (rec["parent"], msg)
                if rec["origin"] == "sampled" and msg["role"] == "assistant":
                    turns.append((rec["graph"], rec["id"], rec["env_id"]))
    for graph, nid, env_id in turns:
        chain: list[dict[str, Any]] = []
        cur: str | None = nid
        while cur is not None:
            parent, msg = nodes[cur]
            chain.append(msg)
            cur = parent
        chain.reverse()
        yield Call(graph, chain, envs.get(env_id, []))


def read_any(path: Path) -> Iterator[Call]:
    with open(path, "rb") as f:
        head = f.readline()
    yield from (read_native(path) if b'"msgtrain.graph"' in head else read_calls(path))


def leaves(texts: Sequence[str]) -> list[str]:
    """Texts that are not a prefix of another one (strings with prefix ``a`` sort right after ``a``)."""
    ordered = sorted(set(texts))
    return [t for t, nxt in zip(ordered, [*ordered[1:], None], strict=True) if nxt is None or not nxt.startswith(t)]


def floor(corpus: Path, hf: Any) -> BaselineResult:
    by_conversation: dict[tuple[str, str], list[str]] = {}
    calls = 0
    for path in _files(corpus):
        for call in read_any(path):
            calls += 1
            text = hf.apply_chat_template(
                template_messages(call.messages), tools=call.tools or None, add_generation_prompt=False, tokenize=False
            )
            by_conversation.setdefault((str(path), call.conversation), []).append(str(text))
    samples = [t for texts in by_conversation.values() for t in leaves(texts)]
    encoded = hf.backend_tokenizer.encode_batch(samples, add_special_tokens=False)
    return BaselineResult(calls, len(samples), sum(len(e.ids) for e in encoded))


def naive(corpus: Path, hf: Any) -> BaselineResult:
    calls = tokens = 0
    for path in _files(corpus):
        for call in read_calls(path):
            calls += 1
            ids = hf.apply_chat_template(
                template_messages(call.messages[:-1]),
                tools=call.tools or None,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
            tokens += len(ids)
    return BaselineResult(calls, calls, tokens)
